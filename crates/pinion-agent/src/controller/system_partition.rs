//! Owns KEP-5894's node system partition (`systemPartition`): its namespaces' shared containers and its memory limit.
//!
//! KEP-5894's node system partition (config `systemPartition`, gate
//! `NodeSystemPartition`): containers of pods in the partition's namespaces
//! that run in the shared pool run on the partition's `cpuset` instead.
//! Exclusive and plugin placements are left as they are (the KEP puts
//! Guaranteed pods of those namespaces in the partition too; their exclusive
//! cpus are theirs either way). `memoryLimit` is written by the executor to
//! the partition's parent cgroup (`memory.max`, v1 `memory.limit_in_bytes`):
//! the first of `SystemPartition::cgroups` that exists, never created,
//! tried again at every pass until a write succeeds. See
//! docs/housekeeping.md and docs/differences-from-kubelet.md for what a
//! node agent cannot do as kubelet does (putting the pods in that cgroup,
//! eviction).

use pinion_core::{Placement, Pool};
use pinion_host::cgroup::ContainerCgroup;

use super::{Controller, Key};

/// Where the partition's `memoryLimit` stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LimitState {
    /// Not written yet (or no limit to write).
    #[default]
    Pending,
    /// Written to this cgroup.
    Enforced(ContainerCgroup),
    /// None of the cgroups exists (tried again at every pass).
    Missing,
    /// The write failed (why, naming the file and the value).
    Failed(String),
}

impl LimitState {
    /// Whether the limit is in place.
    #[must_use]
    pub fn is_enforced(&self) -> bool {
        matches!(self, Self::Enforced(_))
    }
}

impl Controller {
    /// `placement` of `key`, moved onto the system partition's cpus when
    /// its pod is one of the partition's.
    pub(super) fn in_system_partition(&self, key: &Key, placement: Placement) -> Placement {
        let Some(partition) = &self.system_partition else {
            return placement;
        };
        let Some(cpuset) = &partition.cpuset else {
            return placement;
        };
        if placement.pool != Pool::Shared || !self.in_partition(key) {
            return placement;
        }
        Placement {
            cpus: cpuset.clone(),
            ..placement
        }
    }

    fn in_partition(&self, key: &Key) -> bool {
        self.system_partition.as_ref().is_some_and(|partition| {
            self.workloads
                .get(key)
                .and_then(|w| w.spec.as_ref())
                .is_some_and(|pod| partition.selects(&pod.namespace))
        })
    }

    /// Writes the partition's `memoryLimit` to the first of its cgroups
    /// that exists, until one write succeeded; a change of state is logged
    /// once.
    // difference-from-kubelet: system-partition-memory-on-existing-cgroup
    pub(super) fn enforce_partition_memory(&mut self) {
        let Some(partition) = &self.system_partition else {
            return;
        };
        let Some(limit) = partition.memory_limit else {
            return;
        };
        if self.partition_memory.is_enforced() {
            return;
        }
        let cgroups = partition.cgroups.clone();
        let mut next = LimitState::Missing;
        for cgroup in &cgroups {
            match self.write_memory_limit(cgroup, limit) {
                Ok(()) => {
                    next = LimitState::Enforced(cgroup.clone());
                    break;
                }
                Err(err) if err.is_missing() => {}
                Err(err) => {
                    next =
                        LimitState::Failed(format!("memoryLimit {limit} bytes on {cgroup}: {err}"));
                    break;
                }
            }
        }
        if next == self.partition_memory {
            return;
        }
        let cgroups: Vec<String> = cgroups.iter().map(ToString::to_string).collect();
        match &next {
            LimitState::Enforced(cgroup) => {
                tracing::info!(cgroup = %cgroup, "system partition memoryLimit {limit} bytes written");
            }
            LimitState::Missing => {
                tracing::warn!("system partition memoryLimit {limit} bytes not enforced: none of the cgroups {} exists (tried again at each pass)", cgroups.join(", "));
            }
            LimitState::Failed(why) => {
                tracing::error!("system partition {why} (tried again at each pass)");
            }
            LimitState::Pending => {}
        }
        self.partition_memory = next;
    }

    /// The pods the system partition holds now (its `pod_count` metric).
    pub(super) fn system_partition_pods(&self) -> usize {
        let mut pods: Vec<&str> = self
            .workloads
            .keys()
            .filter(|key| self.in_partition(key))
            .map(|(pod, _)| pod.as_str())
            .collect();
        pods.dedup();
        pods.len()
    }
}
