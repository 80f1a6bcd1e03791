//! Owns the controller's tests on the fake host: admission, release, restart, runtime containers and resource plugins.

use std::collections::BTreeSet;
use std::path::Path;

use pinion_core::policy::PolicyConfig;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::{Pool, Topology};
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::store::CPU_MANAGER_STATE;

use super::*;
use crate::hints::GatheredHints;
use crate::testing::{machine, run_request, runtime_request, SyntheticNode};

/// 1 socket × 4 cores × 2 threads: cpus 0-7, one NUMA node.
fn node(host: &FakeCgroups) -> SyntheticNode {
    SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(machine(1, 4, 2))
    }
}

fn start(dir: &Path, host: &FakeCgroups) -> Result<Controller, ControlError> {
    node(host).start(dir)
}

fn run(id: &str, cpus: Option<&str>, pid: u32) -> AdmitRequest {
    run_request(id, cpus, Some(pid))
}

/// The runtime's side of the updates sent so far: every one applied and
/// answered (the reconcile pass compares a container only then).
fn answer_updates(
    controller: &mut Controller,
    updates: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>,
) -> Vec<RuntimeUpdate> {
    let mut sent = Vec::new();
    while let Ok(batch) = updates.try_recv() {
        sent.extend(batch);
    }
    let ids: Vec<String> = sent.iter().map(|u| u.container_id.clone()).collect();
    controller.runtime_updates_applied(&ids);
    sent
}

fn admit(controller: &mut Controller, request: &AdmitRequest) -> Result<Admitted, ControlError> {
    controller.admit(request, &GatheredHints::default())
}

/// The state a restart would start from: the checkpoint with the
/// journal's durable records replayed.
fn on_disk(dir: &Path) -> State {
    durable(dir).0
}

/// The durable state and the journal's last durable sequence number (an
/// unchanged pair: nothing was written).
fn durable(dir: &Path) -> (State, u64) {
    let inspection = pinion_host::journal::inspect(dir).expect("readable");
    let view = inspection
        .journal
        .expect("a journal")
        .expect("readable journal");
    let checkpoint = view.effective.expect("replays").expect("a checkpoint");
    let parsed = checkpoint.to_state().expect("parses");
    let state = State {
        default: parsed.default_cpu_set,
        assignments: parsed.assignments,
    };
    (state, view.scan.last_seq())
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
    let admitted = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    let cpus = &admitted.placement.cpus;
    assert!(admitted.exclusive());
    assert_eq!(cpus.len(), 2);
    assert!(!cpus.contains(0), "reserved cpu 0 stays shared");
    assert_eq!(admitted.placement.resources.cpu_quota, Some(-1));
    // Durable: the file on disk already holds what the caller was told.
    let disk = on_disk(dir.path());
    assert_eq!(disk.assignment("pinion-run-a", "main"), Some(cpus));
    assert_eq!(&disk, controller.state());
    let tree = host.tree();
    let cgroup = &tree.children[&name("pinion-run-a")];
    assert_eq!(&cgroup.cpus, cpus);
    assert_eq!(cgroup.mems, set("0"));
    assert_eq!(cgroup.pids, vec![10]);
}

#[test]
fn shared_pool_cgroups_follow_exclusive_allocations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let mut pool = controller.subscribe_shared_pool();
    let shared = admit(&mut controller, &run("pinion-run-s", None, 11)).expect("shared");
    assert!(!shared.exclusive());
    assert_eq!(shared.placement.cpus, set("0-7"));
    let burstable = admit(&mut controller, &run("pinion-run-b", Some("1.5"), 12)).expect("b");
    assert!(
        !burstable.exclusive(),
        "non-integral cpus run in the shared pool"
    );
    let exclusive = admit(&mut controller, &run("pinion-run-x", Some("2"), 13)).expect("x");
    let expected_pool = set("0-7").difference(&exclusive.placement.cpus);
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
    assert_eq!(released.cpus, exclusive.placement.cpus);
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
    admit(&mut controller, &run("pinion-run-a", Some("1"), 10)).expect("admit");
    let before = controller.state().clone();
    let durable_before = durable(dir.path());

    let err = Frontend::standalone("../../etc", Some(10)).expect_err("bad name");
    assert!(matches!(err, ControlError::InvalidName(_)), "{err}");

    let err = admit(&mut controller, &run("pinion-run-big", Some("100"), 11)).expect_err("big");
    assert!(matches!(err, ControlError::Admission { .. }), "{err}");

    let mut unknown = run("pinion-run-c", Some("1"), 12);
    unknown.container = "nope".into();
    let err = admit(&mut controller, &unknown).expect_err("unknown container");
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
    let err = admit(&mut controller, &run("pinion-run-d", Some("1"), 13)).expect_err("cgroup");
    assert!(matches!(err, ControlError::Cgroup { .. }), "{err}");
    host.tree().fail_writes = false;

    let err = controller
        .release("pinion-run-none", None)
        .expect_err("not found");
    assert!(matches!(err, ControlError::NotFound { .. }));

    assert_eq!(controller.state(), &before);
    assert_eq!(durable(dir.path()), durable_before, "nothing was written");
    assert_eq!(
        host.tree().children.keys().cloned().collect::<Vec<_>>(),
        vec![name("pinion-run-a")]
    );
}

#[test]
fn a_retry_of_the_same_run_gets_the_same_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let first = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    let again = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("again");
    assert_eq!(first, again);
}

/// Found from outside (session 46): a retry of an admitted run by the same
/// process answered its placement without placing the process. One moved
/// out of its cgroup since (by hand, or by another cgroup manager) ran on
/// CPUs it was not given while the answer said it had its own.
#[test]
fn regression_a_retry_of_the_same_run_places_its_process_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let first = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    assert_eq!(host.tree().children[&name("pinion-run-a")].pids, vec![10]);
    // Someone moves the process out of its cgroup.
    host.tree()
        .children
        .get_mut(&name("pinion-run-a"))
        .expect("the run's cgroup")
        .pids
        .clear();
    let again = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("again");
    assert_eq!(first, again, "the same answer");
    assert_eq!(
        host.tree().children[&name("pinion-run-a")].pids,
        vec![10],
        "the process is in its cgroup again"
    );
}

/// Issue 10: `POST /v1/run` with an id that is already admitted answered 200
/// "exclusive" to a second caller that was never placed, and a retry with
/// other cpus got the old answer.
#[test]
fn regression_a_second_run_with_an_admitted_id_is_a_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let first = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    let other_process = admit(&mut controller, &run("pinion-run-a", Some("2"), 11));
    let err = other_process.expect_err("another process");
    assert!(matches!(err, ControlError::Conflict { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("process 10") && text.contains("process 11"),
        "{text}"
    );
    let other_cpus = admit(&mut controller, &run("pinion-run-a", Some("1"), 10));
    let err = other_cpus.expect_err("other cpus");
    assert!(matches!(err, ControlError::Conflict { .. }), "{err}");
    assert!(err.to_string().contains("cpus 1"), "{err}");
    // The second caller was not placed; the first keeps its cpus.
    assert_eq!(host.tree().children[&name("pinion-run-a")].pids, vec![10]);
    assert_eq!(
        controller.state().assignment("pinion-run-a", "main"),
        Some(&first.placement.cpus)
    );
}

/// Found from outside (thirty-third session): two requests with the same
/// run id in one batch. The second found the first's cgroup still empty
/// (its process joins after the flush), took the run as ended, released
/// it and admitted itself: the first caller was told it was admitted, and
/// its process then joined a cgroup placed for the second request.
#[test]
fn regression_a_second_run_of_the_same_id_in_one_batch_is_a_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let decision = |request: AdmitRequest| Decision::Admit {
        request: Box::new(request),
        hints: Box::default(),
        plugins: None,
    };
    let mut answers = controller.run_batch(vec![
        decision(run("pinion-run-a", Some("2"), 10)),
        decision(run("pinion-run-a", None, 11)),
    ]);
    let second = answers.pop().expect("two answers").expect_err("a conflict");
    assert!(matches!(second, ControlError::Conflict { .. }), "{second}");
    let Ok(Answer::Admitted(first)) = answers.pop().expect("two answers") else {
        panic!("the first is admitted");
    };
    assert!(first.exclusive());
    assert_eq!(
        controller.state().assignment("pinion-run-a", "main"),
        Some(&first.placement.cpus)
    );
    let tree = host.tree();
    let cgroup = &tree.children[&name("pinion-run-a")];
    assert_eq!(cgroup.cpus, first.placement.cpus);
    assert_eq!(cgroup.pids, vec![10]);
}

