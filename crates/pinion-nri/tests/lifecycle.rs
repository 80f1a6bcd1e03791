//! Every lifecycle path through the fake runtime's real protocol bytes.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use pinion_nri::fake_runtime::{FakeError, FakeOptions};
use pinion_nri::status::Code;
use std::time::Duration;

use pinion_core::CpuSet;
use pinion_nri::{ContainerUpdate, Resources};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_configure_and_synchronize() {
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        config: "policy: static".to_string(),
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    assert_eq!(
        fake.plugin().await,
        Some(("90".to_string(), "pinion".to_string()))
    );
    assert_eq!(fake.event_mask().await, Some(0x6ae));
    let runtime = plugin.handler.lock().runtime.clone().unwrap();
    assert_eq!(runtime.runtime_name, "pinion-fake-runtime");
    assert_eq!(runtime.config, "policy: static");
    assert_eq!(
        runtime.request_timeout,
        Some(std::time::Duration::from_secs(2))
    );
    assert_eq!(
        plugin.handler.lock().events,
        ["synchronize 0 pods 0 containers"]
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guaranteed_container_gets_exclusive_cpus_and_the_shared_pool_shrinks() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;

    let web = fake.run_pod(burstable_pod("web")).await.unwrap();
    let shared = fake
        .create_container(&web, container("web", 500))
        .await
        .unwrap();
    fake.start_container(&shared).await.unwrap();
    assert_eq!(fake.cpus(&shared), "0-7");
    assert_eq!(
        fake.quota(&shared),
        Some(50_000),
        "shared containers keep their quota"
    );

    let db = fake.run_pod(guaranteed_pod("db")).await.unwrap();
    let pinned = fake
        .create_container(&db, container("db", 2000))
        .await
        .unwrap();
    fake.start_container(&pinned).await.unwrap();
    assert_eq!(fake.cpus(&pinned), "0-1");
    let linux_cpu = fake
        .container(&pinned)
        .unwrap()
        .linux
        .unwrap()
        .resources
        .unwrap()
        .cpu
        .unwrap();
    assert_eq!(linux_cpu.mems, "0");
    assert_eq!(
        fake.quota(&pinned),
        Some(-1),
        "exclusive CPUs have no CFS quota"
    );
    assert_eq!(
        fake.cpus(&shared),
        "2-7",
        "shared pool shrank in the create reply"
    );

    fake.stop_container(&pinned).await.unwrap();
    assert_eq!(fake.cpus(&shared), "0-7", "shared pool grew back at stop");
    fake.remove_container(&pinned).await.unwrap();
    fake.stop_pod(&db).await.unwrap();
    fake.remove_pod(&db).await.unwrap();
    fake.remove_pod(&web).await.unwrap();
    let events = plugin.handler.lock().events.clone();
    assert_eq!(
        events,
        [
            "synchronize 0 pods 0 containers",
            "create web",
            "create db",
            "stop db",
            "remove db",
            "remove pod db",
            "remove pod web",
        ]
    );
    assert!(
        fake.log().iter().any(|l| l == "StateChange 11 sent"),
        "v0.8 runtime uses StateChange"
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_failure_fails_creation_and_the_plugin_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    let big = fake.run_pod(guaranteed_pod("big")).await.unwrap();
    let err = fake
        .create_container(&big, container("big", 8000))
        .await
        .unwrap_err();
    let FakeError::Rejected { method, status } = err else {
        panic!("unexpected {err:?}");
    };
    assert_eq!(method, "CreateContainer");
    assert_eq!(status.code, Code::ResourceExhausted);
    assert!(status.message.contains("requested=8"), "{}", status.message);
    assert!(
        fake.container_ids().is_empty(),
        "the failed container was not created"
    );
    let ok = fake
        .create_container(&big, container("small", 1000))
        .await
        .unwrap();
    assert_eq!(fake.cpus(&ok), "0");
    assert_eq!(fake.sessions(), 1, "no reconnect was needed");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_keeps_exclusive_cpus_and_rejects_unsupported_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    let pod = fake.run_pod(guaranteed_pod("g")).await.unwrap();
    let pinned = fake
        .create_container(&pod, container("g", 2000))
        .await
        .unwrap();
    // like `crictl update --cpuset-cpus 5`
    let move_it = Resources {
        cpus: "5".to_string(),
        ..Resources::default()
    };
    fake.update_container(&pinned, &move_it).await.unwrap();
    assert_eq!(fake.cpus(&pinned), "0-1", "exclusive CPUs kept");
    let resize = Resources {
        cpu_shares: Some(4096),
        ..Resources::default()
    };
    let err = fake.update_container(&pinned, &resize).await.unwrap_err();
    assert!(
        matches!(&err, FakeError::Rejected { status, .. } if status.code == Code::FailedPrecondition),
        "{err:?}"
    );
    let bpod = fake.run_pod(burstable_pod("b")).await.unwrap();
    let shared = fake
        .create_container(&bpod, container("b", 100))
        .await
        .unwrap();
    fake.update_container(&shared, &resize).await.unwrap();
    assert_eq!(fake.cpus(&shared), "2-7");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_queued_during_an_admission_are_carried_in_its_reply() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let handler = TestHandler {
        unsolicited: true,
        ..TestHandler::default()
    };
    let plugin = start_plugin(options(&path), handler);
    fake.wait_synced(1).await;
    let shared = shared_container(&fake, "b").await;
    let g = fake.run_pod(guaranteed_pod("g")).await.unwrap();
    let pinned = fake
        .create_container(&g, container("g", 3000))
        .await
        .unwrap();
    assert_eq!(fake.cpus(&pinned), "0-2");
    assert_eq!(fake.cpus(&shared), "3-7", "applied with the creation");
    let log = fake.log();
    assert!(
        log.contains(&format!("CreateContainer applied to {shared}")),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|l| l.starts_with("UpdateContainers")),
        "nothing unsolicited: {log:?}"
    );
    assert!(
        plugin.handler.lock().applied_updates.is_empty(),
        "the runtime applies a reply's updates after reading it: not applied yet"
    );
    fake.start_container(&pinned).await.unwrap();
    assert_eq!(
        plugin.handler.lock().applied_updates,
        [shared],
        "applied once the runtime sent its next request"
    );
    assert!(plugin.handler.lock().failed_updates.is_empty());
    assert_eq!(fake.sessions(), 1, "no deadlock, no disconnect");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_admissions_updates_do_not_deadlock_containerd_1_7_at_the_start() {
    // Before: the shared pool's shrink went out unsolicited right after the
    // CreateContainer reply and met kubelet's StartContainer: each of
    // containerd's NRI locks held, the other awaited, the node wedged.
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::containerd_1_7());
    let handler = TestHandler {
        unsolicited: true,
        ..TestHandler::default()
    };
    let plugin = start_plugin(options(&path), handler);
    fake.wait_synced(1).await;
    let shared = shared_container(&fake, "b").await;
    fake.start_container(&shared).await.unwrap();
    for (i, name) in ["g1", "g2"].into_iter().enumerate() {
        let g = fake.run_pod(guaranteed_pod(name)).await.unwrap();
        let pinned = fake
            .create_container(&g, container(name, 2000))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), fake.start_container(&pinned))
            .await
            .unwrap_or_else(|_| panic!("start of {name} hung: {:?}", fake.log()))
            .unwrap();
        let want = if i == 0 { "2-7" } else { "4-7" };
        assert_eq!(fake.cpus(&shared), want);
    }
    assert_eq!(fake.sessions(), 1);
    plugin.stop().await;
}

