//! Protocol-level behaviour: UNIMPLEMENTED for unknown methods, the 4096-byte
//! frame rule, and bad input (malformed requests and annotations, unknown
//! pods, garbage and oversized frames): a clear error, and the connection
//! survives or is re-established with nothing lost.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use pinion_nri::conn::CallError;
use pinion_nri::fake_runtime::{FakeError, FakeOptions, FakeRuntime};
use pinion_nri::kube::INIT_CONTAINERS_ANNOTATION;
use pinion_nri::proto::nri as pb;
use pinion_nri::status::Code;
use pinion_nri::wire::{
    encode_frames, encode_message, Message, MAX_IN_FRAME, PLUGIN_CONN, TYPE_REQUEST,
};
use pinion_nri::ContainerUpdate;
use prost::Message as _;

async fn connected() -> (tempfile::TempDir, FakeRuntime, Running) {
    let dir = tempfile::tempdir().unwrap();
    let (fake, path) = runtime(dir.path(), FakeOptions::default());
    let plugin = start_plugin(options(&path), TestHandler::default());
    fake.wait_synced(1).await;
    (dir, fake, plugin)
}

fn status_code(result: Result<Vec<u8>, CallError>) -> (Code, String) {
    match result {
        Err(CallError::Status { status, .. }) => (status.code, status.message),
        other => panic!("expected a status, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_methods_answer_unimplemented_not_not_found() {
    let (_dir, fake, plugin) = connected().await;
    let (code, message) = status_code(fake.call_plugin("FutureMethod", Vec::new()).await);
    assert_eq!(code, Code::Unimplemented);
    assert!(message.contains("FutureMethod"), "{message}");
    for method in [
        "Shutdown",
        "RunPodSandbox",
        "PostCreateContainer",
        "PostStartContainer",
        "PostUpdateContainer",
        "PostUpdatePodSandbox",
        "UpdatePodSandbox",
        "ValidateContainerAdjustment",
    ] {
        let request = pb::ContainerRequest {
            pod: Some(pb::PodSandbox::default()),
            container: Some(pb::Container::default()),
        };
        let reply = fake.call_plugin(method, request.encode_to_vec()).await;
        assert!(reply.is_ok(), "{method}: {reply:?}");
    }
    plugin.stop().await;
}

/// Every answered request of the Plugin service is reported to the handler
/// by its method (the agent's `pinion_nri_request_duration_seconds`), an
/// error answer too; a method the service does not know is not (the
/// runtime's strings never become metric labels).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_requests_are_timed_by_method_and_unknown_ones_are_not() {
    let (_dir, fake, plugin) = connected().await;
    plugin.handler.lock().served.clear();
    let _ = fake.call_plugin("FutureMethod", Vec::new()).await;
    let request = pb::ContainerRequest {
        pod: Some(pb::PodSandbox::default()),
        container: Some(pb::Container::default()),
    };
    assert!(fake
        .call_plugin("StartContainer", request.encode_to_vec())
        .await
        .is_ok());
    let _ = fake.call_plugin("CreateContainer", vec![0xff, 0xff]).await;
    assert_eq!(
        plugin.handler.lock().served,
        ["StartContainer", "CreateContainer"]
    );
    plugin.stop().await;
}

/// The runtime holds a container (often a pod's start) while it waits on
/// Pinion's answer; the handler's own time (`request_served`) misses the
/// time a request queued behind others. An answer that kept the runtime
/// waiting a second or more is a warning naming the method and both times;
/// a quick one is not (found diagnosing slow pod starts on containerd 1.7).
#[tokio::test(flavor = "current_thread")]
async fn an_answer_that_kept_the_runtime_waiting_is_logged_as_a_warning() {
    // This thread's log: the current-thread runtime runs the plugin's tasks too.
    let (captured, _guard) = pinion_core::testing::logs::capture();
    let (_dir, fake, plugin) = connected().await;
    let quick = fake.run_pod(burstable_pod("quick")).await.unwrap();
    fake.create_container(&quick, container("quick", 100))
        .await
        .unwrap();
    assert!(
        !captured.text().contains("answered slowly"),
        "{}",
        captured.text()
    );
    plugin
        .handler
        .create_delay_ms
        .store(1100, std::sync::atomic::Ordering::SeqCst);
    let slow = fake.run_pod(burstable_pod("slow")).await.unwrap();
    fake.create_container(&slow, container("slow", 100))
        .await
        .unwrap();
    let text = captured.text();
    let warning = text
        .lines()
        .find(|line| line.contains("nri request answered slowly"))
        .unwrap_or_else(|| panic!("no warning in: {text}"));
    assert!(warning.contains("WARN"), "{warning}");
    // The method as the runtime named it, quoted (a runtime's string is
    // logged escaped).
    assert!(warning.contains("method=\"CreateContainer\""), "{warning}");
    assert!(
        warning.contains("queued=") && warning.contains("served=1."),
        "{warning}"
    );
    assert_eq!(text.matches("answered slowly").count(), 1, "{text}");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_invalid_argument_and_the_connection_survives() {
    let (_dir, fake, plugin) = connected().await;
    let (code, message) = status_code(
        fake.call_plugin("CreateContainer", vec![0xff, 0xff, 0xff])
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(
        message.contains("malformed CreateContainer request"),
        "{message}"
    );
    let no_container = pb::ContainerRequest {
        pod: Some(pb::PodSandbox::default()),
        container: None,
    };
    let (code, message) = status_code(
        fake.call_plugin("CreateContainer", no_container.encode_to_vec())
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("without a container"), "{message}");
    let pod = fake.run_pod(burstable_pod("after")).await.unwrap();
    fake.create_container(&pod, container("after", 100))
        .await
        .unwrap();
    assert_eq!(fake.sessions(), 1);
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pod_data_fails_the_container_with_a_clear_error() {
    let (_dir, fake, plugin) = connected().await;
    let mut annotated = guaranteed_pod("annotated");
    annotated.annotations.insert(
        INIT_CONTAINERS_ANNOTATION.to_string(),
        "setup=daemon".to_string(),
    );
    let pod = fake.run_pod(annotated).await.unwrap();
    let err = fake
        .create_container(&pod, container("app", 1000))
        .await
        .unwrap_err();
    let FakeError::Rejected { status, .. } = err else {
        panic!("unexpected {err:?}");
    };
    assert_eq!(status.code, Code::InvalidArgument);
    assert!(
        status.message.contains(INIT_CONTAINERS_ANNOTATION),
        "{}",
        status.message
    );
    assert!(status.message.contains("daemon"), "{}", status.message);

    let mut outside = burstable_pod("outside");
    outside.cgroup_parent = "/system.slice/something".to_string();
    let pod = fake.run_pod(outside).await.unwrap();
    let err = fake
        .create_container(&pod, container("x", 100))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not under kubepods"), "{err}");
    assert_eq!(fake.sessions(), 1);
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_for_unknown_pods_and_containers_are_harmless() {
    let (_dir, fake, plugin) = connected().await;
    let ghost = pb::ContainerRequest {
        pod: Some(pb::PodSandbox {
            id: "ghost-pod".into(),
            ..pb::PodSandbox::default()
        }),
        container: Some(pb::Container {
            id: "ghost".into(),
            pod_sandbox_id: "ghost-pod".into(),
            ..pb::Container::default()
        }),
    };
    let reply = fake
        .call_plugin("StopContainer", ghost.encode_to_vec())
        .await
        .unwrap();
    assert_eq!(
        pb::StopContainerResponse::decode(reply.as_slice())
            .unwrap()
            .update,
        []
    );
    fake.call_plugin("RemoveContainer", ghost.encode_to_vec())
        .await
        .unwrap();
    let update = pb::UpdateContainerRequest {
        pod: ghost.pod.clone(),
        container: ghost.container.clone(),
        linux_resources: None,
    };
    let (code, message) = status_code(
        fake.call_plugin("UpdateContainer", update.encode_to_vec())
            .await,
    );
    assert_eq!(code, Code::NotFound);
    assert!(message.contains("ghost"), "{message}");
    assert!(matches!(
        fake.remove_container("nope").await,
        Err(FakeError::UnknownContainer(_))
    ));
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_unsolicited_update_is_cut_into_4096_byte_frames() {
    let (_dir, fake, plugin) = connected().await;
    let updates: Vec<ContainerUpdate> = (0..300)
        .map(|i| ContainerUpdate {
            container_id: format!("missing-container-{i:04}"),
            placement: placement(
                pinion_core::CpuSet::parse_list("0-7").unwrap(),
                pinion_core::CpuSet::new(),
                false,
            ),
            order: 0,
        })
        .collect();
    plugin.sender.send(updates).unwrap();
    eventually("failed updates reported", || {
        plugin.handler.lock().failed_updates.len() == 300
    })
    .await;
    assert!(
        plugin.handler.lock().applied_updates.is_empty(),
        "an update the runtime refused is not answered as applied"
    );
    // The fake runtime closes the connection on any frame above 4096 bytes,
    // like the Go side; the message was bigger, so it came in several frames.
    assert_eq!(fake.largest_frame_from_plugin().await, 4096);
    assert_eq!(fake.sessions(), 1);
    plugin.stop().await;
}

fn garbage_request_frame() -> Vec<u8> {
    let message = Message {
        stream_id: 0x7fff_fff1,
        kind: TYPE_REQUEST,
        flags: 0,
        payload: vec![0xde, 0xad, 0xbe, 0xef],
    };
    encode_frames(PLUGIN_CONN, &encode_message(&message).unwrap(), 4096)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_a_frame_or_for_an_unknown_connection_is_survived() {
    let (_dir, fake, plugin) = connected().await;
    fake.send_raw(&garbage_request_frame()).await.unwrap();
    fake.send_raw(&encode_frames(7, b"nobody listens here", 4096))
        .await
        .unwrap();
    let pod = fake.run_pod(burstable_pod("still")).await.unwrap();
    let id = fake
        .create_container(&pod, container("still", 100))
        .await
        .unwrap();
    assert_eq!(fake.cpus(&id), "0-7");
    assert_eq!(fake.sessions(), 1, "no reconnect was needed");
    plugin.stop().await;
}

/// Sends `bytes`, on which the plugin must drop the connection: it
/// reconnects (within a minute), the container pinned before keeps its
/// CPUs, and the next pod gets the next free one.
async fn a_dropped_connection_loses_nothing(bytes: &[u8]) {
    let (_dir, fake, plugin) = connected().await;
    let g = fake.run_pod(guaranteed_pod("g")).await.unwrap();
    let pinned = fake
        .create_container(&g, container("g", 2000))
        .await
        .unwrap();
    fake.send_raw(bytes).await.unwrap();
    let reconnected =
        tokio::time::timeout(std::time::Duration::from_secs(60), fake.wait_synced(2)).await;
    assert!(
        reconnected.is_ok(),
        "the connection was kept: {} sessions",
        fake.sessions()
    );
    assert_eq!(fake.cpus(&pinned), "0-1");
    let g2 = fake.run_pod(guaranteed_pod("g2")).await.unwrap();
    let next = fake
        .create_container(&g2, container("g2", 1000))
        .await
        .unwrap();
    assert_eq!(fake.cpus(&next), "2");
    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_drops_the_connection_and_nothing_is_lost() {
    let mut header = PLUGIN_CONN.to_be_bytes().to_vec();
    header.extend_from_slice(&u32::try_from(MAX_IN_FRAME + 1).unwrap().to_be_bytes());
    a_dropped_connection_loses_nothing(&header).await;
}

/// Found from outside (session 43): a peer could pack one frame with
/// hundreds of thousands of small requests. The reader took them out one by
/// one, shifting the rest of the buffer each time (23 s of CPU for a 4 MiB
/// frame), and queued every request without bound. The queue now holds at
/// most `MAX_QUEUED_REQUESTS`; past that the connection is dropped as for an
/// oversized frame, the plugin reconnects, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_frame_of_many_requests_drops_the_connection_and_nothing_is_lost() {
    let one = encode_message(&Message {
        stream_id: 0x7fff_fff1,
        kind: TYPE_REQUEST,
        flags: 0,
        payload: Vec::new(),
    })
    .unwrap();
    let many: Vec<u8> = one.repeat(100_000);
    assert!(many.len() <= MAX_IN_FRAME);
    a_dropped_connection_loses_nothing(&encode_frames(PLUGIN_CONN, &many, MAX_IN_FRAME)).await;
}

struct NoService;

impl pinion_nri::conn::Service for NoService {
    fn call(&self, call: pinion_nri::conn::Call) -> pinion_nri::conn::ServiceFuture {
        Box::pin(async move {
            Err(pinion_nri::status::Status::new(
                Code::Unimplemented,
                call.method,
            ))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_service_answers_unimplemented() {
    use pinion_nri::conn::{Connection, Roles};
    use pinion_nri::service::{PluginService, SUBSCRIBED};
    use pinion_nri::wire::{MAX_OUT_FRAME, RUNTIME_CONN};
    use std::sync::Arc;
    use std::time::Duration;

    let (plugin_end, runtime_end) = tokio::net::UnixStream::pair().unwrap();
    let (state, _) = tokio::sync::watch::channel(Default::default());
    let service = Arc::new(PluginService::new(
        Arc::new(TestHandler::default()),
        pinion_nri::service::event_mask(&SUBSCRIBED),
        state,
    ));
    let roles = |serve, client| Roles {
        serve,
        client,
        max_out_frame: MAX_OUT_FRAME,
        max_in_frame: MAX_IN_FRAME,
    };
    let _plugin = Connection::start(
        plugin_end,
        roles(PLUGIN_CONN, RUNTIME_CONN),
        Arc::new(service),
    );
    let runtime = Connection::start(
        runtime_end,
        roles(RUNTIME_CONN, PLUGIN_CONN),
        Arc::new(NoService),
    );
    let reply = runtime
        .call(
            "nri.pkg.api.v1alpha2.Plugin",
            "Configure",
            Vec::new(),
            Duration::from_secs(5),
        )
        .await;
    let (code, message) = status_code(reply);
    assert_eq!(code, Code::Unimplemented);
    assert!(message.contains("v1alpha2"), "{message}");
    let reply = runtime
        .call(
            pinion_nri::service::PLUGIN_SERVICE,
            "Configure",
            Vec::new(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let configured = pb::ConfigureResponse::decode(reply.as_slice()).unwrap();
    assert_eq!(configured.events, 0x6ae);
}
