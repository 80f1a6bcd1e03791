//! Owns the rebuild of the state from the node at start, when no checkpoint can be read.
//!
//! Rebuilding the state from the node at start, when there is no readable
//! checkpoint: each live cgroup of Pinion's says which CPUs its run has
//! (`cpuset.cpus`) and its run record what it asked for; the rule of
//! `pinion_core::rebuild` makes a valid state of that, keeping every run on
//! the CPUs it has unless the claims conflict. Every step is logged, counted
//! and kept for `pinion ps` ([`StartReport`]).

use pinion_core::policy::Policy;
use pinion_core::rebuild::{rebuild_with_pods, Claim, Rebuilt};
use pinion_core::record::{kinds, SideData, SideValue};
use pinion_core::state::PodCpus;
use pinion_host::cgroup::{CgroupError, CpusetHost};
use pinion_host::journal::SetAside;
use pinion_host::runs::RunRecords;

use super::{ControlError, Controller, Frontend, RunningContainer, RUN_CONTAINER};

/// What the start had to repair, for `pinion ps` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartReport {
    /// One line per event and conflict, in order.
    pub lines: Vec<String>,
    /// The state was rebuilt from the node.
    pub rebuilt: bool,
    /// Conflicts the rebuild resolved (workloads that did not keep exactly
    /// their CPUs).
    pub conflicts: u64,
    /// The checkpoint was migrated to the configuration; this many
    /// assignments could not be kept.
    pub migrated_dropped: Option<u64>,
    /// Why new exclusive admissions are refused (degraded mode), if they are.
    pub degraded: Option<String>,
    /// The checkpoint was missing or unreadable: the runtime's first
    /// `Synchronize` rebuilds its containers' assignments (why).
    pub runtime_rebuild: Option<String>,
}

/// The claims of the live standalone runs (see `pinion_host::runs::claims`),
/// its warnings logged.
pub(super) fn claims(host: &dyn CpusetHost, runs: &RunRecords) -> Result<Vec<Claim>, CgroupError> {
    let (claims, warnings) = pinion_host::runs::claims(host, runs, RUN_CONTAINER)?;
    for warning in warnings {
        tracing::warn!("rebuilding: {warning}");
    }
    Ok(claims)
}

/// Rebuilds the state from `claims` under `policy`, logging why and what
/// happened to every workload.
pub(super) fn rebuild_logged(
    (claims, pods): (&[Claim], &PodCpus),
    policy: &Policy,
    why: &str,
    report: &mut StartReport,
) -> Rebuilt {
    let rebuilt = rebuild_with_pods(claims, pods, policy);
    let exclusive = rebuilt.outcomes.iter().filter(|o| o.exclusive).count();
    let line = format!(
        "state rebuilt from {} running workloads ({exclusive} with exclusive cpus): {why}",
        claims.len()
    );
    tracing::warn!("{line}");
    report.lines.push(line);
    report.rebuilt = true;
    for outcome in &rebuilt.outcomes {
        if outcome.unmoved() {
            tracing::info!(pod = %outcome.pod, container = %outcome.container, cpus = %outcome.observed, exclusive = outcome.exclusive, "rebuilt: keeps its cpus");
            continue;
        }
        report.conflicts += 1;
        for conflict in &outcome.conflicts {
            let line = format!(
                "conflict: {}/{} had cpus {}, now {}: {conflict}",
                outcome.pod,
                outcome.container,
                outcome.observed,
                if outcome.cpus.is_empty() {
                    "the shared pool".to_string()
                } else {
                    format!("cpus {}", outcome.cpus)
                }
            );
            tracing::warn!("{line}");
            report.lines.push(line);
        }
    }
    for set in rebuilt
        .pod_sets
        .iter()
        .filter(|set| !set.conflicts.is_empty())
    {
        report.conflicts += 1;
        let line = format!("conflict: {}", super::hotplug::describe_pod_set(set));
        tracing::warn!("{line}");
        report.lines.push(line);
    }
    rebuilt
}

/// Why a rebuild happens: the checkpoint was set aside, or it is missing.
pub(super) fn reason(set_aside: Option<&SetAside>, checkpoint: &str) -> String {
    match set_aside {
        Some(aside) => {
            let journal = aside
                .journal
                .as_ref()
                .map(|j| format!(", its journal as {}", j.display()))
                .unwrap_or_default();
            format!(
                "checkpoint {checkpoint} is unreadable ({}); it is kept as {}{journal}",
                aside.reason,
                aside.checkpoint.display()
            )
        }
        None => format!("checkpoint {checkpoint} is missing"),
    }
}

