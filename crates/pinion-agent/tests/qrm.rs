//! The QoS Resource Manager end to end over real unix sockets: the agent's
//! controller with its plugin watcher, registration server, reconcile and
//! removal loops, and resource plugins served by `pinion_api::plugin::serve`
//! (the server `pinion plugin serve` runs) in the watched directory — Pinion's
//! own memory plugin and a scripted plugin whose answers the test changes.
//! Cgroups are faked (what the executor writes is inspected); everything
//! between the manager and the plugins is real gRPC.

#[path = "common/http2_crowd.rs"]
mod http2_crowd;
mod qrm_common;

use http2_crowd::{closed, HTTP2_PREFACE};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use qrm_common::{
    admission, admit_at, meminfo_root, Agent, Allocatable, Knob, QrmNodeOptions, PATIENCE, QOS,
};

use pinion_agent::testing::{machine, run_request};
use pinion_api::plugin::Identity;
use pinion_api::resourceplugin as rp;
use pinion_core::testing::cpus as set;
use pinion_core::CpuSet;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::CgroupName;
use pinion_host::meminfo::NodeMemory;
use pinion_plugins::memory::{MemoryPlugin, MemoryPluginConfig};
use pinion_plugins::{
    Allocation, AllocationInfo, Allocations, Options, PluginError, Request, ResourcePlugin,
};

const GIB: u64 = 1 << 30;
const TAG: &str = "example.com/tag";

fn memory_plugin(state: &Path) -> MemoryPlugin {
    let nodes = (0..2)
        .map(|node| NodeMemory {
            node,
            total: 64 * GIB,
            free: 60 * GIB,
            hugepages: Vec::new(),
        })
        .collect();
    MemoryPlugin::open(nodes, MemoryPluginConfig::default(), Some(state)).expect("memory plugin")
}

/// A plugin for `example.com/tag` whose answers the test scripts: every
/// container gets `CpusetMems` = the current `mems`, an environment
/// variable and an annotation; `GetResourcesAllocation` reports `mems` for
/// every container it allocated (so changing it is a plugin changing its
/// mind, which the reconcile loop must push).
#[derive(Clone)]
struct Scripted {
    mems: Arc<Mutex<String>>,
    allocated: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    removed: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    fn new(mems: &str) -> Self {
        Self {
            mems: Arc::new(Mutex::new(mems.to_string())),
            allocated: Arc::default(),
            removed: Arc::default(),
        }
    }

    fn info(&self, pod: &str) -> AllocationInfo {
        AllocationInfo {
            oci_property_name: "CpusetMems".into(),
            is_node_resource: true,
            is_scalar_resource: true,
            allocated_quantity: 1.0,
            allocation_result: self.mems.lock().expect("lock").clone(),
            envs: [("TAG_POD".to_string(), pod.to_string())].into(),
            annotations: [("example.com/tagged".to_string(), "yes".to_string())].into(),
            ..AllocationInfo::default()
        }
    }
}

