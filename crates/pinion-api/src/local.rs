//! The local API's wire types (`docs/local-api.md`). CPU and memory-node
//! sets travel as Linux cpulist text (`"0-3,8"`), exactly as the agent has
//! always written them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST` here admits the calling process as a standalone run.
pub const RUN_PATH: &str = "/v1/run";
/// `POST` here releases a pod or one of its containers.
pub const RELEASE_PATH: &str = "/v1/release";
/// `GET` here returns the agent's [`Snapshot`].
pub const PS_PATH: &str = "/v1/ps";
/// `GET` here answers `ok` while the agent serves.
pub const HEALTH_PATH: &str = "/healthz";
/// `GET` here answers `ok` once the agent serves (as the metrics port's
/// `/readyz`: the socket is bound only after the start finished).
pub const READY_PATH: &str = "/readyz";
/// `GET` here returns the resource plugins the agent hosts ([`Plugin`]s).
pub const PLUGINS_PATH: &str = "/v1/plugins";
/// `GET`: the CPU plugin's shared pools ([`Pools`]).
pub const POOLS_PATH: &str = "/v1/pools";
/// `POST` a [`SetPool`]: pin a pool's size or bounds, or give it back to
/// the closed loop; answers the new [`Pools`].
pub const POOLS_SET_PATH: &str = "/v1/pools/set";
/// `POST` a [`ResizeRequest`]: resize a placed container's CPU request in
/// place (agent switch `InPlacePodVerticalScalingExclusiveCPUs`); answers
/// its new placement as an [`Admitted`].
pub const RESIZE_PATH: &str = "/v1/resize";

/// `GET`: the NodeResourceTopology object the agent publishes, and how its
/// publishing goes ([`NrtAnswer`]).
pub const NRT_PATH: &str = "/v1/nrt";

/// Every run id (pod UID and cgroup name) starts with this.
pub const RUN_ID_PREFIX: &str = "pinion-run-";
/// The one container of a standalone run.
pub const RUN_CONTAINER: &str = "main";

/// Largest request head (request line and headers) the agent reads.
pub const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// Largest request body the agent reads.
pub const MAX_REQUEST_BODY: usize = 1024 * 1024;

/// `POST /v1/run`: admit the calling process as a standalone run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The run's id (pod UID and cgroup name); starts with [`RUN_ID_PREFIX`].
    pub id: String,
    /// CPUs as a Kubernetes quantity: a whole number ≥ 1 asks for exclusive
    /// CPUs, anything else (or none) runs in the shared pool.
    #[serde(default)]
    pub cpus: Option<String>,
    /// Only `auto` is supported: the memory plugin's nodes when it binds
    /// the run, else left as they are (the parent cgroup's).
    #[serde(default = "auto")]
    pub memory_nodes: String,
    /// Requests of other resources (served by resource plugins): name →
    /// Kubernetes quantity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    /// The pod's name and namespace as resource plugins and podresources
    /// consumers see them (default: the id, namespace `pinion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl RunRequest {
    /// A run with id `id` in the shared pool, without other requests.
    #[must_use]
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            cpus: None,
            memory_nodes: auto(),
            requests: BTreeMap::new(),
            pod_name: None,
            namespace: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }
}

/// The namespace of standalone runs without `--namespace`.
pub const RUN_NAMESPACE: &str = "pinion";

fn auto() -> String {
    "auto".to_string()
}

/// OCI resource settings of a placement (absent: left as they are).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_period: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_swap_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i64>,
}

impl Resources {
    /// True when no setting is given.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What one resource plugin allocated to a container.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginAllocation {
    /// The OCI property it sets (`CpusetCpus`, `MemoryLimitInBytes`…; empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oci_property_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub allocation_result: String,
    #[serde(default)]
    pub allocated_quantity: f64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `POST /v1/release`: one container (`container` given) or every
/// container of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub pod: String,
    #[serde(default)]
    pub container: Option<String>,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// kubelet's admission reason (`SMTAlignmentError`,
    /// `UnexpectedAdmissionError`), for refused admissions.
    #[serde(default)]
    pub reason: Option<String>,
}

/// The answer to `POST /v1/run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admitted {
    pub pod: String,
    pub container: String,
    /// The cpuset in force: the exclusive CPUs, or the current shared pool.
    pub cpus: String,
    pub exclusive: bool,
    /// The memory nodes (cpulist).
    pub mems: String,
    /// The cgroup directory name under the agent's root, for cgroup placement.
    pub cgroup: Option<String>,
    /// The pool the CPUs come from: `exclusive`, `shared` or `plugin`.
    #[serde(default)]
    pub pool: String,
    /// Environment variables for the command (from resource plugins).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Annotations of the container (from resource plugins).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Resources::is_empty")]
    pub resources: Resources,
}

/// The answer to `POST /v1/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The containers released.
    pub containers: Vec<String>,
    /// The CPUs that went back to the shared pool (cpulist).
    pub cpus: String,
}

