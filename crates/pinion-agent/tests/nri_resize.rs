//! In-place resize of exclusive CPUs through NRI `UpdateContainer` (issue
//! #15, `featureGates: InPlacePodVerticalScalingExclusiveCPUs`), end to end
//! through the fake runtime and the real controller, and the refusal of
//! before with the switch off.
#![allow(clippy::unwrap_used)]

mod nri_common;

use nri_common::*;
use pinion_core::policy::Features;
use pinion_core::CpuSet;
use pinion_nri::fake_runtime::{FakeError, PodSpec};
use pinion_nri::status::Code;
use pinion_nri::Resources;

fn resize_on() -> Features {
    Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    }
}

/// What kubelet sends for a Guaranteed container resized to `milli`.
fn resources(milli: u64) -> Resources {
    container("x", milli).resources
}

fn rejected(err: FakeError) -> (Code, String) {
    match err {
        FakeError::Rejected { status, .. } => (status.code, status.message),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// The Guaranteed pod `db` with one 2-CPU container; answers its id.
async fn start_db(node: &Node) -> String {
    node.pod_with(guaranteed_pod("db"), container("db", 2000))
        .await
        .1
}

/// Resizes container `id` to `milli` CPUs as kubelet does (NRI
/// `UpdateContainer`).
async fn resize(node: &Node, id: &str, milli: u64) -> Result<(), FakeError> {
    node.runtime.update_container(id, &resources(milli)).await
}

fn is_whole_core(cpus: &CpuSet) -> bool {
    topology().cores().values().any(|core| core == cpus)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_keeps_every_cpu_adds_a_whole_core_and_the_shared_pool_follows() {
    let node = Node::new();
    let agent = node.agent_with(1, resize_on()).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let db = start_db(&node).await;
    let old = set(&node.runtime.cpus(&db));

    resize(&node, &db, 4000).await.unwrap();
    let new = set(&node.runtime.cpus(&db));
    assert_eq!(new.len(), 4, "{new}");
    assert!(old.is_subset(&new), "{old} kept in {new}");
    let added = new.difference(&old);
    assert!(is_whole_core(&added), "added {added} is one whole core");
    assert!(!new.contains(0), "reserved cpu 0 stays shared");
    assert_eq!(node.runtime.quota(&db), Some(-1));

    let pool = set("0-7").difference(&new);
    node.wait_cpus(&web, &pool.to_string()).await;
    let disk = String::from_utf8(node.checkpoint()).unwrap();
    assert!(
        disk.contains(&format!("\"db\":\"{new}\"")),
        "durable: {disk}"
    );
    assert!(
        disk.contains(&format!("\"defaultCpuSet\":\"{pool}\"")),
        "{disk}"
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_releases_cpus_without_moving_the_rest() {
    let node = Node::new();
    let agent = node.agent_with(1, resize_on()).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let db = start_db(&node).await;
    let first = set(&node.runtime.cpus(&db));
    resize(&node, &db, 4000).await.unwrap();
    let grown = set(&node.runtime.cpus(&db));

    resize(&node, &db, 2000).await.unwrap();
    let shrunk = set(&node.runtime.cpus(&db));
    assert_eq!(shrunk.len(), 2, "{shrunk}");
    assert!(shrunk.is_subset(&grown), "{shrunk} within {grown}");
    assert_eq!(shrunk, first, "back to the promised cpus");
    let pool = set("0-7").difference(&shrunk);
    node.wait_cpus(&web, &pool.to_string()).await;
    let disk = String::from_utf8(node.checkpoint()).unwrap();
    assert!(disk.contains(&format!("\"db\":\"{shrunk}\"")), "{disk}");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrink_below_the_promised_cpus_fails_with_kubelets_text_and_changes_nothing() {
    let node = Node::new();
    let agent = node.agent_with(1, resize_on()).await;
    let db = start_db(&node).await;
    resize(&node, &db, 4000).await.unwrap();
    let cpus = node.runtime.cpus(&db);
    let before = node.checkpoint();

    let err = resize(&node, &db, 1000).await.expect_err("below promised");
    let (code, message) = rejected(err);
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert!(
        message.contains("prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool below promised, (requested CPUs = 1, allocated CPUs = 4, promised CPUs = 2"),
        "{message}"
    );
    assert_eq!(node.checkpoint(), before, "nothing changed on disk");
    assert_eq!(node.runtime.cpus(&db), cpus);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_guaranteed_container_cannot_become_exclusive_in_place() {
    let node = Node::new();
    let agent = node.agent_with(1, resize_on()).await;
    let (_, app) = node
        .pod_with(guaranteed_pod("app"), container("app", 1500))
        .await;
    assert_eq!(node.runtime.cpus(&app), "0-7");
    let err = resize(&node, &app, 2000)
        .await
        .expect_err("shared to exclusive");
    let (_, message) = rejected(err);
    assert!(
        message.contains("inconsistentCPUAllocation Error: Not allowed to move a container from shared pool to exclusively allocated pool"),
        "{message}"
    );
    assert_eq!(node.runtime.cpus(&app), "0-7");
    assert!(agent.handle.snapshot().assignments.is_empty());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restart_keeps_the_promised_cpus() {
    let node = Node::new();
    let agent = node.agent_with(1, resize_on()).await;
    let db = start_db(&node).await;
    let first = set(&node.runtime.cpus(&db));
    resize(&node, &db, 4000).await.unwrap();
    let grown = node.runtime.cpus(&db);
    agent.stop().await;

    let agent = node.agent_with(2, resize_on()).await;
    assert_eq!(node.runtime.cpus(&db), grown, "nothing moved");
    let err = resize(&node, &db, 1000).await.expect_err("below promised");
    let (_, message) = rejected(err);
    assert!(
        message.contains("promised CPUs = 2,"),
        "the promised cpus survive the restart: {message}"
    );
    resize(&node, &db, 2000).await.unwrap();
    assert_eq!(set(&node.runtime.cpus(&db)), first);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_switch_off_a_resize_is_refused_as_before() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let db = start_db(&node).await;
    let cpus = node.runtime.cpus(&db);
    let before = node.checkpoint();
    let err = resize(&node, &db, 4000).await.expect_err("switch off");
    let (code, message) = rejected(err);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    assert!(
        message.contains("resizing its cpu request in place to 4000m is not supported"),
        "{message}"
    );
    assert_eq!(node.runtime.cpus(&db), cpus);
    assert_eq!(node.checkpoint(), before);
    // A shared Guaranteed container asked for whole cpus keeps the pool.
    let (_, app) = node
        .pod_with(guaranteed_pod("app"), container("app", 1500))
        .await;
    let pool = node.runtime.cpus(&app);
    resize(&node, &app, 2000).await.unwrap();
    assert_eq!(node.runtime.cpus(&app), pool);
    agent.stop().await;
}

/// Found from outside (session 45): a container outside Kubernetes (it
/// follows the shared pool; no pod spec) updated with a whole-CPU share
/// (`crictl update --cpu-shares 1024`) failed with INTERNAL ("cannot
/// resize: pod spec unknown"), with the switch on or off. It keeps its
/// placement, as a shared container whose resize is off does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_container_outside_kubernetes_takes_a_whole_cpu_update() {
    for features in [Features::default(), resize_on()] {
        let node = Node::new();
        let agent = node.agent_with(1, features).await;
        let outside = PodSpec {
            cgroup_parent: "/system.slice/tool".into(),
            ..guaranteed_pod("tool")
        };
        let (_, tool) = node.pod_with(outside, container("tool", 1000)).await;
        let before = node.runtime.cpus(&tool);
        resize(&node, &tool, 2000)
            .await
            .expect("a shared container keeps its placement");
        assert_eq!(node.runtime.cpus(&tool), before);
        agent.stop().await;
    }
}
