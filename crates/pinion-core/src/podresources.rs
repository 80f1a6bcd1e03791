//! What kubelet's podresources API (v1 with kubewharf's extensions, spec
//! `qrm.md` §6) reports, decided from Pinion's placements: a pure mapping,
//! the wire conversion lives at the edge (the agent).
//!
//! kubelet's rules (§6.4) kept here:
//!
//! * only the pods Pinion holds (active ones: released pods are gone);
//! * per pod, first the restartable init containers, then the app
//!   containers, in spec order; other init containers are not listed;
//! * `cpu_ids` are the exclusively assigned CPUs only: the static policy's
//!   exclusive CPUs, and the cpuset a resource plugin chose for a container
//!   that holds them alone ([`holds_plugin_cpus_exclusively`]: katalyst's
//!   `dedicated_cores`, or without a QoS level a Guaranteed container's
//!   whole-CPU request) —
//!   so a topology exporter reading `List` does not count them as free;
//!   empty for a container in a shared pool;
//! * `memory` is reported for containers whose memory is bound to NUMA
//!   nodes (exclusive CPUs, or a plugin's cpuset): one block of type
//!   `memory`, the container's memory request, on those nodes;
//! * allocatable CPUs are every CPU minus the reserved ones when the policy
//!   hands out exclusive CPUs (`static`), none otherwise;
//! * the allocatable `resources` are Pinion's `cpu` and `memory`, then what
//!   the resource plugins report (`GetTopologyAwareAllocatableResources`,
//!   [`with_plugin_resources`]): a plugin's answer for `cpu` or `memory`
//!   replaces Pinion's, as the kubelet fork lists the plugins' answers.
//!
//! The resource plugins' allocations become kubewharf's
//! `TopologyAwareResource`s (one per resource, per-NUMA amounts from the
//! allocation's topology assignments).

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::placement::{Placement, Pool};
use crate::plugin_allocation::PluginAllocations;
use crate::pod::Pod;
use crate::qos::{QosLevel, QOS_LEVEL_KEY};
use crate::topology::Topology;

/// The label kubewharf's kubelet copies into `pod_role`, and the
/// annotation it copies into `pod_type` (katalyst's keys, `crate::qos`).
pub use crate::qos::{POD_ROLE_LABEL, POD_TYPE_KEY as POD_TYPE_ANNOTATION};
/// The memory type of a NUMA-bound memory block.
pub const MEMORY: &str = "memory";

/// One container Pinion places, as the mapping needs it.
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    /// The pod's UID.
    pub pod: &'a str,
    pub container: &'a str,
    pub placement: &'a Placement,
    pub plugins: &'a PluginAllocations,
}

/// One pod as reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodResources {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub pod_role: String,
    pub pod_type: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub containers: Vec<ContainerResources>,
    /// The pod's own CPUs (pod-level resources, kubelet's `podEntries`),
    /// ascending; empty for other pods. [`with_pod_cpus`] fills it.
    pub cpu_ids: Vec<u32>,
}

/// One container as reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerResources {
    pub name: String,
    /// Exclusively assigned CPUs (ascending).
    pub cpu_ids: Vec<u32>,
    pub memory: Vec<MemoryBlock>,
    /// The resource plugins' allocations (resource-name order).
    pub resources: Vec<TopologyAwareResource>,
}

/// Memory of one type on a set of NUMA nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryBlock {
    pub memory_type: String,
    /// Bytes (0 when the container's request is unknown).
    pub size: u64,
    pub numa_nodes: Vec<u32>,
}

/// An amount on one NUMA node; a plugin may name what provides it there
/// (a NIC: `name` = `eth0`, `kind` = `NIC`), empty for CPUs and memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NumaQuantity {
    pub node: u64,
    pub value: f64,
    pub name: String,
    pub kind: String,
}

impl NumaQuantity {
    /// `value` on NUMA node `node`, provided by nothing named.
    #[must_use]
    pub fn new(node: u64, value: f64) -> Self {
        Self {
            node,
            value,
            ..Self::default()
        }
    }
}

