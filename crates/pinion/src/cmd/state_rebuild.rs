//! `pinion state rebuild`: what the agent does at start when its checkpoint
//! is missing or unreadable, offline — read each live cgroup of Pinion's
//! (`cpuset.cpus`) and its run record, resolve conflicts by the rule of
//! `pinion_core::rebuild`, print what every workload keeps and, with
//! `--write`, write the rebuilt checkpoint (the old file is kept beside it,
//! never overwritten). A dry run by default.

use std::path::PathBuf;

use anyhow::Context as _;
use pinion_api::local::RUN_CONTAINER;
use pinion_core::policy::Policy;
use pinion_core::rebuild::{rebuild, Rebuilt};
use pinion_core::restore::to_checkpoint;
use pinion_host::cgroup::Cgroups;
use pinion_host::durable;
use pinion_host::journal::{set_aside_unreadable, JOURNAL};
use pinion_host::lock::{lock_exclusive, Lock, LockError, STATE_LOCK_FILE};
use pinion_host::runs::{self, RunRecords};
use pinion_host::store::CPU_MANAGER_STATE;

use super::state_check::PolicyArgs;
use super::state_side;
use crate::render;

/// Arguments of `pinion state rebuild`.
#[derive(Debug, clap::Args)]
pub struct RebuildArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The agent's state directory (default: the config's `stateDir`, else
    /// the agent's default).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Pinion's cgroup root (default: the config's `cgroupRoot`, else
    /// `<cpuset mount>/pinion`).
    #[arg(long, value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,
    /// Write the rebuilt checkpoint (without it: a dry run).
    #[arg(long)]
    pub write: bool,
}

/// Runs `pinion state rebuild`.
pub fn run(args: &RebuildArgs) -> anyhow::Result<()> {
    let agent = args.policy.agent()?;
    let state_dir = args.state_dir.clone().unwrap_or(agent.state_dir.clone());
    let cgroup_root = args.cgroup_root.clone().or(agent.cgroup_root.clone());
    let (topology, policy) = args.policy.build()?;
    let mountinfo = agent.sysroot.join("proc/self/mountinfo");
    let cgroups = Cgroups::detect(&mountinfo, &agent.sysroot, cgroup_root.as_deref())
        .context("cannot find Pinion's cgroups")?;
    let records = RunRecords::new(&state_dir);
    let (claims, warnings) = runs::claims(&cgroups, &records, RUN_CONTAINER)
        .with_context(|| format!("cannot read the cgroups under {}", cgroups.root().display()))?;
    for warning in &warnings {
        println!("warning: {warning}");
    }
    let rebuilt = rebuild(&claims, &policy);
    print_report(&rebuilt, cgroups.root());
    // The journal goes aside with the checkpoint it was replayed on.
    if let Some(dropped) =
        state_side::dropped(state_side::read(&state_dir.join(CPU_MANAGER_STATE)).as_ref())
    {
        println!("{dropped}");
    }
    if let Policy::Static(static_policy) = &policy {
        print!(
            "{}",
            render::cpumap::render(&topology, &rebuilt.state, static_policy.reserved())
        );
    }
    if !args.write {
        println!("dry run: nothing written (add --write to write it)");
        return Ok(());
    }
    write(&state_dir, &rebuilt, &policy)
}

fn print_report(rebuilt: &Rebuilt, root: &std::path::Path) {
    println!(
        "running workloads under {}: {}",
        root.display(),
        rebuilt.outcomes.len()
    );
    for outcome in &rebuilt.outcomes {
        let who = format!("{}/{}", outcome.pod, outcome.container);
        let now = if outcome.cpus.is_empty() {
            "shared pool".to_string()
        } else {
            outcome.cpus.to_string()
        };
        if outcome.unmoved() {
            let kind = if outcome.exclusive { "kept" } else { "shared" };
            println!("  {kind:<8} {who:<40} {}", outcome.observed);
            continue;
        }
        println!("  CHANGED  {who:<40} {} -> {now}", outcome.observed);
        for conflict in &outcome.conflicts {
            println!("           conflict: {conflict}");
        }
    }
    let changed = rebuilt.outcomes.iter().filter(|o| !o.unmoved()).count();
    println!(
        "{} unchanged, {changed} changed by conflicts; shared pool {}",
        rebuilt.outcomes.len() - changed,
        rebuilt.state.default
    );
}

