//! `pinion ps`: which process holds which CPUs, from the agent's snapshot.

use std::fmt::Write as _;
use std::path::PathBuf;

use pinion_agent::client::Client;
use pinion_agent::controller::Snapshot;
use pinion_agent::DefaultPaths;

/// Arguments of `pinion ps`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Unix socket of the agent's local API.
    #[arg(long)]
    socket: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Json,
}

/// Prints the agent's workloads.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(|| DefaultPaths::current().socket);
    let snapshot = Client::new(&socket).ps()?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&snapshot)?),
        Format::Table => print!("{}", table(&snapshot)),
    }
    Ok(())
}

fn table(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "policy: {}  cpus: {}  reserved: {}  shared pool: {}",
        snapshot.policy,
        snapshot.all_cpus,
        if snapshot.reserved.is_empty() {
            "-".to_string()
        } else {
            snapshot.reserved.to_string()
        },
        snapshot.shared_pool
    );
    let rows: Vec<[String; 6]> = snapshot
        .workloads
        .iter()
        .map(|w| {
            [
                w.pod.clone(),
                w.container.clone(),
                if w.exclusive { "exclusive" } else { "shared" }.to_string(),
                w.cpus.to_string(),
                w.mems.to_string(),
                w.pid.map_or_else(|| "-".to_string(), |p| p.to_string()),
            ]
        })
        .collect();
    let header = ["POD", "CONTAINER", "KIND", "CPUS", "MEMS", "PID"].map(str::to_string);
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
    out
}
