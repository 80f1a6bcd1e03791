//! The resource plugins' extended resources in the Node's status (issue 32
//! item 6, the QRM proposal's `IsNodeResource`), against the stand-in API
//! server of `tests/common/apiserver.rs`: it records the status PATCHes and
//! models what a server-side apply does to the Node's status. The agent's
//! client is the real `kube` client; the plugins' answers come through the
//! registry's channel (`qrm::Registry::node_resources`).

#[path = "common/apiserver.rs"]
mod apiserver;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use apiserver::{serve, ApiServer, Recorded, NODE, NODE_STATUS_PATH};
use pinion_agent::config::NrtConfig;
use pinion_agent::nrt::node_status::NodeStatusUpdater;
use pinion_core::podresources::AllocatableResource;
use serde_json::{json, Value};
use tokio::sync::watch;

/// Upper bound for waiting on the task (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);
const WIDGET: &str = "example.com/widget";
const BANDWIDTH: &str = "nic.example.io/bandwidth";

type Resources = watch::Sender<Arc<Vec<AllocatableResource>>>;

struct Bed {
    server: Arc<ApiServer>,
    resources: Resources,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(config: &NrtConfig, server: ApiServer) -> Bed {
    let server = Arc::new(server);
    let address = serve(Arc::clone(&server)).await;
    let client_config = kube::Config::new(format!("http://{address}").parse().expect("url"));
    let client = kube::Client::try_from(client_config).expect("client");
    let (resources, rx) = watch::channel(Arc::new(Vec::new()));
    let updater = NodeStatusUpdater::new(NODE.to_string(), client, rx, config);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(updater.run(stop_rx));
    Bed {
        server,
        resources,
        stop,
        task,
    }
}

/// Changes applied after 50 ms; no read-back checks.
fn quick() -> NrtConfig {
    NrtConfig {
        update_delay: Duration::from_millis(50),
        node_status_check_period: Duration::ZERO,
        ..NrtConfig::default()
    }
}

fn checking() -> NrtConfig {
    NrtConfig {
        node_status_check_period: Duration::from_millis(200),
        ..quick()
    }
}

/// A plugin's answer for `name`: node and scalar as given, its capacity
/// above its allocatable (what reaches the Node is the allocatable).
fn resource(name: &str, node: bool, allocatable: f64) -> AllocatableResource {
    AllocatableResource {
        resource_name: name.to_string(),
        is_node_resource: node,
        is_scalar_resource: true,
        allocatable,
        allocatable_per_numa: Vec::new(),
        capacity: allocatable + 2.0,
        capacity_per_numa: Vec::new(),
    }
}

fn declare(bed: &Bed, resources: Vec<AllocatableResource>) {
    bed.resources.send(Arc::new(resources)).expect("send");
}

/// Waits until `done` holds for the server; the status PATCHes then.
async fn until(server: &ApiServer, done: impl Fn(&ApiServer) -> bool) -> Vec<Recorded> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done(server) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not there: node {:#}, patches {:#?}",
            server.node.lock().expect("lock"),
            server.status_patches()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.status_patches()
}

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// kubelet's keys of the stand-in's Node, untouched.
fn assert_kubelets_keys_kept(server: &ApiServer) {
    for map in ["capacity", "allocatable"] {
        let status = server.status(map);
        for (key, value) in [
            ("cpu", "8"),
            ("memory", "16Gi"),
            ("pods", "110"),
            ("hugepages-2Mi", "0"),
            ("ephemeral-storage", "100Gi"),
        ] {
            assert_eq!(status[key], value, "{map}.{key} in {status}");
        }
    }
}

#[tokio::test]
async fn a_plugins_node_resource_appears_in_capacity_and_allocatable() {
    let bed = start(&quick(), ApiServer::default()).await;
    declare(
        &bed,
        vec![resource(WIDGET, true, 4.0), resource("cpu", false, 8.0)],
    );
    let patches = until(&bed.server, |s| s.status("allocatable")[WIDGET] == "4").await;
    let patch = &patches[0];
    assert_eq!(patch.path, NODE_STATUS_PATH);
    assert_eq!(patch.content_type, "application/apply-patch+yaml");
    assert!(
        patch.query.contains("fieldManager=pinion"),
        "{}",
        patch.query
    );
    assert!(patch.query.contains("force=true"), "{}", patch.query);
    assert_eq!(
        patch.body,
        json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
            "status": {"capacity": {WIDGET: "4"}, "allocatable": {WIDGET: "4"}},
        })
    );
    assert_eq!(bed.server.status("capacity")[WIDGET], "4");
    assert_kubelets_keys_kept(&bed.server);
}

