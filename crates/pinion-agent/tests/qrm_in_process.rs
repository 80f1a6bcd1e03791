//! A plugin in the agent's process (a built-in plugin) is called without
//! the wire's messages for `Allocate`, the reconcile poll and `RemovePod`
//! (issue 30, item 6: building and reading back the wire's messages was
//! about a third of an in-process `Allocate`). What the manager makes of
//! the answers must not change: the same plugins are registered with one
//! manager over sockets and with another in the process, and every answer,
//! poll, removal, error and call count is compared.
#![allow(clippy::unwrap_used)]

mod qrm_common;

use std::sync::Arc;
use std::time::Duration;

use pinion_agent::qrm::{Qrm, QrmError};
use pinion_agent::testing::qrm_node::{serve_in, ServedPlugin};
use pinion_core::topomgr::{NumaMask, TopologyHint};
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::{
    Allocation, AllocationInfo, Allocations, Hint, Options, PluginError, Request, ResourcePlugin,
};
use qrm_common::{admission, qrm_config, Knob};

const WIDGET: &str = "example.com/widget";
const REFUSED: &str = "example.com/refused";

/// An answer using every field the manager keeps: hints (some, and none
/// for the accompanying resource), per-node amounts, environment and
/// annotations.
fn rich_answer() -> Allocation {
    let widget = AllocationInfo {
        oci_property_name: String::new(),
        is_node_resource: true,
        is_scalar_resource: true,
        allocated_quantity: 2.0,
        allocation_result: String::new(),
        envs: [
            ("WIDGET_A".to_string(), "1".to_string()),
            ("WIDGET_B".to_string(), "two".to_string()),
        ]
        .into(),
        annotations: [("example.com/slot".to_string(), "3".to_string())].into(),
        resource_hints: vec![
            Hint {
                nodes: vec![0, 1],
                preferred: false,
            },
            Hint {
                nodes: vec![1],
                preferred: true,
            },
        ],
        topology_assignments: [(0, 1), (1, 1)].into(),
    };
    let companion = AllocationInfo {
        envs: [("COMPANION".to_string(), "yes".to_string())].into(),
        ..AllocationInfo::default()
    };
    [
        (WIDGET.to_string(), widget),
        ("example.com/companion".to_string(), companion),
    ]
    .into()
}

/// A plugin that refuses every container: not enough of it anywhere.
struct Refuser;

impl ResourcePlugin for Refuser {
    fn resource_name(&self) -> &str {
        REFUSED
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: true,
            need_reconcile: true,
        }
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        Err(PluginError::Insufficient {
            resource: request.resource_name.clone(),
            nodes: "0-1".to_string(),
            requested: "1".to_string(),
            available: "0".to_string(),
        })
    }

    fn allocations(&self) -> Allocations {
        Allocations::new()
    }

    fn remove_pod(&mut self, _: &str) -> Result<(), PluginError> {
        Ok(())
    }
}

/// Two managers: `wire` reaching the plugins over sockets, `native`
/// holding the same kinds of plugins in its process.
struct Pair {
    _dirs: [tempfile::TempDir; 2],
    wire: Arc<Qrm>,
    native: Arc<Qrm>,
    /// The widget plugin of each (clones share the state).
    knobs: [Knob; 2],
    _served: Vec<ServedPlugin>,
}

