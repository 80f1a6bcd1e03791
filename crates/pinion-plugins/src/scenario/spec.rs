//! The input of a QRM scenario: the machine's memory and NICs (there is no
//! sysfs to read them from), the plugins and their configuration, pods and
//! steps. Values a person types (quantities, addresses, steps) are kept as
//! written and checked when used, so that errors name the value and the
//! step.

use std::collections::BTreeMap;
use std::net::IpAddr;

use pinion_core::pod::{Container, Pod};
use pinion_core::pools::PoolSize;
use pinion_core::topology::Shape;
use pinion_core::Quantity;
use pinion_host::meminfo::NodeMemory;
use pinion_host::net::Nic;
use serde::Deserialize;

use super::ScenarioError;
use crate::nic::NicPluginConfig;

/// One QRM scenario (`pinion simulate` with a `plugins` key).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QrmScenario {
    #[serde(default)]
    pub name: Option<String>,
    /// A regular machine (sockets × cores × threads).
    #[serde(default)]
    pub machine: Option<Shape>,
    /// A sysfs root to discover the machine from (resolved by the caller,
    /// relative to the scenario file).
    #[serde(default)]
    pub sysroot: Option<String>,
    /// `none` (default), `best-effort`, `restricted`, `single-numa-node`.
    #[serde(default, rename = "topologyManagerPolicy")]
    pub topology_manager_policy: Option<String>,
    #[serde(default, rename = "topologyManagerPolicyOptions")]
    pub topology_manager_policy_options: BTreeMap<String, String>,
    /// Plugin name (`cpu`, `memory`, `nic`) → its configuration (the keys of
    /// `pinion plugin serve --config`; `{}` or null for the defaults).
    pub plugins: BTreeMap<String, serde_json::Value>,
    /// Requested name → plugin resource name (the agent's
    /// `qosResourceManager.resourceNamesMap`, e.g.
    /// `resource.katalyst.kubewharf.io/reclaimed_millicpu: cpu`).
    #[serde(default, rename = "resourceNamesMap")]
    pub resource_names_map: BTreeMap<String, String>,
    /// Memory per NUMA node (the memory plugin's `MemTotal`s).
    #[serde(default)]
    pub memory: Vec<NodeMemorySpec>,
    /// The NICs (the NIC plugin's discovery).
    #[serde(default)]
    pub nics: Vec<NicSpec>,
    /// Pods by UID.
    #[serde(default)]
    pub pods: BTreeMap<String, PodSpec>,
    /// Steps, checked one by one when they run ([`Step::parse`]).
    #[serde(default)]
    pub steps: Vec<serde_json::Value>,
}

/// A quantity as written: `"40Gi"`, `4`, `0.5`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Text {
    Text(String),
    Number(serde_json::Number),
}

impl Text {
    /// The text (numbers as they were written).
    #[must_use]
    pub fn as_text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Number(number) => number.to_string(),
        }
    }
}

/// One NUMA node's memory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeMemorySpec {
    pub numa: u32,
    /// `MemTotal` (a quantity: bytes, `221Gi`, …).
    pub total: Text,
}

/// One NIC.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NicSpec {
    pub name: String,
    /// Its NUMA node (absent = no NUMA information: any node).
    #[serde(default)]
    pub numa: Option<u32>,
    /// Link speed in Mb/s (absent = unknown: any number of pods).
    #[serde(default)]
    pub speed_mbps: Option<u64>,
    #[serde(default)]
    pub addresses: Vec<String>,
    /// The network namespace it lives in: a name of the NIC plugin's
    /// `namespaces` (absent = the host's).
    #[serde(default)]
    pub netns: Option<String>,
}

/// One pod.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodSpec {
    /// Default: the pod's key.
    #[serde(default)]
    pub name: Option<String>,
    /// Default: `default`.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The pod role (label `katalyst.kubewharf.io/pod_role`).
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, alias = "init_containers")]
    pub init_containers: Vec<ContainerSpec>,
    #[serde(default)]
    pub containers: Vec<ContainerSpec>,
}

/// One container: requests and limits by resource name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    pub name: String,
    #[serde(default)]
    pub requests: BTreeMap<String, Text>,
    #[serde(default)]
    pub limits: BTreeMap<String, Text>,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Admit a pod (every container: init containers, then app containers).
    Add { pod: String },
    /// Remove a pod (`RemovePod` to every plugin).
    Remove { pod: String },
    /// Pool `pool`'s measured pressure becomes `pressure` percent (and its
    /// busy CPUs `usage`, when given); then `periods` reconcile periods run.
    Pressure {
        pool: String,
        pressure: f64,
        #[serde(default)]
        usage: Option<f64>,
        #[serde(default = "one")]
        periods: u32,
    },
    /// `periods` reconcile periods with the loads measured so far.
    Reconcile {
        #[serde(default = "one")]
        periods: u32,
    },
    /// An advisor pins pool `pool` to `size` (`N`, `MIN-MAX` or `auto`).
    Advisor { pool: String, size: Text },
}

fn one() -> u32 {
    1
}

/// The most reconcile periods one step may run.
pub const MAX_PERIODS: u32 = 10_000;

