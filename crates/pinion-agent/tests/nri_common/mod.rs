//! A node for NRI tests: the fake runtime, the real controller (fake
//! cgroups, a temporary state dir) and the agent's NRI front-end.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pinion_agent::controller::{self, ControllerHandle};
use pinion_agent::hints::{HintGatherer, HintSource};
use pinion_agent::nri::NriFrontend;
use pinion_agent::nrt::pod_requests::PodRequests;
use pinion_agent::qrm::{Qrm, QrmHints};
use pinion_agent::testing::SyntheticNode;
use pinion_core::policy::{Features, PolicyConfig};
use pinion_core::topology::{synthetic, Shape};
use pinion_core::topomgr::Scope;
use pinion_core::{CpuSet, Topology};
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::{ContainerCgroup, ContainerCpuset};
use pinion_nri::fake_runtime::{ContainerSpec, FakeOptions, FakeRuntime, PodSpec};
use pinion_nri::{Plugin, PluginError, PluginOptions, Resources};
use tokio::sync::watch;

/// 2 sockets × 1 NUMA node × 2 cores × 2 threads: cpus 0-7, siblings
/// (0,4), (1,5) on node 0 and (2,6), (3,7) on node 1.
pub fn topology() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 2,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
}

/// The agent: controller thread, NRI plugin and shared-pool pusher.
pub struct Agent {
    pub handle: ControllerHandle,
    thread: std::thread::JoinHandle<()>,
    stop: watch::Sender<bool>,
    plugin: tokio::task::JoinHandle<Result<(), PluginError>>,
    pusher: tokio::task::JoinHandle<()>,
}

impl Agent {
    /// Starts the agent (static policy, 1 cpu reserved) on `state_dir`.
    pub fn start(state_dir: &Path, host: &FakeCgroups, socket: &Path) -> Self {
        Self::start_with(state_dir, host, socket, Features::default())
    }

    /// [`Agent::start`] with feature switches (`featureGates`).
    pub fn start_with(
        state_dir: &Path,
        host: &FakeCgroups,
        socket: &Path,
        features: Features,
    ) -> Self {
        let node = SyntheticNode {
            host: host.clone(),
            ..SyntheticNode::new(topology()).with_features(features)
        };
        Self::start_on(&node, state_dir, socket, None)
    }

    /// [`Agent::start`] with the QoS Resource Manager `qrm` (its hints
    /// gathered before admissions, its plugins allocating after); the
    /// caller starts `qrm`'s watcher and loops.
    pub fn start_with_qrm(
        state_dir: &Path,
        host: &FakeCgroups,
        socket: &Path,
        qrm: Arc<Qrm>,
    ) -> Self {
        Self::start_on(&synthetic_node(host), state_dir, socket, Some(qrm))
    }

    /// The agent on `node` (its policy, switches and cgroups), with the
    /// QoS Resource Manager when `qrm` is given.
    pub fn start_on(
        node: &SyntheticNode,
        state_dir: &Path,
        socket: &Path,
        qrm: Option<Arc<Qrm>>,
    ) -> Self {
        Self::start_with_pods(node, state_dir, socket, qrm, None)
    }

    /// [`Agent::start_on`], its NRI front-end reading the pods' extended
    /// requests from `pods` (the API server's pods of the node) when given.
    pub fn start_with_pods(
        node: &SyntheticNode,
        state_dir: &Path,
        socket: &Path,
        qrm: Option<Arc<Qrm>>,
        pods: Option<PodRequests>,
    ) -> Self {
        let (controller, updates) = node.start_with_runtime(state_dir).unwrap();
        let hints = match &qrm {
            Some(qrm) => HintGatherer::new(
                vec![Arc::new(QrmHints(Arc::clone(qrm))) as Arc<dyn HintSource>],
                Scope::Container,
                Duration::from_secs(10),
            ),
            None => HintGatherer::none(),
        };
        let (handle, thread) = controller::spawn_with(controller, hints, qrm).unwrap();
        let mut frontend = NriFrontend::new(handle.clone());
        if let Some(pods) = pods {
            frontend = frontend.with_pod_requests(pods);
        }
        let frontend = Arc::new(frontend);
        let mut options = PluginOptions::external("pinion", "90", socket).unwrap();
        options.backoff_initial = Duration::from_millis(10);
        options.backoff_max = Duration::from_millis(100);
        // A growth waits for a carrier or this long after the runtime's
        // last request (10 s in the agent), still longer than `quiet`.
        options.unsolicited.idle = Duration::from_secs(3);
        let (plugin, sender) = Plugin::new(options, Arc::clone(&frontend));
        frontend.set_update_sender(sender);
        let (stop, stop_rx) = watch::channel(false);
        let forwarder_stop = stop_rx.clone();
        let pusher =
            tokio::spawn(async move { frontend.forward_updates(updates, forwarder_stop).await });
        let mut plugin_stop = stop_rx;
        let plugin = tokio::spawn(plugin.run(async move {
            let _ = plugin_stop.wait_for(|s| *s).await;
        }));
        Self {
            handle,
            thread,
            stop,
            plugin,
            pusher,
        }
    }

    /// Stops everything (like SIGTERM).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.plugin.await.unwrap().unwrap();
        self.pusher.await.unwrap();
        self.handle.shutdown().await;
        tokio::task::spawn_blocking(move || self.thread.join())
            .await
            .unwrap()
            .unwrap();
    }
}

/// A node: state dir, fake cgroups, fake runtime.
pub struct Node {
    pub state: tempfile::TempDir,
    pub sockets: tempfile::TempDir,
    pub host: FakeCgroups,
    pub runtime: FakeRuntime,
}