impl ResourcePlugin for Scripted {
    fn resource_name(&self) -> &str {
        TAG
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: false,
            need_reconcile: true,
        }
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        self.allocated
            .lock()
            .expect("lock")
            .entry(request.pod_uid.clone())
            .or_default()
            .push(request.container_name.clone());
        Ok(Some(
            [(TAG.to_string(), self.info(&request.pod_uid))].into(),
        ))
    }

    fn allocations(&self) -> Allocations {
        let allocated = self.allocated.lock().expect("lock").clone();
        allocated
            .into_iter()
            .map(|(pod, containers)| {
                let info = self.info(&pod);
                let containers = containers
                    .into_iter()
                    .map(|c| (c, [(TAG.to_string(), info.clone())].into()))
                    .collect();
                (pod, containers)
            })
            .collect()
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        self.allocated.lock().expect("lock").remove(pod_uid);
        self.removed.lock().expect("lock").push(pod_uid.to_string());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinions_memory_plugin_binds_a_dedicated_pod_to_its_numa_node_over_the_socket() {
    let agent = Agent::start();
    let plugin_state = agent.dir.path().join("memory-plugin");
    let served = agent.serve(memory_plugin(&plugin_state));
    agent.wait_for_plugin("memory", "active").await;

    let admitted = agent
        .handle
        .admit(admission(
            "pinion-run-db",
            "2",
            &[("memory", "4Gi")],
            &[
                ("katalyst.kubewharf.io/qos_level", "dedicated_cores"),
                (
                    "katalyst.kubewharf.io/memory_enhancement",
                    r#"{"numa_binding":"true"}"#,
                ),
            ],
        ))
        .await
        .expect("admitted");
    let node_cpus = |node: u32| -> CpuSet { machine(2, 4, 2).numa_cpus()[&node].clone() };
    let mems = admitted.placement.mems.clone();
    assert_eq!(mems.len(), 1, "NUMA binding gives one memory node: {mems}");
    let node = mems.iter().next().expect("one node");
    assert!(
        admitted.placement.cpus.is_subset(&node_cpus(node)),
        "the memory node {node} is not the node of the CPUs {}",
        admitted.placement.cpus
    );
    let cgroup = admitted
        .cgroup
        .clone()
        .expect("a standalone run has a cgroup");
    agent
        .wait_for_cgroup(&cgroup, "bound to the plugin's node", |cpus, written| {
            *written == mems && *cpus == admitted.placement.cpus
        })
        .await;

    // Asking for more memory than any node has left is refused with the
    // kubelet fork's text, naming the resource and the container, and
    // leaves nothing behind.
    let err = agent
        .handle
        .admit(admission(
            "pinion-run-huge",
            "1",
            &[("memory", "500Gi")],
            &[
                ("katalyst.kubewharf.io/qos_level", "dedicated_cores"),
                (
                    "katalyst.kubewharf.io/memory_enhancement",
                    r#"{"numa_binding":"true"}"#,
                ),
            ],
        ))
        .await
        .expect_err("no node has 500Gi");
    let text = err.to_string();
    assert!(
        text.contains("memory") && text.contains("pinion-run-huge"),
        "{text}"
    );
    assert!(
        !agent
            .handle
            .snapshot()
            .workloads
            .iter()
            .any(|w| w.pod == "pinion-run-huge"),
        "a refused admission left a workload"
    );

    served.stop().await;
    agent.wait_for_plugin("memory", "stopped").await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_settings_reach_the_container_and_its_changes_are_pushed_by_reconcile() {
    let agent = Agent::start();
    let script = Scripted::new("0");
    let served = agent.serve(script.clone());
    agent.wait_for_plugin(TAG, "active").await;

    let admitted = agent
        .handle
        .admit(admission("pinion-run-tagged", "1", &[(TAG, "1")], &[]))
        .await
        .expect("admitted");
    assert_eq!(admitted.placement.mems, set("0"));
    assert_eq!(
        admitted.placement.env.get("TAG_POD").map(String::as_str),
        Some("pinion-run-tagged")
    );
    assert_eq!(
        admitted
            .placement
            .annotations
            .get("example.com/tagged")
            .map(String::as_str),
        Some("yes")
    );
    let cgroup = admitted.cgroup.clone().expect("cgroup");
    agent
        .wait_for_cgroup(&cgroup, "on node 0", |_, mems| *mems == set("0"))
        .await;

    // The plugin changes its mind: the next reconcile pushes node 1 to the
    // running container, and leaves its exclusive CPUs where they are.
    *script.mems.lock().expect("lock") = "1".into();
    let cpus = admitted.placement.cpus.clone();
    agent
        .wait_for_cgroup(&cgroup, "moved to node 1 by reconcile", |now, mems| {
            *mems == set("1") && *now == cpus
        })
        .await;

    // Releasing the run tells the plugin (RemovePod), once.
    agent
        .handle
        .release("pinion-run-tagged".into(), None)
        .await
        .expect("released");
    let deadline = Instant::now() + PATIENCE;
    while !script
        .removed
        .lock()
        .expect("lock")
        .contains(&"pinion-run-tagged".to_string())
    {
        assert!(
            Instant::now() < deadline,
            "the plugin never heard RemovePod"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A plugin that has gone (spec §4.6): a pod with a QoS level other
    // than shared_cores is refused with the fork's text and nothing stays
    // placed; a pod without one (or shared_cores) that asks for no
    // exclusive CPUs goes on without the plugin's settings (one that does
    // is refused: issue 27); pods that do not need it are untouched.
    served.stop().await;
    agent.wait_for_plugin(TAG, "stopped").await;
    let err = agent
        .handle
        .admit(admission(
            "pinion-run-orphan",
            "1",
            &[(TAG, "1")],
            &[("katalyst.kubewharf.io/qos_level", "dedicated_cores")],
        ))
        .await
        .expect_err("the tag plugin is stopped");
    let text = err.to_string();
    assert!(
        text.contains(&format!("allocate for resources {TAG} for pod: pinion/pinion-run-orphan, container: main got error")),
        "{text}"
    );
    assert!(
        !agent
            .handle
            .snapshot()
            .workloads
            .iter()
            .any(|w| w.pod == "pinion-run-orphan"),
        "a refused admission left a workload"
    );
    agent
        .handle
        .admit(admission("pinion-run-exclusive", "1", &[(TAG, "1")], &[]))
        .await
        .expect_err("an exclusive request is never tolerated");
    let tolerated = agent
        .handle
        .admit(admission(
            "pinion-run-tolerated",
            "500m",
            &[(TAG, "1")],
            &[],
        ))
        .await
        .expect("no QoS level: the failure is tolerated");
    assert!(
        tolerated.placement.env.is_empty(),
        "{:?}",
        tolerated.placement.env
    );
    agent
        .handle
        .admit(admission("pinion-run-plain", "1", &[], &[]))
        .await
        .expect("an admission without plugin resources");

    // It comes back on the same socket: re-registered and serving.
    let _again = agent.serve(script.clone());
    agent.wait_for_plugin(TAG, "active").await;
    agent
        .handle
        .admit(admission("pinion-run-back", "1", &[(TAG, "1")], &[]))
        .await
        .expect("admitted after the plugin's return");
    agent.stop().await;
}

const MEMORY_ENHANCEMENT: &str = "katalyst.kubewharf.io/memory_enhancement";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_plugins_register_like_any_plugin_and_place_pods_by_their_qos_level() {
    let sysroot = meminfo_root();
    let agent = Agent::fresh_with_builtin(&["cpu", "memory"], sysroot.path()).await;
    let views = agent.handle.plugins();
    for resource in ["cpu", "memory"] {
        let view = views
            .iter()
            .find(|v| v.resource == resource)
            .unwrap_or_else(|| panic!("{resource} is not registered: {views:?}"));
        assert_eq!(view.state, "active");
        assert_eq!(view.socket, pinion_agent::qrm::registry::IN_PROCESS);
        assert_eq!(view.topology_aligned, Some(true), "options asked: {view:?}");
    }
    assert_eq!(
        std::fs::read_dir(agent.registry_dir()).map_or(0, Iterator::count),
        0,
        "built-in plugins run in the process, without sockets"
    );

    // A Guaranteed pod with integer CPUs and no annotation: exactly the
    // static policy's CPUs (turning the plugins on changes nothing for it).
    let plain = Agent::start();
    let reference = plain
        .handle
        .admit(run_request("pinion-run-g", Some("2"), None))
        .await
        .expect("static policy admits");
    plain.stop().await;
    let guaranteed = agent
        .handle
        .admit(run_request("pinion-run-g", Some("2"), None))
        .await
        .expect("the cpu plugin admits");
    assert_eq!(guaranteed.placement.cpus, reference.placement.cpus);
    assert_eq!(guaranteed.placement.mems, reference.placement.mems);
    assert_eq!(
        guaranteed.placement.pool.to_string(),
        "plugin",
        "the plugin placed it"
    );

    // A dedicated NUMA-bound pod: CPUs of one node, that node's memory.
    let db = agent
        .handle
        .admit(admission(
            "pinion-run-db",
            "4",
            &[("memory", "8Gi")],
            &[
                (QOS, "dedicated_cores"),
                (MEMORY_ENHANCEMENT, r#"{"numa_binding":"true"}"#),
            ],
        ))
        .await
        .expect("dedicated admitted");
    let topology = machine(2, 4, 2);
    let nodes = topology.numa_nodes_of(&db.placement.cpus);
    assert_eq!(nodes.len(), 1, "{} spans {nodes:?}", db.placement.cpus);
    assert_eq!(db.placement.mems, CpuSet::from_iter([nodes[0]]));

    // A shared_cores pod runs in the share pool: none of the exclusive or
    // reserved CPUs, and its cgroup gets the pool.
    let web = admit_at(&agent, "pinion-run-web", "500m", "shared_cores").await;
    let reserved = agent.handle.snapshot().reserved.clone();
    assert!(!web.placement.cpus.is_empty());
    for (what, held) in [
        ("reserved", &reserved),
        ("guaranteed", &guaranteed.placement.cpus),
        ("db", &db.placement.cpus),
    ] {
        assert!(
            web.placement.cpus.is_disjoint(held),
            "web {} overlaps {what} {held}",
            web.placement.cpus
        );
    }
    let web_cgroup = web.cgroup.clone().expect("cgroup");
    let web_cpus = web.placement.cpus.clone();
    agent
        .wait_for_cgroup(&web_cgroup, "in the share pool", |cpus, _| {
            *cpus == web_cpus
        })
        .await;

    // Restart: the plugins' state survives in the agent's journal (no
    // state file of their own);
    // every container keeps its CPUs. (Each run's cgroup gets a process, as
    // `pinion run` puts its command there, so the restart keeps it.)
    for view in &agent.handle.snapshot().workloads {
        let name = CgroupName::new(&view.pod).expect("cgroup name");
        if let Some(cgroup) = agent.host.tree().children.get_mut(&name) {
            cgroup.pids.push(std::process::id());
        }
    }
    let before: Vec<_> = agent
        .handle
        .snapshot()
        .workloads
        .iter()
        .map(|w| {
            (
                w.pod.clone(),
                w.placement.cpus.clone(),
                w.placement.mems.clone(),
            )
        })
        .collect();
    let (dir, host) = agent.stop().await;
    for kind in pinion_plugins::builtin::Kind::ALL {
        assert!(
            !dir.path().join(kind.state_file()).exists(),
            "{} written",
            kind.state_file()
        );
    }
    let again = Agent::with_builtin(dir, host, &["cpu", "memory"], sysroot.path()).await;
    let after: Vec<_> = again
        .handle
        .snapshot()
        .workloads
        .iter()
        .map(|w| {
            (
                w.pod.clone(),
                w.placement.cpus.clone(),
                w.placement.mems.clone(),
            )
        })
        .collect();
    assert_eq!(after, before, "a restart moved a container");
    // The restarted CPU plugin still holds the dedicated CPUs: a second
    // dedicated pod gets others.
    let second = again
        .handle
        .admit(admission(
            "pinion-run-db2",
            "4",
            &[("memory", "1Gi")],
            &[(QOS, "dedicated_cores")],
        ))
        .await
        .expect("second dedicated admitted");
    assert!(
        second.placement.cpus.is_disjoint(&db.placement.cpus),
        "{} reuses {}",
        second.placement.cpus,
        db.placement.cpus
    );
    again.stop().await;
}

/// #11 (standalone OCI settings): what a plugin answers for `CpuQuota`,
/// `CpuPeriod`, `CpuShares`, `MemoryLimitInBytes` and
/// `MemorySwapLimitInBytes` becomes the run's cgroup files (v2 and v1
/// layouts), a reconcile change rewrites only the file that changed, and a
/// run on exclusive CPUs without a plugin gets the static policy's
/// unlimited quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_oci_settings_become_cgroup_files_and_follow_reconcile() {
    use pinion_host::cgroup::CgroupVersion;
    use qrm_common::{info, Knob};

    const WIDGET: &str = "example.com/widget";
    let cases = [
        (
            CgroupVersion::V2,
            vec![
                ("cpu.max", "50000 100000"),
                ("cpu.weight", "20"),
                ("memory.max", "268435456"),
                ("memory.swap.max", "268435456"),
            ],
            ("cpu.max", "80000 100000"),
            ("cpu.max", "max"),
        ),
        (
            CgroupVersion::V1,
            vec![
                ("cpu.cfs_period_us", "100000"),
                ("cpu.cfs_quota_us", "50000"),
                ("cpu.shares", "512"),
                ("memory.limit_in_bytes", "268435456"),
                ("memory.memsw.limit_in_bytes", "536870912"),
            ],
            ("cpu.cfs_quota_us", "80000"),
            ("cpu.cfs_quota_us", "-1"),
        ),
    ];
    for (version, files, changed, unlimited) in cases {
        let agent = Agent::start();
        agent.host.tree().version = version;
        let knob = Knob::new(
            WIDGET,
            [
                (WIDGET.to_string(), info("CpuQuota", "50000", "a")),
                (format!("{WIDGET}-period"), info("CpuPeriod", "100000", "a")),
                (format!("{WIDGET}-shares"), info("CpuShares", "512", "a")),
                (
                    format!("{WIDGET}-memory"),
                    info("MemoryLimitInBytes", "268435456", "a"),
                ),
                (
                    format!("{WIDGET}-swap"),
                    info("MemorySwapLimitInBytes", "536870912", "a"),
                ),
                (format!("{WIDGET}-oom"), info("OomScoreAdj", "500", "a")),
            ]
            .into(),
        );
        let _served = agent.serve(knob.clone());
        agent.wait_for_plugin(WIDGET, "active").await;

        let admitted = agent
            .handle
            .admit(admission("pinion-run-oci", "1", &[(WIDGET, "1")], &[]))
            .await
            .expect("admitted");
        // The OOM score adjustment is the launcher's (on itself, before
        // exec): in the placement, not a cgroup file.
        assert_eq!(admitted.placement.resources.oom_score_adj, Some(500));
        let cgroup = admitted.cgroup.clone().expect("cgroup");
        let want: BTreeMap<String, String> = files
            .iter()
            .map(|(f, v)| ((*f).to_string(), (*v).to_string()))
            .collect();
        agent
            .wait_for_files(&cgroup, "the plugin's settings", |c| c.files == want)
            .await;
        let writes_before = agent.host.tree().children[&CgroupName::new(&cgroup).expect("name")]
            .writes
            .clone();

        // The plugin changes its quota: only that file is written again.
        knob.state()
            .answer
            .insert(WIDGET.to_string(), info("CpuQuota", "80000", "a"));
        agent
            .wait_for_files(&cgroup, "the new quota", |c| {
                c.files.get(changed.0).map(String::as_str) == Some(changed.1)
            })
            .await;
        let writes = agent.host.tree().children[&CgroupName::new(&cgroup).expect("name")]
            .writes
            .clone();
        assert_eq!(
            writes[writes_before.len()..],
            [(changed.0.to_string(), changed.1.to_string())],
            "{version}: {writes:?}"
        );

        // Exclusive CPUs without a plugin: the quota is lifted.
        let plain = agent
            .handle
            .admit(admission("pinion-run-exclusive", "1", &[], &[]))
            .await
            .expect("admitted");
        let plain_cgroup = plain.cgroup.clone().expect("cgroup");
        let files = agent.host.tree().children[&CgroupName::new(&plain_cgroup).expect("name")]
            .files
            .clone();
        assert_eq!(
            files,
            [(unlimited.0.to_string(), unlimited.1.to_string())].into(),
            "{version}"
        );
        // A shared-pool run sets nothing.
        let shared = agent
            .handle
            .admit(admission("pinion-run-shared", "500m", &[], &[]))
            .await
            .expect("admitted");
        let shared_cgroup = shared.cgroup.clone().expect("cgroup");
        assert!(
            agent.host.tree().children[&CgroupName::new(&shared_cgroup).expect("name")]
                .files
                .is_empty()
        );
        agent.stop().await;
    }
}

/// Regression: a plugin that moves other containers while it allocates one
/// (Pinion's CPU plugin cutting a shared pool for a dedicated pod) had
/// those moves reach the other containers only at the next reconcile
/// period — up to `reconcilePeriod` (5 s by default) during which a CPU
/// could be both in the pool and exclusive. Now every `Allocate` is
/// followed by a pass at once: with a period of an hour, the first pod
/// follows the plugin's new answer as soon as the second is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_is_followed_by_a_reconcile_pass_at_once() {
    // The cpu plugin: only it may set the cpuset.
    const CPU: &str = "cpu";
    let options = QrmNodeOptions::new(Duration::from_secs(3600));
    let agent = Agent::start_with_options(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        &options,
    );
    let knob = Knob::one(CPU, "CpusetCpus", "1", "widget");
    let _served = agent.serve(knob.clone());
    agent.wait_for_plugin(CPU, "active").await;
    let first = agent
        .handle
        .admit(admission("pinion-run-first", "500m", &[], &[]))
        .await
        .expect("first");
    assert_eq!(first.placement.cpus, set("1"));
    // The plugin moves every container it holds to CPU 2 while it
    // allocates the second one.
    knob.state().answer = [(
        CPU.to_string(),
        qrm_common::info("CpusetCpus", "2", "widget"),
    )]
    .into();
    agent
        .handle
        .admit(admission("pinion-run-second", "500m", &[], &[]))
        .await
        .expect("second");
    agent
        .wait_for_cgroup(
            "pinion-run-first",
            "moved to the plugin's new cpu",
            |cpus, _| *cpus == set("2"),
        )
        .await;
    agent.stop().await;
}

/// #17: the built-in plugins keep their state in the agent's journal.
/// Changes made outside an admission — an operator's pin, a departed pod's
/// `RemovePod` — are flushed by the backstop without any admission, and a
/// restart finds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_plugin_changes_outside_admissions_reach_the_journal() {
    let sysroot = meminfo_root();
    let agent = Agent::fresh_with_builtin(&["cpu"], sysroot.path()).await;
    for pod in ["pinion-run-web", "pinion-run-db"] {
        let level = if pod.ends_with("db") {
            "dedicated_cores"
        } else {
            "shared_cores"
        };
        agent
            .handle
            .admit(admission(pod, "2", &[], &[(QOS, level)]))
            .await
            .expect("admitted");
    }
    let outbox = &agent.qrm.plugin_journal().outbox;
    assert!(
        outbox.is_empty(),
        "each admission's flush took its plugin changes"
    );
    let pools = agent.handle.cpu_pools().expect("pools");
    pools.set("share", "3", false).expect("pin");
    agent
        .handle
        .release("pinion-run-db".into(), None)
        .await
        .expect("released");
    let journal = agent.dir.path().join(pinion_host::journal::JOURNAL);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text =
            String::from_utf8_lossy(&std::fs::read(&journal).unwrap_or_default()).into_owned();
        let removed = text.contains(r#""key":"pod/pinion-run-db","value":null"#);
        if outbox.is_empty() && text.contains(r#""pins":{"share""#) && removed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pin and the removal never reached the journal ({} waiting): {text}",
            outbox.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let (dir, host) = agent.stop().await;
    let again = Agent::with_builtin(dir, host, &["cpu"], sysroot.path()).await;
    let view = again.handle.cpu_pools().expect("pools").view();
    let share = view
        .pools
        .iter()
        .find(|p| p.name == "share")
        .expect("share pool");
    assert_eq!(share.size, 3, "the pin survived: {view:?}");
    assert_eq!(share.members, ["pinion-run-web/main"]);
    // The dedicated pod's CPUs went back: a new dedicated pod may take
    // any CPU outside the reserved one and the share pool.
    let plugin = again.qrm.cpu_pools().expect("cpu plugin");
    let dedicated: Vec<String> = plugin
        .view()
        .pools
        .iter()
        .filter(|p| p.name == "dedicated")
        .flat_map(|p| p.members.clone())
        .collect();
    assert!(dedicated.is_empty(), "{dedicated:?}");
    again.stop().await;
}

/// A plugin served over its socket that notes the deadline (`grpc-timeout`)
/// each `Allocate` came with. It forwards only what the manager calls for a
/// plugin without topology alignment or pre-start; the rest keep the
/// generated stubs (`Unimplemented`).
struct ToldDeadlines {
    plugin: pinion_plugins::grpc::GrpcPlugin<Knob>,
    told: Arc<Mutex<Vec<Option<String>>>>,
}

type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

#[tonic::async_trait]
impl rp::resource_plugin_server::ResourcePlugin for ToldDeadlines {
    async fn allocate(
        &self,
        request: tonic::Request<rp::ResourceRequest>,
    ) -> Answer<rp::ResourceAllocationResponse> {
        let timeout = request.metadata().get("grpc-timeout");
        let timeout = timeout.and_then(|t| t.to_str().ok()).map(str::to_string);
        self.told.lock().expect("told").push(timeout);
        self.plugin.allocate(request).await
    }

    async fn get_resources_allocation(
        &self,
        request: tonic::Request<rp::GetResourcesAllocationRequest>,
    ) -> Answer<rp::GetResourcesAllocationResponse> {
        self.plugin.get_resources_allocation(request).await
    }

    async fn remove_pod(
        &self,
        request: tonic::Request<rp::RemovePodRequest>,
    ) -> Answer<rp::RemovePodResponse> {
        self.plugin.remove_pod(request).await
    }

    async fn get_resource_plugin_options(
        &self,
        request: tonic::Request<rp::Empty>,
    ) -> Answer<rp::ResourcePluginOptions> {
        self.plugin.get_resource_plugin_options(request).await
    }
}

/// A gRPC `grpc-timeout` value ("5000000u", "5S", …) as a duration.
fn grpc_timeout(value: &str) -> Duration {
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().expect("grpc-timeout digits");
    match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        other => panic!("grpc-timeout unit {other:?} in {value:?}"),
    }
}

/// A plugin over a socket is told each call's deadline (the manager's
/// `rpc_timeout`), so it knows how long it has; the manager's own deadline
/// bounds the call as well, which is all an in-process plugin gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_over_a_socket_is_told_each_calls_deadline() {
    const WIDGET: &str = "example.com/widget";
    let rpc_timeout = Duration::from_secs(5);
    let agent = Agent::start_with(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        Vec::new(),
        rpc_timeout,
    );
    let told = Arc::new(Mutex::new(Vec::new()));
    let plugin = ToldDeadlines {
        plugin: pinion_plugins::grpc::GrpcPlugin::new(Knob::one(WIDGET, "CpuShares", "512", "w")),
        told: Arc::clone(&told),
    };
    let socket = agent.registry_dir().join("told.sock");
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let served = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        pinion_api::plugin::serve(&socket, Identity::new(WIDGET), plugin, shutdown)
            .await
            .expect("plugin serves");
    });
    agent.wait_for_plugin(WIDGET, "active").await;
    agent
        .handle
        .admit(admission("pinion-run-told", "500m", &[(WIDGET, "1")], &[]))
        .await
        .expect("admitted");
    let told = told.lock().expect("told").clone();
    assert_eq!(told.len(), 1, "one Allocate: {told:?}");
    let deadline = grpc_timeout(told[0].as_deref().expect("the call carried grpc-timeout"));
    assert!(
        deadline <= rpc_timeout && deadline > rpc_timeout - Duration::from_secs(1),
        "told {deadline:?}, the manager's deadline is {rpc_timeout:?}"
    );
    stop.send(true).expect("stop");
    served.await.expect("served");
    agent.stop().await;
}

