//! Owns the exclusive runs' cpuset partitions (`exclusiveCpus.partition`): which cgroup is one, and the order of their writes.
//!
//! Exclusive CPUs as cgroup v2 cpuset partitions (config
//! `exclusiveCpus.partition`): once the executor has written an exclusive
//! run's cpuset, its cgroup becomes a `root` or `isolated` partition; before
//! its CPUs change (resize, hot-plug) and before its cgroup is removed, the
//! partition is taken apart. The writes and their order are
//! `pinion_host::cgroup::partition`'s (plans from `pinion_core::partition`).
//!
//! A partition the kernel cannot make (cgroup v1, a kernel before 6.7, a
//! refused write, a read-back `… invalid (reason)`) never refuses the
//! container: it stays a member, the reason is logged once per distinct
//! reason, counted (`pinion_partition_fallbacks`) and shown by `pinion ps`.
//!
//! Runtime (NRI) containers get theirs the same way, on the cgroup NRI's
//! `linux.cgroups_path` names (cgroupfs or systemd driver), once the
//! runtime created their task ([`Controller::container_started`], NRI
//! `StartContainer`): NRI has no partition field, and the cgroup exists
//! only then. A stopped container (held for its restart, or released) has
//! its partition taken apart before its CPUs go anywhere; a container
//! without a usable cgroup path falls back with that reason.

use std::collections::{BTreeMap, BTreeSet};

use pinion_core::partition::PartitionMode;
use pinion_core::CpuSet;
use pinion_host::cgroup::{CgroupName, PartitionOutcome, PartitionTarget};

use super::{Controller, Frontend, Workload};

/// What a workload's cgroup is, as far as partitions go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionState {
    /// A partition of `cpus` (`partition` as the kernel reads it).
    Made { cpus: CpuSet, partition: String },
    /// A member, because the kernel could not make it one.
    Fallback { cpus: CpuSet, reason: String },
}

impl PartitionState {
    fn cpus(&self) -> &CpuSet {
        match self {
            Self::Made { cpus, .. } | Self::Fallback { cpus, .. } => cpus,
        }
    }

    /// What `pinion ps` shows: `isolated`, or `member (fallback: reason)`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Made { partition, .. } => partition.clone(),
            Self::Fallback { reason, .. } => format!("member (fallback: {reason})"),
        }
    }
}

/// Where a workload's partition is (or would be).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    /// Its cgroup.
    Cgroup(PartitionTarget),
    /// A started runtime container whose cgroup Pinion does not know (the
    /// runtime sent no `linux.cgroups_path`, or one that did not resolve).
    NoCgroup { container_id: String },
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cgroup(target) => target.fmt(f),
            Self::NoCgroup { container_id } => write!(f, "runtime container {container_id}"),
        }
    }
}

/// Why a container sharing its CPUs with another container of its pod (a
/// pod-level CPU set, `PodLevelResourceManagers`) is no partition: two
/// sibling partitions cannot hold the same CPUs, and making the second
/// one would invalidate the first.
pub(super) const SHARED_IN_POD: &str =
    "its cpus are shared with another container of its pod (a pod-level cpu set): no container of the pod can be a partition of them";

/// Why a runtime container without a known cgroup is no partition.
pub(super) const NO_CGROUP_PATH: &str = "the runtime sent no cgroups path pinion can resolve (NRI linux.cgroups_path; see the warning at its creation)";

/// The partitions the controller made or tried.
#[derive(Debug, Default)]
pub(super) struct Partitions {
    mode: PartitionMode,
    held: BTreeMap<Slot, PartitionState>,
    /// Partitions whose take-down failed, with their CPUs: taken apart again
    /// at every pass until it succeeds (the kernel would keep the CPUs
    /// exclusive otherwise), and not made again before.
    unfinished: BTreeMap<Slot, CpuSet>,
    /// Fallback reasons already logged.
    logged: BTreeSet<String>,
    /// A partition was taken apart since the last make: its CPUs are no
    /// longer exclusive, so the fallbacks are tried again (the kernel may
    /// have refused them for those CPUs). Fallbacks are not tried at every
    /// pass: a kernel that refuses for a reason of its own would be written
    /// to every ten seconds.
    retry_fallbacks: bool,
}

