//! Owns the migration at start of a checkpoint that no longer fits the configuration (`migrateOnStart`).
//!
//! A checkpoint that no longer fits the configuration (reserved CPUs,
//! policy, options, CPUs gone offline) is migrated at start with the plan
//! `pinion state migrate` prints (`pinion_core::migrate`): workloads that
//! still fit keep their CPUs, only the conflicting ones go to the shared
//! pool, each one logged with before and after. Config key
//! `migrateOnStart` (default true); with it off the start is refused with
//! the command to run.

use pinion_core::checkpoint::Checkpoint;
use pinion_core::hotplug::follow_online;
use pinion_core::migrate::migrate;
use pinion_core::policy::Policy;
use pinion_core::state::State;

use super::rebuild::StartReport;

/// Config `migrateOnStart`: what the start does with a checkpoint that does
/// not fit the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrateOnStart {
    /// `false`: refuse to start, as kubelet does.
    Never,
    /// The key absent: migrate when every running workload keeps its
    /// exclusive CPUs; refuse, naming them, when one would lose them.
    IfNothingMoves,
    /// `true`: migrate; workloads that no longer fit go to the shared pool.
    Always,
}

impl MigrateOnStart {
    /// The mode of the config key's value (`None`: absent).
    #[must_use]
    pub fn from_key(value: Option<bool>) -> Self {
        match value {
            None => Self::IfNothingMoves,
            Some(true) => Self::Always,
            Some(false) => Self::Never,
        }
    }
}

/// The state a checkpoint's entries hold, without the policy's checks.
pub(super) fn checkpoint_state(
    checkpoint: &Checkpoint,
) -> Result<State, pinion_core::checkpoint::CheckpointError> {
    let parsed = checkpoint.migrate_v1(|_| None).and_then(|c| c.to_state())?;
    Ok(State {
        default: parsed.default_cpu_set,
        assignments: parsed.assignments,
    })
}

/// `state` with the exclusive CPUs that went offline while the agent was
/// down followed as CPU hot-plug at run time follows them
/// (`pinion_core::hotplug`): the kernel has already taken them from the
/// workloads' cpusets, so each workload keeps its other CPUs and gets a
/// replacement where one is free, instead of losing them all to the
/// migration. Unchanged when every CPU it holds is online.
fn follow_offline_cpus(state: &State, policy: &Policy, report: &mut StartReport) -> State {
    let Some(online) = policy.topology().map(|t| t.all_cpus().clone()) else {
        return state.clone();
    };
    let offline = state.exclusive_cpus().difference(&online);
    if offline.is_empty() {
        return state.clone();
    }
    // Pod-level sets live in the side data, restored after the migration:
    // a set the migrated state no longer fits is dropped then
    // (`resize::start_with_side`).
    let followed = follow_online(
        state,
        &pinion_core::state::PodCpus::new(),
        &online.union(&offline),
        policy,
    );
    let line = format!("cpus {offline} went offline while the agent was down");
    tracing::warn!("{line}");
    report.lines.push(line);
    for outcome in followed.rebuilt.outcomes.iter().filter(|o| !o.unmoved()) {
        let line = super::hotplug::describe_outcome(outcome);
        tracing::warn!("{line}");
        report.lines.push(line);
    }
    followed.rebuilt.state
}

/// Why the start does not migrate.
pub(super) enum NotMigrated {
    /// The checkpoint's entries cannot be read, or the migrated state is
    /// refused: the caller starts degraded.
    Unmigratable(String),
    /// Running workloads would lose their exclusive CPUs and
    /// `migrateOnStart` is not `true`: the caller refuses to start.
    WouldMove(Vec<String>),
}

/// The migrated state and the one the checkpoint held, or why there is no
/// migration ([`NotMigrated`]).
pub(super) fn migrate_at_start(
    checkpoint: &Checkpoint,
    policy: &Policy,
    (path, why): (&str, &str),
    mode: MigrateOnStart,
    report: &mut StartReport,
) -> Result<(State, State), NotMigrated> {
    let old = checkpoint_state(checkpoint)
        .map_err(|err| NotMigrated::Unmigratable(format!("its entries cannot be read: {err}")))?;
    let followed = follow_offline_cpus(&old, policy, report);
    let (new, outcomes) = migrate(&followed, policy);
    let mut started = new.clone();
    policy.start(&mut started).map_err(|err| {
        NotMigrated::Unmigratable(format!(
            "the migrated state is refused by the policy: {err}"
        ))
    })?;
    let dropped = outcomes.iter().filter(|o| o.dropped.is_some()).count();
    if dropped > 0 && mode != MigrateOnStart::Always {
        return Err(NotMigrated::WouldMove(
            outcomes
                .iter()
                .filter_map(|o| {
                    let reason = o.dropped.as_ref()?;
                    Some(format!(
                        "{}/{} on cpus {}: {reason}",
                        o.pod, o.container, o.cpus
                    ))
                })
                .collect(),
        ));
    }
    let line = format!(
        "checkpoint {path} migrated to the configuration ({why}): {} kept, {dropped} moved to the shared pool",
        outcomes.len() - dropped
    );
    tracing::warn!("{line}");
    report.lines.push(line);
    report.migrated_dropped = Some(dropped as u64);
    for outcome in &outcomes {
        match &outcome.dropped {
            None => {
                tracing::info!(pod = %outcome.pod, container = %outcome.container, cpus = %outcome.cpus, "migrated: keeps its cpus");
            }
            Some(reason) => {
                let line = format!(
                    "moved: {}/{} from cpus {} to the shared pool {}: {reason}",
                    outcome.pod, outcome.container, outcome.cpus, new.default
                );
                tracing::warn!("{line}");
                report.lines.push(line);
            }
        }
    }
    Ok((new, old))
}
