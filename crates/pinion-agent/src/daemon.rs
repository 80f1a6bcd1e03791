//! Wiring of the daemon: discover the machine, build the policy, start the
//! controller, then serve the local API, `/metrics` and the reconcile timer
//! until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::time::Duration;

use pinion_core::policy::PolicyError;
use pinion_core::topomgr::TopologyManagerError;
use pinion_host::cgroup::{CgroupError, Cgroups};
use pinion_host::DiscoveryError;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::config::Config;
use crate::controller::{self, ControlError, Controller, ControllerHandle, StartParts};
use crate::http::{self, Response};
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
    #[error("cannot listen on {what} {address}: {source}")]
    Listen {
        what: &'static str,
        address: String,
        source: std::io::Error,
    },
}

/// Runs the agent until a termination signal.
pub async fn run(config: Config) -> Result<(), AgentError> {
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
    let tasks = [
        tokio::spawn(api::serve(socket, handle.clone(), stop_rx.clone())),
        tokio::spawn(serve_metrics(
            metrics_listener,
            handle.clone(),
            stop_rx.clone(),
        )),
        tokio::spawn(reconcile_timer(
            handle.clone(),
            config.reconcile_period,
            stop_rx,
        )),
    ];
    wait_for_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }
    handle.shutdown().await;
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    let _ = std::fs::remove_file(&config.socket);
    Ok(())
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
}
