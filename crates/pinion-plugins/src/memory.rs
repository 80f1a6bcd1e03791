//! The memory plugin (resource `memory`): per-NUMA accounting and NUMA
//! binding.
//!
//! * Each node offers `MemTotal` of its `meminfo` minus a configured
//!   reservation (`reservedBytesPerNode`); what NUMA-bound containers were
//!   given is accounted on their nodes.
//! * Containers with `numa_binding` get hints from the free memory per node
//!   (kubelet's memory-manager rule: every mask that fits, preferred when it
//!   has the fewest nodes that could hold the request), `CpusetMems` of the
//!   chosen node(s), and their memory accounted there, lowest node first.
//!   `numa_exclusive` pods hold their nodes alone.
//! * Other containers get every node no other pod holds exclusively, or no
//!   `CpusetMems` at all when no pod holds one (their memory nodes are then
//!   left as they are, as kubelet's static policy leaves them). Their CPUs
//!   do not narrow them: memory no pod asked to bind is not confined, nor
//!   accounted, on the nodes of its CPUs.
//! * Hugepages per node are reported as `hugepages-<size>` resources and,
//!   when a request carries `hugepages-<size>` beside `memory`, accounted on
//!   the bound nodes.

use std::collections::BTreeMap;
use std::path::Path;

use pinion_core::qos::QosLevel;
use pinion_core::CpuSet;
use pinion_host::meminfo::NodeMemory;
use serde::{Deserialize, Serialize};

use crate::api::{
    AllocatableResource, Allocation, AllocationInfo, Allocations, Hint, Options, Request,
    ResourcePlugin, TopologyAwareQuantity, TopologyAwareResource,
};
use crate::hints::{self as wire, NodeCapacity};
use crate::store::{Changed, StateFile, Store};
use crate::{request, PluginError};

/// The resource this plugin serves.
pub const RESOURCE: &str = "memory";
/// Its state file.
pub const STATE_FILE: &str = "pinion_memory_plugin_state.json";
/// katalyst's default per-node reservation: 500 MiB.
pub const DEFAULT_RESERVED_PER_NODE: u64 = 500 << 20;

/// Configuration (agent config `qosResourceManager.plugins.memory`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryPluginConfig {
    /// Bytes of every node kept for the system.
    pub reserved_bytes_per_node: u64,
}

impl Default for MemoryPluginConfig {
    fn default() -> Self {
        Self {
            reserved_bytes_per_node: DEFAULT_RESERVED_PER_NODE,
        }
    }
}

/// One container's memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemMember {
    /// Bytes requested.
    pub request: u64,
    /// Bound nodes (`numa_binding`), else `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<CpuSet>,
    /// Bytes accounted per node (bound containers only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_node: BTreeMap<u32, u64>,
    /// Hugepages resource → node → bytes accounted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hugepages: BTreeMap<String, BTreeMap<u32, u64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<Hint>,
}

/// What the memory plugin remembers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryState {
    /// Pod UID → container → member.
    pub containers: BTreeMap<String, BTreeMap<String, MemMember>>,
    /// Pod UID → nodes it holds alone.
    #[serde(default)]
    pub exclusive_numa: BTreeMap<String, CpuSet>,
}

crate::pod_keyed_entries!(MemoryState {
    containers,
    exclusive_numa
});

/// The memory plugin.
pub struct MemoryPlugin {
    nodes: Vec<NodeMemory>,
    config: MemoryPluginConfig,
    state: MemoryState,
    store: Store,
}

