//! Owns the decisions of a batch, made in memory: an admission (new, retried or in conflict) and a release.
//!
//! The decisions of a batch: admissions and releases, made in memory with
//! their journal records appended; [`super::batch`] makes them durable and
//! applies their effects.

use std::sync::Arc;
use std::time::Instant;

use pinion_core::engine::find_container;
use pinion_core::pod::Pod;
use pinion_core::policy::ContainerKind;
use pinion_core::record::Scope;
use pinion_core::CpuSet;

use super::batch::{AfterFlush, Answer, Batch, Decision};
use super::{
    describe_holder, describe_request, AdmitRequest, Admitted, ControlError, Controller, Frontend,
    Key, Reach, Released, StoredAllocations, Workload,
};
use crate::hints::GatheredHints;

impl Controller {
    /// Admits one container (a batch of one): decide, make durable, place,
    /// then answer.
    pub fn admit(
        &mut self,
        request: &AdmitRequest,
        hints: &GatheredHints,
    ) -> Result<Admitted, ControlError> {
        let decision = Decision::Admit {
            request: Box::new(request.clone()),
            hints: Box::new(hints.clone()),
            plugins: None,
        };
        match self.run_batch(vec![decision]).pop() {
            Some(Ok(Answer::Admitted(admitted))) => Ok(*admitted),
            Some(Err(err)) => Err(err),
            _ => Err(ControlError::Stopped),
        }
    }

    /// Releases one container (`Some(name)`) or every container of a pod
    /// (a batch of one).
    pub fn release(
        &mut self,
        pod: &str,
        container: Option<&str>,
    ) -> Result<Released, ControlError> {
        let decision = Decision::Release {
            pod: pod.to_string(),
            container: container.map(str::to_string),
            reach: Reach::All,
        };
        match self.run_batch(vec![decision]).pop() {
            Some(Ok(Answer::Released(released))) => Ok(released),
            Some(Err(err)) => Err(err),
            _ => Err(ControlError::Stopped),
        }
    }

    /// An admission, in memory: the engine decides, a standalone run's
    /// cgroup is created (it exists before its journal record and until
    /// after its release is durable: at a restart, an assignment with a
    /// cgroup under Pinion's root is a standalone run, one without is the
    /// runtime's), the records are appended. `plugins`: the resource
    /// plugins' answers, asked before the admission; they are stored with
    /// it and place the container from the start.
    pub(super) fn decide_admit(
        &mut self,
        request: &AdmitRequest,
        hints: &GatheredHints,
        plugins: Option<StoredAllocations>,
        batch: &mut Batch,
    ) -> Result<Key, ControlError> {
        let key = (request.pod.uid.clone(), request.container.clone());
        batch.touch(&self.workloads, &key);
        if self.workloads.contains_key(&key) {
            if !self.run_has_ended(&key, request, batch) {
                self.readmit(&key, request)?;
                // A retry of the same run: its process is placed again (it
                // may have been moved out since; a pid already there stays).
                place_process(&key, request, batch);
                if let Some(plugins) = plugins {
                    self.keep_plugin_answers(&key, plugins, None, batch);
                }
                return Ok(key);
            }
            let retire = self.release_ended_run(&key, batch)?;
            let admitted = self.decide_new(request, hints, plugins, batch);
            if admitted.is_err() {
                // Refused: the ended run's cgroup goes after the flush.
                batch.after.extend(retire);
            }
            return admitted;
        }
        let retire = self.take_retire_in_batch(&key, request, batch)?;
        let admitted = self.decide_new(request, hints, plugins, batch);
        if admitted.is_err() {
            batch.after.extend(retire);
        }
        admitted
    }

    /// A run of id `key` released earlier in `batch` (its cgroup's removal
    /// queued for after the flush) and admitted again in it: a conflict
    /// while the released run's processes are in its cgroup (or cannot be
    /// listed), as in separate batches; else the removal is taken back
    /// (returned: put back if the new admission is refused), and the new
    /// run gets the cgroup. The removal ran after the flush and either took
    /// the new run's cgroup from under its process, or put the old process
    /// in place of the new one on its exclusive CPUs.
    fn take_retire_in_batch(
        &self,
        key: &Key,
        request: &AdmitRequest,
        batch: &mut Batch,
    ) -> Result<Vec<AfterFlush>, ControlError> {
        let Some(at) = batch
            .after
            .iter()
            .position(|effect| matches!(effect, AfterFlush::Retire { key: k, .. } if k == key))
        else {
            return Ok(Vec::new());
        };
        if let AfterFlush::Retire { cgroup, pid, .. } = &batch.after[at] {
            if !self.host.pids(cgroup).is_ok_and(|pids| pids.is_empty()) {
                return Err(ControlError::Conflict {
                    pod: key.0.clone(),
                    container: key.1.clone(),
                    held: format!(
                        "by the processes of a run released just before{} (its cgroup {cgroup} still holds them)",
                        pid.map(|p| format!(" (process {p})")).unwrap_or_default()
                    ),
                    asked: super::describe_request(&request.frontend, &request.pod, &key.1),
                });
            }
        }
        Ok(vec![batch.after.remove(at)])
    }

