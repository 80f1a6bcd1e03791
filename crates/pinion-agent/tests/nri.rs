//! The agent's NRI front-end driving the real controller through the fake
//! runtime (real protocol bytes): every lifecycle path, restarts of the
//! agent and of the runtime, bad input.
#![allow(clippy::unwrap_used)]

mod nri_common;

use nri_common::*;
use std::time::Duration;

use pinion_nri::fake_runtime::{ContainerSpec, FakeError, FakeOptions, PodSpec};
use pinion_nri::status::Code;
use pinion_nri::Resources;

fn rejected(err: FakeError) -> (Code, String) {
    match err {
        FakeError::Rejected { status, .. } => (status.code, status.message),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guaranteed_gets_a_whole_core_and_burstable_follows_the_shared_pool() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    assert_eq!(node.runtime.cpus(&web), "0-7");

    let (db_pod, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let cpus = set(&node.runtime.cpus(&db));
    let topology = topology();
    assert!(
        topology.cores().values().any(|core| *core == cpus),
        "{cpus} is one whole core"
    );
    assert!(!cpus.contains(0), "reserved cpu 0 stays shared");
    assert_eq!(
        node.mems(&db),
        "",
        "memory nodes left to the runtime, as kubelet's static policy leaves them"
    );
    assert_eq!(
        node.runtime.quota(&db),
        Some(-1),
        "no CFS quota on exclusive cpus"
    );
    let disk = String::from_utf8(node.checkpoint()).unwrap();
    assert!(
        disk.contains(&format!("\"db\":\"{cpus}\"")),
        "durable: {disk}"
    );

    let pool = set("0-7").difference(&cpus);
    node.wait_cpus(&web, &pool.to_string()).await;
    assert_eq!(node.runtime.quota(&web), None, "burstable keeps no quota");

    // A second shared container created now gets the shrunk pool at once.
    let (_, api) = node
        .pod_with(burstable_pod("api"), burstable("api", 100))
        .await;
    assert_eq!(node.runtime.cpus(&api), pool.to_string());

    // A stopped container's CPUs stay held while its pod runs (kubelet
    // keeps them for a restart); the pod's stop gives them back.
    node.runtime.stop_container(&db).await.unwrap();
    node.runtime.remove_container(&db).await.unwrap();
    assert_eq!(
        agent.handle.snapshot().assignments["db"]["db"],
        cpus,
        "held while the pod runs"
    );
    node.runtime.stop_pod(&db_pod).await.unwrap();
    node.wait_cpus(&web, "0-7").await;
    node.wait_cpus(&api, "0-7").await;
    node.runtime.remove_pod(&db_pod).await.unwrap();
    assert!(agent.handle.snapshot().assignments.is_empty());
    let disk = String::from_utf8(node.checkpoint()).unwrap();
    assert!(!disk.contains("\"db\""), "released on disk: {disk}");
    agent.stop().await;
}

/// `step`'s outcome; a panic naming it when it takes over 5 s (it hangs:
/// the fake containerd 1.7 deadlocked).
async fn within<T>(step: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(5), future).await {
        Ok(outcome) => outcome,
        Err(_) => panic!("{step} hung: containerd's NRI deadlocked"),
    }
}

/// Starts Burstable `web` (500m) and Guaranteed `db` (2 CPUs) through the
/// runtime; returns web's container, db's sandbox and db's container.
async fn web_and_db(node: &Node) -> (String, String, String) {
    let (_, web) = within(
        "web's start",
        node.pod_with(burstable_pod("web"), burstable("web", 500)),
    )
    .await;
    let (db_pod, db) = within(
        "db's start",
        node.pod_with(guaranteed_pod("db"), container("db", 2000)),
    )
    .await;
    (web, db_pod, db)
}

/// Regression: every change of the shared pool went to containerd as an
/// unsolicited `UpdateContainers`, right after the event that caused it.
/// containerd 1.7 takes its two NRI locks in the opposite order for those
/// (containerd/containerd#13733): the update met kubelet's next call (the
/// StartContainer after a CreateContainer, the removal after a stop) and
/// containerd's NRI deadlocked for good — found on the cluster bed, where
/// the node then relayed no pod removal. An admission's and a stop's
/// updates now ride in the event's reply; the others wait for the runtime
/// to be quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_pods_life_does_not_deadlock_containerd_1_7() {
    let node = Node::with_runtime(tempfile::tempdir().unwrap(), FakeOptions::containerd_1_7());
    let agent = node.agent(1).await;
    let (web, db_pod, db) = web_and_db(&node).await;
    let cpus = set(&node.runtime.cpus(&db));
    assert_eq!(
        set(&node.runtime.cpus(&web)),
        set("0-7").difference(&cpus),
        "the shared pool shrank with db's creation"
    );
    let log = node.runtime.log();
    assert!(
        !log.iter().any(|l| l.starts_with("UpdateContainers")),
        "nothing unsolicited: {log:?}"
    );
    let end = async {
        node.runtime.stop_container(&db).await?;
        node.runtime.stop_pod(&db_pod).await?;
        node.runtime.remove_container(&db).await?;
        node.runtime.remove_pod(&db_pod).await
    };
    within("db's removal", end).await.unwrap();
    node.wait_cpus(&web, "0-7").await;
    assert!(
        node.runtime.unsolicited_update_followed_the_events(&web),
        "the pool grew after the burst: {:?}",
        node.runtime.log()
    );
    agent.stop().await;
}

