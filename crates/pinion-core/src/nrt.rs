//! The NodeResourceTopology (`topology.node.k8s.io/v1alpha2`) content Pinion
//! publishes for its node (spec `nrt.md`; `docs/nrt.md`): a pure function of
//! the topology, what podresources reports (allocatable and the pods'
//! holdings, `crate::podresources`) and the pods' specs.
//!
//! Field by field it is what resource-topology-exporter would publish from
//! the same podresources answers (spec §2):
//!
//! * one zone per NUMA node, `node-<id>`, type `Node`, costs = the node's
//!   distances (`node-<dst>` = distance, its own entry included);
//! * `cpu`: capacity = the zone's logical CPUs, allocatable = its
//!   allocatable CPU ids (every CPU but the reserved ones under the static
//!   policy, none otherwise), available = allocatable − the CPU ids
//!   containers hold exclusively — exclusive CPUs counted as kubelet counts
//!   them, shared-pool containers hold none;
//! * `memory`: the zone's memory blocks, less the memory blocks of
//!   containers bound to the zone (a block naming several zones is charged
//!   to each, as the exporter does);
//! * `hugepages-<size>`: the zone's configured pages (capacity =
//!   allocatable) less what containers hold;
//! * every other resource the resource plugins report
//!   (`GetTopologyAwareAllocatableResources`), less the containers'
//!   allocations on that zone; a zone gets a resource only where the plugin
//!   reports it;
//! * available is clamped at 0; a missing capacity is the allocatable, and
//!   capacity is raised to allocatable when lower;
//! * top-level attributes: the pods fingerprint and its method, then
//!   `topologyManagerScope`, `topologyManagerPolicy`.
//!
//! Pinion's own attributes ([`fit`]) follow, named `pinion.io/…`.

pub mod fingerprint;
pub mod fit;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::alloc::AllocOptions;
use crate::cpuset::CpuSet;
use crate::pod::Pod;
use crate::podresources::{
    allocatable, with_plugin_resources, Allocatable, AllocatableResource, PodResources, MEMORY,
};
use crate::policy::Policy;
use crate::topology::Topology;

pub use fingerprint::Method;
pub use fit::FitInput;

/// The API group and version of the object.
pub const API_VERSION: &str = "topology.node.k8s.io/v1alpha2";
/// The object's kind.
pub const KIND: &str = "NodeResourceTopology";
/// The zone type of a NUMA node.
pub const ZONE_TYPE_NODE: &str = "Node";
/// The top-level attribute naming the Topology Manager policy.
pub const ATTRIBUTE_POLICY: &str = "topologyManagerPolicy";
/// The top-level attribute naming the Topology Manager scope.
pub const ATTRIBUTE_SCOPE: &str = "topologyManagerScope";

/// What Pinion publishes: the object's zones and attributes (the object's
/// name is the node's; metadata is the publisher's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nrt {
    pub zones: Vec<Zone>,
    #[serde(default)]
    pub attributes: Vec<Attribute>,
}

/// One NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zone {
    pub name: String,
    #[serde(rename = "type")]
    pub zone_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<Cost>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<Attribute>,
    #[serde(default)]
    pub resources: Vec<Resource>,
}

/// A resource of a zone; quantities in Kubernetes notation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    pub name: String,
    pub capacity: String,
    pub allocatable: String,
    pub available: String,
}

/// The distance to another zone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    pub name: String,
    pub value: i64,
}

/// A named value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    pub name: String,
    pub value: String,
}

impl Attribute {
    #[must_use]
    pub fn new(name: &str, value: &impl ToString) -> Self {
        Self {
            name: name.to_string(),
            value: value.to_string(),
        }
    }
}

impl Nrt {
    /// The value of top-level attribute `name` (the first one, as the API's
    /// helpers read it).
    #[must_use]
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.value.as_str())
    }

    /// The pods fingerprint.
    #[must_use]
    pub fn fingerprint(&self) -> Option<&str> {
        self.attribute(fingerprint::ATTRIBUTE)
    }
}

