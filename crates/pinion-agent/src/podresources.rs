//! kubelet's podresources API served from Pinion's placements, so that the
//! node's consumers (resource-topology-exporter, NFD's topology-updater,
//! device plugins, katalyst's reporter) see who holds which CPUs while
//! kubelet runs `cpuManagerPolicy: none`. `v1` (`List`,
//! `GetAllocatableResources`, `Get`, with kubewharf's fields) and the legacy
//! `v1alpha1` `List` on one unix socket of its own. Answers are built from
//! the controller's latest snapshot by the pure mapping in
//! `pinion_core::podresources`; [`wire`] converts them. Usage and
//! semantics: `docs/podresources.md`.

pub(crate) mod conn;
pub mod ratelimit;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pinion_api::podresources::{v1, v1alpha1};
use pinion_core::podresources::{self as model, AllocatableResource, Holding};
use pinion_core::Topology;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tonic::service::Routes;
use tonic::{Request, Response, Status};

use crate::config::PodResourcesConfig;
use crate::controller::Snapshot;
use crate::server;
pub use ratelimit::{TokenBucket, REJECTED};

/// The socket's mode.
pub const SOCKET_MODE: u32 = 0o600;
/// Connections served at once; at the cap a newcomer evicts the oldest one
/// without a call in flight, or waits in the listen backlog.
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

/// kubelet's text for `Get` of a pod it does not hold. A name or namespace
/// longer than any Kubernetes object's name (253 bytes) is echoed shortened,
/// with its length: the text travels in the `grpc-message` header, and a
/// client's default metadata limit (8 KiB in grpcio) would otherwise turn
/// the `NOT_FOUND` into a transport error.
#[must_use]
pub fn not_found_text(name: &str, namespace: &str) -> String {
    format!(
        "pod {} in namespace {} not found",
        echoed(name),
        echoed(namespace)
    )
}

/// The longest name a Kubernetes object can have (a DNS-1123 subdomain).
const MAX_ECHOED: usize = 253;

/// `value` as an error text quotes it: whole up to [`MAX_ECHOED`] bytes,
/// else its start and its length.
fn echoed(value: &str) -> std::borrow::Cow<'_, str> {
    if value.len() <= MAX_ECHOED {
        return value.into();
    }
    let mut end = MAX_ECHOED;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len()).into()
}