/// A plugin of `example.com/widget` that reports `allocatable` widgets
/// (half per NUMA node) of a capacity of 4 (2 per node) as its node
/// resource.
fn widgets(allocatable: f64) -> Allocatable {
    let per_numa = |value: f64| {
        (0..2)
            .map(|node| pinion_plugins::TopologyAwareQuantity::numa(node, value))
            .collect::<Vec<_>>()
    };
    Allocatable {
        resource: "example.com/widget".into(),
        allocatable: BTreeMap::from([(
            "example.com/widget".to_string(),
            pinion_plugins::AllocatableResource {
                is_node_resource: true,
                is_scalar_resource: true,
                aggregated_allocatable_quantity: allocatable,
                topology_aware_allocatable_quantity_list: per_numa(allocatable / 2.0),
                aggregated_capacity_quantity: 4.0,
                topology_aware_capacity_quantity_list: per_numa(2.0),
            },
        )]),
    }
}

/// Issue 28 item 2 (`IsNodeResource`): the manager asks each plugin for
/// `GetTopologyAwareAllocatableResources` and keeps capacity and
/// allocatable per resource; podresources `GetAllocatableResources` and
/// `pinion plugins` show them, and they go when the plugin goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_node_resources_show_in_podresources_and_go_with_the_plugin() {
    let agent = Agent::start();
    let served = agent.serve_as(widgets(3.0), "widget.sock");
    agent.wait_for_plugin("example.com/widget", "active").await;
    let mut resources = agent.qrm.registry().node_resources();
    tokio::time::timeout(
        PATIENCE,
        resources.wait_for(|r| r.iter().any(|r| r.resource_name == "example.com/widget")),
    )
    .await
    .expect("the widget's node resource within the patience")
    .expect("registry alive");
    let reported = resources.borrow().clone();
    let topology = machine(2, 4, 2);
    let answer =
        pinion_agent::podresources::allocatable(&agent.handle.snapshot(), &topology, &reported);
    let widget = answer
        .resources
        .iter()
        .find(|r| r.resource_name == "example.com/widget")
        .unwrap_or_else(|| panic!("no widget among {:?}", answer.resources));
    assert_eq!(
        (
            widget.aggregated_allocatable_quantity,
            widget.aggregated_capacity_quantity,
            widget.is_node_resource,
            widget.is_scalar_resource
        ),
        (3.0, 4.0, true, true)
    );
    let per_numa: Vec<(u64, f64)> = widget
        .topology_aware_allocatable_quantity_list
        .iter()
        .map(|q| (q.node, q.resource_value))
        .collect();
    assert_eq!(per_numa, [(0, 1.5), (1, 1.5)]);
    assert!(answer.resources.iter().any(|r| r.resource_name == "cpu"));
    let view = agent
        .qrm
        .registry()
        .views()
        .into_iter()
        .find(|p| p.resource == "example.com/widget")
        .expect("listed");
    assert_eq!(view.node_resources.len(), 1, "{view:?}");
    assert_eq!(
        (
            view.node_resources[0].allocatable,
            view.node_resources[0].capacity
        ),
        (3.0, 4.0)
    );
    served.stop().await;
    tokio::time::timeout(
        PATIENCE,
        resources.wait_for(|r| r.iter().all(|r| r.resource_name != "example.com/widget")),
    )
    .await
    .expect("the widget's node resource gone with its plugin")
    .expect("registry alive");
    agent.stop().await;
}

