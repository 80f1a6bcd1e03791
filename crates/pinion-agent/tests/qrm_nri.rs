//! Issue #11's "Done when" through the fake NRI runtime: a container
//! created through the runtime, requesting a plugin's resource, gets the
//! plugins' environment, annotations, cpuset (the `cpu` plugin's), memory
//! nodes and OCI settings in its `CreateContainer` adjustment, and a changed plugin
//! answer reaches it as an unsolicited `UpdateContainers` from the
//! reconcile loop. Real NRI (ttrpc) to the fake runtime, real gRPC to the
//! plugin, fake cgroups.

#[path = "common/apiserver.rs"]
mod apiserver;
mod nri_common;
mod qrm_common;

use std::sync::Arc;
use std::time::Duration;

use pinion_agent::daemon::qrm_loops;
use pinion_agent::nrt::pod_requests::PodRequests;
use pinion_agent::qrm::Qrm;
use pinion_nri::kube::REQUESTS_ANNOTATION;
use qrm_common::{info, qrm_config, serve_in, wait_until, Knob};
use tokio::sync::watch;

const WIDGET: &str = "example.com/widget";

/// The widget plugin's answer: memory nodes, a quota, a memory limit, an
/// annotation (the cpuset is the `cpu` plugin's: only it may set one).
fn widget_answer() -> std::collections::BTreeMap<String, pinion_plugins::AllocationInfo> {
    let mut mems = info("CpusetMems", "1", "a");
    mems.annotations
        .insert("example.com/widget-team".into(), "a".into());
    [
        (format!("{WIDGET}-mems"), mems),
        (WIDGET.to_string(), info("CpuQuota", "150000", "a")),
        (
            format!("{WIDGET}-memory"),
            info("MemoryLimitInBytes", "536870912", "a"),
        ),
    ]
    .into()
}

fn cpu_answer(cpus: &str) -> std::collections::BTreeMap<String, pinion_plugins::AllocationInfo> {
    [("cpu".to_string(), info("CpusetCpus", cpus, "a"))].into()
}

/// The fake runtime and an agent with the QoS Resource Manager on, the
/// widget plugin (answering `widget`) and a `cpu` plugin (answering
/// `2-3`) registered and active.
struct Bed {
    node: nri_common::Node,
    agent: nri_common::Agent,
    knob: Knob,
    cpu: Knob,
    served: qrm_common::ServedPlugin,
    served_cpu: qrm_common::ServedPlugin,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _plugins: tempfile::TempDir,
}

impl Bed {
    async fn start(
        widget: std::collections::BTreeMap<String, pinion_plugins::AllocationInfo>,
    ) -> Self {
        let node = nri_common::Node::new();
        let plugins = tempfile::tempdir().expect("tempdir");
        let knob = Knob::new(WIDGET, widget);
        let cpu = Knob::new("cpu", cpu_answer("2-3"));
        let registry = plugins.path().join("plugins_registry");
        let served = serve_in(&registry, knob.clone(), "widget.sock");
        let served_cpu = serve_in(&registry, cpu.clone(), "cpu.sock");
        let (agent, stop, tasks) = Self::start_agent(&node, plugins.path(), 1).await;
        Self {
            node,
            agent,
            knob,
            cpu,
            served,
            served_cpu,
            stop,
            tasks,
            _plugins: plugins,
        }
    }

    /// An agent with the QoS Resource Manager on `node`, once it has
    /// synchronized for the `sessions`-th time and both plugins (already
    /// serving in `plugins`) are active.
    async fn start_agent(
        node: &nri_common::Node,
        plugins: &std::path::Path,
        sessions: u64,
    ) -> (
        nri_common::Agent,
        watch::Sender<bool>,
        Vec<tokio::task::JoinHandle<()>>,
    ) {
        let qrm = Qrm::new(qrm_config(plugins, Duration::from_secs(5)));
        let agent = nri_common::Agent::start_with_qrm(
            node.state.path(),
            &node.host,
            &node.socket(),
            std::sync::Arc::clone(&qrm),
        );
        node.runtime.wait_synced(sessions).await;
        let (stop, stop_rx) = watch::channel(false);
        let tasks = qrm_loops::start(&qrm, &agent.handle, &stop_rx).expect("qrm starts");
        wait_until("the widget and cpu plugins are active", || {
            let views = agent.handle.plugins();
            [WIDGET, "cpu"].iter().all(|r| {
                views
                    .iter()
                    .any(|v| v.resource == *r && v.state == "active")
            })
        })
        .await;
        (agent, stop, tasks)
    }

