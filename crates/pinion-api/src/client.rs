//! A blocking client of the agent's local API: hyper's HTTP/1.1 client over
//! the unix socket, driven by a current-thread runtime for each call. Do
//! not call it from inside an async runtime (use `spawn_blocking`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::UnixStream;

use crate::local::{
    Admitted, ErrorBody, NrtAnswer, Plugin, Pools, ReleaseRequest, Released, ResizeRequest,
    RunRequest, SetPool, Snapshot, HEALTH_PATH, NRT_PATH, PLUGINS_PATH, POOLS_PATH, POOLS_SET_PATH,
    PS_PATH, READY_PATH, RELEASE_PATH, RESIZE_PATH, RUN_PATH,
};

/// Default bound on one call (connect, request, answer).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest answer body read (a `ps` of tens of thousands of workloads fits).
pub const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// The one message for an agent that cannot be reached at `socket` (its
/// local API or its podresources socket): what failed and what to check.
/// Every command of the CLI says this, through this function.
pub fn unreachable(socket: &Path, why: &dyn std::fmt::Display) -> String {
    format!(
        "cannot reach the pinion agent at {}: {why} (is `pinion-agent` running, and is this its \
         socket? start it as root with `pinion-agent`, or see `pinion-agent --help` for \
         --state-dir and --socket)",
        socket.display()
    )
}

/// Errors of local API calls; each names the socket or the agent's answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{}", unreachable(socket, source))]
    Connect {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("talking to the pinion agent at {}: {source}", .socket.display())]
    Http {
        socket: PathBuf,
        source: hyper::Error,
    },
    #[error("the pinion agent at {} did not answer within {}s", .socket.display(), .after.as_secs())]
    Timeout { socket: PathBuf, after: Duration },
    #[error("the pinion agent refused ({status}): {error}")]
    Refused {
        status: u16,
        error: String,
        reason: Option<String>,
    },
    #[error("unexpected answer from the pinion agent: {0}")]
    Decode(String),
    #[error("cannot start the client's async runtime: {0}")]
    Runtime(std::io::Error),
}

/// A client bound to one socket path.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
}

