//! Owns the controller's start: the checkpoint restored (or rebuilt, or migrated) and the workloads found again.
//!
//! Starting the controller: restore the checkpoint with kubelet's checks
//! (or rebuild the state from the node, or migrate it to the configuration:
//! `docs/state-recovery.md`), find the cgroups a previous run left, keep
//! every live assignment and release the standalone runs whose processes
//! died meanwhile.
//!
//! Which front-end an assignment belongs to is read from the node, not from
//! its name: a standalone run's cgroup exists under Pinion's root from
//! before its checkpoint entry is written until after its release is saved
//! (see [`Controller::admit`]), so an assignment with such a cgroup is a
//! standalone run and one without is a runtime container, kept until the
//! runtime's next `Synchronize` says whether it still runs. Without a
//! runtime front-end (NRI off) nothing can own an assignment without a
//! cgroup (a standalone run whose cgroup is gone, e.g. after a reboot): it
//! is released, with a warning naming it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use pinion_core::checkpoint::Checkpoint;
use pinion_core::engine::Engine;
use pinion_core::placement::all_memory_nodes;
use pinion_core::policy::Policy;
use pinion_core::rebuild::Claim;
use pinion_core::record::SideData;
use pinion_core::restore::{restore, RestoreError};
use pinion_core::state::{PodCpus, State};
use pinion_core::topomgr::TopologyManager;
use pinion_core::{CpuSet, Topology};
use pinion_host::cgroup::CpusetHost;
use pinion_host::durable;
use pinion_host::fileops::FileOps;
use pinion_host::journal::{
    set_aside_unreadable, JournalError, JournalOptions, SetAside, StateStore,
};
use pinion_host::runs::RunRecords;
use pinion_host::store::CPU_MANAGER_STATE;
use tokio::sync::{mpsc, watch};

use super::counters::Counters;
use super::migrate_start::{checkpoint_state, migrate_at_start, MigrateOnStart, NotMigrated};
use super::rebuild::{self, StartReport};
use super::{
    ControlError, Controller, Frontend, Key, RuntimeUpdate, Snapshot, Workload, RUN_CONTAINER,
};

/// What the controller is built from.
pub struct StartParts {
    pub policy: Policy,
    /// kubelet's Topology Manager (`TopologyManager::none()` for policy `none`).
    pub topology_manager: TopologyManager,
    pub topology: Topology,
    /// The directory of `cpu_manager_state`.
    pub state_dir: PathBuf,
    pub host: Box<dyn CpusetHost>,
    /// Where runtime updates go (the NRI front-end); `None` without one.
    pub runtime_updates: Option<mpsc::UnboundedSender<Vec<RuntimeUpdate>>>,
    /// The state directory's file operations (`None`: the real file
    /// system; tests inject faults).
    pub file_ops: Option<Box<dyn FileOps>>,
    /// What to do with a checkpoint that does not fit the configuration
    /// (config `migrateOnStart`).
    pub migrate_on_start: MigrateOnStart,
    /// What exclusive runs' cgroups become (`exclusiveCpus.partition`).
    pub partition: pinion_core::partition::PartitionMode,
    /// Housekeeping cgroups, other writers, the system partition.
    pub isolation: super::Isolation,
}