/// Queues an update that narrows `shared` to CPUs 1-7 (one that takes a
/// CPU away: it leaves unsolicited after the quiet wait).
fn shrink_to_1_7(plugin: &Running, shared: &str) {
    plugin
        .sender
        .send(vec![ContainerUpdate {
            container_id: shared.to_string(),
            placement: placement(CpuSet::parse_list("1-7").unwrap(), CpuSet::new(), false),
            order: 0,
        }])
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_unsolicited_updates_wait_until_the_runtime_is_quiet() {
    // An update no event reply can carry (queued outside any handler) leaves
    // only once the runtime has sent nothing for `quiet`: not into the
    // burst of a pod's stop and removal, where containerd 1.7 deadlocks.
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::containerd_1_7());
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    let shared = shared_container(&fake, "b").await;
    let gone = fake.run_pod(burstable_pod("gone")).await.unwrap();
    let ended = fake
        .create_container(&gone, container("gone", 100))
        .await
        .unwrap();
    fake.start_container(&ended).await.unwrap();
    shrink_to_1_7(&plugin, &shared);
    let burst = async {
        fake.stop_pod(&gone).await?;
        fake.remove_container(&ended).await?;
        fake.remove_pod(&gone).await
    };
    tokio::time::timeout(Duration::from_secs(5), burst)
        .await
        .unwrap_or_else(|_| panic!("the pod's removal hung: {:?}", fake.log()))
        .unwrap();
    eventually("the update applied", || fake.cpus(&shared) == "1-7").await;
    assert!(
        fake.unsolicited_update_followed_the_events(&shared),
        "sent after the burst: {:?}",
        fake.log()
    );
    // The runtime answers the update after applying it.
    eventually("the update answered", || {
        !plugin.handler.lock().applied_updates.is_empty()
    })
    .await;
    assert_eq!(plugin.handler.lock().applied_updates, [shared]);
    plugin.stop().await;
}

