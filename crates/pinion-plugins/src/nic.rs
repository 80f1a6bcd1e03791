//! The NIC plugin: NUMA-affine NICs shared by several pods (the seed's
//! example 3).
//!
//! The resource is katalyst's `resource.katalyst.kubewharf.io/net_bandwidth`
//! by default (configurable, `resourceName`): a pod reaches a resource
//! plugin only through a resource it requests, and bandwidth is what a pod
//! can meaningfully ask of a shared NIC. The quantity is accounted per NIC
//! against its link speed (Mb/s) when the driver reports one; a NIC of
//! unknown speed takes any number of pods.
//!
//! * Hints: one per NUMA node — preferred where a suitable NIC sits, not
//!   preferred elsewhere when a NIC without NUMA information could serve —
//!   plus every node together (not preferred), filtered by `numa_ids` /
//!   `numa_number`; no suitable NIC at all = cannot be satisfied.
//! * `namespace_type` (`network_enhancement`): `host_ns` / `anti_host_ns`
//!   restrict to NICs in / outside the host network namespace, the
//!   `_preferred` forms prefer them.
//! * Allocation: the least-loaded suitable NIC on the hint's nodes (else any
//!   suitable one); environment `AFFINITY_NIC_NAME`,
//!   `AFFINITY_NIC_ADDR_IPV4`, `AFFINITY_NIC_ADDR_IPV6` (first global
//!   address of each family) and, for a NIC in another namespace, the
//!   annotation `kubernetes.io/host-netns-path`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use pinion_core::qos::NamespaceType;
use pinion_core::{CpuSet, Topology};
use pinion_host::net::Nic;
use serde::{Deserialize, Serialize};

use crate::api::{
    AllocatableResource, Allocation, AllocationInfo, Allocations, Hint, Options, Request,
    ResourcePlugin, TopologyAwareQuantity, TopologyAwareResource,
};
use crate::hints as wire;
use crate::store::{Changed, StateFile, Store};
use crate::{request, PluginError};

/// The default resource name.
pub const DEFAULT_RESOURCE: &str = "resource.katalyst.kubewharf.io/net_bandwidth";
/// Its state file.
pub const STATE_FILE: &str = "pinion_nic_plugin_state.json";
/// Environment variables and annotation of an allocation.
pub const ENV_NIC_NAME: &str = "AFFINITY_NIC_NAME";
pub const ENV_NIC_IPV4: &str = "AFFINITY_NIC_ADDR_IPV4";
pub const ENV_NIC_IPV6: &str = "AFFINITY_NIC_ADDR_IPV6";
pub const NETNS_ANNOTATION: &str = "kubernetes.io/host-netns-path";

/// A configured network namespace (agent config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetnsConfig {
    pub name: String,
    /// The namespace file (`/var/run/netns/ns1`).
    pub path: String,
    /// A root whose `sys/class/net` shows the namespace's interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysfs_root: Option<String>,
}

/// Configuration (agent config `qosResourceManager.plugins.nic`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct NicPluginConfig {
    pub resource_name: String,
    pub namespaces: Vec<NetnsConfig>,
}

impl Default for NicPluginConfig {
    fn default() -> Self {
        Self {
            resource_name: DEFAULT_RESOURCE.to_string(),
            namespaces: Vec::new(),
        }
    }
}

impl NicPluginConfig {
    /// The namespaces for `pinion_host::net::discover_nics`.
    #[must_use]
    pub fn netns(&self) -> Vec<pinion_host::net::Netns> {
        self.namespaces
            .iter()
            .map(|ns| pinion_host::net::Netns {
                name: ns.name.clone(),
                path: ns.path.clone().into(),
                sysfs_root: ns.sysfs_root.clone().map(Into::into),
            })
            .collect()
    }
}

/// One container's NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicMember {
    pub nic: String,
    /// The namespace name (`None` = host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// The requested amount (Mb/s).
    pub amount: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<Hint>,
}

