//! Owns the transport to the controller: its thread, the command queue and its polling, the [`Command`] enum, and the handle front-ends use.
//!
//! The controller runs on one dedicated OS thread (its work is blocking
//! file I/O: fsync of the checkpoint, cgroupfs writes), receiving
//! [`Command`]s from a bounded channel and answering each on its own
//! one-shot channel. Snapshots and the shared pool are `watch` channels, so
//! readers never wait for the controller. The handle is thin: each method
//! sends a command and awaits its answer; an admission is the one sequence
//! of several steps, and it lives in [`super::admission`]. Anything slow or
//! remote — the topology hints of outside providers, the resource plugins'
//! calls — happens on the async side, before a command is sent or after it
//! was answered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pinion_core::plugin_allocation::PluginAllocations;
use pinion_core::pod::PodResources;
use pinion_core::topomgr::TopologyManager;
use pinion_core::{CpuSet, Placement, Quantity, Topology};
use pinion_host::cgroup::ContainerCgroup;
use tokio::sync::{mpsc, oneshot, watch};

use super::{
    AdmitRequest, Admitted, Answer, ControlError, Controller, Decision, Key, Reach,
    ReconcileReport, Reconciled, Released, RunningContainer, Snapshot, StoredAllocations, Synced,
    TopologyReport,
};
use crate::hints::{GatheredHints, HintGatherer};
use crate::qrm::{Poll, Qrm};

/// How many commands may wait for the controller.
const QUEUE: usize = 1024;
/// The most decisions one journal flush makes durable.
const BATCH_MAX: usize = 256;
pub use super::removal_wait::REMOVAL_WAIT;
use super::removal_wait::{await_removal, RemovalWait};

/// How long the controller keeps polling its queue once it is empty,
/// before it sleeps. A command that comes within it (the next step of an
/// admission, the next pod of a burst) is taken at once rather than after
/// a wake-up, which costs 15–20 µs when the controller's CPU has gone idle
/// (`docs/performance.md`, "The controller polls before it sleeps").
pub const POLL_BEFORE_SLEEP: Duration = Duration::from_micros(50);

type Reply<T> = oneshot::Sender<Result<T, ControlError>>;

/// A typed request to the controller.
#[derive(Debug)]
pub enum Command {
    /// Admit one container of a pod, with the outside providers' hints
    /// (and the plugins' answers when they were asked first).
    Admit {
        request: Box<AdmitRequest>,
        hints: Box<GatheredHints>,
        plugins: Option<Box<StoredAllocations>>,
        reply: Reply<Admitted>,
    },
    /// Release one container (`Some`) or a whole pod (`None`).
    Release {
        pod: String,
        container: Option<String>,
        reach: Reach,
        reply: Reply<Released>,
    },
    /// Agree with the runtime's list of running containers (NRI
    /// Synchronize); answers the released containers and the updates that
    /// bring the running ones to their placements.
    SyncRuntime {
        running: Vec<RunningContainer>,
        restartable: BTreeMap<String, Vec<ContainerCgroup>>,
        reply: Reply<Synced>,
    },
    /// A runtime container stopped while its pod still runs: keep its
    /// placement for its next run ([`Controller::park`]).
    Park {
        key: Key,
        sandbox: Option<ContainerCgroup>,
        reply: Reply<bool>,
    },
    /// The runtime created a runtime container's task (NRI
    /// `StartContainer`): its cgroup exists; true when Pinion knows it
    /// ([`Controller::container_started`]).
    Started {
        container_id: String,
        reply: Reply<bool>,
    },
    /// A new runtime container of a held container gets the held placement
    /// ([`Controller::readmit_held`]); `None` when it is not held.
    ReadmitHeld {
        request: Box<AdmitRequest>,
        reply: Reply<Option<Admitted>>,
    },
    /// Record a runtime container that follows the shared pool without an
    /// admission (pods outside Kubernetes).
    Follow {
        key: Key,
        container_id: String,
        reply: Reply<Placement>,
    },
    /// The runtime failed to apply updates of these containers.
    RuntimeUpdatesFailed { container_ids: Vec<String> },
    /// The runtime applied updates of these containers.
    RuntimeUpdatesApplied { container_ids: Vec<String> },
    /// Store the resource plugins' allocations of an admitted container
    /// (`running`: its re-allocation, which the runtime hears as an update).
    RecordAllocations {
        key: Key,
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
        running: bool,
        reply: Reply<Admitted>,
    },
    /// Merge the plugins' reconcile answers.
    /// (The caller keeps a reference to `polls` until the answer: every
    /// allocation of every plugin is freed on its thread, not on the
    /// controller's.)
    PluginReconcile {
        polls: Arc<Vec<(String, Poll)>>,
        polled_at: Instant,
        reply: Reply<Reconciled>,
    },
    /// Undo a failed admission: release `container` of `pod` when it was
    /// admitted, and have the plugins told to forget the pod when none of
    /// its containers is left ([`Controller::undo_admission`]).
    UndoAdmission {
        pod: String,
        container: Option<String>,
        reply: Reply<()>,
    },
    /// An admission that asked resource plugins was abandoned half-way
    /// (its caller went away): [`Controller::admission_abandoned`].
    AdmissionAbandoned { pod: String },
    /// Every plugin heard of a pod's removal; the reply comes once the
    /// snapshot no longer lists it as pending.
    PluginPodRemoved { uid: String, reply: Reply<()> },
    /// Resize a placed container's CPU request in place.
    Resize {
        key: Key,
        cpus: Quantity,
        reach: Reach,
        reply: Reply<Admitted>,
    },
    /// Register (`Some`) or forget (`None`) a pod's pod-level resources
    /// (before its containers are admitted).
    SetPodResources {
        uid: String,
        resources: Option<PodResources>,
    },
    /// The runtime removed a pod's sandbox: the pod is gone.
    PodRemoved { uid: String },
    /// Run a reconcile pass now.
    Reconcile { reply: Reply<ReconcileReport> },
    /// Make the built-in plugins' waiting state changes durable.
    FlushPluginState { reply: Reply<()> },
    /// The machine's online CPUs changed: follow them (CPU hot-plug).
    Topology {
        machine: Box<Topology>,
        reply: Reply<TopologyReport>,
    },
    /// Stop after the commands already queued.
    Shutdown,
}