/// Found from outside (session 46): a run released and admitted again
/// under the same id in one batch had the release's cgroup removal run
/// after the admission: with the old process still in the cgroup it took
/// the new run's place on its exclusive CPUs; with the cgroup empty it
/// removed the cgroup from under the new run (a spurious failure). Now the
/// first is a conflict, as in separate batches, and the second reuses the
/// cgroup.
#[test]
fn regression_a_release_and_a_new_run_of_the_same_id_in_one_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("a");
    let again = |controller: &mut Controller, pid: u32| {
        controller.run_batch(vec![
            Decision::Release {
                pod: "pinion-run-a".to_string(),
                container: None,
                reach: Reach::Runs,
            },
            Decision::Admit {
                request: Box::new(run("pinion-run-a", Some("2"), pid)),
                hints: Box::default(),
                plugins: None,
            },
        ])
    };
    // Process 10 still runs in the cgroup: the new run is refused.
    let mut answers = again(&mut controller, 11);
    let refused = answers.pop().expect("two answers").expect_err("a conflict");
    assert!(
        matches!(refused, ControlError::Conflict { .. }),
        "{refused}"
    );
    assert!(matches!(answers.pop(), Some(Ok(Answer::Released(_)))));
    let shared = controller.engine.shared_pool();
    {
        let tree = host.tree();
        let cgroup = &tree.children[&name("pinion-run-a")];
        assert_eq!(cgroup.pids, vec![10], "the new run's process never joined");
        assert_eq!(cgroup.cpus, shared, "the released run is shared");
    }
    assert_eq!(controller.state().assignment("pinion-run-a", "main"), None);
    // Its processes ended: the next run of the id gets the cgroup.
    host.tree()
        .children
        .get_mut(&name("pinion-run-a"))
        .expect("cgroup")
        .pids
        .clear();
    let mut answers = again(&mut controller, 12);
    let Some(Ok(Answer::Admitted(admitted))) = answers.pop() else {
        panic!("admitted");
    };
    let tree = host.tree();
    let cgroup = &tree.children[&name("pinion-run-a")];
    assert_eq!(cgroup.pids, vec![12]);
    assert_eq!(cgroup.cpus, admitted.placement.cpus);
    assert!(admitted.exclusive());
}

/// Found from outside (thirty-third session): a CPU of an exclusive run
/// going offline while the agent was down made the start refuse ("would
/// take exclusive cpus from running workloads … set migrateOnStart: true"),
/// and with `migrateOnStart: true` the run lost all its CPUs to the shared
/// pool, where the same event at run time keeps its other CPU and adds a
/// free one. The start now follows it as CPU hot-plug does.
#[test]
fn regression_a_cpu_gone_offline_while_the_agent_was_down_is_followed_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    // CPU 0 reserved by name: a count would be chosen anew on the smaller
    // machine, as kubelet chooses it at every start.
    let config = PolicyConfig {
        policy: Some("static".into()),
        reserved: Some(set("0")),
        num_reserved: Some(1),
        ..PolicyConfig::default()
    };
    let mut controller = node(&host)
        .with_config(config.clone())
        .start(dir.path())
        .expect("start");
    let admitted = admit(&mut controller, &run("pinion-run-a", Some("2"), 41)).expect("admit");
    drop(controller);
    let held = admitted.placement.cpus;
    let gone = held.iter().next().expect("a cpu");
    let kept = held.iter().nth(1).expect("two cpus");
    let offline = set(&gone.to_string());
    let smaller = SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(pinion_core::testing::without_cpus(
            &machine(1, 4, 2),
            &offline,
        ))
    }
    .with_config(config);
    let controller = smaller.start(dir.path()).expect("starts");
    let now = controller
        .state()
        .assignment("pinion-run-a", RUN_CONTAINER)
        .expect("still exclusive");
    assert_eq!(now.len(), 2, "{now}");
    assert!(now.contains(kept) && !now.contains(gone), "{now}");
    let report = controller.start_report.lines.join("\n");
    assert!(
        report.contains(&format!(
            "cpus {gone} went offline while the agent was down"
        )),
        "{report}"
    );
    assert_eq!(on_disk(dir.path()), controller.state().clone());
}

/// Found from outside (thirty-third session): a journal that could not be
/// opened at start (a directory in its place, an immutable file, a full
/// disk) was reported as "the decision could not be made durable, nothing
/// changed", though no decision was being made.
#[test]
fn regression_a_journal_that_cannot_be_opened_at_start_is_named_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    std::fs::create_dir(dir.path().join(pinion_host::journal::JOURNAL)).expect("mkdir");
    let Err(err) = start(dir.path(), &host) else {
        panic!("a directory is no journal");
    };
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "cannot open the state in {}",
            dir.path().display()
        )) && !text.contains("decision"),
        "{text}"
    );
}

#[test]
fn restart_keeps_live_assignments_and_releases_dead_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let node = node(&host);
    let (mut controller, _updates) = node.start_with_runtime(dir.path()).expect("start");
    // The runtime's first Synchronize (nothing runs yet): a fresh start
    // with a runtime front-end hands out exclusive cpus after it.
    controller.sync_runtime(&[]).expect("first synchronize");
    let live = admit(&mut controller, &run("pinion-run-live", Some("2"), 10)).expect("live");
    let dead = admit(&mut controller, &run("pinion-run-dead", Some("1"), 11)).expect("dead");
    let nri = admit(
        &mut controller,
        &runtime_request("pod-uid-1", Some("2"), "c1"),
    )
    .expect("nri");
    drop(controller);
    // While the agent is down: one run's processes exit, another's cpuset
    // is changed behind Pinion's back.
    host.tree()
        .children
        .get_mut(&name("pinion-run-dead"))
        .expect("dead")
        .pids
        .clear();
    host.tree()
        .children
        .get_mut(&name("pinion-run-live"))
        .expect("live")
        .cpus = set("7");

    let (controller, _updates) = node.start_with_runtime(dir.path()).expect("restart");
    let state = controller.state();
    assert_eq!(
        state.assignment("pinion-run-live", "main"),
        Some(&live.placement.cpus),
        "nothing moved"
    );
    assert_eq!(
        state.assignment("pod-uid-1", "main"),
        Some(&nri.placement.cpus),
        "runtime pods kept until the runtime synchronizes"
    );
    assert_eq!(state.assignment("pinion-run-dead", "main"), None);
    assert!(dead.placement.cpus.is_subset(&state.default));
    assert_eq!(&on_disk(dir.path()), state);
    let tree = host.tree();
    assert_eq!(
        tree.children[&name("pinion-run-live")].cpus,
        live.placement.cpus,
        "re-applied"
    );
    assert!(!tree.children.contains_key(&name("pinion-run-dead")));
}

/// Without a runtime front-end nothing can own an assignment whose cgroup
/// is gone (a standalone run after a reboot): released at start.
#[test]
fn restart_without_a_runtime_releases_assignments_without_a_cgroup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let gone = admit(&mut controller, &run("pinion-run-gone", Some("1"), 12)).expect("gone");
    drop(controller);
    host.tree().children.remove(&name("pinion-run-gone"));
    let controller = start(dir.path(), &host).expect("restart");
    assert_eq!(
        controller.state().assignment("pinion-run-gone", "main"),
        None
    );
    assert!(gone.placement.cpus.is_subset(&controller.state().default));
}

