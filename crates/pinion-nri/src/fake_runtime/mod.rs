//! A fake NRI runtime for tests (feature `fake-runtime`). It speaks the real
//! protocol bytes over a unix socket: accepts a plugin's registration, sends
//! Configure and Synchronize (optionally in chunks), relays pod and container
//! lifecycle events (as NRI v0.8 `StateChange` or v0.12 dedicated RPCs with the
//! UNIMPLEMENTED fallback), applies adjustments and updates to its model of
//! containers, enforces request timeouts (disconnect + fail-open, like
//! containerd), rejects frames above 4096 bytes (like the Go side), and can be
//! stopped and started again while its containers keep running.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use crate::conn::{CallError, Connection};
use crate::model::Resources;
use crate::proto::nri as pb;
use crate::status::Status;

mod events;
mod session;

pub use events::FakeError;

/// How the fake runtime behaves.
#[derive(Debug, Clone)]
pub struct FakeOptions {
    pub request_timeout: Duration,
    pub registration_timeout: Duration,
    /// Containers per Synchronize chunk (the last chunk has `more=false`).
    pub sync_chunk: usize,
    /// NRI v0.12 behaviour: dedicated RPCs, StateChange only after UNIMPLEMENTED.
    pub dedicated_rpcs: bool,
    /// The configuration string sent in Configure.
    pub config: String,
    /// Send the remaining budget in `timeout_nano` (as the Go ttrpc client does).
    pub send_deadline: bool,
    /// containerd 1.7's two NRI locks (containerd/containerd#13733), with
    /// this window: an event holds the runtime's lock and takes the
    /// adaptation's after the window; an unsolicited `UpdateContainers`
    /// holds the adaptation's and takes the runtime's after the window. An
    /// update that meets an event deadlocks them for good. `None`: one lock.
    pub two_locks: Option<Duration>,
}

impl Default for FakeOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(2),
            registration_timeout: Duration::from_secs(5),
            sync_chunk: 1000,
            dedicated_rpcs: false,
            config: String::new(),
            send_deadline: true,
            two_locks: None,
        }
    }
}

impl FakeOptions {
    /// containerd 1.7 as containerd/containerd#13733 describes it: its two
    /// NRI locks taken in opposite orders by events and by unsolicited
    /// updates, with a window that makes their race certain.
    #[must_use]
    pub fn containerd_1_7() -> Self {
        Self {
            two_locks: Some(Duration::from_millis(50)),
            ..Self::default()
        }
    }
}

/// What a test gives to create a pod.
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub cgroup_parent: String,
    pub annotations: BTreeMap<String, String>,
    /// The pod cgroup's resources (kubelet's pod-level resources).
    pub pod_resources: Option<Resources>,
}

/// What a test gives to create a container.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub name: String,
    pub resources: Resources,
    pub annotations: BTreeMap<String, String>,
}

pub(crate) struct Link {
    conn: Arc<Connection>,
    name: String,
    index: String,
    events: StdMutex<i32>,
}

pub(crate) struct Inner {
    options: FakeOptions,
    model: StdMutex<Model>,
    link: Mutex<Option<Arc<Link>>>,
    /// containerd's NRI lock: held while an event is relayed and while an
    /// unsolicited update is applied.
    nri_lock: Mutex<()>,
    /// The adaptation's lock of [`FakeOptions::two_locks`].
    adaptation_lock: Mutex<()>,
    synced: watch::Sender<u64>,
    largest_frame: AtomicUsize,
    log: StdMutex<Vec<String>>,
}

#[derive(Default)]
struct Model {
    pods: BTreeMap<String, pb::PodSandbox>,
    containers: BTreeMap<String, pb::Container>,
    next_id: u64,
}

/// The fake runtime.
pub struct FakeRuntime {
    path: PathBuf,
    inner: Arc<Inner>,
    accept: StdMutex<Option<JoinHandle<()>>>,
}

