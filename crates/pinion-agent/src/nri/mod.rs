//! The NRI front-end: [`NriFrontend`] implements `pinion_nri::NriHandler`
//! over the [`ControllerHandle`]. The runtime (containerd, CRI-O) applies
//! the cpusets Pinion answers; Pinion creates no cgroup for these
//! containers (`Placement::Runtime`). Design: `docs/design.md`, usage:
//! `docs/nri.md`.

mod state;
mod sync;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use pinion_core::CpuSet;
use pinion_nri::kube::milli_cpu_from_shares;
use pinion_nri::{
    Container, ContainerUpdate, CpuAssignment, Created, ErrorKind, HandlerError, NriHandler,
    PodSandbox, Resources, RuntimeInfo, UpdateSender,
};
use tokio::sync::watch;

use crate::controller::{AdmitRequest, ControlError, ControllerHandle, Placement};
pub use state::kubelet_admission_text;
use state::{
    assignment_of, assignment_of_view, handler_error, identify, updates_to, Entry, Tracked,
};

/// The NRI front-end (one per agent).
pub struct NriFrontend {
    handle: ControllerHandle,
    tracked: Mutex<Tracked>,
    updates: OnceLock<UpdateSender>,
}

impl NriFrontend {
    #[must_use]
    pub fn new(handle: ControllerHandle) -> Self {
        Self {
            handle,
            tracked: Mutex::new(Tracked::default()),
            updates: OnceLock::new(),
        }
    }

    /// Sets the sender of unsolicited updates (once, after `Plugin::new`).
    pub fn set_update_sender(&self, sender: UpdateSender) {
        let _ = self.updates.set(sender);
    }

    fn tracked(&self) -> MutexGuard<'_, Tracked> {
        self.tracked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pushes every shared-pool change to the shared-pool containers with
    /// queued `UpdateContainers` (sent after the running handler, if any,
    /// returned) until `stop` turns true.
    pub async fn push_shared_pool(
        &self,
        mut pool: watch::Receiver<CpuSet>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                changed = pool.changed() => if changed.is_err() { break },
                _ = stop.changed() => break,
            }
            let cpus = pool.borrow_and_update().clone();
            let ids = self.tracked().shared_ids();
            if ids.is_empty() {
                continue;
            }
            tracing::info!(containers = ids.len(), pool = %cpus, "pushing the shared pool");
            let updates = updates_to(ids, &CpuAssignment::shared(cpus));
            if let Some(sender) = self.updates.get() {
                if sender.send(updates).is_err() {
                    tracing::warn!("nri plugin stopped; shared pool not pushed");
                }
            }
        }
    }

    /// Releases the container behind `entry`, if Pinion admitted it.
    async fn release(&self, entry: Option<Entry>) -> Result<(), HandlerError> {
        let Some((pod, container)) = entry.and_then(|e| e.key) else {
            return Ok(());
        };
        match self.handle.release(pod, Some(container)).await {
            Ok(_) | Err(ControlError::NotFound { .. }) => Ok(()),
            Err(err) => Err(handler_error(err)),
        }
    }

    fn shared_now(&self) -> CpuAssignment {
        CpuAssignment::shared(self.handle.snapshot().shared_pool.clone())
    }

    /// The state Pinion knows of `key` now (exclusive CPUs or the pool).
    fn current(&self, key: Option<&(String, String)>) -> CpuAssignment {
        let snapshot = self.handle.snapshot();
        key.and_then(|key| {
            snapshot
                .workloads
                .iter()
                .find(|w| w.pod == key.0 && w.container == key.1)
        })
        .map_or_else(|| self.shared_now(), assignment_of_view)
    }
}

