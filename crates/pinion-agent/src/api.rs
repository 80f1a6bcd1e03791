//! The local API: JSON over HTTP/1.1 on a unix socket (mode 0600), the
//! standalone front-end of `pinion run` and `pinion ps`. Protocol:
//! `docs/local-api.md`; wire types: `pinion_api::local`.
//!
//! This is the one place where the controller's types become wire types
//! ([`admitted`], [`released`], [`snapshot`]) and controller errors become
//! HTTP statuses ([`control_error`]), so the controller can change without
//! changing the wire.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use pinion_api::local as wire;
use pinion_core::k8s_names;
use pinion_core::pod::{Container, Pod};
use pinion_core::Quantity;
use pinion_host::cgroup::CgroupName;
use pinion_plugins::cpu::{CpuPluginHandle, SetPoolError};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

pub use pinion_api::local::{ErrorBody, ReleaseRequest, RunRequest};

use crate::controller::{
    self, AdmitRequest, ControlError, ControllerHandle, Frontend, RUN_CONTAINER,
};
use crate::nrt::NrtSource;
use crate::server::{self, Answer, Limits};

/// Binds the socket: creates the parent directory (0700) when missing,
/// replaces a stale socket file and listens with mode 0600; the path
/// appears only once the socket accepts (`pinion_api::uds::listen`).
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::DirBuilderExt as _;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    pinion_api::uds::listen(path, 0o600)
}

/// Serves connections until `stop` turns true, with [`Limits::LOCAL_API`].
pub async fn serve(listener: UnixListener, handle: ControllerHandle, stop: watch::Receiver<bool>) {
    serve_with(listener, handle, stop, Limits::LOCAL_API).await;
}

/// [`serve`], also answering `GET /v1/nrt` from `nrt`.
pub async fn serve_with_nrt(
    listener: UnixListener,
    handle: ControllerHandle,
    stop: watch::Receiver<bool>,
    nrt: Arc<NrtSource>,
) {
    serve_inner(listener, handle, stop, Limits::LOCAL_API, Some(nrt)).await;
}

/// Serves connections until `stop` turns true, with `limits`.
pub async fn serve_with(
    listener: UnixListener,
    handle: ControllerHandle,
    stop: watch::Receiver<bool>,
    limits: Limits,
) {
    serve_inner(listener, handle, stop, limits, None).await;
}

async fn serve_inner(
    listener: UnixListener,
    handle: ControllerHandle,
    stop: watch::Receiver<bool>,
    limits: Limits,
    nrt: Option<Arc<NrtSource>>,
) {
    server::accept_loop(
        "local api",
        listener,
        limits.max_connections,
        stop,
        move |stream: UnixStream, slot| {
            let peer = stream
                .peer_cred()
                .ok()
                .and_then(|c| c.pid())
                .and_then(|p| u32::try_from(p).ok());
            let handle = handle.clone();
            let nrt = nrt.clone();
            server::serve_http1(stream, limits, slot, move |request| {
                route(request, peer, handle.clone(), limits, nrt.clone())
            })
        },
    )
    .await;
}

