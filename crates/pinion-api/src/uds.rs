//! gRPC over unix sockets, both ends.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt as _};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::authority::AuthorityFix;

/// Errors of connecting to a gRPC unix socket.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to {}: {source}", .path.display())]
pub struct ConnectError {
    pub path: PathBuf,
    #[source]
    pub source: tonic::transport::Error,
}

/// HTTP/2 receive windows of a client: large answers (a podresources
/// `List` of a dense node is hundreds of KiB) arrive without waiting for
/// window updates every 64 KiB.
pub const CLIENT_STREAM_WINDOW: u32 = 4 << 20;
pub const CLIENT_CONNECTION_WINDOW: u32 = 8 << 20;

/// A channel to the gRPC server on the unix socket `path` (the URI is a
/// placeholder: servers ignore the authority). Fails within `timeout` when
/// nobody accepts.
pub async fn connect(path: &Path, timeout: Duration) -> Result<Channel, ConnectError> {
    connect_served_by(path, timeout, |_| true).await
}

/// [`connect`], for a server that must run as a uid `allowed` accepts:
/// every connection the channel makes (the first and any reconnection) is
/// checked against the server's credentials (`SO_PEERCRED`) and dropped,
/// failing with `PermissionDenied`, when `allowed` refuses its uid.
pub async fn connect_served_by(
    path: &Path,
    timeout: Duration,
    allowed: impl Fn(u32) -> bool + Clone + Send + Sync + 'static,
) -> Result<Channel, ConnectError> {
    let socket = path.to_path_buf();
    let endpoint = Endpoint::from_static("http://pinion.invalid")
        .connect_timeout(timeout)
        .initial_stream_window_size(CLIENT_STREAM_WINDOW)
        .initial_connection_window_size(CLIENT_CONNECTION_WINDOW);
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            let allowed = allowed.clone();
            async move {
                let stream = UnixStream::connect(&socket).await?;
                let uid = stream.peer_cred()?.uid();
                if !allowed(uid) {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{} is served by uid {uid}, which is not allowed",
                            socket.display()
                        ),
                    ));
                }
                Ok(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| ConnectError {
            path: path.to_path_buf(),
            source,
        })
}

/// Listens on the unix socket `path` with `mode`: creates the parent
/// directory (0750) when missing and replaces a stale socket file (one
/// nobody accepts on). A live socket is an error (another server owns it).
pub fn bind(path: &Path, mode: u32) -> io::Result<UnixListenerStream> {
    use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, PermissionsExt as _};
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_err() {
            std::fs::remove_file(path)?;
        }
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(UnixListenerStream::new(listener))
}

/// The connections of `listener` for a gRPC server: each behind
/// [`AuthorityFix`], so clients that send their socket path as `:authority`
/// (gRPC C-core, grpc-java, grpc-go) are served as kubelet serves them.
/// Every gRPC server on a unix socket takes its connections from here.
pub fn grpc_incoming(
    listener: UnixListenerStream,
) -> impl Stream<Item = io::Result<AuthorityFix<UnixStream>>> {
    listener.map(|accepted| accepted.map(AuthorityFix::new))
}

/// [`bind`], then [`grpc_incoming`].
pub fn bind_grpc(
    path: &Path,
    mode: u32,
) -> io::Result<impl Stream<Item = io::Result<AuthorityFix<UnixStream>>>> {
    bind(path, mode).map(grpc_incoming)
}
