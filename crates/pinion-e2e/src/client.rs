//! A CRI v1 client over the runtime's unix socket, with a deadline on every
//! call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::runtime_service_client::RuntimeServiceClient;

/// Errors of the client; each names the socket or the call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the runtime at {path}: {source}")]
    Connect {
        path: PathBuf,
        source: tonic::transport::Error,
    },
    /// The runtime answered with an error; the text is formatted like Go's
    /// gRPC errors (what kubelet shows in pod events), so scripts can match
    /// the runtime's and NRI plugins' messages.
    #[error("{call}: rpc error: code = {code:?} desc = {message}")]
    Status {
        call: &'static str,
        code: tonic::Code,
        message: String,
    },
}

impl ClientError {
    /// Wraps a gRPC status of `call`.
    pub fn status(call: &'static str, status: &tonic::Status) -> Self {
        Self::Status {
            call,
            code: status.code(),
            message: status.message().to_string(),
        }
    }
}

/// Connects to the CRI runtime service at `path`.
pub async fn connect(
    path: &Path,
    timeout: Duration,
) -> Result<RuntimeServiceClient<Channel>, ClientError> {
    let socket = path.to_path_buf();
    // The URI is required by the API but unused: the connector dials the socket.
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(timeout)
        .timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(RuntimeServiceClient::new(channel))
}
