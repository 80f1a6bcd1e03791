use super::*;
use crate::pod::Container;
use crate::qos::{POD_ROLE_LABEL, POD_TYPE_KEY, QOS_LEVEL_KEY};

fn pod(level: Option<&str>, cpu_request: &str, cpu_limit: Option<&str>) -> Pod {
    let q = quantity;
    let guaranteed = cpu_limit.is_some();
    Pod {
        uid: "uid".into(),
        annotations: level
            .map(|l| (QOS_LEVEL_KEY.to_string(), l.to_string()))
            .into_iter()
            .collect(),
        containers: vec![Container {
            name: "main".into(),
            cpu_request: Some(q(cpu_request)),
            cpu_limit: cpu_limit.map(q),
            memory_request: guaranteed.then(|| q("1Gi")),
            memory_limit: guaranteed.then(|| q("1Gi")),
            ..Container::default()
        }],
        ..Pod::default()
    }
}

/// Regression (issue 27, item 6): with the `cpu` plugin dead or hung,
/// `pinion run --cpus 1` (no QoS level, Guaranteed, one whole CPU) was
/// tolerated and ran in the shared pool without a word.
#[test]
fn regression_an_exclusive_request_is_never_tolerated() {
    let cases = [
        ("no level, shared 500m", pod(None, "500m", None), true),
        ("no level, burstable 2", pod(None, "2", None), true),
        (
            "no level, guaranteed 1500m",
            pod(None, "1500m", Some("1500m")),
            true,
        ),
        (
            "shared_cores, burstable",
            pod(Some("shared_cores"), "1", None),
            true,
        ),
        (
            "no level, guaranteed 1 (--cpus 1)",
            pod(None, "1", Some("1")),
            false,
        ),
        (
            "shared_cores, guaranteed 2",
            pod(Some("shared_cores"), "2", Some("2")),
            false,
        ),
        (
            "dedicated_cores",
            pod(Some("dedicated_cores"), "500m", None),
            false,
        ),
        (
            "reclaimed_cores",
            pod(Some("reclaimed_cores"), "1", None),
            false,
        ),
    ];
    for (name, pod, tolerated) in cases {
        assert_eq!(
            allocation_failure_is_tolerated(&pod, "main"),
            tolerated,
            "{name}"
        );
    }
}

#[test]
fn the_proposals_roles_count_as_the_levels_they_map_to() {
    let with_role = |role: &str| {
        let mut pod = pod(None, "1", None);
        pod.annotations.insert(
            qos::vocabulary::POD_ROLE_ANNOTATION.to_string(),
            role.to_string(),
        );
        pod
    };
    let cases = [
        ("online-micro_service", true),
        ("ETL", false),
        ("storage-service", false),
        ("numa-enhancement", false),
        ("a role the table does not know", true),
    ];
    for (role, tolerated) in cases {
        assert_eq!(
            allocation_failure_is_tolerated(&with_role(role), "main"),
            tolerated,
            "{role}"
        );
    }
}

fn scalar(quantity: f64) -> PluginAllocation {
    PluginAllocation {
        is_scalar_resource: true,
        allocated_quantity: quantity,
        ..PluginAllocation::default()
    }
}

/// Issue 28 item 2: the requested quantity is compared with the
/// allocated one at a re-admission.
#[test]
fn a_scalar_allocation_covers_requests_up_to_its_rounded_quantity() {
    assert!(allocation_covers(&scalar(2.0), 2.0));
    assert!(
        allocation_covers(&scalar(2.0), 1.0),
        "a smaller request fits"
    );
    assert!(allocation_covers(&scalar(1.5), 2.0), "1.5 rounds up to 2");
    assert!(allocation_covers(&scalar(2.0), 1.5), "1.5 asks for 2");
    assert!(
        !allocation_covers(&scalar(2.0), 3.0),
        "a grown request asks again"
    );
    assert!(!allocation_covers(&scalar(2.0), 2.5), "2.5 asks for 3");
    assert!(!allocation_covers(&scalar(2.0), f64::NAN));
    let not_scalar = PluginAllocation {
        allocated_quantity: 4.0,
        ..PluginAllocation::default()
    };
    assert!(
        !allocation_covers(&not_scalar, 1.0),
        "only scalar allocations are compared"
    );
}

