//! Containers placed by the runtime (NRI). Their record is the runtime's
//! own list, sent in `Synchronize`: there is no cgroup of Pinion's to look
//! at. [`Controller::sync_runtime`] makes the controller agree with it.

use std::collections::BTreeSet;

use pinion_core::CpuSet;

use super::{ControlError, Controller, Key, Released, Workload, RUN_PREFIX};

impl Controller {
    /// Makes the runtime-placed containers match `running` (pod UID,
    /// container name) as reported by the runtime: every assignment of a
    /// pod that is not a standalone run and not in `running` is released
    /// (one checkpoint write), every running one is recorded as a workload
    /// (in the shared pool unless it holds exclusive CPUs). Nothing running
    /// moves. Standalone runs are left alone.
    pub fn sync_runtime(&mut self, running: &BTreeSet<Key>) -> Result<Released, ControlError> {
        let stale = self.stale_runtime_keys(running);
        let mut next = self.engine.clone();
        let mut freed = CpuSet::new();
        for (pod, container) in &stale {
            freed.union_with(&next.remove(pod, container));
        }
        self.save_if_changed(next.state())?;
        self.engine = next;
        for key in &stale {
            self.workloads.remove(key);
            tracing::info!(pod = %key.0, container = %key.1, "released: not running any more");
        }
        for key in running
            .iter()
            .filter(|(pod, _)| !pod.starts_with(RUN_PREFIX))
        {
            self.workloads.entry(key.clone()).or_insert(Workload {
                cgroup: None,
                pid: None,
            });
        }
        if !freed.is_empty() {
            self.shared_pool_changed();
        }
        self.publish();
        Ok(Released {
            containers: stale.into_iter().map(|(p, c)| format!("{p}/{c}")).collect(),
            cpus: freed,
        })
    }

    /// Runtime-placed containers (assignments and workloads without a
    /// cgroup, outside standalone runs) that are not in `running`.
    fn stale_runtime_keys(&self, running: &BTreeSet<Key>) -> Vec<Key> {
        let assigned = self
            .engine
            .state()
            .assignments
            .iter()
            .flat_map(|(pod, cs)| cs.keys().map(move |c| (pod.clone(), c.clone())));
        let tracked = self
            .workloads
            .iter()
            .filter(|(_, w)| w.cgroup.is_none())
            .map(|(key, _)| key.clone());
        let keys: BTreeSet<Key> = assigned
            .chain(tracked)
            .filter(|(pod, _)| !pod.starts_with(RUN_PREFIX))
            .filter(|key| !running.contains(key))
            .collect();
        keys.into_iter().collect()
    }
}