impl Controller {
    /// Restores the checkpoint — set aside and rebuilt from the node when it
    /// is unreadable or missing, migrated when it does not fit the
    /// configuration (see [`initial_state`]) —, sets up Pinion's cgroup
    /// root, recovers the cgroups of live runs, releases dead ones, saves
    /// and re-applies every placement.
    pub fn start(mut parts: StartParts) -> Result<Controller, ControlError> {
        let policy_name = parts.policy.name();
        let set_aside =
            set_aside_unreadable(&parts.state_dir, &rebuild::stamp()).map_err(|source| {
                ControlError::Unreadable {
                    path: parts
                        .state_dir
                        .join(CPU_MANAGER_STATE)
                        .display()
                        .to_string(),
                    source: Box::new(source),
                }
            })?;
        let opened = match parts.file_ops.take() {
            Some(ops) => StateStore::open_with(
                &parts.state_dir,
                policy_name,
                ops,
                JournalOptions::default(),
            ),
            None => StateStore::open(&parts.state_dir, policy_name),
        }
        .map_err(|source| match source {
            JournalError::CorruptCheckpoint { ref path, .. } => ControlError::Unreadable {
                path: path.display().to_string(),
                source: Box::new(source),
            },
            other => ControlError::OpenState {
                dir: parts.state_dir.display().to_string(),
                source: Box::new(other),
            },
        })?;
        let mut report = StartReport::default();
        for warning in opened.recovery.warnings() {
            tracing::warn!("{warning}");
            report.lines.push(warning);
        }
        let journal_incomplete = opened.recovery.incomplete();
        let (store, checkpoint, side) = (opened.store, opened.checkpoint, opened.side);
        let runs = RunRecords::new(&parts.state_dir);
        let (state, base) = initial_state(
            &parts,
            &store,
            checkpoint,
            Found {
                set_aside: set_aside.as_ref(),
                journal_incomplete: journal_incomplete.as_deref(),
                side: &side,
            },
            &runs,
            &mut report,
        )?;
        if parts.runtime_updates.is_some() && report.runtime_rebuild.is_none() {
            if let Some(why) = rebuild::pending_runtime_rebuild(&side) {
                let line = format!("the rebuild from the container runtime's first Synchronize is still to come (an earlier start found: {why})");
                tracing::warn!("{line}");
                report.lines.push(line);
                report.runtime_rebuild = Some(why);
            }
        }
        let engine = Engine::new(&parts.topology, parts.policy, state)
            .with_topology_manager(parts.topology_manager);
        let engine = super::resize::start_with_side(engine, &side)
            .map_err(|err| ControlError::Start(Box::new(err)))?;
        let (shared_tx, _) = watch::channel(CpuSet::new());
        let (snapshot_tx, _) = watch::channel(Arc::new(Snapshot::default()));
        let mut counters = Counters::default();
        if report.rebuilt {
            counters.state_rebuilds_total += 1;
            counters.state_rebuild_conflicts_total += report.conflicts;
        }
        if let Some(dropped) = report.migrated_dropped {
            counters.state_migrations_total += 1;
            counters.state_migration_dropped_total += dropped;
        }
        let mut controller = Controller {
            engine,
            store,
            plugin_data: super::plugin_data::PluginData::new(side),
            compacted: Instant::now(),
            host: parts.host,
            runs,
            start_report: report,
            hotplug_lines: Vec::new(),
            workloads: BTreeMap::new(),
            counters,
            runtime_updates: parts.runtime_updates,
            passes: 0,
            admissions: 0,
            shared_tx,
            snapshot_tx,
            partitions: super::partition::Partitions::new(parts.partition),
            housekeeping: super::housekeeping::Housekeeping::new(
                &parts.isolation.housekeeping,
                parts.isolation.pinion_root.clone(),
            ),
            foreign: super::foreign::Foreign::new(parts.isolation.other_writers),
            system_partition: parts.isolation.system_partition.clone(),
            partition_memory: super::system_partition::LimitState::default(),
        };
        let all = controller.engine.machine().all_cpus().clone();
        let mems = all_memory_nodes(controller.engine.machine());
        controller
            .write_root(&all, &mems)
            .map_err(|source| ControlError::Cgroup {
                pod: "(pinion root)".to_string(),
                source,
            })?;
        controller.recover(base)?;
        Ok(controller)
    }

