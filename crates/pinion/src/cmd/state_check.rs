//! `pinion state verify` and `pinion state migrate`: check a checkpoint
//! against this machine and a policy configuration the way kubelet would at
//! start, and — where kubelet would refuse to start — turn it into a valid
//! state for the new configuration, keeping every assignment that is still
//! valid and saying which ones cannot be kept. A `cpu_manager_state` with
//! Pinion's journal beside it is read with the journal's records replayed
//! (the state the agent starts from), and says so.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pinion_core::checkpoint::{self, Checkpoint};
use pinion_core::migrate::{migrate, Outcome};
use pinion_core::policy::{defaults, FeatureGates, Policy};
use pinion_core::restore::{restore, to_checkpoint};
use pinion_core::state::State;
use pinion_core::{CpuSet, Topology};
use pinion_host::durable;
use pinion_host::journal::{inspect_paths, JOURNAL};
use pinion_host::store::CPU_MANAGER_STATE;

use super::agent_config::AgentConfig;
use super::state_side;
use crate::render;

/// The machine and the policy configuration to check against: the agent's
/// config file (or the agent's defaults), then the flags on top.
#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    /// The agent's config file: its policy, reserved CPUs, options, state
    /// directory and sysroot apply (without it: the agent's defaults —
    /// static policy, one CPU reserved, /var/lib/pinion). Flags override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Root holding `sys/devices/system/{cpu,node}` (default: the config's
    /// `sysroot`, else `/`).
    #[arg(long, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,
    /// CPU manager policy (`static` or `none`).
    #[arg(long, alias = "to-policy")]
    pub policy: Option<String>,
    /// Explicit reserved CPUs (kubelet `reservedSystemCPUs`), e.g. `0,48`.
    #[arg(long, value_name = "LIST")]
    pub reserved_cpus: Option<String>,
    /// Number of reserved CPUs (ceil of kube-reserved + system-reserved cpu).
    #[arg(long, value_name = "N")]
    pub num_reserved: Option<usize>,
    /// A static policy option, e.g. `--option full-pcpus-only=true` (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE")]
    pub options: Vec<String>,
    /// Allow alpha-level policy options (kubelet `CPUManagerPolicyAlphaOptions`).
    #[arg(long)]
    pub alpha_options: bool,
    /// Topology Manager policy (for option validation).
    #[arg(long, value_name = "POLICY")]
    pub topology_manager_policy: Option<String>,
}

impl PolicyArgs {
    /// The agent's configuration with the flags applied.
    pub fn agent(&self) -> anyhow::Result<AgentConfig> {
        let mut agent = AgentConfig::load(self.config.as_deref())?;
        if let Some(sysroot) = &self.sysroot {
            agent.sysroot.clone_from(sysroot);
        }
        let config = &mut agent.policy;
        if let Some(policy) = &self.policy {
            config.policy = Some(policy.clone());
        }
        for option in &self.options {
            let (name, value) = option
                .split_once('=')
                .with_context(|| format!("--option {option:?} must be NAME=VALUE"))?;
            config.options.insert(name.to_string(), value.to_string());
        }
        if let Some(text) = &self.reserved_cpus {
            let cpus =
                CpuSet::parse_list(text).with_context(|| format!("--reserved-cpus {text:?}"))?;
            config.num_reserved = Some(cpus.len());
            config.reserved = Some(cpus);
        }
        if let Some(n) = self.num_reserved {
            config.num_reserved = Some(n);
            if self.reserved_cpus.is_none() {
                config.reserved = None;
            }
        }
        if self.alpha_options {
            let gates = config
                .feature_gates
                .get_or_insert_with(FeatureGates::default);
            gates.alpha = true;
        }
        if let Some(tmp) = &self.topology_manager_policy {
            config.topology_manager_policy = Some(tmp.clone());
        }
        let is_static = config.policy.as_deref().unwrap_or("static") == "static";
        if is_static {
            // `--num-reserved N` hands the CPU manager a reservation
            // directly, as kubelet's container manager hands `NewManager`
            // its entry: zero is kubelet's "greater than zero" refusal, no
            // entry its "unable to determine" one.
            let entry = config
                .num_reserved
                .map(|n| u128::try_from(n).unwrap_or(u128::MAX) * 1000);
            defaults::num_reserved_cpus(entry).map_err(|err| {
                anyhow::anyhow!("{err} (give --num-reserved N, --reserved-cpus LIST, or the agent's --config FILE)")
            })?;
        }
        Ok(agent)
    }