/// A plugin reporting a node resource amount that is not a number is
/// refused (counted as its error), and nothing of it is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_resource_that_is_not_a_number_is_refused_and_counted() {
    let agent = Agent::start();
    let _served = agent.serve_as(widgets(f64::NAN), "widget.sock");
    agent.wait_for_plugin("example.com/widget", "active").await;
    let method = "GetTopologyAwareAllocatableResources";
    qrm_common::wait_until("the refused answer counted", || {
        agent
            .qrm
            .registry()
            .views()
            .iter()
            .any(|p| p.stats.calls.get(method).is_some_and(|c| c.errors > 0))
    })
    .await;
    let view = agent
        .qrm
        .registry()
        .views()
        .into_iter()
        .find(|p| p.resource == "example.com/widget")
        .expect("listed");
    assert!(view.node_resources.is_empty(), "{view:?}");
    let error = view.stats.last_error.expect("an error");
    assert!(
        error.contains("example.com/widget with allocatable NaN"),
        "{error}"
    );
    assert!(agent.qrm.registry().node_resources().borrow().is_empty());
    agent.stop().await;
}

/// Issue 28 item 4: a plugin's `Unified` OCI property (cgroup v2 files)
/// reaches the run's cgroup; a file outside the list fails the admission
/// naming the file, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_unified_files_reach_the_cgroup_and_unlisted_ones_are_refused() {
    const IO: &str = "example.com/io";
    let agent = Agent::start();
    let knob = Knob::one(
        IO,
        "Unified",
        r#"{"io.weight":"default 300","memory.high":"1073741824"}"#,
        "io",
    );
    let _served = agent.serve_as(knob.clone(), "io.sock");
    agent.wait_for_plugin(IO, "active").await;
    agent
        .handle
        .admit(admission("pinion-run-io", "500m", &[(IO, "1")], &[]))
        .await
        .expect("admitted");
    agent
        .wait_for_files("pinion-run-io", "io.weight and memory.high written", |c| {
            c.files.get("io.weight").map(String::as_str) == Some("default 300")
                && c.files.get("memory.high").map(String::as_str) == Some("1073741824")
        })
        .await;
    knob.state().answer.values_mut().for_each(|info| {
        info.allocation_result = r#"{"cpuset.cpus":"0"}"#.to_string();
    });
    let refused = agent
        .handle
        .admit(admission("pinion-run-owned", "500m", &[(IO, "1")], &[]))
        .await
        .expect_err("a plugin may not set cpuset.cpus");
    assert!(
        refused
            .to_string()
            .contains("sets \"cpuset.cpus\", which a resource plugin may not set"),
        "{refused}"
    );
    let name = CgroupName::new("pinion-run-owned").expect("name");
    assert!(
        agent
            .host
            .tree()
            .children
            .get(&name)
            .is_none_or(|c| c.files.is_empty()),
        "nothing written for the refused run"
    );
    agent.stop().await;
}