impl std::fmt::Debug for MemoryPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPlugin")
            .field("nodes", &self.nodes)
            .field("config", &self.config)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl MemoryPlugin {
    /// A plugin for the machine's `nodes` (`pinion_host::meminfo`),
    /// restoring its state from `state_dir`.
    pub fn open(
        nodes: Vec<NodeMemory>,
        config: MemoryPluginConfig,
        state_dir: Option<&Path>,
    ) -> Result<Self, PluginError> {
        Self::open_with_store(nodes, config, StateFile::new(state_dir, STATE_FILE).into())
    }

    /// [`MemoryPlugin::open`] with its state in `store`.
    pub fn open_with_store(
        nodes: Vec<NodeMemory>,
        config: MemoryPluginConfig,
        mut store: Store,
    ) -> Result<Self, PluginError> {
        let state: MemoryState = store.load()?.unwrap_or_default();
        let plugin = Self {
            nodes,
            config,
            state,
            store,
        };
        Ok(plugin)
    }

    /// The state.
    #[must_use]
    pub fn state(&self) -> &MemoryState {
        &self.state
    }

    fn allocatable(&self, node: &NodeMemory) -> u64 {
        node.total
            .saturating_sub(self.config.reserved_bytes_per_node)
    }

    fn accounted(&self, node: u32) -> u64 {
        self.members()
            .filter_map(|(_, _, m)| m.per_node.get(&node))
            .fold(0u64, |sum, b| sum.saturating_add(*b))
    }

    fn hugepages_free(&self, node: &NodeMemory, resource: &str) -> u64 {
        let total = node
            .hugepages
            .iter()
            .filter(|h| h.resource_name() == resource)
            .map(pinion_host::meminfo::HugePages::total_bytes)
            .sum::<u64>();
        let used = self
            .members()
            .filter_map(|(_, _, m)| m.hugepages.get(resource)?.get(&node.node))
            .fold(0u64, |sum, b| sum.saturating_add(*b));
        total.saturating_sub(used)
    }

    fn members(&self) -> impl Iterator<Item = (&str, &str, &MemMember)> {
        self.state.containers.iter().flat_map(|(pod, containers)| {
            containers
                .iter()
                .map(move |(c, m)| (pod.as_str(), c.as_str(), m))
        })
    }

    fn member(&self, pod: &str, container: &str) -> Option<&MemMember> {
        self.state.containers.get(pod)?.get(container)
    }

    /// Nodes other pods hold exclusively.
    fn held_nodes(&self, pod: &str) -> CpuSet {
        let mut nodes = CpuSet::new();
        for (owner, held) in &self.state.exclusive_numa {
            if owner != pod {
                nodes.union_with(held);
            }
        }
        nodes
    }

    /// Nodes where other pods have bound memory.
    fn used_nodes(&self, pod: &str) -> CpuSet {
        let mut nodes = CpuSet::new();
        for (owner, _, member) in self.members() {
            if owner != pod {
                if let Some(bound) = &member.bound {
                    nodes.union_with(bound);
                }
            }
        }
        nodes
    }

    /// The hints of a NUMA-bound request.
    fn bound_hints(
        &self,
        request: &Request,
        bytes: u64,
        exclusive: bool,
    ) -> Result<Vec<Hint>, PluginError> {
        let qos = request::qos(request)?;
        let capacity: Vec<NodeCapacity> = self
            .nodes
            .iter()
            .map(|node| NodeCapacity {
                node: node.node,
                free: self
                    .allocatable(node)
                    .saturating_sub(self.accounted(node.node)),
                allocatable: self.allocatable(node),
            })
            .collect();
        let huge = hugepage_requests(request);
        let hints: Vec<Hint> = wire::capacity_hints(&capacity, bytes)
            .into_iter()
            .filter(|hint| {
                let nodes = wire::nodes(hint);
                huge.iter().all(|(resource, want)| {
                    let free: u64 = self
                        .nodes
                        .iter()
                        .filter(|n| nodes.contains(n.node))
                        .map(|n| self.hugepages_free(n, resource))
                        .sum();
                    free >= *want
                })
            })
            .collect();
        let mut excluded = self.held_nodes(&request.pod_uid);
        if exclusive {
            excluded.union_with(&self.used_nodes(&request.pod_uid));
        }
        Ok(wire::restrict(hints, &qos, &excluded))
    }

    /// The current memory nodes of a member: its bound nodes, else every
    /// node no other pod holds exclusively — and `None` ("no opinion") when
    /// that is every node: the manager then leaves the container's memory
    /// nodes as the runtime set them (all nodes), as kubelet's static
    /// policy does.
    fn mems(&self, pod: &str, member: &MemMember) -> Option<CpuSet> {
        if let Some(bound) = &member.bound {
            return Some(bound.clone());
        }
        let held = self.held_nodes(pod);
        if held.is_empty() {
            return None;
        }
        let all: CpuSet = self.nodes.iter().map(|n| n.node).collect();
        let free = all.difference(&held);
        Some(if free.is_empty() { all } else { free })
    }

    fn info(&self, pod: &str, container: &str) -> Option<AllocationInfo> {
        let member = self.member(pod, container)?;
        let mems = self.mems(pod, member);
        Some(AllocationInfo {
            oci_property_name: if mems.is_some() {
                "CpusetMems".into()
            } else {
                String::new()
            },
            is_node_resource: false,
            is_scalar_resource: true,
            allocated_quantity: member.request as f64,
            allocation_result: mems.map(|m| m.to_string()).unwrap_or_default(),
            resource_hints: member.hints.clone(),
            topology_assignments: member
                .per_node
                .iter()
                .map(|(&node, &bytes)| (u64::from(node), bytes))
                .collect(),
            ..AllocationInfo::default()
        })
    }

    /// Accounts `bytes` (and the hugepages) on `nodes`, lowest node first.
    fn place(
        &self,
        request: &Request,
        nodes: &CpuSet,
        bytes: u64,
    ) -> Result<MemMember, PluginError> {
        let mut per_node = BTreeMap::new();
        let mut left = bytes;
        for node in self.nodes.iter().filter(|n| nodes.contains(n.node)) {
            let free = self
                .allocatable(node)
                .saturating_sub(self.accounted(node.node));
            let take = free.min(left);
            if take > 0 {
                per_node.insert(node.node, take);
                left -= take;
            }
        }
        if left > 0 {
            return Err(PluginError::Insufficient {
                resource: RESOURCE.into(),
                nodes: nodes.to_string(),
                requested: format!("{bytes} bytes"),
                available: format!("{} bytes", bytes - left),
            });
        }
        let mut hugepages = BTreeMap::new();
        for (resource, want) in hugepage_requests(request) {
            let mut left = want;
            let mut placed = BTreeMap::new();
            for node in self.nodes.iter().filter(|n| nodes.contains(n.node)) {
                let take = self.hugepages_free(node, &resource).min(left);
                if take > 0 {
                    placed.insert(node.node, take);
                    left -= take;
                }
            }
            if left > 0 {
                return Err(PluginError::Insufficient {
                    resource,
                    nodes: nodes.to_string(),
                    requested: format!("{want} bytes"),
                    available: format!("{} bytes", want - left),
                });
            }
            hugepages.insert(resource, placed);
        }
        Ok(MemMember {
            request: bytes,
            bound: Some(nodes.clone()),
            per_node,
            hugepages,
            hints: vec![wire::of_nodes(nodes, true)],
        })
    }
}

