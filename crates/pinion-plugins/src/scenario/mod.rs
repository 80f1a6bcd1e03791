//! QoS Resource Manager scenarios (`pinion simulate` with a `plugins` key):
//! a machine, which of Pinion's plugins run with which configuration, pods
//! with katalyst's annotations, and steps — add and remove pods, pool
//! pressure, advisor pins. Every step drives the plugins through
//! [`ResourcePlugin`](crate::ResourcePlugin) exactly as a manager does
//! (`GetTopologyHints` → the Topology Manager's merge → `Allocate` with the
//! merged hint; `RemovePod`; `GetResourcesAllocation`), plus the CPU
//! plugin's closed loop ([`CpuPlugin::reconcile`]) and pins
//! ([`CpuPlugin::set_pool_size`]). After each step the outcome holds every
//! container's placement and the CPUs of every pool.
//!
//! Input errors (an unknown QoS level, a pool that does not exist, a bad
//! quantity, a malformed step) stop the scenario with an error naming the
//! value and the step. A pod the machine cannot take is an outcome
//! (`rejected`), as the manager's admission error would be.

mod manager;
mod snapshot;
pub mod spec;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use pinion_core::cpuset::CpuSet;
use pinion_core::pools::{PoolLoad, PoolSize};
use pinion_core::topomgr::{NumaInfo, TopologyManager};
use pinion_core::Topology;
use serde::Serialize;

use crate::cpu::{CpuPlugin, CpuPluginConfig};
use crate::memory::{MemoryPlugin, MemoryPluginConfig};
use crate::nic::{NicPlugin, NicPluginConfig};
use crate::Hint;

pub use snapshot::{ContainerPlacement, NodeMemoryUse, PoolMap, Snapshot};
pub use spec::{QrmScenario, Step};

/// Why a scenario could not run (or stopped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    #[error("plugins: {what}")]
    Plugins { what: String },
    #[error("machine: {what}")]
    Machine { what: String },
    #[error("topology manager: {what}")]
    TopologyManager { what: String },
    /// A step that cannot be read.
    #[error("step {index}: {what}")]
    BadStep { index: usize, what: String },
    /// A step that cannot run (`step` describes it).
    #[error("step {index} ({step}): {what}")]
    Step {
        index: usize,
        step: String,
        what: String,
    },
}

/// What one `add` did with one container.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerAdmission {
    pub container: String,
    /// The merged hint sent with `Allocate` (`None` when no hints were
    /// asked: Topology Manager policy `none`).
    pub hint: Option<Hint>,
    /// Resources whose failed allocation was skipped (`shared_cores` pods).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// The result of an `add`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Admission {
    pub pod: String,
    pub admitted: bool,
    /// Why the pod was rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub containers: Vec<ContainerAdmission>,
}

/// One pool's size change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolChange {
    pub pool: String,
    pub from: u32,
    pub to: u32,
    pub reason: String,
}

/// One container whose CPUs changed in a step (other than the one admitted
/// or removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuChange {
    pub pod: String,
    pub container: String,
    pub from: CpuSet,
    pub to: CpuSet,
}

/// The result of one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepOutcome {
    /// 1-based.
    pub index: usize,
    pub step: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pool_changes: Vec<PoolChange>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpu_changes: Vec<CpuChange>,
    #[serde(flatten)]
    pub snapshot: Snapshot,
}

/// The result of a scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The plugins that ran, in call order.
    pub plugins: Vec<String>,
    pub topology_manager_policy: String,
    /// Before the first step.
    pub initial: Snapshot,
    pub steps: Vec<StepOutcome>,
}

/// The plugins of a scenario, opened from its `plugins` (without state
/// files) — for the simulator, and for a test serving the same plugins to
/// the agent's manager.
pub struct Plugins {
    pub cpu: Option<CpuPlugin>,
    pub memory: Option<MemoryPlugin>,
    pub nic: Option<NicPlugin>,
}

fn config<T: serde::de::DeserializeOwned + Default>(
    name: &str,
    value: &serde_json::Value,
) -> Result<T, ScenarioError> {
    if value.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(value.clone()).map_err(|err| ScenarioError::Plugins {
        what: format!("{name}: {err}"),
    })
}

