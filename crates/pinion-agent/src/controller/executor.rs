//! Owns every write to the node: cgroups, cpusets, OCI settings, pids, partitions, and the runtime updates.
//!
//! The executor: the one place where placements reach the node. After every
//! change the controller recomputes each workload's *desired* placement from
//! the engine, and the executor turns each difference from what was last
//! *applied* into
//!
//! * cgroup writes for standalone runs (Pinion's own cgroups), or
//! * one batch of runtime updates for runtime containers, handed to the NRI
//!   front-end, which sends them after the handler that caused them returned
//!   (containerd holds its lock while it waits for a handler's reply) — only
//!   for containers whose CPUs, memory nodes or resource settings changed:
//!   an env- or annotation-only change is recorded as applied without one;
//!   and for a runtime container given exclusive CPUs, its pod cgroup's CFS
//!   quota lifted once, as kubelet's `static` policy creates that cgroup
//!   ([`Controller::lift_pod_quotas`]).
//!
//! Admission, release, shared-pool changes, drift repair and restart
//! recovery all end here; nothing else writes a cpuset.
//!
//! Every write to the node goes through this file: the pass above, the
//! effects of a durable batch ([`Controller::apply_after_flush`]: processes
//! moved into their cgroups, released runs' cgroups removed), and the
//! node writes of the last section (a new run's cgroup, Pinion's root at
//! start and after a hotplug, a run's processes moved back after a hotplug,
//! cpuset partitions, housekeeping cgroups, the system partition's memory
//! limit), which the decision files call instead of the
//! host. They read the node themselves (processes, cpusets) but never
//! write it; a test (`only_the_executor_writes_the_node`) holds them to it.

use std::sync::Arc;

use pinion_core::partition::PartitionMode;
use pinion_core::placement::{all_memory_nodes, Pool, ResourceSettings, UNLIMITED_QUOTA};
use pinion_core::pod::Pod;
use pinion_core::{CpuSet, Placement, Topology};
use pinion_host::cgroup::{
    CgroupError, CgroupName, ContainerCgroup, CpusetHost, PartitionOutcome, PartitionTarget,
};

use super::batch::AfterFlush;
use super::{ControlError, Controller, Frontend, Key};

/// Brings a standalone run's cgroup from `applied` (`None`: unknown) to
/// `desired`: the cpuset when it moved, then the resource settings that
/// changed (CFS quota and period, shares, memory and swap limits; the OOM
/// score adjustment is the launcher's, set on itself before exec).
///
/// Memory nodes a plugin named and no longer names (its answer dropped:
/// `desired.mems` empty) go back to the parent's; writing only the CPUs
/// would leave the old nodes in place. Resource settings likewise get a
/// fresh cgroup's value. `given` is what the cgroup may hold
/// ([`Workload::given`]: `applied`, and what failed writes may have left);
/// a run that never had nodes or settings keeps them unwritten (v2: it
/// follows its parent).
pub(super) fn write_cgroup(
    host: &mut dyn CpusetHost,
    cgroup: &CgroupName,
    desired: &Placement,
    applied: Option<&Placement>,
    given: Option<&Placement>,
) -> Result<(), CgroupError> {
    if applied.is_none_or(|a| a.cpus != desired.cpus || a.mems != desired.mems) {
        host.set(cgroup, &desired.cpus, &desired.mems)?;
    }
    if mems_taken_back(desired, given) {
        host.reset_mems(cgroup)?;
    }
    host.write_resources(
        cgroup,
        &desired.resources,
        applied.map(|a| &a.resources),
        &settings_taken_back(desired, given),
    )
}

/// Whether `desired` names no memory nodes where the cgroup or the runtime
/// may hold some Pinion gave (`given`): a plugin's `CpusetMems` answer was
/// dropped, and the nodes must be given back explicitly (writing without
/// them leaves them).
fn mems_taken_back(desired: &Placement, given: Option<&Placement>) -> bool {
    desired.mems.is_empty() && given.is_some_and(|g| !g.mems.is_empty())
}

/// The resource settings `given` names and `desired` no longer gives.
fn settings_taken_back(desired: &Placement, given: Option<&Placement>) -> ResourceSettings {
    given
        .map(|g| desired.resources.taken_back(&g.resources))
        .unwrap_or_default()
}

