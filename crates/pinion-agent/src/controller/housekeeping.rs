//! Owns the housekeeping cgroups (`housekeeping.cgroups`) kept on the shared pool.
//!
//! Housekeeping cgroups (issue 31 item 2, config `housekeeping.cgroups`):
//! cgroups outside Pinion's (`/system.slice`, the runtime's, kubelet's)
//! whose `cpuset.cpus` the executor keeps equal to the shared pool with the
//! reserved CPUs ([`pinion_core::housekeeping`]), in the same pass as the
//! shared pool: shrunk before the pass's container writes (a CPU granted
//! exclusively leaves them before the container starts on it), grown after
//! them (a released CPU joins them once its container let it go). Never
//! written empty, never created: a missing one is logged (once) and
//! counted, and tried again each pass. One that holds a container with
//! exclusive CPUs, or Pinion's own cgroups, is left alone (its cpus would
//! cap theirs) and reported as a conflict.
//!
//! On shutdown they keep their last cpus (the exclusive containers keep
//! running, and so does their protection); a cgroup taken out of the
//! config keeps the cpus it had — see docs/housekeeping.md.

use std::path::PathBuf;

use pinion_core::drift::{judge, OtherWriters};
use pinion_core::housekeeping::{housekeeping_cpus, plan, HousekeepingPlan};
use pinion_core::CpuSet;
use pinion_host::cgroup::{CgroupError, ContainerCgroup};

use super::foreign::{ForeignKind, ForeignMark};
use super::{Controller, Frontend};

/// What became of one housekeeping cgroup at the last pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptState {
    /// Not written yet.
    Pending,
    /// Holds what Pinion wrote.
    Kept,
    /// No such cgroup (tried again each pass).
    Missing,
    /// A write failed (why).
    Failed(String),
    /// Left alone: it holds exclusive CPUs' cgroups (whose).
    Conflict(String),
}

impl KeptState {
    /// The metric's `state` label.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Kept => "kept",
            Self::Missing => "missing",
            Self::Failed(_) => "failed",
            Self::Conflict(_) => "conflict",
        }
    }
}

/// One housekeeping cgroup.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    cgroup: ContainerCgroup,
    /// What Pinion last wrote (`None`: unknown).
    applied: Option<CpuSet>,
    state: KeptState,
    /// A foreign value kept in mode `report` (the same again is no event).
    yielded: Option<Option<CpuSet>>,
    /// Repairs another writer undid again at once (the next waits longer).
    backoff: pinion_core::drift::RepairBackoff,
    mark: Option<ForeignMark>,
}

/// The housekeeping cgroups and where Pinion's own cgroups live.
#[derive(Debug, Clone, Default)]
pub(super) struct Housekeeping {
    kept: Vec<Kept>,
    /// Pinion's root relative to the hierarchy's mount (conflict check).
    pinion_root: Option<PathBuf>,
}

impl Housekeeping {
    pub(super) fn new(cgroups: &[ContainerCgroup], pinion_root: Option<PathBuf>) -> Self {
        Self {
            kept: cgroups
                .iter()
                .map(|cgroup| Kept {
                    cgroup: cgroup.clone(),
                    applied: None,
                    state: KeptState::Pending,
                    yielded: None,
                    backoff: pinion_core::drift::RepairBackoff::default(),
                    mark: None,
                })
                .collect(),
            pinion_root,
        }
    }

    /// One line per cgroup for `pinion ps`.
    pub(super) fn lines(&self) -> Vec<String> {
        self.kept
            .iter()
            .map(|k| {
                let cpus = k
                    .applied
                    .as_ref()
                    .map_or_else(|| "-".to_string(), ToString::to_string);
                let mut line = match &k.state {
                    KeptState::Failed(why) | KeptState::Conflict(why) => {
                        format!("{} cpus {cpus} ({}: {why})", k.cgroup, k.state.name())
                    }
                    state => format!("{} cpus {cpus} ({})", k.cgroup, state.name()),
                };
                if let Some(mark) = &k.mark {
                    line.push_str(&format!("; {mark}"));
                }
                line
            })
            .collect()
    }

