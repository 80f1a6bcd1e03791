use std::collections::BTreeMap;

use super::*;

fn pod(parent: &str) -> PodSandbox {
    PodSandbox {
        id: "sandbox-1".to_string(),
        uid: "uid-1".to_string(),
        cgroup_parent: parent.to_string(),
        ..PodSandbox::default()
    }
}

fn container(
    name: &str,
    shares: Option<u64>,
    quota: Option<i64>,
    memory: Option<i64>,
) -> Container {
    Container {
        id: format!("ctr-{name}"),
        pod_sandbox_id: "sandbox-1".to_string(),
        name: name.to_string(),
        resources: Resources {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: quota.map(|_| 100_000),
            memory_limit: memory,
            ..Resources::default()
        },
        ..Container::default()
    }
}

#[test]
fn qos_from_cgroup_parent_for_both_drivers() {
    let cases = [
        ("/kubepods/burstable/pod1234", QosClass::Burstable),
        ("/kubepods/besteffort/pod1234", QosClass::BestEffort),
        ("/kubepods/pod1234", QosClass::Guaranteed),
        (
            "/custom-root/kubepods/burstable/pod1234",
            QosClass::Burstable,
        ),
        ("kubepods-burstable-pod12_34.slice", QosClass::Burstable),
        ("kubepods-besteffort-pod12_34.slice", QosClass::BestEffort),
        ("kubepods-pod12_34.slice", QosClass::Guaranteed),
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice",
            QosClass::Burstable,
        ),
        (
            "/kubepods.slice/kubepods-pod12_34.slice",
            QosClass::Guaranteed,
        ),
    ];
    for (parent, want) in cases {
        assert_eq!(qos_class(&pod(parent)), Ok(want), "parent {parent}");
    }
}

#[test]
fn qos_errors_name_the_pod_and_parent() {
    assert_eq!(
        qos_class(&pod("")),
        Err(KubeError::MissingCgroupParent {
            pod: "sandbox-1".to_string()
        })
    );
    let err = qos_class(&pod("/system.slice/docker")).unwrap_err();
    assert!(matches!(err, KubeError::NotKubernetes { .. }));
    assert!(err.to_string().contains("/system.slice/docker"));
}

#[test]
fn shares_inverse_is_exact_for_kubelet_values() {
    // kubelet: shares = max(2, milli * 1024 / 1000).
    for milli in 3..=20_000u64 {
        let shares = (milli * 1024 / 1000).max(2);
        if shares <= 2 {
            continue;
        }
        assert_eq!(milli_cpu_from_shares(shares), Some(milli), "milli {milli}");
    }
    assert_eq!(milli_cpu_from_shares(2), None);
    assert_eq!(milli_cpu_from_shares(0), None);
    assert_eq!(milli_cpu_from_shares(2048), Some(2000));
}

#[test]
fn quota_and_period_give_the_limit() {
    assert_eq!(
        milli_cpu_from_quota(Some(200_000), Some(100_000)),
        Some(2000)
    );
    assert_eq!(milli_cpu_from_quota(Some(50_000), None), Some(500));
    assert_eq!(milli_cpu_from_quota(Some(25_000), Some(50_000)), Some(500));
    assert_eq!(milli_cpu_from_quota(Some(-1), Some(100_000)), None);
    assert_eq!(milli_cpu_from_quota(Some(0), Some(100_000)), None);
    assert_eq!(milli_cpu_from_quota(None, Some(100_000)), None);
}

#[test]
fn guaranteed_container_gets_request_equal_limit_even_without_quota() {
    let p = pod("/kubepods/pod1");
    for quota in [Some(200_000), Some(-1), None] {
        let c = kube_container(&p, &container("app", Some(2048), quota, Some(1 << 30))).unwrap();
        assert_eq!(c.cpu_request, Some(Quantity::from_units(2)));
        assert_eq!(c.cpu_limit, Some(Quantity::from_units(2)));
        assert_eq!(c.memory_request, Some(Quantity::from_units(1 << 30)));
        assert_eq!(c.memory_limit, Some(Quantity::from_units(1 << 30)));
        assert_eq!(c.qos(), QosClass::Guaranteed);
    }
}

#[test]
fn guaranteed_container_without_memory_limit_is_an_error() {
    let err = kube_container(
        &pod("/kubepods/pod1"),
        &container("app", Some(2048), None, None),
    )
    .unwrap_err();
    assert_eq!(
        err,
        KubeError::IncompleteGuaranteed {
            pod: "sandbox-1".to_string(),
            container: "app".to_string(),
            what: "memory limit"
        }
    );
}

