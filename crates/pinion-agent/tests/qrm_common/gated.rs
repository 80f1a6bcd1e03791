//! A [`Knob`] plugin behind its gRPC service whose calls first wait on
//! what the test's [`Gate`] says: how the failure tests make one method of
//! one plugin hang while its other methods, and the other plugins, answer.

use pinion_api::resourceplugin as rp;
use pinion_plugins::grpc::GrpcPlugin;

use super::Knob;

type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

/// The plugin methods a [`Gate`] is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    TopologyHints,
    Allocate,
    /// `GetResourcesAllocation`: the reconcile poll.
    Poll,
    RemovePod,
    Options,
    TopologyAwareResources,
    /// `GetTopologyAwareAllocatableResources`.
    NodeResources,
    PreStartContainer,
}

/// What a call waits for before the plugin answers it.
#[tonic::async_trait]
pub trait Gate: Send + Sync + 'static {
    async fn before(&self, method: Method);
}

/// `knob`'s gRPC service, each call let through by `gate`. The wait is
/// outside the plugin: while one call waits, the plugin answers the others
/// (a `Knob` hanging inside a call would hold the whole plugin, which
/// `GrpcPlugin` calls under its lock).
pub struct Gated<G> {
    plugin: GrpcPlugin<Knob>,
    gate: G,
}

impl<G: Gate> Gated<G> {
    pub fn new(knob: &Knob, gate: G) -> Self {
        Self {
            plugin: GrpcPlugin::new(knob.clone()),
            gate,
        }
    }
}

#[tonic::async_trait]
impl<G: Gate> rp::resource_plugin_server::ResourcePlugin for Gated<G> {
    async fn get_topology_hints(
        &self,
        request: tonic::Request<rp::ResourceRequest>,
    ) -> Answer<rp::ResourceHintsResponse> {
        self.gate.before(Method::TopologyHints).await;
        self.plugin.get_topology_hints(request).await
    }

    async fn allocate(
        &self,
        request: tonic::Request<rp::ResourceRequest>,
    ) -> Answer<rp::ResourceAllocationResponse> {
        self.gate.before(Method::Allocate).await;
        self.plugin.allocate(request).await
    }

    async fn get_resources_allocation(
        &self,
        request: tonic::Request<rp::GetResourcesAllocationRequest>,
    ) -> Answer<rp::GetResourcesAllocationResponse> {
        self.gate.before(Method::Poll).await;
        self.plugin.get_resources_allocation(request).await
    }

    async fn remove_pod(
        &self,
        request: tonic::Request<rp::RemovePodRequest>,
    ) -> Answer<rp::RemovePodResponse> {
        self.gate.before(Method::RemovePod).await;
        self.plugin.remove_pod(request).await
    }

    async fn get_resource_plugin_options(
        &self,
        request: tonic::Request<rp::Empty>,
    ) -> Answer<rp::ResourcePluginOptions> {
        self.gate.before(Method::Options).await;
        self.plugin.get_resource_plugin_options(request).await
    }

    async fn get_topology_aware_resources(
        &self,
        request: tonic::Request<rp::GetTopologyAwareResourcesRequest>,
    ) -> Answer<rp::GetTopologyAwareResourcesResponse> {
        self.gate.before(Method::TopologyAwareResources).await;
        self.plugin.get_topology_aware_resources(request).await
    }

    async fn get_topology_aware_allocatable_resources(
        &self,
        request: tonic::Request<rp::GetTopologyAwareAllocatableResourcesRequest>,
    ) -> Answer<rp::GetTopologyAwareAllocatableResourcesResponse> {
        self.gate.before(Method::NodeResources).await;
        self.plugin
            .get_topology_aware_allocatable_resources(request)
            .await
    }

    async fn pre_start_container(
        &self,
        request: tonic::Request<rp::PreStartContainerRequest>,
    ) -> Answer<rp::PreStartContainerResponse> {
        self.gate.before(Method::PreStartContainer).await;
        self.plugin.pre_start_container(request).await
    }
}
