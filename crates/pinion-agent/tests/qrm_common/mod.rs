//! The QoS Resource Manager's test harness: the agent's controller with its
//! plugin watcher, registration server, reconcile and removal loops on a
//! temporary state directory and fake cgroups, and resource plugins served
//! by `pinion_api::plugin::serve` (the server `pinion plugin serve` runs) in
//! the watched directory — real gRPC over real unix sockets.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pinion_agent::config::{BuiltinPlugin, QrmConfig};
use pinion_agent::controller::AdmitRequest;
use pinion_agent::testing::qrm_node::QrmNode;
pub use pinion_agent::testing::qrm_node::QrmNodeOptions;
pub use pinion_agent::testing::qrm_node::{serve_in, ServedPlugin};

pub mod gated;
use pinion_agent::testing::{machine, run_request, SyntheticNode};
use pinion_core::{CpuSet, Quantity};
use pinion_host::cgroup::fake::{FakeCgroup, FakeCgroups};
use pinion_host::cgroup::CgroupName;
use pinion_host::pod_cgroups::PodCpuSource;
use pinion_plugins::{
    Allocation, AllocationInfo, Allocations, Options, PluginError, Request, ResourcePlugin,
};

/// Upper bound for waiting on a registration or a reconcile (not a timing
/// assertion: the loops run every 100 ms).
pub const PATIENCE: Duration = Duration::from_secs(20);
/// The agent's parts that matter here, on a 2-socket × 4-core × 2-thread
/// machine (one NUMA node per socket), static policy, one CPU reserved: the
/// shared [`QrmNode`] harness (reconcile every 100 ms) with its state in
/// `dir`.
pub struct Agent {
    pub dir: tempfile::TempDir,
    node: QrmNode,
}

impl std::ops::Deref for Agent {
    type Target = QrmNode;

    fn deref(&self) -> &QrmNode {
        &self.node
    }
}

impl Agent {
    pub fn start() -> Agent {
        Agent::start_in(
            tempfile::tempdir().expect("tempdir"),
            FakeCgroups::default(),
            Vec::new(),
        )
    }

    /// [`Agent::start`] under the Topology Manager's `policy`: hints are
    /// gathered and the plugins' `Allocate` follows the admission.
    pub fn start_with_policy(policy: &str) -> Agent {
        Agent::start_with_topology_manager(policy, None)
    }

    /// [`Agent::start_with_policy`] in the Topology Manager's `scope`
    /// (`container` when `None`).
    pub fn start_with_topology_manager(policy: &str, scope: Option<&str>) -> Agent {
        let mut node = SyntheticNode::new(machine(2, 4, 2));
        node.config.topology_manager_policy = Some(policy.to_string());
        node.config.topology_manager_scope = scope.map(str::to_string);
        Agent::start_on(
            tempfile::tempdir().expect("tempdir"),
            &node,
            &QrmNodeOptions::new(Duration::from_millis(100)),
        )
    }

    /// An agent whose state lives in `dir` and cgroups in `host` (both kept
    /// across restarts), running `builtin` of Pinion's plugins itself.
    pub fn start_in(
        dir: tempfile::TempDir,
        host: FakeCgroups,
        builtin: Vec<BuiltinPlugin>,
    ) -> Agent {
        Agent::start_with(dir, host, builtin, Duration::from_secs(5))
    }

    /// [`Agent::start_in`] with plugin calls' deadline `rpc_timeout`.
    pub fn start_with(
        dir: tempfile::TempDir,
        host: FakeCgroups,
        builtin: Vec<BuiltinPlugin>,
        rpc_timeout: Duration,
    ) -> Agent {
        let options = QrmNodeOptions {
            rpc_timeout,
            builtin,
            ..QrmNodeOptions::new(Duration::from_millis(100))
        };
        Agent::start_with_options(dir, host, &options)
    }

    /// [`Agent::start_in`] with the harness's `options` (e.g. another
    /// reconcile period).
    pub fn start_with_options(
        dir: tempfile::TempDir,
        host: FakeCgroups,
        options: &QrmNodeOptions,
    ) -> Agent {
        let node = SyntheticNode {
            host,
            ..SyntheticNode::new(machine(2, 4, 2))
        };
        Agent::start_on(dir, &node, options)
    }