    /// A runtime creates a pod's containers one by one, other pods in
    /// between, where kubelet admits the pod as a whole: what pod `pod`'s
    /// init containers pass on is recalled before one of its containers is
    /// admitted (`Engine::recall_reuse`). A container's kind comes from the
    /// pod spec of `request`, else from the spec it was admitted with, else
    /// from the init containers the pod's annotation declares (NRI; a
    /// container restored at a restart has no spec).
    fn recall_reuse(&mut self, pod: &str, request: &AdmitRequest) {
        let workloads = &self.workloads;
        let declared = pinion_nri::kube::declared_init_containers(pod, &request.pod.annotations)
            .unwrap_or_default();
        self.engine.recall_reuse(pod, |name| {
            let kind = |spec: &Pod| find_container(spec, name).map(|(_, kind)| kind);
            kind(&request.pod)
                .or_else(|| {
                    let admitted = workloads.get(&(pod.to_string(), name.to_string()))?;
                    kind(admitted.spec.as_deref()?)
                })
                .or_else(|| {
                    let (_, sidecar) = declared.iter().find(|(init, _)| init == name)?;
                    Some(if *sidecar {
                        ContainerKind::Sidecar
                    } else {
                        ContainerKind::Init
                    })
                })
        });
    }

    /// An admission of a container not admitted yet.
    fn decide_new(
        &mut self,
        request: &AdmitRequest,
        hints: &GatheredHints,
        plugins: Option<StoredAllocations>,
        batch: &mut Batch,
    ) -> Result<Key, ControlError> {
        let key = (request.pod.uid.clone(), request.container.clone());
        let scope = Scope::of(self.engine.state(), [key.0.as_str()]);
        let started = Instant::now();
        // Only a pod holding CPUs already has anything to recall (not the
        // common case: its first container).
        if self.engine.state().assignments.contains_key(&key.0) {
            self.recall_reuse(&key.0, request);
        }
        let report = self.engine.admit_container_as(
            &request.pod,
            &request.container,
            &[hints],
            request.cpu_owner,
        );
        self.engine.record_admission_duration(started.elapsed());
        if let Err(source) = report.result {
            return Err(ControlError::Admission {
                pod: key.0,
                container: key.1,
                source: Box::new(source),
            });
        }
        let decided = self.engine.placement(&key.0, &key.1);
        if let Some(reason) = self.exclusive_held_back(&request.frontend) {
            if decided.is_exclusive() {
                self.engine.remove(&key.0, &key.1);
                return Err(ControlError::Degraded {
                    pod: key.0,
                    container: key.1,
                    reason,
                });
            }
        }
        let (desired, encoded) = match &plugins {
            None => (decided, None),
            Some(plugins) => match self.with_plugin_answers(&key, decided, plugins) {
                Ok(answered) => answered,
                Err(err) => {
                    self.engine.remove(&key.0, &key.1);
                    return Err(err);
                }
            },
        };
        if let Frontend::Standalone { cgroup, .. } = &request.frontend {
            // The executor makes it now, before the flush (a refusal by
            // the kernel refuses the admission).
            if let Err(source) = self.create_run_cgroup(cgroup, &desired) {
                self.engine.remove(&key.0, &key.1);
                return Err(ControlError::Cgroup { pod: key.0, source });
            }
            batch.created.push(cgroup.clone());
            self.record_run(&key, cgroup, &desired);
        }
        self.record_scope(&scope, batch);
        place_process(&key, request, batch);
        tracing::info!(pod = %key.0, container = %key.1, pool = %desired.pool, cpus = %desired.cpus, "admitted");
        let mut workload = Workload::new(
            request.frontend.clone(),
            Some(Arc::new(request.pod.clone())),
            desired.clone(),
        );
        workload.applied = Some(desired);
        self.admissions += 1;
        workload.admitted = self.admissions;
        self.workloads.insert(key.clone(), workload);
        if let Some(plugins) = plugins {
            self.keep_plugin_answers(&key, plugins, encoded, batch);
        }
        batch.admitted.push(key.clone());
        Ok(key)
    }

