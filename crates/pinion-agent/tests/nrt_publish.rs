//! The NodeResourceTopology publisher against the stand-in API server of
//! `tests/common/apiserver.rs` (the real one is `scripts/e2e-cluster.sh`'s):
//! it answers the two calls the publisher makes — `GET` of the Node and the
//! server-side apply `PATCH` of the object — and records every request.
//! The publisher's client is the real `kube` client.

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/sysroot.rs"]
mod sysroot;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use apiserver::{serve, ApiServer as Server, Recorded, NODE, NODE_UID};
use pinion_agent::config::NrtConfig;
use pinion_agent::controller::{Snapshot, WorkloadView};
use pinion_agent::nrt::publish::Publisher;
use pinion_agent::nrt::NrtSource;
use pinion_core::nrt::fingerprint::sign;
use pinion_core::nrt::{Method, Node};
use pinion_core::pod::{Container, Pod};
use pinion_core::topology::{synthetic, Shape};
use pinion_core::{CpuSet, Placement, Pool, Quantity, Topology};
use serde_json::Value;
use tokio::sync::watch;

/// Upper bound for waiting on the publisher (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);

/// 2 NUMA nodes of 2 cores × 2 threads (node 0: CPUs 0-1, 4-5).
fn machine() -> Topology {
    let mut spec = synthetic(Shape {
        sockets: 1,
        numa_per_socket: 2,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
    .spec()
    .clone();
    for node in &mut spec.numa_nodes {
        node.distances = if node.id == 0 {
            vec![10, 20]
        } else {
            vec![20, 10]
        };
    }
    Topology::new(spec).expect("topology")
}

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse_list(list).expect("cpulist")
}

/// The snapshot of a static node, CPU 0 reserved, with Guaranteed pods
/// `(name, exclusive cpus)` of namespace `prod` placed by the runtime.
fn snapshot(topology: &Topology, pods: &[(&str, &str)]) -> Snapshot {
    let mut shared = topology.all_cpus().clone();
    let mut snapshot = Snapshot {
        policy: "static".to_string(),
        all_cpus: topology.all_cpus().clone(),
        reserved: cpus("0"),
        ..Snapshot::default()
    };
    for (name, held) in pods {
        let held = cpus(held);
        shared = shared.difference(&held);
        let uid = format!("uid-{name}");
        let whole = Quantity::parse(&held.len().to_string()).expect("quantity");
        let memory = Quantity::parse("1Gi").expect("quantity");
        let pod = Pod {
            uid: uid.clone(),
            name: (*name).to_string(),
            namespace: "prod".to_string(),
            containers: vec![Container {
                name: "app".to_string(),
                cpu_request: Some(whole.clone()),
                cpu_limit: Some(whole),
                memory_request: Some(memory.clone()),
                memory_limit: Some(memory),
                ..Container::default()
            }],
            ..Pod::default()
        };
        snapshot.pods.insert(uid.clone(), Arc::new(pod));
        snapshot.workloads.push(WorkloadView {
            pod: uid,
            container: "app".to_string(),
            frontend: "runtime".to_string(),
            placement: Placement {
                mems: CpuSet::from_iter(topology.numa_nodes_of(&held)),
                cpus: held,
                pool: Pool::Exclusive,
                ..Placement::default()
            },
            applied: true,
            cgroup: None,
            pid: None,
            container_id: Some(format!("ctr-{name}")),
            plugins: BTreeMap::new(),
            apply_error: None,
            partition: None,
            foreign_write: None,
            admitted: 0,
        });
    }
    snapshot.shared_pool = shared;
    snapshot
}

struct Bed {
    server: Arc<Server>,
    snapshots: watch::Sender<Arc<Snapshot>>,
    source: NrtSource,
    topology: Topology,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(config: NrtConfig, failures: usize) -> Bed {
    start_with(config, failures, false).await
}

async fn start_with(config: NrtConfig, failures: usize, hang: bool) -> Bed {
    let server = Server::default();
    *server.failures.lock().expect("lock") = failures;
    *server.hang.lock().expect("lock") = hang;
    start_on(config, server).await
}

/// The publisher against `server` as the test set it up.
async fn start_on(config: NrtConfig, server: Server) -> Bed {
    let server = Arc::new(server);
    let address = serve(Arc::clone(&server)).await;
    start_at(&config, server, address)
}

/// The publisher sending to `address` (`server` records what it answers
/// there, if it serves it).
fn start_at(config: &NrtConfig, server: Arc<Server>, address: SocketAddr) -> Bed {
    let topology = machine();
    let (snapshots, rx) = watch::channel(Arc::new(snapshot(&topology, &[])));
    let policy = pinion_core::testing::static_policy(topology.clone(), "0");
    let node = Node::new(
        &policy,
        Some("single-numa-node"),
        None,
        Vec::new(),
        Method::WithExclusiveResources,
    );
    let mut source = NrtSource::new(Arc::new(topology.clone()), node, NODE.to_string(), rx);
    let url = format!("http://{address}");
    let client_config = kube::Config::new(url.parse().expect("url"));
    let client = kube::Client::try_from(client_config).expect("client");
    let publisher = Publisher::new(&mut source, client, config, url);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(publisher.run(stop_rx));
    Bed {
        server,
        snapshots,
        source,
        topology,
        stop,
        task,
    }
}

fn quick() -> NrtConfig {
    NrtConfig {
        update_delay: Duration::from_millis(50),
        resync_period: Duration::ZERO,
        ..NrtConfig::default()
    }
}

/// Waits until `done` holds for the recorded PATCHes; their list.
async fn patches_until(server: &Server, done: impl Fn(&[Recorded]) -> bool) -> Vec<Recorded> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let patches = server.patches();
        if done(&patches) {
            return patches;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the publisher did not get there: {patches:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn attribute<'v>(object: &'v Value, name: &str) -> &'v str {
    object["attributes"]
        .as_array()
        .and_then(|list| list.iter().find(|a| a["name"] == name))
        .and_then(|a| a["value"].as_str())
        .unwrap_or_else(|| panic!("no attribute {name} in {object}"))
}

fn zone_resource<'v>(object: &'v Value, zone: &str, resource: &str) -> &'v Value {
    let zone = object["zones"]
        .as_array()
        .and_then(|zones| zones.iter().find(|z| z["name"] == zone))
        .unwrap_or_else(|| panic!("no zone {zone} in {object}"));
    zone["resources"]
        .as_array()
        .and_then(|list| list.iter().find(|r| r["name"] == resource))
        .unwrap_or_else(|| panic!("no {resource} in {zone}"))
}