#[tokio::test]
async fn an_answer_change_updates_and_a_plugin_going_away_removes_its_keys() {
    let bed = start(&quick(), ApiServer::default()).await;
    declare(
        &bed,
        vec![
            resource(WIDGET, true, 4.0),
            resource(BANDWIDTH, true, 10000.0),
        ],
    );
    until(&bed.server, |s| s.status("capacity")[BANDWIDTH] == "10000").await;

    // The widget plugin answers anew (fractional amounts: whole units).
    declare(
        &bed,
        vec![
            resource(WIDGET, true, 6.5),
            resource(BANDWIDTH, true, 10000.0),
        ],
    );
    until(&bed.server, |s| s.status("allocatable")[WIDGET] == "6").await;
    assert_eq!(bed.server.status("capacity")[WIDGET], "6");

    // The NIC plugin goes away: its keys leave both maps.
    declare(&bed, vec![resource(WIDGET, true, 6.0)]);
    let patches = until(&bed.server, |s| {
        s.status("capacity").get(BANDWIDTH).is_none()
            && s.status("allocatable").get(BANDWIDTH).is_none()
    })
    .await;
    let last = &patches[patches.len() - 1].body;
    assert_eq!(
        keys(&last["status"]["capacity"]),
        BTreeSet::from([WIDGET.to_string()])
    );

    // Every plugin gone: Pinion's configuration holds no status at all.
    declare(&bed, Vec::new());
    let patches = until(&bed.server, |s| s.status("capacity").get(WIDGET).is_none()).await;
    assert_eq!(patches[patches.len() - 1].body.get("status"), None);
    assert!(bed.server.status("allocatable").get(WIDGET).is_none());
    assert_kubelets_keys_kept(&bed.server);
}

#[tokio::test]
async fn kubelets_own_resources_are_never_in_a_patch() {
    let bed = start(&quick(), ApiServer::default()).await;
    // A plugin marking kubelet's resources as node resources (katalyst's
    // cpu and memory plugins say false; one that says true is refused).
    let mut declared: Vec<AllocatableResource> = [
        "cpu",
        "memory",
        "hugepages-2Mi",
        "pods",
        "ephemeral-storage",
        "kubernetes.io/batteries",
        "requests.example.com/widget",
    ]
    .iter()
    .map(|name| resource(name, true, 1.0))
    .collect();
    declared.push(resource(WIDGET, true, 4.0));
    declare(&bed, declared);
    let patches = until(&bed.server, |s| s.status("capacity")[WIDGET] == "4").await;
    for patch in &patches {
        for map in ["capacity", "allocatable"] {
            assert_eq!(
                keys(&patch.body["status"][map]),
                BTreeSet::from([WIDGET.to_string()]),
                "{map} of {:#}",
                patch.body
            );
        }
    }
    assert_kubelets_keys_kept(&bed.server);
}

#[tokio::test]
async fn nothing_is_written_while_no_plugin_declares_a_node_resource() {
    let bed = start(&quick(), ApiServer::default()).await;
    declare(
        &bed,
        vec![resource("cpu", false, 8.0), resource(WIDGET, false, 4.0)],
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        bed.server.of(|_| true).is_empty(),
        "no request at all: {:#?}",
        bed.server.of(|_| true)
    );
    declare(&bed, vec![resource(WIDGET, true, 4.0)]);
    let patches = until(&bed.server, |s| s.status("capacity")[WIDGET] == "4").await;
    assert_eq!(patches.len(), 1);
}

