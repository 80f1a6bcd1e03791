//! Any [`ResourcePlugin`] on the wire: the `resourceplugin.v1alpha1`
//! service katalyst's managers (and Pinion's) call, converting between the
//! protobuf messages and this crate's plain structs.
//!
//! The value-presence rule of spec `qrm.md` §1 holds in both directions: a
//! plugin's "no preference" (`None`) is a hints entry without a value, "cannot
//! be satisfied" (`Some(empty)`) an entry whose value is an empty list.
//! Calls run on tokio's blocking pool (a plugin writes its state file before
//! it answers), one at a time per plugin — except for a plugin whose state
//! goes to the agent's journal ([`GrpcPlugin::inline`]): it does no I/O on
//! the way to an answer and is called on the caller's thread.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use pinion_api::resourceplugin as rp;
use tonic::{Code, Request as GrpcRequest, Response, Status};

use crate::api::{
    AllocatableResource, AllocationInfo, ContainerType, Hint, Request, ResourcePlugin,
    TopologyAwareQuantity, TopologyAwareResource, TopologyLevel,
};
use crate::{ErrorKind, PluginError};

/// A plugin served over gRPC.
pub struct GrpcPlugin<P> {
    plugin: Arc<Mutex<P>>,
    /// Calls run on the blocking pool (`false`: on the caller's thread).
    blocking: bool,
}

impl<P> GrpcPlugin<P> {
    /// Serves `plugin`.
    pub fn new(plugin: P) -> Self {
        Self::shared(Arc::new(Mutex::new(plugin)))
    }

    /// Serves a plugin that others change too (the CPU plugin's closed loop
    /// and `pinion pools set`: [`crate::cpu::CpuPluginHandle`]).
    pub fn shared(plugin: Arc<Mutex<P>>) -> Self {
        Self {
            plugin,
            blocking: true,
        }
    }

    /// Calls the plugin on the caller's thread rather than the blocking
    /// pool: for a plugin that does no blocking I/O when it answers (one
    /// whose state the agent's journal keeps, `crate::store::Store`), the
    /// hop to another thread would be most of a call's cost.
    #[must_use]
    pub fn inline(mut self) -> Self {
        self.blocking = false;
        self
    }

    /// The plugin, locked, for a call on the caller's thread (only for a
    /// plugin made [`GrpcPlugin::inline`]: [`InProcess`]).
    fn in_process(&self) -> std::sync::MutexGuard<'_, P> {
        debug_assert!(
            !self.blocking,
            "called in process: the plugin must be inline"
        );
        self.plugin.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<P: ResourcePlugin + 'static> GrpcPlugin<P> {
    /// Runs `call` on the plugin off the async threads.
    async fn with<T: Send + 'static>(
        &self,
        call: impl FnOnce(&mut P) -> Result<T, PluginError> + Send + 'static,
    ) -> Result<T, Status> {
        let plugin = Arc::clone(&self.plugin);
        let run = move || {
            let mut guard = plugin.lock().unwrap_or_else(PoisonError::into_inner);
            call(&mut guard)
        };
        let answer = if self.blocking {
            tokio::task::spawn_blocking(run)
                .await
                .map_err(|err| Status::internal(format!("plugin call failed: {err}")))?
        } else {
            run()
        };
        answer.map_err(|err| status(&err))
    }
}

/// A plugin called in its caller's process without the wire (the agent's
/// built-in plugins): the plugin's own requests and answers, on the
/// caller's thread. The agent calls the admission's `Allocate`, the
/// reconcile poll and `RemovePod` this way — the calls an admission or a
/// release waits for, or that share their thread — and the rest through
/// the gRPC service of the same plugin; both lock the same plugin, so they
/// see one state.
pub trait InProcess: Send + Sync {
    /// `Allocate`.
    fn allocate(&self, request: &Request) -> Result<Option<crate::Allocation>, PluginError>;
    /// `GetResourcesAllocation`.
    fn allocations(&self) -> crate::Allocations;
    /// `RemovePod`.
    fn remove_pod(&self, pod_uid: &str) -> Result<(), PluginError>;
}

/// A plugin the agent runs: its gRPC service and its calls without the
/// wire, one object.
pub trait InProcessService: rp::resource_plugin_server::ResourcePlugin + InProcess {}

impl<T: rp::resource_plugin_server::ResourcePlugin + InProcess> InProcessService for T {}

