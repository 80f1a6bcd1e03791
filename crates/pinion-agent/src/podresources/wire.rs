//! Pinion's podresources answers (`pinion_core::podresources`) as the wire
//! types of `v1` and `v1alpha1`: the one place where they meet the wire.

use pinion_api::podresources::{v1, v1alpha1};
use pinion_core::podresources::{
    Allocatable, AllocatableResource, ContainerResources, MemoryBlock, NumaQuantity, PodResources,
    TopologyAwareResource,
};

/// A pod for `v1`.
#[must_use]
pub fn pod(pod: PodResources) -> v1::PodResources {
    v1::PodResources {
        name: pod.name,
        namespace: pod.namespace,
        containers: pod.containers.into_iter().map(container).collect(),
        cpu_ids: pod.cpu_ids.into_iter().map(i64::from).collect(),
        memory: Vec::new(),
        pod_role: pod.pod_role,
        pod_type: pod.pod_type,
        labels: pod.labels.into_iter().collect(),
        annotations: pod.annotations.into_iter().collect(),
    }
}

fn container(c: ContainerResources) -> v1::ContainerResources {
    v1::ContainerResources {
        name: c.name,
        devices: Vec::new(),
        cpu_ids: c.cpu_ids.into_iter().map(i64::from).collect(),
        memory: c.memory.into_iter().map(memory).collect(),
        dynamic_resources: Vec::new(),
        resources: c.resources.into_iter().map(resource).collect(),
    }
}

fn memory(block: MemoryBlock) -> v1::ContainerMemory {
    v1::ContainerMemory {
        memory_type: block.memory_type,
        size: block.size,
        topology: Some(v1::TopologyInfo {
            nodes: block
                .numa_nodes
                .into_iter()
                .map(|id| v1::NumaNode { id: i64::from(id) })
                .collect(),
        }),
    }
}

fn quantity(q: NumaQuantity) -> v1::TopologyAwareQuantity {
    v1::TopologyAwareQuantity {
        resource_value: q.value,
        node: q.node,
        name: q.name,
        r#type: q.kind,
        topology_level: v1::TopologyLevel::Numa.into(),
        ..v1::TopologyAwareQuantity::default()
    }
}

fn resource(r: TopologyAwareResource) -> v1::TopologyAwareResource {
    let list: Vec<v1::TopologyAwareQuantity> = r.per_numa.into_iter().map(quantity).collect();
    v1::TopologyAwareResource {
        resource_name: r.resource_name,
        is_node_resource: r.is_node_resource,
        is_scalar_resource: r.is_scalar_resource,
        aggregated_quantity: r.aggregated_quantity,
        original_aggregated_quantity: r.aggregated_quantity,
        topology_aware_quantity_list: list.clone(),
        original_topology_aware_quantity_list: list,
    }
}

fn allocatable_resource(r: AllocatableResource) -> v1::AllocatableTopologyAwareResource {
    v1::AllocatableTopologyAwareResource {
        resource_name: r.resource_name,
        is_node_resource: r.is_node_resource,
        is_scalar_resource: r.is_scalar_resource,
        aggregated_allocatable_quantity: r.allocatable,
        topology_aware_allocatable_quantity_list: r
            .allocatable_per_numa
            .into_iter()
            .map(quantity)
            .collect(),
        aggregated_capacity_quantity: r.capacity,
        topology_aware_capacity_quantity_list: r
            .capacity_per_numa
            .into_iter()
            .map(quantity)
            .collect(),
    }
}

/// `GetAllocatableResources`' answer.
#[must_use]
pub fn allocatable(a: Allocatable) -> v1::AllocatableResourcesResponse {
    v1::AllocatableResourcesResponse {
        devices: Vec::new(),
        cpu_ids: a.cpu_ids.into_iter().map(i64::from).collect(),
        memory: a.memory.into_iter().map(memory).collect(),
        resources: a.resources.into_iter().map(allocatable_resource).collect(),
    }
}

/// A pod for the legacy `v1alpha1` (name, namespace, container names).
#[must_use]
pub fn pod_v1alpha1(pod: PodResources) -> v1alpha1::PodResources {
    v1alpha1::PodResources {
        name: pod.name,
        namespace: pod.namespace,
        containers: pod
            .containers
            .into_iter()
            .map(|c| v1alpha1::ContainerResources {
                name: c.name,
                devices: Vec::new(),
            })
            .collect(),
    }
}
