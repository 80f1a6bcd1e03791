//! Owns the `Controller` (the single owner of the engine, the journal/checkpoint store, the workloads and the node handle) and the types every part of it shares.
//!
//! The controller: the single owner of the engine, the checkpoint store and
//! the workloads Pinion places. Front-ends (local API, NRI) and timers talk
//! to it only through [`Command`]s (see [`task`]); reads come from the
//! [`Snapshot`] it publishes after every change.
//!
//! Decisions are made in memory, a batch at a time ([`batch`]): every
//! decision of a batch appends its records to the journal, one `fdatasync`
//! makes the whole batch durable, and only then are its effects applied and
//! its callers answered — a caller never hears of a decision that a crash
//! could lose. A failed flush rolls the batch back and fails every decision
//! in it; a refused request changes nothing.
//!
//! Each workload keeps the placement the engine wants for it (*desired*)
//! and the one its cgroup or the runtime last accepted (*applied*); the
//! executor ([`executor`]) turns every difference into cgroup writes or
//! runtime updates — after admissions and releases, for shared-pool
//! changes, drift repair and restart recovery alike.

mod admission;
mod batch;
pub mod counters;
#[cfg(test)]
mod damage_tests;
mod decide;
mod executor;
mod foreign;
mod hotplug;
mod housekeeping;
mod migrate_start;
mod partition;
mod plugin_data;
mod plugins;
mod pod_level;
mod rebuild;
mod reconcile;
mod recover;
pub mod removal_wait;
mod resize;
mod runtime;
mod side;
mod snapshot;
mod system_partition;
pub mod task;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

pub use batch::{Answer, Decision};
pub use plugins::{Reallocation, Reconciled, StoredAllocations};

use pinion_core::engine::{CpuOwner, Engine};
use pinion_core::pod::Pod;
use pinion_core::policy::PolicyError;
use pinion_core::record::SideData;
use pinion_core::restore::RestoreError;
use pinion_core::state::State;
use pinion_core::topomgr::TopologyHint;
use pinion_core::{CpuSet, Placement};
use pinion_host::cgroup::{CgroupError, CgroupName, ContainerCgroup, CpusetHost};
use pinion_host::journal::{JournalError, StateStore};
use pinion_host::runs::RunRecords;
use pinion_host::store::StoreError;
use pinion_plugins::store::Outbox;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use counters::Counters;

pub use executor::RuntimeUpdate;
pub use foreign::{ForeignKind, ForeignMark};
pub use hotplug::TopologyReport;
pub use housekeeping::KeptState;
pub use migrate_start::MigrateOnStart;
pub use partition::PartitionState;
pub use rebuild::StartReport;
pub use recover::StartParts;
pub use runtime::{Observed, RunningContainer, Synced};
pub use snapshot::{Snapshot, WorkloadView};
pub use task::{spawn, spawn_with, spawn_with_hints, Command, ControllerHandle};

/// The container name of a standalone run.
pub const RUN_CONTAINER: &str = "main";

/// Whose containers a release or a resize may touch. The local API's
/// requests reach Pinion's own runs only: a runtime container's CPUs are
/// the runtime's to give back (NRI `RemoveContainer`), and its size is its
/// pod's; released from the side, it would keep running on CPUs handed out
/// again. The runtime's front-end and the controller's own loops reach
/// every container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Runs,
    All,
}