/// `Registration.Register` of `resource` on socket `endpoint`, over the
/// agent's registration socket.
async fn register(agent: &Agent, resource: &str, endpoint: &str) -> Result<(), tonic::Status> {
    let socket = agent.dir.path().join("resource-plugins/kubelet.sock");
    let channel = pinion_api::uds::connect(&socket, PATIENCE)
        .await
        .expect("connect to the registration socket");
    rp::registration_client::RegistrationClient::new(channel)
        .register(rp::RegisterRequest {
            version: pinion_api::plugin::API_VERSION.to_string(),
            endpoint: endpoint.to_string(),
            resource_name: resource.to_string(),
            options: Some(rp::ResourcePluginOptions::default()),
        })
        .await
        .map(drop)
}

/// Regression (hunt D5): the registration socket was a plain tonic server
/// with no connection cap, no first-byte deadline and no idle timeout, so
/// a crowd of idle connections (each sending only the HTTP/2 preface) was
/// held for good and could take all the agent's descriptors. It now has
/// the podresources socket's bounds: at the cap a newcomer evicts the
/// oldest idle connection, and a plugin still registers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_idle_connections_cannot_crowd_the_registration_socket() {
    use std::io::Write as _;
    let agent = Agent::start();
    let socket_dir = agent.dir.path().join("resource-plugins");
    let cap = pinion_agent::qrm::register::MAX_CONNECTIONS;
    let mut crowd: Vec<std::os::unix::net::UnixStream> = (0..3 * cap)
        .map(|_| {
            let mut conn = std::os::unix::net::UnixStream::connect(socket_dir.join("kubelet.sock"))
                .expect("connect");
            conn.write_all(HTTP2_PREFACE).expect("preface");
            conn
        })
        .collect();

    let served = qrm_common::serve_in(
        &socket_dir,
        Knob::one("example.com/crowd", "CpusetMems", "0", "crowd"),
        "crowd.sock",
    );
    tokio::time::timeout(
        PATIENCE,
        register(&agent, "example.com/crowd", "crowd.sock"),
    )
    .await
    .expect("Register is served beside the crowd")
    .expect("registered");
    agent.wait_for_plugin("example.com/crowd", "active").await;
    let held = crowd.len() - cap;
    qrm_common::wait_until("the idle connections beyond the cap are closed", || {
        crowd.iter_mut().map(closed).filter(|c| *c).count() >= held
    })
    .await;
    served.stop().await;
    agent.stop().await;
}