impl Controller {
    /// After a start without a readable checkpoint (see
    /// [`StartReport::runtime_rebuild`]), the runtime's first `Synchronize`
    /// says which CPUs its containers have: each Kubernetes container with a
    /// cpuset claims it for the exclusive CPUs its pod spec asks for, beside
    /// the assignments the state holds already (standalone runs), and the
    /// rule of `pinion_core::rebuild` makes the state of that — the same
    /// rule as for standalone runs. Journaled and flushed before anything
    /// is applied; logged, counted and shown by `pinion ps`.
    pub(super) fn rebuild_from_runtime(
        &mut self,
        running: &[RunningContainer],
        why: &str,
    ) -> Result<(), ControlError> {
        let mut claims: Vec<Claim> = Vec::new();
        for (pod, containers) in &self.engine.state().assignments {
            for (container, cpus) in containers {
                claims.push(Claim {
                    pod: pod.clone(),
                    container: container.clone(),
                    cpus: cpus.clone(),
                    exclusive: cpus.len(),
                });
            }
        }
        let held = claims.len();
        for container in running {
            let (Some(pod), Some(cpus)) = (&container.pod, &container.observed.cpus) else {
                continue;
            };
            let standalone = self
                .workloads
                .get(&container.key)
                .is_some_and(|w| matches!(w.frontend, Frontend::Standalone { .. }));
            if standalone
                || claims
                    .iter()
                    .any(|c| (&c.pod, &c.container) == (&container.key.0, &container.key.1))
            {
                continue;
            }
            claims.push(Claim {
                pod: container.key.0.clone(),
                container: container.key.1.clone(),
                cpus: cpus.clone(),
                exclusive: self.engine.exclusive_cpus_asked(pod, &container.key.1),
            });
        }
        if claims.len() == held {
            return Ok(());
        }
        let why = format!("at the runtime's first synchronize; {why}");
        // Reported only once it is durable.
        let mut report = StartReport::default();
        let rebuilt = rebuild_logged(
            (&claims, self.engine.pod_cpus()),
            self.engine.policy(),
            &why,
            &mut report,
        );
        let machine = self.engine.machine().clone();
        let pod_cpus = rebuilt.pod_cpus();
        let next = self
            .engine
            .on_machine(
                &machine,
                self.engine.policy().clone(),
                rebuilt.state,
                pod_cpus,
            )
            .map_err(|err| ControlError::Start(Box::new(err)))?;
        self.replace_engine_durably(next)?;
        if !self.start_report.rebuilt {
            self.counters.state_rebuilds_total += 1;
        }
        self.counters.state_rebuild_conflicts_total += report.conflicts;
        self.start_report.rebuilt = true;
        self.start_report.conflicts += report.conflicts;
        self.start_report.lines.extend(report.lines);
        // A fresh checkpoint of the rebuilt state, and a fresh journal.
        self.maybe_compact(true);
        Ok(())
    }
}

/// The reason of a rebuild from the runtime that an earlier start left
/// pending ([`kinds::RUNTIME_REBUILD`]).
pub(super) fn pending_runtime_rebuild(side: &SideData) -> Option<String> {
    side.get(kinds::RUNTIME_REBUILD)?
        .get(kinds::RUNTIME_REBUILD_PENDING)?
        .decode()
        .ok()
}

impl Controller {
    /// Sets the side-data entry of a pending rebuild from the runtime to
    /// the start report's (none: removed); journaled with the next batch.
    pub(super) fn note_runtime_rebuild(&mut self) {
        let value = self
            .start_report
            .runtime_rebuild
            .as_ref()
            .and_then(|why| SideValue::encode(why).ok());
        let _ = self.plugin_data.side_mut().set(
            kinds::RUNTIME_REBUILD,
            kinds::RUNTIME_REBUILD_PENDING,
            value,
        );
    }

    /// The rebuild from the runtime is done: its note is removed, durably.
    /// When that cannot be flushed the note stays, and the next start
    /// rebuilds again at the first Synchronize (which then finds nothing
    /// missing).
    pub(super) fn forget_runtime_rebuild(&mut self) {
        let side = self.plugin_data.side_mut();
        let old = side
            .get(kinds::RUNTIME_REBUILD)
            .and_then(|entries| entries.get(kinds::RUNTIME_REBUILD_PENDING))
            .cloned();
        let Some(record) = side.set(kinds::RUNTIME_REBUILD, kinds::RUNTIME_REBUILD_PENDING, None)
        else {
            return;
        };
        let written = self
            .store
            .record(&record)
            .map_err(ControlError::from)
            .and_then(|_| self.store.flush().map_err(ControlError::from));
        if let Err(err) = written {
            tracing::warn!(
                "forgetting the rebuild from the runtime: {err}; the next start rebuilds again"
            );
            self.store.discard_pending();
            let _ = self.plugin_data.side_mut().set(
                kinds::RUNTIME_REBUILD,
                kinds::RUNTIME_REBUILD_PENDING,
                old,
            );
        }
    }
}

/// Seconds since the epoch, the suffix of files set aside.
pub(super) fn stamp() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .to_string()
}

#[cfg(test)]
mod tests;