/// The whole object for node `node_name`: apiVersion, kind, metadata (the
/// name, the fingerprint's legacy annotation, the Node as owner when its
/// UID is known), zones and attributes.
#[must_use]
pub fn object(node_name: &str, content: &Nrt, owner_uid: Option<&str>) -> serde_json::Value {
    let mut metadata = serde_json::json!({ "name": node_name });
    if let Some(signature) = content.fingerprint() {
        metadata["annotations"] = serde_json::json!({ fingerprint::ANNOTATION: signature });
    }
    if let Some(uid) = owner_uid {
        metadata["ownerReferences"] = serde_json::json!([{
            "apiVersion": "v1",
            "kind": "Node",
            "name": node_name,
            "uid": uid,
        }]);
    }
    serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "zones": content.zones,
        "attributes": content.attributes,
    })
}

/// The zone name of NUMA node `id` (`node-<id>`).
#[must_use]
pub fn zone_name(id: u32) -> String {
    format!("node-{id}")
}

/// One hugepage pool of a NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugePages {
    pub node: u32,
    /// `hugepages-2Mi`, `hugepages-1Gi`, …
    pub resource: String,
    /// Bytes configured.
    pub bytes: u64,
}

/// Everything the content is computed from.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub topology: &'a Topology,
    /// podresources' `GetAllocatableResources` (with the plugins' node
    /// resources: `podresources::with_plugin_resources`).
    pub allocatable: &'a Allocatable,
    /// podresources' `List`.
    pub holdings: &'a [PodResources],
    /// The node's hugepage pools.
    pub hugepages: &'a [HugePages],
    /// The Kubernetes pods on the node (the fingerprint's set before the
    /// method's filter): standalone runs are not pods of the cluster.
    pub pods: &'a [&'a Pod],
    pub method: Method,
    /// kubelet's spelling: `none`, `best-effort`, `restricted`,
    /// `single-numa-node`.
    pub topology_manager_policy: &'a str,
    /// `container` or `pod`.
    pub topology_manager_scope: &'a str,
    /// Pinion's extension attributes: computed when given (the static
    /// policy hands out exclusive CPUs).
    pub fit: Option<FitInput<'a>>,
}

/// What does not change while a node runs: its machine, its policies and
/// the method of the fingerprint.
#[derive(Debug, Clone)]
pub struct Node {
    /// The static policy's reserved CPUs and allocation options; `None`
    /// under a policy that hands out no exclusive CPUs.
    pub exclusive: Option<(CpuSet, AllocOptions)>,
    pub topology_manager_policy: String,
    pub topology_manager_scope: String,
    pub hugepages: Vec<HugePages>,
    pub method: Method,
}

impl Node {
    /// The node under `policy`, with the Topology Manager's `policy` and
    /// `scope` as configured (absent: kubelet's defaults `none`, `container`).
    #[must_use]
    pub fn new(
        policy: &Policy,
        topology_manager_policy: Option<&str>,
        topology_manager_scope: Option<&str>,
        hugepages: Vec<HugePages>,
        method: Method,
    ) -> Self {
        let exclusive = match policy {
            Policy::None => None,
            Policy::Static(p) => Some((p.reserved().clone(), p.options().alloc_options())),
        };
        Self {
            exclusive,
            topology_manager_policy: topology_manager_policy.unwrap_or("none").to_string(),
            topology_manager_scope: topology_manager_scope.unwrap_or("container").to_string(),
            hugepages,
            method,
        }
    }
}

/// What the node holds now.
#[derive(Debug, Clone, Copy)]
pub struct Now<'a> {
    /// The static policy's default set (the shared pool, reserved CPUs in it).
    pub default: &'a CpuSet,
    /// The resource plugins' node resources.
    pub plugin_resources: &'a [AllocatableResource],
    /// podresources' `List`.
    pub holdings: &'a [PodResources],
    /// The Kubernetes pods on the node.
    pub pods: &'a [&'a Pod],
}

/// The content `node` publishes on `topology` with `now`'s holdings: the
/// allocatable resources as podresources reports them, then [`build`].
#[must_use]
pub fn content(topology: &Topology, node: &Node, now: &Now<'_>) -> Nrt {
    let no_reservation = CpuSet::new();
    let reserved = node.exclusive.as_ref().map_or(&no_reservation, |(r, _)| r);
    let allocatable = with_plugin_resources(
        allocatable(topology, node.exclusive.is_some(), reserved),
        now.plugin_resources,
    );
    build(&Input {
        topology,
        allocatable: &allocatable,
        holdings: now.holdings,
        hugepages: &node.hugepages,
        pods: now.pods,
        method: node.method,
        topology_manager_policy: &node.topology_manager_policy,
        topology_manager_scope: &node.topology_manager_scope,
        fit: node.exclusive.as_ref().map(|(reserved, options)| FitInput {
            default: now.default,
            reserved,
            options: *options,
        }),
    })
}

