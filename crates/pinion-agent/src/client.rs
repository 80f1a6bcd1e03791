//! A blocking client of the local API (for `pinion run` and `pinion ps`).

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::api::{ErrorBody, ReleaseRequest, RunRequest};
use crate::controller::{Admitted, Released, Snapshot};
use crate::http::{self, HttpError};

/// Errors of local API calls.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the pinion agent at {}: {source} (is `pinion agent` running, and is this its --socket?)", .socket.display())]
    Connect {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("talking to the pinion agent: {0}")]
    Http(#[from] HttpError),
    #[error("the pinion agent refused ({status}): {error}")]
    Refused {
        status: u16,
        error: String,
        reason: Option<String>,
    },
    #[error("unexpected answer from the pinion agent: {0}")]
    Decode(String),
}

/// A client bound to one socket path.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    /// A client of the agent listening on `socket`.
    #[must_use]
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_path_buf(),
        }
    }

    fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<T, ClientError> {
        let body = self.call_raw(method, path, body)?;
        serde_json::from_slice(&body).map_err(|err| ClientError::Decode(err.to_string()))
    }

    fn call_raw(&self, method: &str, path: &str, body: &[u8]) -> Result<Vec<u8>, ClientError> {
        let mut stream =
            UnixStream::connect(&self.socket).map_err(|source| ClientError::Connect {
                socket: self.socket.clone(),
                source,
            })?;
        let (status, body) = http::call(&mut stream, method, path, body)?;
        if status != 200 {
            let parsed: Option<ErrorBody> = serde_json::from_slice(&body).ok();
            return Err(ClientError::Refused {
                status,
                error: parsed.as_ref().map_or_else(
                    || String::from_utf8_lossy(&body).into_owned(),
                    |e| e.error.clone(),
                ),
                reason: parsed.and_then(|e| e.reason),
            });
        }
        Ok(body)
    }

    /// Checks that the agent answers (`GET /healthz`).
    pub fn health(&self) -> Result<(), ClientError> {
        self.call_raw("GET", "/healthz", b"").map(drop)
    }

    /// Admits and places the calling process.
    pub fn run(&self, request: &RunRequest) -> Result<Admitted, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.call("POST", "/v1/run", &body)
    }

    /// Releases a pod (all its containers); `Ok(None)` when it was not admitted.
    pub fn release(&self, pod: &str) -> Result<Option<Released>, ClientError> {
        let request = ReleaseRequest {
            pod: pod.to_string(),
            container: None,
        };
        let body = serde_json::to_vec(&request).map_err(|e| ClientError::Decode(e.to_string()))?;
        match self.call("POST", "/v1/release", &body) {
            Ok(released) => Ok(Some(released)),
            Err(ClientError::Refused { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The agent's current snapshot.
    pub fn ps(&self) -> Result<Snapshot, ClientError> {
        self.call("GET", "/v1/ps", b"")
    }
}
