//! The local API: JSON over HTTP/1.1 on a unix socket (mode 0600), the
//! standalone front-end of `pinion run` and `pinion ps`. Protocol:
//! `docs/local-api.md`.

use std::path::Path;

use pinion_core::pod::{Container, Pod};
use pinion_core::Quantity;
use serde::{Deserialize, Serialize};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use crate::controller::{
    AdmitRequest, ControlError, ControllerHandle, Placement, RUN_CONTAINER, RUN_PREFIX,
};
use crate::http::{self, Request, Response};

/// `POST /v1/run`: admit the calling process as a standalone run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The run's id (pod UID and cgroup name); starts with `pinion-run-`.
    pub id: String,
    /// CPUs as a Kubernetes quantity: a whole number ≥ 1 asks for exclusive
    /// CPUs, anything else (or none) runs in the shared pool.
    #[serde(default)]
    pub cpus: Option<String>,
    /// Only `auto` (the NUMA nodes of the CPUs) is supported.
    #[serde(default = "auto")]
    pub memory_nodes: String,
}

fn auto() -> String {
    "auto".to_string()
}

/// `POST /v1/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    pub pod: String,
    #[serde(default)]
    pub container: Option<String>,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// kubelet's admission reason, for refused admissions.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Binds the socket: removes a stale socket file, creates the parent
/// directory (0700) when missing, and sets the socket's mode to 0600.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, PermissionsExt as _};
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() && std::os::unix::net::UnixStream::connect(path).is_err() {
            std::fs::remove_file(path)?;
        }
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves connections until `stop` turns true.
pub async fn serve(
    listener: UnixListener,
    handle: ControllerHandle,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let handle = handle.clone();
                    tokio::spawn(async move { connection(stream, &handle).await });
                }
                Err(err) => tracing::warn!("local api accept: {err}"),
            },
            _ = stop.changed() => break,
        }
    }
}

async fn connection(mut stream: UnixStream, handle: &ControllerHandle) {
    let peer = stream
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|p| u32::try_from(p).ok());
    let response = match http::read_request(&mut stream).await {
        Ok(request) => route(&request, peer, handle).await,
        Err(err) => error(400, err.to_string(), None),
    };
    if let Err(err) = http::write_response(&mut stream, &response).await {
        tracing::debug!("local api write: {err}");
    }
}

/// Answers one request; `peer` is the caller's process id.
pub async fn route(request: &Request, peer: Option<u32>, handle: &ControllerHandle) -> Response {
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/healthz") => Response::text(200, "text/plain", "ok\n".into()),
        ("GET", "/v1/ps") => Response::json(200, &*handle.snapshot()),
        ("POST", "/v1/run") => match parse(&request.body) {
            Ok(run) => run_request(run, peer, handle).await,
            Err(response) => response,
        },
        ("POST", "/v1/release") => match parse::<ReleaseRequest>(&request.body) {
            Ok(release) => match handle.release(release.pod, release.container).await {
                Ok(released) => Response::json(200, &released),
                Err(err) => control_error(&err),
            },
            Err(response) => response,
        },
        (_, "/healthz" | "/v1/ps" | "/v1/run" | "/v1/release") => error(
            405,
            format!("method {} not allowed on {}", request.method, request.path),
            None,
        ),
        _ => error(404, format!("no such endpoint {}", request.path), None),
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    serde_json::from_slice(body)
        .map_err(|err| error(400, format!("invalid request body: {err}"), None))
}

async fn run_request(run: RunRequest, peer: Option<u32>, handle: &ControllerHandle) -> Response {
    let pod = match run_pod(&run) {
        Ok(pod) => pod,
        Err(message) => return error(400, message, None),
    };
    let Some(pid) = peer else {
        return error(
            400,
            "cannot identify the calling process (no peer credentials)".into(),
            None,
        );
    };
    let request = AdmitRequest {
        pod,
        container: RUN_CONTAINER.to_string(),
        numa_affinity: None,
        placement: Placement::Cgroup { pid: Some(pid) },
    };
    match handle.admit(request).await {
        Ok(admitted) => Response::json(200, &admitted),
        Err(err) => control_error(&err),
    }
}

/// The single-container pod of a run: Guaranteed with `cpus` CPUs when a
/// whole number ≥ 1 is asked for, Burstable with that request otherwise,
/// BestEffort without one.
pub fn run_pod(run: &RunRequest) -> Result<Pod, String> {
    if !run.id.starts_with(RUN_PREFIX) {
        return Err(format!(
            "run id {:?} must start with {RUN_PREFIX:?}",
            run.id
        ));
    }
    if run.memory_nodes != "auto" {
        return Err(format!(
            "memory_nodes {:?} is not supported (only \"auto\")",
            run.memory_nodes
        ));
    }
    let mut container = Container {
        name: RUN_CONTAINER.to_string(),
        ..Container::default()
    };
    if let Some(text) = &run.cpus {
        let cpus = Quantity::parse(text).map_err(|err| format!("invalid cpus {text:?}: {err}"))?;
        if cpus.is_zero() {
            return Err(format!("invalid cpus {text:?}: must be greater than zero"));
        }
        container.cpu_request = Some(cpus.clone());
        if cpus.is_integral() {
            let memory = Quantity::from_units(1 << 30);
            container.cpu_limit = Some(cpus);
            container.memory_request = Some(memory.clone());
            container.memory_limit = Some(memory);
        }
    }
    Ok(Pod {
        uid: run.id.clone(),
        init_containers: Vec::new(),
        containers: vec![container],
    })
}

fn error(status: u16, message: String, reason: Option<&str>) -> Response {
    Response::json(
        status,
        &ErrorBody {
            error: message,
            reason: reason.map(str::to_string),
        },
    )
}

/// The one place controller errors become HTTP statuses.
fn control_error(err: &ControlError) -> Response {
    let (status, reason) = match err {
        ControlError::InvalidName(_) => (400, None),
        ControlError::Admission { source, .. } => (409, Some(source.reason())),
        ControlError::NotFound { .. } => (404, None),
        ControlError::Stopped => (503, None),
        ControlError::Checkpoint(_)
        | ControlError::Restore { .. }
        | ControlError::Start(_)
        | ControlError::Cgroup { .. } => (500, None),
    };
    error(status, err.to_string(), reason)
}
