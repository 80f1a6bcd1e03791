//! kubelet's podresources API served from Pinion's placements, so that the
//! node's consumers (resource-topology-exporter, NFD's topology-updater,
//! device plugins, katalyst's reporter) see who holds which CPUs while
//! kubelet runs `cpuManagerPolicy: none`. `v1` (`List`,
//! `GetAllocatableResources`, `Get`, with kubewharf's fields) and the legacy
//! `v1alpha1` `List` on one unix socket of its own. Answers are built from
//! the controller's latest snapshot by the pure mapping in
//! `pinion_core::podresources`; [`wire`] converts them. Usage and
//! semantics: `docs/podresources.md`.

mod conn;
pub mod ratelimit;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pinion_api::podresources::{v1, v1alpha1};
use pinion_core::podresources::{self as model, Holding};
use pinion_core::Topology;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status};

use crate::config::PodResourcesConfig;
use crate::controller::Snapshot;
use crate::qrm::PluginAllocatable;
use crate::server;
pub use ratelimit::{TokenBucket, REJECTED};

/// The socket's mode.
pub const SOCKET_MODE: u32 = 0o600;
/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// Requests are empty or two names: anything larger is refused.
pub const MAX_REQUEST: usize = 16 * 1024;
/// Answers may list every container of a dense node.
pub const MAX_ANSWER: usize = 64 * 1024 * 1024;
/// A client must send its first bytes within this after connecting.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Each call must complete within this.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections are closed after this long (clients reconnect).
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(600);
/// Time given to calls in flight at shutdown.
pub const DRAIN: Duration = Duration::from_secs(2);

/// kubelet's text for `Get` of a pod it does not hold.
#[must_use]
pub fn not_found_text(name: &str, namespace: &str) -> String {
    format!("pod {name} in namespace {namespace} not found")
}

/// Both services' implementation over the controller's snapshots.
#[derive(Clone)]
pub struct PodResourcesService {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    topology: Arc<Topology>,
    limiter: Arc<TokenBucket>,
    /// The resource plugins' allocatable resources, when the QoS Resource
    /// Manager runs.
    plugins: Option<watch::Receiver<Arc<PluginAllocatable>>>,
}

impl PodResourcesService {
    #[must_use]
    pub fn new(
        snapshots: watch::Receiver<Arc<Snapshot>>,
        topology: Arc<Topology>,
        qps: u32,
        burst: u32,
    ) -> Self {
        Self {
            snapshots,
            topology,
            limiter: Arc::new(TokenBucket::new(qps, burst, Instant::now())),
            plugins: None,
        }
    }

    /// Adds the resource plugins' allocatable resources to
    /// `GetAllocatableResources` (the QoS Resource Manager's
    /// [`crate::qrm::Qrm::plugin_allocatable`]).
    #[must_use]
    pub fn with_plugin_allocatable(
        mut self,
        plugins: watch::Receiver<Arc<PluginAllocatable>>,
    ) -> Self {
        self.plugins = Some(plugins);
        self
    }

    fn admit(&self) -> Result<Arc<Snapshot>, Status> {
        if !self.limiter.allow(Instant::now()) {
            return Err(Status::resource_exhausted(REJECTED));
        }
        Ok(self.snapshots.borrow().clone())
    }
}

/// Every workload of `snapshot` as the mapping's holdings.
#[must_use]
pub fn holdings(snapshot: &Snapshot) -> Vec<Holding<'_>> {
    snapshot
        .workloads
        .iter()
        .map(|w| Holding {
            pod: &w.pod,
            container: &w.container,
            placement: &w.placement,
            plugins: &w.plugins,
        })
        .collect()
}

/// `List`'s answer for `snapshot`.
#[must_use]
pub fn list(snapshot: &Snapshot) -> v1::ListPodResourcesResponse {
    let pods = model::list(&snapshot.pods, &holdings(snapshot));
    v1::ListPodResourcesResponse {
        pod_resources: pods
            .into_iter()
            .map(|pod| wire::pod(model::with_pod_cpus(pod, &snapshot.pod_cpus)))
            .collect(),
    }
}

/// `GetAllocatableResources`' answer for `snapshot` on `topology`.
#[must_use]
pub fn allocatable(snapshot: &Snapshot, topology: &Topology) -> v1::AllocatableResourcesResponse {
    allocatable_with_plugins(snapshot, topology, &PluginAllocatable::new())
}

/// [`allocatable`] with the resource plugins' allocatable resources in
/// `resources`, as the kubelet fork and katalyst's ORM answer (spec
/// `qrm.md` §6.4): a plugin's resource replaces Pinion's own entry of that
/// name (a plugin serving `cpu` decides what is allocatable), the others
/// are added in name order.
#[must_use]
pub fn allocatable_with_plugins(
    snapshot: &Snapshot,
    topology: &Topology,
    plugins: &PluginAllocatable,
) -> v1::AllocatableResourcesResponse {
    let exclusive = snapshot.policy == "static";
    let mut answer = wire::allocatable(model::allocatable(topology, exclusive, &snapshot.reserved));
    answer
        .resources
        .retain(|own| !plugins.contains_key(&own.resource_name));
    answer.resources.extend(
        plugins
            .iter()
            .map(|(name, resource)| wire::plugin_allocatable(name, resource)),
    );
    answer
}