    /// The checkpoint to work on: `file`, else the agent's.
    pub fn checkpoint(&self, file: Option<&Path>) -> anyhow::Result<PathBuf> {
        match file {
            Some(file) => Ok(file.to_path_buf()),
            None => Ok(self.agent()?.checkpoint()),
        }
    }

    pub fn build(&self) -> anyhow::Result<(Topology, Policy)> {
        let agent = self.agent()?;
        let topology = pinion_host::discover(&agent.sysroot).with_context(|| {
            format!(
                "cannot discover the cpu topology under {}",
                agent.sysroot.display()
            )
        })?;
        let policy = agent
            .policy
            .build(&topology)
            .context("cannot build the policy")?;
        Ok((topology, policy))
    }
}

/// Arguments of `pinion state verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The checkpoint file, e.g. /var/lib/kubelet/cpu_manager_state
    /// (default: the agent's, in its state directory).
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Arguments of `pinion state migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The checkpoint file to migrate in place (a copy of the old one is
    /// kept; default: the agent's, in its state directory).
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Show what would happen; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `pinion state verify`: checksum, policy name, CPU sets, kubelet's
/// validateState and Pinion's invariants, each reported; non-zero exit on
/// the first failure.
pub fn verify(args: &VerifyArgs) -> anyhow::Result<()> {
    let file = args.policy.checkpoint(args.file.as_deref())?;
    let checkpoint = read(&file)?;
    checkpoint
        .verify()
        .with_context(|| format!("{}: checksum; {}", file.display(), repair_hint(&file)))?;
    println!("checksum: valid ({})", checkpoint.stored_checksum());
    let (topology, policy) = args.policy.build()?;
    println!(
        "machine: {} online cpus ({})",
        topology.num_cpus(),
        topology.all_cpus()
    );
    let state = match restore(&checkpoint, &policy) {
        Ok(state) => state,
        // `migrate` needs the entries: without them, advise the rebuild.
        Err(err) if checkpoint_state(&checkpoint).is_err() => anyhow::bail!(
            "{}: kubelet would refuse to start with this state, and `pinion state migrate` \
             cannot convert it (its entries cannot be read): {err}; {}",
            file.display(),
            pinion_host::store::rebuild_advice(&file)
        ),
        Err(err) => {
            return Err(err).with_context(|| {
                format!(
                    "{}: kubelet would refuse to start with this state \
                     (see `pinion state migrate` to recover without draining)",
                    file.display()
                )
            })
        }
    };
    println!("policy: {} (matches)", policy.name());
    if let Policy::Static(static_policy) = &policy {
        state
            .check_invariants(static_policy.expected(topology.all_cpus()))
            .context("state invariant")?;
        println!("reserved: {}", static_policy.reserved());
    }
    println!(
        "state: valid; shared pool {} ({} cpus), {} exclusive assignments",
        state.default,
        state.default.len(),
        state.assignment_count()
    );
    verify_side(&file, &state)
}

/// The journal's side data against the verified state (issue 27, item 10e).
fn verify_side(file: &Path, state: &State) -> anyhow::Result<()> {
    let Some(side) = state_side::read(file) else {
        return Ok(());
    };
    let summary = state_side::summary(&side);
    if summary.is_empty() {
        println!("side data: none");
    } else {
        println!("side data: {}", summary.join(", "));
    }
    let found = state_side::check(&side, state);
    for warning in &found.warnings {
        println!("  warning: {warning}");
    }
    for problem in &found.problems {
        println!("  PROBLEM: {problem}");
    }
    if !found.problems.is_empty() {
        anyhow::bail!(
            "{}: the journal's side data disagrees with the state ({} problems): {}",
            file.display(),
            found.problems.len(),
            found.problems.join("; ")
        );
    }
    Ok(())
}

/// `pinion state migrate`: see the module documentation.
pub fn migrate_file(args: &MigrateArgs) -> anyhow::Result<()> {
    let file = args.policy.checkpoint(args.file.as_deref())?;
    // Read and written under the agent's lock: a running agent would
    // overwrite the migrated file with its next compaction.
    let _lock = if args.dry_run {
        None
    } else {
        let (dir, _) = split_path(&file)?;
        Some(super::state_rebuild::lock_offline(
            dir,
            "it migrates by itself at start (`migrateOnStart`) — stop it first to migrate offline",
        )?)
    };
    let checkpoint = read(&file)?;
    checkpoint.verify().with_context(|| {
        format!(
            "{}: refusing to migrate a corrupted checkpoint; {}",
            file.display(),
            repair_hint(&file)
        )
    })?;
    let old = checkpoint_state(&checkpoint).map_err(|err| {
        anyhow::anyhow!(
            "{}: cannot read the assignments, so it cannot be migrated: {err}; {}",
            file.display(),
            pinion_host::store::rebuild_advice(&file)
        )
    })?;
    let (topology, policy) = args.policy.build()?;
    let (new, outcomes) = migrate(&old, &policy);
    // The migrated state must be one the policy starts from as it is.
    let mut started = new.clone();
    policy
        .start(&mut started)
        .context("migrated state failed validation (a bug: please report)")?;
    print_report(&checkpoint, &policy, &outcomes, &new);
    let side = state_side::read(&file);
    if let Policy::Static(static_policy) = &policy {
        print!(
            "{}",
            render::cpumap::render(&topology, &new, static_policy.reserved())
        );
    }
    if let Some(dropped) = state_side::dropped(side.as_ref()) {
        println!("{dropped}");
    }
    if args.dry_run {
        println!("dry run: nothing written");
        return Ok(());
    }
    let (dir, name) = split_path(&file)?;
    let kept = durable::keep_copy(dir, name, "pre-migrate")
        .with_context(|| format!("cannot keep a copy of {}", file.display()))?;
    let bytes = to_checkpoint(&new, &policy).to_bytes()?;
    durable::write_atomic(dir, name, &bytes)
        .with_context(|| format!("cannot write {}", file.display()))?;
    println!(
        "wrote {} (the old file is kept as {})",
        file.display(),
        kept.display()
    );
    // The journal extends the old file: it goes aside with it, as `rebuild
    // --write` does. Left in place, a migrated file byte-identical to the
    // journal's base (the journal's records were all dropped) had them
    // replayed again at the next start (found from outside, session 45).
    if dir.join(JOURNAL).exists() && name == CPU_MANAGER_STATE {
        let journal = durable::move_aside_as(dir, JOURNAL, "pre-migrate")
            .with_context(|| format!("cannot move the journal in {} aside", dir.display()))?;
        println!(
            "its journal, replayed into the migration, is kept as {}",
            journal.display()
        );
    }
    Ok(())
}