/// Found from outside (session 43): `Register` echoed the client's whole
/// `version` (or `endpoint`) in its status message, up to tonic's 4 MiB
/// request limit — a `grpc-message` trailer a client with an 8 KiB
/// metadata limit cannot read. Echoes are cut to 64 characters with the
/// length, and a request over 1 MiB is refused before it is decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_register_bounds_what_it_echoes_and_what_it_reads() {
    let agent = Agent::start();
    let socket = agent.dir.path().join("resource-plugins/kubelet.sock");
    let call = |request: rp::RegisterRequest| {
        let socket = socket.clone();
        async move {
            let channel = pinion_api::uds::connect(&socket, PATIENCE)
                .await
                .expect("connect");
            rp::registration_client::RegistrationClient::new(channel)
                .register(request)
                .await
                .expect_err("refused")
        }
    };
    let long = "v".repeat(12 * 1024);
    for (version, endpoint) in [
        (long.clone(), "x.sock".to_string()),
        (pinion_api::plugin::API_VERSION.to_string(), long.clone()),
    ] {
        let refused = call(rp::RegisterRequest {
            version,
            endpoint,
            resource_name: "example.com/echo".to_string(),
            options: None,
        })
        .await;
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().len() < 400 && refused.message().contains("(12288 bytes)"),
            "{}",
            refused.message()
        );
    }
    let refused = call(rp::RegisterRequest {
        version: "v".repeat(MAX_REGISTER_REQUEST + 1),
        endpoint: "x.sock".to_string(),
        resource_name: "example.com/echo".to_string(),
        options: None,
    })
    .await;
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    agent.stop().await;
}

