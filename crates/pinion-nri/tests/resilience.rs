//! Restarts, reconnects, timeouts: nothing running moves, nothing is lost.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use pinion_nri::fake_runtime::{FakeError, FakeOptions};
use pinion_nri::status::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_restart_rebuilds_state_from_synchronize_and_nothing_moves() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let first = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    let pinned = started_guaranteed(&fake, "g", 2000).await;
    let b = fake.run_pod(burstable_pod("b")).await.unwrap();
    let shared = fake
        .create_container(&b, container("b", 250))
        .await
        .unwrap();
    fake.start_container(&shared).await.unwrap();
    assert_eq!(
        (fake.cpus(&pinned), fake.cpus(&shared)),
        ("0-1".into(), "2-7".into())
    );
    first.stop().await;

    let second = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(2).await;
    assert_eq!(
        fake.cpus(&pinned),
        "0-1",
        "exclusive container kept its CPUs"
    );
    assert_eq!(
        fake.cpus(&shared),
        "2-7",
        "shared container kept the shared pool"
    );
    assert_eq!(
        second.handler.lock().events,
        ["synchronize 2 pods 2 containers"]
    );
    let g2 = fake.run_pod(guaranteed_pod("g2")).await.unwrap();
    let next = fake
        .create_container(&g2, container("g2", 2000))
        .await
        .unwrap();
    assert_eq!(
        fake.cpus(&next),
        "2-3",
        "the rebuilt state knows 0-1 are taken"
    );
    assert_eq!(fake.cpus(&shared), "4-7");
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_restart_reconnects_and_resyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    let g = fake.run_pod(guaranteed_pod("g")).await.unwrap();
    let pinned = fake
        .create_container(&g, container("g", 1000))
        .await
        .unwrap();

    fake.stop().await;
    // The plugin retries with back-off while the socket is gone.
    tokio::time::sleep(Duration::from_millis(50)).await;
    fake.restart().unwrap();
    fake.wait_synced(2).await;
    assert_eq!(fake.cpus(&pinned), "0");
    let events = plugin.handler.lock().events.clone();
    assert_eq!(events.last().unwrap(), "synchronize 1 pods 1 containers");
    let shared = shared_container(&fake, "b").await;
    assert_eq!(fake.cpus(&shared), "1-7");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_handler_answers_deadline_exceeded_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        request_timeout: Duration::from_millis(300),
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    plugin
        .handler
        .create_delay_ms
        .store(400, std::sync::atomic::Ordering::SeqCst);
    let b = fake.run_pod(burstable_pod("b")).await.unwrap();
    let err = fake
        .create_container(&b, container("b", 100))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FakeError::Rejected { status, .. } if status.code == Code::DeadlineExceeded),
        "{err:?}"
    );
    plugin
        .handler
        .create_delay_ms
        .store(0, std::sync::atomic::Ordering::SeqCst);
    let created = fake
        .create_container(&b, container("b", 100))
        .await
        .unwrap();
    assert_eq!(fake.cpus(&created), "0-7");
    assert_eq!(fake.sessions(), 1, "the plugin stayed connected");
    plugin.stop().await;
}

