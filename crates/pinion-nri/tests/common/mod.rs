//! Test support: a small in-memory CPU allocator implementing `NriHandler`
//! (the real controller lives in the agent), and helpers to run a plugin
//! against the fake runtime.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pinion_core::placement::{Placement, Pool, ResourceSettings};
use pinion_core::pod::guaranteed_cpus;
use pinion_core::CpuSet;
use pinion_nri::fake_runtime::{ContainerSpec, FakeOptions, FakeRuntime, PodSpec};
use pinion_nri::kube::{kube_container, kube_pod};
use pinion_nri::{
    Container, ContainerUpdate, Created, ErrorKind, HandlerError, NriHandler, Plugin,
    PluginOptions, PodSandbox, Resources, RuntimeInfo, UpdateSender,
};
use tokio::task::JoinHandle;

pub const ALL_CPUS: &str = "0-7";

#[derive(Default)]
pub struct State {
    /// container id → exclusive CPUs
    pub exclusive: BTreeMap<String, CpuSet>,
    /// container id → pod sandbox id, for every container in the shared pool
    pub shared: BTreeMap<String, String>,
    pub events: Vec<String>,
    pub runtime: Option<RuntimeInfo>,
    pub failed_updates: Vec<String>,
    /// What the runtime answered as applied (`Handler::updates_applied`).
    pub applied_updates: Vec<String>,
    pub synced_containers: usize,
    /// The requests answered, by method (`Handler::request_served`).
    pub served: Vec<&'static str>,
}

/// A simple allocator over CPUs 0-7 (NUMA node 0 = 0-3, node 1 = 4-7).
#[derive(Default)]
pub struct TestHandler {
    pub state: Mutex<State>,
    /// Push shared-pool changes through `UpdateContainers` instead of replies.
    pub unsolicited: bool,
    pub sender: OnceLock<UpdateSender>,
    /// Make `create_container` hang while set (to trigger the runtime's
    /// timeout); a create that hangs finishes once it is cleared.
    pub hang_create: std::sync::atomic::AtomicBool,
    /// Make `create_container` take this many milliseconds first.
    pub create_delay_ms: std::sync::atomic::AtomicU64,
    /// The order of `update_container`'s own update
    /// (`ContainerUpdate::order`).
    pub own_order: std::sync::atomic::AtomicU64,
}

fn all() -> CpuSet {
    CpuSet::parse_list(ALL_CPUS).unwrap()
}

fn mems_of(cpus: &CpuSet) -> CpuSet {
    let nodes: Vec<String> = cpus
        .iter()
        .map(|cpu| (cpu / 4).to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    CpuSet::parse_list(&nodes.join(",")).unwrap()
}

impl State {
    fn shared_pool(&self) -> CpuSet {
        self.exclusive
            .values()
            .fold(all(), |pool, set| pool.difference(set))
    }

    fn shared_updates(&self) -> Vec<ContainerUpdate> {
        let pool = self.shared_pool();
        self.shared
            .keys()
            .map(|id| ContainerUpdate {
                container_id: id.clone(),
                placement: placement(pool.clone(), CpuSet::new(), false),
                order: 0,
            })
            .collect()
    }
}

impl TestHandler {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn publish(&self, state: &State) -> Vec<ContainerUpdate> {
        let updates = state.shared_updates();
        if self.unsolicited {
            if let Some(sender) = self.sender.get() {
                sender.send(updates).unwrap();
            }
            return Vec::new();
        }
        updates
    }

    fn admit(&self, pod: &PodSandbox, container: &Container) -> Result<Created, HandlerError> {
        let kube = kube_pod(pod, &[container])?;
        let spec = kube_container(pod, container)?;
        let n = guaranteed_cpus(&kube, &spec);
        let mut state = self.lock();
        state.events.push(format!("create {}", spec.name));
        if n == 0 {
            state.shared.insert(container.id.clone(), pod.id.clone());
            let cpus = state.shared_pool();
            return Ok(Created {
                adjust: Some(placement(cpus, CpuSet::new(), false)),
                updates: Vec::new(),
            });
        }
        let pool = state.shared_pool();
        if pool.len() <= n {
            return Err(HandlerError::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "not enough cpus available to satisfy request: requested={n}, available={}",
                    pool.len().saturating_sub(1)
                ),
            ));
        }
        let cpus = CpuSet::from_iter(pool.iter().take(n));
        state.exclusive.insert(container.id.clone(), cpus.clone());
        let updates = self.publish(&state);
        Ok(Created {
            adjust: Some(placement(cpus.clone(), mems_of(&cpus), true)),
            updates,
        })
    }
}