/// What the NIC plugin remembers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicState {
    pub containers: BTreeMap<String, BTreeMap<String, NicMember>>,
}

crate::pod_keyed_entries!(NicState { containers });

/// The NIC plugin.
#[derive(Debug)]
pub struct NicPlugin {
    resource: String,
    nodes: CpuSet,
    nics: Vec<Nic>,
    state: NicState,
    store: Store,
}

impl NicPlugin {
    /// A plugin over `nics` (`pinion_host::net::discover_nics`) on a machine
    /// with `topology`'s NUMA nodes.
    pub fn open(
        topology: &Topology,
        nics: Vec<Nic>,
        config: &NicPluginConfig,
        state_dir: Option<&Path>,
    ) -> Result<Self, PluginError> {
        Self::open_with_store(
            topology,
            nics,
            config,
            StateFile::new(state_dir, STATE_FILE).into(),
        )
    }

    /// [`NicPlugin::open`] with its state in `store`.
    pub fn open_with_store(
        topology: &Topology,
        nics: Vec<Nic>,
        config: &NicPluginConfig,
        mut store: Store,
    ) -> Result<Self, PluginError> {
        if config.resource_name.is_empty() {
            return Err(PluginError::Config {
                plugin: "nic",
                reason: "resourceName is empty".into(),
            });
        }
        let state = store.load()?.unwrap_or_default();
        let mut nodes: CpuSet = topology.numa_nodes().iter().map(|n| n.id).collect();
        nodes.union_with(&nics.iter().filter_map(|n| n.numa).collect());
        Ok(Self {
            resource: config.resource_name.clone(),
            nodes,
            nics,
            state,
            store,
        })
    }

    /// The NICs.
    #[must_use]
    pub fn nics(&self) -> &[Nic] {
        &self.nics
    }

    fn members(&self) -> impl Iterator<Item = (&str, &str, &NicMember)> {
        self.state.containers.iter().flat_map(|(pod, containers)| {
            containers
                .iter()
                .map(move |(c, m)| (pod.as_str(), c.as_str(), m))
        })
    }

    fn member(&self, pod: &str, container: &str) -> Option<&NicMember> {
        self.state.containers.get(pod)?.get(container)
    }

    fn key(nic: &Nic) -> (Option<&str>, &str) {
        (
            nic.netns.as_ref().map(|ns| ns.name.as_str()),
            nic.name.as_str(),
        )
    }

    /// Amount given out on a NIC.
    fn load(&self, nic: &Nic) -> u64 {
        self.members()
            .filter(|(_, _, m)| (m.netns.as_deref(), m.nic.as_str()) == Self::key(nic))
            .fold(0u64, |sum, (_, _, m)| sum.saturating_add(m.amount))
    }

    /// NICs that can take `amount` for a pod of `namespace_type`, preferred
    /// ones only when there are some.
    fn candidates(&self, amount: u64, namespace_type: NamespaceType) -> Vec<&Nic> {
        let fits = |nic: &&Nic| {
            nic.speed_mbps
                .is_none_or(|speed| self.load(nic).saturating_add(amount) <= speed)
        };
        let in_host = |nic: &&Nic| nic.netns.is_none();
        let all: Vec<&Nic> = self.nics.iter().filter(fits).collect();
        let (only, prefer): (Option<bool>, Option<bool>) = match namespace_type {
            NamespaceType::Any => (None, None),
            NamespaceType::HostNs => (Some(true), None),
            NamespaceType::AntiHostNs => (Some(false), None),
            NamespaceType::HostNsPreferred => (None, Some(true)),
            NamespaceType::AntiHostNsPreferred => (None, Some(false)),
        };
        let allowed: Vec<&Nic> = all
            .into_iter()
            .filter(|nic| only.is_none_or(|host| in_host(nic) == host))
            .collect();
        match prefer {
            Some(host) if allowed.iter().any(|nic| in_host(nic) == host) => allowed
                .into_iter()
                .filter(|nic| in_host(nic) == host)
                .collect(),
            _ => allowed,
        }
    }

