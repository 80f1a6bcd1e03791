//! `pinion topology`: discover the CPU topology from a sysfs root and print
//! it as text (for people) or JSON (the model, as `TopologySpec`).

use std::path::PathBuf;

use anyhow::Context as _;

use crate::render;

/// Output format of `pinion topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Arguments of `pinion topology`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Root directory holding `sys/devices/system/{cpu,node}` (a captured
    /// sysfs tree, or `/` for this machine).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub sysroot: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Runs `pinion topology`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let topology = pinion_host::discover(&args.sysroot).with_context(|| {
        format!(
            "cannot discover the cpu topology under {}",
            args.sysroot.display()
        )
    })?;
    let text = match args.format {
        Format::Text => render::topology::render(&topology),
        Format::Json => {
            let mut json = serde_json::to_string_pretty(&topology)?;
            json.push('\n');
            json
        }
    };
    print!("{text}");
    Ok(())
}
