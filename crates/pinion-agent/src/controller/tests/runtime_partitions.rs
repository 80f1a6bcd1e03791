//! Owns the tests of runtime containers' cpuset partitions.
//!
//! Issue 31 item 1 for runtime (NRI) containers: an exclusive container's
//! cgroup (NRI's `linux.cgroups_path`) becomes a cpuset partition once the
//! runtime created its task, and is taken apart — before its CPUs go to the
//! shared pool — when it stops, is released or resized; the fake host
//! models the kernel's rules for `cpuset.cpus.exclusive`.

use pinion_core::partition::PartitionMode;
use pinion_core::policy::Features;
use pinion_core::Quantity;
use pinion_host::cgroup::ContainerCgroup;

use super::*;

const LEAF: &str = "kubepods/pod-g/cg";

fn cgroup(text: &str) -> ContainerCgroup {
    ContainerCgroup::resolve(text).expect("path")
}

/// Guaranteed runtime container `id` of pod `uid` asking for `cpus`, in
/// `path` (`None`: the runtime sent no cgroups path).
fn container(uid: &str, cpus: Option<&str>, id: &str, path: Option<&str>) -> AdmitRequest {
    let mut request = runtime_request(uid, cpus, id);
    request.frontend = Frontend::runtime_in(id, path.map(cgroup));
    request
}

fn started_node(
    dir: &Path,
    host: &FakeCgroups,
    features: Features,
) -> (
    Controller,
    tokio::sync::mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>,
) {
    node(host)
        .with_partition(PartitionMode::Isolated)
        .with_features(features)
        .start_with_runtime(dir)
        .expect("start")
}

fn writes(host: &FakeCgroups) -> Vec<String> {
    host.tree()
        .partitions
        .writes
        .iter()
        .map(|(dir, file, value)| format!("{dir}/{file}={}", value.trim()))
        .collect()
}

fn partition_of(controller: &Controller, pod: &str) -> Option<String> {
    controller
        .subscribe_snapshots()
        .borrow()
        .workload(pod, RUN_CONTAINER)
        .expect("workload")
        .partition
        .clone()
}

fn snapshot(controller: &Controller) -> Arc<Snapshot> {
    controller.subscribe_snapshots().borrow().clone()
}

#[test]
fn a_runtime_containers_partition_is_made_once_its_task_exists_along_its_cgroup_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = started_node(dir.path(), &host, Features::default());
    let g = admit(
        &mut controller,
        &container("pod-g", Some("2"), "cg", Some("/kubepods/pod-g/cg")),
    )
    .expect("admitted");
    // Created, not started: its cgroup may not exist yet.
    assert!(writes(&host).is_empty(), "{:?}", writes(&host));
    assert_eq!(partition_of(&controller, "pod-g"), None);
    assert!(!controller.container_started("unknown-id"));
    assert!(controller.container_started("cg"));
    let cpus = g.placement.cpus.to_string();
    assert_eq!(
        writes(&host),
        vec![
            format!("kubepods/cpuset.cpus.exclusive={cpus}"),
            format!("kubepods/pod-g/cpuset.cpus.exclusive={cpus}"),
            format!("{LEAF}/cpuset.cpus={cpus}"),
            format!("{LEAF}/cpuset.cpus.exclusive={cpus}"),
            format!("{LEAF}/cpuset.cpus.partition=isolated"),
        ]
    );
    assert_eq!(
        partition_of(&controller, "pod-g").as_deref(),
        Some("isolated")
    );
    let snap = snapshot(&controller);
    assert_eq!(snap.isolated_cpus, Some(g.placement.cpus.clone()));
    assert_eq!(snap.metrics.counters.partitions_made_total, 1);
    // A second start event (a retry) makes nothing twice.
    controller.container_started("cg");
    assert_eq!(writes(&host).len(), 5);
    // A shared container is never a partition.
    admit(
        &mut controller,
        &container(
            "pod-b",
            Some("500m"),
            "cb",
            Some("/kubepods/burstable/pod-b/cb"),
        ),
    )
    .expect("shared");
    controller.container_started("cb");
    assert_eq!(partition_of(&controller, "pod-b"), None);
    assert_eq!(writes(&host).len(), 5);
}