    fn info(&self, member: &NicMember) -> AllocationInfo {
        let nic = self
            .nics
            .iter()
            .find(|nic| Self::key(nic) == (member.netns.as_deref(), member.nic.as_str()));
        let mut envs = BTreeMap::from([(ENV_NIC_NAME.to_string(), member.nic.clone())]);
        let mut annotations = BTreeMap::new();
        let mut topology_assignments = BTreeMap::new();
        if let Some(nic) = nic {
            if let Some(v4) = nic.addresses.iter().find(|a| a.is_ipv4() && is_global(a)) {
                envs.insert(ENV_NIC_IPV4.to_string(), v4.to_string());
            }
            if let Some(v6) = nic.addresses.iter().find(|a| a.is_ipv6() && is_global(a)) {
                envs.insert(ENV_NIC_IPV6.to_string(), v6.to_string());
            }
            if let Some(ns) = &nic.netns {
                annotations.insert(NETNS_ANNOTATION.to_string(), ns.path.display().to_string());
            }
            if let Some(node) = nic.numa {
                topology_assignments.insert(u64::from(node), member.amount);
            }
        }
        AllocationInfo {
            oci_property_name: String::new(),
            is_node_resource: false,
            is_scalar_resource: true,
            allocated_quantity: member.amount as f64,
            allocation_result: member.nic.clone(),
            envs,
            annotations,
            resource_hints: member.hints.clone(),
            topology_assignments,
        }
    }
}