/// Answers one request; `peer` is the caller's process id.
async fn route(
    request: Request<Incoming>,
    peer: Option<u32>,
    handle: ControllerHandle,
    limits: Limits,
    nrt: Option<Arc<NrtSource>>,
) -> Answer {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    match (path.as_str(), &method) {
        (wire::HEALTH_PATH | wire::READY_PATH, &Method::GET | &Method::HEAD) => {
            server::text(StatusCode::OK, "ok\n".into())
        }
        (wire::PS_PATH, &Method::GET | &Method::HEAD) => {
            server::json(StatusCode::OK, &snapshot(&handle.snapshot()))
        }
        (wire::PLUGINS_PATH, &Method::GET | &Method::HEAD) => {
            server::json(StatusCode::OK, &handle.plugins())
        }
        (wire::NRT_PATH, &Method::GET | &Method::HEAD) => match nrt {
            // Built off the runtime's thread (the fit attributes ask the
            // allocator many times).
            Some(source) => match tokio::task::spawn_blocking(move || source.answer()).await {
                Ok(answer) => server::json(StatusCode::OK, &answer),
                Err(err) => error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("node resource topology: {err}"),
                    None,
                ),
            },
            None => error(
                StatusCode::NOT_FOUND,
                "this agent serves no node resource topology".to_string(),
                None,
            ),
        },
        (wire::RUN_PATH, &Method::POST) => match parse::<RunRequest>(request, &limits).await {
            Ok(run) => run_request(&run, peer, &handle).await,
            Err(answer) => answer,
        },
        (wire::RELEASE_PATH, &Method::POST) => {
            match parse::<ReleaseRequest>(request, &limits).await {
                Ok(release) => release_request(release, &handle).await,
                Err(answer) => answer,
            }
        }
        (wire::POOLS_PATH, &Method::GET | &Method::HEAD) => match handle.cpu_pools() {
            Some(pools) => server::json(StatusCode::OK, &pools.view()),
            None => no_pools(),
        },
        (wire::POOLS_SET_PATH, &Method::POST) => {
            match parse::<wire::SetPool>(request, &limits).await {
                Ok(set) => match handle.cpu_pools() {
                    Some(pools) => set_pool(&pools, &set, &handle).await,
                    None => no_pools(),
                },
                Err(answer) => answer,
            }
        }
        (wire::RESIZE_PATH, &Method::POST) => {
            match parse::<wire::ResizeRequest>(request, &limits).await {
                Ok(resize) => resize_request(resize, &handle).await,
                Err(answer) => answer,
            }
        }
        (
            wire::HEALTH_PATH
            | wire::READY_PATH
            | wire::PS_PATH
            | wire::PLUGINS_PATH
            | wire::NRT_PATH
            | wire::POOLS_PATH,
            _,
        ) => not_allowed(&method, &path, "GET, HEAD"),
        (wire::RUN_PATH | wire::RELEASE_PATH | wire::POOLS_SET_PATH | wire::RESIZE_PATH, _) => {
            not_allowed(&method, &path, "POST")
        }
        _ => error(
            StatusCode::NOT_FOUND,
            format!("no such endpoint {path}"),
            None,
        ),
    }
}

/// `POST /v1/pools/set`: the pin is durable before the answer. A pin that
/// cannot be made durable is given back, so the error's "nothing changed"
/// holds (regression: the pin stayed in force, and a later flush wrote it).
async fn set_pool(
    pools: &CpuPluginHandle,
    set: &wire::SetPool,
    handle: &ControllerHandle,
) -> Answer {
    let pinned = match pools.set(&set.pool, &set.size, set.create) {
        Ok(pinned) => pinned,
        Err(err) => return error(set_pool_status(&err), err.to_string(), None),
    };
    match handle.flush_plugin_state().await {
        Ok(()) => server::json(StatusCode::OK, &pools.view()),
        Err(err) => {
            if let Err(undo) = pools.give_back(&pinned) {
                tracing::error!(pool = %set.pool, "giving back a pin that could not be made durable: {undo}");
            }
            control_error(&err)
        }
    }
}

/// A refused `/v1/pools/set`: the request's fault, or the plugin's (its
/// state could not be saved).
fn set_pool_status(err: &SetPoolError) -> StatusCode {
    match err {
        SetPoolError::Plugin(_) => StatusCode::INTERNAL_SERVER_ERROR,
        SetPoolError::Size { .. }
        | SetPoolError::Name(_)
        | SetPoolError::TooManyPins { .. }
        | SetPoolError::DoesNotFit { .. }
        | SetPoolError::Unknown { .. } => StatusCode::BAD_REQUEST,
    }
}

/// `/v1/pools` without the built-in CPU plugin.
fn no_pools() -> Answer {
    error(
        StatusCode::NOT_FOUND,
        "no cpu pools: the agent does not run Pinion's CPU plugin (qosResourceManager.builtinPlugins: [cpu])".into(),
        None,
    )
}