    /// An agent of `node` whose state lives in `dir`.
    fn start_on(dir: tempfile::TempDir, node: &SyntheticNode, options: &QrmNodeOptions) -> Agent {
        let node = QrmNode::start(node, dir.path(), options);
        Agent { dir, node }
    }

    /// An agent in `dir` with cgroups in `host` running Pinion's plugins
    /// `names` itself (reading `sysroot`), once each is registered.
    pub async fn with_builtin(
        dir: tempfile::TempDir,
        host: FakeCgroups,
        names: &[&str],
        sysroot: &Path,
    ) -> Agent {
        let mut agent = Agent::start_in(dir, host, builtin(names));
        agent.start_builtin(sysroot).await;
        agent
    }

    /// [`Agent::with_builtin`] in a new directory, on new cgroups.
    pub async fn fresh_with_builtin(names: &[&str], sysroot: &Path) -> Agent {
        let dir = tempfile::tempdir().expect("tempdir");
        Agent::with_builtin(dir, FakeCgroups::default(), names, sysroot).await
    }

    /// Serves the built-in plugins as the daemon does; returns once each is
    /// registered.
    pub async fn start_builtin(&mut self, sysroot: &Path) {
        self.start_builtin_with(sysroot, None).await;
    }

    /// [`Agent::start_builtin`] with the cgroup mount and Pinion's cgroup
    /// root where the CPU plugin reads its pods' CPU pressure.
    pub async fn start_builtin_with(&mut self, sysroot: &Path, cgroups: Option<PodCpuSource>) {
        let reserved = self.handle.snapshot().reserved.clone();
        let topology = machine(2, 4, 2);
        let machine = pinion_agent::qrm::builtin::Machine {
            topology: &topology,
            reserved: &reserved,
            sysroot,
            state_dir: self.dir.path(),
            cgroups: cgroups.as_ref(),
        };
        self.node.start_builtin(machine).await;
    }

    /// [`QrmNode::serve`] on socket `file` of the watched directory.
    pub fn serve_as(&self, plugin: impl ResourcePlugin + 'static, file: &str) -> ServedPlugin {
        serve_in(self.registry_dir(), plugin, file)
    }

    /// Waits until the manager lists `resource` in `state`.
    pub async fn wait_for_plugin(&self, resource: &str, state: &str) {
        self.node.wait_for_plugin(resource, state, PATIENCE).await;
    }

    /// What `pinion plugins` shows of the plugin for `resource`, if any.
    pub fn plugin(&self, resource: &str) -> Option<pinion_agent::qrm::PluginView> {
        self.handle
            .plugins()
            .into_iter()
            .find(|v| v.resource == resource)
    }

    /// The errors counted for `method` of the plugin for `resource`.
    pub fn plugin_errors(&self, resource: &str, method: &str) -> u64 {
        self.plugin(resource)
            .unwrap_or_else(|| panic!("no plugin {resource}"))
            .stats
            .calls
            .get(method)
            .map_or(0, |m| m.errors)
    }

    /// The last error of `resource`'s plugin, as `pinion plugins` shows it
    /// (empty when none).
    pub fn plugin_last_error(&self, resource: &str) -> String {
        self.plugin(resource)
            .unwrap_or_else(|| panic!("no plugin {resource}"))
            .stats
            .last_error
            .unwrap_or_default()
    }

    /// Waits until `check` holds for the fake cgroup tree.
    pub async fn wait_for_cgroup(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&CpuSet, &CpuSet) -> bool,
    ) {
        self.wait_for_files(name, what, |c| check(&c.cpus, &c.mems))
            .await;
    }

    /// Waits until `check` holds for the fake cgroup `name` (its cpuset,
    /// resource files and writes).
    pub async fn wait_for_files(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&FakeCgroup) -> bool,
    ) {
        let name = CgroupName::new(name).expect("cgroup name");
        wait_until(&format!("{name}: {what}"), || {
            self.host.tree().children.get(&name).is_some_and(&check)
        })
        .await;
    }

    /// Stops everything; the state directory and the cgroups are handed
    /// back for a restart.
    pub async fn stop(self) -> (tempfile::TempDir, FakeCgroups) {
        let host = self.node.host.clone();
        self.node.stop().await;
        (self.dir, host)
    }
}