/// The update that brings a runtime container from `applied` to
/// `desired`. The runtime keeps what an update does not name, so what
/// Pinion sent and no longer wants (a plugin's answer dropped) is named
/// explicitly: memory nodes are replaced by every memory node of the
/// machine — what a container that never had any may use; resource
/// settings are listed in `taken_back`, for the front-end to put the
/// runtime's own values back (it knows them; the controller does not).
fn runtime_update(
    container_id: &str,
    desired: &Placement,
    given: Option<&Placement>,
    machine: &Topology,
    pass: u64,
) -> RuntimeUpdate {
    let mut placement = desired.clone();
    if mems_taken_back(desired, given) {
        placement.mems = all_memory_nodes(machine);
    }
    RuntimeUpdate {
        container_id: container_id.to_string(),
        placement,
        taken_back: settings_taken_back(desired, given),
        only_adds: given.is_some_and(|held| desired.only_adds_to(held)),
        pass,
    }
}

/// A placement for a runtime container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeUpdate {
    pub container_id: String,
    pub placement: Placement,
    /// The resource settings (with the values sent) that the placement
    /// no longer gives: the runtime's own values go back in their place
    /// ([`pinion_core::placement::ResourceSettings::taken_back`]).
    pub taken_back: ResourceSettings,
    /// It only gives the container more than the runtime may hold
    /// ([`Placement::only_adds_to`]): the front-end may let it wait for a
    /// reply to carry it.
    pub only_adds: bool,
    /// The executor pass that decided it ([`Snapshot::pass`]): of two
    /// placements of one container the front-end holds, the later pass's
    /// is the newer.
    pub pass: u64,
}

/// What to do with the runtime updates of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    /// Send them to the runtime front-end's channel.
    Send,
    /// Return them to the caller, which answers a runtime request with them
    /// (`Synchronize`); they count as in flight until the front-end reports
    /// them applied or failed.
    Return,
}

impl Controller {
    /// Recomputes every desired placement, applies the differences (runtime
    /// updates sent to the front-end) and publishes the shared pool and a
    /// snapshot.
    // difference-from-kubelet: shared-pool-pushed-at-once
    pub(super) fn converge(&mut self) {
        self.execute(Delivery::Send);
    }

    /// [`Controller::converge`] after a batch: the runtime containers it
    /// admitted are answered with their placement (the runtime applies it
    /// as it creates them), so they get no update.
    pub(super) fn converge_admitted(&mut self, admitted: &[Key]) {
        self.refresh_desired();
        for key in admitted {
            if let Some(workload) = self.workloads.get_mut(key) {
                if matches!(workload.frontend, Frontend::Runtime { .. }) {
                    workload.applied = Some(workload.desired.clone());
                }
            }
        }
        self.execute_refreshed(Delivery::Send);
    }

    /// [`Controller::converge`] with a choice of what happens to runtime
    /// updates; returns those not sent.
    pub(super) fn execute(&mut self, delivery: Delivery) -> Vec<RuntimeUpdate> {
        self.refresh_desired();
        self.execute_refreshed(delivery)
    }

    /// [`Controller::execute`] once the desired placements are fresh (each
    /// refresh visits every workload).
    fn execute_refreshed(&mut self, delivery: Delivery) -> Vec<RuntimeUpdate> {
        self.passes += 1;
        self.unmake_stale_partitions();
        // Housekeeping cgroups give up newly exclusive CPUs first and take
        // released ones last (controller/housekeeping.rs).
        let housekeeping = self.shrink_housekeeping();
        let runtime = self.apply_differences();
        self.lift_pod_quotas();
        self.make_partitions();
        self.enforce_partition_memory();
        let runtime = match delivery {
            Delivery::Return => {
                // In flight like sent ones: the runtime applies a
                // `Synchronize` reply's updates after it read the reply, and
                // the front-end reports them applied like a reply's carried
                // updates (`runtime_updates_applied`). Until then the
                // reconcile pass does not take the cgroup's old value for a
                // foreign write.
                let ids: Vec<&str> = runtime.iter().map(|u| u.container_id.as_str()).collect();
                self.count_in_flight(&ids, true);
                runtime
            }
            Delivery::Send => {
                self.send_runtime(runtime);
                Vec::new()
            }
        };
        self.shared_tx.send_if_modified(|pool| {
            let now = self.engine.shared_pool();
            let changed = *pool != now;
            *pool = now;
            changed
        });
        self.grow_housekeeping(&housekeeping);
        self.publish();
        runtime
    }

    fn refresh_desired(&mut self) {
        let keys: Vec<Key> = self.workloads.keys().cloned().collect();
        for key in keys {
            let desired = self.in_system_partition(&key, self.placement_for(&key));
            if let Some(workload) = self.workloads.get_mut(&key) {
                if workload.desired != desired {
                    workload.desired = desired;
                }
            }
        }
    }