impl Partitions {
    pub(super) fn new(mode: PartitionMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// The state of a workload's cgroup (`None`: an ordinary member).
    pub(super) fn of(&self, workload: &Workload) -> Option<&PartitionState> {
        slot(workload).and_then(|t| self.held.get(&t))
    }
}

/// Where a workload's partition would be: a standalone run's cgroup; a
/// runtime container's once it started (`None` before, and for a stopped
/// one, whose runtime id is forgotten).
fn slot(workload: &Workload) -> Option<Slot> {
    match &workload.frontend {
        Frontend::Standalone { cgroup, .. } => {
            Some(Slot::Cgroup(PartitionTarget::Run(cgroup.clone())))
        }
        Frontend::Runtime {
            container_id: Some(id),
            cgroup,
            started: true,
        } => Some(match cgroup {
            Some(cgroup) => Slot::Cgroup(PartitionTarget::Container(cgroup.clone())),
            None => Slot::NoCgroup {
                container_id: id.clone(),
            },
        }),
        Frontend::Runtime { .. } => None,
    }
}

impl Controller {
    /// Takes apart the partitions whose workload is gone, no longer holds
    /// exclusive CPUs or is about to get other CPUs (made again after the
    /// cpuset write, by [`Controller::make_partitions`]).
    pub(super) fn unmake_stale_partitions(&mut self) {
        let unfinished: Vec<(Slot, CpuSet)> = self
            .partitions
            .unfinished
            .iter()
            .map(|(slot, cpus)| (slot.clone(), cpus.clone()))
            .collect();
        for (slot, cpus) in unfinished {
            self.take_apart(&slot, &cpus);
        }
        let wanted: BTreeMap<Slot, CpuSet> = self
            .workloads
            .values()
            .filter(|w| self.partitions.mode != PartitionMode::Member && w.desired.is_exclusive())
            .filter_map(|w| slot(w).map(|t| (t, w.desired.cpus.clone())))
            .collect();
        let shared = if self.partitions.mode == PartitionMode::Member {
            CpuSet::new()
        } else {
            self.cpus_shared_between_slots()
        };
        let stale: Vec<Slot> = self
            .partitions
            .held
            .iter()
            .filter(|(t, state)| {
                wanted.get(*t) != Some(state.cpus())
                    || match state {
                        PartitionState::Made { cpus, .. } => !cpus.is_disjoint(&shared),
                        PartitionState::Fallback { cpus, reason } => {
                            reason == SHARED_IN_POD && cpus.is_disjoint(&shared)
                        }
                    }
            })
            .map(|(t, _)| t.clone())
            .collect();
        for slot in stale {
            self.unmake_partition(&slot);
        }
    }

    /// Takes over the partitions the node holds for the workloads' cgroups
    /// (read from each cgroup not known as one yet): at start for the
    /// standalone runs, at the runtime's `Synchronize` for its containers.
    /// The partitions an earlier agent made lived in its memory only: after
    /// a restart that moved a workload (a migration, a rebuild), or with
    /// `exclusiveCpus.partition` set to `member` since, the cgroup stayed
    /// a partition whose CPUs no other cgroup could get, while Pinion
    /// handed them out again. Taken over, the next pass takes apart those
    /// that are stale ([`Controller::unmake_stale_partitions`]).
    pub(super) fn adopt_partitions(&mut self) {
        let targets: Vec<PartitionTarget> = self
            .workloads
            .values()
            .filter_map(slot)
            .filter(|s| {
                !self.partitions.held.contains_key(s) && !self.partitions.unfinished.contains_key(s)
            })
            .filter_map(|s| match s {
                Slot::Cgroup(target) => Some(target),
                Slot::NoCgroup { .. } => None,
            })
            .collect();
        for target in targets {
            let Some((partition, cpus)) = self.read_partition(&target) else {
                continue;
            };
            tracing::info!(%target, %cpus, %partition, "cpuset partition found on the node (made before the agent's restart): taken over");
            self.partitions.held.insert(
                Slot::Cgroup(target),
                PartitionState::Made { cpus, partition },
            );
        }
    }

