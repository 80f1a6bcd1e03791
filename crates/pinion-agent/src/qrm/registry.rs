//! The endpoint table: one entry per resource name, active (connected) or
//! stopped (spec `qrm.md` §3.3), with each plugin's options and call
//! statistics. Registration (plugin watcher or `Registration.Register`)
//! puts entries in; the newest registration of a resource wins; a removed
//! socket stops its entry; after a restart every resource of the durable
//! allocations has a stopped placeholder until its plugin registers again.
//!
//! A plugin is reached over its unix socket, or — Pinion's built-in plugins
//! running in the agent — in the process, through the very same service
//! implementation `pinion plugin serve` puts on the wire ([`Client`]). The
//! manager calls both the same way; only the transport differs — except
//! for `Allocate`, the reconcile poll and `RemovePod` of a plugin in the
//! process, which skip the wire's messages ([`Registry::call_in_process`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use pinion_api::plugin::{API_VERSION, MAX_MESSAGE, RESOURCE_PLUGIN_TYPE};
use pinion_api::pluginregistration as pr;
use pinion_api::resourceplugin as rp;
use pinion_api::resourceplugin::resource_plugin_client::ResourcePluginClient;
use pinion_api::uds;
use pinion_core::podresources::AllocatableResource;
use pinion_plugins::grpc::InProcess;
use tokio::sync::watch;
use tonic::transport::Channel;

/// The service a plugin implements (what `pinion plugin serve` serves).
pub type Service = dyn rp::resource_plugin_server::ResourcePlugin;

/// A plugin in the agent's process: the same service, and its calls
/// without the wire.
pub type InProcessService = dyn pinion_plugins::grpc::InProcessService;

/// The `socket` shown for a plugin called in the agent's process.
pub const IN_PROCESS: &str = "in-process";

/// How the manager reaches a plugin: the gRPC client of its unix socket,
/// or the service itself when it runs in the agent (no socket, no HTTP/2
/// framing, no thread hop: the same requests and answers as on the wire).
#[derive(Clone)]
pub enum Client {
    Socket(ResourcePluginClient<Channel>),
    InProcess(Arc<InProcessService>),
}

impl Client {
    /// The plugin itself, when it runs in the agent's process.
    #[must_use]
    pub fn in_process(&self) -> Option<&Arc<InProcessService>> {
        match self {
            Self::Socket(_) => None,
            Self::InProcess(plugin) => Some(plugin),
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Socket(client) => f.debug_tuple("Socket").field(client).finish(),
            Self::InProcess(_) => f.write_str("InProcess"),
        }
    }
}

/// One method per RPC the manager calls, with the wire's request and
/// answer types on both transports. Over a socket the call carries
/// `timeout` as its gRPC deadline, for the plugin to see; in the process
/// there is no one to tell, and [`Registry::call`]'s own deadline bounds
/// the call on both.
macro_rules! client_calls {
    ($($method:ident($request:ty) -> $answer:ty;)*) => {
        impl Client {
            $(
                pub async fn $method(
                    &mut self,
                    message: $request,
                    timeout: Duration,
                ) -> Result<tonic::Response<$answer>, tonic::Status> {
                    let mut request = tonic::Request::new(message);
                    match self {
                        Self::Socket(client) => {
                            request.set_timeout(timeout);
                            client.$method(request).await
                        }
                        Self::InProcess(service) => {
                            let service: &Service = service.as_ref();
                            service.$method(request).await
                        }
                    }
                }
            )*
        }
    };
}

client_calls! {
    get_resource_plugin_options(rp::Empty) -> rp::ResourcePluginOptions;
    get_topology_hints(rp::ResourceRequest) -> rp::ResourceHintsResponse;
    allocate(rp::ResourceRequest) -> rp::ResourceAllocationResponse;
    remove_pod(rp::RemovePodRequest) -> rp::RemovePodResponse;
    get_resources_allocation(rp::GetResourcesAllocationRequest) -> rp::GetResourcesAllocationResponse;
    get_topology_aware_allocatable_resources(rp::GetTopologyAwareAllocatableResourcesRequest) -> rp::GetTopologyAwareAllocatableResourcesResponse;
}

/// Why a plugin call did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("no resource plugin serves {resource}")]
    Unknown { resource: String },
    #[error("endpoint {resource} has been stopped")]
    Stopped { resource: String },
    /// The agent's own plugins have not registered yet (start-up).
    #[error("the built-in resource plugins {names} have not started yet")]
    BuiltinNotStarted { names: String },
    #[error("resource plugin {resource} does not implement {method}")]
    Unsupported { resource: String, method: String },
    #[error("resource plugin {resource} did not answer {method} within {timeout:?}")]
    Deadline {
        resource: String,
        method: String,
        timeout: Duration,
    },
    /// An answer that cannot be applied (an unknown OCI property, a value
    /// that does not parse): the kubelet fork's texts (§4.7).
    #[error("resource plugin {resource} answered {method} with an allocation that cannot be applied: {reason}")]
    Malformed {
        resource: String,
        method: String,
        reason: String,
    },
    #[error("resource plugin {resource} failed {method}: {message}")]
    Failed {
        resource: String,
        method: String,
        message: String,
    },
}

