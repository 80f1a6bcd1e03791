//! The controller: the single owner of the engine, the checkpoint store and
//! the cgroups Pinion manages. Front-ends (local API, NRI) and timers talk
//! to it only through [`Command`]s (see [`task`]); reads come from the
//! [`Snapshot`] it publishes after every change.
//!
//! Every decision is computed on a copy of the engine, saved durably in the
//! checkpoint, and only then committed and answered: a caller never hears
//! of a decision that a crash could lose. A failed request leaves the state
//! untouched.

mod reconcile;
mod recover;
mod runtime;
mod snapshot;
pub mod task;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use pinion_core::engine::Engine;
use pinion_core::pod::Pod;
use pinion_core::policy::{Policy, PolicyError};
use pinion_core::restore::{checkpoint_entries, RestoreError};
use pinion_core::state::State;
use pinion_core::{CpuSet, Topology};
use pinion_host::cgroup::{CgroupError, CgroupName, CpusetHost};
use pinion_host::store::{CheckpointStore, StoreError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::metrics::Counters;

pub use recover::StartParts;
pub use snapshot::{Snapshot, WorkloadView};
pub use task::{spawn, Command, ControllerHandle};

/// Pod UIDs of standalone runs start with this; their cgroup is their record.
pub const RUN_PREFIX: &str = "pinion-run-";
/// The container name of a standalone run.
pub const RUN_CONTAINER: &str = "main";

/// Errors of controller requests and of the start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    InvalidName(CgroupError),
    #[error("pod {pod} container {container}: {source}")]
    Admission {
        pod: String,
        container: String,
        source: Box<PolicyError>,
    },
    #[error("no admitted container matches pod {pod} container {}", .container.as_deref().unwrap_or("(any)"))]
    NotFound {
        pod: String,
        container: Option<String>,
    },
    #[error("saving the checkpoint failed, nothing changed: {0}")]
    Checkpoint(#[from] StoreError),
    #[error("checkpoint {path} cannot be restored with this configuration: {source}; run `pinion state migrate {path} …` to convert it (or move it aside to start empty)")]
    Restore {
        path: String,
        source: Box<RestoreError>,
    },
    #[error("the policy refused the restored state: {0}")]
    Start(Box<PolicyError>),
    #[error("cgroup of pod {pod}: {source}")]
    Cgroup { pod: String, source: CgroupError },
    #[error("the controller has stopped")]
    Stopped,
}

/// Where an admitted container's CPUs are enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// By the runtime (NRI): the caller applies the returned cpuset.
    Runtime,
    /// By Pinion: a cgroup named after the pod UID under Pinion's root,
    /// with `pid` moved into it.
    Cgroup { pid: Option<u32> },
}

/// A request to admit one container of a pod.
#[derive(Debug, Clone)]
pub struct AdmitRequest {
    pub pod: Pod,
    pub container: String,
    pub numa_affinity: Option<Vec<u32>>,
    pub placement: Placement,
}

/// The answer to an admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admitted {
    pub pod: String,
    pub container: String,
    /// The CPUs the container may use (its exclusive CPUs or the shared pool).
    pub cpus: CpuSet,
    pub exclusive: bool,
    /// The memory nodes (NUMA nodes of `cpus`).
    pub mems: CpuSet,
    /// The cgroup directory name under Pinion's root, for cgroup placement.
    pub cgroup: Option<String>,
}

/// The answer to a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The containers released.
    pub containers: Vec<String>,
    /// The CPUs that went back to the shared pool.
    pub cpus: CpuSet,
}

/// What one reconcile pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// Containers released because their processes were gone.
    pub released: Vec<String>,
    /// Cgroups whose cpuset was found changed and rewritten.
    pub repaired: Vec<String>,
}

/// A container: (pod UID, container name).
pub type Key = (String, String);

/// A container the controller knows about beyond the engine's state.
#[derive(Debug, Clone)]
struct Workload {
    cgroup: Option<CgroupName>,
    /// The process placed at admission (or found at restart).
    pid: Option<u32>,
}

/// The single owner; see the module documentation.
pub struct Controller {
    engine: Engine,
    store: CheckpointStore,
    host: Box<dyn CpusetHost>,
    topology: Topology,
    workloads: BTreeMap<Key, Workload>,
    counters: Counters,
    shared_tx: watch::Sender<CpuSet>,
    snapshot_tx: watch::Sender<Arc<Snapshot>>,
}