/// Both services' implementation over the controller's snapshots.
#[derive(Clone)]
pub struct PodResourcesService {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    /// The resource plugins' node resources (`qrm::Registry::node_resources`).
    plugin_resources: watch::Receiver<Arc<Vec<AllocatableResource>>>,
    topology: Arc<Topology>,
    limiter: Arc<TokenBucket>,
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
            plugin_resources: watch::channel(Arc::default()).1,
            topology,
            limiter: Arc::new(TokenBucket::new(qps, burst, Instant::now())),
        }
    }

    /// The same service, also listing the resource plugins' node resources
    /// among the allocatable ones.
    #[must_use]
    pub fn with_plugin_resources(
        mut self,
        plugin_resources: watch::Receiver<Arc<Vec<AllocatableResource>>>,
    ) -> Self {
        self.plugin_resources = plugin_resources;
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

/// `Get`'s answer for pod `namespace`/`name` in `snapshot`: of two pods
/// sharing the name, the one whose container was admitted last
/// ([`model::get`]; worked out here, off the admission path, since `Get`
/// is rare and a name is seldom shared).
#[must_use]
pub fn get(snapshot: &Snapshot, namespace: &str, name: &str) -> Option<v1::PodResources> {
    let admitted = |uid: &str| {
        snapshot
            .workloads
            .iter()
            .filter(|w| w.pod == uid)
            .map(|w| w.admitted)
            .max()
            .unwrap_or(0)
    };
    let pod = model::get(
        &snapshot.pods,
        &holdings(snapshot),
        namespace,
        name,
        admitted,
    )?;
    Some(wire::pod(model::with_pod_cpus(pod, &snapshot.pod_cpus)))
}

/// `GetAllocatableResources`' answer for `snapshot` on `topology`, with
/// the resource plugins' node resources (`plugins`).
#[must_use]
pub fn allocatable(
    snapshot: &Snapshot,
    topology: &Topology,
    plugins: &[AllocatableResource],
) -> v1::AllocatableResourcesResponse {
    let exclusive = snapshot.policy == "static";
    let own = model::allocatable(topology, exclusive, &snapshot.reserved);
    wire::allocatable(model::with_plugin_resources(own, plugins))
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
        let plugins = self.plugin_resources.borrow().clone();
        // The machine now (CPU hot-plug), else the one at start.
        let topology = snapshot.machine.as_deref().unwrap_or(&self.topology);
        Ok(Response::new(allocatable(&snapshot, topology, &plugins)))
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
        match get(&snapshot, &pod_namespace, &pod_name) {
            Some(pod) => Ok(Response::new(v1::GetPodResourcesResponse {
                pod_resources: Some(pod),
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

/// The podresources socket's connections: HTTP/2 pings every 60 s (20 s
/// to answer) find dead peers.
pub(crate) const LIMITS: conn::GrpcLimits = conn::GrpcLimits {
    first_byte: FIRST_BYTE_TIMEOUT,
    call_timeout: CALL_TIMEOUT,
    max_age: MAX_CONNECTION_AGE,
    keepalive_interval: Some(Duration::from_secs(60)),
    keepalive_timeout: Duration::from_secs(20),
};

/// Serves both services on `listener` until `stop` turns true, then
/// removes `socket`. At most [`MAX_CONNECTIONS`] connections are served at
/// once; at the cap a newcomer evicts the oldest one without a call in
/// flight (as the local API does, `server::accept_loop`), so idle clients
/// cannot lock others out.
pub async fn serve(
    listener: UnixListener,
    socket: PathBuf,
    service: PodResourcesService,
    stop: watch::Receiver<bool>,
) {
    let v1 = v1::pod_resources_lister_server::PodResourcesListerServer::new(service.clone())
        .max_decoding_message_size(MAX_REQUEST)
        .max_encoding_message_size(MAX_ANSWER);
    let v1alpha1 = v1alpha1::pod_resources_lister_server::PodResourcesListerServer::new(service)
        .max_decoding_message_size(MAX_REQUEST)
        .max_encoding_message_size(MAX_ANSWER);
    let routes = Routes::new(v1).add_service(v1alpha1).prepare();
    serve_grpc(
        "podresources",
        listener,
        &socket,
        MAX_CONNECTIONS,
        routes,
        LIMITS,
        stop,
    )
    .await;
}

/// Serves `routes` on `listener` (at most `max_connections` at once, idle
/// ones evicted at the cap, each under `limits`) until `stop` turns true;
/// then removes `socket` and gives the calls in flight [`DRAIN`] to
/// finish. The podresources
/// socket and the QoS Resource Manager's registration socket are served
/// this way.
pub(crate) async fn serve_grpc(
    name: &'static str,
    listener: UnixListener,
    socket: &Path,
    max_connections: usize,
    routes: Routes,
    limits: conn::GrpcLimits,
    stop: watch::Receiver<bool>,
) {
    // Each connection holds a sender: `recv` ends once all have ended.
    let (live, mut ended) = mpsc::channel::<()>(1);
    let connections = stop.clone();
    server::accept_loop(name, listener, max_connections, stop, move |io, slot| {
        conn::serve(
            io,
            slot,
            routes.clone(),
            limits,
            connections.clone(),
            live.clone(),
        )
    })
    .await;
    let _ = std::fs::remove_file(socket);
    // A client that keeps its connection open does not hold the agent's
    // exit.
    let _ = tokio::time::timeout(DRAIN, ended.recv()).await;
    let _ = std::fs::remove_file(socket);
}
