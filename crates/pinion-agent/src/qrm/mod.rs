//! The QoS Resource Manager: Pinion hosts resource plugins (kubewharf's
//! `resourceplugin.v1alpha1`, wire-compatible with katalyst's) — spec
//! `../shared/spec/qrm.md`, design `docs/qrm.md`.
//!
//! Everything remote happens here, outside the controller thread: the
//! plugins' topology hints are gathered before an admission reaches the
//! controller ([`QrmHints`], a [`HintSource`]), their `Allocate` answers
//! after it ([`Qrm::allocate`]); the controller stores the answers durably
//! as part of each container's placement. The reconcile loop polls the
//! plugins and hands their answers to the keeper of the allocations, whose
//! executor sends only what changed; the removal loop tells plugins of
//! departed pods until every one of them has heard ([`loops`]: the loops
//! know the keeper only as an [`AllocationKeeper`]; the daemon's wiring
//! implements it for the controller and spawns them).

pub mod builtin;
pub mod convert;
pub mod loops;
pub mod register;
pub mod registry;
mod watcher;

use std::collections::BTreeMap;
use std::sync::Arc;

use pinion_api::entries;
use pinion_api::resourceplugin as rp;
use pinion_core::plugin_allocation::{PluginAllocation, PluginAllocations};
use pinion_core::plugin_answer;
use pinion_core::pod::Pod;
use pinion_core::qos::QosLevel;
use pinion_core::qrm_rules::{self, allocation_failure_is_tolerated};
use pinion_core::topomgr::provider::ResourceHints;
use pinion_core::topomgr::TopologyHint;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::QrmConfig;
use crate::hints::{HintFuture, HintSource};
pub use loops::{AllocationKeeper, LoopRunning, Reallocation, Reconciled};
pub use pinion_core::qrm_rules::{PluginRequest, RequestError};
use pinion_plugins::{grpc, qrm_request};
pub use registry::{CallError, PluginView, Registry};

/// What one reconcile poll of one plugin said: pod UID → container →
/// `None` (the plugin has no record: re-allocate) or its allocations. An
/// empty map is no new answer: the stored allocation stays (an answer that
/// fails the checks of an `Allocate` answer becomes one).
pub type Poll = BTreeMap<String, BTreeMap<String, Option<PluginAllocations>>>;

/// Why resource plugins could not serve an admission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QrmError {
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The kubelet fork's text for a failed `Allocate` (§4.6).
    #[error("allocate for resources {resource} for pod: {namespace}/{name}, container: {container} got error: {source}")]
    Allocate {
        resource: String,
        namespace: String,
        name: String,
        container: String,
        source: Box<CallError>,
    },
    #[error("cannot start the qos resource manager: {0}")]
    Start(String),
}

/// The manager; see the module documentation.
#[derive(Debug)]
pub struct Qrm {
    config: QrmConfig,
    registry: Arc<Registry>,
    /// The built-in CPU plugin, when it runs: its pools for `pinion pools`.
    cpu_pools: std::sync::OnceLock<pinion_plugins::cpu::CpuPluginHandle>,
    /// Wakes the reconcile loop before its period ends.
    reconcile_now: tokio::sync::Notify,
    /// The built-in plugins' state in the controller's journal.
    plugin_journal: Arc<builtin::PluginJournal>,
    /// True while the removal loop runs (releases wait for it only then).
    removal_loop_running: watch::Sender<bool>,
}

impl Qrm {
    /// A manager with an empty endpoint table.
    #[must_use]
    pub fn new(config: QrmConfig) -> Arc<Self> {
        let registry = Arc::new(Registry::new(config.rpc_timeout));
        Arc::new(Self {
            config,
            registry,
            cpu_pools: std::sync::OnceLock::new(),
            reconcile_now: tokio::sync::Notify::new(),
            plugin_journal: Arc::default(),
            removal_loop_running: watch::channel(false).0,
        })
    }