#[test]
fn the_systemd_drivers_slice_path_is_expanded_for_the_ancestors_claims() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = started_node(dir.path(), &host, Features::default());
    let path = "kubepods-pod9.slice:cri-containerd:c9";
    let g = admit(
        &mut controller,
        &container("pod-9", Some("1"), "c9", Some(path)),
    )
    .expect("g");
    controller.container_started("c9");
    let cpus = g.placement.cpus.to_string();
    let leaf = "kubepods.slice/kubepods-pod9.slice/cri-containerd-c9.scope";
    assert_eq!(
        writes(&host),
        vec![
            format!("kubepods.slice/cpuset.cpus.exclusive={cpus}"),
            format!("kubepods.slice/kubepods-pod9.slice/cpuset.cpus.exclusive={cpus}"),
            format!("{leaf}/cpuset.cpus={cpus}"),
            format!("{leaf}/cpuset.cpus.exclusive={cpus}"),
            format!("{leaf}/cpuset.cpus.partition=isolated"),
        ]
    );
    assert_eq!(host.tree().partitions.partition(leaf), "isolated");
}

/// The runtime removes a stopped container's cgroup before (or while) its
/// stop is relayed; the take-down must still give the ancestors' claims
/// back, and do it before the shared pool grows.
#[test]
fn regression_release_after_the_runtime_removed_the_cgroup_empties_the_claims_before_the_pool_grows(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(cgroup("/system.slice"), Some(set("0-7")));
    let mut parts = node(&host)
        .with_partition(PartitionMode::Isolated)
        .parts_on(dir.path(), Box::new(host.clone()));
    parts.isolation = Isolation {
        housekeeping: vec![cgroup("/system.slice")],
        ..Isolation::default()
    };
    let (tx, _updates) = tokio::sync::mpsc::unbounded_channel();
    parts.runtime_updates = Some(tx);
    let mut controller = Controller::start(parts).expect("start");
    let g = admit(
        &mut controller,
        &container("pod-g", Some("2"), "cg", Some("/kubepods/pod-g/cg")),
    )
    .expect("g");
    controller.container_started("cg");
    assert_eq!(host.tree().partitions.partition(LEAF), "isolated");
    host.tree().partitions.remove_dir(LEAF);
    host.tree().partitions.writes.clear();
    host.tree().log.clear();
    controller.release("pod-g", None).expect("released");
    assert_eq!(
        writes(&host),
        vec![
            "kubepods/pod-g/cpuset.cpus.exclusive=".to_string(),
            "kubepods/cpuset.cpus.exclusive=".to_string(),
        ]
    );
    let log = host.tree().log.clone();
    let cpus = g.placement.cpus.to_string();
    let taken_apart = log
        .iter()
        .position(|l| *l == format!("unpartition container cgroup {LEAF} {cpus}"))
        .unwrap_or_else(|| panic!("not taken apart: {log:?}"));
    let grown = log
        .iter()
        .position(|l| l.starts_with("housekeeping /system.slice"))
        .unwrap_or_else(|| panic!("the shared pool did not grow: {log:?}"));
    assert!(taken_apart < grown, "{log:?}");
    assert_eq!(snapshot(&controller).isolated_cpus, Some(CpuSet::new()));
}

#[test]
fn a_stopped_container_held_for_its_restart_loses_its_partition_and_its_next_run_gets_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = started_node(dir.path(), &host, Features::default());
    let g = admit(
        &mut controller,
        &container("pod-g", Some("2"), "cg", Some("/kubepods/pod-g/cg")),
    )
    .expect("g");
    controller.container_started("cg");
    host.tree().partitions.writes.clear();
    let key = ("pod-g".to_string(), RUN_CONTAINER.to_string());
    assert!(controller.park(&key, None));
    let cpus = g.placement.cpus.to_string();
    assert_eq!(
        writes(&host),
        vec![
            format!("{LEAF}/cpuset.cpus.partition=member"),
            format!("{LEAF}/cpuset.cpus.exclusive="),
            "kubepods/pod-g/cpuset.cpus.exclusive=".to_string(),
            "kubepods/cpuset.cpus.exclusive=".to_string(),
        ],
        "{cpus}"
    );
    // Held: its CPUs stay out of the shared pool.
    assert_eq!(
        controller
            .engine
            .shared_pool()
            .intersection_len(&g.placement.cpus),
        0
    );
    assert_eq!(partition_of(&controller, "pod-g"), None);
    // The restarted container (a new id and cgroup) gets the same CPUs
    // and, once started, its own partition.
    let again = container("pod-g", Some("2"), "cg2", Some("/kubepods/pod-g/cg2"));
    let readmitted = controller
        .readmit_held(&again)
        .expect("held")
        .expect("readmitted");
    assert_eq!(readmitted.placement.cpus, g.placement.cpus);
    controller.container_started("cg2");
    assert_eq!(
        host.tree().partitions.partition("kubepods/pod-g/cg2"),
        "isolated"
    );
    assert_eq!(snapshot(&controller).isolated_cpus, Some(g.placement.cpus));
}