fn not_allowed(method: &Method, path: &str, allowed: &'static str) -> Answer {
    server::allow(
        error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {method} not allowed on {path} (allowed: {allowed})"),
            None,
        ),
        allowed,
    )
}

/// The JSON body of `request`, or the error answer (413, 408, 400 naming
/// the field or position at fault).
async fn parse<T: serde::de::DeserializeOwned>(
    request: Request<Incoming>,
    limits: &Limits,
) -> Result<T, Answer> {
    let body = server::read_body(request, limits)
        .await
        .map_err(|err| error(err.status(), err.to_string(), None))?;
    json_object(&body).map_err(|message| error(StatusCode::BAD_REQUEST, message, None))
}

/// `body` as `T`, which must be written as a JSON object: serde would also
/// take an array of the fields in order (`["pinion-run-1"]` as a run).
fn json_object<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let first = body
        .iter()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'));
    let found = match first {
        Some(b'{') => {
            return serde_json::from_slice(body)
                .map_err(|err| format!("invalid request body: {err}"))
        }
        None => "nothing",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'-' | b'0'..=b'9') => "a number",
        Some(_) => "something that is not JSON",
    };
    Err(format!(
        "invalid request body: expected a JSON object, found {found}"
    ))
}

async fn run_request(run: &RunRequest, peer: Option<u32>, handle: &ControllerHandle) -> Answer {
    let pod = match run_pod(run) {
        Ok(pod) => pod,
        Err(message) => return error(StatusCode::BAD_REQUEST, message, None),
    };
    let Some(pid) = peer else {
        return error(
            StatusCode::BAD_REQUEST,
            "cannot identify the calling process (no peer credentials)".into(),
            None,
        );
    };
    if pid == 0 {
        // The kernel's answer for a peer outside the agent's PID namespace;
        // written to `cgroup.procs`, 0 would move the agent itself.
        return error(
            StatusCode::BAD_REQUEST,
            "cannot identify the calling process: it is not in the agent's PID namespace \
             (peer pid 0); run `pinion run` where the agent runs, or the agent with the \
             host's PID namespace (hostPID: true)"
                .into(),
            None,
        );
    }
    let frontend = match Frontend::standalone(&pod.uid, Some(pid)) {
        Ok(frontend) => frontend,
        Err(err) => return control_error(&err),
    };
    let request = AdmitRequest {
        pod,
        container: RUN_CONTAINER.to_string(),
        frontend,
        cpu_owner: pinion_core::engine::CpuOwner::Policy,
    };
    match handle.admit(request).await {
        Ok(done) => server::json(StatusCode::OK, &admitted(&done)),
        Err(err) => control_error(&err),
    }
}

/// `POST /v1/release`: a pod id that is no valid run id is refused as
/// `POST /v1/run` refuses it (`400 invalid cgroup name`), not looked up.
async fn release_request(release: ReleaseRequest, handle: &ControllerHandle) -> Answer {
    if let Some(answer) = invalid_pod_id(&release.pod) {
        return answer;
    }
    match handle.release_run(release.pod, release.container).await {
        Ok(done) => server::json(StatusCode::OK, &released(&done)),
        Err(err) => control_error(&err),
    }
}

/// The `400` of a pod id `POST /v1/run` would refuse: every admitted pod's
/// UID is a valid cgroup name (a run's id is its cgroup's name, a runtime
/// pod's UID a UUID), so another id can match nothing.
fn invalid_pod_id(pod: &str) -> Option<Answer> {
    CgroupName::new(pod)
        .err()
        .map(|err| control_error(&ControlError::InvalidName(err)))
}

