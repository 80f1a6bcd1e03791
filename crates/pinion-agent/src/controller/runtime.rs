//! Owns the runtime (NRI) containers' life: synchronization with the runtime's list, parking, restarts and followers of the shared pool.
//!
//! Containers placed by the runtime (NRI). Their record is the runtime's
//! own list, sent in `Synchronize`: there is no cgroup of Pinion's to look
//! at. [`Controller::sync_runtime`] makes the controller agree with it.

use std::collections::BTreeMap;
use std::sync::Arc;

use pinion_core::engine::CpuOwner;
use pinion_core::pod::Pod;
use pinion_core::{CpuSet, Placement};
use pinion_host::cgroup::ContainerCgroup;

use super::batch::Batch;
use super::executor::Delivery;
use super::{
    AdmitRequest, Admitted, ControlError, Controller, Frontend, Key, Released, RuntimeUpdate,
    Workload,
};
use crate::hints::GatheredHints;

/// What the runtime says a container currently has (`None` = not set or
/// unreadable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub cpus: Option<CpuSet>,
    pub mems: Option<CpuSet>,
    pub cpu_quota: Option<i64>,
}

impl Observed {
    /// True when what the runtime reports already is `placement`: its
    /// CPUs, and its memory nodes and quota where the placement sets them
    /// (CPU decisions leave the memory nodes as they are: any will do).
    fn matches(&self, placement: &Placement) -> bool {
        let quota_ok = placement
            .resources
            .cpu_quota
            .is_none_or(|want| self.cpu_quota == Some(want));
        let mems_ok = placement.mems.is_empty() || self.mems.as_ref() == Some(&placement.mems);
        self.cpus.as_ref() == Some(&placement.cpus) && mems_ok && quota_ok
    }
}

/// What a synchronization with the runtime did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    /// The containers released (no longer running, their pod ended).
    pub released: Released,
    /// The updates that bring each running container to its placement.
    pub updates: Vec<RuntimeUpdate>,
    /// Containers that do not run while their pod does: held for their
    /// restart, with the sandbox cgroup of that pod.
    pub held: Vec<(Key, ContainerCgroup)>,
}

/// One container the runtime runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningContainer {
    /// (pod UID, container name); for containers of pods outside
    /// Kubernetes, any key unique to the container (they are not admitted
    /// and follow the shared pool).
    pub key: Key,
    pub container_id: String,
    pub observed: Observed,
    /// The pod as the runtime describes it (Kubernetes pods), so that a
    /// container recovered after a restart is known by name again.
    pub pod: Option<Arc<Pod>>,
    /// Its cgroup (NRI's `linux.cgroups_path`), when the runtime sent one.
    pub cgroup: Option<ContainerCgroup>,
    /// `Some`: the container may be admitted at this synchronization when
    /// Pinion does not know it (created while no plugin was connected),
    /// with these outside providers' hints (gathered before the command
    /// reached the controller). `None`: it follows the shared pool (no pod
    /// spec, or resource plugins must be asked for it).
    pub late: Option<GatheredHints>,
}

impl Controller {
    /// Makes the runtime-placed containers match `running`: every runtime
    /// workload (and checkpoint assignment without a cgroup of Pinion's)
    /// not in it is released (one checkpoint write), every running one is
    /// recorded with its runtime id and what the runtime reports. Nothing
    /// running moves: a known container keeps its placement; one Pinion did
    /// not know runs in the shared pool. Returns the released containers and
    /// the updates that bring each running container to its placement (the
    /// caller answers `Synchronize` with them). Standalone runs are left
    /// alone.
    pub fn sync_runtime(
        &mut self,
        running: &[RunningContainer],
    ) -> Result<(Released, Vec<RuntimeUpdate>), ControlError> {
        self.sync_runtime_holding(running, &BTreeMap::new())
            .map(|synced| (synced.released, synced.updates))
    }