/// Regression: on a slow node (containerd 1.7 in a TCG guest) kubelet's
/// calls for one pod come further apart than the 2 s of quiet, and the
/// shared pool's growth after a pod's removal went out unsolicited between
/// them and wedged containerd. A growth takes nothing from anyone: it now
/// waits for the next pod's `CreateContainer` to carry it (or for the
/// runtime to be idle far longer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_pods_removal_on_a_slow_node_grows_the_pool_in_the_next_reply() {
    let node = Node::with_runtime(tempfile::tempdir().unwrap(), FakeOptions::containerd_1_7());
    let agent = node.agent(1).await;
    let (web, db_pod, db) = web_and_db(&node).await;
    let pool = set(&node.runtime.cpus(&web));
    // The pod's removal, with a slow node's gap before its last step and
    // before the next pod: each longer than the quiet an update that takes
    // CPUs away waits for.
    let gap = Duration::from_millis(2500);
    node.runtime.stop_container(&db).await.unwrap();
    node.runtime.stop_pod(&db_pod).await.unwrap();
    node.runtime.remove_container(&db).await.unwrap();
    tokio::time::sleep(gap).await;
    within("db's removal", node.runtime.remove_pod(&db_pod))
        .await
        .unwrap();
    tokio::time::sleep(gap).await;
    assert_eq!(
        set(&node.runtime.cpus(&web)),
        pool,
        "the growth waits: {:?}",
        node.runtime.log()
    );
    let next = node.runtime.run_pod(burstable_pod("next")).await.unwrap();
    within(
        "next's creation",
        node.runtime.create_container(&next, burstable("next", 500)),
    )
    .await
    .unwrap();
    assert_eq!(node.runtime.cpus(&web), "0-7", "carried in next's reply");
    let log = node.runtime.log();
    assert!(
        !log.iter().any(|l| l.starts_with("UpdateContainers")),
        "nothing unsolicited: {log:?}"
    );
    agent.stop().await;
}

/// Regression: the growth a pod's removal queued for the shared container
/// and the shrink the next exclusive pod's admission queued for it went in
/// one `CreateContainer` reply; containerd 1.7 refuses a reply that sets a
/// container's CPUs twice ("plugins "90-pinion" and "90-pinion" both tried
/// to set CPU pinning") and failed the pod, on the cluster bed's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_reply_carries_one_update_of_a_container_queued_twice() {
    let node = Node::with_runtime(tempfile::tempdir().unwrap(), FakeOptions::containerd_1_7());
    let agent = node.agent(1).await;
    let (web, db_pod, db) = web_and_db(&node).await;
    node.runtime.stop_container(&db).await.unwrap();
    node.runtime.stop_pod(&db_pod).await.unwrap();
    node.runtime.remove_container(&db).await.unwrap();
    within("db's removal", node.runtime.remove_pod(&db_pod))
        .await
        .unwrap();
    let (_, next) = within(
        "next's start",
        node.pod_with(guaranteed_pod("next"), container("next", 2000)),
    )
    .await;
    let exclusive = set(&node.runtime.cpus(&next));
    assert_eq!(exclusive.len(), 2);
    let pool = set(&node.runtime.cpus(&web));
    assert!(
        pool.is_disjoint(&exclusive) && pool.len() == 8 - 2,
        "web holds every CPU but next's {exclusive:?}: {pool:?}; {:?}",
        node.runtime.log()
    );
    let log = node.runtime.log();
    assert!(
        !log.iter().any(|l| l.starts_with("UpdateContainers")),
        "the growth waited for next's reply: {log:?}"
    );
    agent.stop().await;
}

/// Regression: a Guaranteed container that ended and was restarted in its
/// pod (StopContainer, then CreateContainer of the same name) gave its
/// exclusive CPUs back at the stop: a pod admitted in between took them,
/// and the restarted container got other CPUs — or was refused. kubelet
/// keeps a terminated container's CPUs while its pod is active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_restarted_container_keeps_its_cpus_and_no_pod_takes_them_meanwhile() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (db_pod, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 4000))
        .await;
    let cpus = node.runtime.cpus(&db);
    node.runtime.stop_container(&db).await.unwrap();

    // 8 cpus, cpu 0 reserved: 3 are free while db's 4 are held.
    let other = node.runtime.run_pod(guaranteed_pod("other")).await.unwrap();
    let err = node
        .runtime
        .create_container(&other, container("other", 4000))
        .await
        .expect_err("db's cpus are held for its restart");
    assert!(rejected(err).1.contains("available=3"));

    node.runtime.remove_container(&db).await.unwrap();
    let again = node
        .runtime
        .create_container(&db_pod, container("db", 4000))
        .await
        .unwrap();
    node.runtime.start_container(&again).await.unwrap();
    assert_eq!(node.runtime.cpus(&again), cpus, "the same cpus");
    assert_eq!(node.runtime.quota(&again), Some(-1));
    let snapshot = agent.handle.snapshot();
    assert_eq!(snapshot.assignments["db"]["db"], set(&cpus));
    assert_eq!(snapshot.assignments.len(), 1, "{:?}", snapshot.assignments);
    agent.stop().await;
}

/// Pod `db` whose container `db` (2 cpus) was created twice: the first
/// attempt's start failed (the runtime relays no start and no stop), the
/// second runs. Answers (pod, failed, running).
async fn db_after_a_failed_start(node: &Node) -> (String, String, String) {
    let db_pod = node.runtime.run_pod(guaranteed_pod("db")).await.unwrap();
    let mut attempts = Vec::new();
    for _ in 0..2 {
        let id = node
            .runtime
            .create_container(&db_pod, container("db", 2000))
            .await
            .unwrap();
        attempts.push(id);
    }
    let again = attempts.pop().expect("the second attempt");
    node.runtime.start_container(&again).await.unwrap();
    let failed = attempts.pop().expect("the first attempt");
    (db_pod, failed, again)
}