    /// `base`: what is on disk when the start did not take the state from it
    /// as it is (rebuilt from the node: nothing; migrated: the old
    /// checkpoint), so that the journal records every difference.
    fn recover(&mut self, base: Option<State>) -> Result<(), ControlError> {
        let names = self.host.list().map_err(|source| ControlError::Cgroup {
            pod: "(pinion root)".to_string(),
            source,
        })?;
        let mut next = self.engine.clone();
        for cgroup in names {
            let key: Key = (cgroup.to_string(), RUN_CONTAINER.to_string());
            // Processes that cannot be listed may be running: the run keeps
            // its CPUs (the reconcile pass releases it once its list reads
            // empty).
            let (running, pid) = match self.host.pids(&cgroup) {
                Ok(pids) => (!pids.is_empty(), pids.first().copied()),
                Err(err) => {
                    tracing::warn!(pod = %key.0, "kept as running: its processes cannot be listed: {err}");
                    (true, None)
                }
            };
            if running {
                tracing::info!(pod = %key.0, ?pid, "recovered a running workload");
                let frontend = Frontend::Standalone { cgroup, pid };
                let desired = next.placement(&key.0, &key.1);
                self.workloads
                    .insert(key.clone(), Workload::new(frontend, None, desired));
                continue;
            }
            next.remove(&key.0, &key.1);
            self.counters.released_gone_total += 1;
            tracing::info!(pod = %key.0, "released: its processes ended while the agent was down");
            if let Err(err) = self.remove_cgroup(&cgroup) {
                tracing::warn!("removing cgroup {cgroup}: {err}");
            }
        }
        let unclaimed: Vec<Key> = next
            .state()
            .assignments
            .iter()
            .flat_map(|(pod, cs)| cs.keys().map(move |c| (pod.clone(), c.clone())))
            .filter(|key| !self.workloads.contains_key(key))
            .collect();
        if self.runtime_updates.is_some() {
            if !unclaimed.is_empty() {
                tracing::info!(
                    containers = unclaimed.len(),
                    "assignments without a cgroup of Pinion's belong to the container runtime: kept until it synchronizes"
                );
            }
            for key in unclaimed {
                let desired = next.placement(&key.0, &key.1);
                self.workloads.insert(
                    key,
                    Workload::new(Frontend::runtime_unknown(), None, desired),
                );
            }
        } else {
            // No runtime front-end: nothing can own them (standalone runs
            // whose cgroups are gone, e.g. after a reboot).
            for (pod, container) in unclaimed {
                tracing::warn!(%pod, %container, "released: no cgroup of Pinion's and no container runtime front-end (NRI is off)");
                next.remove(&pod, &container);
            }
        }
        let before = std::mem::replace(&mut self.engine, next);
        let side_before = SideData::clone(self.plugin_data.side());
        self.restore_allocations();
        // Durable with the start's batch: an agent that stops before the
        // runtime's first Synchronize rebuilds from it at its next start.
        self.note_runtime_rebuild();
        let base = base.unwrap_or_else(|| before.state().clone());
        self.record(&base, Some(&side_before))?;
        self.store.flush()?;
        // The state rebuilt from the node (when the journal was found
        // incomplete) is durable now; until here every start rebuilds again.
        if let Err(err) = self.store.rebuild_recorded() {
            tracing::warn!("the next start rebuilds from the node again: {err}");
        }
        // The live runs' records follow the durable state (a migration may
        // have moved a run to the shared pool).
        self.sync_run_records();
        // A fresh checkpoint of what was recovered, and a fresh journal.
        self.maybe_compact(true);
        self.adopt_partitions();
        self.converge();
        Ok(())
    }
}

/// What opening the state directory found wrong.
#[derive(Clone, Copy)]
struct Found<'a> {
    /// The checkpoint was unreadable and set aside.
    set_aside: Option<&'a SetAside>,
    /// The journal could not be replayed to its end (why).
    journal_incomplete: Option<&'a str>,
    /// The side data replayed (plugin allocations own some workloads' CPUs).
    side: &'a SideData,
}