    /// [`Controller::sync_runtime`], except that a container that does not
    /// run but whose pod does is held for its restart instead of released
    /// ([`Controller::park`]): `restartable` names the Kubernetes pods whose
    /// sandbox the runtime still lists, by UID, with their sandboxes'
    /// cgroups; a pod runs while one of them is there. So a container restarted
    /// after the agent's or the runtime's restart gets its placement and
    /// its plugins' allocations again, without a new admission (the QoS
    /// Resource Manager proposal's re-admission), as kubelet keeps the
    /// CPUs of an active pod's containers across its own restart.
    pub fn sync_runtime_holding(
        &mut self,
        running: &[RunningContainer],
        restartable: &BTreeMap<String, Vec<ContainerCgroup>>,
    ) -> Result<Synced, ControlError> {
        let rebuilt = self.start_report.runtime_rebuild.is_some();
        if let Some(why) = self.start_report.runtime_rebuild.take() {
            if let Err(err) = self.rebuild_from_runtime(running, &why) {
                // Nothing changed: the next Synchronize tries again.
                self.start_report.runtime_rebuild = Some(why);
                return Err(err);
            }
            self.forget_runtime_rebuild();
        }
        let by_key: BTreeMap<&Key, &RunningContainer> =
            running.iter().map(|c| (&c.key, c)).collect();
        let mut held: Vec<(Key, ContainerCgroup)> = Vec::new();
        let mut stale: Vec<Key> = Vec::new();
        for key in self.runtime_keys() {
            if by_key.contains_key(&key) {
                continue;
            }
            let sandbox = restartable
                .get(&key.0)
                .and_then(|sandboxes| sandboxes.iter().find(|s| self.sandbox_runs(s)));
            match sandbox {
                Some(sandbox) => held.push((key, sandbox.clone())),
                None => stale.push(key),
            }
        }
        let mut batch = self.begin();
        let freed = self.decide_release_keys(&stale, &mut batch)?;
        let late = if rebuilt {
            Vec::new()
        } else {
            self.decide_late_admissions(running, &mut batch)
        };
        let departed = self.note_departed_plugin_pods(|pod| {
            restartable.contains_key(pod) || running.iter().any(|c| c.key.0 == pod)
        });
        self.append(&departed, &mut batch);
        self.commit(batch)?;
        for key in &stale {
            tracing::info!(pod = %key.0, container = %key.1, "released: not running any more");
        }
        for (key, sandbox) in &held {
            self.hold_restartable(key, sandbox.clone());
            tracing::info!(pod = %key.0, container = %key.1, "not running, its pod is: held for its restart");
        }
        for key in &late {
            let cpus = self.engine.placement(&key.0, &key.1).cpus;
            tracing::info!(pod = %key.0, container = %key.1, %cpus, "admitted at synchronization: created while no plugin was connected; exclusive cpus given by an update");
        }
        for container in running {
            let desired = self.engine.placement(&container.key.0, &container.key.1);
            let applied = container
                .observed
                .matches(&desired)
                .then(|| desired.clone());
            let frontend = Frontend::running_in(&container.container_id, container.cgroup.clone());
            match self.workloads.get_mut(&container.key) {
                Some(workload) if matches!(workload.frontend, Frontend::Runtime { .. }) => {
                    workload.frontend = frontend;
                    workload.applied = applied;
                    // It runs: not held for a restart any more.
                    workload.held_sandbox = None;
                    // A new connection: answers to updates sent on the old
                    // one are not coming (those lost are failed there).
                    workload.updates_in_flight = 0;
                    if container.pod.is_some() {
                        workload.spec.clone_from(&container.pod);
                    }
                }
                Some(_) => {
                    tracing::warn!(pod = %container.key.0, container = %container.key.1, "the runtime runs a container with the key of a standalone run; left alone");
                }
                None => {
                    let mut workload = Workload::new(frontend, container.pod.clone(), desired);
                    workload.applied = applied;
                    self.workloads.insert(container.key.clone(), workload);
                }
            }
        }
        self.adopt_partitions();
        let updates = self.execute(Delivery::Return);
        Ok(Synced {
            released: Released {
                containers: stale.into_iter().map(|(p, c)| format!("{p}/{c}")).collect(),
                cpus: freed,
            },
            updates,
            held,
        })
    }

    /// Holds `key`, which does not run while its pod does, for its restart
    /// (a checkpoint assignment without a workload gets one).
    fn hold_restartable(&mut self, key: &Key, sandbox: ContainerCgroup) {
        let desired = self.engine.placement(&key.0, &key.1);
        let workload = self
            .workloads
            .entry(key.clone())
            .or_insert_with(|| Workload::new(Frontend::runtime_unknown(), None, desired));
        workload.frontend = Frontend::runtime_unknown();
        workload.nothing_applied();
        workload.held_sandbox = Some(sandbox);
    }

    /// Admits, in `batch`, the running Kubernetes containers Pinion does not
    /// know (no workload, no assignment) that ask for exclusive CPUs and
    /// run on no cpuset of their own (the runtime reports none): the
    /// runtime created them while no plugin was connected, and kubelet's
    /// reconcile would give them their CPUs. A container with a cpuset was
    /// placed already — in the shared pool by an earlier run of the agent
    /// (it did not fit when it came, or the state was rebuilt then) — and
    /// stays where it runs: a restart moves nothing. Only free CPUs are
    /// handed out (the engine never gives a CPU held by another container,
    /// and no container Pinion placed moves); one that does not fit stays
    /// in the shared pool, logged with kubelet's reason. Returns the
    /// admitted.
    fn decide_late_admissions(
        &mut self,
        running: &[RunningContainer],
        batch: &mut Batch,
    ) -> Vec<Key> {
        let mut admitted = Vec::new();
        for container in running {
            let (Some(pod), Some(hints)) = (&container.pod, &container.late) else {
                continue;
            };
            let key = &container.key;
            let known = self.workloads.contains_key(key)
                || self
                    .engine
                    .state()
                    .assignments
                    .get(&key.0)
                    .is_some_and(|c| c.contains_key(&key.1));
            let placed = container.observed.cpus.is_some();
            if known || placed || self.engine.exclusive_cpus_asked(pod, &key.1) == 0 {
                continue;
            }
            let request = AdmitRequest {
                pod: (**pod).clone(),
                container: key.1.clone(),
                frontend: Frontend::running_in(&container.container_id, container.cgroup.clone()),
                cpu_owner: CpuOwner::Policy,
            };
            match self.decide_admit(&request, hints, None, batch) {
                Ok(key) => admitted.push(key),
                Err(err) => {
                    tracing::warn!(pod = %key.0, container = %key.1, "created while no plugin was connected and not admitted now, stays in the shared pool: {err}");
                }
            }
        }
        admitted
    }

