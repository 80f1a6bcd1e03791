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
use std::time::Instant;

use pinion_api::entries;
use pinion_api::resourceplugin as rp;
use pinion_core::plugin_allocation::PluginAllocations;
use pinion_core::plugin_answer;
use pinion_core::pod::Pod;
use pinion_core::qos::QosLevel;
use pinion_core::qrm_rules::{self, allocation_failure_is_tolerated};
use pinion_core::topomgr::provider::ResourceHints;
use pinion_core::topomgr::TopologyHint;
use pinion_core::CpuSet;
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

/// The containers whose reconcile answers a poll keeps: pod UID → container
/// names ([`Qrm::poll_for`]; the keeper's containers, `AllocationKeeper::known_containers`).
pub type KnownContainers = BTreeMap<String, std::collections::BTreeSet<String>>;

/// Refused or ignored entries named in the one log line a poll writes for
/// each kind (the count says how many there were).
const NAMED_IN_LOG: usize = 3;
/// The longest name or reason a poll's log line quotes, in bytes.
const CLIPPED: usize = 256;

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
    /// True once the configured built-in plugins registered (at once when
    /// none is configured): until then no `RemovePod` counts as heard.
    builtin_started: std::sync::atomic::AtomicBool,
    /// The machine the answers are checked against (online CPUs, online
    /// NUMA nodes), as the keeper last said ([`Qrm::follow_machine`]);
    /// unknown until then.
    machine: std::sync::RwLock<Option<Arc<(CpuSet, CpuSet)>>>,
    /// Pods `Allocate` was asked for during the last two polls: a poll keeps
    /// their answers even when the keeper's containers do not list them yet
    /// (their record may still be on its way), [`Qrm::poll_for`].
    recent_pods: std::sync::Mutex<[std::collections::BTreeSet<String>; 2]>,
}

impl Qrm {
    /// A manager with an empty endpoint table.
    #[must_use]
    pub fn new(config: QrmConfig) -> Arc<Self> {
        let registry = Arc::new(Registry::new(config.rpc_timeout));
        Arc::new(Self {
            registry,
            cpu_pools: std::sync::OnceLock::new(),
            reconcile_now: tokio::sync::Notify::new(),
            plugin_journal: Arc::default(),
            removal_loop_running: watch::channel(false).0,
            builtin_started: std::sync::atomic::AtomicBool::new(config.builtin.is_empty()),
            machine: std::sync::RwLock::default(),
            recent_pods: std::sync::Mutex::default(),
            config,
        })
    }

    /// The machine's online CPUs `cpus` and online NUMA nodes `mems`, which
    /// every answer is checked against from now on (the keeper's wiring
    /// calls it at start and whenever they change).
    pub fn follow_machine(&self, cpus: &CpuSet, mems: &CpuSet) {
        let mut machine = self
            .machine
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if machine
            .as_deref()
            .is_none_or(|(c, m)| c != cpus || m != mems)
        {
            *machine = Some(Arc::new((cpus.clone(), mems.clone())));
        }
    }

    /// Has the built-in CPU plugin, when it runs, follow the machine's
    /// online CPUs (`topology`, CPU hot-plug): it lays its pools out again
    /// and moves exclusive containers off CPUs gone offline; a reconcile
    /// pass then pushes the containers whose cpuset changed. Nothing
    /// happens when its machine is `topology` already.
    pub fn follow_topology(&self, topology: &pinion_core::Topology) {
        let Some(cpu) = self.cpu_pools.get() else {
            return;
        };
        match cpu.follow_topology(topology) {
            Ok(report) if report.containers.is_empty() && report.pools.is_empty() => {}
            Ok(report) => {
                tracing::info!(
                    containers = report.containers.len(),
                    "the built-in cpu plugin follows the online cpus"
                );
                self.request_reconcile();
            }
            Err(err) => {
                tracing::error!("the built-in cpu plugin cannot follow the online cpus: {err}");
            }
        }
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
        if !requests.is_empty() {
            let mut recent = self
                .recent_pods
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            recent[1].insert(pod.uid.clone());
        }
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
        self.answer_defect(resource, allocations)
            .map_err(|reason| self.refuse(resource, method, &reason))
    }

