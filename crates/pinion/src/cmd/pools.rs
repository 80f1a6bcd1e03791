//! `pinion pools`: the built-in CPU plugin's shared pools (members, CPUs,
//! size and bounds, pin, last measured pressure, last change and why), and
//! `pinion pools set NAME=SIZE|MIN-MAX|auto` — an operator's or advisor's
//! handle on a pool's size.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use pinion_api::local::Pools;
use pinion_api::Client;

use super::local::{socket_or_default, Format};

/// Arguments of `pinion pools`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Option<PoolsCommand>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    format: Format,
    /// Unix socket of the agent's local API.
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
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
    let socket = socket_or_default(args.socket.as_ref());
    let client = Client::new(&socket);
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
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&pools)?),
        Format::Table => print!("{}", table(&pools)),
    }
    Ok(())
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