/// `POST /v1/resize`: the controller resizes in place (the executor
/// rewrites a run's cgroup); the answer is the container's new placement.
async fn resize_request(resize: wire::ResizeRequest, handle: &ControllerHandle) -> Answer {
    if let Some(answer) = invalid_pod_id(&resize.pod) {
        return answer;
    }
    let cpus = match Quantity::parse(&resize.cpus) {
        Ok(cpus) if !cpus.is_zero() => cpus,
        Ok(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid cpus {:?}: must be greater than zero", resize.cpus),
                None,
            )
        }
        Err(err) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid cpus {:?}: {err}", resize.cpus),
                None,
            )
        }
    };
    let container = resize
        .container
        .unwrap_or_else(|| RUN_CONTAINER.to_string());
    match handle.resize_run((resize.pod, container), cpus).await {
        Ok(done) => server::json(StatusCode::OK, &admitted(&done)),
        Err(err) => control_error(&err),
    }
}

/// The single-container pod of a run: Guaranteed with `cpus` CPUs when a
/// whole number ≥ 1 is asked for, Burstable with that request otherwise,
/// BestEffort without one; with the run's other requests, name, namespace
/// (default `pinion`), labels and annotations. Any valid cgroup name is a
/// valid id (`pinion run` uses `pinion-run-<pid>-<time>`): the agent tells
/// runs by their front-end, not their name. The name (default: the id),
/// namespace, labels and annotations must be what Kubernetes' API server
/// accepts ([`k8s_names::check_pod_meta`]): resource plugins and
/// podresources consumers see them as a pod's.
pub fn run_pod(run: &RunRequest) -> Result<Pod, String> {
    // The id first: a bad one is the same `invalid cgroup name` whatever
    // else the request says (and as `/v1/release` and `/v1/resize` say).
    CgroupName::new(&run.id).map_err(|err| err.to_string())?;
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
    for (name, text) in &run.requests {
        if name == "cpu" || name == "memory" {
            return Err(format!(
                "request {name:?}: give cpus with --cpus (memory is set for exclusive runs)"
            ));
        }
        let quantity =
            Quantity::parse(text).map_err(|err| format!("invalid request {name}={text}: {err}"))?;
        container.extended_requests.insert(name.clone(), quantity);
    }
    let name = run.pod_name.clone().unwrap_or_else(|| run.id.clone());
    let namespace = run
        .namespace
        .clone()
        .unwrap_or_else(|| wire::RUN_NAMESPACE.to_string());
    if let Err(err) = k8s_names::check_pod_meta(&name, &namespace, &run.labels, &run.annotations) {
        return Err(match (&err, &run.pod_name) {
            (k8s_names::MetaError::PodName { .. }, None) => {
                format!("{err} (the pod name is the id when no pod_name is given: give one)")
            }
            _ => err.to_string(),
        });
    }
    Ok(Pod {
        uid: run.id.clone(),
        name,
        namespace,
        labels: run.labels.clone(),
        annotations: run.annotations.clone(),
        init_containers: Vec::new(),
        containers: vec![container],
    })
}

/// A placement's resource settings on the wire.
fn resources(r: &pinion_core::placement::ResourceSettings) -> wire::Resources {
    wire::Resources {
        cpu_quota: r.cpu_quota,
        cpu_period: r.cpu_period,
        cpu_shares: r.cpu_shares,
        memory_limit: r.memory_limit,
        memory_swap_limit: r.memory_swap_limit,
        oom_score_adj: r.oom_score_adj,
    }
}

/// Plugin allocations on the wire.
fn plugins(
    allocations: &pinion_core::plugin_allocation::PluginAllocations,
) -> BTreeMap<String, wire::PluginAllocation> {
    allocations
        .iter()
        .map(|(resource, a)| {
            let allocation = wire::PluginAllocation {
                oci_property_name: a.oci_property_name.clone(),
                allocation_result: a.allocation_result.clone(),
                allocated_quantity: a.allocated_quantity,
                envs: a.envs.clone(),
                annotations: a.annotations.clone(),
            };
            (resource.clone(), allocation)
        })
        .collect()
}