    /// What is wrong with `resource`'s plugin's answer `allocations`, if
    /// anything ([`Self::check_answer`]'s checks; also its cpusets against
    /// the machine's online CPUs and NUMA nodes once they are known).
    fn answer_defect(&self, resource: &str, allocations: &PluginAllocations) -> Result<(), String> {
        pinion_core::plugin_allocation::check(allocations).map_err(|err| err.to_string())?;
        plugin_answer::check(resource, allocations).map_err(|err| err.to_string())?;
        let machine = self
            .machine
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(machine) = machine {
            let (cpus, mems) = &*machine;
            plugin_answer::check_online(allocations, Some(cpus), Some(mems))
                .map_err(|err| err.to_string())?;
        }
        Ok(())
    }

    /// The plugin's answer to `method` refused for `reason`: logged,
    /// counted as the plugin's error.
    fn refuse(&self, resource: &str, method: &str, reason: &impl std::fmt::Display) -> CallError {
        let error = self.count_refused_answer(resource, method, &reason.to_string());
        tracing::warn!(%resource, "{error}");
        error
    }

    /// The plugin's answer to `method` refused for `reason` — by the manager
    /// ([`Self::refuse`]) or by the controller, which tells what only its
    /// state can: counted as the plugin's error (its last error); the
    /// caller logs or returns it.
    pub fn count_refused_answer(&self, resource: &str, method: &str, reason: &str) -> CallError {
        let error = CallError::Malformed {
            resource: resource.to_string(),
            method: method.to_string(),
            reason: reason.to_string(),
        };
        self.registry.note_error(resource, method, &error);
        error
    }