/// Errors of controller requests and of the start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    InvalidName(CgroupError),
    #[error("pod {pod} container {container}: {source}")]
    Admission {
        pod: String,
        container: String,
        source: Box<PolicyError>,
    },
    #[error("pod {pod} container {container} is already admitted {held}; {asked}")]
    Conflict {
        pod: String,
        container: String,
        /// Who holds it (e.g. "for process 12 with 2 exclusive cpus (1-2)").
        held: String,
        /// What the refused request asked for.
        asked: String,
    },
    #[error("pod {pod} container {container} is not one of Pinion's runs ({holder}): the local API cannot {action} it; the container runtime releases its containers when it removes them, and kubelet resizes them through their pods")]
    NotARun {
        pod: String,
        container: String,
        /// Who admitted it: the container runtime, or a checkpoint entry.
        holder: &'static str,
        /// "release" or "resize".
        action: &'static str,
    },
    #[error("no admitted container matches pod {pod} container {}", .container.as_deref().unwrap_or("(any)"))]
    NotFound {
        pod: String,
        container: Option<String>,
    },
    #[error("saving the checkpoint failed, nothing changed: {0}")]
    Checkpoint(#[from] StoreError),
    #[error("the decision could not be made durable, nothing changed: {0}")]
    Journal(#[from] JournalError),
    #[error("the decision could not be made durable, nothing changed: {reason}")]
    NotDurable { reason: String },
    /// The state directory could not be opened at start (no decision was
    /// being made).
    #[error("cannot open the state in {dir}: {source}")]
    OpenState {
        dir: String,
        source: Box<JournalError>,
    },
    #[error("checkpoint {path} cannot be read and could not be set aside to rebuild the state from the node: {source}. Look at it with `pinion state inspect {path}`; `pinion state rebuild` rebuilds it offline")]
    Unreadable {
        path: String,
        source: Box<JournalError>,
    },
    /// Degraded mode: the start could not make the checkpoint fit the
    /// configuration; running workloads are kept, exclusive CPUs are not
    /// handed out.
    #[error("pod {pod} container {container}: exclusive cpus are not handed out: the agent runs degraded: {reason}")]
    Degraded {
        pod: String,
        container: String,
        reason: String,
    },
    #[error("pod {pod} container {container}: {reason}")]
    Plugin {
        pod: String,
        container: String,
        reason: String,
        /// The plugin's `Allocate` answer the controller refused (the
        /// admission counts it as that plugin's error); `None` for the
        /// errors the manager counted already (a call, an answer it
        /// refused).
        refused_answer: Option<RefusedAnswer>,
    },
    #[error("hints of pod {pod} container {container} could not be gathered: {reason}")]
    Hints {
        pod: String,
        container: String,
        reason: String,
    },
    #[error("checkpoint {path} cannot be restored with this configuration: {source}; `migrateOnStart` is false, so nothing was changed: {advice}")]
    Restore {
        path: String,
        source: Box<RestoreError>,
        /// What recovers this checkpoint ([`restore_advice`]).
        advice: String,
    },
    /// kubelet's refusal, with what a migration would do and how to allow it.
    #[error("checkpoint {path} cannot be restored with this configuration: {source}; migrating it would take exclusive cpus from running workloads ({moved}), so nothing was changed: set `migrateOnStart: true` in the agent's config file to migrate anyway (they go to the shared pool; `pinion state migrate {path} --config <the agent's config file>` shows the plan), or drain this node and delete the CPU manager checkpoint file \"{path}\" before restarting")]
    MigrationWouldMove {
        path: String,
        source: Box<RestoreError>,
        moved: String,
    },
    #[error("the policy refused the restored state: {0}")]
    Start(Box<PolicyError>),
    /// The policy refused an in-place resize; nothing changed.
    #[error("pod {pod} container {container}: {source}")]
    Resize {
        pod: String,
        container: String,
        source: Box<PolicyError>,
    },
    #[error("pod {pod} container {container} cannot be resized yet: its pod spec is not known (restored from the checkpoint; the runtime's next synchronization brings it)")]
    ResizeUnknownSpec { pod: String, container: String },
    /// The pod's resource plugins have yet to hear of its earlier removal
    /// (`RemovePod` waits for its retry): what they allocated now, that
    /// removal would take back.
    #[error("pod {pod} container {container}: the resource plugins have not all heard of this pod's earlier removal yet (their RemovePod is retried); it is not admitted before they have, or that removal would take back what they allocate for it now: retry shortly")]
    RemovalPending { pod: String, container: String },
    #[error("cgroup of pod {pod}: {source}")]
    Cgroup { pod: String, source: CgroupError },
    #[error("the controller has stopped")]
    Stopped,
}

/// A resource plugin's `Allocate` answer that only the controller could
/// refuse ([`ControlError::Plugin`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedAnswer {
    pub resource: String,
    /// Why, without the plugin's name.
    pub reason: String,
}