/// The wire form of an admission.
#[must_use]
pub fn admitted(done: &controller::Admitted) -> wire::Admitted {
    let placement = &done.placement;
    wire::Admitted {
        pod: done.pod.clone(),
        container: done.container.clone(),
        cpus: placement.cpus.to_string(),
        exclusive: placement.is_exclusive(),
        mems: placement.mems.to_string(),
        cgroup: done.cgroup.clone(),
        pool: placement.pool.to_string(),
        env: placement.env.clone(),
        annotations: placement.annotations.clone(),
        resources: resources(&placement.resources),
    }
}

/// The wire form of a release.
#[must_use]
pub fn released(done: &controller::Released) -> wire::Released {
    wire::Released {
        containers: done.containers.clone(),
        cpus: done.cpus.to_string(),
    }
}

/// The wire form of the controller's snapshot (`pinion ps`).
#[must_use]
pub fn snapshot(snapshot: &controller::Snapshot) -> wire::Snapshot {
    wire::Snapshot {
        policy: snapshot.policy.clone(),
        all_cpus: snapshot.all_cpus.to_string(),
        reserved: snapshot.reserved.to_string(),
        shared_pool: snapshot.shared_pool.to_string(),
        workloads: snapshot
            .workloads
            .iter()
            .map(|w| wire::Workload {
                pod: w.pod.clone(),
                container: w.container.clone(),
                exclusive: w.placement.is_exclusive(),
                cpus: w.placement.cpus.to_string(),
                mems: w.placement.mems.to_string(),
                cgroup: w.cgroup.clone(),
                pid: w.pid,
                frontend: w.frontend.clone(),
                pool: w.placement.pool.to_string(),
                applied: w.applied,
                container_id: w.container_id.clone(),
                plugins: plugins(&w.plugins),
                apply_error: w.apply_error.clone(),
                partition: w.partition.clone(),
                foreign_write: w.foreign_write.clone(),
            })
            .collect(),
        assignments: snapshot
            .assignments
            .iter()
            .map(|(pod, containers)| {
                let containers = containers
                    .iter()
                    .map(|(name, cpus)| (name.clone(), cpus.to_string()))
                    .collect();
                (pod.clone(), containers)
            })
            .collect(),
        pending_plugin_removals: snapshot.pending_plugin_removals.clone(),
        recovery: snapshot.recovery.clone(),
        hotplug: snapshot.hotplug.clone(),
        isolated_cpus: snapshot.isolated_cpus.as_ref().map(ToString::to_string),
        housekeeping: snapshot.housekeeping.clone(),
    }
}

fn error(status: StatusCode, message: String, reason: Option<&str>) -> Answer {
    server::json(
        status,
        &ErrorBody {
            error: message,
            reason: reason.map(str::to_string),
        },
    )
}

/// The `reason` of a `503` refusing exclusive CPUs while the agent runs
/// degraded (its state was rebuilt from the node; until it restarts on the
/// rebuilt checkpoint): Pinion's own, kubelet has no such state.
pub const DEGRADED_REASON: &str = "AgentDegraded";