/// A cloneable handle to the controller.
#[derive(Debug, Clone)]
pub struct ControllerHandle {
    commands: mpsc::Sender<Command>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    plugin_removals: watch::Receiver<Vec<String>>,
    shared_pool: watch::Receiver<CpuSet>,
    /// The outside hint providers admissions ask first.
    pub(super) hints: Arc<HintGatherer>,
    /// The QoS Resource Manager (resource plugins), when it runs.
    pub(super) qrm: Option<Arc<Qrm>>,
    /// The engine's Topology Manager (fixed at start): what an admission's
    /// merged hint is, when it can be known before the engine decides.
    pub(super) topology_manager: Arc<TopologyManager>,
}

/// Starts the controller thread, with no outside hint providers.
pub fn spawn(controller: Controller) -> std::io::Result<(ControllerHandle, JoinHandle<()>)> {
    spawn_with_hints(controller, HintGatherer::none())
}

/// Starts the controller thread; admissions first gather the hints of
/// `hints`' providers.
pub fn spawn_with_hints(
    controller: Controller,
    hints: HintGatherer,
) -> std::io::Result<(ControllerHandle, JoinHandle<()>)> {
    spawn_with(controller, hints, None)
}

/// Starts the controller thread; admissions first gather the hints of
/// `hints`' providers, and go through the resource plugins of `qrm`.
pub fn spawn_with(
    mut controller: Controller,
    hints: HintGatherer,
    qrm: Option<Arc<Qrm>>,
) -> std::io::Result<(ControllerHandle, JoinHandle<()>)> {
    if let Some(qrm) = &qrm {
        // The built-in plugins keep their state in this journal.
        let journal = qrm.plugin_journal();
        journal.restore(controller.keep_plugin_state(
            journal.outbox.clone(),
            crate::qrm::builtin::STATE_KIND_PREFIX,
        ));
    }
    let (commands, receiver) = mpsc::channel(QUEUE);
    let handle = ControllerHandle {
        commands,
        snapshots: controller.subscribe_snapshots(),
        plugin_removals: controller.subscribe_plugin_removals(),
        shared_pool: controller.subscribe_shared_pool(),
        hints: Arc::new(hints),
        qrm,
        topology_manager: Arc::new(controller.engine.topology_manager().clone()),
    };
    let thread = std::thread::Builder::new()
        .name("pinion-controller".to_string())
        .spawn(move || run(controller, receiver))?;
    Ok((handle, thread))
}

