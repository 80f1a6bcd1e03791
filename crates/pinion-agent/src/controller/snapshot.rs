//! Snapshots: what readers (the local API's `ps`, `/metrics`, front-ends
//! listing assignments) see, published by the controller after each change.

use std::collections::BTreeMap;
use std::sync::Arc;

use pinion_core::state::Assignments;
use pinion_core::CpuSet;
use serde::{Deserialize, Serialize};

use super::{Controller, Key};
use crate::metrics::MetricsSnapshot;

/// The controller's view at one point.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub policy: String,
    pub all_cpus: CpuSet,
    pub reserved: CpuSet,
    pub shared_pool: CpuSet,
    /// Every admitted container, sorted by pod and container.
    pub workloads: Vec<WorkloadView>,
    /// The exclusive assignments (the checkpoint's entries).
    pub assignments: Assignments,
    #[serde(skip)]
    pub metrics: MetricsSnapshot,
}

/// One admitted container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadView {
    pub pod: String,
    pub container: String,
    pub exclusive: bool,
    pub cpus: CpuSet,
    pub mems: CpuSet,
    pub cgroup: Option<String>,
    pub pid: Option<u32>,
}

impl Controller {
    /// Builds and publishes a snapshot.
    pub(super) fn publish(&self) {
        let state = self.engine.state();
        let mut keys: Vec<Key> = self.workloads.keys().cloned().collect();
        for (pod, containers) in &state.assignments {
            for container in containers.keys() {
                let key = (pod.clone(), container.clone());
                if !self.workloads.contains_key(&key) {
                    keys.push(key);
                }
            }
        }
        keys.sort();
        let workloads = keys.iter().map(|key| self.view(key)).collect();
        let shared_pool = self.shared_pool();
        let snapshot = Snapshot {
            policy: self.engine.policy().name().to_string(),
            all_cpus: self.topology.all_cpus().clone(),
            reserved: self.engine.policy().reserved(),
            metrics: MetricsSnapshot {
                engine: self.engine.metrics(),
                counters: self.counters.clone(),
                shared_pool_cpus: shared_pool.len(),
                exclusive_cpus: state.exclusive_cpus().len(),
                exclusive_per_numa: self.exclusive_per_numa(),
                workloads: keys.len(),
            },
            shared_pool,
            workloads,
            assignments: state.assignments.clone(),
        };
        self.snapshot_tx.send_replace(Arc::new(snapshot));
    }

    fn view(&self, key: &Key) -> WorkloadView {
        let cpus = self.cpus_of(key);
        let workload = self.workloads.get(key);
        WorkloadView {
            pod: key.0.clone(),
            container: key.1.clone(),
            exclusive: self.engine.state().assignment(&key.0, &key.1).is_some(),
            mems: self.mems_of(&cpus),
            cpus,
            cgroup: workload
                .and_then(|w| w.cgroup.as_ref())
                .map(ToString::to_string),
            pid: workload.and_then(|w| w.pid),
        }
    }

    fn exclusive_per_numa(&self) -> BTreeMap<u32, usize> {
        let exclusive = self.engine.state().exclusive_cpus();
        self.topology
            .numa_cpus()
            .iter()
            .map(|(node, cpus)| (*node, cpus.intersection_len(&exclusive)))
            .collect()
    }
}