#[tokio::test]
async fn the_object_is_applied_with_its_node_as_owner_and_follows_admissions() {
    let bed = start(quick(), 0).await;
    let first = patches_until(&bed.server, |p| !p.is_empty()).await;
    let first = &first[0];
    assert_eq!(first.content_type, "application/apply-patch+yaml");
    assert!(
        first.query.contains("fieldManager=pinion"),
        "{}",
        first.query
    );
    assert!(first.query.contains("force=true"), "{}", first.query);
    let object = &first.body;
    assert_eq!(object["apiVersion"], "topology.node.k8s.io/v1alpha2");
    assert_eq!(object["kind"], "NodeResourceTopology");
    assert_eq!(object["metadata"]["name"], NODE);
    let owner = &object["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["name"].as_str(),
            owner["uid"].as_str()
        ),
        (Some("Node"), Some(NODE), Some(NODE_UID))
    );
    assert_eq!(attribute(object, "nodeTopologyPodsFingerprint"), sign([]));
    assert_eq!(
        object["metadata"]["annotations"]["topology.node.k8s.io/fingerprint"],
        sign([])
    );
    assert_eq!(
        attribute(object, "topologyManagerPolicy"),
        "single-numa-node"
    );
    assert_eq!(zone_resource(object, "node-1", "cpu")["available"], "4");

    // An admission of 2 CPUs on node 1: the next update says so.
    bed.snapshots
        .send(Arc::new(snapshot(&bed.topology, &[("db", "2,6")])))
        .expect("send");
    let patches = patches_until(&bed.server, |p| p.len() >= 2).await;
    let object = &patches[1].body;
    assert_eq!(
        attribute(object, "nodeTopologyPodsFingerprint"),
        sign([("prod", "db")])
    );
    assert_eq!(zone_resource(object, "node-1", "cpu")["available"], "2");
    assert_eq!(zone_resource(object, "node-0", "cpu")["available"], "3");
    // The server records the request before the publisher hears back.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while bed.source.answer().publishing.updates < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "updates not counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bed.source.answer().publishing.last_error, None);
}