    /// Whether the loop that tells plugins of departed pods (`RemovePod`)
    /// runs.
    #[must_use]
    pub fn removal_loop_running(&self) -> watch::Receiver<bool> {
        self.removal_loop_running.subscribe()
    }

    /// The built-in plugins' state in the controller's journal (empty
    /// when there are none).
    #[must_use]
    pub fn plugin_journal(&self) -> &builtin::PluginJournal {
        &self.plugin_journal
    }

    /// Asks for a reconcile pass now rather than at the end of the period
    /// (requests made while a pass runs are folded into one more pass).
    /// After an `Allocate` or a `RemovePod` a plugin may have changed other
    /// containers too — a CPU plugin cutting a shared pool for a dedicated
    /// pod — and they must not keep those CPUs until the next period.
    pub fn request_reconcile(&self) {
        self.reconcile_now.notify_one();
    }

    /// The endpoint table.
    #[must_use]
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The built-in CPU plugin's pools, when it runs.
    #[must_use]
    pub fn cpu_pools(&self) -> Option<&pinion_plugins::cpu::CpuPluginHandle> {
        self.cpu_pools.get()
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &QrmConfig {
        &self.config
    }

    /// The resources of `container` that plugins serve (§4.1, §4.3).
    pub fn plugin_requests(
        &self,
        pod: &Pod,
        container: &str,
    ) -> Result<Vec<PluginRequest>, RequestError> {
        qrm_rules::plugin_requests(pod, container, &self.config.resource_names_map, |name| {
            self.registry.handles(name)
        })
    }

    /// The topology hints of every plugin for `container` (§4.4): a plugin
    /// that is not topology-aligned has no preference; one that is stopped
    /// or fails cannot satisfy the request.
    pub async fn hints(&self, pod: &Pod, container: &str) -> Result<ResourceHints, RequestError> {
        let mut out = ResourceHints::new();
        for request in self.plugin_requests(pod, container)? {
            if !qrm_rules::asks_for_hints(&request) {
                continue;
            }
            let plugin = match self.registry.active(&request.resource) {
                Ok(plugin) => plugin,
                Err(err) => {
                    tracing::warn!(resource = %request.resource, "no hints: {err}");
                    out.insert(request.resource.clone(), Some(Vec::new()));
                    continue;
                }
            };
            if !plugin.options.with_topology_alignment {
                continue;
            }
            let wire = grpc::wire_request(&qrm_request::request(pod, container, &request, None));
            let answer =
                self.registry
                    .call(
                        &plugin,
                        "GetTopologyHints",
                        |mut client, timeout| async move {
                            client.get_topology_hints(wire, timeout).await
                        },
                    )
                    .await;
            let hints = match answer {
                Ok(response) => {
                    let map = entries::hints_map(&response.resource_hints);
                    match map.get(&request.resource) {
                        None | Some(None) => None,
                        Some(Some(list)) => Some(
                            list.hints
                                .iter()
                                .filter_map(|h| qrm_rules::topology_hint(&h.nodes, h.preferred))
                                .collect(),
                        ),
                    }
                }
                Err(err) => {
                    tracing::warn!(resource = %request.resource, "hints: {err}; cannot satisfy");
                    Some(Vec::new())
                }
            };
            out.insert(request.resource.clone(), hints);
        }
        Ok(out)
    }

    /// Every plugin's `Allocate` for `container` with the merged hint
    /// (§4.5): the allocations by resource name (several names per plugin
    /// when it answers "accompanying" ones). A failed call fails the
    /// admission, except for `shared_cores` pods (and pods without a QoS
    /// level) that asked for no exclusive CPUs, whose failed resource is
    /// skipped (§4.6, [`allocation_failure_is_tolerated`]).
    pub async fn allocate(
        &self,
        pod: &Pod,
        container: &str,
        requests: &[PluginRequest],
        affinity: Option<TopologyHint>,
    ) -> Result<PluginAllocations, QrmError> {
        let mut allocations = PluginAllocations::new();
        for request in requests {
            let result = self.allocate_one(pod, container, request, affinity).await;
            match result {
                Ok(answer) => allocations.extend(answer),
                Err(source)
                    if allocation_failure_is_tolerated(pod, container)
                        && !matches!(source, CallError::Malformed { .. }) =>
                {
                    tracing::warn!(pod = %pod.uid, %container, resource = %request.resource, "allocation skipped for a {} pod that asked for no exclusive cpus: {source}", QosLevel::SharedCores);
                }
                Err(source) => {
                    return Err(QrmError::Allocate {
                        resource: request.resource.clone(),
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        container: container.to_string(),
                        source: Box::new(source),
                    })
                }
            }
        }
        Ok(allocations)
    }

    async fn allocate_one(
        &self,
        pod: &Pod,
        container: &str,
        request: &PluginRequest,
        affinity: Option<TopologyHint>,
    ) -> Result<PluginAllocations, CallError> {
        let plugin = self.registry.active(&request.resource)?;
        let hint = qrm_request::allocate_hint(plugin.options.with_topology_alignment, affinity);
        let request = qrm_request::request(pod, container, request, hint);
        if let Some(answer) = self
            .registry
            .call_in_process(&plugin, "Allocate", |native| native.allocate(&request))
        {
            // The plugin answers for this very request: no pod to check.
            let allocations = answer?
                .as_ref()
                .map(convert::in_process_allocations)
                .unwrap_or_default();
            self.check_answer(&plugin.resource, "Allocate", &allocations)?;
            return Ok(allocations);
        }
        let wire = grpc::wire_request(&request);
        let response = self
            .registry
            .call(&plugin, "Allocate", |mut client, timeout| async move {
                client.allocate(wire, timeout).await
            })
            .await?;
        plugin_answer::check_pod(&pod.uid, &response.pod_uid)
            .map_err(|err| self.refuse(&plugin.resource, "Allocate", &err))?;
        let allocations: PluginAllocations = response
            .allocation_result
            .map(|result| {
                entries::allocation_map(&result)
                    .iter()
                    .map(|(name, info)| (name.clone(), convert::allocation(info)))
                    .collect()
            })
            .unwrap_or_default();
        // An answer that cannot be applied fails the container as in the
        // fork (whatever its QoS level), counted as the plugin's error.
        self.check_answer(&plugin.resource, "Allocate", &allocations)?;
        Ok(allocations)
    }

    /// Whether the answer of `resource`'s plugin can be applied (its OCI
    /// properties, `pinion_core::plugin_allocation::check`) and may be
    /// (`pinion_core::plugin_answer::check`: only the `cpu` plugin sets
    /// the cpuset; names, values and quantities a runtime takes). A refusal
    /// is the plugin's error.
    fn check_answer(
        &self,
        resource: &str,
        method: &str,
        allocations: &PluginAllocations,
    ) -> Result<(), CallError> {
        pinion_core::plugin_allocation::check(allocations)
            .map_err(|err| self.refuse(resource, method, &err))?;
        plugin_answer::check(resource, allocations)
            .map_err(|err| self.refuse(resource, method, &err))
    }

    /// The plugin's answer to `method` refused for `reason`: logged,
    /// counted as the plugin's error.
    fn refuse(&self, resource: &str, method: &str, reason: &impl std::fmt::Display) -> CallError {
        let error = CallError::Malformed {
            resource: resource.to_string(),
            method: method.to_string(),
            reason: reason.to_string(),
        };
        tracing::warn!(%resource, "{error}");
        self.registry.note_error(resource, method, &error);
        error
    }

    /// `RemovePod` on every active plugin (§4.10); `Ok` once all of them
    /// answered (a plugin that does not implement it has nothing to drop).
    pub async fn remove_pod(&self, uid: &str) -> Result<(), Vec<CallError>> {
        let mut errors = Vec::new();
        for plugin in self.registry.all_active() {
            let in_process = self
                .registry
                .call_in_process(&plugin, "RemovePod", |native| native.remove_pod(uid));
            let result = match in_process {
                Some(result) => result,
                None => {
                    let request = rp::RemovePodRequest {
                        pod_uid: uid.to_string(),
                    };
                    self.registry
                        .call(&plugin, "RemovePod", |mut client, timeout| async move {
                            client.remove_pod(request, timeout).await
                        })
                        .await
                        .map(drop)
                }
            };
            match result {
                Ok(()) | Err(CallError::Unsupported { .. }) => {}
                Err(err) => errors.push(err),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// `GetResourcesAllocation` of every active plugin with `need_reconcile`
    /// (§4.9); a plugin that fails is skipped this round.
    pub async fn poll(&self) -> Vec<(String, Poll)> {
        let mut polls = Vec::new();
        for plugin in self.registry.all_active() {
            if !plugin.options.need_reconcile {
                continue;
            }
            if let Some(result) =
                self.registry
                    .call_in_process(&plugin, "GetResourcesAllocation", |native| {
                        Ok(native.allocations())
                    })
            {
                match result {
                    Ok(all) => polls.push((
                        plugin.resource.clone(),
                        self.in_process_poll(&plugin.resource, &all),
                    )),
                    Err(err) => tracing::warn!(resource = %plugin.resource, "reconcile: {err}"),
                }
                continue;
            }
            let result = self
                .registry
                .call(
                    &plugin,
                    "GetResourcesAllocation",
                    |mut client, timeout| async move {
                        client
                            .get_resources_allocation(rp::GetResourcesAllocationRequest {}, timeout)
                            .await
                    },
                )
                .await;
            match result {
                Ok(response) => {
                    let poll = entries::allocations_map(&response)
                        .into_iter()
                        .map(|(pod, containers)| {
                            let containers = containers
                                .into_iter()
                                .map(|(name, allocation)| {
                                    let allocations = allocation.map(|a| {
                                        let allocations = entries::allocation_map(&a)
                                            .iter()
                                            .map(|(n, info)| (n.clone(), convert::allocation(info)))
                                            .collect::<BTreeMap<String, PluginAllocation>>();
                                        self.reconcile_answer(&plugin.resource, allocations)
                                    });
                                    (name, allocations)
                                })
                                .collect();
                            (pod, containers)
                        })
                        .collect();
                    polls.push((plugin.resource.clone(), poll));
                }
                Err(err) => tracing::warn!(resource = %plugin.resource, "reconcile: {err}"),
            }
        }
        polls
    }

    /// A reconcile poll of a plugin in the agent's process, as
    /// [`Self::poll`] makes one of a wire answer (every answer checked by
    /// [`Self::reconcile_answer`]).
    fn in_process_poll(&self, resource: &str, all: &pinion_plugins::Allocations) -> Poll {
        all.iter()
            .map(|(pod, containers)| {
                let containers = containers
                    .iter()
                    .map(|(name, allocation)| {
                        let allocations = convert::in_process_allocations(allocation);
                        let answer = self.reconcile_answer(resource, allocations);
                        (name.clone(), Some(answer))
                    })
                    .collect();
                (pod.clone(), containers)
            })
            .collect()
    }

    /// `resource`'s plugin's reconcile answer for one container, checked
    /// as an `Allocate` answer is ([`Self::check_answer`]). A refused answer
    /// (logged, counted as the plugin's error) becomes an empty one, which
    /// the controller's merge leaves the stored allocation with — not a
    /// missing one, which would mean the plugin forgot the container.
    fn reconcile_answer(
        &self,
        resource: &str,
        allocations: PluginAllocations,
    ) -> PluginAllocations {
        match self.check_answer(resource, "GetResourcesAllocation", &allocations) {
            Ok(()) => allocations,
            Err(_) => PluginAllocations::new(),
        }
    }

    /// Starts the watcher of the registration directory and the
    /// `Registration.Register` server; each ends when `stop` turns true.
    /// Every resource of the durable allocations (`durable_resources`) gets
    /// a stopped placeholder first (§3.3). The loops that need the keeper of
    /// the allocations ([`loops`]) are spawned by the daemon's wiring.
    pub fn start<'a>(
        &self,
        durable_resources: impl IntoIterator<Item = &'a String>,
        stop: &watch::Receiver<bool>,
    ) -> Result<Vec<JoinHandle<()>>, QrmError> {
        for resource in durable_resources {
            self.registry.placeholder(resource);
        }
        let dir = self.config.plugin_registration_dir.clone();
        let dir_watch = watcher::watch_dir(&dir).map_err(|err| QrmError::Start(err.to_string()))?;
        let socket_dir = self
            .config
            .registration_socket
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        trusted_dirs(&dir, &socket_dir)?;
        let listener = pinion_api::uds::bind(&self.config.registration_socket, 0o600)
            .map_err(|err| {
                QrmError::Start(format!(
                    "registration socket {}: {err}",
                    self.config.registration_socket.display()
                ))
            })?
            .into_inner();
        let service = register::RegistrationService {
            registry: Arc::clone(&self.registry),
            socket_dir,
        };
        // Bounded like the podresources socket: a connection cap with
        // idle connections evicted at the cap, a first-byte deadline.
        let routes =
            tonic::service::Routes::new(rp::registration_server::RegistrationServer::new(service));
        let limits = register::limits(self.config.rpc_timeout);
        let server_stop = stop.clone();
        let socket = self.config.registration_socket.clone();
        let server = tokio::spawn(async move {
            crate::podresources::serve_grpc(
                "registration",
                listener,
                &socket,
                register::MAX_CONNECTIONS,
                routes,
                limits,
                server_stop,
            )
            .await;
        });
        tracing::info!(dir = %dir.display(), socket = %self.config.registration_socket.display(), "qos resource manager: watching for resource plugins");
        Ok(vec![
            tokio::spawn(watcher::run(
                dir,
                dir_watch,
                Arc::clone(&self.registry),
                stop.clone(),
            )),
            server,
        ])
    }
}

/// Refuses to start when someone other than root or the agent's user can
/// put a socket into the plugin-watcher directory `dir` or the directory
/// of the registration socket `socket_dir` (created 0750 if missing), or
/// swap either or a parent (`pinion_host::trust`): a plugin decides where
/// containers run.
fn trusted_dirs(dir: &std::path::Path, socket_dir: &std::path::Path) -> Result<(), QrmError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(socket_dir)
        .map_err(|err| {
            QrmError::Start(format!(
                "creating the registration socket's directory {}: {err}",
                socket_dir.display()
            ))
        })?;
    let agent = pinion_host::trust::agent_uid();
    for dir in [dir, socket_dir] {
        pinion_host::trust::check_dir(dir, agent)
            .map_err(|err| QrmError::Start(err.to_string()))?;
    }
    Ok(())
}

/// The plugins as a hint source of the admission pipeline.
#[derive(Debug, Clone)]
pub struct QrmHints(pub Arc<Qrm>);

impl HintSource for QrmHints {
    fn name(&self) -> String {
        "qos-resource-manager".to_string()
    }

    fn hints(&self, pod: Arc<Pod>, container: Option<String>) -> HintFuture {
        let qrm = Arc::clone(&self.0);
        Box::pin(async move {
            // Pod scope: neither upstream manager asks plugins for pod
            // hints (§4.4); they have no preference.
            let Some(container) = container else {
                return Ok(ResourceHints::new());
            };
            qrm.hints(&pod, &container)
                .await
                .map_err(|err| err.to_string())
        })
    }
}