    /// A runtime container stopped while its pod still runs: it keeps its
    /// placement — exclusive CPUs and what resource plugins allocated —
    /// for the container the runtime creates next under its name, as
    /// kubelet keeps a terminated container's CPUs while its pod is active
    /// (its reconcile "cannot call RemoveContainer" for a container that
    /// may be restarting). Its runtime id and cgroup are forgotten, so no
    /// update goes to the stopped container and reconcile does not read its
    /// cgroup. The pod's end releases it: the runtime's pod stop, or, given
    /// `sandbox` (the pod's sandbox cgroup, for a pod whose stop the runtime
    /// may never relay), the reconcile pass that finds that cgroup gone.
    /// False when Pinion does not know the container.
    pub fn park(&mut self, key: &Key, sandbox: Option<ContainerCgroup>) -> bool {
        let Some(workload) = self.workloads.get_mut(key) else {
            return false;
        };
        if !matches!(workload.frontend, Frontend::Runtime { .. }) {
            return false;
        }
        workload.frontend = Frontend::runtime_unknown();
        workload.nothing_applied();
        workload.held_sandbox = sandbox;
        // Its partition is taken apart (the executor's pass); its CPUs stay
        // exclusive.
        self.converge();
        true
    }

    /// True unless `sandbox`, a pod's sandbox cgroup, is gone (a cgroup
    /// that cannot be read for another reason counts as there: a hold is
    /// never ended on a guess).
    pub(super) fn sandbox_runs(&self, sandbox: &ContainerCgroup) -> bool {
        match self.host.container_cpuset(sandbox) {
            Err(err) => !err.is_missing(),
            Ok(_) => true,
        }
    }

    /// A new runtime container of a container Pinion holds (its previous
    /// container stopped, [`Controller::park`]): it gets the held placement
    /// without a new admission. `None` when Pinion does not hold it (the
    /// caller admits it as a new container).
    pub fn readmit_held(
        &mut self,
        request: &AdmitRequest,
    ) -> Option<Result<Admitted, ControlError>> {
        let key = (request.pod.uid.clone(), request.container.clone());
        if !self.workloads.contains_key(&key) {
            return None;
        }
        let readmitted = self.readmit(&key, request).map(|()| self.admitted(&key));
        if let Some(workload) = self.workloads.get_mut(&key) {
            workload.held_sandbox = None;
        }
        self.publish();
        Some(readmitted)
    }

    /// Records a runtime container that is not admitted (a pod outside
    /// Kubernetes): it follows the shared pool. Returns its placement.
    pub fn follow(&mut self, key: Key, container_id: String) -> Placement {
        let desired = self.engine.placement(&key.0, &key.1);
        let workload = self
            .workloads
            .entry(key)
            .or_insert_with(|| Workload::new(Frontend::runtime_unknown(), None, desired));
        workload.frontend = Frontend::runtime(container_id);
        workload.applied = Some(workload.desired.clone());
        let placement = workload.desired.clone();
        self.publish();
        placement
    }

    /// The runtime could not apply updates of these containers: their
    /// placement is sent again at the next reconcile pass.
    pub fn runtime_updates_failed(&mut self, container_ids: &[String]) {
        let ids: Vec<&str> = container_ids.iter().map(String::as_str).collect();
        self.count_in_flight(&ids, false);
        for id in container_ids {
            self.forget_applied(id);
        }
        self.publish();
    }

    /// The runtime applied updates of these containers (an id once per
    /// update): once none is in flight, the reconcile pass compares their
    /// cgroups again, and they hold what was last applied, nothing more.
    pub fn runtime_updates_applied(&mut self, container_ids: &[String]) {
        let ids: Vec<&str> = container_ids.iter().map(String::as_str).collect();
        self.count_in_flight(&ids, false);
        for workload in self.workloads.values_mut() {
            let answered = matches!(&workload.frontend, Frontend::Runtime { container_id: Some(id), .. } if container_ids.contains(id));
            if answered && workload.updates_in_flight == 0 && workload.applied.is_some() {
                workload.may_hold = None;
            }
        }
    }

    /// Runtime workloads, and checkpoint assignments no workload claims
    /// (restored from the checkpoint without a cgroup of Pinion's).
    fn runtime_keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .workloads
            .iter()
            .filter(|(_, w)| matches!(w.frontend, Frontend::Runtime { .. }))
            .map(|(key, _)| key.clone())
            .collect();
        for (pod, containers) in &self.engine.state().assignments {
            for container in containers.keys() {
                let key = (pod.clone(), container.clone());
                if !self.workloads.contains_key(&key) && !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }
}