impl Client {
    /// A client of the agent listening on `socket`.
    #[must_use]
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_path_buf(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same client with another bound on each call.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The socket this client talks to.
    #[must_use]
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Checks that the agent answers (`GET /healthz`).
    pub fn health(&self) -> Result<(), ClientError> {
        self.call(Method::GET, HEALTH_PATH, None).map(drop)
    }

    /// Checks that the agent is ready (`GET /readyz`).
    pub fn ready(&self) -> Result<(), ClientError> {
        self.call(Method::GET, READY_PATH, None).map(drop)
    }

    /// Admits and places the calling process.
    pub fn run(&self, request: &RunRequest) -> Result<Admitted, ClientError> {
        self.call_json(Method::POST, RUN_PATH, Some(request))
    }

    /// Releases a pod (all its containers); `Ok(None)` when it was not admitted.
    pub fn release(&self, pod: &str) -> Result<Option<Released>, ClientError> {
        let request = ReleaseRequest {
            pod: pod.to_string(),
            container: None,
        };
        match self.call_json(Method::POST, RELEASE_PATH, Some(&request)) {
            Ok(released) => Ok(Some(released)),
            Err(ClientError::Refused { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The agent's current snapshot.
    pub fn ps(&self) -> Result<Snapshot, ClientError> {
        self.call_json::<(), _>(Method::GET, PS_PATH, None)
    }

    /// The resource plugins the agent hosts.
    pub fn plugins(&self) -> Result<Vec<Plugin>, ClientError> {
        self.call_json::<(), _>(Method::GET, PLUGINS_PATH, None)
    }

    /// The NodeResourceTopology object the agent publishes.
    pub fn nrt(&self) -> Result<NrtAnswer, ClientError> {
        self.call_json::<(), _>(Method::GET, NRT_PATH, None)
    }

    /// The CPU plugin's pools.
    pub fn pools(&self) -> Result<Pools, ClientError> {
        self.call_json::<(), _>(Method::GET, POOLS_PATH, None)
    }

    /// Pins pool `pool` to `size` (`N`, `MIN-MAX`) or gives it back to the
    /// closed loop (`auto`); the pools after the change. A pool that does
    /// not exist is refused unless `create` (a pin kept for its first member).
    pub fn set_pool(&self, pool: &str, size: &str, create: bool) -> Result<Pools, ClientError> {
        let request = SetPool {
            pool: pool.to_string(),
            size: size.to_string(),
            create,
        };
        self.call_json(Method::POST, POOLS_SET_PATH, Some(&request))
    }

    /// Resizes a placed container's CPU request in place; its placement
    /// after the resize.
    pub fn resize(&self, request: &ResizeRequest) -> Result<Admitted, ClientError> {
        self.call_json(Method::POST, RESIZE_PATH, Some(request))
    }

    fn call_json<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|err| ClientError::Decode(format!("cannot encode the request: {err}")))?;
        let answer = self.call(method, path, body)?;
        serde_json::from_slice(&answer).map_err(|err| ClientError::Decode(format!("{path}: {err}")))
    }

    /// One request; the body of a 200 answer, else [`ClientError::Refused`].
    fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, ClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(ClientError::Runtime)?;
        let exchange = self.exchange(method, path, body);
        let (status, answer) = runtime
            .block_on(async { tokio::time::timeout(self.timeout, exchange).await })
            .map_err(|_| ClientError::Timeout {
                socket: self.socket.clone(),
                after: self.timeout,
            })??;
        if status == StatusCode::OK {
            return Ok(answer);
        }
        let parsed: Option<ErrorBody> = serde_json::from_slice(&answer).ok();
        Err(ClientError::Refused {
            status: status.as_u16(),
            error: parsed.as_ref().map_or_else(
                || String::from_utf8_lossy(&answer).trim().to_string(),
                |e| e.error.clone(),
            ),
            reason: parsed.and_then(|e| e.reason),
        })
    }

    /// Connects; while the agent's listen backlog is full (`EAGAIN` on a
    /// unix socket) it retries, within the call's timeout.
    async fn connect(&self) -> Result<UnixStream, ClientError> {
        let mut pause = Duration::from_millis(2);
        loop {
            match UnixStream::connect(&self.socket).await {
                Ok(stream) => return Ok(stream),
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(source) => {
                    return Err(ClientError::Connect {
                        socket: self.socket.clone(),
                        source,
                    })
                }
            }
        }
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let http = |source| ClientError::Http {
            socket: self.socket.clone(),
            source,
        };
        let stream = self.connect().await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http)?;
        let driver = tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, "pinion");
        if body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|err| ClientError::Decode(format!("cannot build the request: {err}")))?;
        let answer = sender.send_request(request).await.map_err(http)?;
        let status = answer.status();
        let collected = Limited::new(answer.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|err| ClientError::Decode(format!("reading the answer to {path}: {err}")))?;
        drop(sender);
        driver.abort();
        Ok((status, collected.to_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_agent_is_named_by_its_socket() {
        let err = Client::new(Path::new("/nonexistent/pinion.sock"))
            .ps()
            .expect_err("no agent");
        assert!(matches!(err, ClientError::Connect { .. }), "{err}");
        assert!(
            err.to_string().contains("/nonexistent/pinion.sock"),
            "{err}"
        );
    }

    #[test]
    fn a_silent_agent_times_out_naming_the_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("silent.sock");
        // Accepts (the kernel backlog) but never answers.
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let err = Client::new(&socket)
            .with_timeout(Duration::from_millis(50))
            .health()
            .expect_err("no answer");
        assert!(matches!(err, ClientError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("silent.sock"), "{err}");
    }
}