/// Found from outside (session 43): a container created but never
/// started (its start failed) stays tracked; kubelet creates the next
/// attempt under the same name, which takes the placement, and removes the
/// failed one later. That removal released the key — the new container's
/// by then — and its exclusive CPUs went back to the pool while it ran. The
/// stop or removal of a superseded container now releases nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_removing_a_superseded_container_keeps_its_successors_cpus() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (db_pod, failed, again) = db_after_a_failed_start(&node).await;
    let cpus = node.runtime.cpus(&again);
    node.runtime.remove_container(&failed).await.unwrap();
    let snapshot = agent.handle.snapshot();
    assert_eq!(
        snapshot.assignments.get("db").and_then(|c| c.get("db")),
        Some(&set(&cpus)),
        "{:?}",
        snapshot.assignments
    );
    let (_, other) = node
        .pod_with(guaranteed_pod("other"), container("other", 2000))
        .await;
    assert!(
        set(&node.runtime.cpus(&other)).is_disjoint(&set(&cpus)),
        "db's cpus are not handed out again"
    );
    // The container's own removal releases them.
    node.runtime.stop_container(&again).await.unwrap();
    node.runtime.remove_container(&again).await.unwrap();
    node.runtime.stop_pod(&db_pod).await.unwrap();
    assert!(!agent.handle.snapshot().assignments.contains_key("db"));
    agent.stop().await;
}

/// Found from outside (session 47): a `Synchronize` listing an attempt
/// that never started beside the container that runs, under the same name,
/// bound the key to whichever id sorted last. With the leftover's id last
/// (`ctr-9` after `ctr-10`), the shared pool's shrink went to the leftover,
/// and the running container stayed on the CPUs just given to another pod
/// as exclusive. The key now follows the container that runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_after_a_synchronize_the_key_follows_the_running_container() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let web_pod = node.runtime.run_pod(burstable_pod("web")).await.unwrap();
    // Ids come from one counter: seven more pods make the leftover `ctr-9`
    // and the running attempt `ctr-10`, which sorts first.
    for n in 0..7 {
        node.runtime
            .run_pod(burstable_pod(&format!("filler-{n}")))
            .await
            .unwrap();
    }
    let leftover = node
        .runtime
        .create_container(&web_pod, burstable("web", 500))
        .await
        .unwrap();
    let running = node
        .runtime
        .create_container(&web_pod, burstable("web", 500))
        .await
        .unwrap();
    node.runtime.start_container(&running).await.unwrap();
    assert!(running < leftover, "{running} sorts before {leftover}");
    agent.stop().await;

    let agent = node.agent(2).await;
    let (_, g) = node
        .pod_with(guaranteed_pod("g"), container("g", 2000))
        .await;
    let exclusive = set(&node.runtime.cpus(&g));
    assert_eq!(exclusive.len(), 2);
    assert!(
        set(&node.runtime.cpus(&running)).is_disjoint(&exclusive),
        "web runs on {} beside g's exclusive {exclusive}",
        node.runtime.cpus(&running)
    );
    let view = agent.handle.snapshot();
    let web = view.workload("web", "web").expect("web");
    assert_eq!(web.container_id.as_deref(), Some(running.as_str()));
    agent.stop().await;
}

/// Found from outside (session 47): with an attempt that never started
/// still listed, the stop of the container that ran was taken for a
/// superseded attempt's and not held; the leftover's removal then released
/// the key, and the restart's exclusive CPUs went back to the pool while
/// the pod was active. The stop of the container the key follows is held
/// whatever else is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_leftover_attempt_does_not_undo_the_hold_of_a_stopped_container() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (db_pod, failed, again) = db_after_a_failed_start(&node).await;
    let cpus = set(&node.runtime.cpus(&again));
    node.runtime.stop_container(&again).await.unwrap();
    node.runtime.remove_container(&failed).await.unwrap();
    let snapshot = agent.handle.snapshot();
    assert_eq!(
        snapshot.assignments.get("db").and_then(|c| c.get("db")),
        Some(&cpus),
        "held for the restart: {:?}",
        snapshot.assignments
    );
    let (_, other) = node
        .pod_with(guaranteed_pod("other"), container("other", 2000))
        .await;
    assert!(
        set(&node.runtime.cpus(&other)).is_disjoint(&cpus),
        "db's cpus are not handed out again"
    );
    // The restart gets them back.
    let restarted = node
        .runtime
        .create_container(&db_pod, container("db", 2000))
        .await
        .unwrap();
    assert_eq!(set(&node.runtime.cpus(&restarted)), cpus);
    agent.stop().await;
}

/// Pod `p` (declaring its init container `init`) whose init container
/// held 4 exclusive cpus and ended, and pod `q` on the 3 other free ones
/// (8 cpus, cpu 0 reserved): the node is full. Answers p's sandbox id and
/// the init container's cpus.
async fn init_ended_on_a_full_node(node: &Node) -> (String, String) {
    let mut spec = guaranteed_pod("p");
    spec.annotations
        .insert("pinion.dev/init-containers".into(), "init".into());
    let p = node.runtime.run_pod(spec).await.unwrap();
    node.set_sandbox_running(&p, true);
    let init = node
        .runtime
        .create_container(&p, container("init", 4000))
        .await
        .unwrap();
    node.runtime.start_container(&init).await.unwrap();
    let cpus = node.runtime.cpus(&init);
    node.runtime.stop_container(&init).await.unwrap();
    let (_, q) = node
        .pod_with(guaranteed_pod("q"), container("q", 3000))
        .await;
    assert_eq!(set(&node.runtime.cpus(&q)).len(), 3);
    (p, cpus)
}

/// Creates and starts pod `p`'s app container asking 4 cpus: it gets
/// `cpus`, its ended init container's.
async fn app_reuses(node: &Node, p: &str, cpus: &str) {
    let app = node
        .runtime
        .create_container(p, container("app", 4000))
        .await
        .expect("the app container gets the init container's cpus");
    node.runtime.start_container(&app).await.unwrap();
    assert_eq!(node.runtime.cpus(&app), cpus);
}