/// Per zone, per resource: (capacity, allocatable, used).
type Counters = BTreeMap<u32, BTreeMap<String, Amounts>>;

#[derive(Debug, Clone, Copy, Default)]
struct Amounts {
    capacity: f64,
    allocatable: f64,
    used: f64,
}

/// The content for `input`.
#[must_use]
pub fn build(input: &Input<'_>) -> Nrt {
    let counters = counters(input);
    let zones: Vec<Zone> = input
        .topology
        .numa_nodes()
        .iter()
        .map(|node| {
            let resources = counters
                .get(&node.id)
                .map(sorted_resources)
                .unwrap_or_default();
            Zone {
                name: zone_name(node.id),
                zone_type: ZONE_TYPE_NODE.to_string(),
                costs: costs(input.topology, &node.distances),
                attributes: input
                    .fit
                    .map(|fit| fit::zone_attributes(input.topology, node.id, &fit))
                    .unwrap_or_default(),
                resources,
            }
        })
        .collect();
    let exposed: BTreeSet<String> = zones
        .iter()
        .flat_map(|z| z.resources.iter().map(|r| r.name.clone()))
        .collect();
    let signature = fingerprint::pods_fingerprint(input.method, input.pods, &exposed);
    let mut attributes = vec![
        Attribute::new(fingerprint::ATTRIBUTE, &signature),
        Attribute::new(fingerprint::ATTRIBUTE_METHOD, &input.method.as_str()),
        Attribute::new(ATTRIBUTE_SCOPE, &input.topology_manager_scope),
        Attribute::new(ATTRIBUTE_POLICY, &input.topology_manager_policy),
    ];
    if let Some(fit) = &input.fit {
        attributes.extend(fit::node_attributes(input.topology, fit));
    }
    Nrt { zones, attributes }
}

fn costs(topology: &Topology, distances: &[u32]) -> Vec<Cost> {
    topology
        .numa_nodes()
        .iter()
        .zip(distances)
        .map(|(to, &distance)| Cost {
            name: zone_name(to.id),
            value: i64::from(distance),
        })
        .collect()
}

fn counters(input: &Input<'_>) -> Counters {
    let topology = input.topology;
    let mut out = Counters::new();
    for node in topology.numa_nodes() {
        let cpus = topology.numa_cpus().get(&node.id).map_or(0, |c| c.len());
        out.entry(node.id).or_default().insert(
            "cpu".to_string(),
            Amounts {
                capacity: count(cpus),
                ..Amounts::default()
            },
        );
    }
    for &cpu in &input.allocatable.cpu_ids {
        if let Some(amounts) = cpu_entry(&mut out, topology, cpu) {
            amounts.allocatable += 1.0;
        }
    }
    for block in &input.allocatable.memory {
        for &node in &block.numa_nodes {
            let amounts = entry(&mut out, node, &block.memory_type);
            amounts.allocatable += bytes(block.size);
            amounts.capacity += bytes(block.size);
        }
    }
    for pool in input.hugepages {
        if pool.bytes > 0 {
            let amounts = entry(&mut out, pool.node, &pool.resource);
            amounts.allocatable += bytes(pool.bytes);
            amounts.capacity += bytes(pool.bytes);
        }
    }
    for resource in &input.allocatable.resources {
        if resource.resource_name == "cpu" || resource.resource_name == MEMORY {
            continue;
        }
        // A plugin may name several providers on one node (a NIC each):
        // their amounts add up.
        let mut per_node: BTreeMap<u32, Amounts> = BTreeMap::new();
        for quantity in &resource.allocatable_per_numa {
            if let Ok(node) = u32::try_from(quantity.node) {
                per_node.entry(node).or_default().allocatable += quantity.value;
            }
        }
        for quantity in &resource.capacity_per_numa {
            if let Some(amounts) = u32::try_from(quantity.node)
                .ok()
                .and_then(|node| per_node.get_mut(&node))
            {
                amounts.capacity += quantity.value;
            }
        }
        for (node, amounts) in per_node {
            if !out.contains_key(&node) {
                continue;
            }
            // A plugin's answer replaces what sysfs says (hugepages).
            *entry(&mut out, node, &resource.resource_name) = amounts;
        }
    }
    charge_holdings(&mut out, topology, input.holdings);
    out
}