impl Step {
    /// Step `index` (1-based) of a scenario.
    pub fn parse(index: usize, value: &serde_json::Value) -> Result<Self, ScenarioError> {
        let step: Self =
            serde_json::from_value(value.clone()).map_err(|err| ScenarioError::BadStep {
                index,
                what: err.to_string(),
            })?;
        let bad = |what: String| Err(ScenarioError::BadStep { index, what });
        match &step {
            Self::Pressure {
                pressure, usage, ..
            } => {
                if !(pressure.is_finite() && (0.0..=100.0).contains(pressure)) {
                    return bad(format!("pressure {pressure} is not a percentage (0-100)"));
                }
                if let Some(usage) = usage.filter(|u| !(u.is_finite() && *u >= 0.0)) {
                    return bad(format!("usage {usage} is not a number of busy cpus"));
                }
            }
            Self::Advisor { size, .. } => {
                if let Err(err) = size.as_text().parse::<PoolSize>() {
                    return bad(err.to_string());
                }
            }
            _ => {}
        }
        if let Self::Pressure { periods, .. } | Self::Reconcile { periods } = &step {
            if *periods == 0 || *periods > MAX_PERIODS {
                return bad(format!("periods {periods} is not in 1-{MAX_PERIODS}"));
            }
        }
        Ok(step)
    }

    /// A short description (`add pod1`, `pressure share 40%`, …).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Add { pod } => format!("add {pod}"),
            Self::Remove { pod } => format!("remove {pod}"),
            Self::Pressure {
                pool,
                pressure,
                usage,
                periods,
            } => {
                let usage = usage
                    .map(|u| format!(", {u} cpus busy"))
                    .unwrap_or_default();
                format!("pressure {pool} {pressure}%{usage}, {periods} period(s)")
            }
            Self::Reconcile { periods } => format!("reconcile, {periods} period(s)"),
            Self::Advisor { pool, size } => format!("advisor sets {pool} to {}", size.as_text()),
        }
    }
}

/// A quantity, or an error naming what it is for.
fn quantity(text: &Text, what: impl FnOnce() -> String) -> Result<Quantity, String> {
    let text = text.as_text();
    Quantity::parse(&text).map_err(|err| format!("bad quantity {text:?} for {}: {err}", what()))
}

impl PodSpec {
    /// The pod `uid` as the manager sees it (quantities parsed).
    pub fn to_pod(&self, uid: &str) -> Result<Pod, String> {
        let mut labels = self.labels.clone();
        if let Some(role) = &self.role {
            labels.insert(pinion_core::qos::POD_ROLE_LABEL.to_string(), role.clone());
        }
        let convert = |specs: &[ContainerSpec]| -> Result<Vec<Container>, String> {
            specs.iter().map(ContainerSpec::to_container).collect()
        };
        Ok(Pod {
            uid: uid.to_string(),
            name: self.name.clone().unwrap_or_else(|| uid.to_string()),
            namespace: self
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string()),
            labels,
            annotations: self.annotations.clone(),
            init_containers: convert(&self.init_containers)?,
            containers: convert(&self.containers)?,
        })
    }
}

impl ContainerSpec {
    fn to_container(&self) -> Result<Container, String> {
        let name = &self.name;
        let mut container = Container {
            name: name.clone(),
            ..Container::default()
        };
        for (resource, text) in &self.requests {
            let value = quantity(text, || format!("container {name} request {resource}"))?;
            match resource.as_str() {
                "cpu" => container.cpu_request = Some(value),
                "memory" => container.memory_request = Some(value),
                _ => {
                    container.extended_requests.insert(resource.clone(), value);
                }
            }
        }
        for (resource, text) in &self.limits {
            let value = quantity(text, || format!("container {name} limit {resource}"))?;
            match resource.as_str() {
                "cpu" => container.cpu_limit = Some(value),
                "memory" => container.memory_limit = Some(value),
                _ => {}
            }
        }
        Ok(container)
    }
}

/// The memory plugin's nodes from the scenario's `memory` list.
pub fn node_memory(specs: &[NodeMemorySpec]) -> Result<Vec<NodeMemory>, ScenarioError> {
    let mut nodes: Vec<NodeMemory> = Vec::with_capacity(specs.len());
    for spec in specs {
        let total = quantity(&spec.total, || format!("memory of numa node {}", spec.numa))
            .map_err(|what| ScenarioError::Machine { what })?;
        if nodes.iter().any(|n| n.node == spec.numa) {
            return Err(ScenarioError::Machine {
                what: format!("memory of numa node {} is given twice", spec.numa),
            });
        }
        nodes.push(NodeMemory {
            node: spec.numa,
            total: total.value(),
            free: total.value(),
            hugepages: Vec::new(),
        });
    }
    nodes.sort_by_key(|n| n.node);
    Ok(nodes)
}

/// The NIC plugin's NICs from the scenario's `nics` list.
pub fn nics(specs: &[NicSpec], config: &NicPluginConfig) -> Result<Vec<Nic>, ScenarioError> {
    let namespaces = config.netns();
    let mut out: Vec<Nic> = Vec::with_capacity(specs.len());
    for spec in specs {
        let bad = |what: String| ScenarioError::Machine {
            what: format!("nic {}: {what}", spec.name),
        };
        if spec.name.is_empty() || out.iter().any(|n| n.name == spec.name) {
            return Err(bad("the name is empty or given twice".into()));
        }
        let addresses = spec
            .addresses
            .iter()
            .map(|text| {
                text.parse::<IpAddr>()
                    .map_err(|_| bad(format!("{text:?} is not an ip address")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let netns = match &spec.netns {
            None => None,
            Some(name) => Some(
                namespaces
                    .iter()
                    .find(|ns| &ns.name == name)
                    .cloned()
                    .ok_or_else(|| {
                        bad(format!("netns {name:?} is not in plugins.nic.namespaces"))
                    })?,
            ),
        };
        out.push(Nic {
            name: spec.name.clone(),
            numa: spec.numa,
            speed_mbps: spec.speed_mbps,
            addresses,
            netns,
        });
    }
    Ok(out)
}