/// Regression (found from outside with containerd): the runtime creates a
/// pod's containers one by one, so another pod admitted after the init
/// container ended made the policy forget the CPUs that init container
/// passes on (kubelet keeps one pod's, and admits a pod's containers one
/// after the other): the app container was refused on a full node where
/// kubelet gives it the init container's CPUs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_app_container_reuses_its_init_containers_cpus_after_other_pods() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (p, cpus) = init_ended_on_a_full_node(&node).await;
    app_reuses(&node, &p, &cpus).await;
    agent.stop().await;
}

/// Regression (found from outside with containerd): after an agent
/// restart the policy remembered no reusable CPUs, and the init container
/// restored from the checkpoint had no spec to tell it was one: a pod whose
/// init container ended before the restart could never start its app
/// container on a full node. Kubelet re-admits its pods after a restart,
/// which rebuilds what their init containers pass on; the kind comes from
/// the pod's `pinion.dev/init-containers` annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_app_container_reuses_its_init_containers_cpus_after_an_agent_restart() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (p, cpus) = init_ended_on_a_full_node(&node).await;
    agent.stop().await;
    let agent = node.agent(2).await;
    assert_eq!(
        agent.handle.snapshot().assignments["p"]["init"],
        set(&cpus),
        "held while its pod's sandbox runs"
    );
    app_reuses(&node, &p, &cpus).await;
    agent.stop().await;
}

/// Regression (issue 28 item 3): a container of a pod Pinion knew only
/// from a `Synchronize` (it ran before the agent's restart) gave its CPUs
/// back at its stop, so its restart in the same pod was admitted afresh —
/// other CPUs, or a refusal when a pod admitted in between had taken them.
/// It is held now while its pod's sandbox cgroup is there, as for a pod
/// created while the agent ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_after_an_agent_restart_a_restarted_container_keeps_its_cpus() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (db_pod, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 4000))
        .await;
    node.set_sandbox_running(&db_pod, true);
    let cpus = node.runtime.cpus(&db);
    agent.stop().await;
    let agent = node.agent(2).await;
    node.runtime.stop_container(&db).await.unwrap();
    node.runtime.remove_container(&db).await.unwrap();
    assert_eq!(
        agent.handle.snapshot().assignments["db"]["db"],
        set(&cpus),
        "held while its pod's sandbox runs"
    );
    let report = agent.handle.reconcile().await.unwrap();
    assert!(report.released.is_empty(), "{report:?}");

    // 8 cpus, cpu 0 reserved: 3 are free while db's 4 are held.
    let other = node.runtime.run_pod(guaranteed_pod("other")).await.unwrap();
    let err = node
        .runtime
        .create_container(&other, container("other", 4000))
        .await
        .expect_err("db's cpus are held for its restart");
    assert!(rejected(err).1.contains("available=3"));

    let again = node
        .runtime
        .create_container(&db_pod, container("db", 4000))
        .await
        .unwrap();
    node.runtime.start_container(&again).await.unwrap();
    assert_eq!(node.runtime.cpus(&again), cpus, "the same cpus");
    agent.stop().await;
}

/// Found from outside (session 45): a container held for its restart
/// (its pod known from a `Synchronize`) and created again kept the note of
/// the sandbox it was held for. When that sandbox's cgroup went away (the
/// pod's sandbox made again; containerd 1.7 relays no stop of a pod it
/// recovered), the reconcile pass released the running container's
/// exclusive CPUs to the shared pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_held_container_created_again_is_not_released_with_its_old_sandbox() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (db_pod, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    node.set_sandbox_running(&db_pod, true);
    let cpus = node.runtime.cpus(&db);
    agent.stop().await;
    let agent = node.agent(2).await;
    node.runtime.stop_container(&db).await.unwrap();
    node.runtime.remove_container(&db).await.unwrap();
    let again = node
        .runtime
        .create_container(&db_pod, container("db", 2000))
        .await
        .unwrap();
    node.runtime.start_container(&again).await.unwrap();
    assert_eq!(node.runtime.cpus(&again), cpus, "the same cpus");

    // The sandbox it was held for is gone; the container runs.
    node.set_sandbox_running(&db_pod, false);
    let report = agent.handle.reconcile().await.unwrap();
    assert!(report.released.is_empty(), "{report:?}");
    assert_eq!(agent.handle.snapshot().assignments["db"]["db"], set(&cpus));
    agent.stop().await;
}

/// Regression: containerd 1.7 never relays the stop of a pod it recovered
/// after its own restart, so a container of such a pod held for a restart
/// would keep its CPUs for ever. The reconcile pass releases it once the
/// pod's sandbox cgroup is gone; a pod without a sandbox cgroup is not
/// held at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_hold_ends_when_the_pods_sandbox_is_gone_though_no_stop_is_relayed() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (db_pod, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    node.set_sandbox_running(&db_pod, true);
    agent.stop().await;
    let agent = node.agent(2).await;
    node.runtime.stop_container(&db).await.unwrap();
    assert!(agent.handle.snapshot().assignments.contains_key("db"));
    let report = agent.handle.reconcile().await.unwrap();
    assert!(report.released.is_empty(), "sandbox there: {report:?}");

    // The pod stops; the runtime does not say so.
    node.set_sandbox_running(&db_pod, false);
    let report = agent.handle.reconcile().await.unwrap();
    assert_eq!(report.released, vec!["db/db".to_string()]);
    assert!(agent.handle.snapshot().assignments.is_empty());
    let disk = String::from_utf8(node.checkpoint()).unwrap();
    assert!(!disk.contains("\"db\""), "released on disk: {disk}");
    agent.stop().await;
}