/// A resource plugin's allocation to a container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopologyAwareResource {
    pub resource_name: String,
    pub is_node_resource: bool,
    pub is_scalar_resource: bool,
    pub aggregated_quantity: f64,
    pub per_numa: Vec<NumaQuantity>,
}

/// What the node can hand out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocatable {
    pub cpu_ids: Vec<u32>,
    /// One `memory` block per NUMA node whose size is known.
    pub memory: Vec<MemoryBlock>,
    pub resources: Vec<AllocatableResource>,
}

/// A resource's allocatable and capacity amounts, total and per NUMA node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AllocatableResource {
    pub resource_name: String,
    pub is_node_resource: bool,
    pub is_scalar_resource: bool,
    pub allocatable: f64,
    pub allocatable_per_numa: Vec<NumaQuantity>,
    pub capacity: f64,
    pub capacity_per_numa: Vec<NumaQuantity>,
}

/// Every pod of `pods` (by UID) with its containers' resources, sorted by
/// namespace and name. A pod's containers come from its spec (restartable
/// init containers, then app containers); a spec container Pinion does not
/// hold is listed without resources, as kubelet lists every container.
#[must_use]
pub fn list<P: AsRef<Pod>>(
    pods: &BTreeMap<String, P>,
    holdings: &[Holding<'_>],
) -> Vec<PodResources> {
    let by_pod = ByPod::new(holdings);
    let mut out: Vec<PodResources> = pods
        .iter()
        .map(|(uid, pod)| pod_resources(uid, pod.as_ref(), by_pod.of(uid)))
        .collect();
    out.sort_unstable_by(|a, b| {
        (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid))
    });
    out
}

