//! Owns the reconcile pass: ended runs released, changed cpusets noticed and repaired, stray cgroups removed.
//!
//! The reconcile pass: release what has ended, notice cpusets changed
//! behind Pinion's back — in Pinion's own cgroups and in the cgroups of the
//! runtime's containers — and let the executor repair them (cgroup writes,
//! or an NRI `UpdateContainers`; also retrying runtime updates that
//! failed), remove empty stray cgroups.

use pinion_core::drift::{cpuset_drift, judge, SeenCpuset};

use super::foreign::ForeignKind;
use super::{Controller, Decision, Frontend, Key, Reach, ReconcileReport};

impl Controller {
    /// Releases standalone runs whose cgroup has no process left and held
    /// runtime containers whose pod's sandbox cgroup is gone, repairs
    /// cpusets someone else changed, retries what was not applied and
    /// removes empty stray cgroups.
    pub fn reconcile(&mut self) -> ReconcileReport {
        self.counters.reconcile_runs_total += 1;
        let mut report = ReconcileReport::default();
        let stranded = self.take_back_stranded();
        let gone: Vec<Key> = self
            .gone_workloads()
            .into_iter()
            .filter(|key| !stranded.contains(key))
            .collect();
        let decisions = gone
            .iter()
            .map(|(pod, container)| Decision::Release {
                pod: pod.clone(),
                container: Some(container.clone()),
                reach: Reach::All,
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
        let runtime_drifted = self.notice_runtime_drift();
        self.notice_housekeeping_writes();
        self.reread_partitions();
        self.converge();
        for (key, cgroup) in drifted {
            if self.is_applied(&key) {
                self.counters.drift_repairs_total += 1;
                report.repaired.push(cgroup);
            }
        }
        // Applied here means the update was handed to the NRI front-end.
        for (key, cgroup) in runtime_drifted {
            if self.is_applied(&key) {
                self.counters.runtime_drift_repairs_total += 1;
                report.repaired.push(cgroup);
            }
        }
        self.remove_strays();
        self.maybe_compact(false);
        self.publish();
        report
    }

    fn is_applied(&self, key: &Key) -> bool {
        self.workloads
            .get(key)
            .is_some_and(|w| w.applied.as_ref() == Some(&w.desired))
    }

    /// Runtime containers whose cgroup (NRI's `linux.cgroups_path`) holds
    /// another cpuset than the one the runtime last accepted from Pinion:
    /// reported as foreign writes, and with `otherWriters: repair` marked as
    /// not applied (the executor sends their placement again). Containers
    /// with an update not sent yet (not applied) or not answered by the
    /// runtime yet (`updates_in_flight`), without a known cgroup, not
    /// started yet, or whose cgroup is gone (the runtime's stop event
    /// releases them) are left alone. Returns those to repair with their
    /// cgroup.
    ///
    /// Not started: between NRI's `CreateContainer` and `StartContainer`
    /// the runtime has not written the cgroup yet (runc creates it when it
    /// creates the task, and a pod's earlier containers may still be
    /// starting), so what it holds then is no one's write.
    fn notice_runtime_drift(&mut self) -> Vec<(Key, String)> {
        let mut found = Vec::new();
        let mut held = Vec::new();
        for (key, workload) in &self.workloads {
            let Frontend::Runtime {
                container_id: Some(id),
                cgroup: Some(cgroup),
                started: true,
            } = &workload.frontend
            else {
                continue;
            };
            let Some(applied) = &workload.applied else {
                continue;
            };
            if workload.updates_in_flight > 0 {
                continue;
            }
            let seen = match self.host.container_cpuset(cgroup) {
                Ok(seen) => SeenCpuset {
                    cpus: seen.cpus,
                    mems: seen.mems,
                },
                Err(err) if err.is_missing() => continue,
                Err(err) => {
                    tracing::debug!(pod = %key.0, container = %key.1, "reading the container's cgroup: {err}");
                    continue;
                }
            };
            let Some(drift) = cpuset_drift(applied, &seen) else {
                held.push(key.clone());
                continue;
            };
            tracing::debug!(pod = %key.0, container = %key.1, id = %id, cgroup = %cgroup, "{drift}: changed outside Pinion");
            found.push((
                key.clone(),
                cgroup.to_string(),
                SeenCpuset::intended(applied),
                seen,
            ));
        }
        for key in held {
            if let Some(workload) = self.workloads.get_mut(&key) {
                workload.repair_backoff.held();
            }
        }
        let mut drifted = Vec::new();
        for (key, cgroup, intended, seen) in found {
            if self.judge_container(&key, &cgroup, &intended, &seen) {
                drifted.push((key.clone(), format!("{}/{} ({cgroup})", key.0, key.1)));
            }
        }
        drifted
    }

    /// Reports a container's cgroup found holding `seen` instead of
    /// `intended` (once per new value) and decides whether it is repaired:
    /// then marked as not applied. Returns whether it is repaired.
    ///
    /// A repair that the other writer undoes again by the next pass backs
    /// off ([`pinion_core::drift::RepairBackoff`]): the passes it waits are not reported again
    /// (the same writer's same value), the next repair is, with a warning
    /// that says how often it was undone.
    fn judge_container(
        &mut self,
        key: &Key,
        cgroup: &str,
        intended: &SeenCpuset,
        seen: &SeenCpuset,
    ) -> bool {
        let seen = seen.compared_with(intended);
        let Some(workload) = self.workloads.get(key) else {
            return false;
        };
        let verdict = judge(
            intended,
            &seen,
            workload.foreign_yielded.as_ref(),
            self.foreign.mode,
        );
        if verdict.repair {
            let Some(workload) = self.workloads.get_mut(key) else {
                return false;
            };
            if !workload.repair_backoff.repair_now() {
                tracing::debug!(pod = %key.0, container = %key.1, %cgroup, waiting = workload.repair_backoff.wait, "{seen} still: the repair waits");
                return false;
            }
            let backoff = workload.repair_backoff;
            if backoff.repairs > 1 {
                tracing::warn!(pod = %key.0, container = %key.1, %cgroup, "another writer undid the repair of its cpuset again ({seen}): repaired {} times in a row, the next repair waits {} reconcile passes", backoff.repairs, backoff.wait);
            }
        }
        let Some(workload) = self.workloads.get(key) else {
            return false;
        };
        if let Some(write) = &verdict.event {
            let pod = workload.spec.as_ref().map_or_else(
                || format!("pod {}", key.0),
                |p| format!("pod {}/{} ({})", p.namespace, p.name, key.0),
            );
            let what = format!("cgroup {cgroup} of {pod} container {}", key.1);
            let mark = self.record_foreign(ForeignKind::Container, &what, write, verdict.repair);
            if let Some(workload) = self.workloads.get_mut(key) {
                workload.foreign_mark = Some(mark);
            }
        }
        let Some(workload) = self.workloads.get_mut(key) else {
            return false;
        };
        if verdict.repair {
            workload.found_holding(&seen);
            workload.foreign_yielded = None;
        } else if seen != *intended {
            workload.foreign_yielded = Some(seen);
        }
        verdict.repair
    }

    /// Standalone runs whose cgroup has no process left, and containers
    /// held for a restart whose pod ended without the runtime saying so
    /// (their pod's sandbox cgroup is gone: containerd 1.7 never relays the
    /// stop of a pod it recovered after its own restart).
    fn gone_workloads(&self) -> Vec<Key> {
        let mut gone: Vec<Key> = self
            .managed_cgroups()
            .into_iter()
            .filter(|(_, cgroup)| self.host.pids(cgroup).is_ok_and(|p| p.is_empty()))
            .map(|(key, _)| key)
            .collect();
        for (key, workload) in &self.workloads {
            if let Some(sandbox) = &workload.held_sandbox {
                if !self.sandbox_runs(sandbox) {
                    tracing::info!(pod = %key.0, container = %key.1, %sandbox, "held for a restart, and its pod's sandbox is gone: released");
                    gone.push(key.clone());
                }
            }
        }
        gone
    }

    /// Standalone cgroups whose cpuset differs from what was applied:
    /// reported as foreign writes and, with `otherWriters: repair` (or when
    /// the cgroup cannot be read), marked as not applied (the executor
    /// rewrites them). Returns those to repair.
    fn notice_drift(&mut self) -> Vec<(Key, String)> {
        let mut drifted = Vec::new();
        for (key, cgroup) in self.managed_cgroups() {
            let Some(applied) = self.workloads.get(&key).and_then(|w| w.applied.clone()) else {
                continue;
            };
            let intended = SeenCpuset {
                cpus: Some(applied.cpus.clone()),
                mems: None,
            };
            let repair = match self.host.cpus(&cgroup) {
                Ok(have) if have == applied.cpus => {
                    if let Some(workload) = self.workloads.get_mut(&key) {
                        workload.foreign_yielded = None;
                        workload.repair_backoff.held();
                    }
                    continue;
                }
                Ok(have) => {
                    let seen = SeenCpuset {
                        cpus: (!have.is_empty()).then_some(have),
                        mems: None,
                    };
                    self.judge_container(&key, cgroup.as_str(), &intended, &seen)
                }
                Err(err) => {
                    tracing::warn!(cgroup = %cgroup, want = %applied.cpus, "reading the cpuset failed ({err}); rewriting");
                    if let Some(workload) = self.workloads.get_mut(&key) {
                        workload.applied_unknown();
                    }
                    true
                }
            };
            if repair {
                drifted.push((key, cgroup.to_string()));
            }
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