/// A container that stopped while the agent was down, in a pod that still
/// runs, is held at the next `Synchronize` (not released), and its restart
/// gets its CPUs again; one whose pod's sandbox is gone is released there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronize_holds_a_stopped_container_of_a_running_pod_and_releases_one_of_an_ended_pod() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (db_pod, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let (old_pod, old) = node
        .pod_with(guaranteed_pod("old"), container("old", 2000))
        .await;
    node.set_sandbox_running(&db_pod, true);
    let cpus = node.runtime.cpus(&db);
    agent.stop().await;
    node.runtime.stop_container(&db).await.unwrap();
    node.runtime.stop_container(&old).await.unwrap();
    node.set_sandbox_running(&old_pod, false);
    let agent = node.agent(2).await;
    let assignments = agent.handle.snapshot().assignments.clone();
    assert_eq!(assignments["db"]["db"], set(&cpus), "held: {assignments:?}");
    assert!(
        !assignments.contains_key("old"),
        "released: {assignments:?}"
    );

    let again = node
        .runtime
        .create_container(&db_pod, container("db", 2000))
        .await
        .unwrap();
    node.runtime.start_container(&again).await.unwrap();
    assert_eq!(node.runtime.cpus(&again), cpus, "the same cpus");
    // The pod's stop, relayed now, releases it.
    node.runtime.stop_container(&again).await.unwrap();
    node.runtime.stop_pod(&db_pod).await.unwrap();
    assert!(agent.handle.snapshot().assignments.is_empty());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_failure_fails_creation_with_kubelets_text_and_changes_nothing() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 4000))
        .await;
    let before = node.checkpoint();
    let big = node.runtime.run_pod(guaranteed_pod("big")).await.unwrap();
    let err = node
        .runtime
        .create_container(&big, container("big", 4000))
        .await
        .expect_err("only 3 cpus left");
    let (code, message) = rejected(err);
    assert_eq!(code, Code::ResourceExhausted);
    assert!(
        message.contains("UnexpectedAdmissionError: Allocate failed due to not enough cpus available to satisfy request: requested=4, available=3, which is unexpected"),
        "{message}"
    );
    assert!(message.contains("big"), "names the pod: {message}");
    let err = node
        .runtime
        .create_container(&big, container("huge", 64_000))
        .await
        .expect_err("beyond capacity");
    assert_eq!(rejected(err).0, Code::ResourceExhausted);
    assert_eq!(node.checkpoint(), before, "checkpoint unchanged");
    assert_eq!(set(&node.runtime.cpus(&db)).len(), 4, "nothing lost");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_clearly_and_non_kubernetes_pods_share() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let before = node.checkpoint();

    let mut annotated = guaranteed_pod("ann");
    annotated
        .annotations
        .insert("pinion.dev/init-containers".into(), "init=daemon".into());
    let pod = node.runtime.run_pod(annotated).await.unwrap();
    let err = node
        .runtime
        .create_container(&pod, container("app", 1000))
        .await
        .expect_err("annotation");
    let (code, message) = rejected(err);
    assert_eq!(code, Code::InvalidArgument);
    assert!(
        message.contains("pinion.dev/init-containers") && message.contains("daemon"),
        "{message}"
    );

    let no_uid = node
        .runtime
        .run_pod(PodSpec {
            uid: String::new(),
            ..guaranteed_pod("x")
        })
        .await
        .unwrap();
    let err = node
        .runtime
        .create_container(&no_uid, container("app", 1000))
        .await
        .expect_err("uid");
    assert!(rejected(err).1.contains("has no uid"));

    // A UID longer than any Kubernetes name (session 45).
    let long = node
        .runtime
        .run_pod(guaranteed_pod(&"u".repeat(300)))
        .await
        .unwrap();
    let err = node
        .runtime
        .create_container(&long, container("app", 1000))
        .await
        .expect_err("long uid");
    let (code, message) = rejected(err);
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("300 bytes, more than 253"), "{message}");

    let mut incomplete = container("app", 1000);
    incomplete.resources.memory_limit = None;
    let pod = node.runtime.run_pod(guaranteed_pod("inc")).await.unwrap();
    let err = node
        .runtime
        .create_container(&pod, incomplete)
        .await
        .expect_err("no memory limit");
    assert!(rejected(err).1.contains("memory limit"));

    let outside = PodSpec {
        cgroup_parent: "/system.slice/tool".into(),
        ..guaranteed_pod("tool")
    };
    let (_, tool) = node.pod_with(outside, container("tool", 2000)).await;
    let pool = set("0-7").difference(&set(&node.runtime.cpus(&db)));
    assert_eq!(
        node.runtime.cpus(&tool),
        pool.to_string(),
        "outside kubepods: shared pool"
    );
    assert_eq!(node.runtime.quota(&tool), Some(200_000));

    assert_eq!(node.checkpoint(), before, "checkpoint unchanged");
    assert_eq!(set(&node.runtime.cpus(&db)).len(), 2);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_keeps_exclusive_cpus_and_refuses_a_resize() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let cpus = node.runtime.cpus(&db);
    let pool = set("0-7").difference(&set(&cpus)).to_string();
    node.wait_cpus(&web, &pool).await;

    // `crictl update --cpuset-cpus 0 --memory 2Gi`: memory changes, the cpus stay.
    let change = Resources {
        cpus: "0".into(),
        memory_limit: Some(2 << 30),
        ..Resources::default()
    };
    node.runtime.update_container(&db, &change).await.unwrap();
    assert_eq!(node.runtime.cpus(&db), cpus);
    assert_eq!(node.runtime.quota(&db), Some(-1));
    node.runtime.update_container(&web, &change).await.unwrap();
    assert_eq!(node.runtime.cpus(&web), pool, "shared stays on the pool");

    let before = node.checkpoint();
    let resize = Resources {
        cpu_shares: Some(3072),
        ..Resources::default()
    };
    let err = node
        .runtime
        .update_container(&db, &resize)
        .await
        .expect_err("resize");
    let (code, message) = rejected(err);
    assert_eq!(code, Code::FailedPrecondition);
    assert!(
        message.contains("3000m") && message.contains("not supported"),
        "{message}"
    );
    assert_eq!(node.checkpoint(), before);
    assert_eq!(node.runtime.cpus(&db), cpus);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restart_moves_nothing_and_releases_what_ended_meanwhile() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let (_, gone) = node
        .pod_with(guaranteed_pod("gone"), container("gone", 2000))
        .await;
    let (db_cpus, gone_cpus) = (node.runtime.cpus(&db), node.runtime.cpus(&gone));
    let pool = set("0-7")
        .difference(&set(&db_cpus))
        .difference(&set(&gone_cpus));
    node.wait_cpus(&web, &pool.to_string()).await;
    agent.stop().await;

    // While the agent is down: one container ends, a Guaranteed one starts.
    node.runtime.stop_container(&gone).await.unwrap();
    node.runtime.remove_container(&gone).await.unwrap();
    let (_, late) = node
        .pod_with(guaranteed_pod("late"), container("late", 2000))
        .await;
    assert_eq!(
        node.runtime.cpus(&late),
        "",
        "created without a plugin (fail-open)"
    );

    let agent = node.agent(2).await;
    assert_eq!(node.runtime.cpus(&db), db_cpus, "nothing moved");
    assert_eq!(node.runtime.quota(&db), Some(-1));
    // Issue 28 item 5: admitted at Synchronize, exclusive cpus by an update
    // (as kubelet's reconcile would give them), none of db's.
    let late_cpus = set(&node.runtime.cpus(&late));
    assert_eq!(late_cpus.len(), 2, "late: {late_cpus}");
    assert!(
        late_cpus.is_disjoint(&set(&db_cpus)),
        "no cpu handed out twice"
    );
    assert!(!late_cpus.contains(0), "not the reserved cpu");
    assert_eq!(node.runtime.quota(&late), Some(-1));
    let pool = set("0-7")
        .difference(&set(&db_cpus))
        .difference(&late_cpus)
        .to_string();
    assert_eq!(
        node.runtime.cpus(&web),
        pool,
        "the freed cpus are shared again, less the late container's"
    );
    let snapshot = agent.handle.snapshot();
    assert_eq!(snapshot.assignments.len(), 2, "{:?}", snapshot.assignments);
    assert!(snapshot.assignments.contains_key("db"));
    assert_eq!(snapshot.assignments["late"]["late"], late_cpus);
    assert_eq!(snapshot.workloads.len(), 3, "db, web, late");
    let disk = String::from_utf8(node.checkpoint()).unwrap();
    assert!(!disk.contains("\"gone\""), "{disk}");
    agent.stop().await;
}