    /// Whether `request` is a new standalone run (another process, or
    /// another request) with the id of an admitted run whose processes have
    /// all ended: its cgroup holds none (the host's view, as the reconcile
    /// pass has it), and held no plugin resources. Such a run is released
    /// at once instead of being a conflict until the next reconcile. A run
    /// admitted earlier in `batch` has not ended: its process joins its
    /// cgroup after the flush.
    fn run_has_ended(&self, key: &Key, request: &AdmitRequest, batch: &Batch) -> bool {
        let Some(existing) = self.workloads.get(key) else {
            return false;
        };
        let joining = batch
            .after
            .iter()
            .any(|effect| matches!(effect, AfterFlush::AddPid { key: k, .. } if k == key));
        if joining {
            return false;
        }
        let (Frontend::Standalone { cgroup, pid: held }, Frontend::Standalone { pid: asked, .. }) =
            (&existing.frontend, &request.frontend)
        else {
            return false;
        };
        let retry = held == asked && existing.spec.as_ref().is_none_or(|s| **s == request.pod);
        // A run that held plugin resources waits for the reconcile pass:
        // its release sends the plugins `RemovePod` for the id, which would
        // also take what they allocate for the new run of that id.
        let plugins = !existing.plugins.is_empty();
        !retry && !plugins && self.host.pids(cgroup).is_ok_and(|pids| pids.is_empty())
    }

    /// Releases the ended run `key` in `batch`, keeping its cgroup for the
    /// new run of the same id (removing it after the flush would take it
    /// from under the new run's process). Returns the cgroup's removal, for
    /// when the new run is refused.
    fn release_ended_run(
        &mut self,
        key: &Key,
        batch: &mut Batch,
    ) -> Result<Vec<AfterFlush>, ControlError> {
        tracing::info!(pod = %key.0, container = %key.1, "the run's processes have ended; released for a new run of the same id");
        self.decide_release_keys(std::slice::from_ref(key), batch)?;
        let (retire, keep) = std::mem::take(&mut batch.after)
            .into_iter()
            .partition(|effect| matches!(effect, AfterFlush::Retire { key: k, .. } if k == key));
        batch.after = keep;
        self.counters.released_gone_total += 1;
        Ok(retire)
    }

    /// A second admission of an admitted container: a retry (the same
    /// process and request of a standalone run; any runtime container of
    /// that name, which keeps its CPUs as kubelet does for a restarted
    /// container) changes nothing; anything else is a conflict.
    pub(super) fn readmit(
        &mut self,
        key: &Key,
        request: &AdmitRequest,
    ) -> Result<(), ControlError> {
        let Some(existing) = self.workloads.get(key).cloned() else {
            return Err(ControlError::NotFound {
                pod: key.0.clone(),
                container: Some(key.1.clone()),
            });
        };
        match (&existing.frontend, &request.frontend) {
            (
                Frontend::Runtime {
                    container_id,
                    started,
                    ..
                },
                Frontend::Runtime {
                    container_id: new, ..
                },
            ) => {
                if container_id != new {
                    tracing::info!(pod = %key.0, container = %key.1, id = ?new, "a new runtime container of an admitted container keeps its placement");
                    if let Some(workload) = self.workloads.get_mut(key) {
                        workload.applied = Some(workload.desired.clone());
                    }
                }
                if let Some(workload) = self.workloads.get_mut(key) {
                    workload.frontend = request.frontend.clone();
                    // Created again: no longer held for the sandbox it
                    // stopped in (which may go away while this one runs).
                    workload.held_sandbox = None;
                    // The same container asked again: it keeps running.
                    if let Frontend::Runtime { started: now, .. } = &mut workload.frontend {
                        *now |= *started && container_id == new;
                    }
                }
                // The runtime's latest view of the pod (names, siblings).
                if let Some(workload) = self.workloads.get_mut(key) {
                    workload.spec = Some(Arc::new(request.pod.clone()));
                }
                Ok(())
            }
            (Frontend::Standalone { pid: held, .. }, Frontend::Standalone { pid: asked, .. })
                if held == asked && existing.spec.as_ref().is_none_or(|s| **s == request.pod) =>
            {
                Ok(())
            }
            (held, asked) => Err(ControlError::Conflict {
                pod: key.0.clone(),
                container: key.1.clone(),
                held: describe_holder(held, &existing.desired),
                asked: describe_request(asked, &request.pod, &key.1),
            }),
        }
    }