/// Not loopback, not link-local, not unspecified.
fn is_global(address: &IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
        IpAddr::V6(v6) => {
            !(v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

impl ResourcePlugin for NicPlugin {
    fn resource_name(&self) -> &str {
        &self.resource
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: true,
            need_reconcile: false,
        }
    }

    fn topology_hints(&self, request: &Request) -> Result<Option<Vec<Hint>>, PluginError> {
        request::check_resource(request, &self.resource)?;
        if let Some(member) = self.member(&request.pod_uid, &request.container_name) {
            return Ok((!member.hints.is_empty()).then(|| member.hints.clone()));
        }
        let amount =
            request::milli(request::quantity(request, &self.resource, |_| false)?).div_ceil(1000);
        let qos = request::qos(request)?;
        if request::is_init(request) {
            return Ok(None);
        }
        let candidates = self.candidates(amount, qos.namespace_type);
        if candidates.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let with_node: CpuSet = candidates.iter().filter_map(|nic| nic.numa).collect();
        let anywhere = candidates.iter().any(|nic| nic.numa.is_none());
        let mut hints: Vec<Hint> = self
            .nodes
            .iter()
            .filter(|node| anywhere || with_node.contains(*node))
            .map(|node| wire::of_nodes(&CpuSet::from_iter([node]), with_node.contains(node)))
            .collect();
        if self.nodes.len() > 1 {
            hints.push(wire::of_nodes(&self.nodes, false));
        }
        Ok(Some(wire::restrict(hints, &qos, &CpuSet::new())))
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        request::check_resource(request, &self.resource)?;
        let (pod, container) = (request.pod_uid.as_str(), request.container_name.as_str());
        if self.member(pod, container).is_none() {
            let amount = request::milli(request::quantity(request, &self.resource, |_| false)?)
                .div_ceil(1000);
            let qos = request::qos(request)?;
            if request::is_init(request) {
                return Ok(None);
            }
            let hint_nodes = request::hint_nodes(request);
            let candidates = self.candidates(amount, qos.namespace_type);
            let on_hint = |nic: &&&Nic| {
                hint_nodes
                    .as_ref()
                    .is_none_or(|nodes| nic.numa.is_none_or(|n| nodes.contains(n)))
            };
            let pick = |list: &[&Nic]| -> Option<Nic> {
                list.iter()
                    .min_by_key(|nic| {
                        (
                            nic.numa.is_none(),
                            self.load(nic),
                            nic.netns.is_some(),
                            nic.name.clone(),
                        )
                    })
                    .map(|nic| (*nic).clone())
            };
            let near: Vec<&Nic> = candidates.iter().filter(on_hint).copied().collect();
            let chosen =
                pick(&near)
                    .or_else(|| pick(&candidates))
                    .ok_or_else(|| PluginError::NoNic {
                        pod: format!("{}/{}", request.pod_namespace, request.pod_name),
                        namespace_type: format!("{:?}", qos.namespace_type),
                        requested: format!("{amount} {}", self.resource),
                    })?;
            let hints = match (&hint_nodes, chosen.numa) {
                (Some(nodes), _) => vec![wire::of_nodes(nodes, true)],
                (None, Some(node)) => vec![wire::of_nodes(&CpuSet::from_iter([node]), true)],
                (None, None) => Vec::new(),
            };
            let member = NicMember {
                nic: chosen.name.clone(),
                netns: chosen.netns.as_ref().map(|ns| ns.name.clone()),
                amount,
                hints,
            };
            self.state
                .containers
                .entry(pod.to_string())
                .or_default()
                .insert(container.to_string(), member);
            if let Err(err) = self.store.save(&self.state, Changed::Pod(pod)) {
                if let Some(containers) = self.state.containers.get_mut(pod) {
                    containers.remove(container);
                }
                return Err(err.into());
            }
        }
        let resource = self.resource.clone();
        Ok(self
            .member(pod, container)
            .map(|member| Allocation::from([(resource, self.info(member))])))
    }

    fn allocations(&self) -> Allocations {
        let mut all = Allocations::new();
        for (pod, container, member) in self.members() {
            all.entry(pod.to_string()).or_default().insert(
                container.to_string(),
                Allocation::from([(self.resource.clone(), self.info(member))]),
            );
        }
        all
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        if self.state.containers.remove(pod_uid).is_none() {
            return Ok(());
        }
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
                    resource: self.resource.clone(),
                    pod: pod_uid.into(),
                    container: container.into(),
                })?;
        let info = self.info(member);
        let list: Vec<TopologyAwareQuantity> = info
            .topology_assignments
            .iter()
            .map(|(&node, &amount)| TopologyAwareQuantity {
                resource_value: amount as f64,
                node,
                name: member.nic.clone(),
                kind: "NIC".into(),
                ..TopologyAwareQuantity::default()
            })
            .collect();
        Ok(BTreeMap::from([(
            self.resource.clone(),
            TopologyAwareResource {
                is_node_resource: false,
                is_scalar_resource: true,
                aggregated_quantity: member.amount as f64,
                original_aggregated_quantity: member.amount as f64,
                topology_aware_quantity_list: list.clone(),
                original_topology_aware_quantity_list: list,
            },
        )]))
    }

    fn allocatable_resources(&self) -> BTreeMap<String, AllocatableResource> {
        let list: Vec<TopologyAwareQuantity> = self
            .nics
            .iter()
            .map(|nic| TopologyAwareQuantity {
                resource_value: nic.speed_mbps.unwrap_or(0) as f64,
                node: u64::from(nic.numa.unwrap_or(0)),
                name: nic.name.clone(),
                kind: "NIC".into(),
                ..TopologyAwareQuantity::default()
            })
            .collect();
        let total: f64 = list.iter().map(|q| q.resource_value).sum();
        BTreeMap::from([(
            self.resource.clone(),
            AllocatableResource {
                is_node_resource: false,
                is_scalar_resource: true,
                aggregated_allocatable_quantity: total,
                topology_aware_allocatable_quantity_list: list.clone(),
                aggregated_capacity_quantity: total,
                topology_aware_capacity_quantity_list: list,
            },
        )])
    }
}