fn print_report(checkpoint: &Checkpoint, policy: &Policy, outcomes: &[Outcome], new: &State) {
    println!(
        "from policy {:?} to {:?}",
        checkpoint.policy_name(),
        policy.name()
    );
    for outcome in outcomes {
        let who = format!("{}/{}", outcome.pod, outcome.container);
        match &outcome.dropped {
            None => println!("  kept     {who:<40} {}", outcome.cpus),
            Some(reason) => println!("  DROPPED  {who:<40} {} ({reason})", outcome.cpus),
        }
    }
    let dropped = outcomes.iter().filter(|o| o.dropped.is_some()).count();
    println!(
        "{} kept, {dropped} dropped (dropped containers run in the shared pool from now on); shared pool {}",
        outcomes.len() - dropped,
        if new.default.is_empty() { "(empty)".to_string() } else { new.default.to_string() }
    );
}

fn read(path: &Path) -> anyhow::Result<Checkpoint> {
    let bytes = pinion_host::journal::read_state_file(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let checkpoint = checkpoint::decode(&bytes).with_context(|| {
        format!(
            "cannot decode checkpoint {}; {}",
            path.display(),
            repair_hint(path)
        )
    })?;
    with_journal(path, checkpoint)
}

/// What to do about a checkpoint that cannot be read.
pub fn repair_hint(path: &Path) -> String {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    format!(
        "to repair it from the running workloads, run `pinion state rebuild --state-dir {} --config <the agent's config file>` (a dry run; add --write to apply) — the agent does the same by itself at its next start, keeping this file beside the new one",
        dir.display()
    )
}

/// The state a checkpoint's entries hold, without the policy's checks:
/// what `migrate` starts from (an error when a CPU set does not parse, or
/// for a v1 file with entries).
fn checkpoint_state(checkpoint: &Checkpoint) -> Result<State, checkpoint::CheckpointError> {
    let parsed = checkpoint.migrate_v1(|_| None)?.to_state()?;
    Ok(State {
        default: parsed.default_cpu_set,
        assignments: parsed.assignments,
    })
}

/// A valid `cpu_manager_state` with the records of Pinion's journal beside
/// it replayed — the state the agent starts from — with a note saying so;
/// the checkpoint as read otherwise (no journal, nothing to replay, a
/// corrupt file: its own checks report it).
fn with_journal(path: &Path, checkpoint: Checkpoint) -> anyhow::Result<Checkpoint> {
    let Some(dir) = path.parent() else {
        return Ok(checkpoint);
    };
    let journal_path = dir.join(JOURNAL);
    let kubelets_file = path.file_name() == Some(OsStr::new(CPU_MANAGER_STATE));
    if !kubelets_file || checkpoint.verify().is_err() {
        return Ok(checkpoint);
    }
    // An agent start that found the journal incomplete cut it and failed
    // before it recorded the state rebuilt from the node: the journal reads
    // cleanly now, but the agent rebuilds again at its next start.
    if let Some(why) = pinion_host::journal::rebuild_due(dir)? {
        anyhow::bail!(
            "{}: an earlier agent start found that {why}, and stopped before it recorded the state it rebuilt from the node; the agent rebuilds again at its start, so this state is not the one it would start from; {}",
            dir.join(pinion_host::journal::INCOMPLETE_MARK).display(),
            pinion_host::store::rebuild_advice(path)
        );
    }
    if !journal_path.exists() {
        return Ok(checkpoint);
    }
    let inspection = inspect_paths(path, &journal_path)?;
    // What the agent does at start: a journal that cannot be replayed to
    // its end is set aside and the state rebuilt from the node; so the
    // checkpoint with its readable part is no state the agent starts from.
    // (Before the forty-fifth session it was verified and migrated as one.)
    if let Some(why) = inspection.not_replayable() {
        anyhow::bail!(
            "journal {} {why}: the agent sets it aside and rebuilds the state from the node at its start, so this state is not the one it would start from; {}",
            journal_path.display(),
            pinion_host::store::rebuild_advice(path)
        );
    }
    let Some(Ok(view)) = inspection.journal else {
        return Ok(checkpoint);
    };
    let replayed = view
        .replay
        .records
        .iter()
        .filter(|r| r.touches_state())
        .count();
    if replayed == 0 {
        return Ok(checkpoint);
    }
    let effective = view
        .effective
        .with_context(|| format!("{}: cannot replay the journal on it", path.display()))?
        .unwrap_or(checkpoint);
    println!(
        "journal: {replayed} records of {} replayed on the checkpoint (the state the agent starts from)",
        journal_path.display()
    );
    Ok(effective)
}

fn split_path(path: &Path) -> anyhow::Result<(&Path, &str)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no usable file name", path.display()))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((dir, name))
}