/// Issue 10: the front-end of a workload was told by the name prefix
/// `pinion-run-`, so an NRI pod whose UID starts with it lost its CPUs at a
/// restart.
#[test]
fn regression_a_runtime_pod_named_like_a_run_keeps_its_cpus_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let node = node(&host);
    let (mut controller, _updates) = node.start_with_runtime(dir.path()).expect("start");
    let request = runtime_request("pinion-run-lookalike", Some("2"), "c1");
    let admitted = admit(&mut controller, &request).expect("admit");
    drop(controller);
    let (mut controller, _updates) = node.start_with_runtime(dir.path()).expect("restart");
    let key = ("pinion-run-lookalike".to_string(), "main".to_string());
    let running = [RunningContainer {
        key,
        container_id: "c1".into(),
        observed: Observed {
            cpus: Some(admitted.placement.cpus.clone()),
            mems: Some(admitted.placement.mems.clone()),
            cpu_quota: Some(-1),
        },
        pod: None,
        cgroup: None,
        late: None,
    }];
    let (released, updates) = controller.sync_runtime(&running).expect("sync");
    assert!(released.containers.is_empty(), "{released:?}");
    assert!(updates.is_empty(), "it already runs where it should");
    assert_eq!(
        controller
            .state()
            .assignment("pinion-run-lookalike", "main"),
        Some(&admitted.placement.cpus)
    );
}

#[test]
fn reconcile_repairs_drift_and_releases_finished_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("1"), 10)).expect("a");
    admit(&mut controller, &run("pinion-run-b", Some("1"), 11)).expect("b");
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
    assert_eq!(
        host.tree().children[&name("pinion-run-a")].cpus,
        a.placement.cpus
    );
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
    let mut parts = node(&host).parts_on(dir.path(), Box::new(host.clone()));
    parts.migrate_on_start = MigrateOnStart::Never;
    let err = Controller::start(parts).err().expect("refused");
    assert!(matches!(err, ControlError::Restore { .. }), "{err}");
    for part in ["pinion state migrate", "--config", "migrateOnStart"] {
        assert!(
            err.to_string().contains(part),
            "{part:?} missing from {err}"
        );
    }
}

/// Regression (found from outside): with `migrateOnStart: false`, a
/// checkpoint whose CPU sets cannot be read was refused with the advice to
/// run `pinion state migrate`, which cannot read it either. The advice now
/// names the rebuild from the running workloads.
#[test]
fn regression_an_unreadable_checkpoint_refused_at_start_points_to_rebuild() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let bytes = pinion_core::checkpoint::encode("static", "0-x", &Default::default());
    std::fs::write(dir.path().join(CPU_MANAGER_STATE), bytes).expect("write");
    let mut parts = node(&host).parts_on(dir.path(), Box::new(host.clone()));
    parts.migrate_on_start = MigrateOnStart::Never;
    let err = Controller::start(parts).err().expect("refused");
    assert!(matches!(err, ControlError::Restore { .. }), "{err}");
    let text = err.to_string();
    let rebuild = format!(
        "pinion state rebuild --state-dir {} --config",
        dir.path().display()
    );
    assert!(text.contains(&rebuild), "{rebuild:?} missing from {text}");
    assert!(
        !text.contains("run `pinion state migrate"),
        "advises migrate: {text}"
    );
}

/// Issue 13: a config change that reserves the CPU of a running exclusive
/// workload kept the agent down. Now the checkpoint is migrated at start:
/// that workload goes to the shared pool, the others keep their CPUs.
#[test]
fn regression_reserving_a_held_cpu_migrates_at_start_instead_of_exiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("1"), 41)).expect("a");
    let b = admit(&mut controller, &run("pinion-run-b", Some("1"), 42)).expect("b");
    drop(controller);
    let reserved = b.placement.cpus.clone();
    let changed = node(&host).with_config(PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(reserved.len()),
        reserved: Some(reserved.clone()),
        ..PolicyConfig::default()
    });
    // Issue 27, item 2: it moves a running workload, so only with an
    // explicit `migrateOnStart: true`; by default the start is refused.
    let before = std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("checkpoint");
    let err = changed.start(dir.path()).err().expect("refused by default");
    assert!(
        matches!(err, ControlError::MigrationWouldMove { .. }),
        "{err}"
    );
    for part in [
        "pinion-run-b/main",
        "migrateOnStart: true",
        "drain this node",
    ] {
        assert!(
            err.to_string().contains(part),
            "{part:?} missing from {err}"
        );
    }
    assert_eq!(
        std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("checkpoint"),
        before,
        "nothing changed"
    );
    let mut parts = changed.parts_on(dir.path(), Box::new(host.clone()));
    parts.migrate_on_start = MigrateOnStart::Always;
    let controller = Controller::start(parts).expect("migrated, not refused");
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        Some(&a.placement.cpus),
        "the workload that still fits keeps its cpus"
    );
    assert_eq!(
        controller.state().assignment("pinion-run-b", RUN_CONTAINER),
        None
    );
    assert_eq!(
        host.tree().children[&name("pinion-run-b")].cpus,
        controller.engine.shared_pool()
    );
    assert_eq!(controller.counters.state_migrations_total, 1);
    assert_eq!(controller.counters.state_migration_dropped_total, 1);
    assert!(dir.path().join("cpu_manager_state.pre-migrate-1").exists());
    assert_eq!(on_disk(dir.path()), controller.state().clone());
    let moved = &controller.start_report.lines;
    assert!(
        moved
            .iter()
            .any(|l| l.starts_with("moved: pinion-run-b/main")),
        "{moved:?}"
    );
}

/// Regression (found from outside): a checkpoint in which two pods hold
/// the same CPU (what a kubelet on a hybrid machine writes) started as it
/// was, and both workloads were told the CPU was theirs alone. The start
/// now refuses it (kubelet's checks pass it) and migrates it as any state
/// that does not fit: the first pod keeps the CPU, the second is named,
/// and moved only with `migrateOnStart: true`.
#[test]
fn regression_a_checkpoint_with_a_cpu_held_by_two_pods_is_migrated_not_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("1"), 41)).expect("a");
    let b = admit(&mut controller, &run("pinion-run-b", Some("1"), 42)).expect("b");
    let default = controller.state().default.union(&b.placement.cpus);
    drop(controller);
    let mut entries = pinion_core::checkpoint::PodEntries::default();
    for pod in ["pinion-run-a", "pinion-run-b"] {
        entries
            .entry(pod.to_string())
            .or_default()
            .insert(RUN_CONTAINER.to_string(), a.placement.cpus.to_string());
    }
    let bytes = pinion_core::checkpoint::encode("static", &default.to_string(), &entries);
    std::fs::write(dir.path().join(CPU_MANAGER_STATE), bytes).expect("write");
    std::fs::remove_file(dir.path().join(pinion_host::journal::JOURNAL)).expect("journal");
    let err = start(dir.path(), &host).err().expect("refused by default");
    assert!(
        matches!(err, ControlError::MigrationWouldMove { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("pinion-run-b/main"), "{err}");
    let mut parts = node(&host).parts_on(dir.path(), Box::new(host.clone()));
    parts.migrate_on_start = MigrateOnStart::Always;
    let controller = Controller::start(parts).expect("migrated");
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        Some(&a.placement.cpus)
    );
    assert_eq!(
        controller.state().assignment("pinion-run-b", RUN_CONTAINER),
        None,
        "the second holder gives the cpu up"
    );
    assert!(controller
        .engine
        .shared_pool()
        .is_disjoint(&a.placement.cpus));
    assert_eq!(controller.counters.state_migration_dropped_total, 1);
}