/// The manager's configuration for tests: watched directory
/// `<dir>/plugins_registry`, reconcile every 100 ms, calls' deadline
/// `rpc_timeout`.
pub fn qrm_config(dir: &Path, rpc_timeout: Duration) -> QrmConfig {
    QrmConfig {
        enabled: true,
        plugin_registration_dir: dir.join("plugins_registry"),
        registration_socket: dir.join("resource-plugins/kubelet.sock"),
        reconcile_period: Duration::from_millis(100),
        rpc_timeout,
        resource_names_map: BTreeMap::new(),
        builtin: Vec::new(),
    }
}

/// `pinion run` of `id` with `cpus`, other requests and annotations.
pub fn admission(
    id: &str,
    cpus: &str,
    requests: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> AdmitRequest {
    let mut request = run_request(id, Some(cpus), None);
    let container = request
        .pod
        .containers
        .iter_mut()
        .find(|c| c.name == request.container)
        .expect("the run's container");
    for (name, quantity) in requests {
        let quantity: Quantity = quantity.parse().expect("quantity");
        if *name == "memory" {
            // As the NRI front-end reads it from a Guaranteed container.
            container.memory_request = Some(quantity.clone());
            container.memory_limit = Some(quantity);
        } else {
            container
                .extended_requests
                .insert((*name).to_string(), quantity);
        }
    }
    for (key, value) in annotations {
        request
            .pod
            .annotations
            .insert((*key).to_string(), (*value).to_string());
    }
    request
}

/// Waits until `done` holds (bounded by [`PATIENCE`]; not a timing
/// assertion).
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a [`Knob`] plugin answers and has heard; the test changes it.
#[derive(Debug, Default)]
pub struct KnobState {
    /// The allocation of every container (resource name → info), in
    /// `Allocate` and in `GetResourcesAllocation` alike.
    pub answer: BTreeMap<String, AllocationInfo>,
    /// Pod → containers it allocated (and has not been told to forget).
    pub allocated: BTreeMap<String, Vec<String>>,
    /// Every `Allocate` heard, as (pod, container), in order; kept after
    /// `RemovePod`, so a test can see an allocation that was since undone.
    pub allocate_calls: Vec<(String, String)>,
    /// While set, `Allocate` does not return (until the test clears it).
    pub hang_allocate: bool,
    /// Set while an `Allocate` call is inside the plugin.
    pub in_allocate: bool,
    /// `RemovePod` fails this many more times.
    pub remove_failures: u32,
    /// Every `RemovePod` heard, failed ones included.
    pub remove_calls: Vec<String>,
    /// `GetResourcePluginOptions` calls (one per registration).
    pub registrations: u32,
    /// `Allocate` and `GetResourcesAllocation` calls.
    pub calls: u32,
}

/// A resource plugin whose answers and failures the test scripts through
/// its shared [`KnobState`] (clones share it, so a "restarted" plugin
/// remembers what it allocated, as a plugin with a state file does).
#[derive(Clone)]
pub struct Knob {
    pub resource: String,
    pub state: Arc<Mutex<KnobState>>,
}

impl Knob {
    /// A plugin for `resource` answering `answer` for every container.
    pub fn new(resource: &str, answer: BTreeMap<String, AllocationInfo>) -> Self {
        Self {
            resource: resource.to_string(),
            state: Arc::new(Mutex::new(KnobState {
                answer,
                ..KnobState::default()
            })),
        }
    }

    /// One entry for the plugin's own resource: `property` = `value`, an
    /// environment variable `KNOB` = `env`.
    pub fn one(resource: &str, property: &str, value: &str, env: &str) -> Self {
        Self::new(
            resource,
            [(resource.to_string(), info(property, value, env))].into(),
        )
    }

    pub fn state(&self) -> MutexGuard<'_, KnobState> {
        self.state.lock().expect("knob lock")
    }
}

/// An allocation setting `property` to `value` with `KNOB=env`.
pub fn info(property: &str, value: &str, env: &str) -> AllocationInfo {
    AllocationInfo {
        oci_property_name: property.into(),
        is_scalar_resource: true,
        allocated_quantity: 1.0,
        allocation_result: value.into(),
        envs: [("KNOB".to_string(), env.to_string())].into(),
        ..AllocationInfo::default()
    }
}

