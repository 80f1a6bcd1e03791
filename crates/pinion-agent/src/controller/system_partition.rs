//! KEP-5894's node system partition (config `systemPartition`, gate
//! `NodeSystemPartition`): containers of pods in the partition's namespaces
//! that run in the shared pool run on the partition's `cpuset` instead.
//! Exclusive and plugin placements are left as they are (the KEP puts
//! Guaranteed pods of those namespaces in the partition too; their exclusive
//! cpus are theirs either way). See docs/housekeeping.md and
//! docs/differences-from-kubelet.md for what a node agent cannot do as
//! kubelet does (`memoryLimit` on a common parent cgroup, eviction).

use pinion_core::{Placement, Pool};

use super::{Controller, Key};

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