/// Which front-end a workload belongs to, and what that front-end needs to
/// apply its placement. This typed field — never the workload's name —
/// decides how a workload is placed, recovered and released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frontend {
    /// `pinion run`: a cgroup of Pinion's, named after the pod UID, with
    /// the launcher's process moved into it.
    Standalone {
        cgroup: CgroupName,
        pid: Option<u32>,
    },
    /// The container runtime (NRI) applies the placement. The container's
    /// runtime id is unknown for containers restored from the checkpoint
    /// until the runtime's next `Synchronize`; its cgroup (from NRI's
    /// `linux.cgroups_path`) is what the reconcile pass reads back, when the
    /// runtime sent one, and where its cpuset partition is made
    /// (`exclusiveCpus.partition`) once `started`: the runtime created its
    /// task (NRI `StartContainer`), or it was running at `Synchronize`.
    Runtime {
        container_id: Option<String>,
        cgroup: Option<ContainerCgroup>,
        started: bool,
    },
}

impl Frontend {
    /// A standalone run of pod `uid` (the cgroup's name; validated, so no
    /// id can leave Pinion's cgroup root).
    pub fn standalone(uid: &str, pid: Option<u32>) -> Result<Self, ControlError> {
        let cgroup = CgroupName::new(uid).map_err(ControlError::InvalidName)?;
        Ok(Self::Standalone { cgroup, pid })
    }

    /// A runtime container (its cgroup not known).
    #[must_use]
    pub fn runtime(container_id: impl Into<String>) -> Self {
        Self::runtime_in(container_id, None)
    }

    /// A runtime container in `cgroup`, created but not started.
    #[must_use]
    pub fn runtime_in(container_id: impl Into<String>, cgroup: Option<ContainerCgroup>) -> Self {
        Self::Runtime {
            container_id: Some(container_id.into()),
            cgroup,
            started: false,
        }
    }

    /// A runtime container in `cgroup` that the runtime runs (its cgroup
    /// exists).
    #[must_use]
    pub fn running_in(container_id: impl Into<String>, cgroup: Option<ContainerCgroup>) -> Self {
        Self::Runtime {
            container_id: Some(container_id.into()),
            cgroup,
            started: true,
        }
    }

    /// A runtime container known from the checkpoint only.
    #[must_use]
    pub fn runtime_unknown() -> Self {
        Self::Runtime {
            container_id: None,
            cgroup: None,
            started: false,
        }
    }

    /// The kind's name as shown to operators.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Standalone { .. } => "standalone",
            Self::Runtime { .. } => "runtime",
        }
    }
}

/// A request to admit one container of a pod.
#[derive(Debug, Clone)]
pub struct AdmitRequest {
    pub pod: Pod,
    pub container: String,
    pub frontend: Frontend,
    /// Who decides its CPUs: the CPU manager policy, or a resource plugin
    /// that registered for `cpu` (then the policy gives it no exclusive
    /// CPUs and the plugin's answer places it).
    pub cpu_owner: CpuOwner,
}

/// The answer to an admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admitted {
    pub pod: String,
    pub container: String,
    /// Where the container runs.
    pub placement: Placement,
    /// The cgroup directory name under Pinion's root (standalone runs).
    pub cgroup: Option<String>,
    /// The Topology Manager's affinity for it (what resource plugins are
    /// told to align to).
    #[serde(skip)]
    pub affinity: Option<TopologyHint>,
}

impl Admitted {
    /// True when the container holds exclusive CPUs.
    #[must_use]
    pub fn exclusive(&self) -> bool {
        self.placement.is_exclusive()
    }
}

/// The answer to a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The containers released.
    pub containers: Vec<String>,
    /// The CPUs that went back to the shared pool.
    pub cpus: CpuSet,
}