fn run(mut controller: Controller, mut receiver: mpsc::Receiver<Command>) {
    let poll = poll_before_sleep();
    let mut next: Option<Command> = None;
    loop {
        let command = match next.take() {
            Some(command) => command,
            None => match receive(&mut receiver, poll) {
                Some(command) => command,
                None => break,
            },
        };
        let command = match command {
            first @ (Command::Admit { .. } | Command::Release { .. }) => {
                let (batch, leftover) = drain_batch(first, &mut receiver);
                next = leftover;
                run_batch(&mut controller, batch);
                continue;
            }
            other => other,
        };
        match command {
            Command::SyncRuntime {
                running,
                restartable,
                reply,
            } => {
                let _ = reply.send(controller.sync_runtime_holding(&running, &restartable));
            }
            Command::Park {
                key,
                sandbox,
                reply,
            } => {
                let _ = reply.send(Ok(controller.park(&key, sandbox)));
            }
            Command::Started {
                container_id,
                reply,
            } => {
                let _ = reply.send(Ok(controller.container_started(&container_id)));
            }
            Command::ReadmitHeld { request, reply } => {
                let _ = reply.send(controller.readmit_held(&request).transpose());
            }
            Command::Follow {
                key,
                container_id,
                reply,
            } => {
                let _ = reply.send(Ok(controller.follow(key, container_id)));
            }
            Command::RuntimeUpdatesFailed { container_ids } => {
                controller.runtime_updates_failed(&container_ids);
            }
            Command::RuntimeUpdatesApplied { container_ids } => {
                controller.runtime_updates_applied(&container_ids);
            }
            Command::RecordAllocations {
                key,
                resources,
                allocations,
                running,
                reply,
            } => {
                let result = if running {
                    controller.record_reallocation(&key, resources, allocations)
                } else {
                    controller.record_allocations(&key, resources, allocations)
                };
                let _ = reply.send(result);
            }
            Command::PluginReconcile {
                polls,
                polled_at,
                reply,
            } => {
                let outcome = controller.plugin_reconcile(&polls, polled_at);
                drop(polls);
                let _ = reply.send(outcome);
            }
            Command::UndoAdmission {
                pod,
                container,
                reply,
            } => {
                controller.undo_admission(&pod, container.as_deref());
                let _ = reply.send(Ok(()));
            }
            Command::AdmissionAbandoned { pod } => controller.admission_abandoned(&pod),
            Command::PluginPodRemoved { uid, reply } => {
                controller.plugin_pod_removed(&uid);
                let _ = reply.send(Ok(()));
            }
            Command::Resize {
                key,
                cpus,
                reach,
                reply,
            } => {
                let _ = reply.send(controller.resize_within(&key, &cpus, reach));
            }
            Command::SetPodResources { uid, resources } => {
                controller.set_pod_resources(&uid, resources);
            }
            Command::PodRemoved { uid } => {
                controller.pod_removed(&uid);
            }
            Command::Reconcile { reply } => {
                let _ = reply.send(Ok(controller.reconcile()));
            }
            Command::FlushPluginState { reply } => {
                let _ = reply.send(controller.flush_plugin_state());
            }
            Command::Topology { machine, reply } => {
                let _ = reply.send(controller.follow_topology(&machine));
            }
            Command::Shutdown => break,
            Command::Admit { .. } | Command::Release { .. } => {}
        }
    }
    controller.shutdown();
    tracing::debug!("controller stopped");
}

/// [`POLL_BEFORE_SLEEP`], or nothing when this thread may run on one CPU
/// only (its affinity or its cgroup's CPU quota): there, polling would
/// only keep the senders from running.
fn poll_before_sleep() -> Duration {
    match std::thread::available_parallelism() {
        Ok(cpus) if cpus.get() > 1 => POLL_BEFORE_SLEEP,
        _ => Duration::ZERO,
    }
}