/// The one place controller errors become HTTP statuses.
fn control_error(err: &ControlError) -> Answer {
    let (status, reason) = match err {
        ControlError::InvalidName(_) => (StatusCode::BAD_REQUEST, None),
        ControlError::Admission { source, .. } => (StatusCode::CONFLICT, Some(source.reason())),
        ControlError::Resize { source, .. } => (StatusCode::CONFLICT, Some(source.reason())),
        ControlError::Conflict { .. }
        | ControlError::NotARun { .. }
        | ControlError::Plugin { .. }
        | ControlError::ResizeUnknownSpec { .. } => (StatusCode::CONFLICT, None),
        ControlError::NotFound { .. } => (StatusCode::NOT_FOUND, None),
        ControlError::Degraded { .. } => (StatusCode::SERVICE_UNAVAILABLE, Some(DEGRADED_REASON)),
        ControlError::Stopped
        | ControlError::Hints { .. }
        | ControlError::RemovalPending { .. } => (StatusCode::SERVICE_UNAVAILABLE, None),
        ControlError::Checkpoint(_)
        | ControlError::Journal(_)
        | ControlError::NotDurable { .. }
        | ControlError::Unreadable { .. }
        | ControlError::Restore { .. }
        | ControlError::MigrationWouldMove { .. }
        | ControlError::Start(_)
        | ControlError::OpenState { .. }
        | ControlError::Cgroup { .. } => (StatusCode::INTERNAL_SERVER_ERROR, None),
    };
    error(status, err.to_string(), reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 27, item 7b): a JSON array was taken as the fields
    /// in order, so `["pinion-run-1"]` admitted a run and `[]` answered
    /// serde's "invalid length 0, expected struct RunRequest".
    #[test]
    fn regression_a_json_array_body_is_refused_as_not_an_object() {
        for (body, found) in [
            ("[]", "an array"),
            (" [\"pinion-run-1\"]", "an array"),
            ("\"pinion-run-1\"", "a string"),
            ("42", "a number"),
            ("null", "null"),
            ("", "nothing"),
        ] {
            let err = json_object::<RunRequest>(body.as_bytes()).expect_err(body);
            assert_eq!(
                err,
                format!("invalid request body: expected a JSON object, found {found}"),
                "{body}"
            );
        }
        let run: RunRequest =
            json_object(b"\n {\"id\": \"pinion-run-1\"}").expect("an object is parsed");
        assert_eq!(run, RunRequest::new("pinion-run-1"));
    }

    /// Found from outside (forty-fourth session): a caller outside the
    /// agent's PID namespace has peer pid 0, which was taken as its pid;
    /// written to `cgroup.procs`, 0 moves the writer — the agent — into the
    /// run's cgroup. It is refused, naming the cause, and nothing is placed.
    #[tokio::test]
    async fn regression_a_caller_with_peer_pid_0_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = crate::testing::SyntheticNode {
            host: pinion_host::cgroup::fake::FakeCgroups::default(),
            ..crate::testing::SyntheticNode::new(crate::testing::machine(1, 4, 1))
        };
        let (handle, _task) =
            controller::spawn(node.start(dir.path()).expect("start")).expect("spawn");
        let answer = run_request(&RunRequest::new("pinion-run-p"), Some(0), &handle).await;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
        let body = http_body_util::BodyExt::collect(answer.into_body())
            .await
            .expect("body")
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains("peer pid 0") && text.contains("hostPID"),
            "{text}"
        );
        assert!(handle.snapshot().workloads.is_empty());
        assert!(node.host.tree().children.is_empty());
    }

    /// The built-in CPU plugin on `dir`'s journal through `controller`
    /// (what `Qrm::start_builtin` opens).
    fn cpu_pools(
        controller: &mut controller::Controller,
        topology: &pinion_core::Topology,
    ) -> CpuPluginHandle {
        use pinion_plugins::store::{Journal, Outbox, StateFile};
        let outbox = Outbox::new();
        let entries = controller.keep_plugin_state(outbox.clone(), "plugin-state/");
        let kind = Journal::kind_of("cpu");
        let restored = entries.get(&kind).cloned().unwrap_or_default();
        let store = Journal::new(kind, restored, outbox, StateFile::memory("cpu"));
        let plugin = pinion_plugins::cpu::CpuPlugin::open_with_store(
            topology.clone(),
            &pinion_plugins::cpu::CpuPluginConfig::default(),
            store.into(),
        )
        .expect("open the cpu plugin");
        CpuPluginHandle::new(plugin)
    }

    async fn body(answer: Answer) -> String {
        let body = http_body_util::BodyExt::collect(answer.into_body())
            .await
            .expect("body")
            .to_bytes();
        String::from_utf8_lossy(&body).into_owned()
    }

    /// Found from outside (forty-sixth session): `pools set` whose flush
    /// failed answered 500 "the decision could not be made durable,
    /// nothing changed", but the pin stayed in force (the pool took its
    /// size) and waited for the next flush, which wrote it to disk. The pin
    /// is now given back: the pool keeps the pin it had, in memory and
    /// after a restart.
    #[tokio::test]
    async fn regression_a_pin_that_cannot_be_made_durable_is_given_back() {
        use pinion_host::fileops::{Effect, FileOp};
        const EIO: i32 = 5;
        let dir = tempfile::tempdir().expect("tempdir");
        let node = crate::testing::SyntheticNode {
            host: pinion_host::cgroup::fake::FakeCgroups::default(),
            ..crate::testing::SyntheticNode::new(crate::testing::machine(1, 4, 1))
        };
        let (mut controller, plan) = node.start_with_faults(dir.path());
        let pools = cpu_pools(&mut controller, &node.topology);
        let (handle, task) = controller::spawn(controller).expect("spawn");
        let set = |size: &str| wire::SetPool {
            pool: "later".into(),
            size: size.into(),
            create: true,
        };
        let pin_of = |pools: &CpuPluginHandle| pools.view().pending_pins.get("later").cloned();

        // A pin that is made durable.
        let answer = set_pool(&pools, &set("2"), &handle).await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(pin_of(&pools).as_deref(), Some("2"));

        // A pin whose flush fails: refused, and the pool keeps its pin.
        plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(EIO));
        let answer = set_pool(&pools, &set("3"), &handle).await;
        assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let text = body(answer).await;
        assert!(text.contains("nothing changed"), "{text}");
        assert_eq!(pin_of(&pools).as_deref(), Some("2"), "given back");

        // The disk is back: the next flush writes what waited (the pin and
        // its giving back), and a restart finds the pin that was answered.
        handle.flush_plugin_state().await.expect("flushed");
        handle.shutdown().await;
        task.join().expect("controller thread");
        let mut restarted = node.start(dir.path()).expect("restart");
        let pools = cpu_pools(&mut restarted, &node.topology);
        assert_eq!(
            pools.view().pending_pins.get("later").map(String::as_str),
            Some("2")
        );
    }

    #[test]
    fn the_wire_and_the_controller_agree_on_runs() {
        assert_eq!(wire::RUN_CONTAINER, RUN_CONTAINER);
    }

    #[test]
    fn snapshots_convert_to_the_documented_wire_form() {
        let cpus = |text: &str| pinion_core::CpuSet::parse_list(text).expect("cpulist");
        let mut assignments = pinion_core::state::Assignments::new();
        assignments
            .entry("pinion-run-1".into())
            .or_default()
            .insert("main".into(), cpus("1"));
        let inner = controller::Snapshot {
            policy: "static".into(),
            all_cpus: cpus("0-1"),
            reserved: cpus("0"),
            shared_pool: cpus("0"),
            workloads: vec![controller::WorkloadView {
                pod: "pinion-run-1".into(),
                container: "main".into(),
                frontend: "standalone".into(),
                placement: pinion_core::Placement {
                    cpus: cpus("1"),
                    mems: cpus("0"),
                    pool: pinion_core::Pool::Exclusive,
                    ..pinion_core::Placement::default()
                },
                applied: true,
                cgroup: Some("pinion-run-1".into()),
                pid: Some(4242),
                container_id: None,
                plugins: BTreeMap::new(),
                apply_error: None,
                partition: None,
                foreign_write: None,
                admitted: 0,
            }],
            assignments,
            ..controller::Snapshot::default()
        };
        let json = serde_json::to_value(snapshot(&inner)).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "policy": "static", "all_cpus": "0-1", "reserved": "0", "shared_pool": "0",
                "workloads": [{"pod": "pinion-run-1", "container": "main", "exclusive": true,
                               "cpus": "1", "mems": "0", "cgroup": "pinion-run-1", "pid": 4242,
                               "frontend": "standalone", "pool": "exclusive", "applied": true}],
                "assignments": {"pinion-run-1": {"main": "1"}}
            })
        );
    }
}
