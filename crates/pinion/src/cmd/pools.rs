//! `pinion pools`: the built-in CPU plugin's shared pools (members, CPUs,
//! size and bounds, pin, last measured pressure, last change and why), and
//! `pinion pools set NAME=SIZE|MIN-MAX|auto` — an operator's or advisor's
//! handle on a pool's size.

use std::fmt::Write as _;

use anyhow::Context as _;
use pinion_api::local::Pools;

use super::local::Local;
use crate::output::Table;

/// Arguments of `pinion pools`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Option<PoolsCommand>,
    #[command(flatten)]
    local: Local,
}

#[derive(Debug, clap::Subcommand)]
enum PoolsCommand {
    /// Pin pools: `NAME=N` (exactly N CPUs, never below its requests),
    /// `NAME=MIN-MAX` (the closed loop stays within), `NAME=auto` (back to
    /// the closed loop). An unknown pool is refused with the pools that
    /// exist; `--new` keeps a pin for a pool that has no member yet.
    Set {
        #[arg(required = true, value_name = "NAME=SIZE")]
        pins: Vec<String>,
        /// Pin pools that do not exist yet (kept for their first member).
        #[arg(long)]
        new: bool,
    },
}

/// Runs `pinion pools`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let client = args.local.client();
    let pools = match &args.command {
        None => client.pools()?,
        Some(PoolsCommand::Set { pins, new }) => {
            let mut last = None;
            for pin in pins {
                let (name, size) = pin.split_once('=').with_context(|| {
                    format!("{pin:?}: expected NAME=SIZE, NAME=MIN-MAX or NAME=auto")
                })?;
                last = Some(client.set_pool(name, size, *new)?);
            }
            last.unwrap_or_default()
        }
    };
    args.local.print(&pools, table)
}

/// The pools' table; `wide` adds the members' PSI and throttling, their
/// requests, the NUMA binding and the last change.
pub(crate) fn table(pools: &Pools, wide: bool) -> String {
    let percent = |v: Option<f64>| v.map(|v| format!("{v:.1}%")).unwrap_or_default();
    let mut columns = vec![
        "POOL",
        "CPUS",
        "SIZE>",
        "BOUNDS>",
        "PIN",
        "MEMBERS>",
        "PRESSURE>",
    ];
    if wide {
        columns.extend(["PSI>", "THROTTLED>", "REQUESTS>", "NUMA", "LAST CHANGE"]);
    }
    let mut table = Table::new(&columns);
    for p in &pools.pools {
        let mut row = vec![
            p.name.clone(),
            p.cpus.clone(),
            p.size.to_string(),
            format!("{}-{}", p.min, p.max),
            p.pin.clone(),
            p.members.len().to_string(),
            percent(p.pressure),
        ];
        if wide {
            row.extend([
                percent(p.psi),
                percent(p.throttled),
                format!("{}m", p.requests_milli),
                p.numa.clone().unwrap_or_default(),
                p.last_change.clone().unwrap_or_default(),
            ]);
        }
        table.row(row);
    }
    for (name, pin) in &pools.pending_pins {
        table.row(vec![
            name.clone(),
            String::new(),
            "0".into(),
            String::new(),
            format!("{pin} (no member yet)"),
            "0".into(),
        ]);
    }
    let mut out = table.render();
    let _ = writeln!(
        out,
        "reclaim pool: {} (minimum {}); reconcile period {}",
        if pools.reclaim.is_empty() {
            "-"
        } else {
            &pools.reclaim
        },
        pools.reclaim_min,
        pools.period
    );
    out.push_str(
        "BOUNDS: the closed loop's range, the members' requests up to maxHeadroom more; \
         a pool never grows past the CPUs free on the node.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use pinion_api::local::PoolView;

    use super::*;

    /// The members' pressure shows in its own column: PSI on cgroup v2,
    /// the throttling on v1, `-` where not measured.
    #[test]
    fn the_table_shows_the_psi_or_the_throttling_of_the_members() {
        let pool = |name: &str, psi, throttled| PoolView {
            name: name.to_string(),
            cpus: "1-3".to_string(),
            size: 3,
            min: 1,
            max: 9,
            pin: "auto".to_string(),
            pressure: Some(80.0),
            psi,
            throttled,
            ..PoolView::default()
        };
        let text = table(
            &Pools {
                pools: vec![pool("v2", Some(12.5), None), pool("v1", None, Some(80.0))],
                reclaim: "4-7".to_string(),
                reclaim_min: 1,
                period: 3,
                ..Pools::default()
            },
            true,
        );
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(lines[0][6..9], ["PRESSURE", "PSI", "THROTTLED"], "{text}");
        assert_eq!(lines[1][0], "v2");
        assert_eq!(lines[1][6..9], ["80.0%", "12.5%", "-"], "{text}");
        assert_eq!(lines[2][0], "v1");
        assert_eq!(lines[2][6..9], ["80.0%", "-", "80.0%"], "{text}");
    }
}
