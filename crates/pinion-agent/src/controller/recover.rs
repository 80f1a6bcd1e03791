//! Starting the controller: restore the checkpoint with kubelet's checks,
//! find the cgroups a previous run left, keep every live assignment and
//! release the standalone runs whose processes died meanwhile.
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

use pinion_core::engine::Engine;
use pinion_core::placement::all_memory_nodes;
use pinion_core::policy::Policy;
use pinion_core::restore::restore;
use pinion_core::state::State;
use pinion_core::topomgr::TopologyManager;
use pinion_core::{CpuSet, Topology};
use pinion_host::cgroup::CpusetHost;
use pinion_host::fileops::FileOps;
use pinion_host::journal::{set_aside_unreadable, JournalError, JournalOptions, StateStore};
use pinion_host::runs::RunRecords;
use pinion_host::store::CPU_MANAGER_STATE;
use tokio::sync::{mpsc, watch};

use super::rebuild::{self, StartReport};
use super::{
    ControlError, Controller, Frontend, Key, RuntimeUpdate, Snapshot, Workload, RUN_CONTAINER,
};
use crate::metrics::Counters;

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
}

impl Controller {
    /// Restores the checkpoint (refusing what kubelet would refuse), sets
    /// up Pinion's cgroup root, recovers the cgroups of live runs, releases
    /// dead ones, saves and re-applies every placement.
    pub fn start(parts: StartParts) -> Result<Controller, ControlError> {
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
        let opened = match parts.file_ops {
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
            other => ControlError::Journal(other),
        })?;
        for warning in opened.recovery.warnings() {
            tracing::warn!("{warning}");
        }
        let (store, checkpoint, side) = (opened.store, opened.checkpoint, opened.side);
        let runs = RunRecords::new(&parts.state_dir);
        let mut report = StartReport::default();
        let state = match checkpoint {
            Some(checkpoint) => {
                restore(&checkpoint, &parts.policy).map_err(|source| ControlError::Restore {
                    path: store.checkpoint_path().display().to_string(),
                    source: Box::new(source),
                })?
            }
            None => {
                let claims = rebuild::claims(parts.host.as_ref(), &runs).map_err(|source| {
                    ControlError::Cgroup {
                        pod: "(pinion root)".to_string(),
                        source,
                    }
                })?;
                if claims.is_empty() && set_aside.is_none() {
                    State::default()
                } else {
                    let why = rebuild::reason(
                        set_aside.as_ref(),
                        &store.checkpoint_path().display().to_string(),
                    );
                    rebuild::rebuild_logged(&claims, &parts.policy, &why, &mut report).state
                }
            }
        };
        let mut engine = Engine::new(&parts.topology, parts.policy, state)
            .with_topology_manager(parts.topology_manager);
        engine
            .start()
            .map_err(|err| ControlError::Start(Box::new(err)))?;
        let (shared_tx, _) = watch::channel(CpuSet::new());
        let (snapshot_tx, _) = watch::channel(Arc::new(Snapshot::default()));
        let mut counters = Counters::default();
        if report.rebuilt {
            counters.state_rebuilds_total += 1;
            counters.state_rebuild_conflicts_total += report.conflicts;
        }
        let rebuilt = report.rebuilt;
        let mut controller = Controller {
            engine,
            store,
            side,
            compacted: Instant::now(),
            host: parts.host,
            runs,
            start_report: report,
            workloads: BTreeMap::new(),
            counters,
            runtime_updates: parts.runtime_updates,
            shared_tx,
            snapshot_tx,
        };
        let all = controller.engine.machine().all_cpus().clone();
        let mems = all_memory_nodes(controller.engine.machine());
        controller
            .host
            .ensure_root(&all, &mems)
            .map_err(|source| ControlError::Cgroup {
                pod: "(pinion root)".to_string(),
                source,
            })?;
        controller.recover(rebuilt)?;
        Ok(controller)
    }

    /// `rebuilt`: the state was rebuilt from the node, so every assignment
    /// is journaled anew (nothing of it is on disk yet).
    fn recover(&mut self, rebuilt: bool) -> Result<(), ControlError> {
        let names = self.host.list().map_err(|source| ControlError::Cgroup {
            pod: "(pinion root)".to_string(),
            source,
        })?;
        let mut next = self.engine.clone();
        for cgroup in names {
            let key: Key = (cgroup.to_string(), RUN_CONTAINER.to_string());
            let pids = self.host.pids(&cgroup).unwrap_or_default();
            if let Some(&pid) = pids.first() {
                tracing::info!(pod = %key.0, pid, "recovered a running workload");
                let frontend = Frontend::Standalone {
                    cgroup,
                    pid: Some(pid),
                };
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
                    Workload::new(Frontend::Runtime { container_id: None }, None, desired),
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
        let side_before = self.side.clone();
        self.restore_allocations();
        let base = if rebuilt {
            State::default()
        } else {
            before.state().clone()
        };
        self.record(&base, Some(&side_before))?;
        self.store.flush()?;
        // A fresh checkpoint of what was recovered, and a fresh journal.
        self.maybe_compact(true);
        self.converge();
        Ok(())
    }
}
