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
use pinion_plugins::builtin::{self, Config};
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
        for plugin in &self.config.builtin {
            let config = effective_config(plugin, machine.reserved);
            let name = config.kind().name();
            let opened = builtin::open(
                &config,
                machine.topology.clone(),
                machine.sysroot,
                Some(machine.state_dir),
            )
            .map_err(|err| QrmError::Start(format!("built-in plugin: {err}")))?;
            let resource = opened.resource_name().to_string();
            let socket = self
                .config
                .plugin_registration_dir
                .join(config.kind().socket_name());
            let identity = Identity::new(&resource);
            let mut stopped = stop.clone();
            let task = tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                if let Err(err) =
                    pinion_api::plugin::serve(&socket, identity, GrpcPlugin::new(opened), shutdown)
                        .await
                {
                    tracing::error!(plugin = name, "built-in plugin: {err}");
                }
            });
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
        Ok(started.into_iter().map(|(_, _, task)| task).collect())
    }
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