/// Found from outside (session 45): a handler that overran the runtime's
/// deadline was dropped at its next `.await`, after its first effects and
/// before its last. In the agent, an admission the controller had made
/// was never tracked by the NRI front-end, and nothing released its CPUs
/// (containerd's undo of the failed create found no container). The
/// handler now runs to its end after the DEADLINE_EXCEEDED answer, before
/// the next request: containerd's undo (StopContainer, RemoveContainer)
/// finds and releases what it admitted, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_handler_that_overran_its_deadline_finishes_before_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        request_timeout: Duration::from_millis(300),
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    plugin
        .handler
        .create_delay_ms
        .store(400, std::sync::atomic::Ordering::SeqCst);
    let g = fake.run_pod(guaranteed_pod("g")).await.unwrap();
    let err = fake
        .create_container(&g, container("g", 1000))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FakeError::Rejected { status, .. } if status.code == Code::DeadlineExceeded),
        "{err:?}"
    );
    let events = plugin.handler.lock().events.clone();
    let tail: Vec<&str> = events
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        ["create g", "stop g", "remove g"],
        "the create finished, then the runtime's undo: {events:?}"
    );
    plugin
        .handler
        .create_delay_ms
        .store(0, std::sync::atomic::Ordering::SeqCst);
    let again = fake
        .create_container(&g, container("g", 1000))
        .await
        .unwrap();
    assert_eq!(
        fake.cpus(&again),
        "0",
        "the undone create's cpu is free again"
    );
    assert_eq!(fake.sessions(), 1, "the plugin stayed connected");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_timeout_disconnects_fails_open_and_the_plugin_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        request_timeout: Duration::from_millis(300),
        send_deadline: false,
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    plugin
        .handler
        .hang_create
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let b = fake.run_pod(burstable_pod("b")).await.unwrap();
    let created = fake
        .create_container(&b, container("b", 100))
        .await
        .unwrap();
    assert_eq!(
        fake.cpus(&created),
        "",
        "fail-open: created without adjustment"
    );
    assert!(
        fake.log().iter().any(|l| l.starts_with("closing plugin")),
        "{:?}",
        fake.log()
    );
    plugin
        .handler
        .hang_create
        .store(false, std::sync::atomic::Ordering::SeqCst);
    fake.wait_synced(2).await;
    assert_eq!(
        fake.cpus(&created),
        "0-7",
        "re-sync put it into the shared pool"
    );
    let g = fake.run_pod(guaranteed_pod("g")).await.unwrap();
    let pinned = fake
        .create_container(&g, container("g", 1000))
        .await
        .unwrap();
    assert_eq!(fake.cpus(&pinned), "0");
    assert_eq!(fake.cpus(&created), "1-7");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_synchronize_is_collected_into_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        sync_chunk: 2,
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let pod = fake.run_pod(burstable_pod("many")).await.unwrap();
    for i in 0..5 {
        let mut spec = container(&format!("c{i}"), 100);
        // Large enough that each chunk is one frame above 4096 bytes.
        spec.annotations.insert("note".into(), "x".repeat(3000));
        fake.create_container(&pod, spec).await.unwrap();
    }
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    assert_eq!(plugin.handler.lock().synced_containers, 5);
    assert_eq!(
        plugin.handler.lock().events,
        ["synchronize 1 pods 5 containers"]
    );
    for id in fake.container_ids() {
        assert_eq!(fake.cpus(&id), "0-7");
    }
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_launched_plugin_uses_the_inherited_socket() {
    use std::os::fd::IntoRawFd;
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let fd = stream.into_raw_fd();
    let env = [
        ("NRI_PLUGIN_NAME", "pinion"),
        ("NRI_PLUGIN_IDX", "42"),
        ("NRI_PLUGIN_SOCKET", &*fd.to_string()),
    ];
    let lookup = |key: &str| {
        env.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| (*v).to_string())
    };
    let options = pinion_nri::PluginOptions::from_launch_env(lookup)
        .unwrap()
        .unwrap();
    let plugin = start_plugin(options, TestHandler::default());
    fake.wait_synced(1).await;
    assert_eq!(
        fake.plugin().await,
        Some(("42".to_string(), "pinion".to_string()))
    );
    fake.stop().await;
    let result = plugin.task.await.unwrap();
    assert!(
        matches!(result, Err(pinion_nri::PluginError::Disconnected(_))),
        "an inherited socket is not re-dialled: {result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_rejects_an_invalid_registration() {
    use std::os::fd::IntoRawFd;
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let fd = std::os::unix::net::UnixStream::connect(&path)
        .unwrap()
        .into_raw_fd();
    let mut options = options(&path);
    options.name = "bad name".to_string();
    options.endpoint = pinion_nri::Endpoint::InheritedFd(fd);
    let plugin = start_plugin(options, TestHandler::default());
    let result = plugin.task.await.unwrap();
    let Err(pinion_nri::PluginError::Register(err)) = result else {
        panic!("unexpected {result:?}");
    };
    assert!(err.to_string().contains("invalid plugin name"), "{err}");
    assert_eq!(fake.sessions(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_drops_a_client_that_never_registers() {
    let dir = tempfile::tempdir().unwrap();
    let fake_options = FakeOptions {
        registration_timeout: Duration::from_millis(100),
        ..FakeOptions::default()
    };
    let (fake, path) = runtime(dir.path(), fake_options);
    let _silent = tokio::net::UnixStream::connect(&path).await.unwrap();
    eventually("registration timeout", || {
        fake.log().iter().any(|l| l == "registration timeout")
    })
    .await;
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    plugin.stop().await;
}