/// Regression (found from outside with containerd): a Guaranteed
/// container the agent had left in the shared pool — created while no
/// plugin was connected, it did not fit when the agent came back — was
/// admitted late at a later plain restart, once CPUs were free, and moved
/// with the shared pool shrinking under the others. A container that runs
/// on a cpuset was placed already and stays where it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_restart_does_not_pin_a_container_left_in_the_shared_pool() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let (big_pod, big) = node
        .pod_with(guaranteed_pod("big"), container("big", 6000))
        .await;
    agent.stop().await;
    // Created while no plugin is connected: 1 cpu is free when the agent
    // comes back, it asks 2.
    let (_, late) = node
        .pod_with(guaranteed_pod("late"), container("late", 2000))
        .await;
    assert_eq!(node.runtime.cpus(&late), "");
    let agent = node.agent(2).await;
    let pool = set("0-7").difference(&set(&node.runtime.cpus(&big)));
    node.wait_cpus(&late, &pool.to_string()).await;
    assert!(!agent.handle.snapshot().assignments.contains_key("late"));

    // The big pod ends: the shared pool is every cpu again.
    node.runtime.stop_container(&big).await.unwrap();
    node.runtime.remove_container(&big).await.unwrap();
    node.runtime.stop_pod(&big_pod).await.unwrap();
    node.runtime.remove_pod(&big_pod).await.unwrap();
    node.wait_cpus(&late, "0-7").await;
    node.wait_cpus(&web, "0-7").await;
    agent.stop().await;

    let agent = node.agent(3).await;
    assert_eq!(node.runtime.cpus(&late), "0-7", "nothing moved");
    assert_eq!(node.runtime.cpus(&web), "0-7", "nothing moved");
    assert!(
        agent.handle.snapshot().assignments.is_empty(),
        "{:?}",
        agent.handle.snapshot().assignments
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_restart_resyncs_without_moving_anything() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let db_cpus = node.runtime.cpus(&db);
    let pool = set("0-7").difference(&set(&db_cpus)).to_string();
    node.wait_cpus(&web, &pool).await;
    let before = node.checkpoint();

    node.runtime.stop().await;
    node.runtime.restart().unwrap();
    node.runtime.wait_synced(2).await;
    assert_eq!(node.runtime.cpus(&db), db_cpus);
    assert_eq!(node.runtime.cpus(&web), pool);
    assert_eq!(node.checkpoint(), before, "nothing changed on disk");

    // The plugin works as before after the re-sync.
    let (_, db2) = node
        .pod_with(guaranteed_pod("db2"), container("db2", 2000))
        .await;
    let db2_cpus = set(&node.runtime.cpus(&db2));
    assert_eq!(db2_cpus.len(), 2);
    assert!(db2_cpus.intersection_len(&set(&db_cpus)) == 0);
    node.wait_cpus(&web, &set(&pool).difference(&db2_cpus).to_string())
        .await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_configuration_from_the_runtime_is_refused_by_name() {
    use pinion_nri::{NriHandler, RuntimeInfo};
    let node = Node::new();
    let agent = node.agent(1).await;
    let frontend = pinion_agent::nri::NriFrontend::new(agent.handle.clone());
    let info = |config: &str| RuntimeInfo {
        config: config.to_string(),
        ..RuntimeInfo::default()
    };
    frontend
        .configure(info(" \n"))
        .await
        .expect("empty is fine");
    let err = frontend
        .configure(info("policy: x"))
        .await
        .expect_err("refused");
    assert_eq!(err.kind, pinion_nri::ErrorKind::InvalidInput);
    assert!(err.message.contains("\"policy: x\""), "{}", err.message);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_runs_share_the_pool_with_nri_containers() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let request = pinion_agent::testing::run_request("pinion-run-batch", Some("2"), Some(42));
    let run = agent.handle.admit(request).await.unwrap();
    let pool = set("0-7").difference(&run.placement.cpus).to_string();
    node.wait_cpus(&web, &pool).await;
    // A runtime restart's Synchronize leaves the standalone run alone.
    node.runtime.stop().await;
    node.runtime.restart().unwrap();
    node.runtime.wait_synced(2).await;
    let snapshot = agent.handle.snapshot();
    assert_eq!(
        snapshot.assignments["pinion-run-batch"]["main"],
        run.placement.cpus
    );
    assert_eq!(node.runtime.cpus(&web), pool);
    agent.stop().await;
}

/// Issue 10: which front-end a workload belonged to was told by the name
/// prefix `pinion-run-`, so an NRI pod whose UID starts with it lost its
/// CPUs when the agent restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_nri_pod_with_a_run_like_uid_keeps_its_cpus_across_an_agent_restart() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, lookalike) = node
        .pod_with(
            guaranteed_pod("pinion-run-1234-5-6"),
            container("app", 2000),
        )
        .await;
    let cpus = node.runtime.cpus(&lookalike);
    assert_eq!(set(&cpus).len(), 2);
    agent.stop().await;

    let agent = node.agent(2).await;
    assert_eq!(node.runtime.cpus(&lookalike), cpus, "nothing moved");
    let snapshot = agent.handle.snapshot();
    assert_eq!(
        snapshot.assignments["pinion-run-1234-5-6"]["app"],
        set(&cpus),
        "still exclusive"
    );
    let view = snapshot.workload("pinion-run-1234-5-6", "app").unwrap();
    assert_eq!(view.frontend, "runtime");
    assert_eq!(view.container_id.as_deref(), Some(lookalike.as_str()));
    agent.stop().await;
}