/// The answer to `GET /v1/ps`: the agent's latest snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub policy: String,
    pub all_cpus: String,
    pub reserved: String,
    pub shared_pool: String,
    /// Every admitted container, sorted by pod and container.
    pub workloads: Vec<Workload>,
    /// The exclusive assignments as in the checkpoint: pod → container → cpulist.
    pub assignments: BTreeMap<String, BTreeMap<String, String>>,
    /// Pods whose resource plugins have not all heard of their removal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_plugin_removals: Vec<String>,
    /// What the agent's start repaired (state rebuilt from the running
    /// workloads, checkpoint migrated), one line per event and conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovery: Vec<String>,
    /// What CPU hot-plug changed while the agent ran (CPUs that went
    /// offline or came back, workloads given other CPUs), one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hotplug: Vec<String>,
    /// The cgroup root's `cpuset.cpus.isolated` (CPUs of isolated cpuset
    /// partitions and boot `isolcpus`; cgroup v2, Linux 6.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated_cpus: Option<String>,
    /// Each housekeeping cgroup: its cpus, state and last foreign write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub housekeeping: Vec<String>,
}

/// One admitted container of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub pod: String,
    pub container: String,
    pub exclusive: bool,
    pub cpus: String,
    pub mems: String,
    /// The cgroup name (standalone runs); `None` for runtime-placed containers.
    pub cgroup: Option<String>,
    /// The process placed (standalone runs).
    pub pid: Option<u32>,
    /// `standalone` or `runtime`.
    #[serde(default)]
    pub frontend: String,
    /// `exclusive`, `shared` or `plugin`.
    #[serde(default)]
    pub pool: String,
    /// False while the placement is not applied yet (or its last attempt failed).
    #[serde(default = "yes")]
    pub applied: bool,
    /// The runtime's container id (runtime containers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// What resource plugins allocated, by resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugins: BTreeMap<String, PluginAllocation>,
    /// Why the agent could not write its cgroup settings (standalone runs,
    /// after admission; until a write succeeds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_error: Option<String>,
    /// Its cgroup's cpuset partition (`exclusiveCpus.partition`):
    /// `isolated`, `root`, or `member (fallback: <the kernel's reason>)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The last cpuset another writer put in its cgroup (when, from, to,
    /// repaired or kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_write: Option<String>,
}

fn yes() -> bool {
    true
}

/// A resource plugin the agent hosts (`GET /v1/plugins`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plugin {
    pub resource: String,
    pub socket: String,
    /// `active` or `stopped`.
    pub state: String,
    pub stop_reason: Option<String>,
    pub topology_aligned: Option<bool>,
    pub need_reconcile: Option<bool>,
    pub pre_start_required: Option<bool>,
    /// Seconds since the epoch.
    pub registered: u64,
    pub stats: PluginStats,
    /// What it answered to `GetTopologyAwareAllocatableResources`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_resources: Vec<NodeResource>,
}

/// A node resource a plugin reports (`IsNodeResource`): its capacity and
/// allocatable amounts, total and per NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeResource {
    pub name: String,
    pub is_node_resource: bool,
    pub is_scalar_resource: bool,
    pub allocatable: f64,
    pub capacity: f64,
    /// NUMA node → amount.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable_per_numa: BTreeMap<u64, f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity_per_numa: BTreeMap<u64, f64>,
}

/// Per-plugin call statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginStats {
    /// Method → calls.
    pub calls: BTreeMap<String, MethodStats>,
    pub last_error: Option<String>,
    /// Seconds since the epoch.
    pub last_reconcile: Option<u64>,
    /// Containers whose allocation a reconcile changed.
    pub reconcile_changes: u64,
}

/// Calls of one method.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MethodStats {
    pub calls: u64,
    pub errors: u64,
    /// Sum of call durations, seconds.
    pub seconds: f64,
    /// Calls per latency bucket (not cumulative); bounds in
    /// [`PLUGIN_LATENCY_BUCKETS`].
    pub buckets: Vec<u64>,
}