/// The agent's lock on `state_dir`, for a command that writes its state
/// offline; refused while the agent runs on it (`advice`: what to do).
pub(super) fn lock_offline(state_dir: &std::path::Path, advice: &str) -> anyhow::Result<Lock> {
    lock_exclusive(
        &state_dir.join(STATE_LOCK_FILE),
        true,
        std::path::Path::new("/proc"),
    )
    .map_err(|err| match err {
        LockError::Held { .. } => anyhow::anyhow!(
            "the agent is running on {} ({err}); {advice}",
            state_dir.display()
        ),
        other => anyhow::Error::new(other),
    })
}

/// Writes the rebuilt checkpoint, keeping what was there: an unreadable
/// checkpoint (and its journal) under `unreadable-<time>-N`, a readable
/// one (and its journal) under `pre-rebuild-N`. Refused while the agent
/// runs on the directory.
fn write(state_dir: &std::path::Path, rebuilt: &Rebuilt, policy: &Policy) -> anyhow::Result<()> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("cannot create {}", state_dir.display()))?;
    let _lock = lock_offline(
        state_dir,
        "it rebuilds by itself at start — stop it first to rebuild offline",
    )?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .to_string();
    if let Some(aside) = set_aside_unreadable(state_dir, &stamp)? {
        println!(
            "the unreadable checkpoint ({}) is kept as {}",
            aside.reason,
            aside.checkpoint.display()
        );
    } else if state_dir.join(CPU_MANAGER_STATE).exists() {
        let kept = durable::move_aside_as(state_dir, CPU_MANAGER_STATE, "pre-rebuild")?;
        println!("the old checkpoint is kept as {}", kept.display());
    }
    // A journal without its checkpoint too: it extends nothing written now.
    if state_dir.join(JOURNAL).exists() {
        let kept = durable::move_aside_as(state_dir, JOURNAL, "pre-rebuild")?;
        println!("the journal is kept as {}", kept.display());
    }
    let bytes = to_checkpoint(&rebuilt.state, policy).to_bytes()?;
    durable::write_atomic(state_dir, CPU_MANAGER_STATE, &bytes)
        .with_context(|| format!("cannot write the checkpoint in {}", state_dir.display()))?;
    println!("wrote {}", state_dir.join(CPU_MANAGER_STATE).display());
    note_runtime_rebuild(state_dir, policy)?;
    Ok(())
}

/// The container runtime's containers are in no cgroup of Pinion's, so
/// the offline rebuild cannot see them: a fresh journal beside the new
/// checkpoint says that the agent's start, with NRI on, still has to
/// rebuild them from the runtime's first `Synchronize` (side data
/// `runtime-rebuild`). Before the forty-fifth session the agent found a
/// valid checkpoint without them and took their CPUs for free.
fn note_runtime_rebuild(state_dir: &std::path::Path, policy: &Policy) -> anyhow::Result<()> {
    use pinion_core::record::{kinds, Record, SideValue};
    let mut opened = pinion_host::journal::StateStore::open(state_dir, policy.name())
        .with_context(|| format!("cannot open the state in {}", state_dir.display()))?;
    let why = "the state was rebuilt offline by `pinion state rebuild --write`, which sees only Pinion's own runs";
    opened.store.record(&Record::Side {
        kind: kinds::RUNTIME_REBUILD.to_string(),
        key: kinds::RUNTIME_REBUILD_PENDING.to_string(),
        value: Some(SideValue::encode(why).context("encoding the note")?),
    })?;
    opened
        .store
        .flush()
        .with_context(|| format!("cannot write the journal in {}", state_dir.display()))?;
    // The state rebuilt from the node is durable: an agent start that
    // found the journal incomplete and failed after it is answered.
    opened.store.rebuild_recorded().with_context(|| {
        format!(
            "cannot remove the journal's mark in {}",
            state_dir.display()
        )
    })?;
    println!(
        "the container runtime's containers are rebuilt by the agent at the runtime's first Synchronize (noted in {})",
        state_dir.join(JOURNAL).display()
    );
    Ok(())
}
