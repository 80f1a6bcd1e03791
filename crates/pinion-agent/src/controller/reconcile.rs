//! The reconcile pass: release what has ended, repair cpusets changed
//! behind Pinion's back, remove empty stray cgroups.

use super::{Controller, Key, ReconcileReport};

impl Controller {
    /// Releases containers whose cgroup has no process left, rewrites
    /// cpusets someone else changed and removes empty stray cgroups.
    pub fn reconcile(&mut self) -> ReconcileReport {
        self.counters.reconcile_runs_total += 1;
        let mut report = ReconcileReport::default();
        for (pod, container) in self.gone_workloads() {
            match self.release(&pod, Some(&container)) {
                Ok(_) => {
                    self.counters.released_gone_total += 1;
                    report.released.push(format!("{pod}/{container}"));
                }
                Err(err) => {
                    tracing::error!(%pod, %container, "release of a finished workload failed: {err}");
                }
            }
        }
        report.repaired = self.repair_drift();
        self.remove_strays();
        self.publish();
        report
    }

    fn gone_workloads(&self) -> Vec<Key> {
        self.workloads
            .iter()
            .filter_map(|(key, w)| Some((key, w.cgroup.as_ref()?)))
            .filter(|(_, name)| self.host.pids(name).is_ok_and(|p| p.is_empty()))
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn repair_drift(&mut self) -> Vec<String> {
        let mut repaired = Vec::new();
        let managed = self.managed_cgroups();
        for (key, name) in managed {
            let want = self.cpus_of(&key);
            let have = self.host.cpus(&name);
            if have.as_ref().is_ok_and(|have| *have == want) {
                continue;
            }
            let mems = self.mems_of(&want);
            match self.host.set(&name, &want, &mems) {
                Ok(()) => {
                    tracing::warn!(cgroup = %name, "cpuset changed outside Pinion; rewritten to {want}");
                    self.counters.drift_repairs_total += 1;
                    repaired.push(name.to_string());
                }
                Err(err) => tracing::error!(cgroup = %name, "repairing cpuset: {err}"),
            }
        }
        repaired
    }

    fn remove_strays(&mut self) {
        let Ok(names) = self.host.list() else { return };
        for name in names {
            let owned = self
                .workloads
                .values()
                .any(|w| w.cgroup.as_ref() == Some(&name));
            if !owned && self.host.pids(&name).is_ok_and(|p| p.is_empty()) {
                if let Err(err) = self.host.remove(&name) {
                    tracing::warn!("removing stray cgroup {name}: {err}");
                }
            }
        }
    }
}