/// What one reconcile pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// Containers released because their processes were gone.
    pub released: Vec<String>,
    /// Cgroups whose cpuset was found changed and rewritten.
    pub repaired: Vec<String>,
}

/// A container: (pod UID, container name).
pub type Key = (String, String);

/// A workload the controller places.
#[derive(Debug, Clone)]
struct Workload {
    frontend: Frontend,
    /// The pod spec it was admitted with (`None` when recovered at start or
    /// following the shared pool without an admission; runtime containers
    /// get theirs again at the runtime's `Synchronize`).
    spec: Option<Arc<Pod>>,
    /// What the engine wants for it.
    desired: Placement,
    /// What its cgroup or the runtime last accepted (`None`: unknown, to be
    /// written at the next executor pass).
    applied: Option<Placement>,
    /// What its cgroup or the runtime may hold beyond `applied`: writes
    /// that failed (perhaps part way) and runtime updates not answered yet,
    /// merged ([`Placement::may_hold_with`]). Memory nodes and resource
    /// settings it names that the desired placement does not are taken
    /// back even while `applied` is unknown; cleared by a write that
    /// succeeds, or when the runtime answered every update.
    may_hold: Option<Placement>,
    /// The plugin resources it requested, and what the plugins answered.
    plugins: plugin_data::ContainerPlugins,
    /// Why its cgroup settings could not be written, since the last write
    /// that succeeded (`pinion ps` shows it; counted once per failure).
    apply_failure: Option<String>,
    /// The last cpuset another writer put in its cgroup (`pinion ps`).
    foreign_mark: Option<ForeignMark>,
    /// That writer's value, kept in mode `report` (the same value again is
    /// no new event).
    foreign_yielded: Option<pinion_core::drift::SeenCpuset>,
    /// Repairs of its cpuset that the other writer undid again at once:
    /// the reconcile pass waits longer before each next one.
    repair_backoff: pinion_core::drift::RepairBackoff,
    /// Runtime updates sent to the runtime and not answered yet: while
    /// some are, the reconcile pass does not compare its cgroup (the
    /// runtime may not have written it yet).
    updates_in_flight: u32,
    /// A stopped runtime container held for its restart whose pod's end
    /// the runtime may never relay (a pod known only from a `Synchronize`):
    /// its pod's sandbox cgroup, whose removal the reconcile pass takes as
    /// the pod's end ([`Controller::park`]).
    held_sandbox: Option<ContainerCgroup>,
    /// Its pod's CFS quota was lifted for it (a runtime container given
    /// exclusive CPUs: [`Controller::lift_pod_quotas`]), or tried.
    pod_quota_lifted: bool,
    /// When it was admitted, in admissions since the start (`0`: recovered
    /// at start): of two pods sharing a name, podresources answers the one
    /// admitted last ([`WorkloadView::admitted`]).
    admitted: u64,
}

impl Workload {
    /// A workload not yet applied, without plugin data.
    fn new(frontend: Frontend, spec: Option<Arc<Pod>>, desired: Placement) -> Self {
        Self {
            frontend,
            spec,
            desired,
            applied: None,
            may_hold: None,
            plugins: plugin_data::ContainerPlugins::default(),
            apply_failure: None,
            foreign_mark: None,
            foreign_yielded: None,
            repair_backoff: pinion_core::drift::RepairBackoff::default(),
            updates_in_flight: 0,
            held_sandbox: None,
            pod_quota_lifted: false,
            admitted: 0,
        }
    }

