//! `pinion ps`: which process holds which CPUs, from the agent's snapshot.

use std::fmt::Write as _;

use pinion_api::local::Snapshot;

use super::local::Local;

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

fn table(snapshot: &Snapshot) -> String {
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
    for line in &snapshot.recovery {
        let _ = writeln!(out, "at start: {line}");
    }
    for line in &snapshot.hotplug {
        let _ = writeln!(out, "cpu hot-plug: {line}");
    }
    let rows: Vec<[String; 7]> = snapshot
        .workloads
        .iter()
        .map(|w| {
            let applied = match (&w.apply_error, w.applied) {
                (Some(_), _) => " (apply failed)",
                (None, true) => "",
                (None, false) => " (pending)",
            };
            [
                w.pod.clone(),
                w.container.clone(),
                w.frontend.clone(),
                format!("{}{applied}", w.pool),
                w.cpus.clone(),
                w.mems.clone(),
                w.pid.map_or_else(|| "-".to_string(), |p| p.to_string()),
            ]
        })
        .collect();
    let header = [
        "POD",
        "CONTAINER",
        "FRONTEND",
        "POOL",
        "CPUS",
        "MEMS",
        "PID",
    ]
    .map(str::to_string);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    for w in &snapshot.workloads {
        if let Some(error) = &w.apply_error {
            let _ = writeln!(out, "{}/{} apply failed: {error}", w.pod, w.container);
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