impl ResourcePlugin for Knob {
    fn resource_name(&self) -> &str {
        &self.resource
    }

    fn options(&self) -> Options {
        self.state().registrations += 1;
        Options {
            pre_start_required: false,
            with_topology_alignment: false,
            need_reconcile: true,
        }
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        self.state().in_allocate = true;
        let deadline = Instant::now() + PATIENCE;
        while self.state().hang_allocate && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut state = self.state();
        state.in_allocate = false;
        state.calls += 1;
        state
            .allocate_calls
            .push((request.pod_uid.clone(), request.container_name.clone()));
        state
            .allocated
            .entry(request.pod_uid.clone())
            .or_default()
            .push(request.container_name.clone());
        Ok(Some(state.answer.clone()))
    }

    fn allocations(&self) -> Allocations {
        let mut state = self.state();
        state.calls += 1;
        let answer = state.answer.clone();
        state
            .allocated
            .iter()
            .map(|(pod, containers)| {
                let containers = containers
                    .iter()
                    .map(|c| (c.clone(), answer.clone()))
                    .collect();
                (pod.clone(), containers)
            })
            .collect()
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        let mut state = self.state();
        state.remove_calls.push(pod_uid.to_string());
        if state.remove_failures > 0 {
            state.remove_failures -= 1;
            return Err(PluginError::Config {
                plugin: "knob",
                reason: format!("not removing {pod_uid} yet"),
            });
        }
        state.allocated.remove(pod_uid);
        Ok(())
    }
}

/// katalyst's QoS level annotation.
pub const QOS: &str = "katalyst.kubewharf.io/qos_level";

/// A sysfs root with the two nodes' meminfo (64 GiB each, 60 GiB free).
pub fn meminfo_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    for node in 0..2 {
        let dir = root
            .path()
            .join(format!("sys/devices/system/node/node{node}"));
        std::fs::create_dir_all(&dir).expect("node dir");
        let kib = |gib: u64| gib * (1 << 30) / 1024;
        std::fs::write(
            dir.join("meminfo"),
            format!(
                "Node {node} MemTotal:       {} kB\nNode {node} MemFree:        {} kB\n",
                kib(64),
                kib(60)
            ),
        )
        .expect("meminfo");
    }
    root
}

/// The built-in plugins `names` with their default configuration (the CPU
/// plugin takes the agent's reserved CPUs).
pub fn builtin(names: &[&str]) -> Vec<BuiltinPlugin> {
    names
        .iter()
        .map(|name| {
            let kind = pinion_plugins::builtin::Kind::parse(name).expect("plugin name");
            BuiltinPlugin {
                config: pinion_plugins::builtin::Config::default_for(kind),
                reservation_from_agent: kind == pinion_plugins::builtin::Kind::Cpu,
            }
        })
        .collect()
}

/// Admits pod `id` (one container `main`) asking `cpus` at katalyst QoS
/// level `level`.
///
/// # Panics
/// When the admission fails.
pub async fn admit_at(
    agent: &Agent,
    id: &str,
    cpus: &str,
    level: &str,
) -> pinion_agent::controller::Admitted {
    agent
        .handle
        .admit(admission(id, cpus, &[], &[(QOS, level)]))
        .await
        .unwrap_or_else(|err| panic!("{id} ({level}, {cpus} cpus) not admitted: {err}"))
}

/// A plugin that allocates nothing and reports `allocatable` for its
/// resources.
pub struct Allocatable {
    pub resource: String,
    pub allocatable: BTreeMap<String, pinion_plugins::AllocatableResource>,
}

impl ResourcePlugin for Allocatable {
    fn resource_name(&self) -> &str {
        &self.resource
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: false,
            need_reconcile: false,
        }
    }

    fn allocate(&mut self, _request: &Request) -> Result<Option<Allocation>, PluginError> {
        Ok(None)
    }

    fn allocations(&self) -> Allocations {
        Allocations::new()
    }

    fn remove_pod(&mut self, _pod_uid: &str) -> Result<(), PluginError> {
        Ok(())
    }

    fn allocatable_resources(&self) -> BTreeMap<String, pinion_plugins::AllocatableResource> {
        self.allocatable.clone()
    }
}