/// Why a plugin could not register.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("cannot reach the plugin socket {}: {source}", .socket.display())]
    Connect {
        socket: PathBuf,
        source: uds::ConnectError,
    },
    #[error("cannot reach the plugin socket {}: {source}", .socket.display())]
    Unreachable {
        socket: PathBuf,
        source: Arc<std::io::Error>,
    },
    #[error("plugin at {} answered {method}: {message}", .socket.display())]
    Call {
        socket: PathBuf,
        method: &'static str,
        message: String,
    },
    /// The plugin is not a resource plugin, or speaks another version
    /// (kubelet plugin manager's texts), or its socket is not the agent's
    /// user's or root's.
    #[error("{0}")]
    Refused(String),
}

/// Why a plugin socket is not trusted (`pinion_host::trust`'s rule).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UntrustedSocket {
    #[error("plugin socket {} is owned by uid {uid}: only root or the agent's uid {agent} may register a resource plugin", .socket.display())]
    Owner {
        socket: PathBuf,
        uid: u32,
        agent: u32,
    },
    #[error("plugin socket {} is served by a process of uid {uid}: only root or the agent's uid {agent} may register a resource plugin", .socket.display())]
    Server {
        socket: PathBuf,
        uid: u32,
        agent: u32,
    },
}

/// How long `Registration.Register` dials the plugin's socket (spec §3.2
/// step 4: the manager dials it asynchronously, 10 s).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopped plugin stays in the table (spec §3.3: the fork's
/// stopped-endpoint grace period) unless allocations still name its
/// resource ([`Registry::forget_stopped`]).
pub const STOPPED_GRACE: Duration = Duration::from_secs(5 * 60);

/// The calls a plugin may leave out (`Unimplemented` is an answer, not an
/// error of the plugin).
const OPTIONAL_METHODS: [&str; 2] = ["GetTopologyAwareAllocatableResources", "RemovePod"];

/// One registered (or remembered) plugin.
#[derive(Debug, Clone)]
struct Endpoint {
    /// The socket it is called on (its endpoint).
    socket: PathBuf,
    /// The socket it registered from: the plugin-watcher socket whose
    /// `GetInfo` named `socket` (the same path when it named none), or
    /// `socket` itself (`Registration.Register`, in the process). Its
    /// removal de-registers the plugin (spec §3.1 step 7).
    registered_from: PathBuf,
    /// `None` for a placeholder restored from the durable state.
    options: Option<rp::ResourcePluginOptions>,
    /// `None` while stopped.
    client: Option<Client>,
    registered: SystemTime,
    stopped: Option<(SystemTime, String)>,
    stats: Stats,
    /// What it last answered to `GetTopologyAwareAllocatableResources`
    /// (checked); empty while stopped.
    node_resources: Vec<AllocatableResource>,
    /// Which registration this is: every activation takes a new number, so
    /// an answer of a plugin since replaced or stopped is told apart.
    generation: u64,
}

pub use pinion_api::local::{
    MethodStats, Plugin as PluginView, PluginStats as Stats,
    PLUGIN_LATENCY_BUCKETS as LATENCY_BUCKETS,
};

/// The table; see the module documentation.
#[derive(Debug)]
pub struct Registry {
    table: Mutex<BTreeMap<String, Endpoint>>,
    timeout: Duration,
    /// The agent's effective uid: with root, the only one whose sockets
    /// may register.
    agent_uid: u32,
    /// Every active plugin's node resources, republished on each change
    /// (podresources `GetAllocatableResources` reads it).
    node_resources: watch::Sender<Arc<Vec<AllocatableResource>>>,
    /// The last registration's number ([`Endpoint::generation`]).
    generations: std::sync::atomic::AtomicU64,
}

/// An active plugin, ready to be called.
#[derive(Debug, Clone)]
pub struct Active {
    pub resource: String,
    pub options: rp::ResourcePluginOptions,
    pub client: Client,
    /// Its registration's number: [`Registry::is_current`] tells whether
    /// it is still the resource's active plugin.
    pub generation: u64,
}