/// Only for a plugin made [`GrpcPlugin::inline`]: the call runs on the
/// caller's thread, whatever the plugin was built with.
impl<P: ResourcePlugin + 'static> InProcess for GrpcPlugin<P> {
    fn allocate(&self, request: &Request) -> Result<Option<crate::Allocation>, PluginError> {
        self.in_process().allocate(request)
    }

    fn allocations(&self) -> crate::Allocations {
        self.in_process().allocations()
    }

    fn remove_pod(&self, pod_uid: &str) -> Result<(), PluginError> {
        self.in_process().remove_pod(pod_uid)
    }
}

/// The gRPC status of a plugin error (its message is the error's text).
#[must_use]
pub fn status(err: &PluginError) -> Status {
    let code = match err.kind() {
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::Internal => Code::Internal,
    };
    Status::new(code, err.to_string())
}

/// A wire request as the plugin's.
#[must_use]
pub fn request(wire: &rp::ResourceRequest) -> Request {
    Request {
        pod_uid: wire.pod_uid.clone(),
        pod_namespace: wire.pod_namespace.clone(),
        pod_name: wire.pod_name.clone(),
        container_name: wire.container_name.clone(),
        container_type: match rp::ContainerType::try_from(wire.container_type) {
            Ok(rp::ContainerType::Init) => ContainerType::Init,
            Ok(rp::ContainerType::Sidecar) => ContainerType::Sidecar,
            Ok(rp::ContainerType::Ephemeral) => ContainerType::Ephemeral,
            Ok(rp::ContainerType::Main) | Err(_) => ContainerType::Main,
        },
        container_index: wire.container_index,
        pod_role: wire.pod_role.clone(),
        pod_type: wire.pod_type.clone(),
        resource_name: wire.resource_name.clone(),
        hint: wire.hint.as_ref().map(hint),
        resource_requests: wire
            .resource_requests
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        labels: wire.labels.clone(),
        annotations: wire.annotations.clone(),
        native_qos_class: wire.native_qos_class.clone(),
        resource_limits: wire
            .resource_limits
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    }
}

/// The plugin's request on the wire (what [`request`] reads back).
#[must_use]
pub fn wire_request(request: &Request) -> rp::ResourceRequest {
    let container_type = match request.container_type {
        ContainerType::Init => rp::ContainerType::Init,
        ContainerType::Main => rp::ContainerType::Main,
        ContainerType::Sidecar => rp::ContainerType::Sidecar,
        ContainerType::Ephemeral => rp::ContainerType::Ephemeral,
    };
    rp::ResourceRequest {
        pod_uid: request.pod_uid.clone(),
        pod_namespace: request.pod_namespace.clone(),
        pod_name: request.pod_name.clone(),
        container_name: request.container_name.clone(),
        container_type: container_type.into(),
        container_index: request.container_index,
        pod_role: request.pod_role.clone(),
        pod_type: request.pod_type.clone(),
        resource_name: request.resource_name.clone(),
        hint: request.hint.as_ref().map(wire_hint),
        resource_requests: request
            .resource_requests
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        labels: request.labels.clone(),
        annotations: request.annotations.clone(),
        native_qos_class: request.native_qos_class.clone(),
        runtime_class: String::new(),
        resource_limits: request
            .resource_limits
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    }
}

/// A wire hint as the plugin's.
#[must_use]
pub fn hint(wire: &rp::TopologyHint) -> Hint {
    Hint {
        nodes: wire.nodes.clone(),
        preferred: wire.preferred,
    }
}

/// The plugin's hint on the wire.
#[must_use]
pub fn wire_hint(hint: &Hint) -> rp::TopologyHint {
    rp::TopologyHint {
        nodes: hint.nodes.clone(),
        preferred: hint.preferred,
    }
}

/// A plugin allocation as the wire's.
#[must_use]
pub fn wire_info(info: &AllocationInfo) -> rp::ResourceAllocationInfo {
    rp::ResourceAllocationInfo {
        oci_property_name: info.oci_property_name.clone(),
        is_node_resource: info.is_node_resource,
        is_scalar_resource: info.is_scalar_resource,
        allocated_quantity: info.allocated_quantity,
        allocation_result: info.allocation_result.clone(),
        envs: info.envs.clone(),
        annotations: info.annotations.clone(),
        resource_hints: (!info.resource_hints.is_empty()).then(|| rp::ListOfTopologyHints {
            hints: info.resource_hints.iter().map(wire_hint).collect(),
        }),
        topology_assignments: info.topology_assignments.clone(),
        mounts: Vec::new(),
        devices: Vec::new(),
    }
}

fn wire_allocation(allocation: &BTreeMap<String, AllocationInfo>) -> rp::ResourceAllocation {
    rp::ResourceAllocation {
        resource_allocation: allocation
            .iter()
            .map(|(name, info)| rp::ResourceAllocationEntry {
                key: name.clone(),
                value: Some(wire_info(info)),
            })
            .collect(),
    }
}

