//! The NRI front-end: [`NriFrontend`] implements `pinion_nri::NriHandler`
//! over the [`ControllerHandle`]. The runtime (containerd, CRI-O) applies
//! the placements Pinion answers; Pinion creates no cgroup for these
//! containers (`Frontend::Runtime`). Changes to other containers (the
//! shared pool shrinking, drift, retries) come from the controller's
//! executor as batches, which [`NriFrontend::forward_updates`] hands to the
//! plugin stub. A `CreateContainer`, `UpdateContainer` or `StopContainer`
//! hands over its own before it returns, so that its reply carries them:
//! containerd 1.7 can deadlock on an unsolicited update
//! (`pinion_nri::outbox`). A batch that only gives containers more (the
//! executor's `RuntimeUpdate::only_adds`) is handed over as a growth, which
//! waits longer for a reply to carry it. Design: `docs/design.md`, usage:
//! `docs/nri.md`.

pub mod request_times;
mod state;
mod sync;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use pinion_core::{CpuSet, Placement};
use pinion_host::cgroup::ContainerCgroup;
use pinion_nri::kube::milli_cpu_from_shares;
use pinion_nri::{
    Container, ContainerUpdate, Created, ErrorKind, HandlerError, NriHandler, PodSandbox,
    Resources, RuntimeInfo, UpdateSender, Urgency,
};
use tokio::sync::{mpsc, watch};

use crate::controller::{
    AdmitRequest, ControlError, ControllerHandle, Frontend, Key, RunningContainer, RuntimeUpdate,
};
use crate::nrt::pod_requests::PodRequests;
use request_times::RequestTimes;
pub use state::kubelet_admission_text;
use state::{follower_key, handler_error, identify, observed, sandbox_cgroup, Entry, Tracked};

/// The NRI front-end (one per agent).
pub struct NriFrontend {
    handle: ControllerHandle,
    tracked: Mutex<Tracked>,
    updates: OnceLock<UpdateSender>,
    /// The executor's runtime updates not yet handed to the plugin stub
    /// (set by [`NriFrontend::forward_updates`]).
    queued: Mutex<Option<mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>>>,
    /// The API server's pods of this node (their extended requests), with
    /// credentials (`crate::nrt::pod_requests`).
    pod_requests: Option<PodRequests>,
    /// How long each runtime request took to answer (`/metrics`).
    request_times: Arc<RequestTimes>,
}

impl NriFrontend {
    #[must_use]
    pub fn new(handle: ControllerHandle) -> Self {
        Self {
            handle,
            tracked: Mutex::new(Tracked::default()),
            updates: OnceLock::new(),
            queued: Mutex::new(None),
            pod_requests: None,
            request_times: Arc::default(),
        }
    }

    /// Records the runtime's requests' durations in `times` (shared with
    /// the metrics endpoint).
    #[must_use]
    pub fn with_request_times(mut self, times: Arc<RequestTimes>) -> Self {
        self.request_times = times;
        self
    }

    /// Admissions take the pods' extended requests from the API server's
    /// pods in `cache` (unless a pod names them in `pinion.dev/requests`).
    #[must_use]
    pub fn with_pod_requests(mut self, cache: PodRequests) -> Self {
        self.pod_requests = Some(cache);
        self
    }

    /// Sets the sender of unsolicited updates (once, after `Plugin::new`).
    pub fn set_update_sender(&self, sender: UpdateSender) {
        let _ = self.updates.set(sender);
    }

    fn tracked(&self) -> MutexGuard<'_, Tracked> {
        self.tracked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands every batch of the executor's runtime updates to the plugin
    /// stub (which sends it in the next event reply that can carry it, or
    /// unsolicited once the runtime is quiet) until `stop` turns true.
    pub async fn forward_updates(
        &self,
        batches: mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>,
        mut stop: watch::Receiver<bool>,
    ) {
        *self.lock_queued() = Some(batches);
        loop {
            let unsent = tokio::select! {
                unsent = std::future::poll_fn(|cx| self.poll_hand_over(cx)) => match unsent {
                    Some(unsent) => unsent,
                    None => break,
                },
                _ = stop.changed() => break,
            };
            self.report_unsent(unsent).await;
        }
    }