#[tokio::test]
async fn a_burst_of_admissions_goes_in_one_update_with_the_last_state() {
    let bed = start(quick(), 0).await;
    patches_until(&bed.server, |p| p.len() == 1).await;
    let burst = [
        vec![("a", "2,6")],
        vec![("a", "2,6"), ("b", "3,7")],
        vec![("a", "2,6"), ("b", "3,7"), ("c", "1,5")],
    ];
    for pods in &burst {
        bed.snapshots
            .send(Arc::new(snapshot(&bed.topology, pods)))
            .expect("send");
    }
    let patches = patches_until(&bed.server, |p| p.len() >= 2).await;
    let object = &patches[1].body;
    assert_eq!(
        attribute(object, "nodeTopologyPodsFingerprint"),
        sign([("prod", "a"), ("prod", "b"), ("prod", "c")])
    );
    // Nothing changed since: the same object is not sent again (a second
    // publish with the same state is a no-op).
    bed.snapshots.send_modify(|_| {});
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(bed.server.patches().len(), 2);
}

#[tokio::test]
async fn a_failing_api_server_is_retried_with_the_latest_state_and_blocks_nothing() {
    let bed = start(quick(), 2).await;
    // The first attempt fails: its error is what `pinion nrt` shows.
    patches_until(&bed.server, |p| !p.is_empty()).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while bed.source.answer().publishing.last_error.is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no error reported");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let error = bed.source.answer().publishing.last_error.expect("error");
    assert!(error.contains("etcd is down"), "{error}");
    // Meanwhile the node keeps changing: sending a snapshot never waits.
    for pods in [vec![("a", "2,6")], vec![("a", "2,6"), ("b", "3,7")]] {
        bed.snapshots
            .send(Arc::new(snapshot(&bed.topology, &pods)))
            .expect("send");
    }
    let patches = patches_until(&bed.server, |p| p.len() >= 3).await;
    let accepted = &patches[2].body;
    assert_eq!(
        attribute(accepted, "nodeTopologyPodsFingerprint"),
        sign([("prod", "a"), ("prod", "b")])
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while bed.source.answer().publishing.last_error.is_some() {
        assert!(tokio::time::Instant::now() < deadline, "error not cleared");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_hung_api_server_does_not_hold_the_agents_stop_up() {
    let bed = start_with(quick(), 0, true).await;
    patches_until(&bed.server, |p| !p.is_empty()).await;
    bed.stop.send(true).expect("stop");
    tokio::time::timeout(PATIENCE, bed.task)
        .await
        .expect("the publisher stopped while its update hung")
        .expect("publisher task");
}

/// The e2e cluster found it: kube's client has no read timeout, so an
/// update sent to an API server that accepted the connection and never
/// answered held the publisher for ever, and the object was never updated
/// again after the server recovered. Each request now has `requestTimeout`;
/// the abandoned update is retried with the latest state.
#[tokio::test]
async fn regression_an_update_the_api_server_never_answers_is_abandoned_and_retried() {
    let config = NrtConfig {
        request_timeout: Duration::from_millis(300),
        ..quick()
    };
    let server = Server::default();
    *server.hang_next.lock().expect("lock") = 1;
    let bed = start_on(config, server).await;
    // The first update hangs; the node changes meanwhile.
    patches_until(&bed.server, |p| !p.is_empty()).await;
    assert_eq!(bed.source.answer().publishing.updates, 0);
    bed.snapshots
        .send(Arc::new(snapshot(&bed.topology, &[("db", "2,6")])))
        .expect("snapshot");
    // A later update reaches the server and is answered with the latest state.
    let patches = patches_until(&bed.server, |p| {
        p.len() >= 2
            && attribute(&p[p.len() - 1].body, "nodeTopologyPodsFingerprint")
                == sign([("prod", "db")])
    })
    .await;
    assert!(patches.len() >= 2);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while bed.source.answer().publishing.updates == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no update accepted after the hang"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_periodic_resync_sends_the_object_again_without_changes() {
    let config = NrtConfig {
        resync_period: Duration::from_millis(200),
        ..quick()
    };
    let bed = start(config, 0).await;
    let patches = patches_until(&bed.server, |p| p.len() >= 3).await;
    assert_eq!(patches[0].body, patches[2].body);
}

/// Regression (found from outside with a real API server): the Node's
/// UID was read once, so after the Node was deleted and re-created every
/// update named the dead Node as owner and the garbage collector deleted
/// the object again at once: the node had no NodeResourceTopology while
/// the agent counted successful updates. The owner is read again at every
/// resync.
#[tokio::test]
async fn regression_a_recreated_node_becomes_the_owner_at_the_next_resync() {
    let config = NrtConfig {
        resync_period: Duration::from_millis(200),
        ..quick()
    };
    let bed = start(config, 0).await;
    let owner = |r: &Recorded| r.body["metadata"]["ownerReferences"][0]["uid"].clone();
    let first = patches_until(&bed.server, |p| !p.is_empty()).await;
    assert_eq!(owner(&first[0]), NODE_UID);
    bed.server.node.lock().unwrap()["metadata"]["uid"] = Value::from("recreated-node-uid");
    patches_until(&bed.server, |p| {
        p.last().is_some_and(|r| owner(r) == "recreated-node-uid")
    })
    .await;
}

/// Found from outside (session 46): each resync dropped the owner it knew
/// before reading the Node again, so one read that failed (a timeout, a
/// 403 while RBAC rolls out) had the object applied without its owner
/// reference (server-side apply removed it); a Node deleted meanwhile
/// left the object orphaned. The owner now stays until the Node answers;
/// only a Node that is not found drops it.
#[tokio::test]
async fn regression_an_unreadable_node_at_a_resync_keeps_the_owner_reference() {
    let config = NrtConfig {
        resync_period: Duration::from_millis(200),
        ..quick()
    };
    let bed = start(config, 0).await;
    let owner = |r: &Recorded| r.body["metadata"]["ownerReferences"][0]["uid"].clone();
    let first = patches_until(&bed.server, |p| !p.is_empty()).await;
    assert_eq!(owner(&first[0]), NODE_UID);
    *bed.server.node_refused.lock().unwrap() = Some(403);
    let gets = bed.server.node_gets();
    let sent = bed.server.patches().len();
    patches_until(&bed.server, |p| p.len() >= sent + 2).await;
    assert!(bed.server.node_gets() > gets, "the Node was read again");
    let since = bed.server.patches();
    assert!(
        since[sent..].iter().all(|r| owner(r) == NODE_UID),
        "{:#?}",
        &since[sent..]
    );
    // Gone for good: the owner reference goes too.
    *bed.server.node_refused.lock().unwrap() = Some(404);
    patches_until(&bed.server, |p| {
        p.last().is_some_and(|r| owner(r).is_null())
    })
    .await;
}

/// Regression: while the Node could not be read (a standalone machine has
/// none), it was asked for again beside every update — one `GET` per
/// `PATCH` for ever. It is now asked again after a wait doubling from 1 s
/// (and at every resync), and becomes the owner once it exists.
#[tokio::test]
async fn regression_a_missing_node_is_not_asked_for_at_every_update() {
    let server = Server::default();
    *server.node_refused.lock().unwrap() = Some(404);
    let bed = start_on(quick(), server).await;
    let owner = |r: &Recorded| r.body["metadata"]["ownerReferences"][0]["uid"].clone();
    let started = std::time::Instant::now();
    patches_until(&bed.server, |p| p.len() == 1).await;
    let rounds: usize = 8;
    for round in 0..rounds {
        let pod = format!("pod-{round}");
        bed.snapshots
            .send(Arc::new(snapshot(&bed.topology, &[(&pod, "2,6")])))
            .expect("send");
        patches_until(&bed.server, |p| p.len() == round + 2).await;
    }
    let patches = bed.server.patches();
    assert!(patches.iter().all(|r| owner(r).is_null()), "{patches:#?}");
    // Asked at the first update, then once per wait (1 s, 2 s, 4 s …)
    // that has run out since.
    let (mut waits_over, mut waited, mut wait) = (0, 0, 1);
    while waited + wait <= started.elapsed().as_secs() {
        (waits_over, waited, wait) = (waits_over + 1, waited + wait, wait * 2);
    }
    let gets = bed.server.node_gets();
    assert!(
        gets <= 1 + waits_over && gets < patches.len(),
        "{gets} GETs of the Node for {} updates in {:?}",
        patches.len(),
        started.elapsed()
    );
    // The Node appears: it is the owner at an update once the wait is over.
    *bed.server.node_refused.lock().unwrap() = None;
    let mut round = rounds;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !bed
        .server
        .patches()
        .last()
        .is_some_and(|r| owner(r) == NODE_UID)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Node never became the owner"
        );
        round += 1;
        let pod = format!("pod-{round}");
        bed.snapshots
            .send(Arc::new(snapshot(&bed.topology, &[(&pod, "3,7")])))
            .expect("send");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An unreadable Node (no `nodes` `get` rule: 403) is a warning naming the
/// refusal, once however often it is asked again; a missing Node is only
/// noted (a standalone machine has none).
#[tokio::test]
async fn an_unreadable_node_is_warned_about_once_and_a_missing_one_only_noted() {
    for (refusal, warnings, notes) in [(403, 1, 0), (404, 0, 1)] {
        let (logs, _guard) = pinion_core::testing::logs::capture();
        let server = Server::default();
        *server.node_refused.lock().unwrap() = Some(refusal);
        // Every resync asks for the Node again.
        let config = NrtConfig {
            resync_period: Duration::from_millis(100),
            ..quick()
        };
        let bed = start_on(config, server).await;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while bed.server.node_gets() < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Node was not asked for again"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = bed.stop.send(true);
        bed.task.await.expect("publisher");
        let text = logs.text();
        assert_eq!(
            logs.lines("node not readable"),
            warnings,
            "{refusal}: {text}"
        );
        assert_eq!(logs.lines("node not found"), notes, "{refusal}: {text}");
        if refusal == 403 {
            assert!(text.contains("cannot get resource"), "{text}");
        }
    }
}

/// Regression (found from outside with a real API server): every failed
/// connection read "client error (Connect)" — a closed port and an
/// untrusted certificate alike; kube keeps the cause in the error's
/// sources, which the status and the log now name.
#[tokio::test]
async fn regression_a_refused_connection_is_named_in_the_publishing_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = closed.local_addr().expect("address");
    drop(closed);
    let bed = start_at(&quick(), Arc::new(Server::default()), address);
    let error = loop {
        if let Some(error) = bed.source.answer().publishing.last_error {
            break error;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(error.contains("Connection refused"), "{error}");
    bed.stop.send_replace(true);
}

// ---- the real agent binary, publishing through its kubeconfig ----

#[path = "../../pinion-core/tests/common/shared.rs"]
mod shared;

const MACHINE: &str = "topologies/x86-2s-intel-xeon-gold-6230-ht-snc2";

/// The agent binary on a real machine's sysfs tree (read in place through
/// a sysroot of symlinks, as `tests/podresources.rs` does), its cgroup
/// hierarchy a plain directory declared cgroup v2, publishing to `server`.
struct Agent {
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Agent {
    /// The agent, with `extra` lines appended to its configuration.
    fn start(machine: &std::path::Path, server: SocketAddr, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("sysroot");
        sysroot::fake_cgroup_v2_sysroot(machine, &root);
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster: {{server: \"http://{server}\"}}\nusers:\n- name: pinion\n  user: {{token: test-token}}\ncontexts:\n- name: pinion\n  context: {{cluster: stand-in, user: pinion}}\ncurrent-context: pinion\n"
            ),
        )
        .expect("kubeconfig");
        std::fs::write(
            dir.path().join("config.yaml"),
            format!(
                "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ntopologyManagerPolicy: single-numa-node\nnodeResourceTopology:\n  kubeconfig: {}\n  nodeName: {NODE}\n  updateDelay: 50ms\n{extra}",
                kubeconfig.display()
            ),
        )
        .expect("config");
        let log = std::fs::File::create(dir.path().join("agent.log")).expect("log");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_pinion-agent"))
            .arg("--config")
            .arg(dir.path().join("config.yaml"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--socket")
            .arg(dir.path().join("pinion.sock"))
            .arg("--sysroot")
            .arg(&root)
            .arg("--cgroup-root")
            .arg(root.join("cgroup/pinion"))
            .args(["--metrics-addr", "127.0.0.1:0", "--log-level", "warn"])
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start agent");
        Self { dir, child }
    }

    fn client(&self) -> pinion_api::Client {
        pinion_api::Client::new(&self.dir.path().join("pinion.sock"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sum of `field` of every zone's `cpu`.
fn cpus_in(object: &Value, field: &str) -> u64 {
    object["zones"]
        .as_array()
        .expect("zones")
        .iter()
        .flat_map(|z| z["resources"].as_array().into_iter().flatten())
        .filter(|r| r["name"] == "cpu")
        .map(|r| {
            r[field]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("quantity")
        })
        .sum()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_publishes_through_its_kubeconfig_and_follows_a_run() {
    let Some(machine) = shared::shared(MACHINE) else {
        return;
    };
    let server = Arc::new(Server::default());
    let address = serve(Arc::clone(&server)).await;
    let agent = Agent::start(&machine, address, "");
    let first = patches_until(&server, |p| !p.is_empty()).await;
    let object = &first[0].body;
    assert_eq!(
        object["metadata"]["ownerReferences"][0]["uid"],
        NODE_UID,
        "{}",
        agent.log()
    );
    assert_eq!(object["zones"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        (cpus_in(object, "allocatable"), cpus_in(object, "available")),
        (79, 79)
    );
    assert_eq!(
        attribute(object, "topologyManagerPolicy"),
        "single-numa-node"
    );

    // A standalone run of 2 exclusive CPUs: they are taken (the run is not
    // a pod of the cluster: the fingerprint keeps the empty set).
    let client = agent.client();
    let run = pinion_api::local::RunRequest {
        cpus: Some("2".into()),
        ..pinion_api::local::RunRequest::new("pinion-run-nrt")
    };
    blocking(move || client.run(&run)).await.expect("run");
    let patches = patches_until(&server, |p| {
        p.last()
            .is_some_and(|last| cpus_in(&last.body, "available") == 77)
    })
    .await;
    let last = &patches[patches.len() - 1].body;
    assert_eq!(attribute(last, "nodeTopologyPodsFingerprint"), sign([]));

    // `pinion nrt`'s source: the same object, and how publishing goes.
    let client = agent.client();
    let answer = blocking(move || client.nrt()).await.expect("nrt");
    assert_eq!(cpus_in(&answer.object, "available"), 77);
    assert_eq!(answer.publishing.off, None);
    assert_eq!(answer.publishing.server, Some(format!("http://{address}/")));
    assert!(answer.publishing.updates >= 2, "{:?}", answer.publishing);

    let client = agent.client();
    blocking(move || client.release("pinion-run-nrt"))
        .await
        .expect("release");
    patches_until(&server, |p| {
        p.last()
            .is_some_and(|last| cpus_in(&last.body, "available") == 79)
    })
    .await;
}

/// A resource plugin that declares `example.com/widget` as a node resource
/// (`IsNodeResource`, `IsScalarResource`) and allocates nothing.
struct DeclaresWidgets;

impl pinion_plugins::ResourcePlugin for DeclaresWidgets {
    fn resource_name(&self) -> &str {
        "example.com/widget"
    }

    fn options(&self) -> pinion_plugins::Options {
        pinion_plugins::Options::default()
    }

    fn allocate(
        &mut self,
        _request: &pinion_plugins::Request,
    ) -> Result<Option<pinion_plugins::Allocation>, pinion_plugins::PluginError> {
        Ok(None)
    }

    fn allocations(&self) -> pinion_plugins::Allocations {
        pinion_plugins::Allocations::new()
    }

    fn remove_pod(&mut self, _pod_uid: &str) -> Result<(), pinion_plugins::PluginError> {
        Ok(())
    }

    fn allocatable_resources(&self) -> BTreeMap<String, pinion_plugins::AllocatableResource> {
        let widgets = pinion_plugins::AllocatableResource {
            is_node_resource: true,
            is_scalar_resource: true,
            aggregated_allocatable_quantity: 4.0,
            aggregated_capacity_quantity: 6.0,
            ..pinion_plugins::AllocatableResource::default()
        };
        [("example.com/widget".to_string(), widgets)].into()
    }
}

/// Issue 32 item 6 through the agent binary: with a kubeconfig and the
/// QoS Resource Manager on (nothing else configured), a plugin that
/// registers a node resource puts it in the Node's status; when it goes
/// away its keys go too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_keeps_a_plugins_node_resource_in_the_node_status() {
    let Some(machine) = shared::shared(MACHINE) else {
        return;
    };
    let server = Arc::new(Server::default());
    let address = serve(Arc::clone(&server)).await;
    let agent = Agent::start(
        &machine,
        address,
        "qosResourceManager:\n  enabled: true\n  reconcilePeriod: 1s\n",
    );
    let registry = agent.dir.path().join("state/plugins_registry");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !registry.is_dir() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no plugin directory: {}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let plugin =
        pinion_agent::testing::qrm_node::serve_in(&registry, DeclaresWidgets, "widget.sock");
    let status = |map: &str| server.node.lock().expect("lock")["status"][map].clone();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while status("allocatable")["example.com/widget"] != "4" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not in the node's status: {:#?}\n{}",
            server.status_patches(),
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status("capacity")["example.com/widget"], "4");
    assert_eq!(status("capacity")["cpu"], "8", "kubelet's key kept");

    plugin.stop().await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while status("capacity").get("example.com/widget").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still in the node's status: {:#?}\n{}",
            server.status_patches(),
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(status("allocatable").get("example.com/widget").is_none());
}
