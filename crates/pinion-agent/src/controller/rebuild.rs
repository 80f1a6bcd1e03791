//! Rebuilding the state from the node at start, when there is no readable
//! checkpoint: each live cgroup of Pinion's says which CPUs its run has
//! (`cpuset.cpus`) and its run record what it asked for; the rule of
//! `pinion_core::rebuild` makes a valid state of that, keeping every run on
//! the CPUs it has unless the claims conflict. Every step is logged, counted
//! and kept for `pinion ps` ([`StartReport`]).

use pinion_core::policy::Policy;
use pinion_core::rebuild::{rebuild, Claim, Rebuilt};
use pinion_host::cgroup::{CgroupError, CpusetHost};
use pinion_host::journal::SetAside;
use pinion_host::runs::RunRecords;

use super::RUN_CONTAINER;

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
    claims: &[Claim],
    policy: &Policy,
    why: &str,
    report: &mut StartReport,
) -> Rebuilt {
    let rebuilt = rebuild(claims, policy);
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

/// Seconds since the epoch, the suffix of files set aside.
pub(super) fn stamp() -> String {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .to_string()
}
