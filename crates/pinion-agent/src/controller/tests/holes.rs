//! Owns the tests of issue 27's smaller holes in admission and the executor.
//!
//! Issue 27's smaller holes in admission and the executor, at the
//! controller level with the fake host.

use super::*;

/// Regression (issue 27, item 7c): a run id whose process had died was
/// refused with a 409 naming the dead process until the next reconcile.
/// Now the ended run is released and the new one admitted at once.
#[test]
fn regression_a_run_id_whose_process_died_is_admitted_again_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    // Its process exits; no reconcile has run yet.
    host.tree()
        .children
        .get_mut(&name("pinion-run-a"))
        .expect("cgroup")
        .pids
        .clear();
    let second = admit(&mut controller, &run("pinion-run-a", Some("1"), 11))
        .expect("the id is free once its process ended");
    assert_eq!(second.placement.cpus.len(), 1);
    let tree = host.tree();
    let cgroup = &tree.children[&name("pinion-run-a")];
    assert_eq!(
        cgroup.pids,
        vec![11],
        "the new process is in the run's cgroup"
    );
    assert_eq!(cgroup.cpus, second.placement.cpus);
    drop(tree);
    assert_eq!(
        controller.state().assignment("pinion-run-a", "main"),
        Some(&second.placement.cpus)
    );
    assert_eq!(on_disk(dir.path()), *controller.state(), "durable");
    assert_eq!(controller.counters.released_gone_total, 1);
}

/// The ended run is released even when the new run is refused, and then
/// its cgroup goes too.
#[test]
fn a_refused_run_with_an_ended_runs_id_releases_it_and_leaves_no_cgroup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    host.tree()
        .children
        .get_mut(&name("pinion-run-a"))
        .expect("cgroup")
        .pids
        .clear();
    // 7 allocatable CPUs: 64 are refused by the policy.
    let err = admit(&mut controller, &run("pinion-run-a", Some("64"), 11)).expect_err("too many");
    assert!(matches!(err, ControlError::Admission { .. }), "{err}");
    assert_eq!(controller.state().assignment("pinion-run-a", "main"), None);
    assert!(host.tree().children.is_empty(), "no cgroup left behind");
}

/// Regression (issue 27, item 7d): a standalone run whose cgroup was made
/// but whose cpuset the kernel refused left an empty cgroup directory
/// behind. Now the refusal removes it.
#[test]
fn regression_a_refused_admission_leaves_no_cgroup_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let before = controller.state().clone();
    host.tree().fail_writes = true;
    let err = admit(&mut controller, &run("pinion-run-b", Some("2"), 10)).expect_err("refused");
    assert!(matches!(err, ControlError::Cgroup { .. }), "{err}");
    host.tree().fail_writes = false;
    assert!(host.tree().children.is_empty(), "no cgroup left behind");
    assert_eq!(controller.state(), &before);
    // Refused by the policy: nothing was made in the first place.
    let err = admit(&mut controller, &run("pinion-run-c", Some("64"), 11)).expect_err("too many");
    assert!(matches!(err, ControlError::Admission { .. }), "{err}");
    assert!(host.tree().children.is_empty(), "no cgroup left behind");
}

/// Regression (issue 27, item 10f): a change of a runtime container's
/// environment or annotations alone sent an NRI update carrying the
/// resources it already had (`UpdateContainers` cannot change envs).
#[test]
fn regression_an_env_only_change_sends_no_runtime_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    admit(&mut controller, &runtime_request("pod-1", Some("2"), "c1")).expect("admit");
    while updates.try_recv().is_ok() {}
    let key = ("pod-1".to_string(), "main".to_string());
    let applied_with_other_env = |controller: &mut Controller| {
        let workload = controller.workloads.get_mut(&key).expect("workload");
        let mut applied = workload.desired.clone();
        applied.env.insert("NIC".into(), "eth9".into());
        applied.annotations.insert("team".into(), "b".into());
        workload.applied = Some(applied);
    };
    applied_with_other_env(&mut controller);
    controller.converge();
    assert!(
        updates.try_recv().is_err(),
        "no update for env/annotations alone"
    );
    let workload = &controller.workloads[&key];
    assert_eq!(workload.applied.as_ref(), Some(&workload.desired));
    // A change of its resources still sends one.
    let workload = controller.workloads.get_mut(&key).expect("workload");
    let mut applied = workload.desired.clone();
    applied.resources.cpu_quota = Some(50_000);
    workload.applied = Some(applied);
    controller.converge();
    let batch = updates.try_recv().expect("an update for changed resources");
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].container_id, "c1");
}

/// Regression (issue 27, item 10g): a run whose cgroup settings could not
/// be written after its admission was retried at every pass with nothing
/// to show for it but a log line each time. Now the failure is marked on
/// the workload (`pinion ps`) and counted once, and cleared when a write
/// succeeds.
#[test]
fn regression_a_cgroup_write_failing_after_admission_is_marked_and_counted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let snapshots = controller.subscribe_snapshots();
    let admitted = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    // Someone rewrites the run's cpuset, and cgroupfs then refuses writes.
    host.tree()
        .children
        .get_mut(&name("pinion-run-a"))
        .expect("cgroup")
        .cpus = set("0-7");
    host.tree().fail_writes = true;
    for _ in 0..3 {
        controller.reconcile();
    }
    assert_eq!(controller.counters.cgroup_apply_failures_total, 1);
    let snapshot = snapshots.borrow().clone();
    let view = &snapshot.workloads[0];
    assert!(!view.applied);
    let error = view.apply_error.as_deref().expect("marked");
    assert!(error.contains("pinion-run-a"), "{error}");
    // Writes work again: repaired, the mark goes.
    host.tree().fail_writes = false;
    controller.reconcile();
    let snapshot = snapshots.borrow().clone();
    assert_eq!(snapshot.workloads[0].apply_error, None);
    assert!(snapshot.workloads[0].applied);
    assert_eq!(
        host.tree().children[&name("pinion-run-a")].cpus,
        admitted.placement.cpus
    );
    assert_eq!(controller.counters.cgroup_apply_failures_total, 1);
}

/// Issue 27, item 10g, at admission: a run whose OCI setting the kernel
/// refuses is refused with the reason (the file and the value), leaving no
/// cgroup and no assignment behind, and nothing to retry later.
#[test]
fn a_run_whose_cgroup_setting_is_refused_at_admission_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let before = controller.state().clone();
    host.tree().fail_files.insert("cpu.max".to_string());
    let err = admit(&mut controller, &run("pinion-run-q", Some("2"), 10)).expect_err("refused");
    assert!(matches!(err, ControlError::Cgroup { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("cpu.max") && text.contains("max"), "{text}");
    assert!(host.tree().children.is_empty(), "no cgroup left behind");
    assert_eq!(controller.state(), &before);
    controller.reconcile();
    assert_eq!(controller.counters.cgroup_apply_failures_total, 0);
}
