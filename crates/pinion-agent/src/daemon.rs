//! Wiring of the daemon: discover the machine, build the policy, start the
//! controller, then serve the local API, `/metrics`, the reconcile timer
//! and (NRI mode) the NRI plugin until SIGTERM or SIGINT; the QoS Resource
//! Manager's loops are wired to the controller in [`qrm_loops`]; a watch of
//! the one async thread logs when something held it ([`stalls`]).

pub mod qrm_loops;
pub mod stalls;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pinion_core::policy::PolicyError;
use pinion_core::topomgr::{Scope, TopologyManagerError};
use pinion_host::cgroup::{CgroupError, Cgroups};
use pinion_host::lock::{lock_exclusive, nested_lock, Holder, Lock, LockError, STATE_LOCK_FILE};
use pinion_host::pod_cgroups::PodCpuSource;
use pinion_host::DiscoveryError;
use pinion_nri::{Plugin, PluginError, PluginOptions};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::config::Config;
use crate::controller::{self, ControlError, Controller, ControllerHandle, StartParts};
use crate::hints::{HintGatherer, HintSource};
use crate::nri::request_times::RequestTimes;
use crate::nri::NriFrontend;
use crate::podresources::{self, PodResourcesService};
use crate::qrm::{self, Qrm, QrmError, QrmHints};
use crate::server::metrics;
use crate::{api, kubelet_qrm_checkpoint};