#[tonic::async_trait]
impl v1::pod_resources_lister_server::PodResourcesLister for PodResourcesService {
    async fn list(
        &self,
        _request: Request<v1::ListPodResourcesRequest>,
    ) -> Result<Response<v1::ListPodResourcesResponse>, Status> {
        let snapshot = self.admit()?;
        Ok(Response::new(list(&snapshot)))
    }

    async fn get_allocatable_resources(
        &self,
        _request: Request<v1::AllocatableResourcesRequest>,
    ) -> Result<Response<v1::AllocatableResourcesResponse>, Status> {
        let snapshot = self.admit()?;
        let plugins = self
            .plugins
            .as_ref()
            .map(|plugins| Arc::clone(&plugins.borrow()))
            .unwrap_or_default();
        Ok(Response::new(allocatable_with_plugins(
            &snapshot,
            &self.topology,
            &plugins,
        )))
    }

    async fn get(
        &self,
        request: Request<v1::GetPodResourcesRequest>,
    ) -> Result<Response<v1::GetPodResourcesResponse>, Status> {
        let snapshot = self.admit()?;
        let v1::GetPodResourcesRequest {
            pod_name,
            pod_namespace,
        } = request.into_inner();
        let found = model::get(
            &snapshot.pods,
            &holdings(&snapshot),
            &pod_namespace,
            &pod_name,
        );
        match found {
            Some(pod) => Ok(Response::new(v1::GetPodResourcesResponse {
                pod_resources: Some(wire::pod(model::with_pod_cpus(pod, &snapshot.pod_cpus))),
            })),
            None => Err(Status::not_found(not_found_text(&pod_name, &pod_namespace))),
        }
    }
}

#[tonic::async_trait]
impl v1alpha1::pod_resources_lister_server::PodResourcesLister for PodResourcesService {
    async fn list(
        &self,
        _request: Request<v1alpha1::ListPodResourcesRequest>,
    ) -> Result<Response<v1alpha1::ListPodResourcesResponse>, Status> {
        let snapshot = self.admit()?;
        let pods = model::list(&snapshot.pods, &holdings(&snapshot));
        Ok(Response::new(v1alpha1::ListPodResourcesResponse {
            pod_resources: pods.into_iter().map(wire::pod_v1alpha1).collect(),
        }))
    }
}

/// Listens on the configured socket (mode 0600, directory 0750; a stale
/// socket file is replaced, a live one is an error).
pub fn bind(config: &PodResourcesConfig) -> std::io::Result<UnixListener> {
    let stream = pinion_api::uds::bind(&config.socket, SOCKET_MODE)?;
    Ok(stream.into_inner())
}

/// Serves both services on `listener` until `stop` turns true, then
/// removes `socket`.
pub async fn serve(
    listener: UnixListener,
    socket: PathBuf,
    service: PodResourcesService,
    stop: watch::Receiver<bool>,
) {
    let (conn_tx, conn_rx) = mpsc::unbounded_channel();
    let accept = tokio::spawn(server::accept_loop(
        "podresources",
        listener,
        MAX_CONNECTIONS,
        stop.clone(),
        // gRPC connections are never evicted (their slot never allows it).
        move |io, place| {
            let (slot, freed) = oneshot::channel::<()>();
            let _ = conn_tx.send(Ok::<_, std::io::Error>(conn::Conn::new(
                io,
                slot,
                FIRST_BYTE_TIMEOUT,
            )));
            async move {
                let _ = freed.await;
                drop(place);
            }
        },
    ));
    let v1 = v1::pod_resources_lister_server::PodResourcesListerServer::new(service.clone())
        .max_decoding_message_size(MAX_REQUEST)
        .max_encoding_message_size(MAX_ANSWER);
    let v1alpha1 = v1alpha1::pod_resources_lister_server::PodResourcesListerServer::new(service)
        .max_decoding_message_size(MAX_REQUEST)
        .max_encoding_message_size(MAX_ANSWER);
    let mut shutdown = stop.clone();
    let (stopped_tx, stopped_rx) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .timeout(CALL_TIMEOUT)
        .max_connection_age(MAX_CONNECTION_AGE)
        .http2_keepalive_interval(Some(Duration::from_secs(60)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(v1)
        .add_service(v1alpha1)
        .serve_with_incoming_shutdown(UnboundedReceiverStream::new(conn_rx), async move {
            let _ = stopped_rx.await;
        });
    tokio::pin!(server);
    let result = tokio::select! {
        result = &mut server => result,
        () = async { let _ = shutdown.wait_for(|s| *s).await; } => {
            let _ = std::fs::remove_file(&socket);
            let _ = stopped_tx.send(());
            // A client that keeps its connection open does not hold the
            // agent's exit.
            tokio::time::timeout(DRAIN, &mut server).await.unwrap_or(Ok(()))
        }
    };
    if let Err(err) = result {
        tracing::error!("podresources server: {err}");
    }
    let _ = accept.await;
    let _ = std::fs::remove_file(&socket);
}