    /// Reads again what the kernel says of the partitions Pinion made (the
    /// reconcile pass): a partition turns invalid when its CPUs stop being
    /// exclusive beside it (an ancestor's claim rewritten, a CPU gone
    /// offline), and valid again when that ends, with no write of
    /// Pinion's. `pinion ps` shows the kernel's word; before the
    /// forty-seventh session it showed the state read back at the make.
    pub(super) fn reread_partitions(&mut self) {
        let made: Vec<(Slot, PartitionTarget, String)> = self
            .partitions
            .held
            .iter()
            .filter_map(|(slot, state)| match (slot, state) {
                (Slot::Cgroup(target), PartitionState::Made { partition, .. }) => {
                    Some((slot.clone(), target.clone(), partition.clone()))
                }
                _ => None,
            })
            .collect();
        for (slot, target, was) in made {
            // A cgroup that reads as a member or is gone is left to the
            // passes that take partitions apart.
            let Some((now, _)) = self.read_partition(&target) else {
                continue;
            };
            if now == was {
                continue;
            }
            if now.contains("invalid") {
                tracing::warn!(%target, "cpuset partition reads {now:?} now (was {was:?}): its cpus are not exclusive until the kernel finds them so again");
            } else {
                tracing::info!(%target, "cpuset partition reads {now:?} again (was {was:?})");
            }
            if let Some(PartitionState::Made { partition, .. }) =
                self.partitions.held.get_mut(&slot)
            {
                *partition = now;
            }
        }
    }

    /// Makes a partition of every exclusive workload whose cpuset is written
    /// (a runtime container's: answered or sent to the runtime, and its
    /// task created) and that has none yet (nor a fallback for the same
    /// CPUs, unless a partition was taken apart since: then the fallbacks
    /// are tried again).
    pub(super) fn make_partitions(&mut self) {
        let mode = self.partitions.mode;
        if mode == PartitionMode::Member {
            return;
        }
        let retry = std::mem::take(&mut self.partitions.retry_fallbacks);
        let todo: Vec<(Slot, CpuSet)> = self
            .workloads
            .values()
            .filter(|w| w.desired.is_exclusive() && w.applied.as_ref() == Some(&w.desired))
            .filter_map(|w| slot(w).map(|t| (t, w.desired.cpus.clone())))
            .filter(|(t, _)| {
                let due = match self.partitions.held.get(t) {
                    None => true,
                    Some(PartitionState::Fallback { .. }) => retry,
                    Some(PartitionState::Made { .. }) => false,
                };
                due && !self.partitions.unfinished.contains_key(t)
            })
            .collect();
        let shared = if todo.is_empty() {
            CpuSet::new()
        } else {
            self.cpus_shared_between_slots()
        };
        for (slot, cpus) in todo {
            let again = self.partitions.held.contains_key(&slot);
            let outcome = match &slot {
                _ if !cpus.is_disjoint(&shared) => PartitionOutcome::Fallback {
                    reason: SHARED_IN_POD.to_string(),
                },
                Slot::Cgroup(target) => self.write_partition(target, &cpus, mode),
                Slot::NoCgroup { .. } => PartitionOutcome::Fallback {
                    reason: NO_CGROUP_PATH.to_string(),
                },
            };
            let state = match outcome {
                PartitionOutcome::Made {
                    partition,
                    exclusive_effective,
                } => {
                    tracing::info!(target = %slot, %cpus, %exclusive_effective, "cpuset partition {partition}");
                    self.counters.partitions_made_total += 1;
                    PartitionState::Made { cpus, partition }
                }
                PartitionOutcome::Fallback { reason } => {
                    if self.partitions.logged.insert(reason.clone()) {
                        tracing::warn!(target = %slot, %cpus, "no {mode} cpuset partition, the cgroup stays a member: {reason} (logged once per reason; `pinion ps` shows it)");
                    }
                    if !again {
                        self.counters.partition_fallbacks_total += 1;
                    }
                    PartitionState::Fallback { cpus, reason }
                }
            };
            self.partitions.held.insert(slot, state);
        }
    }