impl Controller {
    /// Admits a container: decide, save, place, then answer.
    pub fn admit(&mut self, request: &AdmitRequest) -> Result<Admitted, ControlError> {
        let key = (request.pod.uid.clone(), request.container.clone());
        if self.workloads.contains_key(&key) {
            return Ok(self.admitted(&key));
        }
        let cgroup = match request.placement {
            Placement::Cgroup { .. } => {
                Some(CgroupName::new(&request.pod.uid).map_err(ControlError::InvalidName)?)
            }
            Placement::Runtime => None,
        };
        let mut next = self.engine.clone();
        let started = std::time::Instant::now();
        let result = next.admit_container(
            &request.pod,
            &request.container,
            request.numa_affinity.as_deref(),
        );
        if request.numa_affinity.is_none() {
            next.record_admission_duration(started.elapsed());
        }
        self.counters.count_alignment(next.policy(), &result);
        let exclusive = match result {
            Ok(exclusive) => exclusive,
            Err(source) => {
                self.engine = next; // unchanged state, updated counters
                self.publish();
                return Err(ControlError::Admission {
                    pod: key.0,
                    container: key.1,
                    source: Box::new(source),
                });
            }
        };
        self.save_if_changed(next.state())?;
        let previous = std::mem::replace(&mut self.engine, next);
        if let (Some(name), Placement::Cgroup { pid }) = (&cgroup, &request.placement) {
            if let Err(source) = self.place(name, &key, *pid) {
                self.undo_admission(previous, name);
                return Err(ControlError::Cgroup { pod: key.0, source });
            }
        }
        let pid = match request.placement {
            Placement::Cgroup { pid } => pid,
            Placement::Runtime => None,
        };
        self.workloads.insert(key.clone(), Workload { cgroup, pid });
        tracing::info!(pod = %key.0, container = %key.1, cpus = ?exclusive.as_ref().map(ToString::to_string), "admitted");
        if exclusive.is_some() {
            self.shared_pool_changed();
        }
        self.publish();
        Ok(self.admitted(&key))
    }

    /// Every workload that has a cgroup of Pinion's, with that cgroup.
    fn managed_cgroups(&self) -> Vec<(Key, CgroupName)> {
        self.workloads
            .iter()
            .filter_map(|(key, w)| Some((key.clone(), w.cgroup.clone()?)))
            .collect()
    }

    /// Releases one container (`Some(name)`) or every container of a pod.
    pub fn release(
        &mut self,
        pod: &str,
        container: Option<&str>,
    ) -> Result<Released, ControlError> {
        let keys = self.keys_of(pod, container);
        if keys.is_empty() {
            return Err(ControlError::NotFound {
                pod: pod.to_string(),
                container: container.map(str::to_string),
            });
        }
        let mut next = self.engine.clone();
        let mut freed = CpuSet::new();
        for (pod, container) in &keys {
            freed.union_with(&next.remove(pod, container));
        }
        self.save_if_changed(next.state())?;
        self.engine = next;
        for key in &keys {
            if let Some(Workload {
                cgroup: Some(name),
                pid,
            }) = self.workloads.remove(key)
            {
                self.retire_cgroup(key, name, pid);
            }
            tracing::info!(pod = %key.0, container = %key.1, "released");
        }
        if !freed.is_empty() {
            self.shared_pool_changed();
        }
        self.publish();
        Ok(Released {
            containers: keys.into_iter().map(|(_, c)| c).collect(),
            cpus: freed,
        })
    }

    /// A receiver of the shared pool, for front-ends that push updates.
    #[must_use]
    pub fn subscribe_shared_pool(&self) -> watch::Receiver<CpuSet> {
        self.shared_tx.subscribe()
    }

    /// A receiver of snapshots.
    #[must_use]
    pub fn subscribe_snapshots(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshot_tx.subscribe()
    }

    /// The engine's state (tests, snapshots).
    #[must_use]
    pub fn state(&self) -> &State {
        self.engine.state()
    }

