//! `pinion topology`: discover the CPU topology from a sysfs root and print
//! it as text (for people) or JSON (the model, as `TopologySpec`).

use std::path::PathBuf;

use anyhow::Context as _;

use crate::output::{self, OutputArgs};
use crate::render;

/// Arguments of `pinion topology`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Root directory holding `sys/devices/system/{cpu,node}` (a captured
    /// sysfs tree, or `/` for this machine).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub sysroot: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `pinion topology`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let topology = pinion_host::discover(&args.sysroot).with_context(|| {
        format!(
            "cannot discover the cpu topology under {}",
            args.sysroot.display()
        )
    })?;
    let isolated = pinion_host::cgroup::partition::root_isolated(&args.sysroot);
    let text = output::render(args.output.output(), &topology, |topology, _| {
        let mut text = render::topology::render(topology);
        // CPUs of isolated cpuset partitions and boot isolcpus (Linux 6.8).
        if let Some(isolated) = &isolated {
            let list = if isolated.is_empty() {
                "-".to_string()
            } else {
                isolated.to_string()
            };
            text.push_str(&format!(
                "isolated cpus (cgroup root's cpuset.cpus.isolated): {list}\n"
            ));
        }
        text
    })?;
    print!("{text}");
    Ok(())
}
