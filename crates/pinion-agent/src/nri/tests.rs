use std::collections::BTreeMap;

use pinion_core::policy::PolicyError;
use pinion_core::CpuSet;
use pinion_nri::{Container, ContainerState, ErrorKind, PodSandbox, Resources};

use super::check_exclusive_resize;
use super::state::kubelet_admission_text;
use super::sync::track_all;

fn pod(id: &str, uid: &str, parent: &str) -> PodSandbox {
    PodSandbox {
        id: id.into(),
        uid: uid.into(),
        cgroup_parent: parent.into(),
        ..PodSandbox::default()
    }
}

fn container(id: &str, pod: &str, name: &str, state: ContainerState) -> Container {
    Container {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        name: name.into(),
        state,
        ..Container::default()
    }
}

#[test]
fn synchronize_keys_kubernetes_containers_and_shares_the_rest() {
    let pods = vec![
        pod("p1", "uid-1", "/kubepods/poduid-1"),
        pod("p2", "uid-2", "/system.slice/tool"),
        pod("p3", "", "/kubepods/burstable/pod"),
    ];
    let containers = vec![
        container("c1", "p1", "app", ContainerState::Running),
        container("c2", "p1", "done", ContainerState::Stopped),
        container("c3", "p2", "tool", ContainerState::Running),
        container("c4", "nope", "orphan", ContainerState::Running),
        container("c5", "p3", "no-uid", ContainerState::Created),
    ];
    let tracked = track_all(pods, containers);
    let keys: BTreeMap<&str, (String, String)> = tracked
        .containers
        .iter()
        .map(|(id, e)| (id.as_str(), e.key.clone()))
        .collect();
    let key = |pod: &str, container: &str| (pod.to_string(), container.to_string());
    let expected: BTreeMap<&str, (String, String)> = [
        ("c1", key("uid-1", "app")),
        // Outside Kubernetes: keyed by sandbox id, following the shared pool.
        ("c3", key("p2", "tool")),
        ("c4", key("nope", "orphan")),
        ("c5", key("p3", "no-uid")),
    ]
    .into();
    assert_eq!(keys, expected, "stopped c2 is not tracked");
    assert_eq!(tracked.pods.len(), 3);
}

#[test]
fn kubelet_texts_depend_on_the_reason() {
    let unexpected = PolicyError::UnknownContainer {
        pod: "p".into(),
        container: "c".into(),
    };
    assert_eq!(
        kubelet_admission_text(&unexpected),
        format!(
            "UnexpectedAdmissionError: Allocate failed due to {unexpected}, which is unexpected"
        )
    );
    let smt = PolicyError::SmtNotMultiple {
        requested: 3,
        cpus_per_core: 2,
    };
    assert_eq!(
        kubelet_admission_text(&smt),
        "SMTAlignmentError: SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    );
}

#[test]
fn an_exclusive_container_may_change_anything_but_its_cpu_count() {
    let key = ("uid".to_string(), "app".to_string());
    let cpus = CpuSet::parse_list("2,6").expect("cpus");
    let with_shares = |shares| Resources {
        cpu_shares: shares,
        memory_limit: Some(1 << 31),
        ..Resources::default()
    };
    for same in [None, Some(2048)] {
        check_exclusive_resize(&key, &cpus, &with_shares(same)).expect("same request");
    }
    for other in [1024, 2560, 4096] {
        let err =
            check_exclusive_resize(&key, &cpus, &with_shares(Some(other))).expect_err("resize");
        assert_eq!(err.kind, ErrorKind::Unsupported);
        assert!(
            err.message
                .contains("uid container app holds 2 exclusive cpus (2,6)"),
            "{}",
            err.message
        );
    }
}