    /// Writes the cgroups whose applied placement differs from the desired
    /// one; collects the runtime containers' differences.
    fn apply_differences(&mut self) -> Vec<RuntimeUpdate> {
        let mut runtime = Vec::new();
        let stale: Vec<Key> = self
            .workloads
            .iter()
            .filter(|(_, w)| w.applied.as_ref() != Some(&w.desired))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            let Some(workload) = self.workloads.get_mut(&key) else {
                continue;
            };
            let desired = workload.desired.clone();
            match &workload.frontend {
                Frontend::Standalone { cgroup, .. } => {
                    match write_cgroup(
                        self.host.as_mut(),
                        cgroup,
                        &desired,
                        workload.applied.as_ref(),
                        workload.given().as_deref(),
                    ) {
                        Ok(()) => {
                            if workload.apply_failure.take().is_some() {
                                tracing::info!(cgroup = %cgroup, "applied after earlier failures");
                            }
                            workload.applied = Some(desired);
                            workload.may_hold = None;
                        }
                        Err(err) => {
                            // Marked and counted once; retried at each pass
                            // (a transient failure heals) without a log
                            // line each time.
                            if workload.apply_failure.is_none() {
                                tracing::error!(cgroup = %cgroup, "applying cpus {} mems {} and {:?}: {err} (shown by `pinion ps` until a write succeeds)", desired.cpus, desired.mems, desired.resources);
                                self.counters.cgroup_apply_failures_total += 1;
                            } else {
                                tracing::debug!(cgroup = %cgroup, "applying again: {err}");
                            }
                            workload.apply_failure = Some(err.to_string());
                            // Part of it may have been written.
                            workload.maybe_given(&desired);
                            workload.applied = None;
                        }
                    }
                }
                Frontend::Runtime {
                    container_id: Some(id),
                    ..
                } => {
                    // An update carrying only what the container has is
                    // noise (an env- or annotation-only change cannot reach
                    // a running container).
                    let unchanged = workload
                        .applied
                        .as_ref()
                        .is_some_and(|applied| applied.same_resources(&desired));
                    if !unchanged {
                        runtime.push(runtime_update(
                            id,
                            &desired,
                            workload.given().as_deref(),
                            self.engine.machine(),
                            self.passes,
                        ));
                        // Until the runtime answers, it may hold either.
                        workload.maybe_given(&desired);
                    }
                    workload.applied = Some(desired);
                }
                // Known from the checkpoint only: the runtime's next
                // Synchronize tells its id and current placement.
                Frontend::Runtime {
                    container_id: None, ..
                } => {}
            }
        }
        runtime
    }

    /// kubelet's `static` policy creates the cgroup of a pod with exclusive
    /// CPUs without CFS quota (`DisableCPUQuotaWithExclusiveCPUs`, locked on
    /// since 1.37); at `none` it sets the pod's CPU limit as its quota,
    /// which throttles the whole pod whatever its containers' own quota
    /// (Pinion lifts theirs). So each runtime container given exclusive
    /// CPUs lifts its pod's quota, before the runtime starts it: once per
    /// container (kubelet's is set at the pod cgroup's creation and stays);
    /// a failure is logged, not retried — the pod runs, throttled as
    /// kubelet at `none` leaves it. The sandbox's own cgroup (the pause
    /// process, already started) keeps kubelet's quota.
    // difference-from-kubelet: pod-quota-lifted-at-admission
    pub(super) fn lift_pod_quotas(&mut self) {
        for ((uid, container), workload) in &mut self.workloads {
            let exclusive = workload.desired.pool == Pool::Exclusive
                && workload.desired.resources.cpu_quota == Some(UNLIMITED_QUOTA);
            if workload.pod_quota_lifted || !exclusive {
                continue;
            }
            let Frontend::Runtime {
                cgroup: Some(cgroup),
                ..
            } = &workload.frontend
            else {
                continue;
            };
            workload.pod_quota_lifted = true;
            let Some(pod) = cgroup.pod_cgroup(uid) else {
                tracing::debug!(%cgroup, %uid, %container, "no pod cgroup named after the pod above the container's: its quota is left alone");
                continue;
            };
            match self.host.lift_cpu_quota(&pod) {
                Ok(()) => tracing::debug!(cgroup = %pod, %container, "the pod's CFS quota lifted"),
                Err(err) if err.is_missing() => {
                    tracing::debug!(cgroup = %pod, "the pod's cgroup is gone");
                }
                Err(err) => {
                    tracing::warn!(cgroup = %pod, %container, "lifting the pod's CFS quota, as kubelet's static policy runs a pod with exclusive CPUs: {err}");
                }
            }
        }
    }

    fn send_runtime(&mut self, updates: Vec<RuntimeUpdate>) {
        if updates.is_empty() {
            return;
        }
        let sent = self
            .runtime_updates
            .as_ref()
            .is_some_and(|tx| tx.send(updates.clone()).is_ok());
        if sent {
            tracing::debug!(containers = updates.len(), "runtime updates queued");
            let ids: Vec<&str> = updates.iter().map(|u| u.container_id.as_str()).collect();
            self.count_in_flight(&ids, true);
            return;
        }
        // No front-end to take them: try again at the next pass.
        for update in updates {
            self.forget_applied(&update.container_id);
        }
    }

    /// One more (`sent`) or one fewer update of each runtime container in
    /// `container_ids` (an id once per update) waiting for the runtime's
    /// answer: one pass over the workloads, however many ids (a shared-pool
    /// change updates every shared container).
    pub(super) fn count_in_flight(&mut self, container_ids: &[&str], sent: bool) {
        let mut times: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
        for id in container_ids {
            *times.entry(id).or_default() += 1;
        }
        for workload in self.workloads.values_mut() {
            let Frontend::Runtime {
                container_id: Some(id),
                ..
            } = &workload.frontend
            else {
                continue;
            };
            if let Some(n) = times.get(id.as_str()) {
                workload.updates_in_flight = if sent {
                    workload.updates_in_flight.saturating_add(*n)
                } else {
                    workload.updates_in_flight.saturating_sub(*n)
                };
            }
        }
    }

    /// Marks a runtime container's placement as not applied (the runtime
    /// failed to apply it, or it could not be sent): the next pass retries.
    pub(super) fn forget_applied(&mut self, container_id: &str) {
        for workload in self.workloads.values_mut() {
            if matches!(&workload.frontend, Frontend::Runtime { container_id: Some(id), .. } if id == container_id)
            {
                workload.applied_unknown();
            }
        }
    }

    /// The effects of a durable batch, in order: processes moved into their
    /// cgroups, released runs' cgroups removed (or kept while processes
    /// remain). Returns the admissions whose process could not be placed.
    pub(super) fn apply_after_flush(
        &mut self,
        effects: Vec<AfterFlush>,
    ) -> Vec<(Key, ControlError)> {
        let mut failed = Vec::new();
        for effect in effects {
            match effect {
                AfterFlush::AddPid { key, cgroup, pid } => {
                    if let Err(source) = self.host.add_pid(&cgroup, pid) {
                        failed.push((
                            key,
                            ControlError::Cgroup {
                                pod: cgroup.to_string(),
                                source,
                            },
                        ));
                    }
                }
                AfterFlush::Retire {
                    key,
                    cgroup,
                    pid,
                    spec,
                } => self.retire_cgroup(&key, cgroup, pid, spec),
            }
        }
        failed
    }

    /// A released run's cgroup: removed when no process is left in it, else
    /// kept with its processes in the shared pool (known by name). One
    /// whose processes cannot be listed is kept the same way (its CPUs are
    /// free now and may be handed out again): the reconcile pass releases
    /// it once it can see the cgroup empty.
    fn retire_cgroup(
        &mut self,
        key: &Key,
        cgroup: CgroupName,
        pid: Option<u32>,
        spec: Option<Arc<Pod>>,
    ) {
        match self.host.pids(&cgroup) {
            Ok(pids) if pids.is_empty() => {
                if let Err(err) = self.remove_cgroup(&cgroup) {
                    tracing::warn!("cgroup {cgroup} not removed yet: {err}");
                }
            }
            listed => {
                match listed {
                    Ok(_) => {
                        tracing::warn!(pod = %key.0, "released with processes left: kept in the shared pool");
                    }
                    Err(err) => {
                        tracing::warn!(pod = %key.0, "released, but the processes of cgroup {cgroup} cannot be listed ({err}): kept in the shared pool");
                    }
                }
                let desired = self.engine.placement(&key.0, &key.1);
                self.record_run(key, &cgroup, &desired);
                self.workloads.insert(
                    key.clone(),
                    super::Workload::new(Frontend::Standalone { cgroup, pid }, spec, desired),
                );
            }
        }
    }

    // --- node writes the decision files ask for ----------------------------

    /// A new standalone run's cgroup with its cpuset and OCI settings,
    /// before any process joins. Made while the admission is decided,
    /// before its batch's flush: the kernel refusing the cpuset or a
    /// setting refuses the admission, and the journal never records an
    /// admission the node refused. A refused cgroup is removed again.
    pub(super) fn create_run_cgroup(
        &mut self,
        cgroup: &CgroupName,
        placement: &Placement,
    ) -> Result<(), CgroupError> {
        let made = self
            .host
            .create(cgroup, &placement.cpus, &placement.mems)
            .and_then(|()| self.host.set_resources(cgroup, &placement.resources, None));
        if made.is_err() {
            // The directory is made before its cpuset is written (and
            // refused); no workload owns it.
            if let Err(err) = self.host.remove(cgroup) {
                tracing::warn!(%cgroup, "removing the refused run's cgroup: {err}");
            }
        }
        made
    }

    /// Writes run `cgroup`'s record ([`pinion_host::runs`]): the exclusive
    /// CPUs `desired` holds, 0 once the run is shared. Written with each
    /// decision that changes it (admission, resize, a release that leaves
    /// processes behind) and checked at start and after a hot-plug
    /// ([`Self::sync_run_records`]): the record is what a rebuild from the
    /// node gives the run, so a stale count would give a released run
    /// exclusive CPUs again. A hint: a failure is logged.
    pub(super) fn record_run(&self, key: &Key, cgroup: &CgroupName, desired: &Placement) {
        if let Err(err) = self.runs.write(cgroup, exclusive_count(desired)) {
            tracing::warn!(pod = %key.0, "{err} (only a rebuild from the node needs it)");
        }
    }

    /// [`Self::record_run`] for every live standalone run whose record says
    /// something else than its placement (a migration at start or a CPU
    /// gone offline changed it; an older agent left a released run's count).
    pub(super) fn sync_run_records(&self) {
        for (key, workload) in &self.workloads {
            let Frontend::Standalone { cgroup, .. } = &workload.frontend else {
                continue;
            };
            let held = exclusive_count(&workload.desired);
            if !matches!(self.runs.read(cgroup), Ok(Some(n)) if n == held) {
                self.record_run(key, cgroup, &workload.desired);
            }
        }
    }

    /// Removes a standalone run's cgroup (its partition first) and then its
    /// run record.
    pub(super) fn remove_cgroup(&mut self, cgroup: &CgroupName) -> Result<(), CgroupError> {
        self.release_partition(cgroup);
        self.host.remove(cgroup)?;
        if let Err(err) = self.runs.remove(cgroup) {
            tracing::warn!("{err}");
        }
        Ok(())
    }

    /// A run's process moved back into the run's cgroup from Pinion's root,
    /// where a cgroup v1 kernel put it when the run's CPUs all went offline
    /// (controller/hotplug.rs finds them).
    pub(super) fn move_back(&mut self, cgroup: &CgroupName, pid: u32) -> Result<(), CgroupError> {
        self.host.add_pid(cgroup, pid)
    }

    /// Pinion's cgroup root made (at start) or widened (after a hotplug: a
    /// cgroup v1 kernel does not give a CPU that comes back to the cpusets
    /// it was removed from) to `cpus` and `mems`.
    pub(super) fn write_root(&mut self, cpus: &CpuSet, mems: &CpuSet) -> Result<(), CgroupError> {
        self.host.ensure_root(cpus, mems)
    }

    /// Makes `target` a cpuset partition of `cpus` (controller/partition.rs
    /// decides which and when).
    pub(super) fn write_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
        mode: PartitionMode,
    ) -> PartitionOutcome {
        self.host.make_partition(target, cpus, mode)
    }

    /// The partition `target` is on the node now, if any (read only).
    pub(super) fn read_partition(&self, target: &PartitionTarget) -> Option<(String, CpuSet)> {
        self.host.partition_of(target)
    }

    /// Takes the partition of `target` apart again.
    pub(super) fn erase_partition(
        &mut self,
        target: &PartitionTarget,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError> {
        self.host.unmake_partition(target, cpus)
    }

    /// A housekeeping cgroup's `cpuset.cpus` (controller/housekeeping.rs
    /// decides the value and the order).
    pub(super) fn write_housekeeping(
        &mut self,
        cgroup: &ContainerCgroup,
        cpus: &CpuSet,
    ) -> Result<(), CgroupError> {
        self.host.set_housekeeping_cpus(cgroup, cpus)
    }

    /// The system partition's memory limit on `cgroup`
    /// (controller/system_partition.rs).
    pub(super) fn write_memory_limit(
        &mut self,
        cgroup: &ContainerCgroup,
        bytes: u64,
    ) -> Result<(), CgroupError> {
        self.host.set_memory_limit(cgroup, bytes)
    }
}

/// The exclusive CPUs of `placement` (0: shared), as a run record says.
fn exclusive_count(placement: &Placement) -> usize {
    if placement.is_exclusive() {
        placement.cpus.len()
    } else {
        0
    }
}