#[tokio::test]
async fn a_down_api_server_is_retried_with_the_latest_answer_and_blocks_nothing() {
    let server = ApiServer::default();
    *server.failures.lock().expect("lock") = 2;
    let bed = start(&quick(), server).await;
    declare(&bed, vec![resource(WIDGET, true, 4.0)]);
    until(&bed.server, |s| !s.status_patches().is_empty()).await;
    // Meanwhile the plugins keep answering: the channel never waits.
    for count in [5.0, 6.0, 7.0] {
        declare(&bed, vec![resource(WIDGET, true, count)]);
    }
    let patches = until(&bed.server, |s| s.status("capacity")[WIDGET] == "7").await;
    assert!(
        patches.len() >= 3,
        "two failures, then accepted: {patches:#?}"
    );
    assert_eq!(
        patches[patches.len() - 1].body["status"]["allocatable"][WIDGET],
        "7"
    );
}

#[tokio::test]
async fn a_hung_api_server_does_not_hold_the_agents_stop_up() {
    let server = ApiServer::default();
    *server.hang.lock().expect("lock") = true;
    let bed = start(&quick(), server).await;
    declare(&bed, vec![resource(WIDGET, true, 4.0)]);
    until(&bed.server, |s| !s.status_patches().is_empty()).await;
    declare(&bed, vec![resource(WIDGET, true, 5.0)]);
    bed.stop.send(true).expect("stop");
    tokio::time::timeout(PATIENCE, bed.task)
        .await
        .expect("the task stopped while its update hung")
        .expect("task");
}

#[tokio::test]
async fn kubelets_reset_of_extended_resources_is_reasserted_at_the_next_check() {
    let bed = start(&checking(), ApiServer::default()).await;
    declare(&bed, vec![resource(WIDGET, true, 4.0)]);
    let applied = until(&bed.server, |s| s.status("capacity")[WIDGET] == "4").await;
    // kubelet registers a recreated node: it zeroes every extended
    // resource and takes those fields over.
    bed.server.kubelet_zeroes_extended_resources();
    assert_eq!(bed.server.status("allocatable")[WIDGET], "0");
    let patches = until(&bed.server, |s| {
        s.status("capacity")[WIDGET] == "4" && s.status("allocatable")[WIDGET] == "4"
    })
    .await;
    assert!(patches.len() > applied.len());
    let reads = bed
        .server
        .of(|r| r.method == "GET" && r.path.ends_with(NODE));
    assert!(!reads.is_empty(), "the check reads the Node");
    assert!(
        reads.iter().all(|r| r.query.contains("resourceVersion=0")),
        "from the API server's cache: {reads:#?}"
    );
}

#[tokio::test]
async fn a_key_pinion_owned_before_a_restart_goes_with_its_next_apply() {
    let server = ApiServer::default();
    server.owned_before("pinion", &["example.com/gone"], "3");
    let bed = start(&checking(), server).await;
    declare(&bed, vec![resource(WIDGET, true, 4.0)]);
    until(&bed.server, |s| {
        s.status("capacity")[WIDGET] == "4"
            && s.status("capacity").get("example.com/gone").is_none()
    })
    .await;
    assert!(bed
        .server
        .status("allocatable")
        .get("example.com/gone")
        .is_none());
    assert_kubelets_keys_kept(&bed.server);
}

#[tokio::test]
async fn with_no_plugin_left_a_key_owned_before_is_still_removed() {
    let server = ApiServer::default();
    server.owned_before("pinion", &[WIDGET], "4");
    // Another writer's extended resource is not Pinion's to remove.
    server.owned_before("someone-else", &["other.example/thing"], "2");
    let bed = start(&checking(), server).await;
    let patches = until(&bed.server, |s| s.status("capacity").get(WIDGET).is_none()).await;
    assert_eq!(patches[0].body.get("status"), None);
    assert_eq!(bed.server.status("capacity")["other.example/thing"], "2");
    assert_kubelets_keys_kept(&bed.server);
}

#[tokio::test]
async fn without_node_resources_the_node_is_read_once_and_never_written() {
    let bed = start(&checking(), ApiServer::default()).await;
    declare(&bed, vec![resource("cpu", false, 8.0)]);
    let reads = |s: &ApiServer| s.of(|r| r.method == "GET").len();
    until(&bed.server, |s| reads(s) == 1).await;
    // Five check periods more: no other read, no write.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(reads(&bed.server), 1, "{:#?}", bed.server.of(|_| true));
    assert!(bed.server.patches().is_empty());
    // Once Pinion has resources in the Node, it checks them again.
    declare(&bed, vec![resource(WIDGET, true, 4.0)]);
    until(&bed.server, |s| reads(s) >= 3).await;
}