/// The next command: polled for `poll`, then waited for (`None` once
/// every handle is gone).
fn receive(receiver: &mut mpsc::Receiver<Command>, poll: Duration) -> Option<Command> {
    let started = Instant::now();
    loop {
        match receiver.try_recv() {
            Ok(command) => return Some(command),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) if started.elapsed() < poll => {
                // Yields rather than spins: a thread woken on this CPU
                // (the one the last reply went to, often) runs first.
                std::thread::yield_now();
            }
            Err(mpsc::error::TryRecvError::Empty) => return receiver.blocking_recv(),
        }
    }
}

/// A decision waiting for its batch, with where its answer goes.
enum Queued {
    Admit(Reply<Admitted>),
    Release(Reply<Released>),
}

/// `first` and every admission or release already queued behind it (group
/// commit: they are decided one after the other and made durable by one
/// flush); the first other command, if any, is returned to run next.
fn drain_batch(
    first: Command,
    receiver: &mut mpsc::Receiver<Command>,
) -> (Vec<(Decision, Queued)>, Option<Command>) {
    let mut batch = Vec::new();
    let mut command = first;
    loop {
        match command {
            Command::Admit {
                request,
                hints,
                plugins,
                reply,
            } => batch.push((
                Decision::Admit {
                    request,
                    hints,
                    plugins,
                },
                Queued::Admit(reply),
            )),
            Command::Release {
                pod,
                container,
                reach,
                reply,
            } => batch.push((
                Decision::Release {
                    pod,
                    container,
                    reach,
                },
                Queued::Release(reply),
            )),
            other => return (batch, Some(other)),
        }
        if batch.len() >= BATCH_MAX {
            return (batch, None);
        }
        match receiver.try_recv() {
            Ok(queued) => command = queued,
            Err(_) => return (batch, None),
        }
    }
}

fn run_batch(controller: &mut Controller, batch: Vec<(Decision, Queued)>) {
    let span = tracing::debug_span!("batch", decisions = batch.len());
    let _guard = span.enter();
    let (decisions, replies): (Vec<Decision>, Vec<Queued>) = batch.into_iter().unzip();
    let answers = controller.run_batch(decisions);
    for (reply, answer) in replies.into_iter().zip(answers) {
        match (reply, answer) {
            (Queued::Admit(reply), Ok(Answer::Admitted(admitted))) => {
                let _ = reply.send(Ok(*admitted));
            }
            (Queued::Release(reply), Ok(Answer::Released(released))) => {
                let _ = reply.send(Ok(released));
            }
            (Queued::Admit(reply), Err(err)) => {
                let _ = reply.send(Err(err));
            }
            (Queued::Release(reply), Err(err)) => {
                let _ = reply.send(Err(err));
            }
            (Queued::Admit(reply), Ok(_)) => {
                let _ = reply.send(Err(ControlError::Stopped));
            }
            (Queued::Release(reply), Ok(_)) => {
                let _ = reply.send(Err(ControlError::Stopped));
            }
        }
    }
}