    /// `RemovePod` on every active plugin (§4.10); `Ok` once all of them
    /// answered (a plugin that does not implement it has nothing to drop).
    /// The plugins behind a socket are called at once, each with its own
    /// deadline: one that hangs delays no other plugin's `RemovePod`.
    pub async fn remove_pod(&self, uid: &str) -> Result<(), Vec<CallError>> {
        // A removal pending from before a restart, tried before the agent's
        // own plugins registered, was counted as heard by every plugin (no
        // active one): the CPU plugin then kept the pod's CPUs for good
        // (found from outside, session 45). It waits for them.
        if !self
            .builtin_started
            .load(std::sync::atomic::Ordering::Acquire)
        {
            let names: Vec<&str> = self
                .config
                .builtin
                .iter()
                .map(|plugin| plugin.config.kind().name())
                .collect();
            return Err(vec![CallError::BuiltinNotStarted {
                names: names.join(", "),
            }]);
        }
        let mut results = Vec::new();
        let mut calls = tokio::task::JoinSet::new();
        for plugin in self.registry.all_active() {
            let in_process = self
                .registry
                .call_in_process(&plugin, "RemovePod", |native| native.remove_pod(uid));
            if let Some(result) = in_process {
                results.push(result);
                continue;
            }
            let registry = Arc::clone(&self.registry);
            let request = rp::RemovePodRequest {
                pod_uid: uid.to_string(),
            };
            calls.spawn(async move {
                registry
                    .call(&plugin, "RemovePod", |mut client, timeout| async move {
                        client.remove_pod(request, timeout).await
                    })
                    .await
                    .map(drop)
            });
        }
        results.extend(calls.join_all().await);
        let mut errors = Vec::new();
        for result in results {
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
    /// (§4.9), every entry kept ([`Self::poll_for`] without a filter).
    pub async fn poll(&self) -> Vec<(String, Poll)> {
        self.poll_for(None).await
    }

    /// `GetResourcesAllocation` of every active plugin with `need_reconcile`
    /// (§4.9), every answer waited for ([`Self::poll_pass`] with no calls
    /// under way and no deadline).
    pub async fn poll_for(&self, known: Option<&KnownContainers>) -> Vec<(String, Poll)> {
        self.poll_pass(known, Instant::now(), &mut Vec::new(), None)
            .await
            .0
    }

    /// One reconcile pass's polls, sent at `polled_at`: `GetResourcesAllocation`
    /// of every active plugin with `need_reconcile` (§4.9); a plugin that
    /// fails is skipped this round.
    ///
    /// The plugins on sockets are asked at once, each within its own
    /// deadline, and the pass waits for their answers until `wait_until`
    /// (`None`: all of them). A call still under way then stays in
    /// `under_way`, the caller's: a later pass takes its answer when it has
    /// come and does not ask that plugin again meanwhile, so a plugin that
    /// hangs delays no other plugin's polls. Returns the polls, by
    /// resource name, and when the earliest of them was sent: an answer of
    /// an earlier pass is as old as that pass.
    ///
    /// With `known`, entries of other containers are dropped as the answer
    /// is read, before anything is converted, copied or checked (a plugin
    /// may name any number of pods the node does not have): what a poll
    /// holds is bounded by the node's containers, not by the answer. The
    /// pods `Allocate` was asked for during the last two polls are kept too
    /// (their record may not have reached `known` yet). Ignored and refused
    /// entries are counted and logged once per plugin and poll.
    pub async fn poll_pass(
        &self,
        known: Option<&KnownContainers>,
        polled_at: Instant,
        under_way: &mut Vec<PollUnderWay>,
        wait_until: Option<tokio::time::Instant>,
    ) -> (Vec<(String, Poll)>, Instant) {
        let recent = {
            let mut recent = self
                .recent_pods
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let newer = std::mem::take(&mut recent[1]);
            let older = std::mem::replace(&mut recent[0], newer);
            let mut both = older;
            both.extend(recent[0].iter().cloned());
            both
        };
        let filter = PollFilter {
            known,
            recent: &recent,
        };
        let mut polls = Vec::new();
        let mut sent = polled_at;
        let mut calls = std::mem::take(under_way);
        // A poll still asked of a plugin since replaced or stopped is given
        // up: its answer is not the current plugin's.
        calls.retain(|call| {
            let current = self.registry.is_current(&call.resource, call.generation);
            if !current {
                tracing::info!(resource = %call.resource, "reconcile: the plugin asked was replaced or stopped; its answer is not awaited");
                call.task.abort();
            }
            current
        });
        for plugin in self.registry.all_active() {
            if !plugin.options.need_reconcile
                || calls.iter().any(|call| call.resource == plugin.resource)
            {
                continue;
            }
            let in_process =
                self.registry
                    .call_in_process(&plugin, "GetResourcesAllocation", |native| {
                        Ok(native.allocations())
                    });
            if let Some(result) = in_process {
                let mut tally = Tally::default();
                match result {
                    Ok(all) => polls.push((
                        plugin.resource.clone(),
                        self.in_process_poll(&plugin.resource, &all, &filter, &mut tally),
                    )),
                    Err(err) => tracing::warn!(resource = %plugin.resource, "reconcile: {err}"),
                }
                self.report(&plugin.resource, &tally);
                continue;
            }
            let registry = Arc::clone(&self.registry);
            let resource = plugin.resource.clone();
            let generation = plugin.generation;
            let task = tokio::spawn(async move {
                registry
                    .call(
                        &plugin,
                        "GetResourcesAllocation",
                        |mut client, timeout| async move {
                            client
                                .get_resources_allocation(
                                    rp::GetResourcesAllocationRequest {},
                                    timeout,
                                )
                                .await
                        },
                    )
                    .await
            });
            calls.push(PollUnderWay {
                resource,
                generation,
                sent: polled_at,
                task,
            });
        }
        for mut call in calls {
            let answered = match wait_until {
                Some(deadline) if !call.task.is_finished() => {
                    tokio::time::timeout_at(deadline, &mut call.task).await.ok()
                }
                _ => Some((&mut call.task).await),
            };
            let Some(answered) = answered else {
                under_way.push(call);
                continue;
            };
            let resource = call.resource;
            let mut tally = Tally::default();
            match answered {
                Ok(Ok(_)) if !self.registry.is_current(&resource, call.generation) => {
                    tracing::info!(%resource, "reconcile: the plugin that answered was replaced or stopped meanwhile; its answer is dropped");
                }
                Ok(Ok(response)) => {
                    let poll = self.wire_poll(&resource, response, &filter, &mut tally);
                    polls.push((resource.clone(), poll));
                    sent = sent.min(call.sent);
                }
                Ok(Err(err)) => tracing::warn!(%resource, "reconcile: {err}"),
                Err(err) => tracing::warn!(%resource, "reconcile: the poll's task failed: {err}"),
            }
            self.report(&resource, &tally);
        }
        polls.sort_by(|a, b| a.0.cmp(&b.0));
        (polls, sent)
    }

    /// A reconcile poll of a wire answer, read entry by entry (moved, not
    /// copied): the entries `filter` drops are counted and go with the
    /// answer; those it keeps are converted and checked by
    /// [`Self::reconcile_answer`]. A pod or container named twice keeps its
    /// last entry, as `pinion_api::entries::allocations_map` reads it.
    fn wire_poll(
        &self,
        resource: &str,
        response: rp::GetResourcesAllocationResponse,
        filter: &PollFilter<'_>,
        tally: &mut Tally,
    ) -> Poll {
        let mut poll = Poll::new();
        for pod in response.pod_resources {
            let containers = pod.value.map(|v| v.container_resources).unwrap_or_default();
            if !filter.keeps_pod(&pod.key) {
                tally.ignore(&pod.key, containers.len().max(1));
                continue;
            }
            let mut kept = BTreeMap::new();
            for container in containers {
                if !filter.keeps(&pod.key, &container.key) {
                    tally.ignore(&pod.key, 1);
                    continue;
                }
                let answer = container.value.map(|allocation| {
                    let allocations = convert::allocations(allocation);
                    self.reconcile_answer(resource, allocations, (&pod.key, &container.key), tally)
                });
                kept.insert(container.key, answer);
            }
            poll.entry(pod.key).or_default().extend(kept);
        }
        poll
    }

    /// A reconcile poll of a plugin in the agent's process, as
    /// [`Self::wire_poll`] makes one of a wire answer.
    fn in_process_poll(
        &self,
        resource: &str,
        all: &pinion_plugins::Allocations,
        filter: &PollFilter<'_>,
        tally: &mut Tally,
    ) -> Poll {
        let mut poll = Poll::new();
        for (pod, containers) in all {
            if !filter.keeps_pod(pod) {
                tally.ignore(pod, containers.len().max(1));
                continue;
            }
            let mut kept = BTreeMap::new();
            for (name, allocation) in containers {
                if !filter.keeps(pod, name) {
                    tally.ignore(pod, 1);
                    continue;
                }
                let allocations = convert::in_process_allocations(allocation);
                let answer = self.reconcile_answer(resource, allocations, (pod, name), tally);
                kept.insert(name.clone(), Some(answer));
            }
            poll.insert(pod.clone(), kept);
        }
        poll
    }

    /// `resource`'s plugin's reconcile answer for container `key` (pod UID,
    /// name), checked as an `Allocate` answer is ([`Self::answer_defect`]).
    /// A refused answer (counted in `tally`, which [`Self::report`] logs
    /// and counts as the plugin's error once per poll) becomes an empty
    /// one, which the controller's merge leaves the stored allocation with
    /// — not a missing one, which would mean the plugin forgot the
    /// container.
    fn reconcile_answer(
        &self,
        resource: &str,
        allocations: PluginAllocations,
        key: (&str, &str),
        tally: &mut Tally,
    ) -> PluginAllocations {
        match self.answer_defect(resource, &allocations) {
            Ok(()) => allocations,
            Err(reason) => {
                tally.refuse(key, &reason);
                PluginAllocations::new()
            }
        }
    }

    /// One poll's ignored and refused entries of `resource`'s plugin: one
    /// log line each (how many, the first few), and the refusals once as
    /// the plugin's `GetResourcesAllocation` error.
    fn report(&self, resource: &str, tally: &Tally) {
        if tally.ignored > 0 {
            tracing::info!(
                %resource,
                ignored = tally.ignored,
                "reconcile: ignored {} entries of resource plugin {resource}'s GetResourcesAllocation answer for containers this node does not have (pods {})",
                tally.ignored,
                tally.ignored_pods.join(", ")
            );
        }
        if tally.refused > 0 {
            let reason = format!(
                "{} container answers refused, their stored allocations stay (first: {})",
                tally.refused,
                tally.refusals.join("; ")
            );
            self.refuse(resource, "GetResourcesAllocation", &reason);
        }
    }

    /// Starts the watcher of the registration directory, the
    /// `Registration.Register` server and the watch of its sockets'
    /// removals; each ends when `stop` turns true.
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
        let socket_dir_watch = watcher::watch_socket_dir(&socket_dir)
            .map_err(|err| QrmError::Start(err.to_string()))?;
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
            socket_dir: socket_dir.clone(),
        };
        // Bounded like the podresources socket: a connection cap with
        // idle connections evicted at the cap, a first-byte deadline.
        let routes = tonic::service::Routes::new(
            rp::registration_server::RegistrationServer::new(service)
                .max_decoding_message_size(register::MAX_REQUEST),
        );
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
            tokio::spawn(watcher::follow_removals(
                socket_dir,
                socket_dir_watch,
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

/// A plugin's `GetResourcesAllocation` still under way at the end of a
/// reconcile pass ([`Qrm::poll_pass`]), kept by the reconcile loop.
#[derive(Debug)]
pub struct PollUnderWay {
    resource: String,
    /// The registration asked ([`registry::Active::generation`]).
    generation: u64,
    /// When the pass that asked it started.
    sent: Instant,
    task: JoinHandle<Result<rp::GetResourcesAllocationResponse, CallError>>,
}

impl PollUnderWay {
    /// Gives up the call (the reconcile loop stops).
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Which entries of a reconcile answer a poll keeps ([`Qrm::poll_for`]):
/// everything without `known`, else the containers it lists and every
/// container of the `recent` pods.
struct PollFilter<'a> {
    known: Option<&'a KnownContainers>,
    recent: &'a std::collections::BTreeSet<String>,
}

impl PollFilter<'_> {
    fn keeps_pod(&self, pod: &str) -> bool {
        self.known
            .is_none_or(|known| known.contains_key(pod) || self.recent.contains(pod))
    }

    fn keeps(&self, pod: &str, container: &str) -> bool {
        self.known.is_none_or(|known| {
            self.recent.contains(pod) || known.get(pod).is_some_and(|c| c.contains(container))
        })
    }
}

/// The entries one poll of one plugin ignored and refused: counts, and the
/// first [`NAMED_IN_LOG`] of each for the log.
#[derive(Debug, Default)]
struct Tally {
    ignored: usize,
    ignored_pods: Vec<String>,
    refused: usize,
    refusals: Vec<String>,
}

impl Tally {
    fn ignore(&mut self, pod: &str, entries: usize) {
        self.ignored += entries;
        let pod = format!("{:?}", clip(pod));
        if self.ignored_pods.len() < NAMED_IN_LOG && !self.ignored_pods.contains(&pod) {
            self.ignored_pods.push(pod);
        }
    }

    fn refuse(&mut self, (pod, container): (&str, &str), reason: &str) {
        self.refused += 1;
        if self.refusals.len() < NAMED_IN_LOG {
            self.refusals.push(format!(
                "pod {:?} container {:?}: {}",
                clip(pod),
                clip(container),
                clip(reason)
            ));
        }
    }
}

/// At most [`CLIPPED`] bytes of `text` (a plugin's names and values can be
/// as long as its message) for a log line.
fn clip(text: &str) -> &str {
    let mut end = text.len().min(CLIPPED);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
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