/// A checkpoint that fits nothing and cannot be migrated (v1 entries: the
/// container ids are the runtime's) no longer keeps the agent down: it
/// starts degraded, keeps the running workloads and refuses exclusive cpus.
#[test]
fn a_checkpoint_that_cannot_be_migrated_starts_degraded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let v1 = br#"{"policyName":"static","defaultCpuSet":"0,2-7","entries":{"0123abcd":"1"},"checksum":0}"#;
    std::fs::write(dir.path().join(CPU_MANAGER_STATE), v1).expect("write");
    let mut controller = start(dir.path(), &host).expect("starts degraded");
    let err = admit(&mut controller, &run("pinion-run-x", Some("1"), 43)).expect_err("refused");
    assert!(matches!(err, ControlError::Degraded { .. }), "{err}");
    assert!(
        err.to_string().contains("pinion state rebuild --write"),
        "{err}"
    );
    assert!(controller.state().assignments.is_empty());
    let shared = admit(&mut controller, &run("pinion-run-y", None, 44)).expect("shared");
    assert!(!shared.exclusive());
}

/// Found from outside (session 43): at start, a run whose `cgroup.procs`
/// could not be read (an LSM's `EACCES`, an `EIO`) counted as one whose
/// processes had ended: its release was journalled and its CPUs handed out
/// while it ran. Such a run is now kept, with its CPUs, until its list
/// reads empty; a rebuild from the node claims it as well.
#[test]
fn regression_a_run_whose_processes_cannot_be_listed_at_start_keeps_its_cpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let pinned = admit(&mut controller, &run("pinion-run-a", Some("2"), 41)).expect("admit");
    drop(controller);
    host.tree().unreadable_procs.insert(name("pinion-run-a"));

    // The checkpoint is read back: the run is recovered, not released.
    let mut controller = start(dir.path(), &host).expect("restart");
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        Some(&pinned.placement.cpus)
    );
    assert_eq!(controller.counters.released_gone_total, 0);
    let other = admit(&mut controller, &run("pinion-run-b", Some("2"), 42)).expect("admit");
    assert!(other.placement.cpus.is_disjoint(&pinned.placement.cpus));
    drop(controller);

    // Rebuilt from the node (checkpoint unreadable): it still claims.
    std::fs::write(dir.path().join(CPU_MANAGER_STATE), b"{garbage").expect("write");
    let controller = start(dir.path(), &host).expect("rebuilt");
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        Some(&pinned.placement.cpus)
    );
}

/// Issue 10 reported a corrupt checkpoint as "saving the checkpoint
/// failed"; issue 13: it then kept the agent down. Now it is kept aside and
/// the state is rebuilt from the running workloads, which keep their CPUs.
#[test]
fn regression_a_corrupt_checkpoint_is_kept_aside_and_the_runs_keep_their_cpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let pinned = admit(&mut controller, &run("pinion-run-a", Some("2"), 41)).expect("admit");
    admit(&mut controller, &run("pinion-run-b", None, 42)).expect("shared run");
    drop(controller);
    std::fs::write(dir.path().join(CPU_MANAGER_STATE), b"{garbage").expect("write");
    let controller = start(dir.path(), &host).expect("starts anyway");
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        Some(&pinned.placement.cpus)
    );
    assert_eq!(
        host.tree().children[&name("pinion-run-a")].cpus,
        pinned.placement.cpus
    );
    assert_eq!(
        controller.state().assignment("pinion-run-b", RUN_CONTAINER),
        None
    );
    assert_eq!(controller.counters.state_rebuilds_total, 1);
    assert_eq!(controller.counters.state_rebuild_conflicts_total, 0);
    assert_eq!(on_disk(dir.path()), controller.state().clone());
    let kept: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("cpu_manager_state.unreadable-")
        })
        .map(|e| std::fs::read(e.path()).expect("read"))
        .collect();
    assert_eq!(kept, vec![b"{garbage".to_vec()], "kept, never overwritten");
    assert!(
        controller.start_report.lines[0].contains("unreadable"),
        "{:?}",
        controller.start_report
    );
}

/// A run admitted before run records existed has none: it is rebuilt as a
/// member of the shared pool (the documented fallback), with a warning.
#[test]
fn a_run_without_a_record_is_rebuilt_in_the_shared_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 41)).expect("admit");
    drop(controller);
    std::fs::remove_file(dir.path().join(CPU_MANAGER_STATE)).expect("delete");
    std::fs::remove_file(dir.path().join("runs/pinion-run-a")).expect("no record");
    let controller = start(dir.path(), &host).expect("start");
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        None
    );
    assert_eq!(controller.counters.state_rebuilds_total, 1);
}

/// The record a run leaves in `dir` (`None`: none).
fn run_record(dir: &Path, id: &str) -> Option<String> {
    std::fs::read_to_string(dir.join("runs").join(id)).ok()
}

/// Found from outside (thirty-third session): a run released while its
/// processes were still running stayed in the shared pool, but its run
/// record still said `exclusive-cpus 2`; the next rebuild from the node
/// (here: the checkpoint deleted) gave it exclusive CPUs again, undoing an
/// acknowledged release and moving a running process.
#[test]
fn regression_a_run_released_with_processes_left_stays_shared_after_a_rebuild() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 41)).expect("admit");
    assert_eq!(
        run_record(dir.path(), "pinion-run-a").as_deref(),
        Some("exclusive-cpus 2\n")
    );
    controller.release("pinion-run-a", None).expect("release");
    let shared = controller.engine.shared_pool();
    assert_eq!(host.tree().children[&name("pinion-run-a")].cpus, shared);
    assert_eq!(
        run_record(dir.path(), "pinion-run-a").as_deref(),
        Some("exclusive-cpus 0\n"),
        "released: shared from now on"
    );
    drop(controller);
    std::fs::remove_file(dir.path().join(CPU_MANAGER_STATE)).expect("delete");
    let controller = start(dir.path(), &host).expect("start");
    assert_eq!(controller.counters.state_rebuilds_total, 1);
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        None,
        "the release holds"
    );
    assert_eq!(host.tree().children[&name("pinion-run-a")].cpus, shared);
}

/// Found from outside (session 46): a run released while its processes
/// could not be listed (`EACCES`, `EIO` on `cgroup.procs`) had its CPUs
/// freed durably, but its cgroup kept the exclusive cpuset and its record
/// the exclusive count: the next admission got the same CPUs while the
/// run's processes still ran on them. It is now kept in the shared pool
/// like a run released with processes left, until the reconcile pass sees
/// its cgroup empty.
#[test]
fn regression_a_run_released_while_its_processes_cannot_be_listed_moves_to_the_shared_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("2"), 41)).expect("a");
    host.tree().unreadable_procs.insert(name("pinion-run-a"));
    controller.release("pinion-run-a", None).expect("release");
    let b = admit(&mut controller, &run("pinion-run-b", Some("2"), 42)).expect("b");
    let a_now = host.tree().children[&name("pinion-run-a")].cpus.clone();
    assert_eq!(a_now, controller.engine.shared_pool());
    assert!(
        a_now.is_disjoint(&b.placement.cpus),
        "{a_now} and {}",
        b.placement.cpus
    );
    assert_eq!(
        b.placement.cpus, a.placement.cpus,
        "a's cpus were free again"
    );
    assert_eq!(
        run_record(dir.path(), "pinion-run-a").as_deref(),
        Some("exclusive-cpus 0\n")
    );
    // Readable again and empty: the reconcile pass releases it.
    host.tree().unreadable_procs.clear();
    host.tree()
        .children
        .get_mut(&name("pinion-run-a"))
        .expect("cgroup")
        .pids
        .clear();
    controller.reconcile();
    assert!(!host.tree().children.contains_key(&name("pinion-run-a")));
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert!(snapshot.workloads.iter().all(|w| w.pod != "pinion-run-a"));
}