    /// The CPUs that more than one exclusive workload with a partition slot
    /// holds: the containers of a pod sharing its pod-level CPU set
    /// (stopped containers have no slot: an init container's CPUs reused
    /// by an app container are not shared).
    fn cpus_shared_between_slots(&self) -> CpuSet {
        let mut seen = CpuSet::new();
        let mut shared = CpuSet::new();
        for workload in self
            .workloads
            .values()
            .filter(|w| w.desired.is_exclusive() && slot(w).is_some())
        {
            shared.union_with(&workload.desired.cpus.intersection(&seen));
            seen.union_with(&workload.desired.cpus);
        }
        shared
    }

    /// Before a run's cgroup is removed: its partition taken apart (the
    /// ancestors' `cpuset.cpus.exclusive` keep its CPUs otherwise).
    pub(super) fn release_partition(&mut self, cgroup: &CgroupName) {
        self.unmake_partition(&Slot::Cgroup(PartitionTarget::Run(cgroup.clone())));
    }

    /// The runtime created runtime container `container_id`'s task (NRI
    /// `StartContainer`; its cgroup exists now): the reconcile pass compares
    /// its cgroup from now on, and the executor's pass makes its partition.
    /// That pass runs only when there is a partition to make (an exclusive
    /// container, `exclusiveCpus.partition` not `member`): the runtime
    /// holds the container's start until this returns. False when Pinion
    /// does not know the container.
    pub fn container_started(&mut self, container_id: &str) -> bool {
        let mut known = false;
        let mut partition = false;
        let partitions = self.partitions.mode != PartitionMode::Member;
        for workload in self.workloads.values_mut() {
            if let Frontend::Runtime {
                container_id: Some(id),
                started,
                ..
            } = &mut workload.frontend
            {
                if id == container_id {
                    *started = true;
                    known = true;
                    partition |= partitions && workload.desired.is_exclusive();
                }
            }
        }
        if partition {
            self.converge();
        }
        known
    }

    fn unmake_partition(&mut self, slot: &Slot) {
        let Some(state) = self.partitions.held.remove(slot) else {
            return;
        };
        if let PartitionState::Made { cpus, .. } = state {
            self.take_apart(slot, &cpus);
        }
    }

    /// Takes the partition at `slot` apart; when that fails it stays
    /// unfinished, tried again at the next pass (logged once).
    fn take_apart(&mut self, slot: &Slot, cpus: &CpuSet) {
        let Slot::Cgroup(target) = slot else {
            return;
        };
        match self.erase_partition(target, cpus) {
            Ok(()) => {
                tracing::info!(%target, %cpus, "cpuset partition taken apart");
                self.partitions.unfinished.remove(slot);
                self.partitions.retry_fallbacks = true;
            }
            Err(err) => {
                if self
                    .partitions
                    .unfinished
                    .insert(slot.clone(), cpus.clone())
                    .is_none()
                {
                    tracing::error!(%target, %cpus, "taking the cpuset partition apart: {err}; tried again at every pass until it is");
                } else {
                    tracing::debug!(%target, %cpus, "taking the cpuset partition apart, again: {err}");
                }
            }
        }
    }
}