/// The state to start from and, when it is not the one on disk, what is on
/// disk (see [`Controller::recover`]): the checkpoint restored as kubelet
/// does; migrated to the configuration when it does not fit it
/// (`migrateOnStart`); rebuilt from the node when it is missing or
/// unreadable, when its journal could not be replayed to its end (the
/// state on disk may lack acknowledged decisions; the node has them), or
/// when it cannot be migrated (then new exclusive admissions are refused:
/// degraded).
fn initial_state(
    parts: &StartParts,
    store: &StateStore,
    checkpoint: Option<Checkpoint>,
    found: Found<'_>,
    runs: &RunRecords,
    report: &mut StartReport,
) -> Result<(State, Option<State>), ControlError> {
    let path = store.checkpoint_path().display().to_string();
    let set_aside = found.set_aside;
    if let (Some(reason), Some(checkpoint)) = (found.journal_incomplete, &checkpoint) {
        // The same rule as a lost checkpoint; the base is what is on disk
        // (the checkpoint and the journal's readable prefix), so that the
        // journal records every difference.
        // A configuration the readable part does not fit is judged as with
        // a complete journal (`migrateOnStart`): before the forty-fifth
        // session the rebuild took any configuration, refused by kubelet or
        // moving running workloads.
        let misfit = restore(checkpoint, &parts.policy).err();
        if let Some(source) = &misfit {
            if parts.migrate_on_start == MigrateOnStart::Never {
                return Err(refused(path, source.clone()));
            }
        }
        let why = format!("{reason}: the node is the truth");
        if parts.runtime_updates.is_some() {
            report.runtime_rebuild = Some(why.clone());
        }
        let claims = node_claims(parts, runs)?;
        let rebuilt =
            rebuild::rebuild_logged((&claims, &PodCpus::new()), &parts.policy, &why, report);
        if let Some(source) = misfit {
            let moved: Vec<String> = rebuilt
                .outcomes
                .iter()
                .filter(|o| o.exclusive && !o.unmoved())
                .map(super::hotplug::describe_outcome)
                .collect();
            if parts.migrate_on_start == MigrateOnStart::IfNothingMoves && !moved.is_empty() {
                return Err(ControlError::MigrationWouldMove {
                    path,
                    source: Box::new(source),
                    moved: moved.join("; "),
                });
            }
        }
        return Ok((rebuilt.state, Some(state_of(checkpoint))));
    }
    let (why, claims) = match checkpoint {
        Some(checkpoint) => {
            let source = match restore(&checkpoint, &parts.policy) {
                Ok(state) => {
                    let (claims, warnings) =
                        pinion_host::runs::claims(parts.host.as_ref(), runs, RUN_CONTAINER)
                            .map_err(|source| ControlError::Cgroup {
                                pod: "(pinion root)".to_string(),
                                source,
                            })?;
                    let Some(lost) = lost_decisions(parts, &claims, &state, found.side) else {
                        return Ok((state, None));
                    };
                    for warning in warnings {
                        tracing::warn!("rebuilding: {warning}");
                    }
                    // The journal read back cleanly but lacks what the node
                    // shows (its last batches zeroed or cut at a frame
                    // boundary): the node is the truth, as above.
                    let why = format!(
                        "checkpoint {path} and its journal lack acknowledged exclusive cpus the node shows ({lost}): the node is the truth"
                    );
                    if parts.runtime_updates.is_some() {
                        report.runtime_rebuild = Some(why.clone());
                    }
                    let rebuilt = rebuild::rebuild_logged(
                        (&claims, &PodCpus::new()),
                        &parts.policy,
                        &why,
                        report,
                    );
                    return Ok((rebuilt.state, Some(state)));
                }
                Err(source) => source,
            };
            if parts.migrate_on_start == MigrateOnStart::Never {
                return Err(refused(path, source));
            }
            match migrate_at_start(
                &checkpoint,
                &parts.policy,
                (&path, &source.to_string()),
                parts.migrate_on_start,
                report,
            ) {
                Ok((new, old)) => {
                    match keep_effective(&parts.state_dir, &checkpoint, "pre-migrate") {
                        Ok(kept) => report.lines.push(format!(
                            "the checkpoint before the migration is kept as {}",
                            kept.display()
                        )),
                        Err(err) => {
                            tracing::warn!("keeping the checkpoint before the migration: {err}");
                        }
                    }
                    return Ok((new, Some(old)));
                }
                Err(NotMigrated::WouldMove(moved)) => {
                    return Err(ControlError::MigrationWouldMove {
                        path,
                        source: Box::new(source),
                        moved: moved.join("; "),
                    });
                }
                Err(NotMigrated::Unmigratable(reason)) => {
                    let why = format!("checkpoint {path} does not fit the configuration ({source}) and cannot be migrated: {reason}");
                    let claims = node_claims(parts, runs)?;
                    let kept = keep_effective(&parts.state_dir, &checkpoint, "unmigratable")
                        .map_or_else(
                            |err| format!("it could not be kept: {err}"),
                            |p| format!("it is kept as {}", p.display()),
                        );
                    // The runtime's containers are in no cgroup of Pinion's:
                    // its first `Synchronize` rebuilds them from what runs,
                    // as after a lost checkpoint.
                    if parts.runtime_updates.is_some() {
                        report.runtime_rebuild = Some(why.clone());
                    }
                    report.degraded = Some(format!(
                        "{why} ({kept}); the state is rebuilt from the running workloads, which stay where they run; new exclusive admissions are refused until the agent restarts on the rebuilt checkpoint (check it first with `pinion state verify --config <the agent's config file>`; `pinion state rebuild --write` redoes the rebuild offline)"
                    ));
                    (why, claims)
                }
            }
        }
        None => {
            if parts.runtime_updates.is_some() {
                report.runtime_rebuild = Some(rebuild::reason(set_aside, &path));
            }
            let claims = node_claims(parts, runs)?;
            if claims.is_empty() && set_aside.is_none() {
                return Ok((State::default(), None));
            }
            (rebuild::reason(set_aside, &path), claims)
        }
    };
    let rebuilt = rebuild::rebuild_logged((&claims, &PodCpus::new()), &parts.policy, &why, report);
    if let Some(degraded) = &report.degraded {
        tracing::error!("{degraded}");
        report.lines.push(format!("degraded: {degraded}"));
    }
    Ok((rebuilt.state, Some(State::default())))
}