impl NriHandler for NriFrontend {
    async fn configure(&self, info: RuntimeInfo) -> Result<(), HandlerError> {
        tracing::info!(runtime = %info.runtime_name, version = %info.runtime_version, "nri runtime configured");
        if info.config.trim().is_empty() {
            return Ok(());
        }
        Err(HandlerError::new(
            ErrorKind::InvalidInput,
            format!(
                "pinion takes no plugin configuration from the runtime (got {:?}): configure the agent with its config file and flags (see docs/nri.md)",
                info.config
            ),
        ))
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        let fresh = sync::track_all(pods, containers);
        let running: BTreeSet<_> = fresh
            .containers
            .values()
            .filter_map(|e| e.key.clone())
            .collect();
        let released = self
            .handle
            .sync_runtime(running)
            .await
            .map_err(handler_error)?;
        tracing::info!(containers = fresh.containers.len(), released = ?released.containers, "nri synchronized");
        let mut updates = Vec::new();
        let mut fresh = fresh;
        for (id, entry) in &mut fresh.containers {
            let assignment = self.current(entry.key.as_ref());
            entry.exclusive = assignment.unlimited_quota;
            updates.push(ContainerUpdate {
                container_id: id.clone(),
                assignment,
            });
        }
        *self.tracked() = fresh;
        Ok(updates)
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> Result<Created, HandlerError> {
        let siblings = self.tracked().siblings(&pod.id, &container.id);
        let identity = identify(&pod, &container, &siblings)?;
        let (key, assignment) = match identity {
            None => (None, self.shared_now()),
            Some((key, spec)) => {
                let request = AdmitRequest {
                    pod: spec,
                    container: key.1.clone(),
                    numa_affinity: None,
                    placement: Placement::Runtime,
                };
                let admitted = self.handle.admit(request).await.map_err(handler_error)?;
                (Some(key), assignment_of(&admitted))
            }
        };
        let mut tracked = self.tracked();
        tracked.pods.insert(pod.id.clone(), pod);
        tracked.containers.insert(
            container.id.clone(),
            Entry {
                exclusive: assignment.unlimited_quota,
                container,
                key,
            },
        );
        Ok(Created {
            adjust: Some(assignment),
            updates: Vec::new(),
        })
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Resources,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        let entry = self.tracked().containers.get(&container.id).cloned();
        let Some(entry) = entry else {
            return Err(HandlerError::new(
                ErrorKind::NotFound,
                format!(
                    "container {:?} ({}) of pod {:?} is not known to pinion; it will be placed at the next synchronization",
                    container.id, container.name, pod.name
                ),
            ));
        };
        let assignment = self.current(entry.key.as_ref());
        if assignment.unlimited_quota {
            check_exclusive_resize(&entry, &assignment.cpus, &resources)?;
        }
        Ok(vec![ContainerUpdate {
            container_id: container.id,
            assignment,
        }])
    }

    async fn stop_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        let entry = self.tracked().containers.remove(&container.id);
        self.release(entry).await?;
        Ok(Vec::new())
    }

    async fn remove_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<(), HandlerError> {
        // Released at stop already, unless the container never ran.
        let entry = self.tracked().containers.remove(&container.id);
        self.release(entry).await
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> Result<(), HandlerError> {
        let entries: Vec<Entry> = {
            let mut tracked = self.tracked();
            tracked.pods.remove(&pod.id);
            let ids: Vec<String> = tracked
                .siblings(&pod.id, "")
                .into_iter()
                .map(|c| c.id)
                .collect();
            ids.iter()
                .filter_map(|id| tracked.containers.remove(id))
                .collect()
        };
        for entry in entries {
            self.release(Some(entry)).await?;
        }
        Ok(())
    }

    async fn updates_failed(&self, container_ids: Vec<String>) {
        tracing::warn!(
            ?container_ids,
            "the runtime failed to apply shared-pool updates"
        );
    }
}

/// An in-place change of an exclusive container is accepted when its CPU
/// request stays the same number of whole CPUs (memory, quota and cpuset
/// changes are answered with its unchanged exclusive placement).
fn check_exclusive_resize(
    entry: &Entry,
    cpus: &CpuSet,
    resources: &Resources,
) -> Result<(), HandlerError> {
    let Some(milli) = resources.cpu_shares.and_then(milli_cpu_from_shares) else {
        return Ok(());
    };
    let have = u64::try_from(cpus.len()).unwrap_or(u64::MAX) * 1000;
    if milli == have {
        return Ok(());
    }
    let (pod, name) = entry.key.clone().unwrap_or_default();
    Err(HandlerError::new(
        ErrorKind::Unsupported,
        format!(
            "pod {pod} container {name} holds {} exclusive cpus ({cpus}); resizing its cpu request in place to {milli}m is not supported by pinion (recreate the pod to change it)",
            cpus.len()
        ),
    ))
}