#[test]
fn every_requested_resource_must_be_covered() {
    let stored: PluginAllocations = [
        ("cpu".to_string(), scalar(2.0)),
        ("memory".to_string(), scalar(1024.0)),
    ]
    .into();
    assert!(allocations_cover(
        &stored,
        [("cpu", 2.0), ("memory", 1024.0)]
    ));
    assert!(allocations_cover(&stored, [("cpu", 2.0)]));
    assert!(!allocations_cover(
        &stored,
        [("cpu", 2.0), ("memory", 2048.0)]
    ));
    assert!(
        !allocations_cover(&stored, [("cpu", 2.0), ("example.com/widget", 1.0)]),
        "a resource with no stored allocation is asked for"
    );
    assert!(
        !allocations_cover(&stored, []),
        "nothing asked, nothing covered"
    );
}

fn quantity(text: &str) -> Quantity {
    Quantity::parse(text).expect("quantity")
}

/// A pod with an init container, a main container `app` asking for CPUs,
/// memory, a NIC and reclaimed milli-CPUs, and a sidecar `log`.
fn web() -> Pod {
    let app = Container {
        name: "app".into(),
        cpu_request: Some(quantity("2")),
        cpu_limit: Some(quantity("3")),
        memory_request: Some(quantity("1Gi")),
        extended_requests: [
            ("example.com/nic".to_string(), quantity("1")),
            (
                "resource.katalyst.kubewharf.io/reclaimed_millicpu".to_string(),
                quantity("2k"),
            ),
        ]
        .into(),
        ..Container::default()
    };
    Pod {
        uid: "uid-1".into(),
        name: "web".into(),
        namespace: "prod".into(),
        labels: [(POD_ROLE_LABEL.to_string(), "frontend".to_string())].into(),
        annotations: [(POD_TYPE_KEY.to_string(), "online".to_string())].into(),
        init_containers: vec![Container {
            name: "setup".into(),
            ..Container::default()
        }],
        containers: vec![
            app,
            Container {
                name: "log".into(),
                ..Container::default()
            },
        ],
    }
}

#[test]
fn requests_are_mapped_and_filtered_by_the_plugins_that_exist() {
    let map = BTreeMap::from([(
        "resource.katalyst.kubewharf.io/reclaimed_millicpu".to_string(),
        "reclaimed_cpu".to_string(),
    )]);
    let served = |name: &str| name != "memory";
    let requests = plugin_requests(&web(), "app", &map, served).expect("requests");
    let names: Vec<(&str, &str, f64)> = requests
        .iter()
        .map(|r| (r.resource.as_str(), r.requested.as_str(), r.quantity))
        .collect();
    assert_eq!(
        names,
        [
            ("cpu", "cpu", 2.0),
            ("example.com/nic", "example.com/nic", 1.0),
            (
                "reclaimed_cpu",
                "resource.katalyst.kubewharf.io/reclaimed_millicpu",
                2000.0
            ),
        ]
    );
    assert!(requests
        .iter()
        .all(|r| r.identity.pod_role == "frontend" && r.identity.pod_type == "online"));
    let both = BTreeMap::from([("example.com/nic".to_string(), "cpu".to_string())]);
    let err = plugin_requests(&web(), "app", &both, |_| true).expect_err("both");
    assert_eq!(
        err,
        RequestError::BothMapped {
            requested: "example.com/nic".into(),
            mapped: "cpu".into()
        }
    );
    let err = plugin_requests(&web(), "nope", &map, |_| true).expect_err("no such container");
    assert_eq!(
        err.to_string(),
        "pod uid-1 has no container \"nope\"",
        "the message names the pod and the container"
    );
}