impl ControllerHandle {
    /// Sends the command `make` builds and awaits its answer.
    pub(super) async fn ask<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<T, ControlError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(make(reply))
            .await
            .map_err(|_| ControlError::Stopped)?;
        answer.await.map_err(|_| ControlError::Stopped)?
    }

    /// Admits a container: the admission sequence
    /// ([`super::admission`]: hints, resource plugins, the engine's
    /// decision, one flush, the executor); answers once everything is
    /// durable and placed.
    pub async fn admit(&self, request: AdmitRequest) -> Result<Admitted, ControlError> {
        super::admission::admit(self, request).await
    }

    /// Releases a container, or every container of the pod with `None`.
    /// When the pod left and resource plugins hold it, answers once every
    /// plugin heard of it (`RemovePod`, sent by the removal loop as soon as
    /// the release is durable) or after [`REMOVAL_WAIT`]: a pod admitted
    /// right after finds the pod's CPUs free in the plugins too.
    pub async fn release(
        &self,
        pod: String,
        container: Option<String>,
    ) -> Result<Released, ControlError> {
        self.release_within(pod, container, Reach::All).await
    }

    /// [`ControllerHandle::release`] of a run of Pinion's only (the local
    /// API's `/v1/release`): any other container is refused ([`Reach`]).
    pub async fn release_run(
        &self,
        pod: String,
        container: Option<String>,
    ) -> Result<Released, ControlError> {
        self.release_within(pod, container, Reach::Runs).await
    }

    async fn release_within(
        &self,
        pod: String,
        container: Option<String>,
        reach: Reach,
    ) -> Result<Released, ControlError> {
        let released = self
            .ask(|reply| Command::Release {
                pod: pod.clone(),
                container,
                reach,
                reply,
            })
            .await?;
        self.plugins_forgot(&pod).await;
        Ok(released)
    }

    /// Waits, at most [`REMOVAL_WAIT`], until `pod` is off the list of
    /// pods whose plugins have yet to hear of their removal (at once when
    /// it is not on it, or when no removal loop runs to tell them).
    async fn plugins_forgot(&self, pod: &str) {
        let Some(qrm) = &self.qrm else {
            return;
        };
        let running = qrm.removal_loop_running();
        match await_removal(self.plugin_removals.clone(), running, pod).await {
            RemovalWait::Heard => {}
            RemovalWait::NoLoop => {
                tracing::debug!(%pod, "released; no removal loop runs to tell the resource plugins (they hear of it when one does)");
            }
            RemovalWait::TimedOut => {
                tracing::info!(%pod, wait = ?REMOVAL_WAIT, "released; the resource plugins have not all heard of it yet (the removal loop goes on)");
            }
        }
    }

    /// Agrees with the runtime's running containers, holding those that do
    /// not run while their pod (in `restartable`) does (see
    /// [`Controller::sync_runtime_holding`]).
    /// Kubernetes containers that no exclusive assignment names may be
    /// admitted there (created while no plugin was connected): their
    /// outside providers' hints are gathered first, as for an admission;
    /// containers the resource plugins must be asked for are not (they
    /// follow the shared pool until re-created).
    pub async fn sync_runtime(
        &self,
        mut running: Vec<RunningContainer>,
        restartable: BTreeMap<String, Vec<ContainerCgroup>>,
    ) -> Result<Synced, ControlError> {
        let held = self.snapshot().assignments.clone();
        for container in &mut running {
            let Some(pod) = container.pod.clone() else {
                continue;
            };
            let (uid, name) = &container.key;
            if held.get(uid).is_some_and(|c| c.contains_key(name))
                || pod.qos() != pinion_core::pod::QosClass::Guaranteed
            {
                continue;
            }
            if let Some(qrm) = &self.qrm {
                if !qrm.plugin_requests(&pod, name).is_ok_and(|r| r.is_empty()) {
                    tracing::warn!(pod = %uid, container = %name, "created while no plugin was connected; resource plugins are not asked at synchronization, so it stays in the shared pool until it is re-created");
                    continue;
                }
            }
            match self.hints.gather(&pod, name).await {
                Ok(hints) => container.late = Some(hints),
                Err(err) => {
                    tracing::warn!(pod = %uid, container = %name, "hints for an admission at synchronization: {err}; it stays in the shared pool");
                }
            }
        }
        self.ask(|reply| Command::SyncRuntime {
            running,
            restartable,
            reply,
        })
        .await
    }

    /// A runtime container stopped while its pod still runs; true when
    /// Pinion holds its placement for the next run (see
    /// [`Controller::park`]; `sandbox`: the pod's sandbox cgroup, whose
    /// removal ends the hold, for a pod whose stop the runtime may not
    /// relay).
    pub async fn park(
        &self,
        key: Key,
        sandbox: Option<ContainerCgroup>,
    ) -> Result<bool, ControlError> {
        self.ask(|reply| Command::Park {
            key,
            sandbox,
            reply,
        })
        .await
    }

    /// The runtime created runtime container `container_id`'s task; true
    /// when Pinion knows it (see [`Controller::container_started`]).
    pub async fn container_started(&self, container_id: String) -> Result<bool, ControlError> {
        self.ask(|reply| Command::Started {
            container_id,
            reply,
        })
        .await
    }

    /// Records a runtime container outside Kubernetes (shared pool).
    pub async fn follow(&self, key: Key, container_id: String) -> Result<Placement, ControlError> {
        self.ask(|reply| Command::Follow {
            key,
            container_id,
            reply,
        })
        .await
    }

    /// Makes the built-in plugins' waiting state changes durable
    /// ([`Controller::flush_plugin_state`]).
    pub async fn flush_plugin_state(&self) -> Result<(), ControlError> {
        self.ask(|reply| Command::FlushPluginState { reply }).await
    }

    /// Stores the resource plugins' allocations of an admitted container.
    pub async fn record_allocations(
        &self,
        key: Key,
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
    ) -> Result<Admitted, ControlError> {
        self.record(key, resources, allocations, false).await
    }

    /// Stores the re-allocation of a running container a plugin forgot
    /// ([`Controller::record_reallocation`]).
    pub async fn record_reallocation(
        &self,
        key: Key,
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
    ) -> Result<Admitted, ControlError> {
        self.record(key, resources, allocations, true).await
    }

    async fn record(
        &self,
        key: Key,
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
        running: bool,
    ) -> Result<Admitted, ControlError> {
        self.ask(|reply| Command::RecordAllocations {
            key,
            resources,
            allocations,
            running,
            reply,
        })
        .await
    }

    /// Hands the plugins' reconcile answers to the controller.
    pub async fn plugin_reconcile(
        &self,
        polls: Vec<(String, Poll)>,
        polled_at: Instant,
    ) -> Result<Reconciled, ControlError> {
        let polls = Arc::new(polls);
        let outcome = self
            .ask(|reply| Command::PluginReconcile {
                polls: Arc::clone(&polls),
                polled_at,
                reply,
            })
            .await;
        // The last reference: freed here, off the controller thread.
        drop(polls);
        outcome
    }

    /// Every plugin heard of pod `uid`'s removal. Returns once the
    /// controller took it off the pending list (a snapshot read afterwards
    /// no longer lists it, so the removal loop does not tell the plugins
    /// twice).
    pub async fn plugin_pod_removed(&self, uid: String) {
        let _ = self
            .ask(|reply| Command::PluginPodRemoved { uid, reply })
            .await;
    }

    /// The resource plugins Pinion knows (empty without the QoS Resource
    /// Manager).
    #[must_use]
    pub fn plugins(&self) -> Vec<crate::qrm::PluginView> {
        self.qrm
            .as_ref()
            .map(|qrm| qrm.registry().views())
            .unwrap_or_default()
    }

    /// The built-in CPU plugin's pools (`None` when it does not run).
    #[must_use]
    pub fn cpu_pools(&self) -> Option<pinion_plugins::cpu::CpuPluginHandle> {
        self.qrm.as_ref().and_then(|qrm| qrm.cpu_pools().cloned())
    }

    /// A receiver of snapshots.
    #[must_use]
    pub fn snapshots(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshots.clone()
    }

    /// A receiver of the pods whose plugins have yet to hear of their
    /// removal (changes only when the list does).
    #[must_use]
    pub fn plugin_removals(&self) -> watch::Receiver<Vec<String>> {
        self.plugin_removals.clone()
    }

    /// Tells the controller the runtime failed to apply these updates.
    pub async fn runtime_updates_failed(&self, container_ids: Vec<String>) {
        let _ = self
            .commands
            .send(Command::RuntimeUpdatesFailed { container_ids })
            .await;
    }

    /// Tells the controller the runtime applied these updates.
    pub async fn runtime_updates_applied(&self, container_ids: Vec<String>) {
        let _ = self
            .commands
            .send(Command::RuntimeUpdatesApplied { container_ids })
            .await;
    }

    /// Resizes container `key`'s CPU request in place to `cpus` (see
    /// [`Controller::resize`]).
    pub async fn resize(&self, key: Key, cpus: Quantity) -> Result<Admitted, ControlError> {
        self.resize_within(key, cpus, Reach::All).await
    }

    /// [`ControllerHandle::resize`] of a run of Pinion's only (the local
    /// API's `/v1/resize`): any other container is refused ([`Reach`]).
    pub async fn resize_run(&self, key: Key, cpus: Quantity) -> Result<Admitted, ControlError> {
        self.resize_within(key, cpus, Reach::Runs).await
    }

    async fn resize_within(
        &self,
        key: Key,
        cpus: Quantity,
        reach: Reach,
    ) -> Result<Admitted, ControlError> {
        self.ask(|reply| Command::Resize {
            key,
            cpus,
            reach,
            reply,
        })
        .await
    }

    /// Registers (`Some`) or forgets (`None`) pod `uid`'s pod-level
    /// resources; commands are handled in order, so an admission sent
    /// after this sees them.
    pub async fn set_pod_resources(&self, uid: String, resources: Option<PodResources>) {
        let _ = self
            .commands
            .send(Command::SetPodResources { uid, resources })
            .await;
    }

    /// Tells the controller an admission of pod `pod` that asked resource
    /// plugins was abandoned half-way ([`Controller::admission_abandoned`]);
    /// without waiting (it is sent from a drop).
    pub fn admission_abandoned(&self, pod: &str) {
        let command = Command::AdmissionAbandoned {
            pod: pod.to_string(),
        };
        let Err(full) = self.commands.try_send(command) else {
            return;
        };
        // A full queue: sent from a task of its own (the drop cannot wait).
        let commands = self.commands.clone();
        let command = full.into_inner();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = commands.send(command).await;
                });
            }
            Err(_) => {
                tracing::error!(%pod, "an abandoned admission's plugins are not told to forget the pod: no runtime");
            }
        }
    }

    /// Tells the controller the runtime removed pod `uid`'s sandbox
    /// ([`Controller::pod_removed`]).
    pub async fn pod_removed(&self, uid: String) {
        let _ = self.commands.send(Command::PodRemoved { uid }).await;
    }

    /// Runs a reconcile pass.
    pub async fn reconcile(&self) -> Result<ReconcileReport, ControlError> {
        self.ask(|reply| Command::Reconcile { reply }).await
    }

    /// Has the state follow the machine's online CPUs (`machine` as
    /// discovered now; CPU hot-plug).
    pub async fn follow_topology(&self, machine: Topology) -> Result<TopologyReport, ControlError> {
        self.ask(|reply| Command::Topology {
            machine: Box::new(machine),
            reply,
        })
        .await
    }

    /// Asks the controller to stop.
    pub async fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown).await;
    }

    /// The latest snapshot (assignments, workloads, metrics).
    #[must_use]
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots.borrow().clone()
    }

    /// A receiver that changes whenever the shared pool does.
    #[must_use]
    pub fn shared_pool(&self) -> watch::Receiver<CpuSet> {
        self.shared_pool.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_shutdown(command: Option<&Command>) -> bool {
        matches!(command, Some(Command::Shutdown))
    }

    #[test]
    fn receive_takes_a_queued_command_with_or_without_polling() {
        for poll in [Duration::ZERO, POLL_BEFORE_SLEEP] {
            let (sender, mut receiver) = mpsc::channel(4);
            sender.try_send(Command::Shutdown).expect("queued");
            assert!(
                is_shutdown(receive(&mut receiver, poll).as_ref()),
                "poll {poll:?}"
            );
        }
    }

    #[test]
    fn receive_waits_past_its_poll_for_a_command_sent_later() {
        let (sender, mut receiver) = mpsc::channel(4);
        let sent = std::thread::spawn(move || {
            // Well past the poll: the controller has gone to sleep.
            std::thread::sleep(POLL_BEFORE_SLEEP * 20);
            sender.blocking_send(Command::Shutdown).expect("sent");
        });
        assert!(is_shutdown(
            receive(&mut receiver, POLL_BEFORE_SLEEP).as_ref()
        ));
        sent.join().expect("sender");
    }

    #[test]
    fn the_controller_does_not_poll_when_it_may_run_on_one_cpu_only() {
        use nix::sched::{sched_getaffinity, sched_setaffinity};
        use nix::unistd::Pid;
        // A thread of its own: the affinity set is this thread's.
        let poll = std::thread::spawn(|| {
            let allowed = sched_getaffinity(Pid::from_raw(0)).expect("affinity");
            let first = (0..nix::sched::CpuSet::count())
                .find(|&cpu| allowed.is_set(cpu).unwrap_or(false))
                .expect("an allowed CPU");
            let mut one = nix::sched::CpuSet::new();
            one.set(first).expect("a CPU number");
            sched_setaffinity(Pid::from_raw(0), &one).expect("pinned to one CPU");
            poll_before_sleep()
        })
        .join()
        .expect("thread");
        assert_eq!(poll, Duration::ZERO);
    }

    #[test]
    fn receive_ends_once_every_handle_is_gone_polling_or_asleep() {
        for poll in [Duration::ZERO, POLL_BEFORE_SLEEP, Duration::from_secs(60)] {
            let (sender, mut receiver) = mpsc::channel::<Command>(4);
            drop(sender);
            assert!(receive(&mut receiver, poll).is_none(), "poll {poll:?}");
        }
    }
}