/// Found from outside (thirty-third session), the same defect's second
/// half: on a machine with CPUs isolated at boot, shared runs hold the
/// default set without them, and the start's check for lost decisions
/// compared a run's CPUs with the default set alone. A run whose record
/// still asked for exclusive CPUs (an older agent's released run) made
/// every plain restart rebuild the state from the node and pin it again.
/// Now the restart keeps the state and corrects the record.
#[test]
fn regression_a_shared_run_on_an_isolcpus_machine_is_not_a_lost_decision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut spec = machine(1, 4, 2).spec().clone();
    spec.isolated = set("3,7");
    let node = SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(Topology::new(spec).expect("topology"))
    };
    let mut controller = node.clone().start(dir.path()).expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 41)).expect("admit");
    controller.release("pinion-run-a", None).expect("release");
    let shared = host.tree().children[&name("pinion-run-a")].cpus.clone();
    assert!(shared.is_disjoint(&set("3,7")), "{shared}");
    drop(controller);
    // What an agent before this fix left behind.
    std::fs::write(dir.path().join("runs/pinion-run-a"), "exclusive-cpus 2\n").expect("write");
    let controller = node.start(dir.path()).expect("restart");
    assert_eq!(
        controller.counters.state_rebuilds_total, 0,
        "{:?}",
        controller.start_report
    );
    assert_eq!(
        controller.state().assignment("pinion-run-a", RUN_CONTAINER),
        None
    );
    assert_eq!(host.tree().children[&name("pinion-run-a")].cpus, shared);
    assert_eq!(
        run_record(dir.path(), "pinion-run-a").as_deref(),
        Some("exclusive-cpus 0\n"),
        "the start corrects the record"
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
    assert_eq!(
        handle.snapshot().workloads[0].placement.cpus,
        admitted.placement.cpus
    );
    assert!(pool.has_changed().expect("alive"));
    assert_eq!(
        *pool.borrow_and_update(),
        set("0-7").difference(&admitted.placement.cpus)
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

fn two_numa_nodes(host: &FakeCgroups, policy: &str) -> SyntheticNode {
    // 2 NUMA nodes of 4 cores × 2 threads: node 0 = 0-3,8-11, node 1 = 4-7,12-15.
    let topology = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(topology).with_config(PolicyConfig {
            policy: Some("static".into()),
            num_reserved: Some(1),
            topology_manager_policy: Some(policy.into()),
            ..PolicyConfig::default()
        })
    }
}

#[test]
fn single_numa_node_topology_manager_rejects_a_spanning_request_and_keeps_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = two_numa_nodes(&host, "single-numa-node")
        .start(dir.path())
        .expect("start");
    let aligned = admit(&mut controller, &run("pinion-run-a", Some("4"), 10)).expect("fits");
    let cpus = &aligned.placement.cpus;
    assert_eq!(cpus.len(), 4);
    assert!(
        cpus.is_subset(&set("0-3,8-11")) || cpus.is_subset(&set("4-7,12-15")),
        "{cpus}"
    );
    let before = on_disk(dir.path());
    let err = admit(&mut controller, &run("pinion-run-b", Some("10"), 11)).expect_err("spans");
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

/// One memory-node rule for both front-ends. Regression: exclusive CPUs
/// narrowed `cpuset.mems` to their NUMA node and the shared pool to its
/// nodes; kubelet's static policy leaves them, and so does Pinion now. A
/// standalone run's cgroup takes its parent's memory nodes.
#[test]
fn both_front_ends_get_the_same_placements() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = two_numa_nodes(&host, "none")
        .start_with_runtime(dir.path())
        .expect("start");
    // The runtime's first Synchronize (nothing runs yet): a fresh start
    // with a runtime front-end hands out exclusive cpus after it.
    controller.sync_runtime(&[]).expect("first synchronize");
    let standalone = admit(&mut controller, &run("pinion-run-s", None, 10)).expect("run");
    let runtime = admit(&mut controller, &runtime_request("pod-r", None, "c1")).expect("nri");
    assert_eq!(standalone.placement, runtime.placement);
    assert!(runtime.placement.mems.is_empty(), "{:?}", runtime.placement);
    assert_eq!(runtime.placement.pool, Pool::Shared);
    let standalone = admit(&mut controller, &run("pinion-run-x", Some("2"), 11)).expect("x");
    let runtime = admit(&mut controller, &runtime_request("pod-x", Some("2"), "c2")).expect("y");
    for placement in [&standalone.placement, &runtime.placement] {
        assert!(placement.mems.is_empty(), "{placement:?}");
        assert_eq!(placement.resources.cpu_quota, Some(-1));
    }
    let tree = host.tree();
    let root_mems = tree.root.as_ref().expect("pinion's root").1.clone();
    assert_eq!(root_mems, set("0-1"), "pinion's root: every memory node");
    for id in ["pinion-run-s", "pinion-run-x"] {
        assert_eq!(
            tree.children[&name(id)].mems,
            root_mems,
            "{id}: the parent's"
        );
    }
}

#[test]
fn the_executor_sends_one_batch_of_runtime_updates_when_the_pool_shrinks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    admit(&mut controller, &runtime_request("pod-a", None, "ca")).expect("a");
    admit(
        &mut controller,
        &runtime_request("pod-b", Some("0.5"), "cb"),
    )
    .expect("b");
    assert!(
        updates.try_recv().is_err(),
        "shared admissions change nobody"
    );
    let x = admit(&mut controller, &runtime_request("pod-x", Some("2"), "cx")).expect("x");
    let batch = updates.try_recv().expect("one batch");
    let pool = set("0-7").difference(&x.placement.cpus);
    let ids: Vec<&str> = batch.iter().map(|u| u.container_id.as_str()).collect();
    assert_eq!(
        ids,
        ["ca", "cb"],
        "the new container is answered, not updated"
    );
    assert!(batch.iter().all(|u| u.placement.cpus == pool));
    assert!(updates.try_recv().is_err(), "a single batch");
    // The runtime failed to apply one: it is sent again at the next pass.
    controller.runtime_updates_failed(&["cb".to_string()]);
    controller.reconcile();
    let retry = updates.try_recv().expect("retry");
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].container_id, "cb");
}

#[test]
fn sync_runtime_releases_what_the_runtime_no_longer_runs_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    // The runtime's first Synchronize (nothing runs yet): a fresh start
    // with a runtime front-end hands out exclusive cpus after it.
    controller.sync_runtime(&[]).expect("first synchronize");
    let kept = admit(&mut controller, &runtime_request("pod-a", Some("2"), "ca")).expect("a");
    let ended = admit(&mut controller, &runtime_request("pod-b", Some("2"), "cb")).expect("b");
    let standalone = admit(&mut controller, &run("pinion-run-s", Some("1"), 10)).expect("run");
    let mut pool = controller.subscribe_shared_pool();
    let running = |id: &str, pod: &str, container: &str, cpus: Option<&CpuSet>| RunningContainer {
        key: (pod.to_string(), container.to_string()),
        container_id: id.to_string(),
        observed: Observed {
            cpus: cpus.cloned(),
            ..Observed::default()
        },
        pod: None,
        cgroup: None,
        late: None,
    };
    let list = vec![
        running("ca", "pod-a", "main", Some(&kept.placement.cpus)),
        running("cs", "pod-shared", "app", None),
    ];
    let (released, updates) = controller.sync_runtime(&list).expect("sync");
    assert_eq!(released.containers, vec!["pod-b/main".to_string()]);
    assert_eq!(released.cpus, ended.placement.cpus);
    let ids: Vec<&str> = updates.iter().map(|u| u.container_id.as_str()).collect();
    assert_eq!(
        ids,
        ["ca", "cs"],
        "placements differing from what runs are sent"
    );
    assert_eq!(updates[0].placement, kept.placement, "nothing moved");
    let state = controller.state();
    assert_eq!(
        state.assignment("pod-a", "main"),
        Some(&kept.placement.cpus)
    );
    assert_eq!(
        state.assignment("pinion-run-s", "main"),
        Some(&standalone.placement.cpus)
    );
    assert_eq!(state.assignment("pod-b", "main"), None);
    assert_eq!(&on_disk(dir.path()), state);
    assert!(pool.has_changed().expect("alive"));
    assert!(ended.placement.cpus.is_subset(&pool.borrow_and_update()));
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    let names: Vec<String> = snapshot
        .workloads
        .iter()
        .map(|w| format!("{}/{}", w.pod, w.container))
        .collect();
    assert_eq!(names, ["pinion-run-s/main", "pod-a/main", "pod-shared/app"]);
    // A second pass with the same list (now as applied) writes nothing.
    let written = durable(dir.path());
    let applied: Vec<RunningContainer> = updates
        .iter()
        .zip(&list)
        .map(|(u, r)| RunningContainer {
            observed: Observed {
                cpus: Some(u.placement.cpus.clone()),
                mems: Some(u.placement.mems.clone()),
                cpu_quota: u.placement.resources.cpu_quota,
            },
            ..r.clone()
        })
        .collect();
    let (again, updates) = controller.sync_runtime(&applied).expect("again");
    assert!(again.containers.is_empty());
    assert!(updates.is_empty(), "{updates:?}");
    assert_eq!(durable(dir.path()), written);
}