/// One memory-node rule for both front-ends: neither an NRI shared
/// container nor a standalone shared run gets memory nodes from Pinion
/// (regression: both were narrowed to the shared pool's nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_containers_and_runs_leave_the_memory_nodes() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    assert_eq!(node.runtime.cpus(&web), "0-7");
    assert_eq!(node.mems(&web), "");
    let run = pinion_agent::testing::run_request("pinion-run-s", None, Some(7));
    let standalone = agent.handle.admit(run).await.unwrap();
    let snapshot = agent.handle.snapshot();
    let nri = snapshot.workload("web", "web").unwrap();
    assert_eq!(nri.placement, standalone.placement);
    agent.stop().await;
}

/// Issue 13: after a lost checkpoint the agent started without the NRI
/// containers' assignments and treated every container the runtime
/// reported as a shared-pool member (widening the exclusive ones). Now the
/// runtime's first `Synchronize` rebuilds them with the standalone rule:
/// every container stays on the CPUs it has, a fresh checkpoint is written
/// and the rebuild is counted and shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_lost_checkpoint_is_rebuilt_from_the_runtimes_synchronize() {
    for damage in ["delete", "truncate"] {
        let node = Node::new();
        let agent = node.agent(1).await;
        let (_, web) = node
            .pod_with(burstable_pod("web"), burstable("web", 500))
            .await;
        let (_, db) = node
            .pod_with(guaranteed_pod("db"), container("db", 2000))
            .await;
        let (_, cache) = node
            .pod_with(guaranteed_pod("cache"), container("cache", 2000))
            .await;
        let (db_cpus, cache_cpus) = (node.runtime.cpus(&db), node.runtime.cpus(&cache));
        let pool = set("0-7")
            .difference(&set(&db_cpus))
            .difference(&set(&cache_cpus))
            .to_string();
        node.wait_cpus(&web, &pool).await;
        agent.stop().await;
        let dir = node.state.path();
        match damage {
            "delete" => {
                for entry in std::fs::read_dir(dir).unwrap().flatten() {
                    if entry.path().is_file() {
                        std::fs::remove_file(entry.path()).unwrap();
                    }
                }
            }
            _ => {
                let file = dir.join("cpu_manager_state");
                let bytes = std::fs::read(&file).unwrap();
                std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
            }
        }

        let agent = node.agent(2).await;
        assert_eq!(node.runtime.cpus(&db), db_cpus, "{damage}: db did not move");
        assert_eq!(
            node.runtime.cpus(&cache),
            cache_cpus,
            "{damage}: cache did not move"
        );
        assert_eq!(node.runtime.cpus(&web), pool, "{damage}: web did not widen");
        let snapshot = agent.handle.snapshot();
        assert_eq!(snapshot.assignments["db"]["db"], set(&db_cpus), "{damage}");
        assert_eq!(
            snapshot.assignments["cache"]["cache"],
            set(&cache_cpus),
            "{damage}"
        );
        assert_eq!(snapshot.shared_pool.to_string(), pool, "{damage}");
        assert_eq!(
            snapshot.metrics.counters.state_rebuilds_total, 1,
            "{damage}"
        );
        assert_eq!(
            snapshot.metrics.counters.state_rebuild_conflicts_total, 0,
            "{damage}"
        );
        assert!(
            snapshot.recovery.iter().any(|l| l.starts_with(
                "state rebuilt from 3 running workloads (2 with exclusive cpus): at the runtime's first synchronize"
            )),
            "{damage}: {:?}",
            snapshot.recovery
        );
        let disk = String::from_utf8(node.checkpoint()).unwrap();
        assert!(
            disk.contains(&format!("\"db\":\"{db_cpus}\"")),
            "{damage}: durable: {disk}"
        );
        assert!(
            disk.contains(&format!("\"cache\":\"{cache_cpus}\"")),
            "{damage}: {disk}"
        );
        // A new Guaranteed container gets none of their CPUs.
        let (_, late) = node
            .pod_with(guaranteed_pod("late"), container("late", 2000))
            .await;
        let late = set(&node.runtime.cpus(&late));
        assert_eq!(late.len(), 2, "{damage}");
        assert!(late.intersection(&set(&db_cpus)).is_empty(), "{damage}");
        assert!(late.intersection(&set(&cache_cpus)).is_empty(), "{damage}");
        agent.stop().await;
    }
}