impl Registry {
    /// An empty table whose calls time out after `timeout`.
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        Self {
            table: Mutex::new(BTreeMap::new()),
            timeout,
            agent_uid: pinion_host::trust::agent_uid(),
            node_resources: watch::channel(Arc::default()).0,
            generations: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The active plugins' node resources (`IsNodeResource`: what each
    /// answered to `GetTopologyAwareAllocatableResources`), by resource
    /// name; updated when a plugin registers, stops or answers anew.
    #[must_use]
    pub fn node_resources(&self) -> watch::Receiver<Arc<Vec<AllocatableResource>>> {
        self.node_resources.subscribe()
    }

    /// Publishes the active entries' node resources (after a change).
    fn publish_node_resources(&self, table: &BTreeMap<String, Endpoint>) {
        let mut all: Vec<AllocatableResource> = table
            .values()
            .filter(|e| e.client.is_some())
            .flat_map(|e| e.node_resources.iter().cloned())
            .collect();
        all.sort_by(|a, b| a.resource_name.cmp(&b.resource_name));
        all.dedup_by(|a, b| a.resource_name == b.resource_name);
        self.node_resources.send_if_modified(|current| {
            if **current == all {
                false
            } else {
                *current = Arc::new(all);
                true
            }
        });
    }

    /// Asks `plugin` for `GetTopologyAwareAllocatableResources` and keeps
    /// the answer once checked (`plugin_answer::check_node_resources`). A
    /// plugin that does not implement it has none; a failed or refused
    /// answer keeps what it answered before (counted as its error).
    pub async fn refresh_node_resources(&self, plugin: &Active) {
        let answer = self
            .call(
                plugin,
                "GetTopologyAwareAllocatableResources",
                |mut client, timeout| async move {
                    client
                        .get_topology_aware_allocatable_resources(
                            rp::GetTopologyAwareAllocatableResourcesRequest {},
                            timeout,
                        )
                        .await
                },
            )
            .await;
        let resources = match answer {
            Ok(response) => {
                let resources: Vec<AllocatableResource> = response
                    .allocatable_resources
                    .iter()
                    .filter_map(|entry| {
                        entry
                            .value
                            .as_ref()
                            .map(|value| super::convert::node_resource(&entry.key, value))
                    })
                    .collect();
                if let Err(err) =
                    pinion_core::plugin_answer::check_node_resources(&plugin.resource, &resources)
                {
                    let error = CallError::Malformed {
                        resource: plugin.resource.clone(),
                        method: "GetTopologyAwareAllocatableResources".to_string(),
                        reason: err.to_string(),
                    };
                    tracing::warn!(resource = %plugin.resource, "{error}");
                    self.note_error(
                        &plugin.resource,
                        "GetTopologyAwareAllocatableResources",
                        &error,
                    );
                    return;
                }
                resources
            }
            Err(CallError::Unsupported { .. }) => Vec::new(),
            Err(err) => {
                tracing::warn!(resource = %plugin.resource, "node resources: {err}");
                return;
            }
        };
        let mut table = self.table();
        let Some(endpoint) = table.get_mut(&plugin.resource) else {
            return;
        };
        if endpoint.client.is_none() {
            return;
        }
        endpoint.node_resources = resources;
        self.publish_node_resources(&table);
    }

    /// Refuses a plugin socket whose file or server is not the agent's
    /// user's or root's (`SO_PEERCRED` of a connection); logged by the
    /// caller with the socket and the uid. A socket nobody accepts on yet
    /// is a connection error (the caller retries).
    async fn check_socket(&self, socket: &Path) -> Result<(), RegisterError> {
        use std::os::unix::fs::MetadataExt as _;
        let agent = self.agent_uid;
        let trusted = |uid| pinion_host::trust::is_trusted(uid, agent);
        let unreachable = |source: std::io::Error| RegisterError::Unreachable {
            socket: socket.to_path_buf(),
            source: Arc::new(source),
        };
        let owner = std::fs::symlink_metadata(socket)
            .map_err(unreachable)?
            .uid();
        if !trusted(owner) {
            let refusal = UntrustedSocket::Owner {
                socket: socket.to_path_buf(),
                uid: owner,
                agent,
            };
            return Err(RegisterError::Refused(refusal.to_string()));
        }
        let stream = tokio::time::timeout(self.timeout, tokio::net::UnixStream::connect(socket))
            .await
            .map_err(|_| unreachable(std::io::ErrorKind::TimedOut.into()))?
            .map_err(unreachable)?;
        let server = stream.peer_cred().map_err(unreachable)?.uid();
        if !trusted(server) {
            let refusal = UntrustedSocket::Server {
                socket: socket.to_path_buf(),
                uid: server,
                agent,
            };
            return Err(RegisterError::Refused(refusal.to_string()));
        }
        Ok(())
    }

    /// [`Self::check_socket`] until the socket exists and accepts, for up
    /// to `patience`: a refusal (an untrusted socket) ends it at once, the
    /// last connection error after `patience`.
    async fn wait_for_socket(
        &self,
        socket: &Path,
        patience: Duration,
    ) -> Result<(), RegisterError> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.check_socket(socket).await {
                Err(RegisterError::Unreachable { .. })
                    if tokio::time::Instant::now() + pause < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                checked => return checked,
            }
        }
    }

    /// A channel to `socket` whose every connection is checked to be
    /// served by a trusted uid (a reconnection may reach another server).
    async fn connect(&self, socket: &Path) -> Result<Channel, RegisterError> {
        let agent = self.agent_uid;
        uds::connect_served_by(socket, self.timeout, move |uid| {
            pinion_host::trust::is_trusted(uid, agent)
        })
        .await
        .map_err(|source| RegisterError::Connect {
            socket: socket.to_path_buf(),
            source,
        })
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<String, Endpoint>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The deadline of every call.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Registers the plugin listening on `socket` the plugin-watcher way
    /// (§3.1): `GetInfo`, version check, `GetResourcePluginOptions`, then
    /// the entry (replacing any other of that resource) and
    /// `NotifyRegistrationStatus`. A refusal is told to the plugin too.
    /// First of all, a socket whose file or server is not root's or the
    /// agent's user's is refused (`pinion_host::trust`), before a word
    /// is exchanged with it. An endpoint the plugin names in `GetInfo`
    /// must lie in the socket's directory ([`Self::register_socket_within`]).
    pub async fn register_socket(&self, socket: &Path) -> Result<String, RegisterError> {
        let dir = socket.parent().unwrap_or(Path::new("/"));
        self.register_socket_within(socket, dir).await
    }

    /// [`Self::register_socket`] of a socket found in the plugin directory
    /// `plugin_dir` (the watcher's): an endpoint the plugin names in
    /// `GetInfo` is a path relative to the socket's directory, neither
    /// absolute nor with a `..`, and must resolve (symbolic links
    /// followed) inside `plugin_dir`; otherwise the plugin is refused,
    /// naming the value ([`endpoint_within`]). The entry remembers `socket`
    /// as what it registered from: removing `socket` stops it.
    pub async fn register_socket_within(
        &self,
        socket: &Path,
        plugin_dir: &Path,
    ) -> Result<String, RegisterError> {
        self.check_socket(socket).await?;
        let channel = self.connect(socket).await?;
        let mut registration = pr::registration_client::RegistrationClient::new(channel.clone());
        let mut request = tonic::Request::new(pr::InfoRequest {});
        request.set_timeout(Duration::from_secs(1).min(self.timeout));
        let info = registration
            .get_info(request)
            .await
            .map_err(|status| RegisterError::Call {
                socket: socket.to_path_buf(),
                method: "GetInfo",
                message: status.message().to_string(),
            })?
            .into_inner();
        let refusal = if info.r#type != RESOURCE_PLUGIN_TYPE {
            Some(format!(
                "RegisterPlugin error -- no handler registered for plugin type: {} at socket {}",
                info.r#type,
                socket.display()
            ))
        } else if !info.supported_versions.iter().any(|v| v == API_VERSION) {
            Some(format!(
                "RegisterPlugin error -- plugin validation failed with err: manager version, {API_VERSION}, is not among plugin supported versions {:?}",
                info.supported_versions
            ))
        } else if let Some(defect) = pinion_core::plugin_answer::resource_name_defect(&info.name) {
            Some(format!(
                "RegisterPlugin error -- the plugin's name (resource) {:?} {defect}",
                super::register::shown(&info.name)
            ))
        } else {
            None
        };
        if let Some(error) = refusal {
            notify(&mut registration, false, &error).await;
            return Err(RegisterError::Refused(error));
        }
        let endpoint = match endpoint_within(socket, &info.endpoint, plugin_dir) {
            Ok(endpoint) => endpoint,
            Err(err) => {
                notify(&mut registration, false, &err.to_string()).await;
                return Err(err);
            }
        };
        let client_channel = if endpoint == socket {
            channel
        } else {
            if let Err(err) = self.check_socket(&endpoint).await {
                notify(&mut registration, false, &err.to_string()).await;
                return Err(err);
            }
            self.connect(&endpoint).await?
        };
        let result = self
            .activate(
                &info.name,
                &endpoint,
                socket,
                socket_client(client_channel),
                None,
            )
            .await;
        match &result {
            Ok(()) => notify(&mut registration, true, "").await,
            Err(err) => notify(&mut registration, false, &err.to_string()).await,
        }
        result.map(|()| info.name)
    }

    /// Registers a plugin the device-plugin way (`Registration.Register`,
    /// §3.2): `options` come with the request. Its socket must be served
    /// by root or the agent's uid, as in [`Self::register_socket`]. A
    /// plugin may call `Register` before its own socket listens: the
    /// socket is dialled until it accepts, for up to [`DIAL_TIMEOUT`]
    /// (kubelet's asynchronous 10 s dial); other registrations go on
    /// meanwhile.
    pub async fn register_endpoint(
        &self,
        resource: &str,
        endpoint: &Path,
        options: rp::ResourcePluginOptions,
    ) -> Result<(), RegisterError> {
        self.wait_for_socket(endpoint, DIAL_TIMEOUT).await?;
        let channel = self.connect(endpoint).await?;
        self.activate(
            resource,
            endpoint,
            endpoint,
            socket_client(channel),
            Some(options),
        )
        .await
    }

    /// Registers a plugin running in the agent's process (a built-in
    /// plugin): its options are asked like any plugin's; a later
    /// registration of the resource over a socket replaces it.
    pub async fn register_in_process(
        &self,
        resource: &str,
        service: Arc<InProcessService>,
    ) -> Result<(), RegisterError> {
        self.activate(
            resource,
            Path::new(IN_PROCESS),
            Path::new(IN_PROCESS),
            Client::InProcess(service),
            None,
        )
        .await
    }

    /// Asks for options unless given, then makes the entry active; an
    /// existing entry of the resource is replaced (newest wins). The entry
    /// is called on `socket` and stops when `registered_from` goes.
    async fn activate(
        &self,
        resource: &str,
        socket: &Path,
        registered_from: &Path,
        mut client: Client,
        options: Option<rp::ResourcePluginOptions>,
    ) -> Result<(), RegisterError> {
        let options = match options {
            Some(options) => options,
            None => client
                .get_resource_plugin_options(rp::Empty {}, self.timeout)
                .await
                .map_err(|status| RegisterError::Call {
                    socket: socket.to_path_buf(),
                    method: "GetResourcePluginOptions",
                    message: status.message().to_string(),
                })?
                .into_inner(),
        };
        {
            let mut table = self.table();
            let stats = table
                .get(resource)
                .map(|e| e.stats.clone())
                .unwrap_or_default();
            if let Some(old) = table.get(resource) {
                if old.client.is_some() && old.socket != socket {
                    tracing::info!(%resource, old = %old.socket.display(), new = %socket.display(), "a newer registration replaces the plugin");
                }
            }
            table.insert(
                resource.to_string(),
                Endpoint {
                    socket: socket.to_path_buf(),
                    registered_from: registered_from.to_path_buf(),
                    options: Some(options.clone()),
                    client: Some(client),
                    registered: SystemTime::now(),
                    stopped: None,
                    stats,
                    node_resources: Vec::new(),
                    generation: self
                        .generations
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                        + 1,
                },
            );
            self.publish_node_resources(&table);
        }
        tracing::info!(%resource, socket = %socket.display(), topology_aligned = options.with_topology_alignment, need_reconcile = options.need_reconcile, "resource plugin registered");
        if let Ok(active) = self.active(resource) {
            self.refresh_node_resources(&active).await;
        }
        Ok(())
    }

    /// Stops every active entry registered from `socket` (its socket was
    /// removed or moved away: de-registration, by what was registered from
    /// it, spec §3.1 step 7), or called on it (its endpoint went), or on a
    /// socket under it (a directory that went).
    pub fn stop_socket(&self, socket: &Path, why: &str) -> Vec<String> {
        let mut stopped = Vec::new();
        let mut table = self.table();
        for (resource, endpoint) in table.iter_mut() {
            let gone =
                endpoint.registered_from.starts_with(socket) || endpoint.socket.starts_with(socket);
            if gone && endpoint.client.is_some() {
                endpoint.client = None;
                endpoint.stopped = Some((SystemTime::now(), why.to_string()));
                endpoint.node_resources.clear();
                stopped.push(resource.clone());
            }
        }
        self.publish_node_resources(&table);
        drop(table);
        for resource in &stopped {
            tracing::warn!(%resource, socket = %socket.display(), "resource plugin stopped: {why}");
        }
        stopped
    }

    /// A stopped placeholder for `resource` (restored allocations whose
    /// plugin has not registered yet), unless it has an entry.
    /// Removes the entries stopped for longer than `grace` whose resource
    /// no allocation names (`still_allocated`), and returns their
    /// resources. While an entry is in the table its resource is a
    /// plugin's, and a pod asking for it is refused as long as the plugin
    /// is stopped (§4.6); once forgotten, the resource is no plugin's
    /// again, as the fork deletes a stopped endpoint after its grace
    /// period. Placeholders restored at start are stopped entries too.
    pub fn forget_stopped(
        &self,
        grace: Duration,
        still_allocated: &std::collections::BTreeSet<String>,
    ) -> Vec<String> {
        let now = SystemTime::now();
        let mut table = self.table();
        let expired: Vec<String> = table
            .iter()
            .filter(|(resource, endpoint)| {
                endpoint.client.is_none()
                    && !still_allocated.contains(*resource)
                    && endpoint.stopped.as_ref().is_some_and(|(since, _)| {
                        now.duration_since(*since).unwrap_or_default() >= grace
                    })
            })
            .map(|(resource, _)| resource.clone())
            .collect();
        for resource in &expired {
            table.remove(resource);
        }
        drop(table);
        for resource in &expired {
            tracing::info!(%resource, "stopped resource plugin forgotten: no allocation names its resource");
        }
        expired
    }

    pub fn placeholder(&self, resource: &str) {
        self.table()
            .entry(resource.to_string())
            .or_insert_with(|| Endpoint {
                socket: PathBuf::new(),
                registered_from: PathBuf::new(),
                options: None,
                client: None,
                registered: SystemTime::now(),
                stopped: Some((
                    SystemTime::now(),
                    "restored from the state; waiting for the plugin to register".to_string(),
                )),
                stats: Stats::default(),
                node_resources: Vec::new(),
                generation: 0,
            });
    }

    /// Whether a plugin (active or stopped) handles `resource`.
    #[must_use]
    pub fn handles(&self, resource: &str) -> bool {
        self.table().contains_key(resource)
    }

    /// The active plugin of `resource`.
    pub fn active(&self, resource: &str) -> Result<Active, CallError> {
        let table = self.table();
        let endpoint = table.get(resource).ok_or_else(|| CallError::Unknown {
            resource: resource.to_string(),
        })?;
        match (&endpoint.client, &endpoint.options) {
            (Some(client), Some(options)) => Ok(Active {
                resource: resource.to_string(),
                options: options.clone(),
                client: client.clone(),
                generation: endpoint.generation,
            }),
            _ => Err(CallError::Stopped {
                resource: resource.to_string(),
            }),
        }
    }

    /// Every active plugin.
    /// Whether the registration numbered `generation` is still the active
    /// plugin of `resource` (not replaced by a newer registration, not
    /// stopped): only its answers may change the resource's allocations.
    #[must_use]
    pub fn is_current(&self, resource: &str, generation: u64) -> bool {
        self.table()
            .get(resource)
            .is_some_and(|e| e.client.is_some() && e.generation == generation)
    }

    #[must_use]
    pub fn all_active(&self) -> Vec<Active> {
        let names: Vec<String> = self.table().keys().cloned().collect();
        names
            .iter()
            .filter_map(|resource| self.active(resource).ok())
            .collect()
    }

    /// Calls `method` of `plugin` with the deadline, recording its outcome.
    pub async fn call<T, F, Fut>(
        &self,
        plugin: &Active,
        method: &str,
        call: F,
    ) -> Result<T, CallError>
    where
        F: FnOnce(Client, Duration) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = Instant::now();
        let outcome = tokio::time::timeout(
            self.timeout + Duration::from_millis(100),
            call(plugin.client.clone(), self.timeout),
        )
        .await;
        let result = match outcome {
            Err(_) => Err(CallError::Deadline {
                resource: plugin.resource.clone(),
                method: method.to_string(),
                timeout: self.timeout,
            }),
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(classify(
                &plugin.resource,
                method,
                &status,
                self.timeout,
                started.elapsed(),
            )),
        };
        self.note(
            &plugin.resource,
            method,
            started.elapsed(),
            result.as_ref().err(),
        );
        result
    }

    /// Calls a plugin in the agent's process without the wire's messages
    /// (`None` for a plugin behind a socket): the same statistics as
    /// [`Self::call`], and its error the one the wire would have carried
    /// (the plugin's error as a gRPC status, classified alike). No
    /// deadline: the call runs on this thread and does no I/O.
    pub fn call_in_process<T>(
        &self,
        plugin: &Active,
        method: &str,
        call: impl FnOnce(&dyn InProcess) -> Result<T, pinion_plugins::PluginError>,
    ) -> Option<Result<T, CallError>> {
        let native = plugin.client.in_process()?;
        let started = Instant::now();
        let result = call(native.as_ref()).map_err(|err| {
            classify(
                &plugin.resource,
                method,
                &pinion_plugins::grpc::status(&err),
                self.timeout,
                started.elapsed(),
            )
        });
        self.note(
            &plugin.resource,
            method,
            started.elapsed(),
            result.as_ref().err(),
        );
        Some(result)
    }

    /// Counts `error` against a call of `method` that already returned (an
    /// answer found malformed after it arrived).
    pub fn note_error(&self, resource: &str, method: &str, error: &CallError) {
        let mut table = self.table();
        let Some(endpoint) = table.get_mut(resource) else {
            return;
        };
        endpoint
            .stats
            .calls
            .entry(method.to_string())
            .or_default()
            .errors += 1;
        endpoint.stats.last_error = Some(error.to_string());
    }

    fn note(&self, resource: &str, method: &str, took: Duration, error: Option<&CallError>) {
        let mut table = self.table();
        let Some(endpoint) = table.get_mut(resource) else {
            return;
        };
        let stats = endpoint.stats.calls.entry(method.to_string()).or_default();
        stats.calls += 1;
        let seconds = took.as_secs_f64();
        stats.seconds += seconds;
        if stats.buckets.len() != LATENCY_BUCKETS.len() {
            stats.buckets = vec![0; LATENCY_BUCKETS.len()];
        }
        if let Some(bucket) = LATENCY_BUCKETS.iter().position(|b| seconds <= *b) {
            stats.buckets[bucket] += 1;
        }
        // A plugin may leave the optional calls out; their callers take
        // `Unimplemented` as "none" (node resources) or "nothing to do".
        let optional = matches!(error, Some(CallError::Unsupported { .. }))
            && OPTIONAL_METHODS.contains(&method);
        if let Some(error) = error.filter(|_| !optional) {
            stats.errors += 1;
            endpoint.stats.last_error = Some(error.to_string());
        }
    }

    /// Records a reconcile pass of `resource` that changed `changes`
    /// containers.
    pub fn note_reconcile(&self, resource: &str, changes: u64) {
        if let Some(endpoint) = self.table().get_mut(resource) {
            endpoint.stats.last_reconcile = Some(epoch_seconds(SystemTime::now()));
            endpoint.stats.reconcile_changes += changes;
        }
    }

    /// What `pinion plugins` shows.
    #[must_use]
    pub fn views(&self) -> Vec<PluginView> {
        self.table()
            .iter()
            .map(|(resource, e)| PluginView {
                resource: resource.clone(),
                socket: e.socket.display().to_string(),
                state: if e.client.is_some() {
                    "active"
                } else {
                    "stopped"
                }
                .to_string(),
                stop_reason: e.stopped.as_ref().map(|(_, why)| why.clone()),
                topology_aligned: e.options.as_ref().map(|o| o.with_topology_alignment),
                need_reconcile: e.options.as_ref().map(|o| o.need_reconcile),
                pre_start_required: e.options.as_ref().map(|o| o.pre_start_required),
                registered: epoch_seconds(e.registered),
                stats: e.stats.clone(),
                node_resources: e.node_resources.iter().map(node_resource_view).collect(),
            })
            .collect()
    }
}

