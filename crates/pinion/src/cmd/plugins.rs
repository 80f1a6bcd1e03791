//! `pinion plugins`: the resource plugins the agent knows (QoS Resource
//! Manager): resource, socket, options, state, last error, calls, and the
//! node resources they report.

use std::fmt::Write as _;

use pinion_api::local::Plugin as PluginView;

use super::local::Local;
use crate::output::{Clock, Table};

/// Arguments of `pinion plugins`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    local: Local,
}

/// Prints the agent's resource plugins.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let plugins = args.local.client().plugins()?;
    let clock = Clock::system();
    args.local
        .print(&plugins, |plugins, wide| table(plugins, wide, &clock))
}

fn flag(value: Option<bool>, name: &str) -> Option<String> {
    value.filter(|v| *v).map(|_| name.to_string())
}

/// The node resources the plugins report (`IsNodeResource`), one row
/// each with its per-NUMA amounts as `node:allocatable/capacity`; nothing
/// when none reports any.
fn node_resources(plugins: &[PluginView]) -> String {
    if plugins.iter().all(|p| p.node_resources.is_empty()) {
        return String::new();
    }
    let mut table = Table::new(&[
        "NODE RESOURCE",
        "PLUGIN",
        "ALLOCATABLE>",
        "CAPACITY>",
        "PER NUMA (ALLOCATABLE/CAPACITY)",
    ]);
    for p in plugins {
        for r in &p.node_resources {
            let nodes: std::collections::BTreeSet<u64> = r
                .allocatable_per_numa
                .keys()
                .chain(r.capacity_per_numa.keys())
                .copied()
                .collect();
            let per_numa: Vec<String> = nodes
                .iter()
                .map(|node| {
                    let amount = |map: &std::collections::BTreeMap<u64, f64>| {
                        map.get(node).map_or("-".to_string(), |v| v.to_string())
                    };
                    format!(
                        "{node}:{}/{}",
                        amount(&r.allocatable_per_numa),
                        amount(&r.capacity_per_numa)
                    )
                })
                .collect();
            table.row(vec![
                r.name.clone(),
                p.resource.clone(),
                r.allocatable.to_string(),
                r.capacity.to_string(),
                per_numa.join(" "),
            ]);
        }
    }
    format!("\n{}", table.render())
}

/// One row per plugin, then its stop reason and last error; `wide` adds
/// the socket and a row per gRPC method with its calls.
pub(crate) fn table(plugins: &[PluginView], wide: bool, clock: &Clock) -> String {
    if plugins.is_empty() {
        return "no resource plugins (is qosResourceManager.enabled set, and have plugins \
                registered?)\n"
            .to_string();
    }
    let mut columns = vec![
        "RESOURCE",
        "STATE",
        "OPTIONS",
        "CALLS>",
        "ERRORS>",
        "RECONCILED>",
        "LAST RECONCILE",
    ];
    if wide {
        columns.push("SOCKET");
    }
    let mut table = Table::new(&columns);
    let mut notes = String::new();
    for p in plugins {
        let options: Vec<String> = [
            flag(p.topology_aligned, "topology-aligned"),
            flag(p.need_reconcile, "reconcile"),
            flag(p.pre_start_required, "pre-start"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let calls: u64 = p.stats.calls.values().map(|c| c.calls).sum();
        let errors: u64 = p.stats.calls.values().map(|c| c.errors).sum();
        let mut row = vec![
            p.resource.clone(),
            p.state.clone(),
            options.join(","),
            calls.to_string(),
            errors.to_string(),
            p.stats.reconcile_changes.to_string(),
            p.stats
                .last_reconcile
                .map(|at| clock.time(at))
                .unwrap_or_default(),
        ];
        if wide {
            row.push(p.socket.clone());
        }
        table.row(row);
        if let Some(why) = &p.stop_reason {
            let _ = writeln!(notes, "{}: stopped: {why}", p.resource);
        }
        if let Some(error) = &p.stats.last_error {
            let _ = writeln!(notes, "{}: last error: {error}", p.resource);
        }
    }
    let mut out = table.render();
    out.push_str(&notes);
    out.push_str(&node_resources(plugins));
    if wide {
        let mut methods = Table::new(&["RESOURCE", "METHOD", "CALLS>", "ERRORS>", "MEAN MS>"]);
        for p in plugins {
            for (method, calls) in &p.stats.calls {
                #[allow(clippy::cast_precision_loss)]
                let mean_ms = if calls.calls == 0 {
                    0.0
                } else {
                    calls.seconds * 1000.0 / calls.calls as f64
                };
                methods.row(vec![
                    p.resource.clone(),
                    method.clone(),
                    calls.calls.to_string(),
                    calls.errors.to_string(),
                    format!("{mean_ms:.3}"),
                ]);
            }
        }
        out.push('\n');
        out.push_str(&methods.render());
    }
    out
}
