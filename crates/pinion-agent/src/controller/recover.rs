//! Starting the controller: restore the checkpoint with kubelet's checks,
//! find the cgroups a previous run left, keep every live assignment and
//! release the standalone runs whose processes died meanwhile.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use pinion_core::engine::Engine;
use pinion_core::policy::Policy;
use pinion_core::restore::restore;
use pinion_core::state::State;
use pinion_core::topomgr::TopologyManager;
use pinion_core::{CpuSet, Topology};
use pinion_host::cgroup::CpusetHost;
use pinion_host::store::{CheckpointStore, CPU_MANAGER_STATE};
use tokio::sync::watch;

use super::{ControlError, Controller, Key, Snapshot, Workload, RUN_CONTAINER, RUN_PREFIX};
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
}

impl Controller {
    /// Restores the checkpoint (refusing what kubelet would refuse), sets
    /// up Pinion's cgroup root, recovers the cgroups of live runs, releases
    /// dead ones, saves and re-applies every cpuset.
    pub fn start(parts: StartParts) -> Result<Controller, ControlError> {
        let (store, checkpoint) = CheckpointStore::open(&parts.state_dir, CPU_MANAGER_STATE)?;
        let state = match checkpoint {
            Some(checkpoint) => {
                restore(&checkpoint, &parts.policy).map_err(|source| ControlError::Restore {
                    path: store.path().display().to_string(),
                    source: Box::new(source),
                })?
            }
            None => State::default(),
        };
        let mut engine =
            Engine::new(parts.policy, state).with_topology_manager(parts.topology_manager);
        engine
            .start()
            .map_err(|err| ControlError::Start(Box::new(err)))?;
        let (shared_tx, _) = watch::channel(CpuSet::new());
        let (snapshot_tx, _) = watch::channel(Arc::new(Snapshot::default()));
        let mut controller = Controller {
            engine,
            store,
            host: parts.host,
            topology: parts.topology,
            workloads: BTreeMap::new(),
            counters: Counters::default(),
            shared_tx,
            snapshot_tx,
        };
        let all = controller.topology.all_cpus().clone();
        let mems = controller.all_mems();
        controller
            .host
            .ensure_root(&all, &mems)
            .map_err(|source| ControlError::Cgroup {
                pod: "(pinion root)".to_string(),
                source,
            })?;
        controller.recover()?;
        Ok(controller)
    }

    fn recover(&mut self) -> Result<(), ControlError> {
        let names = self.host.list().map_err(|source| ControlError::Cgroup {
            pod: "(pinion root)".to_string(),
            source,
        })?;
        let mut next = self.engine.clone();
        for name in names {
            let key: Key = (name.to_string(), RUN_CONTAINER.to_string());
            let pids = self.host.pids(&name).unwrap_or_default();
            if let Some(&pid) = pids.first() {
                tracing::info!(pod = %key.0, pid, "recovered a running workload");
                let cgroup = Some(name);
                self.workloads.insert(
                    key,
                    Workload {
                        cgroup,
                        pid: Some(pid),
                    },
                );
                continue;
            }
            next.remove(&key.0, &key.1);
            self.counters.released_gone_total += 1;
            tracing::info!(pod = %key.0, "released: its processes ended while the agent was down");
            if let Err(err) = self.host.remove(&name) {
                tracing::warn!("removing cgroup {name}: {err}");
            }
        }
        let orphans: Vec<Key> = next
            .state()
            .assignments
            .iter()
            .filter(|(pod, _)| pod.starts_with(RUN_PREFIX))
            .flat_map(|(pod, cs)| cs.keys().map(move |c| (pod.clone(), c.clone())))
            .filter(|key| !self.workloads.contains_key(key))
            .collect();
        for (pod, container) in orphans {
            tracing::info!(%pod, "released: its cgroup is gone");
            next.remove(&pod, &container);
        }
        let state = next.state().clone();
        self.save(&state)?;
        self.engine = next;
        self.reapply();
        self.shared_tx.send_replace(self.shared_pool());
        self.publish();
        Ok(())
    }

    /// Writes every managed cgroup's intended cpuset.
    fn reapply(&mut self) {
        let managed = self.managed_cgroups();
        for (key, name) in managed {
            let cpus = self.cpus_of(&key);
            let mems = self.mems_of(&cpus);
            if let Err(err) = self.host.set(&name, &cpus, &mems) {
                tracing::error!(cgroup = %name, "re-applying cpuset {cpus}: {err}");
            }
        }
    }
}