/// `hugepages-<size>` entries of a request, in bytes.
fn hugepage_requests(request: &Request) -> Vec<(String, u64)> {
    request
        .resource_requests
        .iter()
        .filter(|(k, _)| is_hugepages(k))
        .map(|(k, v)| (k.clone(), bytes(*v)))
        .collect()
}

fn is_hugepages(key: &str) -> bool {
    key.starts_with("hugepages-")
}

/// Bytes of a quantity, rounded up.
fn bytes(value: f64) -> u64 {
    request::milli(value).div_ceil(1000)
}

impl ResourcePlugin for MemoryPlugin {
    fn resource_name(&self) -> &str {
        RESOURCE
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: true,
            need_reconcile: true,
        }
    }

    fn topology_hints(&self, request: &Request) -> Result<Option<Vec<Hint>>, PluginError> {
        request::check_resource(request, RESOURCE)?;
        if let Some(member) = self.member(&request.pod_uid, &request.container_name) {
            return Ok((!member.hints.is_empty()).then(|| member.hints.clone()));
        }
        let want = bytes(request::quantity(request, RESOURCE, is_hugepages)?);
        let qos = request::qos(request)?;
        if request::is_init(request) || !qos.numa_binding || qos.level == QosLevel::SystemCores {
            return Ok(None);
        }
        self.bound_hints(request, want, qos.numa_exclusive)
            .map(Some)
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        request::check_resource(request, RESOURCE)?;
        let (pod, container) = (request.pod_uid.as_str(), request.container_name.as_str());
        if self.member(pod, container).is_none() {
            let want = bytes(request::quantity(request, RESOURCE, is_hugepages)?);
            let qos = request::qos(request)?;
            if request::is_init(request) {
                return Ok(None);
            }
            let member = if qos.numa_binding && qos.level != QosLevel::SystemCores {
                let nodes = match request::hint_nodes(request) {
                    Some(nodes) => nodes,
                    None => {
                        let hints = self.bound_hints(request, want, qos.numa_exclusive)?;
                        hints
                            .iter()
                            .find(|h| h.preferred)
                            .or_else(|| hints.first())
                            .map(wire::nodes)
                            .ok_or_else(|| PluginError::Insufficient {
                                resource: RESOURCE.into(),
                                nodes: "any".into(),
                                requested: format!("{want} bytes"),
                                available: "no numa node".into(),
                            })?
                    }
                };
                let held = self.held_nodes(pod).intersection(&nodes);
                if !held.is_empty() {
                    let owner = self
                        .state
                        .exclusive_numa
                        .iter()
                        .find(|(o, n)| o.as_str() != pod && !n.is_disjoint(&held))
                        .map(|(o, _)| o.clone())
                        .unwrap_or_default();
                    return Err(PluginError::NumaHeld {
                        nodes: held.to_string(),
                        pod: owner,
                    });
                }
                let member = self.place(request, &nodes, want)?;
                if qos.numa_exclusive {
                    self.state
                        .exclusive_numa
                        .entry(pod.to_string())
                        .or_default()
                        .union_with(&nodes);
                }
                member
            } else {
                MemMember {
                    request: want,
                    bound: None,
                    per_node: BTreeMap::new(),
                    hugepages: BTreeMap::new(),
                    hints: Vec::new(),
                }
            };
            self.state
                .containers
                .entry(pod.to_string())
                .or_default()
                .insert(container.to_string(), member);
            if let Err(err) = self.store.save(&self.state, Changed::Pod(pod)) {
                self.forget(pod, container);
                return Err(err.into());
            }
        }
        Ok(self
            .info(pod, container)
            .map(|info| Allocation::from([(RESOURCE.to_string(), info)])))
    }

    fn allocations(&self) -> Allocations {
        let mut all = Allocations::new();
        for (pod, container, _) in self.members() {
            if let Some(info) = self.info(pod, container) {
                all.entry(pod.to_string()).or_default().insert(
                    container.to_string(),
                    Allocation::from([(RESOURCE.to_string(), info)]),
                );
            }
        }
        all
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        if self.state.containers.remove(pod_uid).is_none() {
            return Ok(());
        }
        self.state.exclusive_numa.remove(pod_uid);
        Ok(self.store.save(&self.state, Changed::Pod(pod_uid))?)
    }

    fn topology_aware_resources(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<BTreeMap<String, TopologyAwareResource>, PluginError> {
        let member =
            self.member(pod_uid, container)
                .ok_or_else(|| PluginError::UnknownContainer {
                    resource: RESOURCE.into(),
                    pod: pod_uid.into(),
                    container: container.into(),
                })?;
        let list: Vec<TopologyAwareQuantity> = member
            .per_node
            .iter()
            .map(|(&node, &bytes)| TopologyAwareQuantity::numa(u64::from(node), bytes as f64))
            .collect();
        Ok(BTreeMap::from([(
            RESOURCE.to_string(),
            TopologyAwareResource {
                is_node_resource: false,
                is_scalar_resource: true,
                aggregated_quantity: member.request as f64,
                original_aggregated_quantity: member.request as f64,
                topology_aware_quantity_list: list.clone(),
                original_topology_aware_quantity_list: list,
            },
        )]))
    }

    fn allocatable_resources(&self) -> BTreeMap<String, AllocatableResource> {
        let mut out = BTreeMap::new();
        let per_node = |f: &dyn Fn(&NodeMemory) -> u64| -> Vec<TopologyAwareQuantity> {
            self.nodes
                .iter()
                .map(|n| TopologyAwareQuantity::numa(u64::from(n.node), f(n) as f64))
                .collect()
        };
        out.insert(
            RESOURCE.to_string(),
            AllocatableResource {
                is_node_resource: false,
                is_scalar_resource: true,
                aggregated_allocatable_quantity: self
                    .nodes
                    .iter()
                    .map(|n| self.allocatable(n) as f64)
                    .sum(),
                topology_aware_allocatable_quantity_list: per_node(&|n| self.allocatable(n)),
                aggregated_capacity_quantity: self.nodes.iter().map(|n| n.total as f64).sum(),
                topology_aware_capacity_quantity_list: per_node(&|n| n.total),
            },
        );
        let sizes: std::collections::BTreeSet<String> = self
            .nodes
            .iter()
            .flat_map(|n| {
                n.hugepages
                    .iter()
                    .map(pinion_host::meminfo::HugePages::resource_name)
            })
            .collect();
        for resource in sizes {
            let of = |n: &NodeMemory| -> u64 {
                n.hugepages
                    .iter()
                    .filter(|h| h.resource_name() == resource)
                    .map(pinion_host::meminfo::HugePages::total_bytes)
                    .sum()
            };
            let list = per_node(&of);
            let total: f64 = list.iter().map(|q| q.resource_value).sum();
            out.insert(
                resource.clone(),
                AllocatableResource {
                    is_node_resource: false,
                    is_scalar_resource: true,
                    aggregated_allocatable_quantity: total,
                    topology_aware_allocatable_quantity_list: list.clone(),
                    aggregated_capacity_quantity: total,
                    topology_aware_capacity_quantity_list: list,
                },
            );
        }
        out
    }
}

impl MemoryPlugin {
    fn forget(&mut self, pod: &str, container: &str) {
        if let Some(containers) = self.state.containers.get_mut(pod) {
            containers.remove(container);
            if containers.is_empty() {
                self.state.containers.remove(pod);
                self.state.exclusive_numa.remove(pod);
            }
        }
    }
}