#[test]
fn burstable_containers_never_look_guaranteed() {
    let p = pod("/kubepods/burstable/pod1");
    let cases = [
        container("a", Some(2048), Some(200_000), Some(1 << 30)),
        container("b", Some(2048), Some(200_000), None),
        container("c", Some(512), None, None),
        container("d", Some(2), None, Some(1 << 20)),
    ];
    for c in &cases {
        let spec = kube_container(&p, c).unwrap();
        assert_ne!(spec.qos(), QosClass::Guaranteed, "{}", c.name);
        let kube = kube_pod(&p, &[c]).unwrap();
        assert_ne!(kube.qos(), QosClass::Guaranteed, "{}", c.name);
        assert_eq!(pinion_core::pod::guaranteed_cpus(&kube, &spec), 0);
    }
    let a = kube_container(&p, &cases[0]).unwrap();
    assert_eq!(a.cpu_request, Some(Quantity::from_units(2)));
    assert_eq!(a.cpu_limit, Some(Quantity::from_units(2)));
    let c = kube_container(&p, &cases[2]).unwrap();
    assert_eq!(c.cpu_request.map(|q| q.milli_value()), Some(500));
    assert_eq!(c.cpu_limit, None);
}

#[test]
fn best_effort_has_no_resources() {
    let c = kube_container(
        &pod("/kubepods/besteffort/pod1"),
        &container("x", Some(2), None, None),
    )
    .unwrap();
    assert_eq!(c.qos(), QosClass::BestEffort);
    assert_eq!(c.cpu_request, None);
}

#[test]
fn guaranteed_integer_pod_gets_exclusive_cpus() {
    let p = pod("/kubepods/pod1");
    let c = container("app", Some(4096), Some(400_000), Some(1 << 30));
    let kube = kube_pod(&p, &[&c]).unwrap();
    assert_eq!(kube.uid, "uid-1");
    assert_eq!(
        pinion_core::pod::guaranteed_cpus(&kube, &kube.containers[0]),
        4
    );
    let frac = container("app", Some(1536), Some(150_000), Some(1 << 30));
    let kube = kube_pod(&p, &[&frac]).unwrap();
    assert_eq!(
        pinion_core::pod::guaranteed_cpus(&kube, &kube.containers[0]),
        0
    );
}

#[test]
fn init_and_sidecar_containers_from_the_annotation() {
    let mut p = pod("/kubepods/pod1");
    p.annotations = BTreeMap::from([(
        INIT_CONTAINERS_ANNOTATION.to_string(),
        "setup, proxy=sidecar".to_string(),
    )]);
    let setup = container("setup", Some(1024), None, Some(1 << 20));
    let proxy = container("proxy", Some(1024), None, Some(1 << 20));
    let app = container("app", Some(2048), None, Some(1 << 20));
    assert_eq!(container_kind(&p, "setup"), Ok(ContainerKind::Init));
    assert_eq!(container_kind(&p, "proxy"), Ok(ContainerKind::Sidecar));
    assert_eq!(container_kind(&p, "app"), Ok(ContainerKind::App));
    let kube = kube_pod(&p, &[&app, &proxy, &setup]).unwrap();
    let inits: Vec<_> = kube
        .init_containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(inits, ["setup", "proxy"]);
    assert!(kube.init_containers[1].is_restartable());
    assert_eq!(kube.containers.len(), 1);
    assert_eq!(pinion_core::pod::pod_guaranteed_cpus(&kube), 3);
}

#[test]
fn malformed_init_annotation_is_a_clear_error() {
    for bad in ["", "a,,b", "a=daemon", "Upper", "a,a", "-x"] {
        let mut p = pod("/kubepods/pod1");
        p.annotations = BTreeMap::from([(INIT_CONTAINERS_ANNOTATION.to_string(), bad.to_string())]);
        let err = init_containers(&p).unwrap_err();
        assert!(matches!(err, KubeError::Annotation { .. }), "{bad}");
        assert!(
            err.to_string().contains(INIT_CONTAINERS_ANNOTATION),
            "{err}"
        );
    }
}

#[test]
fn uid_and_name_fall_back_to_kubelet_labels() {
    let mut p = pod("/kubepods/pod1");
    p.uid.clear();
    assert_eq!(
        pod_uid(&p),
        Err(KubeError::MissingUid {
            sandbox: "sandbox-1".to_string()
        })
    );
    p.labels
        .insert(POD_UID_LABEL.to_string(), "from-label".to_string());
    assert_eq!(pod_uid(&p).unwrap(), "from-label");
    let mut c = container("", None, None, None);
    assert!(matches!(
        container_name(&c),
        Err(KubeError::MissingName { .. })
    ));
    c.labels
        .insert(CONTAINER_NAME_LABEL.to_string(), "web".to_string());
    assert_eq!(container_name(&c).unwrap(), "web");
}