    fn lock_queued(&self) -> MutexGuard<'_, Option<mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>>> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the executor's next batch and hands it over (under the
    /// queue's lock, so batches keep their order); `None` once the executor
    /// is gone. Returns the containers whose update could not be handed over.
    fn poll_hand_over(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Vec<String>>> {
        let mut queued = self.lock_queued();
        let Some(batches) = queued.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        batches
            .poll_recv(cx)
            .map(|batch| batch.map(|batch| self.hand_over(batch)))
    }

    /// Hands over every batch the executor has queued by now: called by the
    /// handlers whose reply carries updates, once the controller answered
    /// (its executor queued the command's updates before answering).
    async fn hand_over_queued(&self) {
        let mut unsent = Vec::new();
        {
            let mut queued = self.lock_queued();
            if let Some(batches) = queued.as_mut() {
                while let Ok(batch) = batches.try_recv() {
                    unsent.extend(self.hand_over(batch));
                }
            }
        }
        self.report_unsent(unsent).await;
    }

    /// Gives `batch` to the plugin stub; returns its containers when there
    /// is no plugin to take it.
    fn hand_over(&self, batch: Vec<RuntimeUpdate>) -> Vec<String> {
        let urgency = if batch.iter().all(|u| u.only_adds) {
            Urgency::Growth
        } else {
            Urgency::Prompt
        };
        tracing::info!(containers = batch.len(), ?urgency, "updating containers");
        let ids: Vec<String> = batch.iter().map(|u| u.container_id.clone()).collect();
        let sent = self.updates.get().is_some_and(|sender| {
            let updates = to_nri(batch, &self.tracked());
            sender.send_as(updates, urgency).is_ok()
        });
        if sent {
            Vec::new()
        } else {
            ids
        }
    }

    /// `answer`, once the updates it queued are handed over, so that the
    /// reply carries them.
    async fn answer_with_own_updates<T>(&self, answer: impl std::future::Future<Output = T>) -> T {
        let answer = answer.await;
        self.hand_over_queued().await;
        answer
    }

    async fn report_unsent(&self, unsent: Vec<String>) {
        if !unsent.is_empty() {
            tracing::warn!("nri plugin not running; updates are sent again later");
            self.handle.runtime_updates_failed(unsent).await;
        }
    }

    /// Releases the container behind `entry`.
    async fn release(&self, entry: Option<Entry>) -> Result<(), HandlerError> {
        match entry {
            Some(entry) => self.release_key(entry.key).await,
            None => Ok(()),
        }
    }

    /// Releases the container of `key` (one Pinion does not know is no
    /// error).
    async fn release_key(&self, (pod, container): Key) -> Result<(), HandlerError> {
        match self.handle.release(pod, Some(container)).await {
            Ok(_) | Err(ControlError::NotFound { .. }) => Ok(()),
            Err(err) => Err(handler_error(err)),
        }
    }

    /// Releases every container of sandbox `pod_id`, running or held for a
    /// restart; `forget`: the sandbox itself goes too.
    async fn release_pod(&self, pod_id: &str, forget: bool) -> Result<(), HandlerError> {
        let (entries, stopped): (Vec<Entry>, Vec<Key>) = {
            let mut tracked = self.tracked();
            if forget {
                tracked.pods.remove(pod_id);
                tracked.live_pods.remove(pod_id);
            }
            let ids: Vec<String> = tracked
                .siblings(pod_id, "")
                .into_iter()
                .map(|c| c.id)
                .collect();
            let entries = ids.iter().filter_map(|id| tracked.forget(id)).collect();
            (entries, tracked.take_stopped(pod_id))
        };
        tracing::debug!(pod = %pod_id, running = entries.len(), held = stopped.len(), "pod sandbox ended: releasing its containers");
        for entry in entries {
            self.release(Some(entry)).await?;
        }
        for key in stopped {
            self.release_key(key).await?;
        }
        Ok(())
    }

    /// The placement Pinion holds for `key` now (the shared pool for a
    /// container it does not know).
    fn current(&self, (pod, container): &Key) -> Placement {
        self.handle.snapshot().placement_of(pod, container)
    }
}

/// The container's cgroup from NRI's `linux.cgroups_path`, for the
/// reconcile pass; `None` (logged) when the runtime sent none or one that
/// does not resolve — the container is placed all the same, only its
/// cpuset is not checked.
fn cgroup_of(container: &Container) -> Option<ContainerCgroup> {
    if container.cgroups_path.is_empty() {
        return None;
    }
    ContainerCgroup::resolve(&container.cgroups_path)
        .map_err(|err| {
            tracing::warn!(container = %container.id, "{err}; its cpuset is not reconciled");
        })
        .ok()
}

/// The executor's updates as NRI's, with the runtime's own value back in
/// each setting Pinion no longer gives (`tracked`: the containers as the
/// runtime created them; one it does not list gets an unset setting's).
fn to_nri(batch: Vec<RuntimeUpdate>, tracked: &Tracked) -> Vec<ContainerUpdate> {
    batch
        .into_iter()
        .map(|u| {
            let mut placement = u.placement;
            if !u.taken_back.is_empty() {
                match tracked.containers.get(&u.container_id) {
                    Some(entry) => entry
                        .container
                        .resources
                        .give_back(&mut placement, &u.taken_back),
                    None => Resources::default().give_back(&mut placement, &u.taken_back),
                }
            }
            ContainerUpdate {
                container_id: u.container_id,
                placement,
                order: u.pass,
            }
        })
        .collect()
}

impl NriHandler for NriFrontend {
    fn request_served(&self, method: &'static str, took: Duration) {
        self.request_times.observe(method, took);
    }

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
        let started = std::time::Instant::now();
        for pod in &pods {
            if let Ok(uid) = pinion_nri::kube::pod_uid(pod) {
                if let Err(err) = self.register_pod_resources(pod, &uid).await {
                    tracing::warn!(pod = %uid, "{err}");
                }
            }
        }
        let mut fresh = sync::track_all(pods, containers);
        let specs = sync::pod_specs(&fresh);
        // One container per key: the one its placement follows.
        let running: Vec<RunningContainer> = fresh
            .containers
            .iter()
            .filter(|(id, entry)| {
                let current = fresh.is_current(id);
                if !current {
                    tracing::info!(pod = %entry.key.0, container = %entry.key.1, id = %id, state = ?entry.container.state, "a superseded attempt of the container is listed beside the one its placement follows: left alone");
                }
                current
            })
            .map(|(id, entry)| RunningContainer {
                key: entry.key.clone(),
                container_id: id.clone(),
                observed: observed(&entry.container),
                pod: specs
                    .get(&entry.container.pod_sandbox_id)
                    .filter(|spec| spec.uid == entry.key.0)
                    .cloned(),
                cgroup: cgroup_of(&entry.container),
                late: None,
            })
            .collect();
        let sandboxes = sync::kube_sandboxes(&fresh);
        let mut restartable: BTreeMap<String, Vec<ContainerCgroup>> = BTreeMap::new();
        for (uid, _, cgroup) in &sandboxes {
            restartable
                .entry(uid.clone())
                .or_default()
                .push(cgroup.clone());
        }
        let synced = self
            .handle
            .sync_runtime(running, restartable)
            .await
            .map_err(handler_error)?;
        for (key, cgroup) in &synced.held {
            let sandbox = sandboxes
                .iter()
                .find(|(uid, _, c)| *uid == key.0 && c == cgroup);
            if let Some((_, id, _)) = sandbox {
                fresh.stopped.insert(key.clone(), id.clone());
            }
        }
        // The time taken, against the runtime's request timeout: a slower
        // answer gets the plugin dropped (containerd's default is 2 s).
        tracing::info!(containers = fresh.containers.len(), released = ?synced.released.containers, held = synced.held.len(), updated = synced.updates.len(), took = ?started.elapsed(), "nri synchronized");
        let mut tracked = self.tracked();
        *tracked = fresh;
        Ok(to_nri(synced.updates, &tracked))
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> Result<Created, HandlerError> {
        self.answer_with_own_updates(self.create(pod, container))
            .await
    }

    /// The runtime created the container's task (its cgroup exists) and
    /// starts it next: the executor makes an exclusive container's cpuset
    /// partition now (`exclusiveCpus.partition`), before its process runs.
    /// Never an error: a container is not refused for its partition.
    async fn start_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<(), HandlerError> {
        if let Err(err) = self.handle.container_started(container.id.clone()).await {
            tracing::warn!(container = %container.id, "started container not recorded: {err}");
        }
        Ok(())
    }

    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Resources,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        self.answer_with_own_updates(self.update(pod, container, resources))
            .await
    }

    async fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        self.answer_with_own_updates(self.stop(pod, container))
            .await
    }