impl Node {
    pub fn new() -> Self {
        Self::with_state(tempfile::tempdir().unwrap())
    }

    /// A node whose checkpoint lives in `state`.
    pub fn with_state(state: tempfile::TempDir) -> Self {
        Self::with_runtime(state, FakeOptions::default())
    }

    /// A node whose runtime behaves as `options` say.
    pub fn with_runtime(state: tempfile::TempDir, options: FakeOptions) -> Self {
        let sockets = tempfile::tempdir().unwrap();
        let runtime = FakeRuntime::start(&sockets.path().join("nri.sock"), options).unwrap();
        Self {
            state,
            sockets,
            host: FakeCgroups::default(),
            runtime,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.sockets.path().join("nri.sock")
    }

    /// Starts an agent and waits for its `sessions`-th synchronization.
    pub async fn agent(&self, sessions: u64) -> Agent {
        self.agent_with(sessions, Features::default()).await
    }

    /// [`Node::agent`] with feature switches and policy `config` (the
    /// Topology Manager's settings, options).
    pub async fn agent_with_config(
        &self,
        sessions: u64,
        features: Features,
        config: PolicyConfig,
    ) -> Agent {
        let node = SyntheticNode {
            host: self.host.clone(),
            ..SyntheticNode::new(topology())
                .with_features(features)
                .with_config(config)
        };
        let agent = Agent::start_on(&node, self.state.path(), &self.socket(), None);
        self.runtime.wait_synced(sessions).await;
        agent
    }

    /// [`Node::agent`] with feature switches.
    pub async fn agent_with(&self, sessions: u64, features: Features) -> Agent {
        let agent = Agent::start_with(self.state.path(), &self.host, &self.socket(), features);
        self.runtime.wait_synced(sessions).await;
        agent
    }

    /// The checkpoint file's bytes.
    /// The durable state's bytes, as kubelet's checkpoint: the checkpoint
    /// file with the journal's records replayed (what a restart starts
    /// from); empty before the first start.
    pub fn checkpoint(&self) -> Vec<u8> {
        let inspection = pinion_host::journal::inspect(self.state.path()).unwrap();
        let effective = match inspection.journal {
            Some(view) => view.unwrap().effective.unwrap(),
            None => inspection.checkpoint.map(Result::unwrap),
        };
        effective
            .map(|checkpoint| checkpoint.to_bytes().unwrap())
            .unwrap_or_default()
    }

    /// Waits (up to 10 s) until container `id` has cpuset `want`.
    pub async fn wait_cpus(&self, id: &str, want: &str) {
        for _ in 0..1000 {
            if self.runtime.cpus(id) == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(self.runtime.cpus(id), want, "container {id}");
    }

    /// cpuset.mems of container `id`.
    pub fn mems(&self, id: &str) -> String {
        self.runtime
            .container(id)
            .and_then(|c| c.linux?.resources?.cpu)
            .map(|cpu| cpu.mems)
            .unwrap_or_default()
    }

    /// The cgroup of pod `pod_id`'s sandbox (NRI's `linux.cgroups_path`).
    pub fn sandbox_cgroup(&self, pod_id: &str) -> ContainerCgroup {
        let path = self
            .runtime
            .pod(pod_id)
            .and_then(|p| p.linux)
            .map(|l| l.cgroups_path)
            .unwrap();
        ContainerCgroup::resolve(&path).unwrap()
    }

    /// Makes pod `pod_id`'s sandbox cgroup exist on the fake host (`true`,
    /// as while the pod runs) or be gone (`false`, as after its stop).
    pub fn set_sandbox_running(&self, pod_id: &str, running: bool) {
        let cgroup = self.sandbox_cgroup(pod_id);
        let mut tree = self.host.tree();
        if running {
            tree.containers.insert(cgroup, ContainerCpuset::default());
        } else {
            tree.containers.remove(&cgroup);
        }
    }

    /// Runs a pod and creates + starts one container in it.
    pub async fn pod_with(&self, pod: PodSpec, container: ContainerSpec) -> (String, String) {
        let pod_id = self.runtime.run_pod(pod).await.unwrap();
        let id = self
            .runtime
            .create_container(&pod_id, container)
            .await
            .unwrap();
        self.runtime.start_container(&id).await.unwrap();
        (pod_id, id)
    }
}

/// The test machine with the default policy, on the fake cgroups `host`.
pub fn synthetic_node(host: &FakeCgroups) -> SyntheticNode {
    SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(topology())
    }
}

pub fn guaranteed_pod(uid: &str) -> PodSpec {
    PodSpec {
        name: format!("{uid}-pod"),
        uid: uid.to_string(),
        namespace: "default".into(),
        cgroup_parent: format!("/kubepods/pod{uid}"),
        ..PodSpec::default()
    }
}

pub fn burstable_pod(uid: &str) -> PodSpec {
    PodSpec {
        cgroup_parent: format!("/kubepods/burstable/pod{uid}"),
        ..guaranteed_pod(uid)
    }
}

/// A container requesting `milli` CPU (as kubelet: shares, quota = limit).
pub fn container(name: &str, milli: u64) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        resources: Resources {
            cpu_shares: Some(milli * 1024 / 1000),
            cpu_quota: Some(i64::try_from(milli * 100).unwrap()),
            cpu_period: Some(100_000),
            memory_limit: Some(1 << 30),
            ..Resources::default()
        },
        ..ContainerSpec::default()
    }
}

/// A Burstable container: request only (no quota).
pub fn burstable(name: &str, milli: u64) -> ContainerSpec {
    let mut spec = container(name, milli);
    spec.resources.cpu_quota = None;
    spec
}

pub fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).unwrap()
}