/// Why the agent could not start (or stopped abnormally).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// KEP-5894's start-up check: the partition's cpus must exist and be
    /// reserved (kubelet refuses to start too).
    #[error("invalid systemPartition.cpuset {cpuset}: {reason}")]
    SystemPartition { cpuset: String, reason: String },
    #[error("topology discovery: {0}")]
    Discovery(#[from] DiscoveryError),
    #[error("cpu manager policy: {0}")]
    Policy(#[from] PolicyError),
    #[error("topology manager: {0}")]
    TopologyManager(#[from] TopologyManagerError),
    #[error("cannot manage cpuset cgroups: {0} (run as root, or pass --cgroup-root inside a writable cpuset cgroup hierarchy)")]
    Cgroups(#[from] CgroupError),
    #[error("state directory {}: {source}", .path.display())]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another pinion agent is running on state directory {} ({holder} holds {})", .dir.display(), .lock.display())]
    AlreadyRunning {
        dir: PathBuf,
        lock: PathBuf,
        holder: String,
    },
    #[error("cgroup root {} is managed by {holder}; give this agent another --cgroup-root, or stop that agent", .root.display())]
    CgroupRootTaken { root: PathBuf, holder: String },
    /// Two agents whose roots nest would hand out the same CPUs, and the
    /// outer one would delete the inner root as a stray cgroup.
    #[error("cgroup root {} is {relation} {}, the cgroup root of {holder}; give each agent a --cgroup-root outside the other's", .root.display(), .other.display())]
    CgroupRootNested {
        root: PathBuf,
        other: PathBuf,
        relation: &'static str,
        holder: String,
    },
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("nri plugin: {0}")]
    Nri(#[from] PluginError),
    #[error(transparent)]
    Qrm(#[from] Box<QrmError>),
    #[error("node resource topology: {0}")]
    Nrt(#[from] crate::nrt::NrtStartError),
    #[error("cannot install the SIGTERM/SIGINT handlers: {source}")]
    Signals { source: std::io::Error },
    #[error("cannot listen on {what} {address}: {source}")]
    Listen {
        what: &'static str,
        address: String,
        source: std::io::Error,
    },
}

/// The runtime the agent runs on: one thread for its front-ends (local API,
/// NRI, podresources, metrics), the resource manager's loops and the
/// built-in plugins, whose work is short; the controller has its own thread
/// for the blocking I/O. Benches that measure the agent's paths build the
/// same one.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Runs the agent until a termination signal.
pub async fn run(config: Config) -> Result<(), AgentError> {
    // First of all: a SIGTERM during the start stops the agent once it is
    // up, instead of killing it halfway.
    let signals = Signals::install().map_err(|source| AgentError::Signals { source })?;
    // The watch of this thread runs from the start: the start's own steps
    // hold it too (its first tick is due once it has run).
    let (stop_tx, stop_rx) = watch::channel(false);
    let stall_watch = tokio::spawn(stalls::log_stalls(stop_rx.clone()));
    tokio::task::yield_now().await;
    let plugin_options = nri_options(&config, |key| std::env::var(key).ok())?;
    let topology = pinion_host::discover(&config.sysroot)?;
    let machine_topology = topology.clone();
    let policy = config.policy.build_with(&topology, config.features)?;
    let topology_manager = config.policy.build_topology_manager(&topology)?;
    check_system_partition(&config, topology.all_cpus(), &policy.reserved())?;
    let mountinfo = config.sysroot.join("proc/self/mountinfo");
    let cgroups = Cgroups::detect(&mountinfo, &config.sysroot, config.cgroup_root.as_deref())?;
    std::fs::create_dir_all(&config.state_dir).map_err(|source| AgentError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    let _state_lock = lock_state_dir(&config.state_dir)?;
    // Listeners before cgroups: a start that cannot listen touches nothing.
    let listen = |what, address: String| {
        move |source| AgentError::Listen {
            what,
            address,
            source,
        }
    };
    let metrics_listener = TcpListener::bind(config.metrics_addr)
        .await
        .map_err(listen(
            "the metrics address",
            config.metrics_addr.to_string(),
        ))?;
    let metrics_addr = metrics_listener
        .local_addr()
        .map_or_else(|_| config.metrics_addr.to_string(), |a| a.to_string());
    let socket = api::bind(&config.socket).map_err(listen(
        "the local api socket",
        config.socket.display().to_string(),
    ))?;
    let podresources_socket = &config.pod_resources.socket;
    let podresources_listener = match podresources::bind(&config.pod_resources) {
        Ok(listener) => listener,
        Err(source) => {
            let _ = std::fs::remove_file(&config.socket);
            return Err(AgentError::Listen {
                what: "the podresources socket",
                address: podresources_socket.display().to_string(),
                source,
            });
        }
    };
    let topology_for_readers = Arc::new(topology.clone());
    let cgroup_root = cgroups.root().display().to_string();
    let (cgroups_root, cgroups_mount) =
        (cgroups.root().to_path_buf(), cgroups.mount().to_path_buf());
    let pod_cpu = PodCpuSource::for_cgroups(&cgroups, &mountinfo, &config.sysroot);
    let version = cgroups.version();
    let (runtime_tx, runtime_rx) = tokio::sync::mpsc::unbounded_channel();
    let started = claim_cgroup_root(&cgroups, &config.sysroot).and_then(|claim| {
        let parts = StartParts {
            policy,
            topology_manager,
            topology,
            state_dir: config.state_dir.clone(),
            host: Box::new(cgroups),
            runtime_updates: plugin_options.is_some().then_some(runtime_tx),
            file_ops: None,
            migrate_on_start: config.migrate_on_start,
            partition: config.exclusive_cpus.partition,
            isolation: controller::Isolation {
                housekeeping: config.housekeeping.cgroups.clone(),
                pinion_root: pinion_root_below_mount(
                    cgroups_root.as_path(),
                    cgroups_mount.as_path(),
                ),
                other_writers: config.housekeeping.other_writers,
                system_partition: config.system_partition.clone(),
            },
        };
        match Controller::start(parts) {
            Ok(controller) => Ok((controller, claim)),
            Err(err) => {
                claim.undo();
                Err(match err {
                    ControlError::Cgroup { source, .. } => AgentError::Cgroups(source),
                    other => AgentError::Control(other),
                })
            }
        }
    });
    let (controller, _root_lock) = match started {
        Ok((controller, claim)) => (controller, claim.lock),
        Err(err) => {
            let _ = std::fs::remove_file(&config.socket);
            let _ = std::fs::remove_file(podresources_socket);
            return Err(err);
        }
    };
    let qrm = config.qrm.enabled.then(|| Qrm::new(config.qrm.clone()));
    let hints = hint_gatherer(&config, qrm.as_ref());
    let (handle, thread) =
        controller::spawn_with(controller, hints, qrm.clone()).map_err(|source| {
            AgentError::StateDir {
                path: config.state_dir.clone(),
                source,
            }
        })?;
    tracing::info!(socket = %config.socket.display(), podresources = %podresources_socket.display(), metrics = %metrics_addr, cgroup_root = %cgroup_root, cgroup_version = %version, "pinion agent ready");
    let mut podresources_service = PodResourcesService::new(
        handle.snapshots(),
        topology_for_readers,
        config.pod_resources.qps,
        config.pod_resources.burst,
    );
    if let Some(qrm) = &qrm {
        podresources_service =
            podresources_service.with_plugin_resources(qrm.registry().node_resources());
    }
    let nri_requests = Arc::new(RequestTimes::default());
    let mut tasks = vec![
        tokio::spawn(metrics::serve(
            metrics_listener,
            handle.clone(),
            Arc::clone(&nri_requests),
            stop_rx.clone(),
        )),
        tokio::spawn(podresources::serve(
            podresources_listener,
            podresources_socket.clone(),
            podresources_service,
            stop_rx.clone(),
        )),
        tokio::spawn(reconcile_timer(
            handle.clone(),
            config.reconcile_period,
            config.sysroot.clone(),
            stop_rx.clone(),
        )),
        stall_watch,
    ];
    if let Some(qrm) = &qrm {
        tasks.push(tokio::spawn(kubelet_qrm_checkpoint::keep_written(
            handle.snapshots(),
            config.state_dir.clone(),
            config.reconcile_period,
            stop_rx.clone(),
        )));
        // The built-in plugins register first, then the loops start: the
        // removal loop's first pass must find them (a pod removal pending
        // from before the restart was counted as heard by no plugin, and
        // the CPU plugin kept the pod's CPUs for good), and a socket
        // plugin the watcher then finds for the same resource replaces the
        // built-in one, as documented, instead of racing it (found from
        // outside, session 45).
        let reserved = handle.snapshot().reserved.clone();
        let machine = qrm::builtin::Machine {
            topology: &machine_topology,
            reserved: &reserved,
            sysroot: &config.sysroot,
            state_dir: &config.state_dir,
            cgroups: Some(&pod_cpu),
        };
        tasks.extend(
            qrm.start_builtin(machine, &stop_rx)
                .await
                .map_err(Box::new)?,
        );
        tasks.extend(qrm_loops::start(qrm, &handle, &stop_rx).map_err(Box::new)?);
    }
    let (nrt_source, nrt_task) = crate::nrt::start(
        &config,
        &handle,
        qrm.as_ref().map(|qrm| qrm.registry().node_resources()),
        Arc::new(machine_topology.clone()),
        |key| std::env::var(key).ok(),
        &stop_rx,
    )
    .await?;
    tasks.extend(nrt_task);
    let env = |key: &str| std::env::var(key).ok();
    let node_name = || {
        crate::nrt::node_name(&config.nrt, env, || {
            pinion_host::hostname::hostname(std::path::Path::new("/"))
        })
    };
    tasks.extend(
        crate::nrt::node_status::start(
            &config.nrt,
            node_name(),
            qrm.as_ref().map(|qrm| qrm.registry().node_resources()),
            env,
            &stop_rx,
        )
        .await?,
    );
    // What the node's pods request beyond cpu and memory, which NRI does
    // not carry: read from the API server for the resource plugins.
    let pod_requests = crate::nrt::pod_requests::start(
        &config.nrt,
        node_name(),
        qrm.is_some() && plugin_options.is_some(),
        env,
        &stop_rx,
    )
    .await?
    .map(|(cache, task)| {
        tasks.push(task);
        cache
    });
    // Admissions only once every built-in plugin is there to place them.
    tasks.push(tokio::spawn(api::serve_with_nrt(
        socket,
        handle.clone(),
        stop_rx.clone(),
        nrt_source,
    )));
    let mut plugin = None;
    if let Some(options) = plugin_options {
        let (forwarder, task) = start_nri(
            options,
            &handle,
            pod_requests,
            nri_requests,
            runtime_rx,
            &stop_rx,
        );
        tasks.push(forwarder);
        plugin = Some(task);
    }
    let outcome = tokio::select! {
        () = signals.wait() => Ok(()),
        ended = plugin_ended(&mut plugin) => ended,
    };
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
    if let Some(task) = plugin {
        let _ = task.await;
    }
    handle.shutdown().await;
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    let _ = std::fs::remove_file(&config.socket);
    outcome
}

/// The providers of topology hints outside the engine: the resource plugins
/// when the QoS Resource Manager is on. Under the Topology Manager's `none`
/// policy (the default) nobody is asked, as kubelet's none scope collects
/// no hints: plugins get `Allocate` without a hint.
fn hint_gatherer(config: &Config, qrm: Option<&Arc<Qrm>>) -> HintGatherer {
    let Some(qrm) = qrm else {
        return HintGatherer::none();
    };
    let policy = config.policy.topology_manager_policy.as_deref();
    let scope = match (policy, config.policy.topology_manager_scope.as_deref()) {
        (None | Some("none"), _) => Scope::None,
        (_, Some("pod")) => Scope::Pod,
        _ => Scope::Container,
    };
    let sources: Vec<Arc<dyn HintSource>> = vec![Arc::new(QrmHints(Arc::clone(qrm)))];
    // Each plugin call has its own deadline; the gathering as a whole gets
    // room for every plugin's.
    let deadline = config.qrm.rpc_timeout * 2;
    HintGatherer::new(sources, scope, deadline)
}

/// The NRI plugin options: runtime-launched when `NRI_PLUGIN_SOCKET` (and
/// friends) are set, else external when the config enables NRI.
pub fn nri_options(
    config: &Config,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<PluginOptions>, PluginError> {
    if let Some(options) = PluginOptions::from_launch_env(env)? {
        return Ok(Some(options));
    }
    if !config.nri.enabled {
        return Ok(None);
    }
    let nri = &config.nri;
    PluginOptions::external(&nri.plugin_name, &nri.plugin_index, nri.socket.clone()).map(Some)
}

type PluginTask = tokio::task::JoinHandle<Result<(), PluginError>>;

/// Starts the NRI front-end: the plugin and the forwarder of the
/// executor's runtime updates.
fn start_nri(
    options: PluginOptions,
    handle: &ControllerHandle,
    pod_requests: Option<crate::nrt::pod_requests::PodRequests>,
    request_times: Arc<RequestTimes>,
    updates: tokio::sync::mpsc::UnboundedReceiver<Vec<controller::RuntimeUpdate>>,
    stop: &watch::Receiver<bool>,
) -> (tokio::task::JoinHandle<()>, PluginTask) {
    tracing::info!(name = %options.name, index = %options.index, endpoint = ?options.endpoint, "nri plugin mode");
    let mut frontend = NriFrontend::new(handle.clone()).with_request_times(request_times);
    if let Some(cache) = pod_requests {
        frontend = frontend.with_pod_requests(cache);
    }
    let frontend = Arc::new(frontend);
    let (plugin, sender) = Plugin::new(options, Arc::clone(&frontend));
    frontend.set_update_sender(sender);
    let forwarder_stop = stop.clone();
    let pusher =
        tokio::spawn(async move { frontend.forward_updates(updates, forwarder_stop).await });
    let mut stop = stop.clone();
    let task = tokio::spawn(plugin.run(async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    }));
    (pusher, task)
}

/// Resolves when the plugin stopped on its own (a runtime-launched
/// plugin's socket closed); never without a plugin.
async fn plugin_ended(plugin: &mut Option<PluginTask>) -> Result<(), AgentError> {
    let Some(task) = plugin.as_mut() else {
        return std::future::pending().await;
    };
    let result = task.await;
    *plugin = None;
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => {
            tracing::error!("nri plugin ended: {err}");
            Err(AgentError::Nri(err))
        }
        Err(err) => {
            tracing::error!("nri plugin task failed: {err}");
            Ok(())
        }
    }
}

/// Name of the lock file that keeps a second agent off the state directory.
pub const LOCK_FILE: &str = STATE_LOCK_FILE;

/// Takes the state directory's lock (held while the returned lock lives).
pub fn lock_state_dir(dir: &Path) -> Result<Lock, AgentError> {
    let lock = dir.join(LOCK_FILE);
    lock_exclusive(&lock, true, Path::new("/proc")).map_err(|err| match err {
        LockError::Held { holder, .. } => AgentError::AlreadyRunning {
            dir: dir.to_path_buf(),
            lock,
            holder: holder_text(holder.as_ref()),
        },
        LockError::Io { source, .. } => AgentError::StateDir { path: lock, source },
    })
}

/// Pinion's cgroup root, created if missing and locked for this agent.
struct RootClaim {
    lock: Lock,
    /// The directories this start created (removed again if it fails).
    created: Vec<PathBuf>,
}

impl RootClaim {
    /// A failed start leaves no cgroup directory behind.
    fn undo(self) {
        drop(self.lock);
        if let Err(err) = Cgroups::remove_created(&self.created) {
            tracing::warn!("removing the cgroup root created by a failed start: {err}");
        }
    }
}

/// Creates Pinion's cgroup root if missing and locks it, so that no second
/// agent (with another state directory) manages the same cgroups.
fn claim_cgroup_root(cgroups: &Cgroups, sysroot: &Path) -> Result<RootClaim, AgentError> {
    let created = cgroups.create_root_dirs()?;
    let proc_root = sysroot.join("proc");
    match lock_exclusive(cgroups.root(), false, &proc_root) {
        Ok(lock) => match nested_lock(cgroups.root(), &proc_root) {
            None => Ok(RootClaim { lock, created }),
            Some(nested) => {
                let claim = RootClaim { lock, created };
                claim.undo();
                Err(AgentError::CgroupRootNested {
                    root: cgroups.root().to_path_buf(),
                    other: nested.path,
                    relation: if nested.above { "inside" } else { "above" },
                    holder: holder_text(Some(&nested.holder)),
                })
            }
        },
        Err(err) => {
            if let Err(cleanup) = Cgroups::remove_created(&created) {
                tracing::warn!("removing {cleanup}");
            }
            Err(match err {
                LockError::Held { path, holder } => AgentError::CgroupRootTaken {
                    root: path,
                    holder: holder_text(holder.as_ref()),
                },
                LockError::Io { path, source } => AgentError::StateDir { path, source },
            })
        }
    }
}

fn holder_text(holder: Option<&Holder>) -> String {
    holder.map_or_else(
        || "another process".to_string(),
        |h| match &h.state_dir {
            Some(dir) => format!(
                "the agent with pid {} and state directory {}",
                h.pid,
                dir.display()
            ),
            None => format!("process {}", h.pid),
        },
    )
}

/// SIGTERM and SIGINT, installed before anything else starts.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves at the first SIGTERM or SIGINT (also one received earlier).
    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

async fn reconcile_timer(
    handle: ControllerHandle,
    period: Duration,
    sysroot: std::path::PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                follow_online_cpus(&handle, &sysroot).await;
                match handle.reconcile().await {
                    Ok(report) if report != controller::ReconcileReport::default() => {
                        tracing::info!(released = ?report.released, repaired = ?report.repaired, "reconciled");
                    }
                    Ok(_) => {}
                    Err(err) => tracing::error!("reconcile: {err}"),
                }
            }
            _ = stop.changed() => break,
        }
    }
}

/// CPU hot-plug: when the machine's online CPUs differ from the ones the
/// controller places on, discovers the topology again and has the
/// controller follow it (before the reconcile pass, so that drift repair
/// never rewrites a CPU that went offline).
async fn follow_online_cpus(handle: &ControllerHandle, sysroot: &std::path::Path) {
    let online = match pinion_host::online_cpus(sysroot) {
        Ok(online) => online,
        Err(err) => {
            tracing::warn!("reading the online cpus: {err}");
            return;
        }
    };
    if online == handle.snapshot().all_cpus {
        return;
    }
    let machine = match pinion_host::discover(sysroot) {
        Ok(machine) => machine,
        Err(err) => {
            tracing::warn!("the online cpus are now {online}, but the topology cannot be discovered again: {err}");
            return;
        }
    };
    match handle.follow_topology(machine).await {
        Ok(report) if !report.unchanged() => {
            tracing::info!(offline = %report.offline, online = %report.online, "followed a change of the online cpus");
        }
        Ok(_) => {}
        Err(err) => tracing::error!("following the online cpus {online}: {err}"),
    }
}

/// KEP-5894's start-up check of `systemPartition.cpuset`: every cpu on this
/// machine and reserved (`reservedSystemCPUs`, or the cpus the policy
/// reserves).
fn check_system_partition(
    config: &Config,
    all: &pinion_core::CpuSet,
    reserved: &pinion_core::CpuSet,
) -> Result<(), AgentError> {
    let Some(cpuset) = config
        .system_partition
        .as_ref()
        .and_then(|p| p.cpuset.as_ref())
    else {
        return Ok(());
    };
    let fail = |reason: String| AgentError::SystemPartition {
        cpuset: cpuset.to_string(),
        reason,
    };
    if !cpuset.is_subset(all) {
        return Err(fail(format!(
            "cpus {} are not on this machine (cpus {all})",
            cpuset.difference(all)
        )));
    }
    if !cpuset.is_subset(reserved) {
        return Err(fail(format!(
            "cpus {} are not reserved (reserved cpus {reserved})",
            cpuset.difference(reserved)
        )));
    }
    Ok(())
}

/// Pinion's cgroup root relative to the hierarchy's mount.
fn pinion_root_below_mount(root: &std::path::Path, mount: &std::path::Path) -> Option<PathBuf> {
    root.strip_prefix(mount)
        .ok()
        .map(std::path::Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_agent_is_kept_off_the_state_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = lock_state_dir(dir.path()).expect("first lock");
        let err = lock_state_dir(dir.path()).expect_err("second lock");
        assert!(matches!(err, AgentError::AlreadyRunning { .. }), "{err}");
        drop(held);
        lock_state_dir(dir.path()).expect("free again");
    }

    fn config(overrides: &crate::Overrides) -> Config {
        let defaults = crate::DefaultPaths::for_user(true, None);
        Config::resolve(crate::config::FileConfig::default(), overrides, &defaults).expect("config")
    }

    #[test]
    fn nri_mode_is_chosen_from_the_launch_environment_then_the_config() {
        use pinion_nri::Endpoint;
        let off = config(&crate::Overrides::default());
        let no_env = |_: &str| None;
        assert_eq!(nri_options(&off, no_env).expect("ok"), None);
        let on = config(&crate::Overrides {
            nri_socket: Some("/run/test/nri.sock".into()),
            ..crate::Overrides::default()
        });
        let external = nri_options(&on, no_env).expect("ok").expect("enabled");
        assert_eq!(
            external.endpoint,
            Endpoint::Socket("/run/test/nri.sock".into())
        );
        assert_eq!(
            (external.name.as_str(), external.index.as_str()),
            ("pinion", "90")
        );
        let launched_env = |key: &str| match key {
            "NRI_PLUGIN_SOCKET" => Some("3".to_string()),
            "NRI_PLUGIN_NAME" => Some("pinion".to_string()),
            "NRI_PLUGIN_IDX" => Some("10".to_string()),
            _ => None,
        };
        let launched = nri_options(&off, launched_env)
            .expect("ok")
            .expect("launched");
        assert_eq!(launched.endpoint, Endpoint::InheritedFd(3));
        assert_eq!(launched.index, "10");
        let bad_env = |key: &str| (key == "NRI_PLUGIN_SOCKET").then(|| "x".to_string());
        let err = nri_options(&on, bad_env).expect_err("bad fd");
        assert!(err.to_string().contains("\"x\""), "{err}");
    }

    #[test]
    fn the_system_partitions_cpus_must_be_on_the_machine_and_reserved() {
        use pinion_core::CpuSet;
        let set = |t: &str| CpuSet::parse_list(t).expect("cpus");
        let mut config = config(&crate::Overrides::default());
        config.system_partition = Some(crate::config::SystemPartition {
            cpuset: Some(set("0-1")),
            memory_limit: None,
            cgroups: Vec::new(),
            namespaces: std::iter::once("kube-system".to_string()).collect(),
        });
        check_system_partition(&config, &set("0-7"), &set("0-1")).expect("fits");
        let err =
            check_system_partition(&config, &set("0-7"), &set("0")).expect_err("not reserved");
        assert!(
            matches!(&err, AgentError::SystemPartition { cpuset, reason } if cpuset == "0-1" && reason.contains("cpus 1 are not reserved")),
            "{err}"
        );
        let err = check_system_partition(&config, &set("0"), &set("0-1")).expect_err("not there");
        assert!(
            matches!(&err, AgentError::SystemPartition { reason, .. } if reason.contains("cpus 1 are not on this machine")),
            "{err}"
        );
        config.system_partition = None;
        check_system_partition(&config, &set("0"), &set("0")).expect("no partition");
    }
}
