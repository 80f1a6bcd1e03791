//! Owns the following of CPU hot-plug at run time: the state, the workloads and the report when the online CPUs change, and the runs' processes a cgroup v1 kernel moved out.
//!
//! CPU hot-plug at run time (issue 13): the reconcile loop polls the
//! machine's online CPUs (`pinion_host::online_cpus`); when they changed it
//! discovers the topology again and hands it here. The state follows with
//! the rule that rebuilds it from the node (`pinion_core::hotplug`): a
//! workload that lost an exclusive CPU to the kernel gets a replacement
//! chosen by the policy — or keeps what is left when no CPU is free — and
//! a CPU that comes back online joins the shared pool. The change is
//! journaled and flushed before the executor rewrites any cgroup, logged,
//! counted and shown by `pinion ps`.

use pinion_core::hotplug::{follow_online, policy_on, Followed};
use pinion_core::placement::all_memory_nodes;
use pinion_core::rebuild::{Conflict, Outcome, PodSet};
use pinion_core::{CpuSet, Topology};
use serde::{Deserialize, Serialize};

use std::collections::{BTreeMap, BTreeSet};

use pinion_host::cgroup::RootProcess;

use super::{ControlError, Controller, Frontend, Key};

/// How many hot-plug lines `pinion ps` keeps (the oldest go first).
const KEPT_LINES: usize = 32;

/// What following a change of the online CPUs did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyReport {
    /// CPUs that went offline and came online since the last change.
    pub offline: CpuSet,
    pub online: CpuSet,
    /// One line per workload that did not keep exactly its CPUs.
    pub lines: Vec<String>,
}

impl TopologyReport {
    /// True when the online CPUs had not changed.
    #[must_use]
    pub fn unchanged(&self) -> bool {
        self.offline.is_empty() && self.online.is_empty()
    }
}

impl Controller {
    /// Follows the machine's online CPUs to `machine` (discovered after the
    /// reconcile loop saw them change); nothing happens when they are the
    /// CPUs the engine already has. On error nothing changed.
    pub fn follow_topology(&mut self, machine: &Topology) -> Result<TopologyReport, ControlError> {
        let before = self.engine.machine().all_cpus().clone();
        if *machine.all_cpus() == before {
            return Ok(TopologyReport::default());
        }
        let policy = policy_on(self.engine.policy(), machine)
            .map_err(|err| ControlError::Start(Box::new(err)))?;
        let followed = follow_online(
            self.engine.state(),
            self.engine.pod_cpus(),
            &before,
            &policy,
        );
        let next = self
            .engine
            .on_machine(
                machine,
                policy,
                followed.rebuilt.state.clone(),
                followed.rebuilt.pod_cpus(),
            )
            .map_err(|err| ControlError::Start(Box::new(err)))?;
        self.replace_engine_durably(next)?;
        let report = self.report_hotplug(&followed);
        // Pinion's root first: a cgroup v1 kernel does not give a CPU that
        // comes back to the cpusets it was removed from.
        let all = self.engine.machine().all_cpus().clone();
        let mems = all_memory_nodes(self.engine.machine());
        if let Err(err) = self.write_root(&all, &mems) {
            tracing::warn!("widening pinion's cgroup root to cpus {all}: {err}");
        }
        self.converge();
        // A run left with fewer exclusive CPUs holds that many now.
        self.sync_run_records();
        self.maybe_compact(true);
        Ok(report)
    }

    /// Logs, counts and keeps for `pinion ps` what `followed` did.
    fn report_hotplug(&mut self, followed: &Followed) -> TopologyReport {
        self.counters.cpu_online_changes_total += 1;
        let mut report = TopologyReport {
            offline: followed.gone.clone(),
            online: followed.back.clone(),
            lines: Vec::new(),
        };
        let head = describe_change(followed);
        tracing::info!("{head}; shared pool now {}", self.engine.shared_pool());
        report.lines.push(head);
        for outcome in followed.rebuilt.outcomes.iter().filter(|o| !o.unmoved()) {
            let short = outcome
                .conflicts
                .iter()
                .any(|c| matches!(c, Conflict::Short { .. }));
            let replaced = outcome
                .conflicts
                .iter()
                .any(|c| matches!(c, Conflict::Replaced { .. }));
            let line = describe_outcome(outcome);
            if short {
                self.counters.cpu_offline_short_total += 1;
                tracing::warn!("{line}");
            } else {
                tracing::info!("{line}");
            }
            if replaced {
                self.counters.cpu_offline_replaced_total += 1;
            }
            report.lines.push(line);
        }
        for set in followed
            .rebuilt
            .pod_sets
            .iter()
            .filter(|s| !s.conflicts.is_empty())
        {
            let line = describe_pod_set(set);
            tracing::warn!("{line}");
            report.lines.push(line);
        }
        self.keep_hotplug_lines(&report.lines);
        report
    }

