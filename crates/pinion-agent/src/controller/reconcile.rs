//! The reconcile pass: release what has ended, notice cpusets changed
//! behind Pinion's back and let the executor repair them (and retry runtime
//! updates that failed), remove empty stray cgroups.

use super::{Controller, Decision, Frontend, Key, ReconcileReport};

impl Controller {
    /// Releases standalone runs whose cgroup has no process left, repairs
    /// cpusets someone else changed, retries what was not applied and
    /// removes empty stray cgroups.
    pub fn reconcile(&mut self) -> ReconcileReport {
        self.counters.reconcile_runs_total += 1;
        let mut report = ReconcileReport::default();
        let gone = self.gone_workloads();
        let decisions = gone
            .iter()
            .map(|(pod, container)| Decision::Release {
                pod: pod.clone(),
                container: Some(container.clone()),
            })
            .collect();
        for ((pod, container), result) in gone.iter().zip(self.run_batch(decisions)) {
            match result {
                Ok(_) => {
                    self.counters.released_gone_total += 1;
                    report.released.push(format!("{pod}/{container}"));
                }
                Err(err) => {
                    tracing::error!(%pod, %container, "release of a finished workload failed: {err}");
                }
            }
        }
        let drifted = self.notice_drift();
        self.converge();
        for (key, cgroup) in drifted {
            let repaired = self
                .workloads
                .get(&key)
                .is_some_and(|w| w.applied.as_ref() == Some(&w.desired));
            if repaired {
                self.counters.drift_repairs_total += 1;
                report.repaired.push(cgroup);
            }
        }
        self.remove_strays();
        self.maybe_compact(false);
        self.publish();
        report
    }

    fn gone_workloads(&self) -> Vec<Key> {
        self.managed_cgroups()
            .into_iter()
            .filter(|(_, cgroup)| self.host.pids(cgroup).is_ok_and(|p| p.is_empty()))
            .map(|(key, _)| key)
            .collect()
    }

    /// Standalone cgroups whose cpuset differs from what was applied: marked
    /// as not applied (the executor rewrites them). Returns them.
    fn notice_drift(&mut self) -> Vec<(Key, String)> {
        let mut drifted = Vec::new();
        for (key, cgroup) in self.managed_cgroups() {
            let Some(workload) = self.workloads.get_mut(&key) else {
                continue;
            };
            let Some(applied) = &workload.applied else {
                continue;
            };
            let have = self.host.cpus(&cgroup);
            if have.as_ref().is_ok_and(|have| *have == applied.cpus) {
                continue;
            }
            tracing::warn!(cgroup = %cgroup, have = ?have.ok().map(|c| c.to_string()), want = %applied.cpus, "cpuset changed outside Pinion; rewriting");
            workload.applied = None;
            drifted.push((key, cgroup.to_string()));
        }
        drifted
    }

    fn remove_strays(&mut self) {
        let Ok(names) = self.host.list() else { return };
        for name in names {
            let owned = self.workloads.values().any(
                |w| matches!(&w.frontend, Frontend::Standalone { cgroup, .. } if *cgroup == name),
            );
            if !owned && self.host.pids(&name).is_ok_and(|p| p.is_empty()) {
                if let Err(err) = self.remove_cgroup(&name) {
                    tracing::warn!("removing stray cgroup {name}: {err}");
                }
            }
        }
    }
}
