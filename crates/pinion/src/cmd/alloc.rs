//! `pinion alloc` (being built).

/// Arguments of `pinion alloc`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `pinion alloc`.
pub fn run(_args: &Args) -> anyhow::Result<()> {
    anyhow::bail!("`pinion alloc` is not built yet")
}