/// Subtracts what the containers hold: exclusive CPU ids, memory blocks on
/// each of their zones, the plugins' per-zone allocations; and the CPUs of
/// a pod-level CPU set (`cpu_ids` of the pod) none of its containers holds
/// yet — they are the pod's, not free.
fn charge_holdings(out: &mut Counters, topology: &Topology, holdings: &[PodResources]) {
    for pod in holdings {
        let held: std::collections::BTreeSet<u32> = pod
            .containers
            .iter()
            .flat_map(|c| c.cpu_ids.iter().copied())
            .collect();
        for &cpu in pod.cpu_ids.iter().filter(|cpu| !held.contains(cpu)) {
            if let Some(amounts) = cpu_entry(out, topology, cpu) {
                amounts.used += 1.0;
            }
        }
    }
    for container in holdings.iter().flat_map(|p| &p.containers) {
        for &cpu in &container.cpu_ids {
            if let Some(amounts) = cpu_entry(out, topology, cpu) {
                amounts.used += 1.0;
            }
        }
        for block in container.memory.iter().filter(|b| b.size > 0) {
            for &node in &block.numa_nodes {
                charge(out, node, &block.memory_type, bytes(block.size));
            }
        }
        for resource in &container.resources {
            if resource.resource_name == "cpu" || resource.resource_name == MEMORY {
                continue;
            }
            for quantity in &resource.per_numa {
                if let Ok(node) = u32::try_from(quantity.node) {
                    charge(out, node, &resource.resource_name, quantity.value);
                }
            }
        }
    }
}

fn cpu_entry<'c>(out: &'c mut Counters, topology: &Topology, cpu: u32) -> Option<&'c mut Amounts> {
    let node = topology.cpu(cpu)?.numa;
    out.get_mut(&node)?.get_mut("cpu")
}

/// Charges `amount` of `resource` on `node` when the zone exposes it.
fn charge(out: &mut Counters, node: u32, resource: &str, amount: f64) {
    if let Some(amounts) = out.get_mut(&node).and_then(|r| r.get_mut(resource)) {
        amounts.used += amount;
    }
}

fn entry<'c>(out: &'c mut Counters, node: u32, resource: &str) -> &'c mut Amounts {
    out.entry(node)
        .or_default()
        .entry(resource.to_string())
        .or_default()
}

/// `cpu`, `memory`, the hugepages, then the rest by name.
fn sorted_resources(per_resource: &BTreeMap<String, Amounts>) -> Vec<Resource> {
    let rank = |name: &str| match name {
        "cpu" => 0,
        MEMORY => 1,
        _ if name.starts_with("hugepages-") => 2,
        _ => 3,
    };
    let mut names: Vec<&String> = per_resource.keys().collect();
    names.sort_by(|a, b| (rank(a), *a).cmp(&(rank(b), *b)));
    names
        .into_iter()
        .map(|name| {
            let amounts = per_resource[name];
            let allocatable = amounts.allocatable.max(0.0);
            let capacity = if amounts.capacity <= 0.0 {
                allocatable
            } else {
                amounts.capacity.max(allocatable)
            };
            Resource {
                name: name.clone(),
                capacity: quantity(capacity),
                allocatable: quantity(allocatable),
                available: quantity((allocatable - amounts.used).max(0.0)),
            }
        })
        .collect()
}

/// A non-negative amount in Kubernetes notation: a whole number as is,
/// anything else in thousandths (`1500m`).
#[must_use]
pub fn quantity(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{:.0}m", (value * 1000.0).round())
    }
}

/// A count as an amount (exact below 2^53).
fn count(n: usize) -> f64 {
    bytes(u64::try_from(n).unwrap_or(u64::MAX))
}

/// Bytes as an amount (exact below 2^53).
#[allow(clippy::cast_precision_loss)]
fn bytes(n: u64) -> f64 {
    n as f64
}