impl NriHandler for TestHandler {
    fn request_served(&self, method: &'static str, took: std::time::Duration) {
        assert!(
            took < std::time::Duration::from_secs(60),
            "{method} took {took:?}"
        );
        self.lock().served.push(method);
    }

    async fn configure(&self, info: RuntimeInfo) -> Result<(), HandlerError> {
        self.lock().runtime = Some(info);
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        let mut state = self.lock();
        state.synced_containers = containers.len();
        state.events.push(format!(
            "synchronize {} pods {} containers",
            pods.len(),
            containers.len()
        ));
        for c in &containers {
            let pod = pods.iter().find(|p| p.id == c.pod_sandbox_id);
            let wanted = pod
                .and_then(|p| {
                    Some(guaranteed_cpus(
                        &kube_pod(p, &[c]).ok()?,
                        &kube_container(p, c).ok()?,
                    ))
                })
                .unwrap_or(0);
            let current = CpuSet::parse_list(&c.resources.cpus).ok();
            match current {
                Some(cpus)
                    if wanted > 0
                        && cpus.len() == wanted
                        && !state
                            .exclusive
                            .iter()
                            .any(|(id, s)| *id != c.id && s.intersection_len(&cpus) > 0) =>
                {
                    state.exclusive.insert(c.id.clone(), cpus);
                }
                _ => {
                    state.shared.insert(c.id.clone(), c.pod_sandbox_id.clone());
                }
            }
        }
        Ok(state.shared_updates())
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> Result<Created, HandlerError> {
        while self.hang_create.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let delay = self
            .create_delay_ms
            .load(std::sync::atomic::Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.admit(&pod, &container)
    }

    async fn update_container(
        &self,
        _pod: PodSandbox,
        container: Container,
        resources: Resources,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        let state = self.lock();
        if let Some(cpus) = state.exclusive.get(&container.id) {
            if resources.cpu_shares.is_some()
                && resources.cpu_shares != container.resources.cpu_shares
            {
                return Err(HandlerError::new(
                    ErrorKind::Unsupported,
                    format!("container {} has exclusive CPUs {cpus}; changing its CPU request is not supported", container.id),
                ));
            }
            return Ok(vec![ContainerUpdate {
                container_id: container.id.clone(),
                placement: placement(cpus.clone(), mems_of(cpus), true),
                order: self.own_order.load(std::sync::atomic::Ordering::SeqCst),
            }]);
        }
        if !state.shared.contains_key(&container.id) {
            return Err(HandlerError::new(
                ErrorKind::NotFound,
                format!("unknown container {}", container.id),
            ));
        }
        Ok(Vec::new())
    }

    async fn stop_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<Vec<ContainerUpdate>, HandlerError> {
        let mut state = self.lock();
        state.events.push(format!("stop {}", container.name));
        state.shared.remove(&container.id);
        if state.exclusive.remove(&container.id).is_none() {
            return Ok(Vec::new());
        }
        Ok(self.publish(&state))
    }

    async fn remove_container(
        &self,
        _pod: PodSandbox,
        container: Container,
    ) -> Result<(), HandlerError> {
        let mut state = self.lock();
        state.events.push(format!("remove {}", container.name));
        state.shared.remove(&container.id);
        state.exclusive.remove(&container.id);
        Ok(())
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> Result<(), HandlerError> {
        let mut state = self.lock();
        state.events.push(format!("remove pod {}", pod.name));
        state.shared.retain(|_, p| *p != pod.id);
        Ok(())
    }

    fn updates_failed(&self, container_ids: Vec<String>) -> impl Future<Output = ()> + Send {
        self.lock().failed_updates.extend(container_ids);
        async {}
    }

    fn updates_applied(&self, container_ids: Vec<String>) -> impl Future<Output = ()> + Send {
        self.lock().applied_updates.extend(container_ids);
        async {}
    }
}

/// A fake runtime on a fresh socket path.
pub fn runtime(dir: &Path, options: FakeOptions) -> (FakeRuntime, PathBuf) {
    let path = dir.join("nri.sock");
    (FakeRuntime::start(&path, options).unwrap(), path)
}

pub fn options(path: &Path) -> PluginOptions {
    let mut options = PluginOptions::external("pinion", "90", path).unwrap();
    options.backoff_initial = Duration::from_millis(10);
    options.backoff_max = Duration::from_millis(100);
    options
}

/// A running plugin; dropping it stops the plugin.
pub struct Running {
    pub handler: Arc<TestHandler>,
    pub sender: UpdateSender,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: JoinHandle<Result<(), pinion_nri::PluginError>>,
}

impl Running {
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.unwrap().unwrap();
    }
}

pub fn start_plugin(options: PluginOptions, handler: TestHandler) -> Running {
    let handler = Arc::new(handler);
    let (plugin, sender) = Plugin::new(options, Arc::clone(&handler));
    let _ = handler.sender.set(sender.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(plugin.run(async {
        let _ = stopped.await;
    }));
    Running {
        handler,
        sender,
        stop: Some(stop),
        task,
    }
}

pub fn burstable_pod(name: &str) -> PodSpec {
    PodSpec {
        name: name.to_string(),
        uid: format!("uid-{name}"),
        namespace: "default".to_string(),
        cgroup_parent: format!("/kubepods/burstable/pod-uid-{name}"),
        annotations: BTreeMap::new(),
        pod_resources: None,
    }
}

/// Runs Burstable pod `name` with one container of 100m, in the shared
/// pool; returns the container's id.
pub async fn shared_container(fake: &FakeRuntime, name: &str) -> String {
    let pod = fake.run_pod(burstable_pod(name)).await.unwrap();
    fake.create_container(&pod, container(name, 100))
        .await
        .unwrap()
}

/// Runs Guaranteed pod `name` with one started container of `milli`;
/// returns the container's id.
pub async fn started_guaranteed(fake: &FakeRuntime, name: &str, milli: u64) -> String {
    let pod = fake.run_pod(guaranteed_pod(name)).await.unwrap();
    let id = fake
        .create_container(&pod, container(name, milli))
        .await
        .unwrap();
    fake.start_container(&id).await.unwrap();
    id
}

pub fn guaranteed_pod(name: &str) -> PodSpec {
    PodSpec {
        cgroup_parent: format!("/kubepods/pod-uid-{name}"),
        ..burstable_pod(name)
    }
}

/// A container with `milli` CPU (request = limit) and 1 GiB memory limit.
pub fn container(name: &str, milli: u64) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        resources: Resources {
            cpu_shares: Some((milli * 1024 / 1000).max(2)),
            cpu_quota: Some(i64::try_from(milli * 100).unwrap()),
            cpu_period: Some(100_000),
            memory_limit: Some(1 << 30),
            ..Resources::default()
        },
        annotations: BTreeMap::new(),
    }
}

/// Polls `check` until it holds (gives up after ~10 s; not a timing assertion).
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// A placement of `cpus` (memory nodes `mems`, empty = leave them), with
/// no CFS quota when `exclusive`.
pub fn placement(cpus: CpuSet, mems: CpuSet, exclusive: bool) -> Placement {
    Placement {
        cpus,
        mems,
        pool: if exclusive {
            Pool::Exclusive
        } else {
            Pool::Shared
        },
        resources: ResourceSettings {
            cpu_quota: exclusive.then_some(-1),
            ..ResourceSettings::default()
        },
        env: BTreeMap::new(),
        annotations: BTreeMap::new(),
    }
}