    fn keys_of(&self, pod: &str, container: Option<&str>) -> Vec<Key> {
        let matches = |c: &str| container.is_none_or(|want| want == c);
        let mut keys: Vec<Key> = self
            .workloads
            .keys()
            .filter(|(p, c)| p == pod && matches(c))
            .cloned()
            .collect();
        if let Some(containers) = self.engine.state().assignments.get(pod) {
            for name in containers.keys().filter(|c| matches(c)) {
                let key = (pod.to_string(), name.clone());
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }

    fn place(&mut self, name: &CgroupName, key: &Key, pid: Option<u32>) -> Result<(), CgroupError> {
        let cpus = self.cpus_of(key);
        let mems = self.mems_of(&cpus);
        self.host.create(name, &cpus, &mems)?;
        if let Some(pid) = pid {
            self.host.add_pid(name, pid)?;
        }
        Ok(())
    }

    fn undo_admission(&mut self, previous: Engine, name: &CgroupName) {
        if let Err(err) = self.save_if_changed(previous.state()) {
            tracing::error!("restoring the checkpoint after a failed placement: {err}");
        }
        self.engine = previous;
        if let Err(err) = self.host.remove(name) {
            tracing::warn!("removing cgroup {name} after a failed placement: {err}");
        }
        self.publish();
    }

    /// A released container's cgroup goes away when empty; with processes
    /// left it stays as a shared-pool member until reconcile finds it empty.
    fn retire_cgroup(&mut self, key: &Key, name: CgroupName, pid: Option<u32>) {
        match self.host.pids(&name) {
            Ok(pids) if pids.is_empty() => {
                if let Err(err) = self.host.remove(&name) {
                    tracing::warn!("cgroup {name} not removed yet: {err}");
                }
            }
            Ok(_) => {
                tracing::warn!(pod = %key.0, "released with processes left: kept in the shared pool");
                let cgroup = Some(name);
                self.workloads.insert(key.clone(), Workload { cgroup, pid });
            }
            Err(err) => tracing::warn!("reading processes of cgroup {name}: {err}"),
        }
    }

    fn shared_pool(&self) -> CpuSet {
        let default = &self.engine.state().default;
        if default.is_empty() || matches!(self.engine.policy(), Policy::None) {
            self.topology.all_cpus().clone()
        } else {
            default.clone()
        }
    }

    fn cpus_of(&self, (pod, container): &Key) -> CpuSet {
        self.engine
            .state()
            .assignment(pod, container)
            .cloned()
            .unwrap_or_else(|| self.shared_pool())
    }

    fn mems_of(&self, cpus: &CpuSet) -> CpuSet {
        let nodes: CpuSet = self.topology.numa_nodes_of(cpus).into_iter().collect();
        if nodes.is_empty() {
            self.all_mems()
        } else {
            nodes
        }
    }

    fn all_mems(&self) -> CpuSet {
        let nodes: CpuSet = self.topology.numa_nodes().iter().map(|n| n.id).collect();
        if nodes.is_empty() {
            CpuSet::from_iter([0])
        } else {
            nodes
        }
    }

    /// Rewrites every shared-pool cgroup and tells subscribers.
    fn shared_pool_changed(&mut self) {
        let pool = self.shared_pool();
        let mems = self.mems_of(&pool);
        let shared: Vec<CgroupName> = self
            .workloads
            .iter()
            .filter(|((pod, c), _)| self.engine.state().assignment(pod, c).is_none())
            .filter_map(|(_, w)| w.cgroup.clone())
            .collect();
        for name in shared {
            if let Err(err) = self.host.set(&name, &pool, &mems) {
                tracing::error!(cgroup = %name, "updating the shared pool to {pool}: {err}");
            }
        }
        self.shared_tx.send_replace(pool);
    }

    fn admitted(&self, key: &Key) -> Admitted {
        let exclusive = self.engine.state().assignment(&key.0, &key.1).is_some();
        let cpus = self.cpus_of(key);
        Admitted {
            pod: key.0.clone(),
            container: key.1.clone(),
            mems: self.mems_of(&cpus),
            cpus,
            exclusive,
            cgroup: self
                .workloads
                .get(key)
                .and_then(|w| w.cgroup.as_ref())
                .map(ToString::to_string),
        }
    }

    fn save_if_changed(&mut self, next: &State) -> Result<(), StoreError> {
        if next == self.engine.state() {
            return Ok(());
        }
        self.save(next)
    }

    fn save(&mut self, state: &State) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = self.store.save(
            self.engine.policy().name(),
            &state.default.to_string(),
            &checkpoint_entries(state),
        );
        self.counters
            .checkpoint_write_seconds
            .observe(started.elapsed().as_secs_f64());
        if let Err(err) = &result {
            tracing::error!("checkpoint write failed: {err}");
        }
        result
    }
}