/// A node resource as `pinion plugins` shows it.
fn node_resource_view(r: &AllocatableResource) -> pinion_api::local::NodeResource {
    let per_numa = |list: &[pinion_core::podresources::NumaQuantity]| {
        list.iter().map(|q| (q.node, q.value)).collect()
    };
    pinion_api::local::NodeResource {
        name: r.resource_name.clone(),
        is_node_resource: r.is_node_resource,
        is_scalar_resource: r.is_scalar_resource,
        allocatable: r.allocatable,
        capacity: r.capacity,
        allocatable_per_numa: per_numa(&r.allocatable_per_numa),
        capacity_per_numa: per_numa(&r.capacity_per_numa),
    }
}

/// The socket a plugin found at `socket` is called on: `endpoint` as its
/// `GetInfo` named it, absolute (as kubelet's device-plugin stubs name
/// their own socket) or relative to the socket's directory (`socket`
/// itself when empty, spec §3.1 step 3). Kubelet dials whatever path a
/// plugin names; Pinion keeps plugins in their directory: an endpoint with
/// a `..` component or naming no file is refused, and so is one that
/// resolves (symbolic links followed) outside `plugin_dir`, each naming
/// the value. One that does not exist yet cannot be reached (the
/// watcher tries again).
fn endpoint_within(
    socket: &Path,
    endpoint: &str,
    plugin_dir: &Path,
) -> Result<PathBuf, RegisterError> {
    use std::path::Component;
    if endpoint.is_empty() {
        return Ok(socket.to_path_buf());
    }
    let refuse = |defect: String| {
        RegisterError::Refused(format!(
            "RegisterPlugin error -- the plugin's endpoint {:?} {defect}",
            super::register::shown(endpoint)
        ))
    };
    let named = Path::new(endpoint);
    let relative = format!(
        "an endpoint is a socket path in the plugin directory {}, absolute or relative to the plugin's socket",
        plugin_dir.display()
    );
    if named.components().any(|c| c == Component::ParentDir) {
        return Err(refuse(format!("has a \"..\" component: {relative}")));
    }
    if !named
        .components()
        .any(|c| matches!(c, Component::Normal(_)))
    {
        return Err(refuse(format!("names no socket file: {relative}")));
    }
    let path = socket.parent().unwrap_or(Path::new("/")).join(named);
    let unreachable = |source: std::io::Error| RegisterError::Unreachable {
        socket: path.clone(),
        source: Arc::new(source),
    };
    let resolved = std::fs::canonicalize(&path).map_err(unreachable)?;
    let dir = std::fs::canonicalize(plugin_dir).map_err(unreachable)?;
    if !resolved.starts_with(&dir) {
        return Err(refuse(format!(
            "resolves to {}, outside the plugin directory {}",
            resolved.display(),
            plugin_dir.display()
        )));
    }
    Ok(path)
}