/// Found from outside (session 45): a pod UID or container name from the
/// runtime was taken whatever its length. One of a megabyte became a key
/// whose journal record was over the journal's limit, failing the batch of
/// every other pod admitted with it. Longer than any Kubernetes name, or
/// with a control character, it is refused now, naming the bad value.
#[test]
fn regression_an_overlong_or_control_character_uid_or_name_is_refused() {
    let mut p = pod("/kubepods/pod1");
    p.uid = "u".repeat(MAX_NAME_BYTES);
    assert_eq!(pod_uid(&p).unwrap().len(), MAX_NAME_BYTES);
    p.uid = "u".repeat(MAX_NAME_BYTES + 1);
    let err = pod_uid(&p).unwrap_err();
    assert!(matches!(err, KubeError::BadName { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("pod uid")
            && text.contains("254 bytes, more than 253")
            && text.contains("sandbox-1"),
        "{text}"
    );
    assert!(text.len() < 300, "the bad value is shown cut short: {text}");
    p.uid = "a\u{7}b".to_string();
    assert!(pod_uid(&p)
        .unwrap_err()
        .to_string()
        .contains("control character"));
    let mut c = container("app\n", None, None, None);
    let err = container_name(&c).unwrap_err();
    assert!(err.to_string().contains("control character"), "{err}");
    c.name = "n".repeat(1 << 20);
    let err = container_name(&c).unwrap_err();
    assert!(err.to_string().contains("1048576 bytes"), "{err}");
}

#[test]
fn container_of_another_sandbox_is_rejected() {
    let mut c = container("app", Some(2048), None, Some(1));
    c.pod_sandbox_id = "other".to_string();
    assert!(matches!(
        kube_pod(&pod("/kubepods/pod1"), &[&c]),
        Err(KubeError::WrongPod { .. })
    ));
}

#[test]
fn pod_level_resources_when_sent() {
    let mut p = pod("/kubepods/burstable/pod1");
    assert_eq!(pod_resources(&p), None);
    p.pod_resources = Some(Resources {
        cpu_shares: Some(3072),
        cpu_quota: Some(400_000),
        cpu_period: Some(100_000),
        memory_limit: Some(1 << 30),
        ..Resources::default()
    });
    let r = pod_resources(&p).unwrap();
    assert_eq!(r.cpu_request, Some(Quantity::from_units(3)));
    assert_eq!(r.cpu_limit, Some(Quantity::from_units(4)));
    assert_eq!(r.memory_limit, Some(Quantity::from_units(1 << 30)));
}

fn pod_level(parent: &str, flag: Option<&str>) -> PodSandbox {
    let mut p = pod(parent);
    if let Some(flag) = flag {
        p.annotations
            .insert(POD_LEVEL_RESOURCES_ANNOTATION.to_string(), flag.to_string());
    }
    p.pod_resources = Some(Resources {
        cpu_shares: Some(4096),
        cpu_quota: Some(400_000),
        cpu_period: Some(100_000),
        memory_limit: Some(1 << 30),
        ..Resources::default()
    });
    p
}

/// NRI sends the pod cgroup's resources for every pod; only the annotation
/// says the spec sets pod-level resources.
#[test]
fn pod_level_resources_need_the_annotation() {
    let p = pod_level("/kubepods/pod1", None);
    assert_eq!(kube_pod_resources(&p), Ok(None));
    assert_eq!(
        kube_pod_resources(&pod_level("/kubepods/pod1", Some("false"))),
        Ok(None)
    );
    let r = kube_pod_resources(&pod_level("/kubepods/pod1", Some("true")))
        .unwrap()
        .expect("declared");
    assert_eq!(r.cpu_request, Some(Quantity::from_units(4)));
    assert_eq!(r.cpu_limit, Some(Quantity::from_units(4)));
    assert_eq!(r.memory_request, Some(Quantity::from_units(1 << 30)));
    assert_eq!(r.memory_limit, Some(Quantity::from_units(1 << 30)));
    assert_eq!(r.qos(), QosClass::Guaranteed);

    let err = kube_pod_resources(&pod_level("/kubepods/pod1", Some("yes"))).unwrap_err();
    assert!(err.to_string().contains("\"yes\""), "{err}");
    let mut missing = pod_level("/kubepods/pod1", Some("true"));
    missing.pod_resources = None;
    let err = kube_pod_resources(&missing).unwrap_err();
    assert!(err.to_string().contains("no pod-level resources"), "{err}");
    let mut no_memory = pod_level("/kubepods/pod1", Some("true"));
    no_memory.pod_resources.as_mut().unwrap().memory_limit = None;
    assert_eq!(
        kube_pod_resources(&no_memory),
        Err(KubeError::IncompletePodLevel {
            pod: "sandbox-1".to_string(),
            what: "memory limit"
        })
    );
}

#[test]
fn burstable_pod_level_resources_keep_request_and_limit_apart() {
    let mut p = pod_level("/kubepods/burstable/pod1", Some("true"));
    p.pod_resources.as_mut().unwrap().cpu_shares = Some(2048);
    let r = kube_pod_resources(&p).unwrap().expect("declared");
    assert_eq!(r.cpu_request, Some(Quantity::from_units(2)));
    assert_eq!(r.cpu_limit, Some(Quantity::from_units(4)));
    assert_eq!(r.qos(), QosClass::Burstable);
    let p = pod_level("/kubepods/besteffort/pod1", Some("true"));
    assert_eq!(kube_pod_resources(&p), Ok(None));
}

/// In a Guaranteed pod with pod-level resources a container may set none of
/// its own resources (it shares the pod's CPUs); one whose request equals
/// its limit gets exclusive CPUs out of the pod's.
#[test]
fn pod_level_containers_may_leave_out_their_own_resources() {
    let p = pod_level("/kubepods/pod1", Some("true"));
    let shared = container("shared", None, None, None);
    let exclusive = container("exclusive", Some(2048), Some(200_000), Some(1 << 28));
    let spec = kube_pod(&p, &[&shared, &exclusive]).expect("no IncompleteGuaranteed");
    let res = kube_pod_resources(&p).unwrap();
    let by_name = |name: &str| spec.container(name).expect("container");
    assert_eq!(by_name("shared").cpu_request, None);
    assert_eq!(
        pod::guaranteed_cpus_in(&spec, res.as_ref(), true, by_name("exclusive")),
        2
    );
    assert_eq!(
        pod::guaranteed_cpus_in(&spec, res.as_ref(), true, by_name("shared")),
        0
    );
    assert_eq!(pod::pod_guaranteed_cpus_in(&spec, res.as_ref(), true), 4);
    // Without the annotation the same containers are an incomplete
    // Guaranteed pod, as before.
    let plain = pod_level("/kubepods/pod1", None);
    assert!(matches!(
        kube_container(&plain, &shared),
        Err(KubeError::IncompleteGuaranteed { .. })
    ));
}

/// kubelet's Burstable OOM score adjustment, written from its documented rule.
fn kubelet_oom_score_adj(request: u64, capacity: u64) -> i64 {
    let adj = 1000 - i64::try_from(1000 * u128::from(request) / u128::from(capacity)).unwrap();
    if adj < 3 {
        3
    } else if adj == 1000 {
        999
    } else {
        adj
    }
}

#[test]
fn memory_request_bounds_contain_the_request() {
    let capacity = 16u64 << 30;
    for request in [
        0,
        1 << 20,
        100 << 20,
        1 << 30,
        8 << 30,
        15 << 30,
        capacity,
        2 * capacity,
    ] {
        let adj = kubelet_oom_score_adj(request, capacity);
        let (low, high) = memory_request_bounds(adj, capacity).unwrap();
        assert!(
            low <= request && request < high,
            "request {request} adj {adj}: [{low}, {high})"
        );
        if (4..=998).contains(&adj) {
            assert!(
                high - low <= capacity / 1000 + 1,
                "bounds are capacity/1000 wide"
            );
        }
    }
    assert_eq!(memory_request_bounds(-997, capacity), None);
    assert_eq!(memory_request_bounds(1000, capacity), None);
    assert_eq!(memory_request_bounds(500, 0), None);
}

/// Found from outside (fiftieth session): an ephemeral container
/// (`kubectl debug`) of a Guaranteed pod sets no resources (the API allows
/// none; kubelet sends the minimum shares, quota 0, no memory limit). It is
/// left out of the pod's spec instead of failing it; a container that sets
/// some of its resources but not all is still an incomplete Guaranteed one.
#[test]
fn regression_an_ephemeral_container_is_left_out_of_a_guaranteed_pods_spec() {
    let p = pod("/kubepods/pod1");
    let app = container("app", Some(2048), Some(200_000), Some(1 << 30));
    let debugger = container("debugger", Some(2), Some(0), None);
    assert_eq!(is_ephemeral(&p, &debugger), Ok(true));
    assert_eq!(is_ephemeral(&p, &app), Ok(false));
    let spec = kube_pod(&p, &[&app, &debugger]).expect("the pod's spec");
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["app"]);
    let partial = container("partial", Some(2048), None, None);
    assert_eq!(is_ephemeral(&p, &partial), Ok(false));
    assert!(matches!(
        kube_pod(&p, &[&app, &partial]),
        Err(KubeError::IncompleteGuaranteed { .. })
    ));
    // In other pods every container is part of the spec, as before.
    for parent in ["/kubepods/burstable/pod1", "/kubepods/besteffort/pod1"] {
        assert_eq!(is_ephemeral(&pod(parent), &debugger), Ok(false), "{parent}");
    }
    assert_eq!(
        is_ephemeral(&pod_level("/kubepods/pod1", Some("true")), &debugger),
        Ok(false)
    );
}
