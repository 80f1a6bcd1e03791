//! Test support (feature `test-support`, and this crate's own unit tests):
//! a controller on a synthetic machine with faked cgroups — the one fixture
//! the controller's unit tests, the local API and NRI integration tests and
//! the admission benchmarks share.

pub mod qrm_node;
pub mod source_guard;
pub mod table_plugin;

use std::path::{Path, PathBuf};

use pinion_core::policy::{Features, PolicyConfig};
use pinion_core::topology::{synthetic, Shape};
use pinion_core::Topology;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::CpusetHost;
use tokio::sync::mpsc;

use crate::api::{run_pod, RunRequest};
use crate::controller::{
    AdmitRequest, ControlError, Controller, Frontend, RuntimeUpdate, StartParts, RUN_CONTAINER,
};

/// A runtime with two workers, for benches whose client or plugin stands in
/// for another process and needs a thread beside the agent's tasks (the
/// agent itself runs on [`crate::daemon::runtime`]).
///
/// # Panics
/// When the runtime cannot be built.
#[must_use]
pub fn two_worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Where benches keep the agent's state, by name: the disk (the temp
/// directory) and tmpfs (`/dev/shm`, when the machine has it) — to tell a
/// flush's share from the rest.
#[must_use]
pub fn state_media() -> Vec<(&'static str, PathBuf)> {
    let mut media = vec![("disk", std::env::temp_dir())];
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        media.push(("tmpfs", shm.to_path_buf()));
    }
    media
}

/// A machine of `sockets` sockets (one NUMA node each) × `cores` cores ×
/// `threads` threads, numbered as kubelet's fixtures: cpu ids run over the
/// first thread of every core, then the second.
#[must_use]
pub fn machine(sockets: u32, cores: u32, threads: u32) -> Topology {
    synthetic(Shape {
        sockets,
        numa_per_socket: 1,
        cores_per_socket: cores,
        threads_per_core: threads,
        cores_per_uncore: 0,
    })
}

/// A node to start controllers on: a machine, a policy, fake cgroups.
#[derive(Clone)]
pub struct SyntheticNode {
    pub topology: Topology,
    pub config: PolicyConfig,
    /// The feature switches (`featureGates`), off by default.
    pub features: Features,
    pub host: FakeCgroups,
    /// `exclusiveCpus.partition` (member by default).
    pub partition: pinion_core::partition::PartitionMode,
}

impl SyntheticNode {
    /// `topology` with the agent's defaults: static policy, one CPU reserved.
    #[must_use]
    pub fn new(topology: Topology) -> Self {
        Self {
            topology,
            config: PolicyConfig {
                policy: Some("static".into()),
                num_reserved: Some(1),
                ..PolicyConfig::default()
            },
            features: Features::default(),
            host: FakeCgroups::default(),
            partition: pinion_core::partition::PartitionMode::Member,
        }
    }

    /// The same node with policy `config`.
    #[must_use]
    pub fn with_config(mut self, config: PolicyConfig) -> Self {
        self.config = config;
        self
    }

    /// The same node with feature switches `features`.
    #[must_use]
    pub fn with_features(mut self, features: Features) -> Self {
        self.features = features;
        self
    }

    /// The same node with exclusive runs' cgroups made `mode` partitions.
    #[must_use]
    pub fn with_partition(mut self, mode: pinion_core::partition::PartitionMode) -> Self {
        self.partition = mode;
        self
    }

    /// The controller's parts, with its checkpoint in `state_dir` and
    /// `host` as cgroups.
    ///
    /// # Panics
    /// When the policy or the Topology Manager cannot be built.
    #[must_use]
    pub fn parts_on(&self, state_dir: &Path, host: Box<dyn CpusetHost>) -> StartParts {
        StartParts {
            policy: self
                .config
                .build_with(&self.topology, self.features)
                .expect("policy"),
            topology_manager: self
                .config
                .build_topology_manager(&self.topology)
                .expect("topology manager"),
            topology: self.topology.clone(),
            state_dir: state_dir.to_path_buf(),
            host,
            runtime_updates: None,
            file_ops: None,
            migrate_on_start: crate::controller::MigrateOnStart::IfNothingMoves,
            partition: self.partition,
            isolation: crate::controller::Isolation::default(),
        }
    }

    /// A controller with its checkpoint in `state_dir` and no runtime
    /// front-end.
    pub fn start(&self, state_dir: &Path) -> Result<Controller, ControlError> {
        Controller::start(self.parts_on(state_dir, Box::new(self.host.clone())))
    }

    /// [`SyntheticNode::start`] with its state files' operations going
    /// through a fault plan (failed flushes and the like).
    ///
    /// # Panics
    /// When the controller does not start.
    #[must_use]
    pub fn start_with_faults(
        &self,
        state_dir: &Path,
    ) -> (Controller, pinion_host::fileops::FaultPlan) {
        let (faults, plan) = pinion_host::fileops::Faults::new();
        let mut parts = self.parts_on(state_dir, Box::new(self.host.clone()));
        parts.file_ops = Some(Box::new(faults));
        (Controller::start(parts).expect("start"), plan)
    }

    /// A controller with a runtime front-end: its updates arrive on the
    /// returned receiver.
    pub fn start_with_runtime(
        &self,
        state_dir: &Path,
    ) -> Result<(Controller, mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>), ControlError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut parts = self.parts_on(state_dir, Box::new(self.host.clone()));
        parts.runtime_updates = Some(tx);
        Ok((Controller::start(parts)?, rx))
    }
}

/// The admission of `pinion run --cpus CPUS` with id `id` from process `pid`.
///
/// # Panics
/// On an invalid `cpus` quantity or id.
#[must_use]
pub fn run_request(id: &str, cpus: Option<&str>, pid: Option<u32>) -> AdmitRequest {
    let pod = run_pod(&RunRequest {
        cpus: cpus.map(str::to_string),
        ..RunRequest::new(id)
    })
    .expect("pod");
    AdmitRequest {
        frontend: Frontend::standalone(id, pid).expect("valid id"),
        pod,
        container: RUN_CONTAINER.into(),
        cpu_owner: pinion_core::engine::CpuOwner::Policy,
    }
}

/// The admission of a runtime container `container_id`: a one-container pod
/// `uid` like [`run_request`]'s.
///
/// # Panics
/// On an invalid `cpus` quantity.
#[must_use]
pub fn runtime_request(uid: &str, cpus: Option<&str>, container_id: &str) -> AdmitRequest {
    let mut request = run_request("pinion-run-template", cpus, None);
    request.pod.uid = uid.to_string();
    request.frontend = Frontend::runtime(container_id);
    request
}
