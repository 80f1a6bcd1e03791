use std::path::Path;

use pinion_core::checkpoint::Checkpoint;
use pinion_core::policy::PolicyConfig;
use pinion_core::topology::{synthetic, Shape};
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::store::CPU_MANAGER_STATE;

use super::*;
use crate::api::{run_pod, RunRequest};

fn topology() -> Topology {
    synthetic(Shape {
        sockets: 1,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
}

fn start(dir: &Path, host: &FakeCgroups) -> Result<Controller, ControlError> {
    let topology = topology();
    let policy = PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(1),
        ..PolicyConfig::default()
    }
    .build(&topology)
    .expect("policy");
    Controller::start(StartParts {
        policy,
        topology_manager: pinion_core::topomgr::TopologyManager::none(),
        topology,
        state_dir: dir.to_path_buf(),
        host: Box::new(host.clone()),
    })
}

fn run(id: &str, cpus: Option<&str>, pid: u32) -> AdmitRequest {
    let pod = run_pod(&RunRequest {
        id: id.to_string(),
        cpus: cpus.map(str::to_string),
        memory_nodes: "auto".into(),
    })
    .expect("pod");
    AdmitRequest {
        pod,
        container: RUN_CONTAINER.into(),
        numa_affinity: None,
        placement: Placement::Cgroup { pid: Some(pid) },
    }
}

fn on_disk(dir: &Path) -> State {
    let bytes = std::fs::read(dir.join(CPU_MANAGER_STATE)).expect("checkpoint file");
    let checkpoint: Checkpoint =
        pinion_core::checkpoint::decode_verified(&bytes).expect("valid checkpoint");
    let parsed = checkpoint.to_state().expect("parses");
    State {
        default: parsed.default_cpu_set,
        assignments: parsed.assignments,
    }
}

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn name(text: &str) -> CgroupName {
    CgroupName::new(text).expect("name")
}

#[test]
fn exclusive_admission_is_durable_before_the_answer_and_placed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let admitted = controller
        .admit(&run("pinion-run-a", Some("2"), 10))
        .expect("admit");
    assert!(admitted.exclusive);
    assert_eq!(admitted.cpus.len(), 2);
    assert!(!admitted.cpus.contains(0), "reserved cpu 0 stays shared");
    // Durable: the file on disk already holds what the caller was told.
    let disk = on_disk(dir.path());
    assert_eq!(
        disk.assignment("pinion-run-a", "main"),
        Some(&admitted.cpus)
    );
    assert_eq!(&disk, controller.state());
    let tree = host.tree();
    let cgroup = &tree.children[&name("pinion-run-a")];
    assert_eq!(cgroup.cpus, admitted.cpus);
    assert_eq!(cgroup.mems, set("0"));
    assert_eq!(cgroup.pids, vec![10]);
}

#[test]
fn shared_pool_cgroups_follow_exclusive_allocations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let mut pool = controller.subscribe_shared_pool();
    let shared = controller
        .admit(&run("pinion-run-s", None, 11))
        .expect("shared");
    assert!(!shared.exclusive);
    assert_eq!(shared.cpus, set("0-7"));
    let burstable = controller
        .admit(&run("pinion-run-b", Some("1.5"), 12))
        .expect("burstable");
    assert!(
        !burstable.exclusive,
        "non-integral cpus run in the shared pool"
    );
    let exclusive = controller
        .admit(&run("pinion-run-x", Some("2"), 13))
        .expect("exclusive");
    let expected_pool = set("0-7").difference(&exclusive.cpus);
    assert!(pool.has_changed().expect("sender alive"));
    assert_eq!(*pool.borrow_and_update(), expected_pool);
    for id in ["pinion-run-s", "pinion-run-b"] {
        assert_eq!(host.tree().children[&name(id)].cpus, expected_pool, "{id}");
    }
    host.tree()
        .children
        .get_mut(&name("pinion-run-x"))
        .expect("x")
        .pids
        .clear();
    let released = controller.release("pinion-run-x", None).expect("release");
    assert_eq!(released.cpus, exclusive.cpus);
    assert_eq!(host.tree().children[&name("pinion-run-s")].cpus, set("0-7"));
    assert!(
        !host.tree().children.contains_key(&name("pinion-run-x")),
        "empty cgroup removed"
    );
    assert_eq!(*pool.borrow(), set("0-7"));
}