impl Plugins {
    /// Opens the plugins `scenario` names, on `topology`.
    pub fn open(scenario: &QrmScenario, topology: &Topology) -> Result<Self, ScenarioError> {
        let mut plugins = Self {
            cpu: None,
            memory: None,
            nic: None,
        };
        let failed = |name: &str, err: crate::PluginError| ScenarioError::Plugins {
            what: format!("{name}: {err}"),
        };
        for (name, value) in &scenario.plugins {
            match name.as_str() {
                "cpu" => {
                    let config: CpuPluginConfig = config(name, value)?;
                    let plugin = CpuPlugin::open(topology.clone(), &config, None)
                        .map_err(|err| failed(name, err))?;
                    plugins.cpu = Some(plugin);
                }
                "memory" => {
                    let config: MemoryPluginConfig = config(name, value)?;
                    if scenario.memory.is_empty() {
                        return Err(ScenarioError::Machine {
                            what: "the memory plugin needs `memory` (MemTotal per numa node)"
                                .into(),
                        });
                    }
                    let nodes = spec::node_memory(&scenario.memory)?;
                    let plugin =
                        MemoryPlugin::open(nodes, config, None).map_err(|err| failed(name, err))?;
                    plugins.memory = Some(plugin);
                }
                "nic" => {
                    let config: NicPluginConfig = config(name, value)?;
                    let nics = spec::nics(&scenario.nics, &config)?;
                    let plugin = NicPlugin::open(topology, nics, &config, None)
                        .map_err(|err| failed(name, err))?;
                    plugins.nic = Some(plugin);
                }
                other => {
                    return Err(ScenarioError::Plugins {
                        what: format!("unknown plugin {other:?} (expected cpu, memory or nic)"),
                    })
                }
            }
        }
        if plugins.cpu.is_none() && plugins.memory.is_none() && plugins.nic.is_none() {
            return Err(ScenarioError::Plugins {
                what: "no plugin runs (give at least one of cpu, memory, nic)".into(),
            });
        }
        Ok(plugins)
    }
}

/// The topology given inline (`machine`); `Ok(None)` when the scenario
/// names a `sysroot`, which the caller discovers.
pub fn inline_topology(scenario: &QrmScenario) -> Result<Option<Topology>, ScenarioError> {
    match (scenario.machine, &scenario.sysroot) {
        (Some(_), Some(_)) => Err(ScenarioError::Machine {
            what: "give `machine` or `sysroot`, not both".into(),
        }),
        (Some(shape), None) => pinion_core::topology::try_synthetic(shape)
            .map(Some)
            .map_err(|err| ScenarioError::Machine {
                what: err.to_string(),
            }),
        (None, Some(_)) => Ok(None),
        (None, None) => Err(ScenarioError::Machine {
            what: "the scenario has no machine (give `machine` or `sysroot`)".into(),
        }),
    }
}

/// The scenario's Topology Manager policy (`none` when it names none).
#[must_use]
pub fn policy_name(scenario: &QrmScenario) -> String {
    scenario
        .topology_manager_policy
        .clone()
        .unwrap_or_else(|| "none".to_string())
}

/// The scenario's Topology Manager (container scope) on `topology`.
pub fn topology_manager(
    scenario: &QrmScenario,
    topology: &Topology,
) -> Result<TopologyManager, ScenarioError> {
    let numa = NumaInfo::from_topology(topology).map_err(|err| ScenarioError::TopologyManager {
        what: err.to_string(),
    })?;
    TopologyManager::new(
        &policy_name(scenario),
        "container",
        &scenario.topology_manager_policy_options,
        numa,
    )
    .map_err(|err| ScenarioError::TopologyManager {
        what: err.to_string(),
    })
}

/// Runs `scenario` on `topology`.
pub fn run(scenario: &QrmScenario, topology: &Topology) -> Result<Outcome, ScenarioError> {
    let policy = policy_name(scenario);
    let manager = topology_manager(scenario, topology)?;
    for (from, to) in &scenario.resource_names_map {
        if from.is_empty() || to.is_empty() || from == to {
            return Err(ScenarioError::Plugins {
                what: format!("resourceNamesMap {from}={to}: names must be non-empty and differ"),
            });
        }
    }
    let plugins = Plugins::open(scenario, topology)?;
    let mut sim = manager::Manager::new(scenario, manager, plugins);
    let initial = sim.snapshot();
    let mut steps = Vec::with_capacity(scenario.steps.len());
    for (offset, value) in scenario.steps.iter().enumerate() {
        let index = offset + 1;
        let step = Step::parse(index, value)?;
        let outcome = sim.step(index, &step).map_err(|err| match err {
            ScenarioError::Step { index, what, .. } => ScenarioError::Step {
                index,
                step: step.describe(),
                what,
            },
            other => other,
        })?;
        steps.push(outcome);
    }
    Ok(Outcome {
        name: scenario.name.clone(),
        plugins: sim.plugin_names(),
        topology_manager_policy: policy,
        initial,
        steps,
    })
}

/// Loads measured so far, by pool.
pub(crate) type Loads = BTreeMap<String, PoolLoad>;

/// A size as the advisor wrote it (checked by [`Step::parse`]).
#[must_use]
pub fn pool_size(text: &spec::Text) -> PoolSize {
    text.as_text().parse().unwrap_or_default()
}