/// Issue 14: a failed flush fails every decision of its batch and rolls the
/// state back to the last durable point; nothing of it reaches a cgroup.
#[test]
fn a_failed_flush_fails_the_whole_batch_and_applies_nothing() {
    use pinion_host::fileops::{Effect, FileOp};
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, plan) = node(&host).start_with_faults(dir.path());
    let kept = admit(&mut controller, &run("pinion-run-kept", Some("1"), 9)).expect("kept");
    let durable_before = durable(dir.path());
    let state_before = controller.state().clone();
    plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(5));
    let answers = controller.run_batch(vec![
        Decision::Admit {
            request: Box::new(run("pinion-run-a", Some("2"), 10)),
            hints: Box::default(),
            plugins: None,
        },
        Decision::Admit {
            request: Box::new(run("pinion-run-b", None, 11)),
            hints: Box::default(),
            plugins: None,
        },
        Decision::Release {
            pod: "pinion-run-kept".into(),
            container: None,
            reach: Reach::All,
        },
    ]);
    assert_eq!(answers.len(), 3);
    for answer in &answers {
        let err = answer.as_ref().expect_err("the batch failed");
        assert!(matches!(err, ControlError::NotDurable { .. }), "{err}");
        assert!(err.to_string().contains("fdatasync"), "{err}");
    }
    assert_eq!(controller.state(), &state_before, "rolled back");
    assert_eq!(durable(dir.path()), durable_before);
    let tree = host.tree();
    assert!(
        !tree.children.contains_key(&name("pinion-run-a")),
        "cgroup removed"
    );
    assert!(!tree.children.contains_key(&name("pinion-run-b")));
    assert_eq!(
        tree.children[&name("pinion-run-kept")].pids,
        vec![9],
        "kept placed"
    );
    assert_eq!(
        tree.children[&name("pinion-run-kept")].cpus,
        kept.placement.cpus
    );
    drop(tree);
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.workloads.len(), 1);
    assert_eq!(snapshot.metrics.counters.journal_flush_failures_total, 1);
    // The next batch works.
    let again = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("again");
    assert_eq!(
        on_disk(dir.path()).assignment("pinion-run-a", "main"),
        Some(&again.placement.cpus)
    );
}

/// Issue 14: a batch of decisions is made durable by one flush.
#[test]
fn one_flush_makes_a_whole_batch_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let batches = |c: &Controller| {
        c.subscribe_snapshots()
            .borrow()
            .metrics
            .counters
            .journal_batches_total
    };
    let before = batches(&controller);
    let decisions = (0..5)
        .map(|n| Decision::Admit {
            request: Box::new(run(&format!("pinion-run-{n}"), Some("1"), 20 + n)),
            hints: Box::default(),
            plugins: None,
        })
        .collect();
    let answers = controller.run_batch(decisions);
    let cpus: Vec<CpuSet> = answers
        .into_iter()
        .map(|a| match a.expect("admitted") {
            Answer::Admitted(admitted) => admitted.placement.cpus,
            Answer::Released(_) => panic!("an admission"),
        })
        .collect();
    assert_eq!(batches(&controller), before + 1, "one flush");
    let disk = on_disk(dir.path());
    for (n, cpus) in cpus.iter().enumerate() {
        assert_eq!(
            disk.assignment(&format!("pinion-run-{n}"), "main"),
            Some(cpus)
        );
    }
    // Decisions stay ordered: the five are disjoint, in the order asked.
    let all = cpus.iter().fold(CpuSet::new(), |acc, c| acc.union(c));
    assert_eq!(all.len(), 5);
}

/// #17: the built-in plugins' state changes wait in their outbox; they do
/// not cause a flush of their own, go with the next flush (a failed one
/// gives them back), and `flush_plugin_state` flushes them on demand.
#[test]
fn plugin_state_changes_go_with_the_next_flush_and_survive_a_failed_one() {
    use pinion_host::fileops::{Effect, FileOp};
    use pinion_plugins::store::Outbox;
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, plan) = node(&host).start_with_faults(dir.path());
    let outbox = Outbox::new();
    let kept = controller.keep_plugin_state(outbox.clone(), "plugin-state/");
    assert!(kept.is_empty());
    let batches = |c: &Controller| c.counters.journal_batches_total;
    let entry = |key: &str| pinion_core::record::Record::Side {
        kind: "plugin-state/cpu".into(),
        key: key.into(),
        value: Some(serde_json::json!({ "k": key }).into()),
    };
    let side_of = |c: &Controller| {
        c.plugin_data
            .side()
            .get("plugin-state/cpu")
            .map(|entries| entries.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };

    // A shared run records nothing of its own: no flush, the change waits.
    outbox.push([entry("pod/a")]);
    let before = batches(&controller);
    admit(&mut controller, &run("pinion-run-shared", None, 7)).expect("shared");
    assert_eq!(
        batches(&controller),
        before,
        "no flush for the plugins alone"
    );
    assert_eq!(outbox.len(), 1);

    // A failed flush gives the change back, ahead of newer ones.
    plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(1));
    let err = admit(&mut controller, &run("pinion-run-a", Some("1"), 8)).expect_err("failed flush");
    assert!(matches!(err, ControlError::NotDurable { .. }), "{err}");
    assert!(
        side_of(&controller).is_empty(),
        "rolled back with the batch"
    );
    outbox.push([entry("pod/b")]);
    assert_eq!(outbox.take(), vec![entry("pod/a"), entry("pod/b")]);
    outbox.push([entry("pod/a"), entry("pod/b")]);

    // The next flush carries them.
    admit(&mut controller, &run("pinion-run-a", Some("1"), 8)).expect("admitted");
    assert!(outbox.is_empty());
    assert_eq!(side_of(&controller), ["pod/a", "pod/b"]);

    // On demand, alone.
    outbox.push([entry("pod/c")]);
    let before = batches(&controller);
    controller.flush_plugin_state().expect("flushed");
    assert_eq!(batches(&controller), before + 1);
    assert!(outbox.is_empty());

    // They are in the journal: a restart finds them.
    drop(controller);
    let parts = node(&host).parts_on(dir.path(), Box::new(host.clone()));
    let mut restarted = Controller::start(parts).expect("restart");
    let kept = restarted.keep_plugin_state(Outbox::new(), "plugin-state/");
    assert_eq!(
        kept["plugin-state/cpu"].keys().collect::<Vec<_>>(),
        ["pod/a", "pod/b", "pod/c"]
    );
}