    fn keep_hotplug_lines(&mut self, lines: &[String]) {
        self.hotplug_lines.extend(lines.iter().cloned());
        let excess = self.hotplug_lines.len().saturating_sub(KEPT_LINES);
        self.hotplug_lines.drain(..excess);
    }

    /// Moves the processes of standalone runs back into their cgroups from
    /// Pinion's root, where a cgroup v1 kernel put them when all of a run's
    /// CPUs went offline (`follow_topology` has given the run CPUs again
    /// since). Returns the runs whose processes are still in the root: the
    /// run's cgroup has no CPUs yet, or a move failed. They are not over,
    /// though their cgroups are empty.
    pub(super) fn take_back_stranded(&mut self) -> BTreeSet<Key> {
        let processes = match self.host.root_processes() {
            Ok(processes) if processes.is_empty() => return BTreeSet::new(),
            Ok(processes) => processes,
            Err(err) => {
                tracing::warn!("listing the processes in pinion's cgroup root: {err}");
                return BTreeSet::new();
            }
        };
        let leads: BTreeMap<u32, Key> = self
            .workloads
            .iter()
            .filter_map(|(key, w)| match &w.frontend {
                Frontend::Standalone { pid: Some(pid), .. } => Some((*pid, key.clone())),
                _ => None,
            })
            .collect();
        let mut waiting = BTreeSet::new();
        let mut lines = Vec::new();
        for (key, pids) in stranded_runs(&processes, &leads) {
            let Some(Frontend::Standalone { cgroup, .. }) =
                self.workloads.get(&key).map(|w| &w.frontend)
            else {
                continue;
            };
            let cgroup = cgroup.clone();
            if self.host.cpus(&cgroup).map_or(true, |cpus| cpus.is_empty()) {
                // Not followed yet: the cgroup takes no process without CPUs.
                waiting.insert(key);
                continue;
            }
            let mut moved = Vec::new();
            for pid in pids {
                match self.move_back(&cgroup, pid) {
                    Ok(()) => moved.push(pid.to_string()),
                    Err(err) => {
                        tracing::warn!(pod = %key.0, container = %key.1, pid, "moving a process back into {cgroup}: {err}");
                        waiting.insert(key.clone());
                    }
                }
            }
            if !moved.is_empty() {
                let line = format!(
                    "{}/{}: processes {} moved back into its cgroup (the kernel had moved them to pinion's cgroup root when its cpus all went offline)",
                    key.0,
                    key.1,
                    moved.join(",")
                );
                tracing::info!("{line}");
                lines.push(line);
            }
        }
        self.keep_hotplug_lines(&lines);
        waiting
    }
}

/// Which run each of `processes` (in Pinion's root) belongs to: the run
/// whose lead process (`leads`) it is or descends from through processes
/// that are in the root too (the kernel moved all of a run's processes
/// together). Processes of no run are left out.
fn stranded_runs(processes: &[RootProcess], leads: &BTreeMap<u32, Key>) -> BTreeMap<Key, Vec<u32>> {
    let parents: BTreeMap<u32, Option<u32>> = processes.iter().map(|p| (p.pid, p.parent)).collect();
    let mut runs: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
    for process in processes {
        let mut here = process.pid;
        // Each step goes to a distinct process of the root: no cycle is
        // longer than the list.
        for _ in 0..=processes.len() {
            if let Some(key) = leads.get(&here) {
                runs.entry(key.clone()).or_default().push(process.pid);
                break;
            }
            match parents.get(&here) {
                Some(Some(parent)) => here = *parent,
                _ => break,
            }
        }
    }
    runs
}

fn describe_change(followed: &Followed) -> String {
    let mut parts = Vec::new();
    if !followed.gone.is_empty() {
        parts.push(format!("cpus {} went offline", followed.gone));
    }
    if !followed.back.is_empty() {
        parts.push(format!(
            "cpus {} came online (to the shared pool)",
            followed.back
        ));
    }
    parts.join(", ")
}

pub(super) fn describe_outcome(outcome: &Outcome) -> String {
    let now = if outcome.cpus.is_empty() {
        "the shared pool".to_string()
    } else {
        format!("cpus {}", outcome.cpus)
    };
    let why: Vec<String> = outcome.conflicts.iter().map(ToString::to_string).collect();
    format!(
        "{}/{} had cpus {}, now {now}: {}",
        outcome.pod,
        outcome.container,
        outcome.observed,
        why.join("; ")
    )
}

/// One line for a pod-level CPU set that did not keep exactly its CPUs.
pub(super) fn describe_pod_set(set: &PodSet) -> String {
    let now = if set.cpus.is_empty() {
        "none".to_string()
    } else {
        format!("cpus {}", set.cpus)
    };
    let why: Vec<String> = set.conflicts.iter().map(ToString::to_string).collect();
    format!(
        "pod {}'s pod-level cpu set had cpus {}, now {now}: {}",
        set.pod,
        set.observed,
        why.join("; ")
    )
}

#[cfg(test)]
mod tests;