/// The pod `namespace`/`name`, if Pinion holds it. Two pods may share
/// the name for a while (a StatefulSet's pod terminating while its
/// successor runs): like kubelet, whose pod manager keeps the pod added
/// last under a name, the one admitted last answers (`admitted`: a larger
/// number is later; on a tie, the lowest UID).
#[must_use]
pub fn get<P: AsRef<Pod>>(
    pods: &BTreeMap<String, P>,
    holdings: &[Holding<'_>],
    namespace: &str,
    name: &str,
    admitted: impl Fn(&str) -> u64,
) -> Option<PodResources> {
    let (uid, pod) = pods
        .iter()
        .filter(|(_, p)| p.as_ref().namespace == namespace && p.as_ref().name == name)
        .max_by_key(|(uid, _)| (admitted(uid), std::cmp::Reverse(uid.as_str())))?;
    Some(pod_resources(
        uid,
        pod.as_ref(),
        ByPod::new(holdings).of(uid),
    ))
}

/// What the node can hand out: with a policy that assigns exclusive CPUs,
/// every CPU but the reserved ones (kubelet's rule), per NUMA node also as
/// a `cpu` resource; the memory of each NUMA node whose size is known, also
/// as a `memory` resource.
#[must_use]
pub fn allocatable(topology: &Topology, exclusive_cpus: bool, reserved: &CpuSet) -> Allocatable {
    let mut out = Allocatable::default();
    if exclusive_cpus {
        out.cpu_ids = topology.all_cpus().difference(reserved).iter().collect();
    }
    let mut cpu = AllocatableResource {
        resource_name: "cpu".to_string(),
        is_node_resource: true,
        is_scalar_resource: true,
        ..AllocatableResource::default()
    };
    for (&node, cpus) in topology.numa_cpus() {
        let free = if exclusive_cpus {
            cpus.difference(reserved).len()
        } else {
            cpus.len()
        };
        cpu.allocatable_per_numa
            .push(NumaQuantity::new(u64::from(node), count(free)));
        cpu.capacity_per_numa
            .push(NumaQuantity::new(u64::from(node), count(cpus.len())));
    }
    cpu.allocatable = cpu.allocatable_per_numa.iter().map(|q| q.value).sum();
    cpu.capacity = cpu.capacity_per_numa.iter().map(|q| q.value).sum();
    out.resources.push(cpu);
    let mut memory = AllocatableResource {
        resource_name: MEMORY.to_string(),
        is_node_resource: true,
        is_scalar_resource: true,
        ..AllocatableResource::default()
    };
    for node in topology.numa_nodes() {
        let Some(bytes) = node.memory_bytes else {
            continue;
        };
        out.memory.push(MemoryBlock {
            memory_type: MEMORY.to_string(),
            size: bytes,
            numa_nodes: vec![node.id],
        });
        let quantity = NumaQuantity::new(u64::from(node.id), bytes_f64(bytes));
        memory.allocatable_per_numa.push(quantity.clone());
        memory.capacity_per_numa.push(quantity);
    }
    if !memory.capacity_per_numa.is_empty() {
        memory.allocatable = memory.allocatable_per_numa.iter().map(|q| q.value).sum();
        memory.capacity = memory.allocatable;
        out.resources.push(memory);
    }
    out
}

/// `allocatable` with the resource plugins' node resources (`plugins`, as
/// `GetTopologyAwareAllocatableResources` answered them): one resource per
/// name, a plugin's replacing Pinion's own of that name, then sorted by
/// name after `cpu` and `memory`.
#[must_use]
pub fn with_plugin_resources(
    mut allocatable: Allocatable,
    plugins: &[AllocatableResource],
) -> Allocatable {
    for reported in plugins {
        match allocatable
            .resources
            .iter_mut()
            .find(|r| r.resource_name == reported.resource_name)
        {
            Some(own) => *own = reported.clone(),
            None => allocatable.resources.push(reported.clone()),
        }
    }
    let rank = |name: &str| match name {
        "cpu" => 0,
        MEMORY => 1,
        _ => 2,
    };
    allocatable.resources.sort_by(|a, b| {
        (rank(&a.resource_name), &a.resource_name).cmp(&(rank(&b.resource_name), &b.resource_name))
    });
    allocatable
}

/// Holdings sorted by pod UID (the snapshot's order already: sorting it
/// again is linear), so that a pod's containers are one range.
struct ByPod<'h, 'a> {
    sorted: Vec<&'h Holding<'a>>,
}

impl<'h, 'a> ByPod<'h, 'a> {
    fn new(holdings: &'h [Holding<'a>]) -> Self {
        let mut sorted: Vec<&Holding<'a>> = holdings.iter().collect();
        sorted.sort_by(|a, b| a.pod.cmp(b.pod));
        Self { sorted }
    }

    /// The holdings of pod `uid`.
    fn of(&self, uid: &str) -> &[&'h Holding<'a>] {
        let start = self.sorted.partition_point(|h| h.pod < uid);
        let len = self.sorted[start..].partition_point(|h| h.pod == uid);
        &self.sorted[start..start + len]
    }
}