#[test]
fn containers_are_typed_and_indexed_by_their_kind() {
    let pod = web();
    let cases = [
        ("setup", ContainerType::Init, 0),
        ("app", ContainerType::Main, 0),
        ("log", ContainerType::Sidecar, 1),
    ];
    for (name, kind, index) in cases {
        assert_eq!(container_type(&pod, name), (kind, index), "{name}");
    }
    let mut annotated = web();
    annotated
        .annotations
        .insert(MAIN_CONTAINER_KEY.to_string(), "log".to_string());
    assert_eq!(
        container_type(&annotated, "log"),
        (ContainerType::Main, 1),
        "the annotation names the main container"
    );
    assert_eq!(
        container_type(&annotated, "app"),
        (ContainerType::Sidecar, 0)
    );
}

#[test]
fn the_proposals_annotations_become_pod_role_and_pod_type() {
    let mut pod = web();
    pod.labels.clear();
    pod.annotations = [
        (
            vocabulary::POD_ROLE_ANNOTATION.to_string(),
            "storage-service".to_string(),
        ),
        (
            vocabulary::RESOURCE_TYPE_ANNOTATION.to_string(),
            "numa-exclusive && cpu-exclusive".to_string(),
        ),
    ]
    .into();
    let requests =
        plugin_requests(&pod, "app", &BTreeMap::new(), |n| n == "cpu").expect("requests");
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].identity.pod_role, "storage-service");
    assert_eq!(
        requests[0].identity.pod_type,
        "numa-exclusive && cpu-exclusive"
    );
}

#[test]
fn contradictory_vocabularies_refuse_the_pod_naming_both() {
    let mut pod = web();
    pod.annotations.insert(
        vocabulary::POD_ROLE_ANNOTATION.to_string(),
        "reranker".to_string(),
    );
    let err = plugin_requests(&pod, "app", &BTreeMap::new(), |_| true)
        .expect_err("label frontend, annotation reranker");
    assert_eq!(
        err.to_string(),
        "pod prod/web: contradictory pod metadata: kubernetes.io/pod-role: \"reranker\" \
         contradicts katalyst.kubewharf.io/pod_role: \"frontend\""
    );
    assert!(matches!(
        err,
        RequestError::Vocabulary {
            source: VocabularyError::Contradiction { .. },
            ..
        }
    ));
}

#[test]
fn hints_round_trip_and_any_node_is_no_ids() {
    let hint = topology_hint(&[0, 2], true).expect("representable");
    assert_eq!(hint.affinity.map(|m| m.ids()), Some(vec![0, 2]));
    assert!(hint.preferred);
    assert_eq!(hint_nodes(&hint), [0, 2]);
    let any = topology_hint(&[], false).expect("any");
    assert_eq!(any.affinity, None);
    assert!(!any.preferred);
    assert_eq!(hint_nodes(&any), Vec::<u64>::new());
    assert_eq!(topology_hint(&[64], true), None, "node 64 has no mask bit");
}

#[test]
fn a_zero_request_asks_for_no_hints() {
    let asked = |quantity: f64| PluginRequest {
        resource: "cpu".into(),
        requested: "cpu".into(),
        quantity,
        limit: None,
        identity: Identity::default(),
    };
    assert!(asks_for_hints(&asked(0.5)));
    assert!(asks_for_hints(&asked(2.0)));
    assert!(!asks_for_hints(&asked(0.0)));
}

/// Issue 28 item 1: the proposal's request carries "request/limit
/// quantities"; the limit of each plugin resource comes from the container
/// (an extended resource's limit is its request), none when the container
/// sets none.
#[test]
fn each_plugin_request_carries_the_containers_limit() {
    let requests = plugin_requests(&web(), "app", &BTreeMap::new(), |_| true).expect("requests");
    let limits: BTreeMap<&str, Option<f64>> = requests
        .iter()
        .map(|r| (r.resource.as_str(), r.limit))
        .collect();
    assert_eq!(limits["cpu"], Some(3.0));
    assert_eq!(limits["memory"], None, "no memory limit set");
    assert_eq!(limits["example.com/nic"], Some(1.0));
}