/// The running standalone workloads whose exclusive CPUs `state` lacks
/// (`None`: none), named: a live cgroup whose run record asks for
/// exclusive CPUs and whose `cpuset.cpus` is not the shared pool, with no
/// assignment in the state and no plugin owning its CPUs. Admission writes
/// the run record and the cgroup's CPUs only after the decision is durable,
/// so such a cgroup means an acknowledged decision the state lost — a
/// journal whose last batches were zeroed or cut at a frame boundary reads
/// back cleanly. Only the static policy has exclusive CPUs.
fn lost_decisions(
    parts: &StartParts,
    claims: &[Claim],
    state: &State,
    side: &SideData,
) -> Option<String> {
    if !matches!(parts.policy, Policy::Static(_)) {
        return None;
    }
    let owned_by_plugins = super::plugin_data::allocation_keys(side);
    // Shared runs hold the default set without the CPUs isolated at boot.
    let shared_pool = state.default.difference(parts.topology.isolated());
    let lost: Vec<String> = claims
        .iter()
        .filter(|c| c.exclusive > 0 && c.cpus != state.default && c.cpus != shared_pool)
        .filter(|c| state.assignment(&c.pod, &c.container).is_none())
        .filter(|c| {
            !owned_by_plugins
                .iter()
                .any(|(pod, container)| *pod == c.pod && *container == c.container)
        })
        .map(|c| format!("{}/{} on cpus {}", c.pod, c.container, c.cpus))
        .collect();
    (!lost.is_empty()).then(|| lost.join(", "))
}

/// The state a checkpoint holds, read without the policy's checks (empty
/// when its entries cannot be read: then every assignment is recorded anew).
/// The start refused as kubelet refuses a checkpoint that does not fit
/// (`migrateOnStart: false`), with what recovers it.
fn refused(path: String, source: RestoreError) -> ControlError {
    let advice = restore_advice(&path, &source);
    ControlError::Restore {
        path,
        source: Box::new(source),
        advice,
    }
}

/// Keeps the state on disk before this start changes it, as
/// `cpu_manager_state.<label>-N`: the checkpoint with its journal replayed
/// (what was migrated). The checkpoint file alone lacks every record since
/// the last compaction (before the forty-fifth session the copy was that
/// file). A checkpoint that cannot be encoded again (v1 entries) is kept as
/// the file it is.
fn keep_effective(
    dir: &std::path::Path,
    checkpoint: &Checkpoint,
    label: &str,
) -> Result<std::path::PathBuf, durable::DurableError> {
    match checkpoint.to_bytes() {
        Ok(bytes) => durable::keep_bytes(dir, CPU_MANAGER_STATE, label, &bytes),
        Err(_) => durable::keep_copy(dir, CPU_MANAGER_STATE, label),
    }
}

fn state_of(checkpoint: &Checkpoint) -> State {
    checkpoint_state(checkpoint).unwrap_or_else(|err| {
        tracing::warn!("reading the checkpoint's entries: {err}");
        State::default()
    })
}

fn node_claims(parts: &StartParts, runs: &RunRecords) -> Result<Vec<Claim>, ControlError> {
    rebuild::claims(parts.host.as_ref(), runs).map_err(|source| ControlError::Cgroup {
        pod: "(pinion root)".to_string(),
        source,
    })
}

/// What recovers a checkpoint the agent refuses to restore with
/// `migrateOnStart: false`: `pinion state migrate` converts one whose CPU
/// sets parse; one whose CPU sets (or v1 entries) cannot be read is rebuilt
/// from the running workloads instead, which `migrate` cannot do.
fn restore_advice(path: &str, source: &RestoreError) -> String {
    match source {
        RestoreError::Checkpoint(_) => format!(
            "`pinion state migrate` cannot convert it; {}",
            pinion_host::store::rebuild_advice(std::path::Path::new(path))
        ),
        RestoreError::PolicyMismatch { .. } | RestoreError::Invalid(_) => format!(
            "run `pinion state migrate {path} --config <the agent's config file>` to convert it (workloads that still fit keep their cpus), or set `migrateOnStart: true`"
        ),
    }
}