#[test]
fn invalid_requests_leave_state_and_checkpoint_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    controller
        .admit(&run("pinion-run-a", Some("1"), 10))
        .expect("admit");
    let before = controller.state().clone();
    let file_before = std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("read");

    let mut bad_name = run("pinion-run-a", Some("1"), 10);
    bad_name.pod.uid = "../../etc".into();
    let err = controller.admit(&bad_name).expect_err("bad name");
    assert!(matches!(err, ControlError::InvalidName(_)), "{err}");

    let err = controller
        .admit(&run("pinion-run-big", Some("100"), 11))
        .expect_err("too big");
    assert!(matches!(err, ControlError::Admission { .. }), "{err}");

    let mut unknown = run("pinion-run-c", Some("1"), 12);
    unknown.container = "nope".into();
    let err = controller.admit(&unknown).expect_err("unknown container");
    match &err {
        ControlError::Admission { source, .. } => {
            assert!(
                matches!(**source, PolicyError::UnknownContainer { .. }),
                "{err}"
            );
        }
        other => panic!("expected an admission error, got {other:?}"),
    }

    host.tree().fail_writes = true;
    let err = controller
        .admit(&run("pinion-run-d", Some("1"), 13))
        .expect_err("cgroup fails");
    assert!(matches!(err, ControlError::Cgroup { .. }), "{err}");
    host.tree().fail_writes = false;

    let err = controller
        .release("pinion-run-none", None)
        .expect_err("not found");
    assert!(matches!(err, ControlError::NotFound { .. }));

    assert_eq!(controller.state(), &before);
    assert_eq!(
        std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("read"),
        file_before
    );
    assert_eq!(
        host.tree().children.keys().cloned().collect::<Vec<_>>(),
        vec![name("pinion-run-a")]
    );
}

#[test]
fn readmitting_the_same_container_returns_the_same_cpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let first = controller
        .admit(&run("pinion-run-a", Some("2"), 10))
        .expect("admit");
    let again = controller
        .admit(&run("pinion-run-a", Some("2"), 10))
        .expect("again");
    assert_eq!(first, again);
}

#[test]
fn restart_keeps_live_assignments_and_releases_dead_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let live = controller
        .admit(&run("pinion-run-live", Some("2"), 10))
        .expect("live");
    let dead = controller
        .admit(&run("pinion-run-dead", Some("1"), 11))
        .expect("dead");
    let gone = controller
        .admit(&run("pinion-run-gone", Some("1"), 12))
        .expect("gone");
    let mut nri = AdmitRequest {
        placement: Placement::Runtime,
        ..run("pinion-run-x", Some("2"), 0)
    };
    nri.pod.uid = "pod-uid-1".into();
    let nri = controller.admit(&nri).expect("runtime placement");
    drop(controller);
    // While the agent is down: one run's processes exit, another's cgroup vanishes.
    host.tree()
        .children
        .get_mut(&name("pinion-run-dead"))
        .expect("dead")
        .pids
        .clear();
    host.tree().children.remove(&name("pinion-run-gone"));
    host.tree()
        .children
        .get_mut(&name("pinion-run-live"))
        .expect("live")
        .cpus = set("7");

    let controller = start(dir.path(), &host).expect("restart");
    let state = controller.state();
    assert_eq!(
        state.assignment("pinion-run-live", "main"),
        Some(&live.cpus),
        "nothing moved"
    );
    assert_eq!(
        state.assignment("pod-uid-1", "main"),
        Some(&nri.cpus),
        "runtime pods kept"
    );
    assert_eq!(state.assignment("pinion-run-dead", "main"), None);
    assert_eq!(state.assignment("pinion-run-gone", "main"), None);
    assert!(dead.cpus.union(&gone.cpus).is_subset(&state.default));
    assert_eq!(&on_disk(dir.path()), state);
    let tree = host.tree();
    assert_eq!(
        tree.children[&name("pinion-run-live")].cpus,
        live.cpus,
        "re-applied"
    );
    assert!(!tree.children.contains_key(&name("pinion-run-dead")));
}

#[test]
fn reconcile_repairs_drift_and_releases_finished_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let a = controller
        .admit(&run("pinion-run-a", Some("1"), 10))
        .expect("a");
    controller
        .admit(&run("pinion-run-b", Some("1"), 11))
        .expect("b");
    host.tree()
        .children
        .get_mut(&name("pinion-run-a"))
        .expect("a")
        .cpus = set("0-7");
    host.tree()
        .children
        .get_mut(&name("pinion-run-b"))
        .expect("b")
        .pids
        .clear();
    let report = controller.reconcile();
    assert_eq!(report.repaired, vec!["pinion-run-a".to_string()]);
    assert_eq!(report.released, vec!["pinion-run-b/main".to_string()]);
    assert_eq!(host.tree().children[&name("pinion-run-a")].cpus, a.cpus);
    assert!(!host.tree().children.contains_key(&name("pinion-run-b")));
    assert_eq!(controller.state().assignment("pinion-run-b", "main"), None);
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.metrics.counters.drift_repairs_total, 1);
    assert_eq!(snapshot.metrics.counters.released_gone_total, 1);
    assert_eq!(snapshot.workloads.len(), 1);
    // A second pass finds nothing to do.
    assert_eq!(controller.reconcile(), ReconcileReport::default());
}