fn wire_quantity(q: &TopologyAwareQuantity) -> rp::TopologyAwareQuantity {
    rp::TopologyAwareQuantity {
        resource_value: q.resource_value,
        node: q.node,
        name: q.name.clone(),
        r#type: q.kind.clone(),
        topology_level: match q.topology_level {
            TopologyLevel::Numa => rp::TopologyLevel::Numa,
            TopologyLevel::Socket => rp::TopologyLevel::Socket,
        }
        .into(),
        annotations: q.annotations.clone(),
    }
}

fn wire_aware(resource: &TopologyAwareResource) -> rp::TopologyAwareResource {
    rp::TopologyAwareResource {
        is_node_resource: resource.is_node_resource,
        is_scalar_resource: resource.is_scalar_resource,
        aggregated_quantity: resource.aggregated_quantity,
        original_aggregated_quantity: resource.original_aggregated_quantity,
        topology_aware_quantity_list: resource
            .topology_aware_quantity_list
            .iter()
            .map(wire_quantity)
            .collect(),
        original_topology_aware_quantity_list: resource
            .original_topology_aware_quantity_list
            .iter()
            .map(wire_quantity)
            .collect(),
    }
}

fn wire_allocatable(resource: &AllocatableResource) -> rp::AllocatableTopologyAwareResource {
    rp::AllocatableTopologyAwareResource {
        is_node_resource: resource.is_node_resource,
        is_scalar_resource: resource.is_scalar_resource,
        aggregated_allocatable_quantity: resource.aggregated_allocatable_quantity,
        topology_aware_allocatable_quantity_list: resource
            .topology_aware_allocatable_quantity_list
            .iter()
            .map(wire_quantity)
            .collect(),
        aggregated_capacity_quantity: resource.aggregated_capacity_quantity,
        topology_aware_capacity_quantity_list: resource
            .topology_aware_capacity_quantity_list
            .iter()
            .map(wire_quantity)
            .collect(),
    }
}