    /// How many cgroups are in each state.
    pub(super) fn states(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut out = std::collections::BTreeMap::new();
        for k in &self.kept {
            *out.entry(k.state.name()).or_default() += 1;
        }
        out
    }
}

impl Controller {
    /// The set housekeeping cgroups get now.
    fn housekeeping_target(&self) -> CpuSet {
        housekeeping_cpus(
            &self.engine.shared_pool(),
            &self.engine.policy().reserved(),
            self.engine.machine().all_cpus(),
        )
    }

    /// Shrinks the housekeeping cgroups before the pass's container writes;
    /// returns the plans, whose growing half [`Controller::grow_housekeeping`]
    /// writes after them.
    pub(super) fn shrink_housekeeping(&mut self) -> Vec<HousekeepingPlan> {
        if self.housekeeping.kept.is_empty() {
            return Vec::new();
        }
        let target = self.housekeeping_target();
        let conflicts = self.housekeeping_conflicts();
        let mut plans = Vec::new();
        for (index, conflict) in conflicts.into_iter().enumerate() {
            if let Some(why) = conflict {
                self.set_kept_state(index, KeptState::Conflict(why));
                plans.push(HousekeepingPlan::default());
                continue;
            }
            let kept = &self.housekeeping.kept[index];
            let current = match &kept.applied {
                Some(applied) => Some(applied.clone()),
                None => match self.host.housekeeping_cpus(&kept.cgroup) {
                    Ok(cpus) => cpus,
                    Err(err) => {
                        self.kept_failed(index, &err);
                        plans.push(HousekeepingPlan::default());
                        continue;
                    }
                },
            };
            let plan = plan(current.as_ref(), &target);
            if let Some(cpus) = &plan.before {
                self.write_kept(index, cpus);
            } else {
                if self.housekeeping.kept[index].applied.is_none() {
                    self.housekeeping.kept[index].applied = current;
                }
                if plan.after.is_none() {
                    // Found holding what it should.
                    self.set_kept_state(index, KeptState::Kept);
                }
            }
            plans.push(plan);
        }
        plans
    }

    /// The growing half of the plans [`Controller::shrink_housekeeping`]
    /// made.
    pub(super) fn grow_housekeeping(&mut self, plans: &[HousekeepingPlan]) {
        for (index, plan) in plans.iter().enumerate() {
            if let Some(cpus) = &plan.after {
                self.write_kept(index, cpus);
            }
        }
    }

    /// Reconcile: housekeeping cgroups whose cpus someone else changed are
    /// reported, then written again (`repair`) or left (`report`).
    pub(super) fn notice_housekeeping_writes(&mut self) {
        for index in 0..self.housekeeping.kept.len() {
            let kept = &self.housekeeping.kept[index];
            let (Some(applied), KeptState::Kept) = (&kept.applied, &kept.state) else {
                continue;
            };
            let observed = match self.host.housekeeping_cpus(&kept.cgroup) {
                Ok(cpus) => cpus,
                Err(err) => {
                    self.kept_failed(index, &err);
                    continue;
                }
            };
            let intended = Some(applied.clone());
            let verdict = judge(
                &intended,
                &observed,
                kept.yielded.as_ref(),
                self.foreign.mode,
            );
            let what = format!("housekeeping cgroup {} cpuset.cpus", kept.cgroup);
            if observed == intended {
                self.housekeeping.kept[index].backoff.held();
            } else if verdict.repair {
                let backoff = &mut self.housekeeping.kept[index].backoff;
                if !backoff.repair_now() {
                    continue;
                }
                if backoff.repairs > 1 {
                    tracing::warn!("another writer undid the repair of {what} again: repaired {} times in a row, the next repair waits {} reconcile passes", backoff.repairs, backoff.wait);
                }
            }
            if let Some(write) = verdict.event {
                let write = pinion_core::drift::ForeignWrite {
                    from: show(&write.from),
                    to: show(&write.to),
                };
                let mark =
                    self.record_foreign(ForeignKind::Housekeeping, &what, &write, verdict.repair);
                self.housekeeping.kept[index].mark = Some(mark);
            }
            let kept = &mut self.housekeeping.kept[index];
            if verdict.repair {
                kept.applied = None;
                kept.yielded = None;
            } else if observed != intended && self.foreign.mode == OtherWriters::Report {
                kept.yielded = Some(observed);
            } else {
                kept.yielded = None;
            }
        }
    }

