//! Pinion's own plugins run by the agent (`qosResourceManager.builtinPlugins`).
//!
//! There is no special path: each plugin is served with the same gRPC server
//! as `pinion plugin serve` on a socket in the watched directory, registers
//! through the plugin watcher like any external plugin, and the manager
//! talks to it over that socket. What the agent adds is only the start-up
//! order: admissions are served once every built-in plugin is active, so no
//! container is placed before the plugins that should place it are there.

use std::path::Path;
use std::time::{Duration, Instant};

use pinion_api::plugin::Identity;
use pinion_core::{CpuSet, Topology};
use pinion_host::pod_cgroups::PodCpuSource;
use pinion_plugins::builtin::{self, Config};
use pinion_plugins::cpu::{CpuPlugin, CpuPluginHandle, LoadSources};
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::ResourcePlugin as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Qrm, QrmError};
use crate::config::BuiltinPlugin;

/// How often the start-up looks whether the built-in plugins registered.
const POLL: Duration = Duration::from_millis(10);

/// Where the built-in plugins read the machine and keep their state.
#[derive(Debug, Clone, Copy)]
pub struct Machine<'a> {
    pub topology: &'a Topology,
    /// The agent's reserved CPUs (given to the CPU plugin unless its
    /// configuration names its own).
    pub reserved: &'a CpuSet,
    pub sysroot: &'a Path,
    pub state_dir: &'a Path,
    /// Where the CPU plugin's closed loop finds its pods' cgroups (kubelet's
    /// pods and Pinion's own runs) to read their CPU pressure: PSI on cgroup
    /// v2, throttling on v1. `None`: `/proc/stat` only.
    pub cgroups: Option<&'a PodCpuSource>,
}

/// The configuration the plugin runs with: the CPU plugin takes the agent's
/// reserved CPUs unless configured otherwise (a policy without reserved
/// CPUs leaves the plugin's default of one).
#[must_use]
pub fn effective_config(plugin: &BuiltinPlugin, reserved: &CpuSet) -> Config {
    match &plugin.config {
        Config::Cpu(cpu) if plugin.reservation_from_agent && !reserved.is_empty() => {
            let mut cpu = cpu.clone();
            cpu.reserved_cpus = reserved.len();
            cpu.reserved_cpu_list = reserved.clone();
            Config::Cpu(cpu)
        }
        other => other.clone(),
    }
}

impl Qrm {
    /// Opens and serves every built-in plugin in the watched directory and
    /// waits until the manager has registered each (at most the RPC
    /// timeout). The tasks end when `stop` turns true, removing their
    /// sockets.
    pub async fn start_builtin(
        &self,
        machine: Machine<'_>,
        stop: &watch::Receiver<bool>,
    ) -> Result<Vec<JoinHandle<()>>, QrmError> {
        let mut started = Vec::new();
        let mut loops = Vec::new();
        for plugin in &self.config.builtin {
            let config = effective_config(plugin, machine.reserved);
            let name = config.kind().name();
            let socket = self
                .config
                .plugin_registration_dir
                .join(config.kind().socket_name());
            let failed =
                |err: &dyn std::fmt::Display| QrmError::Start(format!("built-in plugin: {err}"));
            let mut stopped = stop.clone();
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let (resource, task) = if let Config::Cpu(cpu) = &config {
                // The CPU plugin is shared with its closed loop and with
                // `pinion pools set`.
                let opened =
                    CpuPlugin::open(machine.topology.clone(), cpu, Some(machine.state_dir))
                        .map_err(|err| failed(&format!("the cpu plugin: {err}")))?;
                let resource = opened.resource_name().to_string();
                let handle = CpuPluginHandle::new(opened);
                let mut loop_stop = stop.clone();
                let sources = LoadSources {
                    sysroot: machine.sysroot.to_path_buf(),
                    pods: machine.cgroups.cloned(),
                };
                let closed_loop = handle.clone().run_closed_loop(
                    sources,
                    self.config.reconcile_period,
                    async move {
                        let _ = loop_stop.wait_for(|s| *s).await;
                    },
                );
                loops.push(tokio::spawn(closed_loop));
                let grpc = handle.grpc();
                let _ = self.cpu_pools.set(handle);
                (
                    resource.clone(),
                    serve(socket, Identity::new(&resource), grpc, shutdown, name),
                )
            } else {
                let opened = builtin::open(
                    &config,
                    machine.topology.clone(),
                    machine.sysroot,
                    Some(machine.state_dir),
                )
                .map_err(|err| failed(&err))?;
                let resource = opened.resource_name().to_string();
                let grpc = GrpcPlugin::new(opened);
                (
                    resource.clone(),
                    serve(socket, Identity::new(&resource), grpc, shutdown, name),
                )
            };
            tracing::info!(plugin = name, %resource, "built-in resource plugin serving");
            started.push((name, resource, task));
        }
        let deadline = Instant::now() + self.config.rpc_timeout;
        for (name, resource, task) in &started {
            while self.registry.active(resource).is_err() {
                if task.is_finished() {
                    return Err(QrmError::Start(format!(
                        "the built-in {name} plugin stopped before it registered (see the log)"
                    )));
                }
                if Instant::now() >= deadline {
                    return Err(QrmError::Start(format!(
                        "the built-in {name} plugin did not register within {:?}",
                        self.config.rpc_timeout
                    )));
                }
                tokio::time::sleep(POLL).await;
            }
        }
        loops.extend(started.into_iter().map(|(_, _, task)| task));
        Ok(loops)
    }
}

/// Serves `plugin` on `socket` until `shutdown`.
fn serve<S>(
    socket: std::path::PathBuf,
    identity: Identity,
    plugin: S,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    name: &'static str,
) -> JoinHandle<()>
where
    S: pinion_api::resourceplugin::resource_plugin_server::ResourcePlugin,
{
    tokio::spawn(async move {
        if let Err(err) = pinion_api::plugin::serve(&socket, identity, plugin, shutdown).await {
            tracing::error!(plugin = name, "built-in plugin: {err}");
        }
    })
}

#[cfg(test)]
mod tests {
    use pinion_core::testing::cpus;
    use pinion_plugins::cpu::CpuPluginConfig;

    use super::*;

    fn cpu_plugin(reservation_from_agent: bool) -> BuiltinPlugin {
        BuiltinPlugin {
            config: Config::Cpu(CpuPluginConfig::default()),
            reservation_from_agent,
        }
    }

    #[test]
    fn the_cpu_plugin_keeps_the_agents_reserved_cpus_unless_configured() {
        let Config::Cpu(taken) = effective_config(&cpu_plugin(true), &cpus("0,40")) else {
            panic!("a cpu plugin")
        };
        assert_eq!(
            (taken.reserved_cpus, taken.reserved_cpu_list),
            (2, cpus("0,40"))
        );
        assert_eq!(
            effective_config(&cpu_plugin(false), &cpus("0,40")),
            Config::Cpu(CpuPluginConfig::default())
        );
        assert_eq!(
            effective_config(&cpu_plugin(true), &CpuSet::new()),
            Config::Cpu(CpuPluginConfig::default()),
            "a policy without reserved CPUs leaves the plugin's default"
        );
    }
}