#[test]
fn a_resized_runtime_container_is_taken_apart_before_and_made_again_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let features = Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    };
    let (mut controller, _updates) = started_node(dir.path(), &host, features);
    let g = admit(
        &mut controller,
        &container("pod-g", Some("2"), "cg", Some("/kubepods/pod-g/cg")),
    )
    .expect("g");
    controller.container_started("cg");
    host.tree().partitions.writes.clear();
    let key = ("pod-g".to_string(), RUN_CONTAINER.to_string());
    let grown = controller
        .resize(&key, &Quantity::parse("4").expect("quantity"))
        .expect("resized");
    let new = grown.placement.cpus.to_string();
    assert_eq!(
        writes(&host),
        vec![
            format!("{LEAF}/cpuset.cpus.partition=member"),
            format!("{LEAF}/cpuset.cpus.exclusive="),
            "kubepods/pod-g/cpuset.cpus.exclusive=".to_string(),
            "kubepods/cpuset.cpus.exclusive=".to_string(),
            format!("kubepods/cpuset.cpus.exclusive={new}"),
            format!("kubepods/pod-g/cpuset.cpus.exclusive={new}"),
            format!("{LEAF}/cpuset.cpus={new}"),
            format!("{LEAF}/cpuset.cpus.exclusive={new}"),
            format!("{LEAF}/cpuset.cpus.partition=isolated"),
        ],
        "from {} to {new}",
        g.placement.cpus
    );
    assert_eq!(
        snapshot(&controller).isolated_cpus,
        Some(grown.placement.cpus)
    );
}

#[test]
fn a_container_without_a_cgroup_path_or_on_an_old_kernel_falls_back_and_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = started_node(dir.path(), &host, Features::default());
    let g = admit(&mut controller, &container("pod-g", Some("2"), "cg", None)).expect("g");
    assert!(g.exclusive());
    controller.container_started("cg");
    assert!(writes(&host).is_empty());
    assert_eq!(
        partition_of(&controller, "pod-g"),
        Some(format!("member (fallback: {})", partition::NO_CGROUP_PATH))
    );
    // A kernel before 6.7: the same reason for every container.
    host.tree().partitions.unsupported = true;
    for (uid, id) in [("pod-a", "ca"), ("pod-b", "cb")] {
        let path = format!("/kubepods/{uid}/{id}");
        admit(&mut controller, &container(uid, Some("1"), id, Some(&path))).expect("admitted");
        controller.container_started(id);
    }
    let (a, b) = (
        partition_of(&controller, "pod-a").expect("marked"),
        partition_of(&controller, "pod-b").expect("marked"),
    );
    assert_eq!(a, b);
    assert!(a.contains("Linux 6.7"), "{a}");
    let snap = snapshot(&controller);
    assert_eq!(snap.metrics.counters.partition_fallbacks_total, 3);
    assert_eq!(snap.metrics.counters.partitions_made_total, 0);
}

#[test]
fn containers_running_at_synchronization_get_their_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = started_node(dir.path(), &host, Features::default());
    let g = admit(
        &mut controller,
        &container("pod-g", Some("2"), "cg", Some("/kubepods/pod-g/cg")),
    )
    .expect("g");
    assert!(writes(&host).is_empty());
    let running = RunningContainer {
        key: ("pod-g".to_string(), RUN_CONTAINER.to_string()),
        container_id: "cg".to_string(),
        observed: Observed {
            cpus: Some(g.placement.cpus.clone()),
            mems: Some(g.placement.mems.clone()),
            cpu_quota: Some(-1),
        },
        pod: None,
        cgroup: Some(cgroup("/kubepods/pod-g/cg")),
        late: None,
    };
    controller.sync_runtime(&[running]).expect("synchronized");
    assert_eq!(host.tree().partitions.partition(LEAF), "isolated");
    // The runtime no longer runs it: released, taken apart.
    controller.sync_runtime(&[]).expect("synchronized");
    assert_eq!(host.tree().partitions.partition(LEAF), "member");
    assert_eq!(
        host.tree()
            .partitions
            .get(Path::new("kubepods"), "cpuset.cpus.exclusive"),
        ""
    );
}