fn pod_resources(uid: &str, pod: &Pod, held: &[&Holding<'_>]) -> PodResources {
    // The role and type as the manager sent them (the proposal's
    // annotations or katalyst's keys); a pod the manager would refuse for
    // a contradiction was never admitted, so the fallback is katalyst's.
    let identity =
        crate::qos::vocabulary::identity(&pod.labels, &pod.annotations).unwrap_or_else(|_| {
            crate::qos::vocabulary::Identity {
                pod_role: pod.labels.get(POD_ROLE_LABEL).cloned().unwrap_or_default(),
                pod_type: pod
                    .annotations
                    .get(POD_TYPE_ANNOTATION)
                    .cloned()
                    .unwrap_or_default(),
            }
        });
    let listed = pod
        .init_containers
        .iter()
        .filter(|c| c.is_restartable())
        .chain(&pod.containers);
    let containers = listed
        .map(|spec| {
            let memory_request = spec
                .memory_request
                .as_ref()
                .or(spec.memory_limit.as_ref())
                .map_or(0, crate::quantity::Quantity::value);
            match held.iter().find(|h| h.container == spec.name) {
                Some(holding) => container_resources(pod, holding, memory_request),
                None => ContainerResources {
                    name: spec.name.clone(),
                    ..ContainerResources::default()
                },
            }
        })
        .collect();
    PodResources {
        uid: uid.to_string(),
        name: pod.name.clone(),
        namespace: pod.namespace.clone(),
        pod_role: identity.pod_role,
        pod_type: identity.pod_type,
        labels: pod.labels.clone(),
        annotations: pod.annotations.clone(),
        containers,
        cpu_ids: Vec::new(),
    }
}

/// `pod` with its pod-level CPUs (`pod_cpus`: pod UID → the pod's CPU set,
/// `Engine::pod_cpus`) as its `cpu_ids`.
#[must_use]
pub fn with_pod_cpus(mut pod: PodResources, pod_cpus: &crate::state::PodCpus) -> PodResources {
    pod.cpu_ids = pod_cpus
        .get(&pod.uid)
        .map(|cpus| cpus.iter().collect())
        .unwrap_or_default();
    pod
}

/// Whether `container` of `pod`, placed by a resource plugin, holds the
/// plugin's cpuset alone, as the CPU plugins decide it: katalyst's
/// `dedicated_cores` QoS level, or — without a QoS level — a whole-CPU
/// request of a Guaranteed pod (kubelet's static rule,
/// [`crate::qrm_rules::asks_exclusive_cpus`]). Any other explicit level
/// (`shared_cores`, `reclaimed_cores`, `system_cores`) runs in a pool that
/// others use too, Guaranteed or not.
#[must_use]
pub fn holds_plugin_cpus_exclusively(pod: &Pod, container: &str) -> bool {
    match pod.annotations.get(QOS_LEVEL_KEY) {
        Some(level) => level == QosLevel::DedicatedCores.as_str(),
        None => crate::qrm_rules::asks_exclusive_cpus(pod, container),
    }
}

fn container_resources(
    pod: &Pod,
    holding: &Holding<'_>,
    memory_request: u64,
) -> ContainerResources {
    let placement = holding.placement;
    let exclusive = match placement.pool {
        Pool::Exclusive => true,
        Pool::Plugin => holds_plugin_cpus_exclusively(pod, holding.container),
        Pool::Shared => false,
    };
    let cpu_ids = if exclusive {
        placement.cpus.iter().collect()
    } else {
        Vec::new()
    };
    let numa_bound = matches!(placement.pool, Pool::Exclusive | Pool::Plugin);
    let memory = if numa_bound && !placement.mems.is_empty() {
        vec![MemoryBlock {
            memory_type: MEMORY.to_string(),
            size: memory_request,
            numa_nodes: placement.mems.iter().collect(),
        }]
    } else {
        Vec::new()
    };
    let resources = holding
        .plugins
        .iter()
        .map(|(name, allocation)| TopologyAwareResource {
            resource_name: name.clone(),
            is_node_resource: allocation.is_node_resource,
            is_scalar_resource: allocation.is_scalar_resource,
            aggregated_quantity: allocation.allocated_quantity,
            per_numa: allocation
                .topology_assignments
                .iter()
                .map(|(&node, &amount)| NumaQuantity::new(node, bytes_f64(amount)))
                .collect(),
        })
        .collect();
    ContainerResources {
        name: holding.container.to_string(),
        cpu_ids,
        memory,
        resources,
    }
}

/// A count as the wire's double (exact below 2^53).
fn count(n: usize) -> f64 {
    bytes_f64(u64::try_from(n).unwrap_or(u64::MAX))
}

/// An amount as the wire's double (exact below 2^53).
#[allow(clippy::cast_precision_loss)]
fn bytes_f64(n: u64) -> f64 {
    n as f64
}

#[cfg(test)]
mod tests;