/// Queues an update of `container` to `cpus`, decided at `order`.
fn queue_exclusive(plugin: &Running, container: &str, cpus: &str, order: u64) {
    let cpus = CpuSet::parse_list(cpus).unwrap();
    plugin
        .sender
        .send(vec![ContainerUpdate {
            container_id: container.to_string(),
            placement: placement(cpus, CpuSet::new(), true),
            order,
        }])
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_update_replys_own_placement_gives_way_to_a_newer_queued_one() {
    // Before: an UpdateContainer reply dropped every queued update of the
    // container it answered, taking its own for the newer. The agent reads
    // its own placement first; a decision made after that (another pod's
    // admission moving this container) reached the queue before the reply
    // went out, and the reply undid it: the container ran on its older
    // CPUs, which another container may hold by then.
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let mut plugin_options = options(&path);
    // Nothing leaves unsolicited during the test: only the reply carries.
    plugin_options.unsolicited.quiet = Duration::from_secs(30);
    plugin_options.unsolicited.idle = Duration::from_secs(30);
    let plugin = start_plugin(plugin_options, TestHandler::default());
    fake.wait_synced(1).await;
    let pinned = started_guaranteed(&fake, "g", 2000).await;
    assert_eq!(fake.cpus(&pinned), "0-1");
    // An update that asks nothing of the CPUs.
    let same = Resources::default();
    plugin
        .handler
        .own_order
        .store(7, std::sync::atomic::Ordering::SeqCst);

    // (queued CPUs, their order, what the container ends on, why)
    let cases = [
        (
            "4-5",
            9,
            "4-5",
            "the queued update is newer than the handler's own",
        ),
        (
            "6-7",
            5,
            "0-1",
            "the handler's own update is newer than the queued one",
        ),
    ];
    for (queued, order, want, why) in cases {
        queue_exclusive(&plugin, &pinned, queued, order);
        fake.update_container(&pinned, &same).await.unwrap();
        assert_eq!(fake.cpus(&pinned), want, "{why}: {:?}", fake.log());
    }
    assert_eq!(fake.sessions(), 1, "containerd took both replies");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_update_due_during_a_handler_does_not_overtake_its_reply() {
    // Before: the plugin took the queued updates when they became due and
    // only then waited for the running handler to end. That handler's
    // reply carried newer updates of the same container; the older batch,
    // written after it, undid them (the shared container kept CPUs just
    // given to another as exclusive, until the reconcile pass repaired it).
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        request_timeout: Duration::from_secs(10),
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let mut plugin_options = options(&path);
    plugin_options.unsolicited.quiet = Duration::from_millis(300);
    let plugin = start_plugin(plugin_options, TestHandler::default());
    fake.wait_synced(1).await;
    let shared = shared_container(&fake, "b").await;
    assert_eq!(fake.cpus(&shared), "0-7");
    let g = fake.run_pod(guaranteed_pod("g")).await.unwrap();
    // The admission runs for longer than the quiet: the queued update
    // becomes due while it runs.
    plugin
        .handler
        .create_delay_ms
        .store(1000, std::sync::atomic::Ordering::SeqCst);
    shrink_to_1_7(&plugin, &shared);
    fake.create_container(&g, container("g", 2000))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        fake.cpus(&shared),
        "2-7",
        "the reply's newer update stands: {:?}",
        fake.log()
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_synchronize_replys_updates_count_as_carried() {
    // Before: the updates of a `Synchronize` reply were never reported
    // applied, and an unsolicited update could leave right after it, while
    // containerd (on the cluster bed's slow node, after the agent's
    // restart) was still applying the reply: containerd 1.7 deadlocked.
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::containerd_1_7());
    let shared = shared_container(&fake, "b").await;
    let mut plugin_options = options(&path);
    plugin_options.unsolicited.quiet = Duration::from_millis(200);
    plugin_options.unsolicited.carried_settle = Duration::from_millis(1500);
    let plugin = start_plugin(plugin_options, TestHandler::default());
    fake.wait_synced(1).await;
    assert_eq!(fake.cpus(&shared), "0-7", "the reply's update");
    let synced = std::time::Instant::now();
    shrink_to_1_7(&plugin, &shared);
    eventually("the update applied", || fake.cpus(&shared) == "1-7").await;
    assert!(
        synced.elapsed() >= Duration::from_millis(1400),
        "left {:?} after the reply, before it settled: {:?}",
        synced.elapsed(),
        fake.log()
    );
    // The runtime answers the unsolicited update after applying it.
    eventually("both answered", || {
        plugin.handler.lock().applied_updates.len() >= 2
    })
    .await;
    assert_eq!(
        plugin.handler.lock().applied_updates,
        [shared.clone(), shared],
        "the reply's update, then the unsolicited one"
    );
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedicated_rpcs_of_nri_0_12_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        dedicated_rpcs: true,
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    let pod = fake.run_pod(burstable_pod("p")).await.unwrap();
    let c = fake
        .create_container(&pod, container("p", 100))
        .await
        .unwrap();
    fake.stop_container(&c).await.unwrap();
    fake.remove_container(&c).await.unwrap();
    fake.remove_pod(&pod).await.unwrap();
    let log = fake.log();
    assert!(log.iter().any(|l| l == "RemoveContainer sent"), "{log:?}");
    assert!(log.iter().any(|l| l == "RemovePodSandbox sent"), "{log:?}");
    assert!(
        !log.iter().any(|l| l.starts_with("StateChange")),
        "no fallback needed: {log:?}"
    );
    let events = plugin.handler.lock().events.clone();
    assert!(
        events.contains(&"remove p".to_string()) && events.contains(&"remove pod p".to_string())
    );
    plugin.stop().await;
}