/// Upper bounds (seconds) of the plugin call latency histogram.
pub const PLUGIN_LATENCY_BUCKETS: [f64; 10] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.1, 1.0, 10.0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_request_defaults_and_refuses_unknown_fields() {
        let request: RunRequest = serde_json::from_str(r#"{"id": "pinion-run-1"}"#).expect("ok");
        assert_eq!(request.cpus, None);
        assert_eq!(request.memory_nodes, "auto");
        let err = serde_json::from_str::<RunRequest>(r#"{"id": "pinion-run-1", "cpu": "2"}"#)
            .expect_err("typo");
        assert!(err.to_string().contains("unknown field `cpu`"), "{err}");
        let err = serde_json::from_str::<ReleaseRequest>(r#"{"pods": "x"}"#).expect_err("typo");
        assert!(err.to_string().contains("pods"), "{err}");
    }

    /// Found from outside (session 46): `SetPool` was the one request that
    /// took unknown fields, so `{"pool":"share","size":"4","craete":true}`
    /// pinned the pool and silently dropped the typo (the docs promise a
    /// 400 naming it).
    #[test]
    fn regression_a_pool_pin_refuses_unknown_fields() {
        let err = serde_json::from_str::<SetPool>(r#"{"pool":"share","size":"4","craete":true}"#)
            .expect_err("typo");
        assert!(err.to_string().contains("unknown field `craete`"), "{err}");
        let pin: SetPool =
            serde_json::from_str(r#"{"pool":"share","size":"4","create":true}"#).expect("ok");
        assert!(pin.create);
    }

    #[test]
    fn answers_keep_the_documented_shape() {
        let admitted = Admitted {
            pod: "pinion-run-1".into(),
            container: RUN_CONTAINER.into(),
            cpus: "3".into(),
            exclusive: true,
            mems: "0".into(),
            cgroup: Some("pinion-run-1".into()),
            pool: "exclusive".into(),
            env: BTreeMap::new(),
            annotations: BTreeMap::new(),
            resources: Resources::default(),
        };
        assert_eq!(
            serde_json::to_string(&admitted).expect("json"),
            r#"{"pod":"pinion-run-1","container":"main","cpus":"3","exclusive":true,"mems":"0","cgroup":"pinion-run-1","pool":"exclusive"}"#
        );
        let snapshot: Snapshot = serde_json::from_str(
            r#"{"policy": "static", "all_cpus": "0-1", "reserved": "0", "shared_pool": "0",
                "workloads": [{"pod": "p", "container": "c", "exclusive": true, "cpus": "1",
                               "mems": "0", "cgroup": null, "pid": null}],
                "assignments": {"p": {"c": "1"}}}"#,
        )
        .expect("documented example");
        assert_eq!(snapshot.workloads[0].cpus, "1");
        assert_eq!(snapshot.assignments["p"]["c"], "1");
    }
}

/// The CPU plugin's shared pools and the reclaim pool (`GET /v1/pools`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pools {
    pub pools: Vec<PoolView>,
    /// The reclaim pool's CPUs (cpulist).
    pub reclaim: String,
    /// Its configured minimum.
    pub reclaim_min: u32,
    /// The closed loop's reconcile period count.
    pub period: u64,
    /// Pins of pools that have no member yet (`pools set --new`): pool
    /// name → `N`, `MIN-MAX`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pending_pins: BTreeMap<String, String>,
}

/// One shared pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    pub name: String,
    /// Its CPUs now (cpulist).
    pub cpus: String,
    /// The size it should have.
    pub size: u32,
    /// The closed loop's bounds `[min, max]` for it now.
    pub min: u32,
    pub max: u32,
    /// `auto`, a fixed size `N`, or pinned bounds `MIN-MAX`.
    pub pin: String,
    /// NUMA nodes it is bound to (cpulist), when bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<String>,
    /// Members as `pod/container`.
    pub members: Vec<String>,
    /// Sum of the members' CPU requests in milli-CPUs.
    pub requests_milli: u64,
    /// Last measured pressure (percent) and busy CPUs, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<f64>,
    /// The members' CPU pressure (cgroup v2 `cpu.pressure` "some avg10",
    /// the highest among them) when measured; `pressure` is the higher of
    /// this and the estimate from the pool's busy CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psi: Option<f64>,
    /// cgroup v1 (no PSI): the members' throttling as a pressure (percent
    /// of CFS periods throttled, the highest among them) when measured;
    /// `pressure` is the higher of this and the estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<f64>,
    /// The last size change and why, e.g. `3 -> 4 (pressure 42.0%) in period 17`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<String>,
}

/// `POST /v1/pools/set`: `size` is `N`, `MIN-MAX` or `auto`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetPool {
    pub pool: String,
    pub size: String,
    /// Keep the pin of a pool that does not exist yet (an advisor sizing a
    /// pool before its first member); without it such a pool is refused
    /// with the names of the pools that exist.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create: bool,
}

/// `POST /v1/resize`: container `container` (default [`RUN_CONTAINER`]) of
/// pod `pod` (a run's id) to `cpus` CPUs (a Kubernetes quantity: its new
/// CPU request, and limit when it has one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeRequest {
    pub pod: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub cpus: String,
}

/// `GET /v1/nrt`: the object as the agent sends it to the API server
/// (`topology.node.k8s.io/v1alpha2` `NodeResourceTopology`), and the state
/// of its publishing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NrtAnswer {
    pub object: serde_json::Value,
    pub publishing: NrtPublishing,
}

/// How publishing to the API server goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NrtPublishing {
    /// Why the agent does not publish (no credentials, switched off), or
    /// `None` when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off: Option<String>,
    /// The API server the agent publishes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Updates the API server accepted.
    #[serde(default)]
    pub updates: u64,
    /// When the last accepted update was sent (seconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<u64>,
    /// The last failure, while the object is not up to date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}
