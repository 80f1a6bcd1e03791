//! `pinion ps`: which process holds which CPUs, from the agent's snapshot.

use std::fmt::Write as _;

use pinion_api::local::Snapshot;

use super::local::Local;
use crate::output::Table;

/// Arguments of `pinion ps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    local: Local,
}

/// Prints the agent's workloads.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let snapshot = args.local.client().ps()?;
    args.local.print(&snapshot, table)
}

/// The workloads' table; `wide` adds each one's cgroup and container id.
pub(crate) fn table(snapshot: &Snapshot, wide: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "policy: {}  cpus: {}  reserved: {}  shared pool: {}",
        snapshot.policy,
        snapshot.all_cpus,
        if snapshot.reserved.is_empty() {
            "-"
        } else {
            &snapshot.reserved
        },
        snapshot.shared_pool
    );
    if let Some(isolated) = &snapshot.isolated_cpus {
        let _ = writeln!(
            out,
            "isolated cpus (cgroup root's cpuset.cpus.isolated): {}",
            if isolated.is_empty() { "-" } else { isolated }
        );
    }
    for line in &snapshot.recovery {
        let _ = writeln!(out, "at start: {line}");
    }
    for line in &snapshot.hotplug {
        let _ = writeln!(out, "cpu hot-plug: {line}");
    }
    for line in &snapshot.housekeeping {
        let _ = writeln!(out, "housekeeping: {line}");
    }
    let mut columns = vec![
        "POD",
        "CONTAINER",
        "FRONTEND",
        "POOL",
        "CPUS",
        "MEMS",
        "PID>",
    ];
    if wide {
        columns.extend(["CONTAINER ID", "CGROUP"]);
    }
    let mut table = Table::new(&columns);
    for w in &snapshot.workloads {
        let applied = match (&w.apply_error, w.applied) {
            (Some(_), _) => " (apply failed)",
            (None, true) => "",
            (None, false) => " (pending)",
        };
        // The partition's mark: `[isolated]`, `[root]`, or `[member!]` for
        // a fallback (its reason is printed below the table).
        let partition = match w.partition.as_deref() {
            None => String::new(),
            Some(p) if p.starts_with("member") => " [member!]".to_string(),
            Some(p) => format!(" [{p}]"),
        };
        let foreign = if w.foreign_write.is_some() {
            " (foreign write)"
        } else {
            ""
        };
        let mut row = vec![
            w.pod.clone(),
            w.container.clone(),
            w.frontend.clone(),
            format!("{}{partition}{applied}{foreign}", w.pool),
            w.cpus.clone(),
            w.mems.clone(),
            w.pid.map(|p| p.to_string()).unwrap_or_default(),
        ];
        if wide {
            row.push(w.container_id.clone().unwrap_or_default());
            row.push(w.cgroup.clone().unwrap_or_default());
        }
        table.row(row);
    }
    out.push_str(&table.render());
    for w in &snapshot.workloads {
        if let Some(error) = &w.apply_error {
            let _ = writeln!(out, "{}/{} apply failed: {error}", w.pod, w.container);
        }
        if let Some(write) = &w.foreign_write {
            let _ = writeln!(out, "{}/{} cpuset {write}", w.pod, w.container);
        }
    }
    for w in &snapshot.workloads {
        if let Some(partition) = w.partition.as_deref().filter(|p| p.starts_with("member")) {
            let _ = writeln!(
                out,
                "{}/{} cpuset partition: {partition}",
                w.pod, w.container
            );
        }
    }
    for w in snapshot.workloads.iter().filter(|w| !w.plugins.is_empty()) {
        let _ = writeln!(out, "{}/{} resource plugins:", w.pod, w.container);
        for (resource, allocation) in &w.plugins {
            let mut parts = Vec::new();
            if !allocation.oci_property_name.is_empty() {
                parts.push(format!(
                    "{}={}",
                    allocation.oci_property_name, allocation.allocation_result
                ));
            }
            parts.extend(allocation.envs.iter().map(|(k, v)| format!("env {k}={v}")));
            parts.extend(
                allocation
                    .annotations
                    .iter()
                    .map(|(k, v)| format!("annotation {k}={v}")),
            );
            let _ = writeln!(out, "  {resource}: {}", parts.join(", "));
        }
    }
    out
}
