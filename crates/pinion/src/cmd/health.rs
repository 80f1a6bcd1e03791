//! `pinion health`: asks the agent's local API socket whether it is healthy
//! (`/healthz`) or ready (`/readyz`, with `--ready`); exits 0 when it
//! answers `ok`, 1 with the reason otherwise. The DaemonSet's probes run it
//! inside the agent's container (`docs/deployment.md`).

use std::path::PathBuf;
use std::time::Duration;

use pinion_api::Client;

use super::local::socket_or_default;

/// Arguments of `pinion health`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Ask `/readyz` instead of `/healthz`.
    #[arg(long)]
    ready: bool,
    /// Unix socket of the agent's local API (default: /run/pinion/pinion.sock
    /// for root, under ~/.local/state/pinion otherwise).
    #[arg(long, env = "PINION_SOCKET")]
    socket: Option<PathBuf>,
    /// Give up after this many seconds (a probe's own timeout is shorter
    /// than the client's default minute).
    #[arg(long, default_value_t = 2)]
    timeout: u64,
}

/// Probes the agent; an error (exit status 1) when it does not answer `ok`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let socket = socket_or_default(args.socket.as_ref());
    let client = Client::new(&socket).with_timeout(Duration::from_secs(args.timeout.max(1)));
    if args.ready {
        client.ready()?;
    } else {
        client.health()?;
    }
    println!("ok");
    Ok(())
}