    /// Per cgroup, why it must be left alone: it is (or holds) Pinion's
    /// root, or the cgroup of a runtime container with exclusive cpus.
    fn housekeeping_conflicts(&self) -> Vec<Option<String>> {
        self.housekeeping
            .kept
            .iter()
            .map(|kept| {
                if let Some(root) = &self.housekeeping.pinion_root {
                    if crate::config::cgroup_contains(&kept.cgroup, root) {
                        return Some(format!(
                            "it holds Pinion's cgroups (/{})",
                            root.display()
                        ));
                    }
                }
                self.workloads.iter().find_map(|((pod, container), w)| {
                    let Frontend::Runtime {
                        cgroup: Some(cgroup),
                        ..
                    } = &w.frontend
                    else {
                        return None;
                    };
                    (w.desired.is_exclusive()
                        && crate::config::cgroup_contains(&kept.cgroup, cgroup.relative()))
                    .then(|| format!("it holds {cgroup} of pod {pod} container {container}, which has exclusive cpus"))
                })
            })
            .collect()
    }

    fn write_kept(&mut self, index: usize, cpus: &CpuSet) {
        let cgroup = self.housekeeping.kept[index].cgroup.clone();
        match self.write_housekeeping(&cgroup, cpus) {
            Ok(()) => {
                self.counters.housekeeping_writes_total += 1;
                tracing::debug!(cgroup = %cgroup, cpus = %cpus, "housekeeping cgroup written");
                self.housekeeping.kept[index].applied = Some(cpus.clone());
                self.set_kept_state(index, KeptState::Kept);
            }
            Err(err) => self.kept_failed(index, &err),
        }
    }

    fn kept_failed(&mut self, index: usize, err: &CgroupError) {
        self.housekeeping.kept[index].applied = None;
        if err.is_missing() {
            self.set_kept_state(index, KeptState::Missing);
        } else {
            if !matches!(self.housekeeping.kept[index].state, KeptState::Failed(_)) {
                self.counters.housekeeping_write_failures_total += 1;
            }
            self.set_kept_state(index, KeptState::Failed(err.to_string()));
        }
    }

    /// Logs a change of state once (a cgroup missing or failing at every
    /// pass logs one line).
    fn set_kept_state(&mut self, index: usize, state: KeptState) {
        let kept = &mut self.housekeeping.kept[index];
        if kept.state == state {
            return;
        }
        let cgroup = kept.cgroup.clone();
        match &state {
            KeptState::Kept => {
                tracing::info!(cgroup = %cgroup, cpus = ?kept.applied.as_ref().map(ToString::to_string), "housekeeping cgroup follows the shared pool");
            }
            KeptState::Missing => {
                tracing::warn!(cgroup = %cgroup, "housekeeping cgroup does not exist: not kept (tried again at each pass; pinion_housekeeping_cgroups{{state=\"missing\"}})");
            }
            KeptState::Failed(why) => {
                tracing::error!(cgroup = %cgroup, "housekeeping cgroup cannot be written: {why}");
            }
            KeptState::Conflict(why) => {
                tracing::error!(cgroup = %cgroup, "housekeeping cgroup left alone: {why}; name a cgroup beside them, not above them");
            }
            KeptState::Pending => {}
        }
        kept.state = state;
    }
}

fn show(cpus: &Option<CpuSet>) -> String {
    cpus.as_ref()
        .map_or_else(|| "(empty)".to_string(), ToString::to_string)
}
