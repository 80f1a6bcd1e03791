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
/// The path appears only once the socket accepts ([`listen`]).
pub fn bind(path: &Path, mode: u32) -> io::Result<UnixListenerStream> {
    use std::os::unix::fs::DirBuilderExt as _;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    listen(path, mode).map(UnixListenerStream::new)
}

/// Listens on the unix socket `path` with `mode`, replacing a stale socket
/// file; a live one is an error (`AddrInUse`, another server owns it).
///
/// `path` exists only once the socket listens, with its mode: `bind(2)`
/// creates the file and `listen(2)` comes after it, and a client that sees
/// the file in between (a plugin watcher, a test waiting for it) is refused
/// (`ECONNREFUSED`). So the socket is bound and listening under a hidden
/// name of the same directory (plugin watchers ignore names starting with
/// `.`) and then linked to `path`, which fails if `path` exists: the
/// watcher sees one creation, of a socket that accepts.
pub fn listen(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let (listener, hidden) = stage(path)?;
    let Some(hidden) = hidden else {
        set_mode(path, mode)?;
        return Ok(listener);
    };
    let published = publish(&hidden, path, mode);
    let _ = std::fs::remove_file(&hidden);
    published.map(|()| listener)
}

/// The first step of [`listen`]: replaces a stale socket file at `path`,
/// then listens on a hidden name beside it (returned). Where that name
/// would be too long for a socket address and `path` is not, on `path`
/// itself (`None`).
fn stage(path: &Path) -> io::Result<(UnixListener, Option<PathBuf>)> {
    use std::os::unix::fs::FileTypeExt as _;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_err() {
            std::fs::remove_file(path)?;
        }
    }
    if path.exists() {
        return Err(in_use(path));
    }
    let hidden = staging_name(path);
    let _ = std::fs::remove_file(&hidden);
    match UnixListener::bind(&hidden) {
        Ok(listener) => Ok((listener, Some(hidden))),
        Err(err)
            if err.kind() == io::ErrorKind::InvalidInput
                && hidden.as_os_str().len() > path.as_os_str().len() =>
        {
            Ok((UnixListener::bind(path)?, None))
        }
        Err(err) => Err(err),
    }
}

/// The second step of [`listen`]: the mode, then the socket under `path`.
fn publish(hidden: &Path, path: &Path, mode: u32) -> io::Result<()> {
    set_mode(hidden, mode)?;
    match std::fs::hard_link(hidden, path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Err(in_use(path)),
        // A file system without hard links: a rename shows as a move.
        Err(_) => std::fs::rename(hidden, path),
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn in_use(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("{} is served by another process", path.display()),
    )
}

/// `.<pid>.<n>` in `path`'s directory: unique per bind, and short (a unix
/// socket's path has at most 107 bytes).
fn staging_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{}.{n}", std::process::id()))
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::net::UnixStream as StdStream;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Regression: `bind(2)` created the socket's file before `listen(2)`,
    /// so a plugin watcher or a test that saw the file could be refused
    /// (`ECONNREFUSED`: the flakes of `qrm_simulator_parity` and
    /// `plugin_serve` under load). The socket now listens, with its mode,
    /// under a hidden name before its path exists.
    #[test]
    fn regression_the_socket_path_appears_only_once_it_listens_with_its_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin.sock");
        let rt = runtime();
        let _guard = rt.enter();

        let (listener, hidden) = stage(&path).expect("staged");
        let hidden = hidden.expect("a hidden name");
        assert!(!path.exists(), "the path exists before the socket listens");
        assert!(hidden
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.')));
        StdStream::connect(&hidden).expect("the staged socket already listens");

        publish(&hidden, &path, 0o600).expect("published");
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        StdStream::connect(&path).expect("the published path accepts");
        std::fs::remove_file(&hidden).expect("as listen removes it");
        drop(listener);

        // The whole: one name in the directory, accepting.
        let other = dir.path().join("other.sock");
        let _listener = listen(&other, 0o640).expect("listens");
        StdStream::connect(&other).expect("accepts");
        let mode = std::fs::metadata(&other)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        assert!(
            names(dir.path()).iter().all(|n| !n.starts_with('.')),
            "a staging name was left: {:?}",
            names(dir.path())
        );
    }

    #[test]
    fn a_live_socket_is_kept_and_a_stale_one_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plugin.sock");
        let rt = runtime();
        let _guard = rt.enter();

        let live = listen(&path, 0o600).expect("listens");
        let err = listen(&path, 0o600).expect_err("another server owns it");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
        StdStream::connect(&path).expect("the first server still accepts");
        assert_eq!(names(dir.path()), ["plugin.sock"]);

        // Gone without removing its file: stale, replaced.
        drop(live);
        assert!(StdStream::connect(&path).is_err());
        let _again = listen(&path, 0o600).expect("replaces the stale file");
        StdStream::connect(&path).expect("accepts");
        assert_eq!(names(dir.path()), ["plugin.sock"]);
    }

    /// A client that connects as soon as it sees the file is never refused.
    #[test]
    fn a_client_seeing_the_path_is_never_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = runtime();
        let _guard = rt.enter();
        for round in 0..50 {
            let path = dir.path().join(format!("s{round}.sock"));
            let watcher = std::thread::spawn({
                let path = path.clone();
                move || {
                    while !path.exists() {
                        std::hint::spin_loop();
                    }
                    StdStream::connect(&path).map(drop)
                }
            });
            let _listener = listen(&path, 0o600).expect("listens");
            watcher
                .join()
                .expect("watcher")
                .unwrap_or_else(|err| panic!("round {round}: refused: {err}"));
        }
    }
}
