//! `pinion topology` (being built).

/// Arguments of `pinion topology`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `pinion topology`.
pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("`pinion topology` is not built yet")
}
