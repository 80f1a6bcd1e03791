use super::*;

fn pod(qos: Qos) -> PodSpec {
    PodSpec {
        name: "p".to_string(),
        uid: "11111111-2222-3333-4444-555555555555".to_string(),
        namespace: "default".to_string(),
        qos,
        annotations: vec![("a".to_string(), "b".to_string())],
    }
}

fn resources(request: Option<&str>, limit: Option<&str>, memory: Option<&str>) -> Resources {
    Resources::parse(request, limit, memory).expect("valid quantities")
}

#[test]
fn cgroup_parents_follow_kubelets_cgroupfs_layout() {
    let uid = "11111111-2222-3333-4444-555555555555";
    assert_eq!(
        pod(Qos::Guaranteed).cgroup_parent(),
        format!("/kubepods/pod{uid}")
    );
    assert_eq!(
        pod(Qos::Burstable).cgroup_parent(),
        format!("/kubepods/burstable/pod{uid}")
    );
    assert_eq!(
        pod(Qos::BestEffort).cgroup_parent(),
        format!("/kubepods/besteffort/pod{uid}")
    );
}

#[test]
fn guaranteed_two_cpus_get_kubelets_shares_quota_and_oom_score() {
    let linux = resources(Some("2"), None, Some("64Mi"))
        .to_linux(Qos::Guaranteed)
        .expect("complete guaranteed spec");
    assert_eq!(linux.cpu_shares, 2048);
    assert_eq!(linux.cpu_quota, 200_000);
    assert_eq!(linux.cpu_period, 100_000);
    assert_eq!(linux.memory_limit_in_bytes, 64 << 20);
    assert_eq!(linux.oom_score_adj, -997);
}

#[test]
fn burstable_fraction_without_limit_has_no_quota() {
    let linux = resources(Some("250m"), None, None)
        .to_linux(Qos::Burstable)
        .expect("burstable spec");
    assert_eq!(linux.cpu_shares, 256);
    assert_eq!(linux.cpu_quota, 0);
    assert_eq!(linux.memory_limit_in_bytes, 0);
    assert_eq!(linux.oom_score_adj, 999);
}

#[test]
fn tiny_values_are_raised_to_kubelets_minimums() {
    assert_eq!(shares_from_milli(0), 2);
    assert_eq!(shares_from_milli(1), 2);
    assert_eq!(quota_from_milli(5), 1000);
    assert_eq!(quota_from_milli(0), 0);
    let linux = resources(None, None, None)
        .to_linux(Qos::BestEffort)
        .expect("besteffort spec");
    assert_eq!(linux.cpu_shares, 2);
    assert_eq!(linux.oom_score_adj, 1000);
}

#[test]
fn guaranteed_without_memory_limit_is_refused() {
    let err = resources(Some("1"), None, None)
        .to_linux(Qos::Guaranteed)
        .expect_err("incomplete");
    assert!(matches!(err, SpecError::IncompleteGuaranteed), "{err}");
}

#[test]
fn besteffort_with_resources_is_refused() {
    let err = resources(Some("1"), None, None)
        .to_linux(Qos::BestEffort)
        .expect_err("besteffort with cpu");
    assert!(
        matches!(err, SpecError::BestEffortWithResources("cpu")),
        "{err}"
    );
}

#[test]
fn bad_values_are_named() {
    let err = Resources::parse(Some("two"), None, None).expect_err("bad cpu");
    assert!(
        matches!(
            err,
            SpecError::Quantity {
                what: "cpu request",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("\"two\""), "{err}");
    let err = "gold".parse::<Qos>().expect_err("bad qos");
    assert!(err.to_string().contains("\"gold\""), "{err}");
    let err = parse_annotation("=x").expect_err("empty key");
    assert!(matches!(err, SpecError::Annotation(text) if text == "=x"));
}

#[test]
fn sandbox_and_container_carry_identity_host_network_and_resources() {
    let pod = pod(Qos::Guaranteed);
    let sandbox = pod.sandbox_config();
    let linux = sandbox.linux.as_ref().expect("linux config");
    assert_eq!(linux.cgroup_parent, pod.cgroup_parent());
    let namespaces = linux
        .security_context
        .as_ref()
        .and_then(|s| s.namespace_options.as_ref())
        .expect("namespace options");
    assert_eq!(namespaces.network(), proto::NamespaceMode::Node);
    assert_eq!(
        sandbox.metadata.as_ref().map(|m| m.uid.as_str()),
        Some(pod.uid.as_str())
    );
    assert_eq!(sandbox.annotations.get("a").map(String::as_str), Some("b"));

    let container = ContainerSpec {
        name: "app".to_string(),
        image: "pinion.test/busybox:1".to_string(),
        command: vec!["sleep".to_string(), "1000".to_string()],
        resources: resources(Some("1"), Some("1"), Some("32Mi")),
        annotations: Vec::new(),
    };
    let config = container.config(&pod).expect("valid container");
    assert_eq!(
        config.metadata.as_ref().map(|m| m.name.as_str()),
        Some("app")
    );
    assert_eq!(
        config
            .labels
            .get("io.kubernetes.container.name")
            .map(String::as_str),
        Some("app")
    );
    let cpu = config
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .expect("resources");
    assert_eq!((cpu.cpu_shares, cpu.cpu_quota), (1024, 100_000));
}
