//! Between the resource-plugin wire types and Pinion's own allocations
//! (requests and hints: `pinion_plugins::qrm_request` and `grpc`).

use pinion_api::resourceplugin as rp;
use pinion_core::plugin_allocation::{PluginAllocation, PluginAllocations, PluginHint};

/// A plugin's `AllocatableTopologyAwareResource` for `name` as Pinion's
/// node resource (per-NUMA amounts of the NUMA level only, with what
/// provides them — a NIC's name and type; other levels, which no plugin
/// Pinion knows reports, are left out).
#[must_use]
pub fn node_resource(
    name: &str,
    wire: &rp::AllocatableTopologyAwareResource,
) -> pinion_core::podresources::AllocatableResource {
    let numa = |list: &[rp::TopologyAwareQuantity]| {
        list.iter()
            .filter(|q| q.topology_level == rp::TopologyLevel::Numa as i32)
            .map(|q| pinion_core::podresources::NumaQuantity {
                node: q.node,
                value: q.resource_value,
                name: q.name.clone(),
                kind: q.r#type.clone(),
            })
            .collect()
    };
    pinion_core::podresources::AllocatableResource {
        resource_name: name.to_string(),
        is_node_resource: wire.is_node_resource,
        is_scalar_resource: wire.is_scalar_resource,
        allocatable: wire.aggregated_allocatable_quantity,
        allocatable_per_numa: numa(&wire.topology_aware_allocatable_quantity_list),
        capacity: wire.aggregated_capacity_quantity,
        capacity_per_numa: numa(&wire.topology_aware_capacity_quantity_list),
    }
}

/// A plugin's allocation answered in the agent's process as Pinion's:
/// what [`allocation`] makes of it after the wire (no hints = `None`).
#[must_use]
pub fn in_process_allocation(info: &pinion_plugins::AllocationInfo) -> PluginAllocation {
    PluginAllocation {
        oci_property_name: info.oci_property_name.clone(),
        is_node_resource: info.is_node_resource,
        is_scalar_resource: info.is_scalar_resource,
        allocated_quantity: info.allocated_quantity,
        allocation_result: info.allocation_result.clone(),
        envs: info.envs.clone(),
        annotations: info.annotations.clone(),
        resource_hints: (!info.resource_hints.is_empty())
            .then(|| hints(info.resource_hints.iter().map(|h| (&h.nodes, h.preferred)))),
        topology_assignments: info.topology_assignments.clone(),
    }
}

/// A plugin's answer for one container, answered in the agent's process.
#[must_use]
pub fn in_process_allocations(
    allocation: &pinion_plugins::Allocation,
) -> pinion_core::plugin_allocation::PluginAllocations {
    allocation
        .iter()
        .map(|(name, info)| (name.clone(), in_process_allocation(info)))
        .collect()
}

/// A wire answer for one container (resource → allocation) as Pinion's,
/// taking its parts rather than copying them (a reconcile answer may be
/// large); entries without a value are skipped and a resource named twice
/// keeps its last entry, as `pinion_api::entries::allocation_map` reads it.
#[must_use]
pub fn allocations(allocation: rp::ResourceAllocation) -> PluginAllocations {
    allocation
        .resource_allocation
        .into_iter()
        .filter_map(|entry| Some((entry.key, into_allocation(entry.value?))))
        .collect()
}

/// [`allocation`], taking the wire value's parts.
#[must_use]
pub fn into_allocation(info: rp::ResourceAllocationInfo) -> PluginAllocation {
    PluginAllocation {
        oci_property_name: info.oci_property_name,
        is_node_resource: info.is_node_resource,
        is_scalar_resource: info.is_scalar_resource,
        allocated_quantity: info.allocated_quantity,
        allocation_result: info.allocation_result,
        envs: info.envs,
        annotations: info.annotations,
        resource_hints: info
            .resource_hints
            .map(|list| hints(list.hints.iter().map(|h| (&h.nodes, h.preferred)))),
        topology_assignments: info.topology_assignments,
    }
}

/// A wire allocation as Pinion's.
#[must_use]
pub fn allocation(info: &rp::ResourceAllocationInfo) -> PluginAllocation {
    PluginAllocation {
        oci_property_name: info.oci_property_name.clone(),
        is_node_resource: info.is_node_resource,
        is_scalar_resource: info.is_scalar_resource,
        allocated_quantity: info.allocated_quantity,
        allocation_result: info.allocation_result.clone(),
        envs: info.envs.clone(),
        annotations: info.annotations.clone(),
        resource_hints: info
            .resource_hints
            .as_ref()
            .map(|list| hints(list.hints.iter().map(|h| (&h.nodes, h.preferred)))),
        topology_assignments: info.topology_assignments.clone(),
    }
}

/// A plugin's hints (nodes, preferred) as Pinion's, from either transport.
fn hints<'a>(list: impl Iterator<Item = (&'a Vec<u64>, bool)>) -> Vec<PluginHint> {
    list.map(|(nodes, preferred)| PluginHint {
        nodes: nodes.clone(),
        preferred,
    })
    .collect()
}

/// Pinion's allocation on the wire.
#[must_use]
pub fn wire_allocation(allocation: &PluginAllocation) -> rp::ResourceAllocationInfo {
    rp::ResourceAllocationInfo {
        oci_property_name: allocation.oci_property_name.clone(),
        is_node_resource: allocation.is_node_resource,
        is_scalar_resource: allocation.is_scalar_resource,
        allocated_quantity: allocation.allocated_quantity,
        allocation_result: allocation.allocation_result.clone(),
        envs: allocation.envs.clone(),
        annotations: allocation.annotations.clone(),
        resource_hints: allocation
            .resource_hints
            .as_ref()
            .map(|hints| rp::ListOfTopologyHints {
                hints: hints
                    .iter()
                    .map(|h| rp::TopologyHint {
                        nodes: h.nodes.clone(),
                        preferred: h.preferred,
                    })
                    .collect(),
            }),
        topology_assignments: allocation
            .topology_assignments
            .clone()
            .into_iter()
            .collect(),
        mounts: Vec::new(),
        devices: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_round_trip() {
        let info = rp::ResourceAllocationInfo {
            oci_property_name: "CpusetCpus".into(),
            is_scalar_resource: true,
            allocated_quantity: 4.0,
            allocation_result: "2-5".into(),
            envs: [("A".to_string(), "1".to_string())].into(),
            annotations: [("k".to_string(), "v".to_string())].into(),
            resource_hints: Some(rp::ListOfTopologyHints {
                hints: vec![rp::TopologyHint {
                    nodes: vec![0],
                    preferred: true,
                }],
            }),
            topology_assignments: [(0, 4)].into(),
            ..rp::ResourceAllocationInfo::default()
        };
        assert_eq!(wire_allocation(&allocation(&info)), info);
        assert_eq!(into_allocation(info.clone()), allocation(&info));
        let entry =
            |key: &str, value: Option<rp::ResourceAllocationInfo>| rp::ResourceAllocationEntry {
                key: key.into(),
                value,
            };
        let mut other = info.clone();
        other.allocation_result = "6-7".into();
        let answer = rp::ResourceAllocation {
            resource_allocation: vec![
                entry("cpu", Some(info.clone())),
                entry("memory", None),
                entry("cpu", Some(other.clone())),
            ],
        };
        let want: PluginAllocations = pinion_api::entries::allocation_map(&answer)
            .iter()
            .map(|(name, info)| (name.clone(), allocation(info)))
            .collect();
        assert_eq!(allocations(answer), want);
        assert_eq!(want["cpu"].allocation_result, "6-7");
    }
}