    async fn remove_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<(), HandlerError> {
        // Released (or held for a restart) at stop already, unless the
        // container never ran.
        let entry = self.tracked().take_current(&container.id);
        self.release(entry).await
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> Result<(), HandlerError> {
        self.release_pod(&pod.id, false).await
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> Result<(), HandlerError> {
        self.release_pod(&pod.id, true).await?;
        if let Ok(uid) = pinion_nri::kube::pod_uid(&pod) {
            self.handle.pod_removed(uid).await;
        }
        Ok(())
    }

    async fn updates_failed(&self, container_ids: Vec<String>) {
        tracing::warn!(
            ?container_ids,
            "the runtime failed to apply container updates; they are sent again at the next reconcile"
        );
        self.handle.runtime_updates_failed(container_ids).await;
    }

    async fn updates_applied(&self, container_ids: Vec<String>) {
        self.handle.runtime_updates_applied(container_ids).await;
    }
}

/// The CPU request (millicores, from cpu.shares) an update asks the policy
/// to resize to: a change of an exclusive container's whole CPUs, or a
/// whole-CPU request of a shared one (the policy refuses moving a
/// Guaranteed container between the shared pool and exclusive CPUs, and
/// leaves the others where they are). `None`: answer the current placement.
fn resize_request(placement: &Placement, resources: &Resources) -> Option<u64> {
    let milli = resources.cpu_shares.and_then(milli_cpu_from_shares)?;
    let held = u64::try_from(placement.cpus.len()).unwrap_or(u64::MAX) * 1000;
    let wanted = if placement.is_exclusive() {
        milli != held
    } else {
        milli % 1000 == 0
    };
    wanted.then_some(milli)
}

impl NriFrontend {
    async fn create(&self, pod: PodSandbox, container: Container) -> Result<Created, HandlerError> {
        let siblings = self.tracked().siblings(&pod.id, &container.id);
        let identity = identify(&pod, &container, &siblings)?;
        let (key, placement) = match identity {
            None => {
                let key = follower_key(&pod.id, &container);
                let placement = self
                    .handle
                    .follow(key.clone(), container.id.clone())
                    .await
                    .map_err(handler_error)?;
                (key, placement)
            }
            Some((key, mut spec)) => {
                if let Some(cache) = &self.pod_requests {
                    cache.fill(&mut spec).await;
                }
                self.register_pod_resources(&pod, &key.0).await?;
                let request = AdmitRequest {
                    pod: spec,
                    container: key.1.clone(),
                    frontend: Frontend::runtime_in(&container.id, cgroup_of(&container)),
                    cpu_owner: pinion_core::engine::CpuOwner::Policy,
                };
                let admitted = self.handle.admit(request).await.map_err(handler_error)?;
                (key, admitted.placement)
            }
        };
        let mut tracked = self.tracked();
        if !tracked.pods.contains_key(&pod.id) {
            tracked.live_pods.insert(pod.id.clone());
        }
        tracked.pods.insert(pod.id.clone(), pod);
        tracked.stopped.remove(&key);
        tracked.track(Entry { container, key });
        Ok(Created {
            adjust: Some(placement),
            updates: Vec::new(),
        })
    }

    async fn update(
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
        let placement = self.current(&entry.key);
        if let Some(milli) = resize_request(&placement, &resources) {
            self.resize(&entry.key, &placement, milli, &resources)
                .await?;
        }
        // kubelet's new values are the container's own from now on: what
        // a setting a plugin drops goes back to.
        if let Some(tracked) = self.tracked().containers.get_mut(&container.id) {
            tracked.container.resources.follow(&resources);
        }
        // The placement as of now, a resize's included, with the pass it is
        // as new as: a newer update queued before the reply goes out takes
        // its place there (`ContainerUpdate::order`).
        let snapshot = self.handle.snapshot();
        Ok(vec![ContainerUpdate {
            container_id: container.id,
            placement: snapshot.placement_of(&entry.key.0, &entry.key.1),
            order: snapshot.pass,
        }])
    }

    /// A Kubernetes container that stops while its pod runs is held, not
    /// released: kubelet keeps a terminated container's CPUs while its pod
    /// is active, so a restarted container gets the same CPUs (and its
    /// resource plugins' allocations, without a new `Allocate`) and no
    /// other pod can take them in between. The pod's stop releases it: the
    /// runtime relays it for the pods it created while Pinion was connected
    /// (`Tracked::live_pods`); for the others (known from a `Synchronize`,
    /// whose stop containerd 1.7 may never relay), the reconcile pass that
    /// finds the pod's sandbox cgroup gone does. A container of such a pod
    /// without a sandbox cgroup is released at once, as before.
    async fn stop(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        let (entry, live, known) = {
            let mut tracked = self.tracked();
            (
                tracked.take_current(&container.id),
                tracked.live_pods.contains(&pod.id),
                tracked.pods.get(&pod.id).cloned(),
            )
        };
        let Some(entry) = entry else {
            return Ok(Vec::new());
        };
        let sandbox = if live {
            None
        } else {
            sandbox_cgroup(&pod).or_else(|| known.as_ref().and_then(sandbox_cgroup))
        };
        if pinion_nri::kube::qos_class(&pod).is_ok() && (live || sandbox.is_some()) {
            let held = self
                .handle
                .park(entry.key.clone(), sandbox)
                .await
                .map_err(handler_error)?;
            if held {
                tracing::debug!(pod = %entry.key.0, container = %entry.key.1, "stopped; its placement is held for its next run until the pod stops");
                self.tracked().stopped.insert(entry.key, pod.id);
                return Ok(Vec::new());
            }
        }
        self.release(Some(entry)).await?;
        Ok(Vec::new())
    }

    /// Registers the pod-level resources of Kubernetes pod `uid` with the
    /// controller when the pod declares them (annotation
    /// `pinion.dev/pod-level-resources: "true"`); a malformed declaration
    /// fails the container.
    async fn register_pod_resources(
        &self,
        pod: &PodSandbox,
        uid: &str,
    ) -> Result<(), HandlerError> {
        let resources = pinion_nri::kube::kube_pod_resources(pod)?;
        if resources.is_some() {
            self.handle
                .set_pod_resources(uid.to_string(), resources)
                .await;
        }
        Ok(())
    }

    /// Resizes `key` in place (`featureGates:
    /// InPlacePodVerticalScalingExclusiveCPUs`): the controller decides and
    /// makes it durable, the reply answers the container's new placement
    /// (the shared-pool containers follow through the executor). A refusal fails
    /// the update with the policy's text (kubelet marks the resize
    /// infeasible). With the switch off an exclusive container's CPU count
    /// is refused as before and a shared container keeps its placement.
    async fn resize(
        &self,
        key: &Key,
        current: &Placement,
        milli: u64,
        resources: &Resources,
    ) -> Result<(), HandlerError> {
        let cpus = pinion_core::Quantity::parse(&format!("{milli}m")).map_err(|err| {
            HandlerError::new(
                ErrorKind::InvalidInput,
                format!(
                    "cpu request {milli}m of pod {} container {}: {err}",
                    key.0, key.1
                ),
            )
        })?;
        let refused = match self.handle.resize(key.clone(), cpus).await {
            Ok(_) => return Ok(()),
            Err(err) => err,
        };
        let nothing_to_resize = match &refused {
            ControlError::Resize { source, .. } => matches!(
                **source,
                pinion_core::policy::PolicyError::ResizeDisabled { .. }
            ),
            // A container outside Kubernetes (it follows the shared pool)
            // or one known only from the checkpoint: no pod to resize by.
            ControlError::ResizeUnknownSpec { .. } => true,
            _ => false,
        };
        if !nothing_to_resize {
            return Err(handler_error(refused));
        }
        if current.is_exclusive() {
            check_exclusive_resize(key, &current.cpus, resources)?;
        }
        Ok(())
    }
}

/// An in-place change of an exclusive container is accepted when its CPU
/// request stays the same number of whole CPUs (memory, quota and cpuset
/// changes are answered with its unchanged exclusive placement).
fn check_exclusive_resize(
    (pod, name): &Key,
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
    Err(HandlerError::new(
        ErrorKind::Unsupported,
        format!(
            "pod {pod} container {name} holds {} exclusive cpus ({cpus}); resizing its cpu request in place to {milli}m is not supported by pinion (recreate the pod to change it)",
            cpus.len()
        ),
    ))
}
