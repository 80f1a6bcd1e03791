//! Pinion's own plugins run by the agent (`qosResourceManager.builtinPlugins`).
//!
//! There is no special path in the manager's rules: each plugin is the
//! same gRPC service `pinion plugin serve` puts on a socket, registered in
//! the endpoint table like any plugin (its options asked with
//! `GetResourcePluginOptions`), and called in the agent's process rather
//! than over a socket ([`registry::Client::InProcess`](super::registry::Client)),
//! so an admission pays no round trip; `Allocate`, the reconcile poll and
//! `RemovePod` skip the wire's messages as well
//! ([`Registry::call_in_process`](super::registry::Registry::call_in_process)).
//! A plugin registering the same resource
//! over a socket later replaces it (the newest registration wins), which is
//! how katalyst's plugins are run instead.
//!
//! Their state is kept in the agent's journal (`pinion_plugins::store`):
//! a change hands its entries to the manager's outbox, and the controller
//! makes them durable with its next flush — for an `Allocate`, the one that
//! records the allocation. A backstop task flushes changes made outside an
//! admission (a removal, the closed loop, a pin) that no other flush took
//! ([`super::loops::flush_backstop`]).

use std::path::Path;
use std::sync::Arc;

use pinion_core::record::{SideData, SideValue};
use pinion_core::{CpuSet, Topology};
use pinion_host::pod_cgroups::PodCpuSource;
use pinion_plugins::builtin::{self, Config, Kind};
use pinion_plugins::cpu::{CpuPlugin, CpuPluginHandle, LoadSources};
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::store::{Journal, Outbox, StateFile, Store};
use pinion_plugins::ResourcePlugin as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Qrm, QrmError};
use crate::config::BuiltinPlugin;

/// The side-data kinds of the built-in plugins' state start with this.
pub const STATE_KIND_PREFIX: &str = pinion_core::record::kinds::PLUGIN_STATE_PREFIX;

/// Where the built-in plugins read the machine and keep their state.
#[derive(Debug, Clone, Copy)]
pub struct Machine<'a> {
    pub topology: &'a Topology,
    /// The agent's reserved CPUs (given to the CPU plugin unless its
    /// configuration names its own).
    pub reserved: &'a CpuSet,
    pub sysroot: &'a Path,
    /// The agent's state directory: where state files of an earlier
    /// version (before the journal kept the plugins' state) are read once.
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

/// The built-in plugins' state in the controller's journal: what it held
/// at start (kind → entries) and where changes wait for its next flush.
#[derive(Debug, Default)]
pub struct PluginJournal {
    pub outbox: Outbox,
    restored: std::sync::Mutex<SideData>,
}

impl PluginJournal {
    /// Takes the entries of side-data kind `kind` restored at start.
    fn take(&self, kind: &str) -> std::collections::BTreeMap<String, SideValue> {
        self.restored
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(kind)
            .unwrap_or_default()
    }

    /// Remembers the entries the controller restored (before the plugins
    /// open).
    pub fn restore(&self, entries: SideData) {
        *self
            .restored
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = entries;
    }

    /// The store of plugin `kind`: the journal, or once the state file of
    /// an earlier version in `state_dir`.
    fn store(&self, kind: Kind, state_dir: &Path) -> Store {
        let side_kind = Journal::kind_of(kind.name());
        Journal::new(
            side_kind.clone(),
            self.take(&side_kind),
            self.outbox.clone(),
            StateFile::new(Some(state_dir), kind.state_file()),
        )
        .into()
    }
}

impl Qrm {
    /// Opens every built-in plugin and registers it in the endpoint table,
    /// in the process. The closed loop of the CPU plugin runs until `stop`
    /// turns true.
    pub async fn start_builtin(
        &self,
        machine: Machine<'_>,
        stop: &watch::Receiver<bool>,
    ) -> Result<Vec<JoinHandle<()>>, QrmError> {
        let mut loops = Vec::new();
        for plugin in &self.config.builtin {
            let config = effective_config(plugin, machine.reserved);
            let name = config.kind().name();
            let failed =
                |err: &dyn std::fmt::Display| QrmError::Start(format!("built-in plugin: {err}"));
            let store = self.plugin_journal.store(config.kind(), machine.state_dir);
            let (resource, service): (String, Arc<super::registry::InProcessService>) =
                if let Config::Cpu(cpu) = &config {
                    // The CPU plugin is shared with its closed loop and with
                    // `pinion pools set`.
                    let opened = CpuPlugin::open_with_store(machine.topology.clone(), cpu, store)
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
                    let grpc = handle.grpc().inline();
                    let _ = self.cpu_pools.set(handle);
                    (resource, Arc::new(grpc))
                } else {
                    let opened =
                        builtin::open(&config, machine.topology.clone(), machine.sysroot, store)
                            .map_err(|err| failed(&err))?;
                    let resource = opened.resource_name().to_string();
                    (resource, Arc::new(GrpcPlugin::new(opened).inline()))
                };
            self.registry
                .register_in_process(&resource, service)
                .await
                .map_err(|err| failed(&format!("the {name} plugin: {err}")))?;
            tracing::info!(plugin = name, %resource, "built-in resource plugin registered (in the agent's process)");
        }
        self.builtin_started
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(loops)
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