impl FakeRuntime {
    /// Listens on `path` (which must not exist).
    pub fn start(path: &Path, options: FakeOptions) -> std::io::Result<Self> {
        let (synced, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            options,
            model: StdMutex::new(Model::default()),
            link: Mutex::new(None),
            nri_lock: Mutex::new(()),
            adaptation_lock: Mutex::new(()),
            synced,
            largest_frame: AtomicUsize::new(0),
            log: StdMutex::new(Vec::new()),
        });
        let runtime = Self {
            path: path.to_path_buf(),
            inner,
            accept: StdMutex::new(None),
        };
        runtime.listen()?;
        Ok(runtime)
    }

    fn listen(&self) -> std::io::Result<()> {
        let listener = UnixListener::bind(&self.path)?;
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move {
            let mut sessions = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                sessions.push(AbortOnDrop(tokio::spawn(session::serve(
                    Arc::clone(&inner),
                    stream,
                ))));
            }
        });
        *self
            .accept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
        Ok(())
    }

    /// The runtime goes away: closes the plugin connection and the socket.
    /// Containers and pods are kept (the shims keep running).
    pub async fn stop(&self) {
        let task = self
            .accept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        if let Some(link) = self.inner.link.lock().await.take() {
            link.conn.close("runtime stopped").await;
        }
        let _ = std::fs::remove_file(&self.path);
    }

    /// The runtime comes back on the same socket path.
    pub fn restart(&self) -> std::io::Result<()> {
        self.listen()
    }

    /// Waits until `count` plugin sessions have completed Synchronize.
    pub async fn wait_synced(&self, count: u64) {
        let mut rx = self.inner.synced.subscribe();
        let _ = rx.wait_for(|n| *n >= count).await;
    }

    /// The number of completed plugin sessions so far.
    #[must_use]
    pub fn sessions(&self) -> u64 {
        *self.inner.synced.borrow()
    }

    /// The registered plugin's `(index, name)`, if connected.
    pub async fn plugin(&self) -> Option<(String, String)> {
        self.inner
            .link
            .lock()
            .await
            .as_ref()
            .map(|l| (l.index.clone(), l.name.clone()))
    }

    /// The plugin's subscription mask from Configure.
    pub async fn event_mask(&self) -> Option<i32> {
        let link = self.inner.link.lock().await.clone()?;
        let mask = *link
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(mask)
    }

    /// Calls a Plugin method directly (raw payload).
    pub async fn call_plugin(&self, method: &str, payload: Vec<u8>) -> Result<Vec<u8>, CallError> {
        let link = self
            .inner
            .link
            .lock()
            .await
            .clone()
            .ok_or_else(|| CallError::Closed {
                method: method.to_string(),
            })?;
        link.call(&self.inner, method, payload).await
    }

    /// Writes raw bytes to the plugin connection.
    pub async fn send_raw(&self, bytes: &[u8]) -> Result<(), CallError> {
        let link = self
            .inner
            .link
            .lock()
            .await
            .clone()
            .ok_or_else(|| CallError::Closed {
                method: "raw write".to_string(),
            })?;
        link.conn.send_raw(bytes).await
    }

    /// The largest frame received from any plugin connection so far.
    pub async fn largest_frame_from_plugin(&self) -> usize {
        let current = self
            .inner
            .link
            .lock()
            .await
            .as_ref()
            .map_or(0, |l| l.conn.largest_in_frame());
        current.max(self.inner.largest_frame.load(Ordering::Relaxed))
    }

    /// A container's current state in the model.
    #[must_use]
    pub fn container(&self, id: &str) -> Option<pb::Container> {
        self.inner.model().containers.get(id).cloned()
    }

    /// A pod sandbox as the model holds it.
    #[must_use]
    pub fn pod(&self, id: &str) -> Option<pb::PodSandbox> {
        self.inner.model().pods.get(id).cloned()
    }

    /// A container's cpuset.cpus ("" when unset or unknown).
    #[must_use]
    pub fn cpus(&self, id: &str) -> String {
        self.container(id)
            .and_then(|c| c.linux?.resources?.cpu)
            .map(|cpu| cpu.cpus)
            .unwrap_or_default()
    }

    /// A container's CFS quota, if set.
    #[must_use]
    pub fn quota(&self, id: &str) -> Option<i64> {
        self.container(id)
            .and_then(|c| c.linux?.resources?.cpu?.quota)
            .map(|q| q.value)
    }

    /// Ids of all containers.
    #[must_use]
    pub fn container_ids(&self) -> Vec<String> {
        self.inner.model().containers.keys().cloned().collect()
    }

    /// What happened, in order (events sent, updates applied, disconnects).
    #[must_use]
    pub fn log(&self) -> Vec<String> {
        self.inner
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// True when an unsolicited update was applied to container `id`, the
    /// first of them after the last event this runtime sent the plugin.
    pub fn unsolicited_update_followed_the_events(&self, id: &str) -> bool {
        let log = self.log();
        let last_event = log.iter().rposition(|l| l.contains("sent"));
        let applied = log
            .iter()
            .position(|l| *l == format!("UpdateContainers applied to {id}"));
        matches!((last_event, applied), (Some(event), Some(update)) if event < update)
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        if let Some(task) = self
            .accept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Inner {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn note(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
    }

    fn snapshot(&self) -> (Vec<pb::PodSandbox>, Vec<pb::Container>) {
        let model = self.model();
        (
            model.pods.values().cloned().collect(),
            model.containers.values().cloned().collect(),
        )
    }

    /// Applies updates; returns those naming unknown containers.
    fn apply_updates(
        &self,
        updates: &[pb::ContainerUpdate],
        source: &str,
    ) -> Vec<pb::ContainerUpdate> {
        let mut failed = Vec::new();
        let mut model = self.model();
        for update in updates {
            let resources = update.linux.as_ref().and_then(|l| l.resources.as_ref());
            if session::apply_to(&mut model.containers, &update.container_id, resources) {
                self.note(format!("{source} applied to {}", update.container_id));
            } else {
                failed.push(update.clone());
            }
        }
        failed
    }
}

/// Merges the set fields of `resources` into the container's resources.
/// A creation's adjustment as a runtime applies it: annotations set, each
/// environment variable replacing one of the same name, resources and the
/// OOM score adjustment.
fn apply_adjustment(container: &mut pb::Container, adjust: pb::ContainerAdjustment) {
    container.annotations.extend(adjust.annotations);
    for pb::KeyValue { key, value } in adjust.env {
        let prefix = format!("{key}=");
        container.env.retain(|e| !e.starts_with(&prefix));
        container.env.push(format!("{key}={value}"));
    }
    let Some(linux) = adjust.linux else { return };
    if let Some(resources) = &linux.resources {
        apply_resources(container, resources);
    }
    if let Some(adj) = linux.oom_score_adj {
        container
            .linux
            .get_or_insert_with(Default::default)
            .oom_score_adj = Some(pb::OptionalInt64 { value: adj.value });
    }
}

fn apply_resources(container: &mut pb::Container, resources: &pb::LinuxResources) {
    let linux = container.linux.get_or_insert_with(Default::default);
    let current = linux.resources.get_or_insert_with(Default::default);
    if let Some(new) = &resources.cpu {
        let cpu = current.cpu.get_or_insert_with(Default::default);
        if !new.cpus.is_empty() {
            cpu.cpus.clone_from(&new.cpus);
        }
        if !new.mems.is_empty() {
            cpu.mems.clone_from(&new.mems);
        }
        cpu.shares = new.shares.or(cpu.shares);
        cpu.quota = new.quota.or(cpu.quota);
        cpu.period = new.period.or(cpu.period);
    }
    if let Some(memory) = &resources.memory {
        let current = current.memory.get_or_insert_with(Default::default);
        current.limit = memory.limit.or(current.limit);
        current.swap = memory.swap.or(current.swap);
    }
}

/// A plugin error as the fake runtime saw it.
fn status_of(err: &CallError) -> Option<&Status> {
    match err {
        CallError::Status { status, .. } => Some(status),
        _ => None,
    }
}