    /// The agent stopped and started again on the same state (the runtime
    /// and the plugins stay up; the plugins register again).
    async fn restarted(self) -> Self {
        let Self {
            node,
            agent,
            knob,
            cpu,
            served,
            served_cpu,
            stop,
            tasks,
            _plugins: plugins,
        } = self;
        let _ = stop.send(true);
        for task in tasks {
            let _ = task.await;
        }
        agent.stop().await;
        let sessions = node.runtime.sessions() + 1;
        let (agent, stop, tasks) = Self::start_agent(&node, plugins.path(), sessions).await;
        Self {
            node,
            agent,
            knob,
            cpu,
            served,
            served_cpu,
            stop,
            tasks,
            _plugins: plugins,
        }
    }

    async fn stop(self) {
        self.served.stop().await;
        self.served_cpu.stop().await;
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.agent.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_container_gets_the_plugins_settings_at_creation_and_its_changes_by_update() {
    let bed = Bed::start(widget_answer()).await;
    let (node, cpu) = (&bed.node, &bed.cpu);

    let mut pod = nri_common::burstable_pod("widget-pod");
    pod.annotations.insert(
        REQUESTS_ANNOTATION.to_string(),
        format!(r#"{{"main": {{"{WIDGET}": "1"}}}}"#),
    );
    let (_, id) = node.pod_with(pod, nri_common::burstable("main", 500)).await;

    // The CreateContainer adjustment carried everything the plugin said.
    let created = node.runtime.container(&id).expect("created");
    assert!(
        created.env.contains(&"KNOB=a".to_string()),
        "{:?}",
        created.env
    );
    assert_eq!(
        created
            .annotations
            .get("example.com/widget-team")
            .map(String::as_str),
        Some("a")
    );
    assert_eq!(node.runtime.cpus(&id), "2-3");
    assert_eq!(node.mems(&id), "1");
    assert_eq!(node.runtime.quota(&id), Some(150_000));
    let memory = created
        .linux
        .and_then(|l| l.resources?.memory?.limit)
        .map(|l| l.value);
    assert_eq!(memory, Some(536_870_912));
    assert!(
        !node
            .runtime
            .log()
            .contains(&format!("UpdateContainers applied to {id}")),
        "the creation needed no update"
    );

    // The plugin changes its answer: the reconcile loop sends the change
    // to the running container as an update.
    cpu.state().answer = cpu_answer("4-5");
    node.wait_cpus(&id, "4-5").await;
    assert!(
        node.runtime
            .log()
            .contains(&format!("UpdateContainers applied to {id}")),
        "{:?}",
        node.runtime.log()
    );
    assert_eq!(node.mems(&id), "1");

    bed.stop().await;
}

/// Issue 28 items 2 and 3 (the proposal's `IsScalarResource` re-admission):
/// a container restarted in its running pod keeps what the plugins
/// allocated — the same environment and cpuset in its `CreateContainer`
/// adjustment — without a new `Allocate`, while the stored quantity covers
/// its request; an allocation that does not cover it is asked for again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_container_keeps_its_plugin_allocations_without_a_new_allocate() {
    let bed = Bed::start([(WIDGET.to_string(), info("", "", "a"))].into()).await;
    let (node, knob, cpu) = (&bed.node, &bed.knob, &bed.cpu);
    let widget_pod = |uid: &str, quantity: &str| {
        let mut pod = nri_common::burstable_pod(uid);
        pod.annotations.insert(
            REQUESTS_ANNOTATION.to_string(),
            format!(r#"{{"main": {{"{WIDGET}": "{quantity}"}}}}"#),
        );
        pod
    };

    let (pod_id, first) = node
        .pod_with(widget_pod("kept", "1"), nri_common::burstable("main", 500))
        .await;
    assert_eq!(node.runtime.cpus(&first), "2-3");
    let asked = knob.state().allocate_calls.len();
    assert_eq!(asked, 1, "{:?}", knob.state().allocate_calls);
    // A restart keeps what was allocated (the reconcile loop keeps it
    // current) without asking the plugins again.
    node.runtime.stop_container(&first).await.unwrap();
    node.runtime.remove_container(&first).await.unwrap();
    let again = node
        .runtime
        .create_container(&pod_id, nri_common::burstable("main", 500))
        .await
        .unwrap();
    let created = node.runtime.container(&again).expect("created");
    assert!(
        created.env.contains(&"KNOB=a".to_string()),
        "{:?}",
        created.env
    );
    assert_eq!(node.runtime.cpus(&again), "2-3", "the stored cpuset");
    assert_eq!(
        knob.state().allocate_calls.len(),
        asked,
        "no new Allocate: {:?}",
        knob.state().allocate_calls
    );
    assert_eq!(cpu.state().allocate_calls.len(), 1, "nor of the cpu plugin");

    // A stored quantity below the request (a plugin answering 1 widget to a
    // request of 2) is asked for again at the restart.
    let (pod_id, first) = node
        .pod_with(widget_pod("short", "2"), nri_common::burstable("main", 500))
        .await;
    assert_eq!(knob.state().allocate_calls.len(), asked + 1);
    node.runtime.stop_container(&first).await.unwrap();
    let again = node
        .runtime
        .create_container(&pod_id, nri_common::burstable("main", 500))
        .await
        .unwrap();
    assert_eq!(
        knob.state().allocate_calls.len(),
        asked + 2,
        "asked again: {:?}",
        knob.state().allocate_calls
    );
    assert_eq!(node.runtime.cpus(&again), "2-3");

    bed.stop().await;
}

/// Issue 28 item 3, the proposal's re-admission after a restart: a
/// container of a pod that ran before the agent's restart, restarted in its
/// pod, gets its stored plugin allocations again without a new `Allocate`,
/// while its pod's sandbox runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_agent_restart_a_restarted_container_keeps_its_plugin_allocations() {
    let bed = Bed::start([(WIDGET.to_string(), info("", "", "a"))].into()).await;
    let mut pod = nri_common::burstable_pod("kept");
    pod.annotations.insert(
        REQUESTS_ANNOTATION.to_string(),
        format!(r#"{{"main": {{"{WIDGET}": "1"}}}}"#),
    );
    let (pod_id, first) = bed
        .node
        .pod_with(pod, nri_common::burstable("main", 500))
        .await;
    bed.node.set_sandbox_running(&pod_id, true);
    assert_eq!(bed.knob.state().allocate_calls.len(), 1);
    let bed = bed.restarted().await;
    let (node, knob) = (&bed.node, &bed.knob);
    let allocates = knob.state().allocate_calls.len();

    node.runtime.stop_container(&first).await.unwrap();
    node.runtime.remove_container(&first).await.unwrap();
    let again = node
        .runtime
        .create_container(&pod_id, nri_common::burstable("main", 500))
        .await
        .unwrap();
    let created = node.runtime.container(&again).expect("created");
    assert!(
        created.env.contains(&"KNOB=a".to_string()),
        "{:?}",
        created.env
    );
    assert_eq!(node.runtime.cpus(&again), "2-3", "the stored cpuset");
    assert_eq!(
        knob.state().allocate_calls.len(),
        allocates,
        "no new Allocate"
    );
    bed.stop().await;
}

/// The API server's pod of the stand-in: `namespace/name`, `uid`, one
/// container `main` asking 500m CPU and `widgets` widgets in its
/// `resources.requests`, with `annotations`.
fn api_pod(
    name: &str,
    uid: &str,
    widgets: &str,
    annotations: &serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": annotations},
        "spec": {"nodeName": apiserver::NODE, "containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "500m", WIDGET: widgets}, "limits": {WIDGET: widgets}}}]},
    })
}

/// A runtime pod of `uid` named `NAME`, as kubelet hands it over: sent by
/// the API server (`kubernetes.io/config.source: api`) or a static pod
/// (`file`).
fn runtime_pod(uid: &str, source: &str) -> pinion_nri::fake_runtime::PodSpec {
    let mut pod = nri_common::burstable_pod(uid);
    pod.annotations.insert(
        "kubernetes.io/config.source".to_string(),
        source.to_string(),
    );
    pod
}

/// Found in the cluster (issue 32): through NRI a pod had to repeat its
/// extended resources in `pinion.dev/requests`, where kubelet reads the
/// pod spec. With API-server credentials the agent reads the node's pods:
/// a pod asking a widget in `resources.requests` only is allocated one by
/// the plugin, a static pod through its mirror pod too, a pod the API
/// server does not have asks none (after a bounded wait), and the
/// annotation still wins over the spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_pod_asking_a_plugins_resource_in_its_spec_gets_it_through_nri() {
    let server = Arc::new(apiserver::ApiServer::default());
    *server.pods.lock().unwrap() = vec![
        api_pod("spec-pod", "spec", "1", &serde_json::json!({})),
        // A static pod's mirror: its own UID, the static pod's in the annotation.
        api_pod(
            "static-pod",
            "mirror-uid",
            "1",
            &serde_json::json!({"kubernetes.io/config.mirror": "static"}),
        ),
        api_pod("annotated-pod", "annotated", "1", &serde_json::json!({})),
    ];
    let address = apiserver::serve(Arc::clone(&server)).await;
    let client = kube::Client::try_from(kube::Config::new(
        format!("http://{address}").parse().expect("url"),
    ))
    .expect("client");
    let (stop_pods, stop_rx) = watch::channel(false);
    let (pods, watch_task) = PodRequests::watch(client, apiserver::NODE, &stop_rx);

    let node = nri_common::Node::new();
    let plugins = tempfile::tempdir().expect("tempdir");
    let knob = Knob::new(WIDGET, [(WIDGET.to_string(), info("", "", "a"))].into());
    let registry = plugins.path().join("plugins_registry");
    let served = serve_in(&registry, knob.clone(), "widget.sock");
    let qrm = Qrm::new(qrm_config(plugins.path(), Duration::from_secs(5)));
    let agent = nri_common::Agent::start_with_pods(
        &nri_common::synthetic_node(&node.host),
        node.state.path(),
        &node.socket(),
        Some(Arc::clone(&qrm)),
        Some(pods),
    );
    node.runtime.wait_synced(1).await;
    let (stop, qrm_stop) = watch::channel(false);
    let tasks = qrm_loops::start(&qrm, &agent.handle, &qrm_stop).expect("qrm starts");
    wait_until("the widget plugin is active", || {
        agent
            .handle
            .plugins()
            .iter()
            .any(|v| v.resource == WIDGET && v.state == "active")
    })
    .await;
    let allocated = |uid: &str| {
        knob.state()
            .allocate_calls
            .iter()
            .filter(|(pod, _)| pod == uid)
            .count()
    };

    // The pod with its one container `main` (500m CPU) through the runtime.
    let run = |pod| async {
        node.pod_with(pod, nri_common::burstable("main", 500))
            .await
            .1
    };

    // The spec's request, no annotation: the plugin allocates, the
    // container gets its environment.
    let id = run(runtime_pod("spec", "api")).await;
    assert_eq!(allocated("spec"), 1, "{:?}", knob.state().allocate_calls);
    let created = node.runtime.container(&id).expect("created");
    assert!(
        created.env.contains(&"KNOB=a".to_string()),
        "{:?}",
        created.env
    );

    // A static pod, matched through its mirror pod.
    run(runtime_pod("static", "file")).await;
    assert_eq!(allocated("static"), 1, "{:?}", knob.state().allocate_calls);

    // A pod the API server does not have: nothing asked of the plugin.
    let id = run(runtime_pod("unknown", "api")).await;
    assert_eq!(allocated("unknown"), 0, "{:?}", knob.state().allocate_calls);
    assert!(
        node.runtime.container(&id).is_some(),
        "admitted all the same"
    );

    // The annotation wins: it asks no widget for `main`.
    let mut annotated = runtime_pod("annotated", "api");
    annotated.annotations.insert(
        REQUESTS_ANNOTATION.to_string(),
        r#"{"other": {}}"#.to_string(),
    );
    run(annotated).await;
    assert_eq!(
        allocated("annotated"),
        0,
        "{:?}",
        knob.state().allocate_calls
    );

    served.stop().await;
    let _ = stop.send(true);
    for task in tasks {
        let _ = task.await;
    }
    agent.stop().await;
    let _ = stop_pods.send(true);
    let _ = watch_task.await;
}
