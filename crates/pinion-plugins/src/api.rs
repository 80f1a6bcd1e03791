//! The wire-agnostic plugin interface: plain structs with the meanings of
//! the resource-plugin messages (spec `qrm.md` §2.3), and the trait every
//! Pinion plugin implements. The gRPC layer converts these to and from
//! protobuf; nothing here knows about the wire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::PluginError;

/// `ContainerType` (which one a container is: `pinion_core::qrm_rules`).
pub use pinion_core::qrm_rules::ContainerType;

/// `TopologyHint`: NUMA node ids (ascending) and whether it is preferred.
/// Empty `nodes` in a request's hint means "any node".
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hint {
    pub nodes: Vec<u64>,
    pub preferred: bool,
}

/// `ResourceRequest` (fields 1–14).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub pod_uid: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub container_name: String,
    pub container_type: ContainerType,
    pub container_index: u64,
    pub pod_role: String,
    pub pod_type: String,
    /// The plugin's registered resource name.
    pub resource_name: String,
    /// The Topology Manager's choice (absent when the plugin is not
    /// topology-aligned or the manager has none).
    pub hint: Option<Hint>,
    /// Exactly one entry, keyed by `resource_name` (katalyst's rule).
    pub resource_requests: BTreeMap<String, f64>,
    pub labels: BTreeMap<String, String>,
    /// The pod's annotations, raw (katalyst's QoS annotations live here).
    pub annotations: BTreeMap<String, String>,
    /// `Guaranteed`, `Burstable`, `BestEffort` (empty when the manager does
    /// not fill it).
    pub native_qos_class: String,
    /// Pinion's extension (field 1000, which katalyst's decoders skip): the
    /// limit, keyed like `resource_requests`; empty without a limit.
    #[serde(default)]
    pub resource_limits: BTreeMap<String, f64>,
}

/// `ResourceAllocationInfo` (fields 1–9).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocationInfo {
    /// `CpusetCpus`, `CpusetMems`, or empty (envs/annotations only).
    pub oci_property_name: String,
    pub is_node_resource: bool,
    pub is_scalar_resource: bool,
    pub allocated_quantity: f64,
    /// The value for the OCI property (a cpulist for the cpusets).
    pub allocation_result: String,
    pub envs: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The hints the allocation was made for (replayed after a restart);
    /// empty = no NUMA preference.
    pub resource_hints: Vec<Hint>,
    /// NUMA id → amount on that node.
    pub topology_assignments: BTreeMap<u64, u64>,
}

/// `ResourceAllocation`: resource name → allocation (one plugin may answer
/// for accompanying resources too).
pub type Allocation = BTreeMap<String, AllocationInfo>;

/// `GetResourcesAllocationResponse`: pod UID → container → resource → info.
pub type Allocations = BTreeMap<String, BTreeMap<String, Allocation>>;

/// `ResourcePluginOptions` (fields 1–3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    pub pre_start_required: bool,
    pub with_topology_alignment: bool,
    pub need_reconcile: bool,
}

/// `TopologyLevel`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TopologyLevel {
    #[default]
    Numa,
    Socket,
}

/// `TopologyAwareQuantity`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopologyAwareQuantity {
    pub resource_value: f64,
    /// NUMA (or socket) id.
    pub node: u64,
    /// Provider object (a NIC name); empty for CPUs and memory.
    pub name: String,
    /// Provider kind (`NIC`); empty for CPUs and memory.
    pub kind: String,
    pub topology_level: TopologyLevel,
    pub annotations: BTreeMap<String, String>,
}

impl TopologyAwareQuantity {
    /// A plain per-NUMA amount.
    #[must_use]
    pub fn numa(node: u64, value: f64) -> Self {
        Self {
            resource_value: value,
            node,
            ..Self::default()
        }
    }
}

/// `TopologyAwareResource` (resource-plugin package).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopologyAwareResource {
    pub is_node_resource: bool,
    pub is_scalar_resource: bool,
    pub aggregated_quantity: f64,
    pub original_aggregated_quantity: f64,
    pub topology_aware_quantity_list: Vec<TopologyAwareQuantity>,
    pub original_topology_aware_quantity_list: Vec<TopologyAwareQuantity>,
}

/// `AllocatableTopologyAwareResource`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AllocatableResource {
    pub is_node_resource: bool,
    pub is_scalar_resource: bool,
    pub aggregated_allocatable_quantity: f64,
    pub topology_aware_allocatable_quantity_list: Vec<TopologyAwareQuantity>,
    pub aggregated_capacity_quantity: f64,
    pub topology_aware_capacity_quantity_list: Vec<TopologyAwareQuantity>,
}

/// One resource plugin, as the manager (in the agent, or the gRPC server of
/// `pinion plugin serve`) calls it. Mirrors the `ResourcePlugin` RPCs
/// katalyst's managers use (1, 3–8).
pub trait ResourcePlugin: Send {
    /// The registered resource name (`cpu`, `memory`, …): `PluginInfo.name`
    /// and the key of hints and allocations.
    fn resource_name(&self) -> &str;

    /// `GetResourcePluginOptions`.
    fn options(&self) -> Options;

    /// `GetTopologyHints`: `Ok(None)` = no preference (the nil map value),
    /// `Ok(Some(empty))` = cannot be satisfied, else the hints. By default
    /// no preference: a plugin without topology alignment has none.
    fn topology_hints(&self, _request: &Request) -> Result<Option<Vec<Hint>>, PluginError> {
        Ok(None)
    }

    /// `Allocate`: `Ok(None)` = an answer without `allocation_result`
    /// (nothing to apply, e.g. init containers).
    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError>;

    /// `GetResourcesAllocation`: every container the plugin tracks.
    fn allocations(&self) -> Allocations;

    /// `RemovePod`: idempotent (an unknown pod is a success).
    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError>;

    /// `GetTopologyAwareResources`: resource name → resource, for one
    /// container; an unknown container is [`PluginError::UnknownContainer`].
    /// By default none: a plugin without topology-aware resources (NUMA
    /// placement of what it hands out) need not answer more.
    fn topology_aware_resources(
        &self,
        _pod_uid: &str,
        _container: &str,
    ) -> Result<BTreeMap<String, TopologyAwareResource>, PluginError> {
        Ok(BTreeMap::new())
    }

    /// `GetTopologyAwareAllocatableResources`: resource name → resource.
    /// By default none, as [`ResourcePlugin::topology_aware_resources`].
    fn allocatable_resources(&self) -> BTreeMap<String, AllocatableResource> {
        BTreeMap::new()
    }
}

/// A plugin chosen at run time ([`crate::builtin::open`]) is a plugin.
impl ResourcePlugin for Box<dyn ResourcePlugin> {
    fn resource_name(&self) -> &str {
        (**self).resource_name()
    }

    fn options(&self) -> Options {
        (**self).options()
    }

    fn topology_hints(&self, request: &Request) -> Result<Option<Vec<Hint>>, PluginError> {
        (**self).topology_hints(request)
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        (**self).allocate(request)
    }

    fn allocations(&self) -> Allocations {
        (**self).allocations()
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        (**self).remove_pod(pod_uid)
    }

    fn topology_aware_resources(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<BTreeMap<String, TopologyAwareResource>, PluginError> {
        (**self).topology_aware_resources(pod_uid, container)
    }

    fn allocatable_resources(&self) -> BTreeMap<String, AllocatableResource> {
        (**self).allocatable_resources()
    }
}
