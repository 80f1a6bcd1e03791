//! `pinion plugins`: the resource plugins the agent knows (QoS Resource
//! Manager): resource, socket, options, state, last error, calls.

use std::fmt::Write as _;

use pinion_api::local::Plugin as PluginView;

use super::local::Local;

/// Arguments of `pinion plugins`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    local: Local,
}

/// Prints the agent's resource plugins.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let plugins = args.local.client().plugins()?;
    args.local.print(&plugins, |plugins| table(plugins))
}

fn flag(value: Option<bool>, name: &str) -> Option<String> {
    value.filter(|v| *v).map(|_| name.to_string())
}

fn table(plugins: &[PluginView]) -> String {
    let mut out = String::new();
    if plugins.is_empty() {
        out.push_str("no resource plugins (is qosResourceManager.enabled set, and have plugins registered?)\n");
        return out;
    }
    for p in plugins {
        let options: Vec<String> = [
            flag(p.topology_aligned, "topology-aligned"),
            flag(p.need_reconcile, "reconcile"),
            flag(p.pre_start_required, "pre-start"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let _ = writeln!(
            out,
            "{}  {}  socket {}  options: {}",
            p.resource,
            p.state,
            if p.socket.is_empty() {
                "-"
            } else {
                p.socket.as_str()
            },
            if options.is_empty() {
                "-".to_string()
            } else {
                options.join(",")
            }
        );
        if let Some(why) = &p.stop_reason {
            let _ = writeln!(out, "  stopped: {why}");
        }
        if let Some(error) = &p.stats.last_error {
            let _ = writeln!(out, "  last error: {error}");
        }
        if let Some(at) = p.stats.last_reconcile {
            let _ = writeln!(
                out,
                "  last reconcile: {at} (unix time), containers changed so far: {}",
                p.stats.reconcile_changes
            );
        }
        for (method, calls) in &p.stats.calls {
            #[allow(clippy::cast_precision_loss)]
            let mean_ms = if calls.calls == 0 {
                0.0
            } else {
                calls.seconds * 1000.0 / calls.calls as f64
            };
            let _ = writeln!(
                out,
                "  {method}: {} calls, {} errors, mean {mean_ms:.3} ms",
                calls.calls, calls.errors
            );
        }
    }
    out
}
