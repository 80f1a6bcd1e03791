//! Wiring of the daemon: discover the machine, build the policy, start the
//! controller, then serve the local API, `/metrics`, the reconcile timer
//! and (NRI mode) the NRI plugin until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pinion_core::policy::PolicyError;
use pinion_core::topomgr::TopologyManagerError;
use pinion_host::cgroup::{CgroupError, Cgroups};
use pinion_host::DiscoveryError;
use pinion_nri::{Plugin, PluginError, PluginOptions};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::config::Config;
use crate::controller::{self, ControlError, Controller, ControllerHandle, StartParts};
use crate::http::{self, Response};
use crate::nri::NriFrontend;
use crate::{api, metrics};

/// Why the agent could not start (or stopped abnormally).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
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
    #[error("another pinion agent is running on state directory {} (it holds {})", .dir.display(), .lock.display())]
    AlreadyRunning { dir: PathBuf, lock: PathBuf },
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("nri plugin: {0}")]
    Nri(#[from] PluginError),
    #[error("cannot listen on {what} {address}: {source}")]
    Listen {
        what: &'static str,
        address: String,
        source: std::io::Error,
    },
}

/// Runs the agent until a termination signal.
pub async fn run(config: Config) -> Result<(), AgentError> {
    let plugin_options = nri_options(&config, |key| std::env::var(key).ok())?;
    let topology = pinion_host::discover(&config.sysroot)?;
    let policy = config.policy.build(&topology)?;
    let topology_manager = config.policy.build_topology_manager(&topology)?;
    let mountinfo = config.sysroot.join("proc/self/mountinfo");
    let cgroups = Cgroups::detect(&mountinfo, &config.sysroot, config.cgroup_root.as_deref())?;
    std::fs::create_dir_all(&config.state_dir).map_err(|source| AgentError::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    let _lock = lock_state_dir(&config.state_dir)?;
    let cgroup_root = cgroups.root().display().to_string();
    let version = cgroups.version();
    let controller = Controller::start(StartParts {
        policy,
        topology_manager,
        topology,
        state_dir: config.state_dir.clone(),
        host: Box::new(cgroups),
    })
    .map_err(|err| match err {
        ControlError::Cgroup { source, .. } => AgentError::Cgroups(source),
        other => AgentError::Control(other),
    })?;
    let listen = |what, address: String| {
        move |source| AgentError::Listen {
            what,
            address,
            source,
        }
    };
    let socket = api::bind(&config.socket).map_err(listen(
        "the local api socket",
        config.socket.display().to_string(),
    ))?;
    let metrics_listener = TcpListener::bind(config.metrics_addr)
        .await
        .map_err(listen(
            "the metrics address",
            config.metrics_addr.to_string(),
        ))?;
    let metrics_addr = metrics_listener
        .local_addr()
        .map_or_else(|_| config.metrics_addr.to_string(), |a| a.to_string());
    let (handle, thread) =
        controller::spawn(controller).map_err(|source| AgentError::StateDir {
            path: config.state_dir.clone(),
            source,
        })?;
    tracing::info!(socket = %config.socket.display(), metrics = %metrics_addr, cgroup_root = %cgroup_root, cgroup_version = %version, "pinion agent ready");
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = vec![
        tokio::spawn(api::serve(socket, handle.clone(), stop_rx.clone())),
        tokio::spawn(serve_metrics(
            metrics_listener,
            handle.clone(),
            stop_rx.clone(),
        )),
        tokio::spawn(reconcile_timer(
            handle.clone(),
            config.reconcile_period,
            stop_rx.clone(),
        )),
    ];
    let mut plugin = None;
    if let Some(options) = plugin_options {
        let (pusher, task) = start_nri(options, &handle, &stop_rx);
        tasks.push(pusher);
        plugin = Some(task);
    }
    let outcome = tokio::select! {
        () = wait_for_signal() => Ok(()),
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

/// Starts the NRI front-end: the plugin and the shared-pool pusher.
fn start_nri(
    options: PluginOptions,
    handle: &ControllerHandle,
    stop: &watch::Receiver<bool>,
) -> (tokio::task::JoinHandle<()>, PluginTask) {
    tracing::info!(name = %options.name, index = %options.index, endpoint = ?options.endpoint, "nri plugin mode");
    let frontend = Arc::new(NriFrontend::new(handle.clone()));
    let (plugin, sender) = Plugin::new(options, Arc::clone(&frontend));
    frontend.set_update_sender(sender);
    let (pool, pusher_stop) = (handle.shared_pool(), stop.clone());
    let pusher = tokio::spawn(async move { frontend.push_shared_pool(pool, pusher_stop).await });
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
pub const LOCK_FILE: &str = ".pinion-agent.lock";

/// Takes the state directory's lock (held while the returned file lives).
pub fn lock_state_dir(dir: &std::path::Path) -> Result<std::fs::File, AgentError> {
    let lock = dir.join(LOCK_FILE);
    let io_error = |source| AgentError::StateDir {
        path: lock.clone(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(io_error)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(AgentError::AlreadyRunning {
            dir: dir.to_path_buf(),
            lock,
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(io_error(source)),
    }
}

async fn wait_for_signal() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stopping");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

async fn reconcile_timer(
    handle: ControllerHandle,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {
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

/// Serves `/metrics`, `/healthz` and `/readyz` over TCP.
pub async fn serve_metrics(
    listener: TcpListener,
    handle: ControllerHandle,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut stream, _)) = accepted else { continue };
                let handle = handle.clone();
                tokio::spawn(async move {
                    let response = match http::read_request(&mut stream).await {
                        Ok(request) => metrics_route(&request.method, &request.path, &handle),
                        Err(err) => Response::text(400, "text/plain", format!("{err}\n")),
                    };
                    let _ = http::write_response(&mut stream, &response).await;
                });
            }
            _ = stop.changed() => break,
        }
    }
}

fn metrics_route(method: &str, path: &str, handle: &ControllerHandle) -> Response {
    match (method, path) {
        ("GET", "/metrics") => Response::text(
            200,
            "text/plain; version=0.0.4",
            metrics::render(&handle.snapshot().metrics),
        ),
        ("GET", "/healthz" | "/readyz") => Response::text(200, "text/plain", "ok\n".into()),
        _ => Response::text(404, "text/plain", format!("no such endpoint {path}\n")),
    }
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
}