/// The client of a plugin's socket, with the wire's message size bound.
fn socket_client(channel: Channel) -> Client {
    Client::Socket(
        ResourcePluginClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
    )
}

fn epoch_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// A failed call: `Unimplemented`, or a plain "not implemented" error as
/// katalyst's plugins answer optional RPCs, means the plugin does not
/// support it (never fatal). A call cancelled once its deadline passed
/// (tonic's answer, `Cancelled` "Timeout expired", where Go's is
/// `DeadlineExceeded`) missed the deadline.
fn classify(
    resource: &str,
    method: &str,
    status: &tonic::Status,
    timeout: Duration,
    took: Duration,
) -> CallError {
    let message = status.message().to_string();
    match status.code() {
        tonic::Code::Cancelled if took >= timeout => CallError::Deadline {
            resource: resource.to_string(),
            method: method.to_string(),
            timeout,
        },
        tonic::Code::Unimplemented => CallError::Unsupported {
            resource: resource.to_string(),
            method: method.to_string(),
        },
        tonic::Code::Unknown if message.to_ascii_lowercase().contains("not implemented") => {
            CallError::Unsupported {
                resource: resource.to_string(),
                method: method.to_string(),
            }
        }
        tonic::Code::DeadlineExceeded => CallError::Deadline {
            resource: resource.to_string(),
            method: method.to_string(),
            timeout,
        },
        _ => CallError::Failed {
            resource: resource.to_string(),
            method: method.to_string(),
            message,
        },
    }
}