#[test]
fn a_checkpoint_kubelet_would_refuse_points_to_migrate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let bytes = pinion_core::checkpoint::encode("none", "", &Default::default());
    std::fs::write(dir.path().join(CPU_MANAGER_STATE), bytes).expect("write");
    let err = start(dir.path(), &host).err().expect("refused");
    assert!(matches!(err, ControlError::Restore { .. }), "{err}");
    assert!(err.to_string().contains("pinion state migrate"), "{err}");

    std::fs::write(dir.path().join(CPU_MANAGER_STATE), b"{garbage").expect("write");
    let err = start(dir.path(), &host).err().expect("corrupt");
    assert!(
        matches!(err, ControlError::Checkpoint(StoreError::Corrupt { .. })),
        "{err}"
    );
}

#[tokio::test]
async fn the_handle_reaches_the_controller_thread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let controller = start(dir.path(), &host).expect("start");
    let (handle, thread) = spawn(controller).expect("spawn");
    let mut pool = handle.shared_pool();
    let admitted = handle
        .admit(run("pinion-run-h", Some("2"), 10))
        .await
        .expect("admit");
    assert_eq!(handle.snapshot().workloads[0].cpus, admitted.cpus);
    assert!(pool.has_changed().expect("alive"));
    assert_eq!(
        *pool.borrow_and_update(),
        set("0-7").difference(&admitted.cpus)
    );
    host.tree()
        .children
        .get_mut(&name("pinion-run-h"))
        .expect("h")
        .pids
        .clear();
    let released = handle
        .release("pinion-run-h".into(), None)
        .await
        .expect("release");
    assert_eq!(released.containers, vec!["main".to_string()]);
    assert!(handle.snapshot().workloads.is_empty());
    handle.shutdown().await;
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .expect("join")
        .expect("thread");
    let err = handle.reconcile().await.expect_err("stopped");
    assert!(matches!(err, ControlError::Stopped));
}

#[test]
fn single_numa_node_topology_manager_rejects_a_spanning_request_and_keeps_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    // 2 NUMA nodes of 4 cores × 2 threads.
    let topology = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    let config = PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(1),
        topology_manager_policy: Some("single-numa-node".into()),
        ..PolicyConfig::default()
    };
    let mut controller = Controller::start(StartParts {
        policy: config.build(&topology).expect("policy"),
        topology_manager: config
            .build_topology_manager(&topology)
            .expect("topology manager"),
        topology,
        state_dir: dir.path().to_path_buf(),
        host: Box::new(host.clone()),
    })
    .expect("start");
    let aligned = controller
        .admit(&run("pinion-run-a", Some("4"), 10))
        .expect("fits one node");
    let cpus = aligned.cpus;
    assert_eq!(cpus.len(), 4);
    assert!(
        cpus.is_subset(&set("0-3,8-11")) || cpus.is_subset(&set("4-7,12-15")),
        "{cpus}"
    );
    let before = on_disk(dir.path());
    let err = controller
        .admit(&run("pinion-run-b", Some("10"), 11))
        .expect_err("spans nodes");
    assert!(
        err.to_string()
            .contains("Resources cannot be allocated with Topology locality"),
        "{err}"
    );
    assert_eq!(
        on_disk(dir.path()),
        before,
        "a rejection changes nothing on disk"
    );
}

#[test]
fn sync_runtime_releases_what_the_runtime_no_longer_runs_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let runtime = |uid: &str| {
        let mut request = AdmitRequest {
            placement: Placement::Runtime,
            ..run("pinion-run-x", Some("2"), 0)
        };
        request.pod.uid = uid.into();
        request
    };
    let kept = controller.admit(&runtime("pod-a")).expect("a");
    let ended = controller.admit(&runtime("pod-b")).expect("b");
    let standalone = controller
        .admit(&run("pinion-run-s", Some("1"), 10))
        .expect("run");
    let mut pool = controller.subscribe_shared_pool();
    let running: std::collections::BTreeSet<Key> = [
        ("pod-a".to_string(), "main".to_string()),
        ("pod-shared".to_string(), "app".to_string()),
        ("pinion-run-ignored".to_string(), "main".to_string()),
    ]
    .into();
    let released = controller.sync_runtime(&running).expect("sync");
    assert_eq!(released.containers, vec!["pod-b/main".to_string()]);
    assert_eq!(released.cpus, ended.cpus);
    let state = controller.state();
    assert_eq!(
        state.assignment("pod-a", "main"),
        Some(&kept.cpus),
        "nothing moved"
    );
    assert_eq!(
        state.assignment("pinion-run-s", "main"),
        Some(&standalone.cpus)
    );
    assert_eq!(state.assignment("pod-b", "main"), None);
    assert_eq!(&on_disk(dir.path()), state);
    assert!(pool.has_changed().expect("alive"));
    assert!(ended.cpus.is_subset(&pool.borrow_and_update()));
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    let names: Vec<String> = snapshot
        .workloads
        .iter()
        .map(|w| format!("{}/{}", w.pod, w.container))
        .collect();
    assert_eq!(names, ["pinion-run-s/main", "pod-a/main", "pod-shared/app"]);
    // A second pass with the same list changes nothing and writes nothing.
    let file = std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("read");
    let again = controller.sync_runtime(&running).expect("again");
    assert!(again.containers.is_empty());
    assert_eq!(
        std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("read"),
        file
    );
}
