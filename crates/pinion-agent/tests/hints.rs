//! Hints of outside providers are gathered before an admission reaches the
//! controller (issue 10, item 3): they steer the Topology Manager's merge,
//! and a slow or failing provider never blocks the controller thread.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pinion_agent::controller::{self, ControlError};
use pinion_agent::hints::{HintFuture, HintGatherer, HintSource};
use pinion_agent::testing::{machine, run_request, SyntheticNode};
use pinion_core::pod::Pod;
use pinion_core::policy::PolicyConfig;
use pinion_core::topomgr::{NumaMask, Scope, TopologyHint};
use pinion_core::CpuSet;
use tokio::sync::Notify;

/// Answers "node 1 only" for resource `example.com/widget`; pods named
/// `slow-*` wait until `gate` is notified first.
struct Widget {
    gate: Arc<Notify>,
    fail: bool,
}

impl HintSource for Widget {
    fn name(&self) -> String {
        "widget-plugin".into()
    }

    fn hints(&self, pod: Arc<Pod>, _container: Option<String>) -> HintFuture {
        let gate = Arc::clone(&self.gate);
        let fail = self.fail;
        Box::pin(async move {
            if pod.uid.starts_with("slow-") {
                gate.notified().await;
            }
            if fail {
                return Err("connection refused".to_string());
            }
            let node1 = TopologyHint::new(NumaMask::single(1).unwrap(), true);
            Ok(BTreeMap::from([(
                "example.com/widget".to_string(),
                Some(vec![node1]),
            )]))
        })
    }
}

fn node() -> SyntheticNode {
    SyntheticNode::new(machine(2, 4, 2)).with_config(PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(1),
        topology_manager_policy: Some("single-numa-node".into()),
        ..PolicyConfig::default()
    })
}

fn gatherer(widget: Widget, deadline: Duration) -> HintGatherer {
    HintGatherer::new(vec![Arc::new(widget)], Scope::Container, deadline)
}

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_providers_hints_steer_the_admission() {
    let dir = tempfile::tempdir().unwrap();
    let controller = node().start(dir.path()).unwrap();
    let widget = Widget {
        gate: Arc::new(Notify::new()),
        fail: false,
    };
    let (handle, _thread) =
        controller::spawn_with_hints(controller, gatherer(widget, Duration::from_secs(10)))
            .unwrap();
    // Without the widget's hint, 2 cpus would come from node 0 (the first).
    let admitted = handle
        .admit(run_request("pinion-run-w", Some("2"), None))
        .await
        .unwrap();
    let node1 = set("4-7,12-15");
    assert!(
        admitted.placement.cpus.is_subset(&node1),
        "{}",
        admitted.placement.cpus
    );
    assert!(
        admitted.placement.mems.is_empty(),
        "hints steer the cpus, not the memory nodes: {}",
        admitted.placement.mems
    );
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_provider_does_not_block_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let controller = node().start(dir.path()).unwrap();
    let gate = Arc::new(Notify::new());
    let widget = Widget {
        gate: Arc::clone(&gate),
        fail: false,
    };
    let (handle, _thread) =
        controller::spawn_with_hints(controller, gatherer(widget, Duration::from_secs(30)))
            .unwrap();
    let slow = tokio::spawn({
        let handle = handle.clone();
        async move { handle.admit(run_request("slow-a", Some("1"), None)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!slow.is_finished(), "still gathering hints");
    // Meanwhile the controller answers other work.
    let fast = handle
        .admit(run_request("pinion-run-b", Some("1"), None))
        .await
        .unwrap();
    assert!(fast.exclusive());
    handle.reconcile().await.unwrap();
    assert!(!slow.is_finished());
    gate.notify_one();
    let slow = slow.await.unwrap().unwrap();
    assert!(slow.exclusive());
    handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_fails_or_misses_the_deadline_fails_the_admission_closed() {
    let dir = tempfile::tempdir().unwrap();
    let controller = node().start(dir.path()).unwrap();
    let failing = Widget {
        gate: Arc::new(Notify::new()),
        fail: true,
    };
    let (handle, _thread) =
        controller::spawn_with_hints(controller, gatherer(failing, Duration::from_secs(10)))
            .unwrap();
    let err = handle
        .admit(run_request("pinion-run-f", Some("1"), None))
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::Hints { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("widget-plugin") && text.contains("connection refused"),
        "{text}"
    );
    assert!(handle.snapshot().workloads.is_empty(), "nothing admitted");
    handle.shutdown().await;

    let dir = tempfile::tempdir().unwrap();
    let controller = node().start(dir.path()).unwrap();
    let hanging = Widget {
        gate: Arc::new(Notify::new()),
        fail: false,
    };
    let (handle, _thread) =
        controller::spawn_with_hints(controller, gatherer(hanging, Duration::from_millis(100)))
            .unwrap();
    let err = handle
        .admit(run_request("slow-h", Some("1"), None))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("did not answer within") && text.contains("widget-plugin"),
        "{text}"
    );
    assert!(handle.snapshot().workloads.is_empty());
    handle.shutdown().await;
}

/// Regression: under the Topology Manager's `none` policy (the default) the
/// agent still asked every resource plugin for hints before each admission —
/// a round trip per plugin for nothing (kubelet's none scope collects no
/// hints), and a provider that failed then failed the admission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_under_the_none_policy_no_provider_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let controller = SyntheticNode::new(machine(2, 4, 2))
        .with_config(PolicyConfig {
            policy: Some("static".into()),
            num_reserved: Some(1),
            ..PolicyConfig::default()
        })
        .start(dir.path())
        .unwrap();
    let failing = Widget {
        gate: Arc::new(Notify::new()),
        fail: true,
    };
    let gatherer = HintGatherer::new(
        vec![Arc::new(failing)],
        Scope::None,
        Duration::from_secs(10),
    );
    let (handle, _thread) = controller::spawn_with_hints(controller, gatherer).unwrap();
    // A `slow-` pod would wait for the gate forever if it were asked.
    let admitted = handle
        .admit(run_request("slow-none", Some("2"), None))
        .await
        .expect("admitted without asking the provider");
    assert!(admitted.exclusive());
    handle.shutdown().await;
}
