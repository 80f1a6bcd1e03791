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
//! Runtime (NRI) containers are not partitioned yet: NRI gives a plugin no
//! partition file, and the container's cgroup exists only once the runtime
//! started it (docs/nri.md).

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

/// The partitions the controller made or tried.
#[derive(Debug, Default)]
pub(super) struct Partitions {
    mode: PartitionMode,
    held: BTreeMap<PartitionTarget, PartitionState>,
    /// Fallback reasons already logged.
    logged: BTreeSet<String>,
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
        target(workload).and_then(|t| self.held.get(&t))
    }
}

/// The cgroup a workload's partition would be (standalone runs only).
fn target(workload: &Workload) -> Option<PartitionTarget> {
    match &workload.frontend {
        Frontend::Standalone { cgroup, .. } => Some(PartitionTarget::Run(cgroup.clone())),
        Frontend::Runtime { .. } => None,
    }
}

impl Controller {
    /// Takes apart the partitions whose workload is gone, no longer holds
    /// exclusive CPUs or is about to get other CPUs (made again after the
    /// cpuset write, by [`Controller::make_partitions`]).
    pub(super) fn unmake_stale_partitions(&mut self) {
        let wanted: BTreeMap<PartitionTarget, CpuSet> = self
            .workloads
            .values()
            .filter(|w| self.partitions.mode != PartitionMode::Member && w.desired.is_exclusive())
            .filter_map(|w| target(w).map(|t| (t, w.desired.cpus.clone())))
            .collect();
        let stale: Vec<PartitionTarget> = self
            .partitions
            .held
            .iter()
            .filter(|(t, state)| wanted.get(*t) != Some(state.cpus()))
            .map(|(t, _)| t.clone())
            .collect();
        for target in stale {
            self.unmake_partition(&target);
        }
    }

    /// Makes a partition of every exclusive run whose cpuset is written and
    /// that has none yet (nor a fallback for the same CPUs).
    pub(super) fn make_partitions(&mut self) {
        let mode = self.partitions.mode;
        if mode == PartitionMode::Member {
            return;
        }
        let todo: Vec<(PartitionTarget, CpuSet)> = self
            .workloads
            .values()
            .filter(|w| w.desired.is_exclusive() && w.applied.as_ref() == Some(&w.desired))
            .filter_map(|w| target(w).map(|t| (t, w.desired.cpus.clone())))
            .filter(|(t, _)| !self.partitions.held.contains_key(t))
            .collect();
        for (target, cpus) in todo {
            let state = match self.host.make_partition(&target, &cpus, mode) {
                PartitionOutcome::Made {
                    partition,
                    exclusive_effective,
                } => {
                    tracing::info!(%target, %cpus, %exclusive_effective, "cpuset partition {partition}");
                    self.counters.partitions_made_total += 1;
                    PartitionState::Made { cpus, partition }
                }
                PartitionOutcome::Fallback { reason } => {
                    if self.partitions.logged.insert(reason.clone()) {
                        tracing::warn!(%target, %cpus, "no {mode} cpuset partition, the cgroup stays a member: {reason} (logged once per reason; `pinion ps` shows it)");
                    }
                    self.counters.partition_fallbacks_total += 1;
                    PartitionState::Fallback { cpus, reason }
                }
            };
            self.partitions.held.insert(target, state);
        }
    }

    /// Before a run's cgroup is removed: its partition taken apart (the
    /// ancestors' `cpuset.cpus.exclusive` keep its CPUs otherwise).
    pub(super) fn release_partition(&mut self, cgroup: &CgroupName) {
        self.unmake_partition(&PartitionTarget::Run(cgroup.clone()));
    }

    fn unmake_partition(&mut self, target: &PartitionTarget) {
        let Some(state) = self.partitions.held.remove(target) else {
            return;
        };
        if let PartitionState::Made { cpus, .. } = state {
            match self.host.unmake_partition(target, &cpus) {
                Ok(()) => tracing::info!(%target, %cpus, "cpuset partition taken apart"),
                Err(err) => {
                    tracing::error!(%target, %cpus, "taking the cpuset partition apart: {err}");
                }
            }
        }
    }
}