/// Found from outside (session 43): a waiting plugin-state record larger
/// than the journal takes was put back with a log line, and the flush went
/// on without it — `pools set` answered 200 for a pin that was not on disk
/// and was gone after a restart. Such a record now fails the flush (the
/// batch rolls back, the record waits again) until a smaller value of the
/// same entry replaces it.
#[test]
fn regression_a_plugin_state_record_the_journal_cannot_take_fails_the_flush() {
    use pinion_plugins::store::Outbox;
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let outbox = Outbox::new();
    controller.keep_plugin_state(outbox.clone(), "plugin-state/");
    let rest = |text: String| pinion_core::record::Record::Side {
        kind: "plugin-state/cpu".into(),
        key: "rest".into(),
        value: Some(serde_json::json!({ "pins": text }).into()),
    };
    let side_rest = |c: &Controller| {
        c.plugin_data
            .side()
            .get("plugin-state/cpu")
            .and_then(|entries| entries.get("rest").cloned())
    };
    let too_large = rest("x".repeat(2 << 20));

    // On demand (`pools set`): refused, naming the entry and the limit.
    outbox.push([too_large.clone()]);
    let err = controller.flush_plugin_state().expect_err("too large");
    let text = err.to_string();
    assert!(
        matches!(err, ControlError::NotDurable { .. })
            && text.contains("\"plugin-state/cpu\" \"rest\"")
            && text.contains("limit"),
        "{text}"
    );
    assert_eq!(outbox.take(), vec![too_large.clone()], "it waits again");
    assert!(side_rest(&controller).is_none());

    // With an admission: the admission is refused and rolled back, not
    // acknowledged without the plugin's state.
    outbox.push([too_large]);
    let request = run("pinion-run-a", Some("1"), 8);
    let err = admit(&mut controller, &request).expect_err("not durable");
    assert!(matches!(err, ControlError::NotDurable { .. }), "{err}");
    assert!(
        controller
            .subscribe_snapshots()
            .borrow()
            .workloads
            .is_empty(),
        "rolled back"
    );

    // A smaller value of the same entry replaces it: both go through.
    let small = rest("two pins".into());
    outbox.push([small.clone()]);
    admit(&mut controller, &request).expect("admitted");
    assert!(outbox.is_empty());
    let pinion_core::record::Record::Side { value, .. } = &small else {
        unreachable!()
    };
    assert_eq!(side_rest(&controller).as_ref(), value.as_ref());

    // And it is on disk: a restart finds it.
    drop(controller);
    let mut restarted = start(dir.path(), &host).expect("restart");
    let kept = restarted.keep_plugin_state(Outbox::new(), "plugin-state/");
    assert_eq!(kept["plugin-state/cpu"].get("rest"), value.as_ref());
}

/// Admits runtime pod `uid` of two shared-pool containers, a and b.
fn admit_pod_of_a_and_b(controller: &mut Controller, uid: &str) {
    let mut template = runtime_request(uid, None, "id-a");
    let mut second = template.pod.containers[0].clone();
    template.pod.containers[0].name = "a".to_string();
    second.name = "b".to_string();
    template.pod.containers.push(second);
    for container in ["a", "b"] {
        let mut request = template.clone();
        request.container = container.to_string();
        request.frontend = Frontend::runtime(format!("{uid}-{container}"));
        admit(controller, &request).expect("admitted");
    }
}

/// A plugin's answer for `example.com/widget`, as the manager stores it.
fn widget() -> (
    BTreeSet<String>,
    pinion_core::plugin_allocation::PluginAllocations,
) {
    (
        BTreeSet::from(["example.com/widget".to_string()]),
        BTreeMap::from([(
            "example.com/widget".to_string(),
            pinion_core::plugin_allocation::PluginAllocation::default(),
        )]),
    )
}

/// Container a of pod `uid` (admitted with b) gets plugin allocations and
/// leaves; b runs on.
fn a_leaves_with_plugin_data(controller: &mut Controller, uid: &str) {
    admit_pod_of_a_and_b(controller, uid);
    let (resources, allocations) = widget();
    controller
        .record_allocations(&(uid.to_string(), "a".to_string()), resources, allocations)
        .expect("recorded");
    controller.release(uid, Some("a")).expect("released a");
}

/// The pods whose plugins have yet to hear of their removal.
fn pending_removals(controller: &Controller) -> Vec<String> {
    controller
        .subscribe_snapshots()
        .borrow()
        .pending_plugin_removals
        .clone()
}

/// Found while testing the next defect (forty-fourth session): when the
/// container of a pod that had plugin allocations left first, its
/// allocations were dropped, and when the pod's last container (with none)
/// left, no plugin heard of the pod's removal: they kept the first one's
/// resources for good.
#[test]
fn regression_plugins_hear_of_a_pod_whose_container_with_plugin_data_left_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    a_leaves_with_plugin_data(&mut controller, "pod-f");
    assert!(pending_removals(&controller).is_empty(), "b still runs");
    controller.release("pod-f", Some("b")).expect("released b");
    assert_eq!(pending_removals(&controller), ["pod-f"]);
}

/// The same when the pod goes after a restart: the pod is remembered
/// durably. Its plugins hear of its removal when the runtime removes its
/// sandbox (not while the sandbox is there), or, when it went while the
/// agent was down, at the runtime's first synchronize.
#[test]
fn plugins_hear_of_a_pod_whose_last_container_went_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    a_leaves_with_plugin_data(&mut controller, "pod-g");
    drop(controller);
    let mut controller = start(dir.path(), &host).expect("restart");
    let sandbox = pinion_host::cgroup::ContainerCgroup::resolve("/kubepods/pod-g").expect("cgroup");
    let restartable = BTreeMap::from([("pod-g".to_string(), vec![sandbox])]);
    controller
        .sync_runtime_holding(&[], &restartable)
        .expect("synchronized");
    assert!(
        pending_removals(&controller).is_empty(),
        "its sandbox is there"
    );
    controller.pod_removed("pod-g");
    assert_eq!(pending_removals(&controller), ["pod-g"]);
    controller.plugin_pod_removed("pod-g");
    controller.flush_plugin_state().expect("flushed");

    a_leaves_with_plugin_data(&mut controller, "pod-h");
    drop(controller);
    let mut controller = start(dir.path(), &host).expect("restart");
    assert!(pending_removals(&controller).is_empty());
    controller.sync_runtime(&[]).expect("synchronized");
    assert_eq!(pending_removals(&controller), ["pod-h"]);
}

/// Found from outside (forty-fourth session): an admission whose plugins
/// had allocated (their answers in the batch) and whose process then could
/// not be placed was undone without its plugins hearing of it: its answers
/// stayed in the side data and no `RemovePod` was ever sent.
#[test]
fn regression_an_admission_undone_after_its_plugins_allocated_has_them_forget_the_pod() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let (resources, allocations) = widget();
    host.tree().fail_writes = true;
    let answers = controller.run_batch(vec![super::batch::Decision::Admit {
        request: Box::new(run("pinion-run-u", Some("1"), 7)),
        hints: Box::new(GatheredHints::default()),
        plugins: Some(Box::new(StoredAllocations {
            resources,
            allocations,
        })),
    }]);
    host.tree().fail_writes = false;
    assert!(answers.iter().all(Result::is_err), "{answers:?}");
    assert_eq!(
        controller.state().assignment("pinion-run-u", RUN_CONTAINER),
        None
    );
    assert_eq!(pending_removals(&controller), ["pinion-run-u"]);
    drop(controller);
    let controller = start(dir.path(), &host).expect("restart");
    assert_eq!(pending_removals(&controller), ["pinion-run-u"], "durable");
    assert!(controller.workloads.is_empty(), "no answers left behind");
}