async fn pair() -> Pair {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let wire = Qrm::new(qrm_config(dirs[0].path(), Duration::from_secs(5)));
    let native = Qrm::new(qrm_config(dirs[1].path(), Duration::from_secs(5)));
    let registry_dir = dirs[0].path().join("plugins_registry");
    std::fs::create_dir_all(&registry_dir).unwrap();
    let knobs = [
        Knob::new(WIDGET, rich_answer()),
        Knob::new(WIDGET, rich_answer()),
    ];
    let served = vec![
        serve_in(&registry_dir, knobs[0].clone(), "widget.sock"),
        serve_in(&registry_dir, Refuser, "refused.sock"),
    ];
    for file in ["widget.sock", "refused.sock"] {
        let socket = registry_dir.join(file);
        qrm_common::wait_until("the plugin listens", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        })
        .await;
        wire.registry().register_socket(&socket).await.unwrap();
    }
    native
        .registry()
        .register_in_process(WIDGET, Arc::new(GrpcPlugin::new(knobs[1].clone()).inline()))
        .await
        .unwrap();
    native
        .registry()
        .register_in_process(REFUSED, Arc::new(GrpcPlugin::new(Refuser).inline()))
        .await
        .unwrap();
    Pair {
        _dirs: dirs,
        wire,
        native,
        knobs,
        _served: served,
    }
}

async fn allocate(qrm: &Qrm, id: &str, resource: &str) -> Result<String, QrmError> {
    let request = admission(id, "1", &[(resource, "2")], &[]);
    let asked = qrm
        .plugin_requests(&request.pod, &request.container)
        .unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let hint = TopologyHint::new(NumaMask::single(1).unwrap(), true);
    qrm.allocate(&request.pod, &request.container, &asked, Some(hint))
        .await
        .map(|allocations| format!("{allocations:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_in_the_process_answers_as_it_does_over_its_socket() {
    let pair = pair().await;

    // Allocate: the same allocations, every field.
    let over_socket = allocate(&pair.wire, "pod-a", WIDGET).await.unwrap();
    let in_process = allocate(&pair.native, "pod-a", WIDGET).await.unwrap();
    assert_eq!(in_process, over_socket);
    for expected in [
        "WIDGET_B",
        "example.com/slot",
        "preferred: true",
        "example.com/companion",
        "resource_hints: None",
    ] {
        assert!(in_process.contains(expected), "{expected}: {in_process}");
    }

    // The reconcile poll: the same containers and answers.
    let polls = |qrm: &Arc<Qrm>| {
        let qrm = Arc::clone(qrm);
        async move { format!("{:?}", qrm.poll().await) }
    };
    let (wire_poll, native_poll) = (polls(&pair.wire).await, polls(&pair.native).await);
    assert_eq!(native_poll, wire_poll);
    assert!(native_poll.contains("pod-a"), "{native_poll}");

    // A refusal: the same error text, counted alike.
    let over_socket = allocate(&pair.wire, "pod-b", REFUSED).await.unwrap_err();
    let in_process = allocate(&pair.native, "pod-b", REFUSED).await.unwrap_err();
    assert_eq!(in_process.to_string(), over_socket.to_string());
    assert!(
        in_process
            .to_string()
            .contains("not enough example.com/refused on numa nodes 0-1"),
        "{in_process}"
    );
    let counts = |qrm: &Qrm| {
        qrm.registry()
            .views()
            .into_iter()
            .map(|view| {
                let calls: Vec<_> = view
                    .stats
                    .calls
                    .iter()
                    .map(|(method, stats)| (method.clone(), stats.calls, stats.errors))
                    .collect();
                (view.resource, calls, view.stats.last_error)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(counts(&pair.native), counts(&pair.wire));

    // RemovePod: a failure alike, then the pod forgotten alike.
    for knob in &pair.knobs {
        knob.state().remove_failures = 1;
    }
    let over_socket = format!("{:?}", pair.wire.remove_pod("pod-a").await);
    let in_process = format!("{:?}", pair.native.remove_pod("pod-a").await);
    assert_eq!(in_process, over_socket);
    assert!(
        in_process.contains("not removing pod-a yet"),
        "{in_process}"
    );
    pair.wire.remove_pod("pod-a").await.unwrap();
    pair.native.remove_pod("pod-a").await.unwrap();
    let (wire_poll, native_poll) = (polls(&pair.wire).await, polls(&pair.native).await);
    assert_eq!(native_poll, wire_poll);
    assert!(!native_poll.contains("pod-a"), "{native_poll}");
    assert_eq!(counts(&pair.native), counts(&pair.wire));
}