const MAX_REGISTER_REQUEST: usize = pinion_agent::qrm::register::MAX_REQUEST;

/// Regression (hunt D13): `Register` failed at once (`UNAVAILABLE … No
/// such file or directory`) when the plugin called it before its own
/// socket listened; spec §3.2 step 4 has the manager dial the endpoint
/// (10 s). The call now waits for the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_register_waits_for_a_plugin_socket_that_does_not_listen_yet() {
    let agent = Agent::start();
    let socket_dir = agent.dir.path().join("resource-plugins");
    let registering = tokio::spawn({
        let socket = agent.dir.path().join("resource-plugins/kubelet.sock");
        async move {
            let channel = pinion_api::uds::connect(&socket, PATIENCE)
                .await
                .expect("connect");
            rp::registration_client::RegistrationClient::new(channel)
                .register(rp::RegisterRequest {
                    version: pinion_api::plugin::API_VERSION.to_string(),
                    endpoint: "late.sock".to_string(),
                    resource_name: "example.com/late".to_string(),
                    options: Some(rp::ResourcePluginOptions::default()),
                })
                .await
        }
    });
    // The plugin's server comes up after its `Register` call went out (the
    // pause orders the two; nothing is measured).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let served = qrm_common::serve_in(
        &socket_dir,
        Knob::one("example.com/late", "CpusetMems", "0", "late"),
        "late.sock",
    );
    registering
        .await
        .expect("task")
        .expect("registered once the socket listens");
    agent.wait_for_plugin("example.com/late", "active").await;
    // Another registration is not held up by one that waits.
    let waiting = tokio::spawn({
        let socket = agent.dir.path().join("resource-plugins/kubelet.sock");
        async move {
            let channel = pinion_api::uds::connect(&socket, PATIENCE)
                .await
                .expect("connect");
            rp::registration_client::RegistrationClient::new(channel)
                .register(rp::RegisterRequest {
                    version: pinion_api::plugin::API_VERSION.to_string(),
                    endpoint: "never.sock".to_string(),
                    resource_name: "example.com/never".to_string(),
                    options: Some(rp::ResourcePluginOptions::default()),
                })
                .await
        }
    });
    let other = qrm_common::serve_in(
        &socket_dir,
        Knob::one("example.com/other", "CpusetMems", "0", "other"),
        "other.sock",
    );
    register(&agent, "example.com/other", "other.sock")
        .await
        .expect("registered while another registration waits");
    let never = waiting.await.expect("task").expect_err("no socket ever");
    assert_eq!(never.code(), tonic::Code::Unavailable, "{never:?}");
    assert!(
        never
            .message()
            .starts_with("failed to register resource example.com/never"),
        "{never:?}"
    );
    other.stop().await;
    served.stop().await;
    agent.stop().await;
}