/// The runtime holds a container's start until `StartContainer` is
/// answered: the executor's pass runs then only for a partition to make
/// (an exclusive container under `partition: root|isolated`). A shared
/// container, or any under `member`, is only marked started (its cgroup
/// compared from now on): no pass, no snapshot published.
#[test]
fn a_start_without_a_partition_to_make_runs_no_executor_pass() {
    for (mode, cpus, id, pass) in [
        (PartitionMode::Member, Some("2"), "cg", false),
        (PartitionMode::Isolated, None, "cs", false),
        (PartitionMode::Isolated, Some("2"), "cg", true),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = FakeCgroups::default();
        let (mut controller, _updates) = node(&host)
            .with_partition(mode)
            .start_with_runtime(dir.path())
            .expect("start");
        admit(
            &mut controller,
            &container("pod", cpus, id, Some("/kubepods/pod/c")),
        )
        .expect("admitted");
        let mut snapshots = controller.subscribe_snapshots();
        snapshots.mark_unchanged();
        assert!(controller.container_started(id), "{mode:?} {id}");
        assert_eq!(
            snapshots.has_changed().expect("open"),
            pass,
            "{mode:?} {id}: an executor pass (snapshot published)"
        );
        assert_eq!(!writes(&host).is_empty(), pass, "{mode:?} {id}");
    }
}

/// Found from outside (session 46): the containers of a pod with a
/// pod-level CPU set (`PodLevelResourceManagers`) share its CPUs, and
/// each was made a partition of them. Two sibling partitions cannot hold
/// the same CPUs: the kernel refuses the second, and its undo took the
/// CPUs out of the ancestors' claims, invalidating the first, which
/// `pinion ps` still showed as isolated. No container of such a pod is a
/// partition of the shared CPUs now: each falls back, with the reason.
#[test]
fn regression_containers_sharing_a_pod_level_cpu_set_are_not_each_a_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host)
        .with_config(PolicyConfig {
            policy: Some("static".into()),
            num_reserved: Some(1),
            topology_manager_policy: Some("best-effort".into()),
            topology_manager_scope: Some("pod".into()),
            ..PolicyConfig::default()
        })
        .with_partition(PartitionMode::Isolated)
        .with_features(Features {
            pod_level_resource_managers: true,
            ..Features::default()
        })
        .start_with_runtime(dir.path())
        .expect("start");
    let two = Quantity::parse("2").expect("quantity");
    controller.set_pod_resources(
        "pod-p",
        Some(pinion_core::pod::PodResources {
            cpu_request: Some(two.clone()),
            cpu_limit: Some(two),
            memory_request: Some(Quantity::parse("1Gi").expect("quantity")),
            memory_limit: Some(Quantity::parse("1Gi").expect("quantity")),
        }),
    );
    let mut pod = runtime_request("pod-p", None, "ca").pod;
    pod.containers = ["a", "b"]
        .iter()
        .map(|name| pinion_core::pod::Container {
            name: (*name).to_string(),
            ..pinion_core::pod::Container::default()
        })
        .collect();
    let mut held = Vec::new();
    for name in ["a", "b"] {
        let id = format!("c{name}");
        let request = AdmitRequest {
            pod: pod.clone(),
            container: name.to_string(),
            frontend: Frontend::runtime_in(&id, Some(cgroup(&format!("/kubepods/pod-p/{id}")))),
            cpu_owner: pinion_core::engine::CpuOwner::Policy,
        };
        let admitted = admit(&mut controller, &request).expect("admitted");
        controller.container_started(&id);
        held.push(admitted.placement);
    }
    assert!(
        held.iter().all(|p| p.is_exclusive()) && held[0].cpus == held[1].cpus,
        "both hold the pod's cpu set: {held:?}"
    );
    {
        let files = &host.tree().partitions;
        for leaf in ["kubepods/pod-p/ca", "kubepods/pod-p/cb"] {
            assert_eq!(files.partition(leaf), "member", "{leaf}");
        }
        assert!(files.isolated().is_empty(), "{}", files.isolated());
    }
    let snapshot = snapshot(&controller);
    for name in ["a", "b"] {
        let shown = snapshot
            .workload("pod-p", name)
            .expect("workload")
            .partition
            .clone()
            .unwrap_or_default();
        assert!(shown.contains("a pod-level cpu set"), "{name}: {shown}");
    }
    // Container b stops: a alone holds the CPUs, and becomes a partition.
    let b = ("pod-p".to_string(), "b".to_string());
    assert!(controller.park(&b, None));
    controller.reconcile();
    assert_eq!(
        host.tree().partitions.partition("kubepods/pod-p/ca"),
        "isolated"
    );
}
