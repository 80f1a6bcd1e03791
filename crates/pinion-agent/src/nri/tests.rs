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
    // A Guaranteed container sets its CPU and memory; one that sets none
    // in a Guaranteed pod is an ephemeral one (`kubectl debug`).
    let mut app = container("c1", "p1", "app", ContainerState::Running);
    app.resources = Resources {
        cpu_shares: Some(2048),
        memory_limit: Some(1 << 30),
        ..Resources::default()
    };
    let containers = vec![
        app,
        container("c2", "p1", "done", ContainerState::Stopped),
        container("c6", "p1", "debugger", ContainerState::Running),
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
        // An ephemeral container: kubelet never admits it, shared pool.
        ("c6", key("p1", "debugger")),
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

/// Regression: a resource setting a plugin gave a runtime container and no
/// longer gives (its answer dropped) stayed, because an update without it
/// leaves the runtime's value. The update names it again with the
/// container's own value: kubelet's at creation, or from its last
/// `UpdateContainerResources`; an unset setting's when it had none.
#[test]
fn regression_settings_taken_back_get_the_containers_own_values() {
    use pinion_core::placement::ResourceSettings;
    use pinion_core::Placement;

    use super::state::{Entry, Tracked};
    use crate::controller::RuntimeUpdate;

    let mut created = container("c1", "s1", "app", ContainerState::Created);
    created.resources = Resources {
        cpu_quota: Some(200_000),
        cpu_period: Some(100_000),
        cpu_shares: Some(2048),
        memory_limit: Some(1 << 30),
        unified: [("memory.high".to_string(), "900000000".to_string())].into(),
        ..Resources::default()
    };
    let mut tracked = Tracked::default();
    tracked.containers.insert(
        "c1".into(),
        Entry {
            container: created,
            key: ("uid".into(), "app".into()),
        },
    );
    let plugin = ResourceSettings {
        cpu_quota: Some(50_000),
        cpu_shares: Some(512),
        memory_swap_limit: Some(2 << 30),
        unified: [
            ("memory.high".to_string(), "1G".to_string()),
            ("pids.max".to_string(), "64".to_string()),
        ]
        .into(),
        ..ResourceSettings::default()
    };
    let update = |id: &str| RuntimeUpdate {
        container_id: id.into(),
        placement: Placement::shared(CpuSet::from_iter([0, 1])),
        taken_back: plugin.clone(),
        only_adds: false,
        pass: 0,
    };
    let sent = super::to_nri(vec![update("c1"), update("unknown")], &tracked);
    let own = &sent[0].placement.resources;
    assert_eq!(own.cpu_quota, Some(200_000));
    assert_eq!(own.cpu_shares, Some(2048));
    assert_eq!(
        own.memory_swap_limit,
        Some(-1),
        "kubelet set none: no limit"
    );
    assert_eq!(own.cpu_period, None, "not taken back: not named");
    assert_eq!(own.memory_limit, None, "not taken back: not named");
    assert_eq!(
        own.unified,
        BTreeMap::from([
            ("memory.high".to_string(), "900000000".to_string()),
            ("pids.max".to_string(), "max".to_string()),
        ])
    );
    let unknown = &sent[1].placement.resources;
    assert_eq!(unknown.cpu_quota, Some(-1));
    assert_eq!(unknown.cpu_shares, Some(1024));

    // kubelet's resize is the container's own value from then on.
    let mut resized = tracked.containers["c1"].container.resources.clone();
    resized.follow(&Resources {
        cpu_quota: Some(300_000),
        ..Resources::default()
    });
    assert_eq!(resized.cpu_quota, Some(300_000));
    assert_eq!(resized.cpu_shares, Some(2048), "not in the update: kept");
}
