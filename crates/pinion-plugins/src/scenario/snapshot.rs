//! What a QRM scenario shows after each step: every container's placement
//! as the plugins report it (`GetResourcesAllocation`) and the CPUs of
//! every pool.

use std::collections::BTreeMap;

use pinion_core::cpuset::CpuSet;
use pinion_core::pod::Pod;
use serde::Serialize;

use super::Plugins;
use crate::api::ResourcePlugin;
use crate::cpu::CpuPlugin;

/// Where one container runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ContainerPlacement {
    pub pod: String,
    pub container: String,
    /// The CPU plugin's pool (`share`, `reclaim`, `dedicated`, `static`,
    /// `system`, a named pool); `None` without a CPU allocation.
    pub pool: Option<String>,
    /// `CpusetCpus`.
    pub cpus: Option<CpuSet>,
    /// `CpusetMems` from the memory plugin (`None`: left as they are).
    pub mems: Option<CpuSet>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The CPUs of every pool (the CPU plugin's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PoolMap {
    /// The system pool.
    pub reserved: CpuSet,
    /// Shared pools by name.
    pub shared: BTreeMap<String, CpuSet>,
    pub reclaim: CpuSet,
    /// Exclusive CPUs by `"<pod>/<container>"`.
    pub dedicated: BTreeMap<String, CpuSet>,
    /// CPUs of NUMA nodes held by `numa_exclusive` pods that no container
    /// of theirs uses.
    pub held: CpuSet,
}

/// One NUMA node's memory as the memory plugin accounts it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeMemoryUse {
    pub numa: u64,
    /// `MemTotal` minus the plugin's reservation, bytes.
    pub allocatable: u64,
    /// Bytes of NUMA-bound containers accounted on the node.
    pub bound: u64,
}

/// The state after a step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub placements: Vec<ContainerPlacement>,
    /// `None` when the CPU plugin does not run.
    pub pools: Option<PoolMap>,
    /// Per NUMA node (`GetTopologyAwareAllocatableResources` and the
    /// allocations' per-node bytes); empty when the memory plugin does not
    /// run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<NodeMemoryUse>,
}

impl Snapshot {
    pub(super) fn take(plugins: &Plugins, pods: &BTreeMap<String, Pod>) -> Self {
        let mut placements: BTreeMap<(String, String), ContainerPlacement> = BTreeMap::new();
        for (uid, pod) in pods {
            for container in pod.all_containers() {
                let key = (uid.clone(), container.name.clone());
                placements.insert(
                    key,
                    ContainerPlacement {
                        pod: uid.clone(),
                        container: container.name.clone(),
                        ..ContainerPlacement::default()
                    },
                );
            }
        }
        let all: [Option<&dyn ResourcePlugin>; 3] = [
            plugins.cpu.as_ref().map(|p| p as &dyn ResourcePlugin),
            plugins.memory.as_ref().map(|p| p as &dyn ResourcePlugin),
            plugins.nic.as_ref().map(|p| p as &dyn ResourcePlugin),
        ];
        for plugin in all.into_iter().flatten() {
            for (pod, containers) in plugin.allocations() {
                for (container, allocation) in containers {
                    let Some(entry) = placements.get_mut(&(pod.clone(), container)) else {
                        continue;
                    };
                    for info in allocation.values() {
                        let set = CpuSet::parse_list(&info.allocation_result).ok();
                        match info.oci_property_name.as_str() {
                            "CpusetCpus" => entry.cpus = set,
                            "CpusetMems" => entry.mems = set,
                            _ => {}
                        }
                        entry.envs.extend(info.envs.clone());
                        entry.annotations.extend(info.annotations.clone());
                    }
                }
            }
        }
        for entry in placements.values_mut() {
            if let Some(cpu) = &plugins.cpu {
                entry.pool = cpu
                    .state()
                    .member(&entry.pod, &entry.container)
                    .map(|m| m.kind.pool_name().to_string());
            }
        }
        Self {
            placements: placements.into_values().collect(),
            pools: plugins.cpu.as_ref().map(PoolMap::of),
            memory: plugins
                .memory
                .as_ref()
                .map(|m| memory_use(m))
                .unwrap_or_default(),
        }
    }
}

/// Allocatable and bound bytes per node, read through the plugin interface.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn memory_use(plugin: &dyn ResourcePlugin) -> Vec<NodeMemoryUse> {
    let resource = plugin.resource_name().to_string();
    let mut nodes: BTreeMap<u64, NodeMemoryUse> = plugin
        .allocatable_resources()
        .get(&resource)
        .map(|r| {
            r.topology_aware_allocatable_quantity_list
                .iter()
                .map(|q| {
                    let node = NodeMemoryUse {
                        numa: q.node,
                        allocatable: q.resource_value as u64,
                        bound: 0,
                    };
                    (q.node, node)
                })
                .collect()
        })
        .unwrap_or_default();
    for containers in plugin.allocations().values() {
        for allocation in containers.values() {
            let Some(info) = allocation.get(&resource) else {
                continue;
            };
            for (numa, bytes) in &info.topology_assignments {
                if let Some(node) = nodes.get_mut(numa) {
                    node.bound = node.bound.saturating_add(*bytes);
                }
            }
        }
    }
    nodes.into_values().collect()
}

impl PoolMap {
    fn of(cpu: &CpuPlugin) -> Self {
        let plan = cpu.pools().plan();
        let exclusive = &cpu.state().exclusive;
        let dedicated: BTreeMap<String, CpuSet> = exclusive
            .assignments
            .iter()
            .flat_map(|(pod, containers)| {
                containers
                    .iter()
                    .map(move |(container, cpus)| (format!("{pod}/{container}"), cpus.clone()))
            })
            .collect();
        let mut held = cpu.state().held(cpu.topology());
        held = held.difference(&exclusive.exclusive_cpus());
        held = held.difference(cpu.reserved());
        Self {
            reserved: cpu.reserved().clone(),
            shared: plan.shared.clone(),
            reclaim: plan.reclaim.clone(),
            dedicated,
            held,
        }
    }
}