/// Regression (found from outside, session 45): a plugin registered with
/// `Registration.Register` stayed active for good once its socket was gone
/// (the registration socket's directory was not watched), so every
/// `RemovePod` of a departed pod was retried on it and releases waited.
/// Its socket's removal now stops it, as the plugin watcher stops one; a
/// plugin that restarts (unlink, bind, `Register` again) ends active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_registered_plugin_whose_socket_is_removed_is_stopped() {
    let agent = Agent::start();
    let socket_dir = agent.dir.path().join("resource-plugins");
    let knob = || Knob::one("example.com/gone", "CpusetMems", "0", "gone");
    let served = qrm_common::serve_in(&socket_dir, knob(), "gone.sock");
    register(&agent, "example.com/gone", "gone.sock")
        .await
        .expect("registered");
    agent.wait_for_plugin("example.com/gone", "active").await;
    served.stop().await;
    let _ = std::fs::remove_file(socket_dir.join("gone.sock"));
    agent.wait_for_plugin("example.com/gone", "stopped").await;
    let view = agent.plugin("example.com/gone").expect("still listed");
    assert_eq!(
        view.stop_reason.as_deref(),
        Some("its socket was removed or moved away")
    );

    // Restarting: the socket goes and comes back before `Register`.
    let served = qrm_common::serve_in(&socket_dir, knob(), "gone.sock");
    register(&agent, "example.com/gone", "gone.sock")
        .await
        .expect("registered again");
    agent.wait_for_plugin("example.com/gone", "active").await;
    std::fs::remove_file(socket_dir.join("gone.sock")).expect("unlink");
    let again = qrm_common::serve_in(&socket_dir, knob(), "gone.sock");
    qrm_common::wait_until("the new socket listens", || {
        std::os::unix::net::UnixStream::connect(socket_dir.join("gone.sock")).is_ok()
    })
    .await;
    register(&agent, "example.com/gone", "gone.sock")
        .await
        .expect("registered after the restart");
    // The removal's event is read by now (the pause orders it; nothing is
    // measured): it does not stop the plugin back in place.
    tokio::time::sleep(Duration::from_millis(300)).await;
    agent.wait_for_plugin("example.com/gone", "active").await;
    served.stop().await;
    again.stop().await;
    agent.stop().await;
}

/// Regression (hunt D3): the watcher handled only creations and removals,
/// and `notify` reports a rename as `Modify(Name(..))`, so a socket
/// renamed into the directory never registered and one renamed out never
/// stopped. kubelet's fsnotify reads a move-in as a creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_socket_renamed_in_registers_and_renamed_out_stops() {
    let agent = Agent::start();
    let dir = agent.registry_dir().to_path_buf();
    // Bound under a hidden name, which the watcher ignores.
    let served = agent.serve_as(
        Knob::one("example.com/mv", "CpusetMems", "0", "mv"),
        ".mv.tmp",
    );
    qrm_common::wait_until("the hidden socket listens", || {
        std::os::unix::net::UnixStream::connect(dir.join(".mv.tmp")).is_ok()
    })
    .await;
    std::fs::rename(dir.join(".mv.tmp"), dir.join("mv.sock")).expect("rename in");
    agent.wait_for_plugin("example.com/mv", "active").await;

    std::fs::rename(dir.join("mv.sock"), agent.dir.path().join("away.sock")).expect("rename out");
    agent.wait_for_plugin("example.com/mv", "stopped").await;

    // A directory moved in brings its sockets.
    let staging = agent.dir.path().join("staging");
    std::fs::create_dir(&staging).expect("mkdir");
    std::fs::rename(agent.dir.path().join("away.sock"), staging.join("mv.sock"))
        .expect("into the staging directory");
    std::fs::rename(&staging, dir.join("sub")).expect("directory in");
    agent.wait_for_plugin("example.com/mv", "active").await;
    served.stop().await;
    agent.stop().await;
}

/// Found from outside (thirty-third session): a resource name with a
/// newline, or of 300 KB through `GetInfo`, was accepted at registration,
/// and `pinion plugins` tables broke. Both registration paths now refuse a
/// name that is not a qualified resource name, naming the defect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_resource_name_that_is_no_qualified_name_is_refused() {
    let agent = Agent::start();
    for (name, defect) in [
        ("example.com/a\nb", "has characters other than"),
        ("example.com/", "is not a qualified name"),
        ("a/b/c", "is not a qualified name"),
        ("", "is empty"),
    ] {
        let status = register(&agent, name, "never.sock")
            .await
            .expect_err("refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{name:?}: {status:?}"
        );
        assert!(
            status.message().contains(defect),
            "{name:?}: {}",
            status.message()
        );
    }
    let long = format!("example.com/{}", "x".repeat(300_000));
    let status = register(&agent, &long, "never.sock")
        .await
        .expect_err("refused");
    assert!(
        status.message().contains("is longer than 253 bytes") && status.message().len() < 300,
        "{}",
        &status.message()[..status.message().len().min(300)]
    );
}

/// Found from outside (session 45): the removal loop started before the
/// agent's own plugins registered. A pod removal pending from before a
/// restart was then counted as heard by every plugin (none was active yet),
/// and the built-in CPU plugin kept the pod's CPUs for good. `RemovePod`
/// now waits for the built-in plugins (the daemon also registers them
/// first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_removal_is_not_heard_before_the_builtin_plugins_started() {
    let sysroot = meminfo_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agent = Agent::start_in(dir, FakeCgroups::default(), qrm_common::builtin(&["cpu"]));
    let err = agent
        .qrm
        .remove_pod("pod-left")
        .await
        .expect_err("no built-in plugin heard it");
    assert!(
        err.iter()
            .any(|e| e.to_string().contains("cpu have not started yet")),
        "{err:?}"
    );
    agent.start_builtin(sysroot.path()).await;
    agent
        .qrm
        .remove_pod("pod-left")
        .await
        .expect("heard by the cpu plugin");
    agent.stop().await;
}
