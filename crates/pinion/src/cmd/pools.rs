//! `pinion pools`: the built-in CPU plugin's shared pools (members, CPUs,
//! size and bounds, pin, last measured pressure, last change and why), and
//! `pinion pools set NAME=SIZE|MIN-MAX|auto` — an operator's or advisor's
//! handle on a pool's size.

use std::fmt::Write as _;

use anyhow::Context as _;
use pinion_api::local::Pools;

use super::local::Local;

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
    /// the closed loop). A pool that does not exist yet keeps the pin.
    Set {
        #[arg(required = true, value_name = "NAME=SIZE")]
        pins: Vec<String>,
    },
}

/// Runs `pinion pools`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let client = args.local.client();
    let pools = match &args.command {
        None => client.pools()?,
        Some(PoolsCommand::Set { pins }) => {
            let mut last = None;
            for pin in pins {
                let (name, size) = pin.split_once('=').with_context(|| {
                    format!("{pin:?}: expected NAME=SIZE, NAME=MIN-MAX or NAME=auto")
                })?;
                last = Some(client.set_pool(name, size)?);
            }
            last.unwrap_or_default()
        }
    };
    args.local.print(&pools, table)
}

fn table(pools: &Pools) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<16} {:>4} {:>7} {:<6} {:>7} {:>9} {:>7} {:>9}  LAST CHANGE",
        "POOL", "CPUS", "SIZE", "BOUNDS", "PIN", "MEMBERS", "PRESSURE", "PSI", "THROTTLED"
    );
    let percent = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}%"));
    for p in &pools.pools {
        let _ = writeln!(
            out,
            "{:<16} {:<16} {:>4} {:>7} {:<6} {:>7} {:>9} {:>7} {:>9}  {}",
            p.name,
            if p.cpus.is_empty() { "-" } else { &p.cpus },
            p.size,
            format!("{}-{}", p.min, p.max),
            p.pin,
            p.members.len(),
            percent(p.pressure),
            percent(p.psi),
            percent(p.throttled),
            p.last_change.as_deref().unwrap_or("-"),
        );
    }
    let _ = writeln!(
        out,
        "{:<16} {:<16}  (minimum {})  period {}",
        "reclaim",
        if pools.reclaim.is_empty() {
            "-"
        } else {
            &pools.reclaim
        },
        pools.reclaim_min,
        pools.period
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
        let text = table(&Pools {
            pools: vec![pool("v2", Some(12.5), None), pool("v1", None, Some(80.0))],
            reclaim: "4-7".to_string(),
            reclaim_min: 1,
            period: 3,
        });
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