    /// What its cgroup or the runtime may hold: `applied` with what
    /// `may_hold` adds (`None`: nothing known).
    /// Borrowed unless both are known: the executor asks on every pass.
    fn given(&self) -> Option<Cow<'_, Placement>> {
        match (&self.applied, &self.may_hold) {
            (Some(applied), Some(more)) => Some(Cow::Owned(applied.may_hold_with(more))),
            (applied, more) => applied.as_ref().or(more.as_ref()).map(Cow::Borrowed),
        }
    }

    /// Records that `attempted` was given without knowing whether it took
    /// (a failed write, an update not answered yet): it and what was given
    /// before may be held.
    fn maybe_given(&mut self, attempted: &Placement) {
        let held = match self.given() {
            Some(before) => attempted.may_hold_with(&before),
            None => attempted.clone(),
        };
        self.may_hold = Some(held);
    }

    /// Marks what was applied unknown (written again at the next pass:
    /// another writer changed it, or the runtime failed an update), keeping
    /// what it gave among what may be held.
    fn applied_unknown(&mut self) {
        self.may_hold = self.given().map(Cow::into_owned);
        self.applied = None;
    }

    /// Another writer left the cgroup holding `seen`: written again at the
    /// next pass, and what the container holds now is `seen`'s CPUs and
    /// memory nodes (where read). A repair that only gives back what the
    /// writer took (an update containerd failed to apply) is then a growth
    /// the front-end may let wait ([`pinion_core::Placement::only_adds_to`]).
    fn found_holding(&mut self, seen: &pinion_core::drift::SeenCpuset) {
        self.applied_unknown();
        if let Some(held) = &mut self.may_hold {
            if let Some(cpus) = &seen.cpus {
                held.cpus = cpus.clone();
            }
            if let Some(mems) = &seen.mems {
                held.mems = mems.clone();
            }
        }
    }

    /// A new container takes its place (held for a restart): nothing given
    /// to the old one is in the new one's cgroup.
    fn nothing_applied(&mut self) {
        self.may_hold = None;
        self.applied = None;
    }

    /// True when `container` is an init container of the pod it was
    /// admitted with (reconcile skips them).
    fn is_init(&self, container: &str) -> bool {
        self.spec
            .as_ref()
            .is_some_and(|pod| pod.init_containers.iter().any(|c| c.name == container))
    }
}

/// The single owner; see the module documentation.
pub struct Controller {
    engine: Engine,
    store: StateStore,
    /// The resource plugins' data: the journal's side data (their
    /// answers, pending removals, the engine's pod-level data), the records
    /// waiting for the next flush, the removal list's channel.
    plugin_data: plugin_data::PluginData,
    /// When the checkpoint was last rewritten from the state.
    compacted: Instant,
    host: Box<dyn CpusetHost>,
    /// What each standalone run asked for (to rebuild from the node).
    runs: RunRecords,
    /// What the start repaired (shown by `pinion ps`).
    start_report: StartReport,
    /// What CPU hot-plug changed at run time (shown by `pinion ps`).
    hotplug_lines: Vec<String>,
    workloads: BTreeMap<Key, Workload>,
    counters: Counters,
    /// Where runtime updates go (the NRI front-end), when there is one.
    runtime_updates: Option<mpsc::UnboundedSender<Vec<RuntimeUpdate>>>,
    /// The executor's passes so far: each runtime update and snapshot
    /// names the pass it comes from ([`RuntimeUpdate::pass`]).
    passes: u64,
    /// The admissions so far ([`Workload::admitted`]).
    admissions: u64,
    shared_tx: watch::Sender<CpuSet>,
    snapshot_tx: watch::Sender<Arc<Snapshot>>,
    /// Exclusive runs' cpuset partitions (`exclusiveCpus.partition`).
    partitions: partition::Partitions,
    /// Cgroups whose cpus follow the shared pool (`housekeeping.cgroups`).
    housekeeping: housekeeping::Housekeeping,
    /// `otherWriters` and the rate limit of its log lines.
    foreign: foreign::Foreign,
    /// KEP-5894's system partition (`systemPartition`, gate on).
    system_partition: Option<crate::config::SystemPartition>,
    /// Where the system partition's `memoryLimit` stands.
    partition_memory: system_partition::LimitState,
}