    /// A release, in memory: the engine frees the CPUs, the records are
    /// appended, the workloads go (their cgroups once the batch is durable).
    pub(super) fn decide_release(
        &mut self,
        pod: &str,
        container: Option<&str>,
        reach: Reach,
        batch: &mut Batch,
    ) -> Result<Released, ControlError> {
        let keys = self.keys_of(pod, container);
        if keys.is_empty() {
            return Err(ControlError::NotFound {
                pod: pod.to_string(),
                container: container.map(str::to_string),
            });
        }
        for key in &keys {
            self.within_reach(key, reach, "release")?;
        }
        let freed = self.decide_release_keys(&keys, batch)?;
        Ok(Released {
            containers: keys.into_iter().map(|(_, c)| c).collect(),
            cpus: freed,
        })
    }

    /// Releases `keys` in memory; returns the CPUs that went back to the
    /// shared pool.
    pub(super) fn decide_release_keys(
        &mut self,
        keys: &[Key],
        batch: &mut Batch,
    ) -> Result<CpuSet, ControlError> {
        let scope = Scope::of(
            self.engine.state(),
            keys.iter().map(|(pod, _)| pod.as_str()),
        );
        let mut freed = CpuSet::new();
        for (pod, container) in keys {
            freed.union_with(&self.engine.remove(pod, container));
        }
        let mut removed = Vec::new();
        for key in keys {
            batch.touch(&self.workloads, key);
            if let Some(workload) = self.workloads.remove(key) {
                removed.push((key.clone(), workload));
            }
        }
        let side = self.note_pod_removals(keys);
        self.record_scope(&scope, batch);
        self.append(&side, batch);
        for (key, workload) in removed {
            if let Frontend::Standalone { cgroup, pid } = workload.frontend {
                batch.after.push(AfterFlush::Retire {
                    key: key.clone(),
                    cgroup,
                    pid,
                    spec: workload.spec,
                });
            }
        }
        for key in keys {
            tracing::info!(pod = %key.0, container = %key.1, "released");
        }
        Ok(freed)
    }

    /// Why exclusive CPUs are not handed out now to a container of
    /// `frontend`, if they are not: the agent runs degraded; or the state
    /// was rebuilt from the node, and the runtime's containers — in no
    /// cgroup of Pinion's — are known only from its first `Synchronize`
    /// (until then their CPUs look free), which a standalone run does not
    /// wait for (the runtime's own admissions come after it).
    fn exclusive_held_back(&self, frontend: &Frontend) -> Option<String> {
        if let Some(reason) = &self.start_report.degraded {
            return Some(reason.clone());
        }
        if !matches!(frontend, Frontend::Standalone { .. }) {
            return None;
        }
        self.start_report.runtime_rebuild.as_ref().map(|why| {
            format!("the state is rebuilt from the node ({why}), and the container runtime's running containers are known from its first Synchronize only, which has not come yet")
        })
    }

    /// `Err` when `key` is out of `reach` ([`Reach`]): with [`Reach::Runs`],
    /// anything but a standalone run, a checkpoint's entry without a
    /// workload included. A key nothing holds is the caller's `NotFound`.
    pub(super) fn within_reach(
        &self,
        key: &Key,
        reach: Reach,
        action: &'static str,
    ) -> Result<(), ControlError> {
        if reach == Reach::All {
            return Ok(());
        }
        let holder = match self.workloads.get(key).map(|w| &w.frontend) {
            Some(Frontend::Standalone { .. }) => return Ok(()),
            Some(Frontend::Runtime { .. }) => "admitted by the container runtime",
            None if self.engine.state().assignment(&key.0, &key.1).is_some() => {
                "exclusive cpus from the checkpoint, no process known"
            }
            None => return Ok(()),
        };
        Err(ControlError::NotARun {
            pod: key.0.clone(),
            container: key.1.clone(),
            holder,
            action,
        })
    }

    pub(super) fn keys_of(&self, pod: &str, container: Option<&str>) -> Vec<Key> {
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
}

/// A standalone run's process joins its cgroup once `batch` is durable.
fn place_process(key: &Key, request: &AdmitRequest, batch: &mut Batch) {
    if let Frontend::Standalone {
        cgroup,
        pid: Some(pid),
    } = &request.frontend
    {
        batch.after.push(AfterFlush::AddPid {
            key: key.clone(),
            cgroup: cgroup.clone(),
            pid: *pid,
        });
    }
}