/// Found from outside (forty-third session): a re-allocation whose
/// container left while its plugins allocated again was only logged
/// (`NotFound`). Its `Allocate` may reach the plugins after the pod's
/// `RemovePod`, and nothing told them to forget the pod again: they kept
/// its resources for good.
#[test]
fn regression_a_reallocation_for_a_departed_pod_makes_its_plugins_forget_it_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    a_leaves_with_plugin_data(&mut controller, "pod-r");
    let a = ("pod-r".to_string(), "a".to_string());
    let b = ("pod-r".to_string(), "b".to_string());
    // A re-allocation of a, which left, while b runs: nothing to forget
    // yet (the pod's removal comes with b's).
    let (resources, allocations) = widget();
    assert!(matches!(
        controller.record_reallocation(&a, resources, allocations),
        Err(ControlError::NotFound { .. })
    ));
    assert!(pending_removals(&controller).is_empty());
    controller.release("pod-r", Some("b")).expect("released b");
    assert_eq!(pending_removals(&controller), ["pod-r"]);
    controller.plugin_pod_removed("pod-r");
    assert!(pending_removals(&controller).is_empty());
    // The plugins heard of the removal; then a re-allocation started
    // before it is answered.
    let (resources, allocations) = widget();
    assert!(matches!(
        controller.record_reallocation(&b, resources, allocations),
        Err(ControlError::NotFound { .. })
    ));
    assert_eq!(
        pending_removals(&controller),
        ["pod-r"],
        "they must forget it again"
    );
}

/// #17: "every plugin heard of the pod's removal" is journalled with the
/// next flush rather than a flush of its own (its loss costs one repeated,
/// idempotent `RemovePod` after a restart).
#[test]
fn a_pod_every_plugin_heard_of_is_recorded_with_the_next_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let request = run("pinion-run-w", None, 7);
    admit(&mut controller, &request).expect("admitted");
    let key = (request.pod.uid.clone(), request.container.clone());
    let allocation = pinion_core::plugin_allocation::PluginAllocation {
        envs: BTreeMap::from([("W".to_string(), "1".to_string())]),
        ..Default::default()
    };
    controller
        .record_allocations(
            &key,
            BTreeSet::from(["example.com/widget".to_string()]),
            BTreeMap::from([("example.com/widget".to_string(), allocation)]),
        )
        .expect("recorded");
    controller.release(&key.0, None).expect("released");
    let pending = |c: &Controller| {
        c.subscribe_snapshots()
            .borrow()
            .pending_plugin_removals
            .clone()
    };
    assert_eq!(pending(&controller), vec![key.0.clone()]);

    let before = controller.counters.journal_batches_total;
    controller.plugin_pod_removed(&key.0);
    assert!(pending(&controller).is_empty());
    assert_eq!(
        controller.counters.journal_batches_total, before,
        "no flush of its own"
    );
    // A restart now: the pod is pending again (its plugins hear again).
    drop(controller);
    let mut controller = start(dir.path(), &host).expect("restart");
    assert_eq!(pending(&controller), vec![key.0.clone()]);
    controller.plugin_pod_removed(&key.0);
    // The next flush carries it; after a restart nothing is pending.
    admit(&mut controller, &run("pinion-run-x", Some("1"), 8)).expect("admitted");
    drop(controller);
    let controller = start(dir.path(), &host).expect("restart");
    assert!(pending(&controller).is_empty());
}

mod holes;
mod housekeeping;
mod partitions;
mod pod_quota;
mod runtime_drift;
mod runtime_partitions;
mod structure;

/// Found from outside (session 45): an admission flushed whose process
/// could not be placed (it exited) is undone by a second batch; when that
/// batch's flush failed, memory freed the CPUs while the disk still held
/// them. The next admission was given the same CPUs, and a restart found
/// both holding them. Now nothing is undone in memory; the reconcile pass
/// releases the run that never started.
#[test]
fn regression_an_undo_that_cannot_be_flushed_frees_no_cpu_the_disk_still_holds() {
    use pinion_host::fileops::{Effect, FileOp};
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let node = SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (mut controller, plan) = node.start_with_faults(dir.path());
    host.tree().gone_pids.insert(7);
    plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Pass); // the admission
    plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(5)); // its undo
    controller
        .admit(
            &run_request("pinion-run-u", Some("2"), Some(7)),
            &GatheredHints::default(),
        )
        .expect_err("its process is gone");
    assert_eq!(plan.pending(), 0);
    let held = controller
        .state()
        .assignment("pinion-run-u", RUN_CONTAINER)
        .cloned()
        .expect("kept while the disk holds it");
    let other = controller
        .admit(
            &run_request("pinion-run-v", Some("2"), Some(8)),
            &GatheredHints::default(),
        )
        .expect("admitted");
    assert!(
        other.placement.cpus.is_disjoint(&held),
        "{held} given twice"
    );

    let report = controller.reconcile();
    assert_eq!(report.released, ["pinion-run-u/main"]);
    drop(controller);
    let restarted = node.start(dir.path()).expect("restart");
    assert_eq!(
        restarted.state().assignment("pinion-run-u", RUN_CONTAINER),
        None
    );
    assert_eq!(
        restarted.state().assignment("pinion-run-v", RUN_CONTAINER),
        Some(&other.placement.cpus)
    );
}

/// Found from outside (session 45): the copy kept before a migration at
/// start ("the checkpoint before the migration is kept as …") was a link
/// to the checkpoint file, which lacks the journal's records since the last
/// compaction, while what was migrated was the checkpoint with them. After
/// an unclean stop and a config change, the copy silently lacked every
/// acknowledged decision since that compaction.
#[test]
fn regression_the_copy_kept_before_a_migration_holds_the_journals_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("1"), 41)).expect("a");
    let b = admit(&mut controller, &run("pinion-run-b", Some("1"), 42)).expect("b");
    drop(controller);
    let file = std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("checkpoint");
    let file = String::from_utf8(file).expect("utf-8");
    assert!(
        !file.contains("pinion-run-a"),
        "in the journal only: {file}"
    );
    let changed = node(&host).with_config(PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(b.placement.cpus.len()),
        reserved: Some(b.placement.cpus.clone()),
        ..PolicyConfig::default()
    });
    let mut parts = changed.parts_on(dir.path(), Box::new(host.clone()));
    parts.migrate_on_start = MigrateOnStart::Always;
    let controller = Controller::start(parts).expect("migrated");
    assert_eq!(controller.counters.state_migrations_total, 1);
    let kept = std::fs::read(dir.path().join("cpu_manager_state.pre-migrate-1")).expect("kept");
    let kept = pinion_core::checkpoint::decode_verified(&kept)
        .expect("a checkpoint kubelet reads")
        .to_state()
        .expect("parses");
    assert_eq!(
        kept.assignments["pinion-run-a"][RUN_CONTAINER],
        a.placement.cpus
    );
    assert_eq!(
        kept.assignments["pinion-run-b"][RUN_CONTAINER],
        b.placement.cpus
    );
}

/// Found from outside (session 47): podresources' `Get` of a name two pods
/// share (a StatefulSet's pod terminating while its successor runs)
/// answered the lowest UID; kubelet answers the pod it added last.
#[test]
fn regression_podresources_get_answers_the_pod_admitted_last_under_a_shared_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    // Both pods are named alike; the successor's UID sorts last. v1 has
    // no UID: each is told by its container's exclusive CPUs.
    let a = admit(&mut controller, &runtime_request("pod-a", Some("1"), "ca")).expect("admit a");
    let b = admit(&mut controller, &runtime_request("pod-b", Some("1"), "cb")).expect("admit b");
    assert_ne!(a.placement.cpus, b.placement.cpus);
    let cpus_of =
        |placement: &Placement| -> Vec<i64> { placement.cpus.iter().map(i64::from).collect() };
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    let pod = &snapshot.pods["pod-a"];
    let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
    assert_eq!(
        (
            &snapshot.pods["pod-b"].namespace,
            &snapshot.pods["pod-b"].name
        ),
        (&namespace, &name),
        "the two pods share a name"
    );
    let answered = |snapshot: &Snapshot| -> Vec<i64> {
        let found = crate::podresources::get(snapshot, &namespace, &name).expect("found");
        found.containers[0].cpu_ids.clone()
    };
    assert_eq!(
        answered(&snapshot),
        cpus_of(&b.placement),
        "the pod admitted last, not the lowest UID"
    );

    // A new runtime container of the earlier pod keeps its placement: no
    // new admission, the answer stays.
    admit(&mut controller, &runtime_request("pod-a", Some("1"), "ca2")).expect("readmit a");
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(answered(&snapshot), cpus_of(&b.placement));
}
