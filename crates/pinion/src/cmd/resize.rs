//! `pinion resize ID --cpus N`: resizes a running workload's CPU request in
//! place (the agent's switch `InPlacePodVerticalScalingExclusiveCPUs`, issue
//! #15). `ID` is the pod column of `pinion ps` (a `pinion run`'s id); growing
//! keeps every CPU the run has and adds aligned ones, shrinking releases
//! CPUs without moving the rest, never below the CPUs it was first given.
//! The agent rewrites the run's cgroup before it answers.

use pinion_api::local::{ResizeRequest, RUN_CONTAINER};

use super::local::Local;

/// Arguments of `pinion resize`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The workload: its pod id as `pinion ps` shows it (a run's id).
    id: String,
    /// The new CPU request (a whole number for exclusive CPUs).
    #[arg(long)]
    cpus: String,
    /// The container of the pod (a `pinion run` has one, `main`).
    #[arg(long, default_value = RUN_CONTAINER)]
    container: String,
    #[command(flatten)]
    local: Local,
}

/// Runs `pinion resize`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let request = ResizeRequest {
        pod: args.id.clone(),
        container: Some(args.container.clone()),
        cpus: args.cpus.clone(),
    };
    let done = args.local.client().resize(&request)?;
    args.local.print(&done, |done, _| {
        // Memory nodes only where a plugin set them.
        let mems = if done.mems.is_empty() {
            String::new()
        } else {
            format!(" (mems {})", done.mems)
        };
        format!(
            "{} {}: {} cpus {}{mems}\n",
            done.pod,
            done.container,
            if done.pool.is_empty() {
                "shared"
            } else {
                &done.pool
            },
            done.cpus,
        )
    })
}