/// Node-wide isolation options (issue 31 items 2 and 6): what the agent's
/// config says about housekeeping cgroups, other writers and KEP-5894's
/// system partition.
#[derive(Debug, Clone, Default)]
pub struct Isolation {
    /// Cgroups (relative to the cpuset hierarchy's mount) kept on the
    /// shared pool.
    pub housekeeping: Vec<ContainerCgroup>,
    /// Pinion's cgroup root relative to the same mount (a housekeeping
    /// cgroup holding it is left alone).
    pub pinion_root: Option<std::path::PathBuf>,
    pub other_writers: pinion_core::drift::OtherWriters,
    pub system_partition: Option<crate::config::SystemPartition>,
}

impl Controller {
    /// The built-in resource plugins keep their state in this controller's
    /// journal: their changes wait in `outbox` and go with the next flush.
    /// Returns the side data they kept (kind → key → value, kinds starting
    /// with `prefix`), to open them with.
    pub fn keep_plugin_state(&mut self, outbox: Outbox, prefix: &str) -> SideData {
        self.plugin_data.keep_builtin_state(outbox, prefix)
    }

    /// A receiver of the shared pool.
    #[must_use]
    pub fn subscribe_shared_pool(&self) -> watch::Receiver<CpuSet> {
        self.shared_tx.subscribe()
    }

    /// A receiver of snapshots.
    #[must_use]
    pub fn subscribe_snapshots(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshot_tx.subscribe()
    }

    /// A receiver of the pods whose plugins have yet to hear of their
    /// removal ([`Snapshot::pending_plugin_removals`], changed only when
    /// the list does).
    #[must_use]
    pub fn subscribe_plugin_removals(&self) -> watch::Receiver<Vec<String>> {
        self.plugin_data.subscribe_removals()
    }

    /// The engine's state (tests, snapshots).
    #[must_use]
    pub fn state(&self) -> &State {
        self.engine.state()
    }

    /// Every workload that has a cgroup of Pinion's, with that cgroup.
    fn managed_cgroups(&self) -> Vec<(Key, CgroupName)> {
        self.workloads
            .iter()
            .filter_map(|(key, w)| match &w.frontend {
                Frontend::Standalone { cgroup, .. } => Some((key.clone(), cgroup.clone())),
                Frontend::Runtime { .. } => None,
            })
            .collect()
    }

    fn admitted(&self, key: &Key) -> Admitted {
        let workload = self.workloads.get(key);
        Admitted {
            pod: key.0.clone(),
            container: key.1.clone(),
            placement: workload.map_or_else(
                || self.engine.placement(&key.0, &key.1),
                |w| w.desired.clone(),
            ),
            cgroup: workload.and_then(|w| match &w.frontend {
                Frontend::Standalone { cgroup, .. } => Some(cgroup.to_string()),
                Frontend::Runtime { .. } => None,
            }),
            affinity: self.engine.topology_affinity(&key.0, &key.1),
        }
    }
}

/// "for process 12 with exclusive cpus 1-2" and the like.
fn describe_holder(frontend: &Frontend, placement: &Placement) -> String {
    let who = match frontend {
        Frontend::Standalone { pid: Some(pid), .. } => format!("by `pinion run` process {pid}"),
        Frontend::Standalone { pid: None, .. } => "by a `pinion run`".to_string(),
        Frontend::Runtime {
            container_id: Some(id),
            ..
        } => format!("by runtime container {id}"),
        Frontend::Runtime {
            container_id: None, ..
        } => "by a runtime container".to_string(),
    };
    format!("{who} on {} cpus {}", placement.pool, placement.cpus)
}

fn describe_request(frontend: &Frontend, pod: &Pod, container: &str) -> String {
    let cpus = pod
        .all_containers()
        .find(|c| c.name == container)
        .and_then(|c| c.cpu_request.as_ref())
        .map_or_else(|| "no cpus".to_string(), |q| format!("cpus {q}"));
    match frontend {
        Frontend::Standalone { pid: Some(pid), .. } => {
            format!("process {pid} asked again with {cpus} (use another id)")
        }
        Frontend::Standalone { pid: None, .. } => format!("asked again with {cpus}"),
        Frontend::Runtime { .. } => format!("a runtime container asked with {cpus}"),
    }
}