#[tonic::async_trait]
impl<P: ResourcePlugin + 'static> rp::resource_plugin_server::ResourcePlugin for GrpcPlugin<P> {
    async fn get_topology_hints(
        &self,
        req: GrpcRequest<rp::ResourceRequest>,
    ) -> Result<Response<rp::ResourceHintsResponse>, Status> {
        let wire = req.into_inner();
        let ask = request(&wire);
        let (resource, hints) = self
            .with(move |plugin| {
                let resource = plugin.resource_name().to_string();
                Ok((resource, plugin.topology_hints(&ask)?))
            })
            .await?;
        Ok(Response::new(rp::ResourceHintsResponse {
            pod_uid: wire.pod_uid,
            pod_namespace: wire.pod_namespace,
            pod_name: wire.pod_name,
            container_name: wire.container_name,
            container_type: wire.container_type,
            container_index: wire.container_index,
            pod_role: wire.pod_role,
            pod_type: wire.pod_type,
            resource_name: wire.resource_name,
            resource_hints: vec![rp::TopologyHintsEntry {
                key: resource,
                value: hints.map(|hints| rp::ListOfTopologyHints {
                    hints: hints.iter().map(wire_hint).collect(),
                }),
            }],
            labels: wire.labels,
            annotations: wire.annotations,
            native_qos_class: wire.native_qos_class,
        }))
    }

    async fn allocate(
        &self,
        req: GrpcRequest<rp::ResourceRequest>,
    ) -> Result<Response<rp::ResourceAllocationResponse>, Status> {
        let wire = req.into_inner();
        let ask = request(&wire);
        let allocation = self.with(move |plugin| plugin.allocate(&ask)).await?;
        Ok(Response::new(rp::ResourceAllocationResponse {
            pod_uid: wire.pod_uid,
            pod_namespace: wire.pod_namespace,
            pod_name: wire.pod_name,
            container_name: wire.container_name,
            container_type: wire.container_type,
            container_index: wire.container_index,
            pod_role: wire.pod_role,
            pod_type: wire.pod_type,
            resource_name: wire.resource_name,
            allocation_result: allocation.as_ref().map(wire_allocation),
            labels: wire.labels,
            annotations: wire.annotations,
            native_qos_class: wire.native_qos_class,
        }))
    }

    async fn get_resources_allocation(
        &self,
        _req: GrpcRequest<rp::GetResourcesAllocationRequest>,
    ) -> Result<Response<rp::GetResourcesAllocationResponse>, Status> {
        let all = self.with(|plugin| Ok(plugin.allocations())).await?;
        Ok(Response::new(rp::GetResourcesAllocationResponse {
            pod_resources: all
                .iter()
                .map(|(pod, containers)| rp::PodAllocationEntry {
                    key: pod.clone(),
                    value: Some(rp::ContainerResources {
                        container_resources: containers
                            .iter()
                            .map(|(container, allocation)| rp::ContainerAllocationEntry {
                                key: container.clone(),
                                value: Some(wire_allocation(allocation)),
                            })
                            .collect(),
                    }),
                })
                .collect(),
        }))
    }

    async fn remove_pod(
        &self,
        req: GrpcRequest<rp::RemovePodRequest>,
    ) -> Result<Response<rp::RemovePodResponse>, Status> {
        let pod = req.into_inner().pod_uid;
        self.with(move |plugin| plugin.remove_pod(&pod)).await?;
        Ok(Response::new(rp::RemovePodResponse {}))
    }

    async fn get_resource_plugin_options(
        &self,
        _req: GrpcRequest<rp::Empty>,
    ) -> Result<Response<rp::ResourcePluginOptions>, Status> {
        let options = self.with(|plugin| Ok(plugin.options())).await?;
        Ok(Response::new(rp::ResourcePluginOptions {
            pre_start_required: options.pre_start_required,
            with_topology_alignment: options.with_topology_alignment,
            need_reconcile: options.need_reconcile,
            associated_devices: Vec::new(),
            extra_resources: Vec::new(),
        }))
    }

    async fn get_topology_aware_resources(
        &self,
        req: GrpcRequest<rp::GetTopologyAwareResourcesRequest>,
    ) -> Result<Response<rp::GetTopologyAwareResourcesResponse>, Status> {
        let wire = req.into_inner();
        let (pod, container) = (wire.pod_uid.clone(), wire.container_name.clone());
        let resources = self
            .with(move |plugin| plugin.topology_aware_resources(&pod, &container))
            .await?;
        Ok(Response::new(rp::GetTopologyAwareResourcesResponse {
            pod_uid: wire.pod_uid,
            pod_name: String::new(),
            pod_namespace: String::new(),
            container_topology_aware_resources: Some(rp::ContainerTopologyAwareResources {
                container_name: wire.container_name,
                allocated_resources: resources
                    .iter()
                    .map(|(name, resource)| rp::TopologyAwareResourceEntry {
                        key: name.clone(),
                        value: Some(wire_aware(resource)),
                    })
                    .collect(),
            }),
        }))
    }

    async fn get_topology_aware_allocatable_resources(
        &self,
        _req: GrpcRequest<rp::GetTopologyAwareAllocatableResourcesRequest>,
    ) -> Result<Response<rp::GetTopologyAwareAllocatableResourcesResponse>, Status> {
        let resources = self
            .with(|plugin| Ok(plugin.allocatable_resources()))
            .await?;
        Ok(Response::new(
            rp::GetTopologyAwareAllocatableResourcesResponse {
                allocatable_resources: resources
                    .iter()
                    .map(|(name, resource)| rp::AllocatableResourceEntry {
                        key: name.clone(),
                        value: Some(wire_allocatable(resource)),
                    })
                    .collect(),
            },
        ))
    }

    async fn pre_start_container(
        &self,
        _req: GrpcRequest<rp::PreStartContainerRequest>,
    ) -> Result<Response<rp::PreStartContainerResponse>, Status> {
        Ok(Response::new(rp::PreStartContainerResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_wire_field_by_field() {
        for container_type in [
            ContainerType::Init,
            ContainerType::Main,
            ContainerType::Sidecar,
            ContainerType::Ephemeral,
        ] {
            let plugin = Request {
                pod_uid: "uid".into(),
                pod_namespace: "ns".into(),
                pod_name: "pod".into(),
                container_name: "c".into(),
                container_type,
                container_index: 3,
                pod_role: "role".into(),
                pod_type: "type".into(),
                resource_name: "cpu".into(),
                hint: Some(Hint {
                    nodes: vec![0, 2],
                    preferred: false,
                }),
                resource_requests: [("cpu".to_string(), 1.5)].into(),
                labels: [("l".to_string(), "1".to_string())].into(),
                annotations: [("a".to_string(), "2".to_string())].into(),
                native_qos_class: "Burstable".into(),
                resource_limits: [("cpu".to_string(), 2.0)].into(),
            };
            let wire = wire_request(&plugin);
            assert_eq!(
                wire.hint.as_ref().map(|h| h.nodes.clone()),
                Some(vec![0, 2])
            );
            assert_eq!(request(&wire), plugin, "{container_type:?}");
        }
    }
}