/// Issue 28 item 5: a runtime container's cpuset changed by hand (its
/// cgroup, from NRI's `linux.cgroups_path`) is found by the reconcile pass
/// and its placement sent again in an unsolicited `UpdateContainers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_hand_changed_cpuset_of_an_nri_container_is_sent_again_by_reconcile() {
    use pinion_host::cgroup::{ContainerCgroup, ContainerCpuset};

    let node = Node::new();
    let agent = node.agent(1).await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let cgroups_path = node
        .runtime
        .container(&db)
        .and_then(|c| c.linux)
        .map(|l| l.cgroups_path)
        .unwrap();
    assert_eq!(cgroups_path, format!("/kubepods/poddb/{db}"));
    let cgroup = ContainerCgroup::resolve(&cgroups_path).unwrap();
    let (cpus, mems) = (set(&node.runtime.cpus(&db)), set(&node.mems(&db)));
    let runtime_wrote = |cpus: pinion_core::CpuSet| {
        node.host.tree().containers.insert(
            cgroup.clone(),
            ContainerCpuset {
                cpus: Some(cpus),
                mems: Some(mems.clone()),
            },
        );
    };
    runtime_wrote(cpus.clone());
    let report = agent.handle.reconcile().await.unwrap();
    assert!(report.repaired.is_empty(), "{report:?}");

    runtime_wrote(set("0-7"));
    let applied = |log: &[String]| {
        log.iter()
            .filter(|l| **l == format!("UpdateContainers applied to {db}"))
            .count()
    };
    let before = applied(&node.runtime.log());
    let report = agent.handle.reconcile().await.unwrap();
    assert_eq!(report.repaired, vec![format!("db/db ({cgroups_path})")]);
    for _ in 0..1000 {
        if applied(&node.runtime.log()) > before {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        applied(&node.runtime.log()),
        before + 1,
        "{:?}",
        node.runtime.log()
    );
    assert_eq!(
        node.runtime.cpus(&db),
        cpus.to_string(),
        "its exclusive cpus again"
    );
    assert_eq!(node.runtime.quota(&db), Some(-1));
    let counters = agent.handle.snapshot().metrics.counters.clone();
    assert_eq!(counters.runtime_drift_repairs_total, 1);

    // The runtime wrote it back: nothing more to do.
    runtime_wrote(cpus);
    let report = agent.handle.reconcile().await.unwrap();
    assert!(report.repaired.is_empty(), "{report:?}");
    agent.stop().await;
}

/// An ephemeral container (`kubectl debug`): no resources of its own.
fn debugger() -> ContainerSpec {
    ContainerSpec {
        name: "debugger".into(),
        resources: Resources {
            cpu_shares: Some(2),
            cpu_quota: Some(0),
            ..Resources::default()
        },
        ..ContainerSpec::default()
    }
}

/// Found from outside (fiftieth session): `kubectl debug` of a Guaranteed
/// pod was refused ("has no cpu request"), since an ephemeral container
/// sets no resources; and one that ran while the agent was down made every
/// later container of its pod fail the same way, the restart of the pod's
/// own container included. kubelet's CPU manager never admits ephemeral
/// containers: they run on the shared pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_ephemeral_container_of_a_guaranteed_pod_runs_on_the_shared_pool() {
    let node = Node::new();
    let agent = node.agent(1).await;
    let (pod, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    let exclusive = set(&node.runtime.cpus(&db));
    assert_eq!(exclusive.len(), 2);
    let debug = node
        .runtime
        .create_container(&pod, debugger())
        .await
        .expect("kubectl debug is not refused");
    node.runtime.start_container(&debug).await.unwrap();
    let pool = set("0-7").difference(&exclusive);
    assert_eq!(set(&node.runtime.cpus(&debug)), pool, "the shared pool");
    assert_eq!(node.runtime.cpus(&db), exclusive.to_string(), "db kept");
    agent.stop().await;

    // Known only from the runtime's Synchronize, it does not spoil the pod:
    // the restart of db is admitted and keeps its CPUs.
    let agent = node.agent(2).await;
    assert_eq!(set(&node.runtime.cpus(&debug)), pool);
    node.runtime.stop_container(&db).await.unwrap();
    let again = node
        .runtime
        .create_container(&pod, container("db", 2000))
        .await
        .expect("db's restart is admitted");
    node.runtime.start_container(&again).await.unwrap();
    assert_eq!(set(&node.runtime.cpus(&again)), exclusive);
    agent.stop().await;
}