async fn notify(
    registration: &mut pr::registration_client::RegistrationClient<Channel>,
    registered: bool,
    error: &str,
) {
    let mut request = tonic::Request::new(pr::RegistrationStatus {
        plugin_registered: registered,
        error: error.to_string(),
    });
    request.set_timeout(Duration::from_secs(1));
    if let Err(status) = registration.notify_registration_status(request).await {
        tracing::debug!("NotifyRegistrationStatus: {}", status.message());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found from outside (session 45): a stopped entry never left the
    /// table, so a plugin that went away for good kept its resource a
    /// plugin's: every pod asking for it was refused ("has been stopped")
    /// until the agent restarted. It is forgotten after its grace period,
    /// unless allocations still name its resource.
    #[test]
    fn regression_a_stopped_plugin_is_forgotten_once_nothing_names_its_resource() {
        let registry = Registry::new(Duration::from_secs(1));
        for resource in ["example.com/gone", "example.com/held"] {
            registry.placeholder(resource);
        }
        let held = std::collections::BTreeSet::from(["example.com/held".to_string()]);
        assert!(
            registry
                .forget_stopped(Duration::from_secs(3600), &held)
                .is_empty(),
            "within its grace period"
        );
        assert_eq!(
            registry.forget_stopped(Duration::ZERO, &held),
            vec!["example.com/gone".to_string()]
        );
        assert!(!registry.handles("example.com/gone"));
        assert!(registry.handles("example.com/held"), "still allocated");
        assert_eq!(
            registry.active("example.com/gone").err(),
            Some(CallError::Unknown {
                resource: "example.com/gone".into()
            })
        );
    }

    /// Found from outside (thirty-third session): a plugin leaving out an
    /// optional call (`GetTopologyAwareAllocatableResources`, `RemovePod`)
    /// had an error counted every reconcile period, and that "does not
    /// implement" replaced the plugin's real last error in `pinion
    /// plugins`. `Allocate` left out is still an error.
    #[test]
    fn regression_an_optional_call_left_out_is_not_the_plugins_error() {
        let registry = Registry::new(Duration::from_secs(1));
        registry.placeholder("example.com/w");
        let real = CallError::Failed {
            resource: "example.com/w".into(),
            method: "Allocate".into(),
            message: "no room".into(),
        };
        registry.note("example.com/w", "Allocate", Duration::ZERO, Some(&real));
        let unsupported = |method: &str| CallError::Unsupported {
            resource: "example.com/w".into(),
            method: method.into(),
        };
        for method in OPTIONAL_METHODS {
            registry.note(
                "example.com/w",
                method,
                Duration::ZERO,
                Some(&unsupported(method)),
            );
        }
        let stats = registry.views().remove(0).stats;
        assert_eq!(stats.last_error, Some(real.to_string()));
        for method in OPTIONAL_METHODS {
            assert_eq!(stats.calls[method].calls, 1, "{method}");
            assert_eq!(stats.calls[method].errors, 0, "{method}");
        }
        registry.note(
            "example.com/w",
            "Allocate",
            Duration::ZERO,
            Some(&unsupported("Allocate")),
        );
        let stats = registry.views().remove(0).stats;
        assert_eq!(stats.calls["Allocate"].errors, 2);
    }

    /// Hunt D11: the endpoint a plugin named in `GetInfo` was joined to
    /// its socket's directory as given, so an absolute path or `..` led
    /// anywhere. It must now be relative, without `..`, and resolve inside
    /// the plugin directory; a refusal names the value.
    #[test]
    fn regression_an_endpoint_must_stay_in_the_plugin_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let plugins = root.path().join("plugins");
        std::fs::create_dir_all(plugins.join("sub")).expect("mkdir");
        std::fs::write(plugins.join("e.sock"), "").expect("endpoint");
        std::fs::write(plugins.join("sub/e.sock"), "").expect("endpoint");
        std::fs::write(root.path().join("away.sock"), "").expect("outside");
        std::os::unix::fs::symlink(root.path().join("away.sock"), plugins.join("link.sock"))
            .expect("symlink");
        std::os::unix::fs::symlink(plugins.join("e.sock"), plugins.join("sub/in.sock"))
            .expect("symlink");
        let socket = plugins.join("r.sock");
        let within = |endpoint: &str| endpoint_within(&socket, endpoint, &plugins);
        assert_eq!(within("").expect("empty"), socket);
        assert_eq!(within("e.sock").expect("plain"), plugins.join("e.sock"));
        assert_eq!(
            within("./sub/e.sock").expect("sub"),
            plugins.join("sub/e.sock")
        );
        assert_eq!(
            within("sub/in.sock").expect("link in"),
            plugins.join("sub/in.sock")
        );
        let absolute = plugins.join("sub/e.sock").display().to_string();
        assert_eq!(
            within(&absolute).expect("absolute, inside"),
            plugins.join("sub/e.sock")
        );
        let away = root.path().join("away.sock").display().to_string();
        for (endpoint, defect) in [
            (away.as_str(), "outside the plugin directory"),
            ("../away.sock", "has a \"..\" component"),
            ("sub/../e.sock", "has a \"..\" component"),
            (".", "names no socket file"),
            ("link.sock", "outside the plugin directory"),
        ] {
            match within(endpoint) {
                Err(RegisterError::Refused(error)) => assert!(
                    error.contains(&format!("endpoint {endpoint:?}")) && error.contains(defect),
                    "{endpoint}: {error}"
                ),
                other => panic!("{endpoint}: {other:?}"),
            }
        }
        assert!(matches!(
            within("later.sock"),
            Err(RegisterError::Unreachable { .. })
        ));
    }

    /// Regression (#11, found by `tests/qrm_failures.rs`): a plugin past
    /// its deadline was reported as `failed Allocate: Timeout expired`
    /// (tonic cancels the call) instead of the deadline it missed.
    #[test]
    fn a_call_cancelled_at_its_deadline_missed_the_deadline() {
        let timeout = Duration::from_secs(1);
        let cancelled = tonic::Status::cancelled("Timeout expired");
        let late = classify("r", "Allocate", &cancelled, timeout, timeout);
        assert!(matches!(late, CallError::Deadline { .. }), "{late}");
        assert_eq!(
            late.to_string(),
            "resource plugin r did not answer Allocate within 1s"
        );
        let early = classify(
            "r",
            "Allocate",
            &cancelled,
            timeout,
            Duration::from_millis(10),
        );
        assert!(matches!(early, CallError::Failed { .. }), "{early}");
        let go = tonic::Status::deadline_exceeded("context deadline exceeded");
        let go = classify("r", "Allocate", &go, timeout, Duration::ZERO);
        assert!(matches!(go, CallError::Deadline { .. }), "{go}");
        let katalyst = tonic::Status::unknown("not implemented");
        assert!(matches!(
            classify(
                "r",
                "GetPodTopologyHints",
                &katalyst,
                timeout,
                Duration::ZERO
            ),
            CallError::Unsupported { .. }
        ));
    }
}
