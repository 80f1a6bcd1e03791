//! Owns the tests of rebuilding runtime containers from `Synchronize` after a lost checkpoint.
//!
//! Rebuilding runtime containers from `Synchronize` after a lost
//! checkpoint, with conflicting claims (fake cgroups, no NRI socket: the
//! controller is driven directly).

use std::sync::Arc;

use pinion_core::CpuSet;
use pinion_host::cgroup::fake::FakeCgroups;

use super::super::{Observed, RunningContainer};
use crate::testing::{machine, runtime_request, SyntheticNode};

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

/// Container `uid`/main asking for `cpus` CPUs, which the runtime reports
/// on `on` (without a CFS quota when placed exclusively).
fn running(uid: &str, cpus: &str, on: &str) -> RunningContainer {
    let exclusive = !cpus.contains('.');
    let request = runtime_request(uid, Some(cpus), &format!("id-{uid}"));
    RunningContainer {
        key: (uid.to_string(), request.container.clone()),
        container_id: format!("id-{uid}"),
        observed: Observed {
            cpus: Some(set(on)),
            mems: Some(set("0")),
            cpu_quota: exclusive.then_some(-1),
        },
        pod: Some(Arc::new(request.pod)),
        cgroup: None,
        late: None,
    }
}

#[test]
fn conflicting_runtime_claims_are_resolved_by_the_rule_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = SyntheticNode {
        host: FakeCgroups::default(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (mut controller, _updates) = node.start_with_runtime(dir.path()).expect("start");
    // pod-a and pod-b both claim cpu 2; pod-s is a shared container.
    let containers = [
        running("pod-a", "2", "1-2"),
        running("pod-b", "2", "2-3"),
        running("pod-s", "0.5", "0,4-7"),
    ];
    let (_, updates) = controller.sync_runtime(&containers).expect("sync");
    let state = controller.state();
    assert_eq!(state.assignment("pod-a", "main"), Some(&set("1-2")));
    let b = state
        .assignment("pod-b", "main")
        .expect("b keeps cpus")
        .clone();
    assert_eq!(b.len(), 2, "{b}");
    assert!(b.contains(3) && !b.contains(2), "{b}");
    assert_eq!(state.assignment("pod-s", "main"), None);
    assert_eq!(controller.counters.state_rebuilds_total, 1);
    assert_eq!(controller.counters.state_rebuild_conflicts_total, 1);
    assert!(
        controller.start_report.lines.iter().any(|l| l
            .starts_with("conflict: pod-b/main had cpus 2-3, now cpus ")
            && l.ends_with("cpus 2 are kept by pod-a/main")),
        "{:?}",
        controller.start_report.lines
    );
    // Only the moved container gets an update (and the shared one, whose
    // pool shrank by pod-b's new cpu).
    let moved: Vec<&str> = updates.iter().map(|u| u.container_id.as_str()).collect();
    assert!(moved.contains(&"id-pod-b"), "{moved:?}");
    assert!(!moved.contains(&"id-pod-a"), "{moved:?}");
    // Once only: a later Synchronize (the runtime restarted) rebuilds nothing.
    controller.sync_runtime(&containers).expect("sync");
    assert_eq!(controller.counters.state_rebuilds_total, 1);
}

/// A rebuild that cannot be made durable changes nothing and is tried
/// again at the next `Synchronize`.
#[test]
fn a_runtime_rebuild_that_cannot_be_flushed_changes_nothing_and_is_retried() {
    use pinion_host::fileops::{Effect, Faults, FileOp};
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let node = SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (faults, plan) = Faults::new();
    let (tx, _updates) = tokio::sync::mpsc::unbounded_channel();
    let mut parts = node.parts_on(dir.path(), Box::new(host));
    parts.file_ops = Some(Box::new(faults));
    parts.runtime_updates = Some(tx);
    let mut controller = super::super::Controller::start(parts).expect("start");
    let containers = [running("pod-a", "2", "1-2")];
    plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(5));
    let err = controller
        .sync_runtime(&containers)
        .expect_err("not durable");
    assert!(err.to_string().contains("fdatasync"), "{err}");
    assert!(controller.state().assignments.is_empty(), "nothing changed");
    assert_eq!(controller.counters.state_rebuilds_total, 0);
    assert!(controller.start_report.lines.is_empty());
    controller.sync_runtime(&containers).expect("sync");
    assert_eq!(
        controller.state().assignment("pod-a", "main"),
        Some(&set("1-2"))
    );
    assert_eq!(controller.counters.state_rebuilds_total, 1);
}

/// Found from outside (session 43): a checkpoint that cannot be migrated
/// (v1 entries) started degraded, rebuilt from Pinion's own runs only, and
/// left the runtime's first `Synchronize` without a rebuild: a running
/// exclusive runtime container got the shared pool and was moved there,
/// although the degraded message says the running workloads stay where
/// they run. Its first `Synchronize` now rebuilds from what runs.
#[test]
fn regression_an_unmigratable_checkpoint_keeps_running_runtime_containers_on_their_cpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = br#"{"policyName":"static","defaultCpuSet":"0,2-7","entries":{"0123abcd":"1"},"checksum":0}"#;
    std::fs::write(dir.path().join("cpu_manager_state"), v1).expect("write");
    let node = SyntheticNode {
        host: FakeCgroups::default(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (mut controller, _updates) = node
        .start_with_runtime(dir.path())
        .expect("starts degraded");
    assert!(controller.start_report.degraded.is_some());
    let containers = [
        running("pod-a", "2", "1-2"),
        running("pod-s", "0.5", "0,3-7"),
    ];
    let (_, updates) = controller.sync_runtime(&containers).expect("sync");
    assert_eq!(
        controller.state().assignment("pod-a", "main"),
        Some(&set("1-2"))
    );
    let moved: Vec<&str> = updates.iter().map(|u| u.container_id.as_str()).collect();
    assert!(!moved.contains(&"id-pod-a"), "{moved:?}");
}

/// Found from outside (session 43): after a start that rebuilt the state
/// from the node (a lost or unreadable checkpoint, a journal cut short),
/// the runtime's containers — in no cgroup of Pinion's — were unknown until
/// its first `Synchronize`, yet a standalone run was given exclusive CPUs
/// meanwhile: the CPUs of a running Kubernetes container. Exclusive
/// admissions now wait for that `Synchronize`; shared ones do not.
#[test]
fn regression_exclusive_cpus_wait_for_the_runtimes_first_synchronize_after_a_rebuild() {
    use crate::testing::run_request;
    let dir = tempfile::tempdir().expect("tempdir");
    let node = SyntheticNode {
        host: FakeCgroups::default(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (mut controller, _updates) = node.start_with_runtime(dir.path()).expect("start");
    assert!(
        controller.start_report.runtime_rebuild.is_some(),
        "no checkpoint"
    );
    let err = controller
        .admit(
            &run_request("pinion-run-x", Some("2"), Some(41)),
            &Default::default(),
        )
        .expect_err("held back");
    assert!(
        matches!(err, super::super::ControlError::Degraded { .. })
            && err.to_string().contains("first Synchronize"),
        "{err}"
    );
    controller
        .admit(
            &run_request("pinion-run-s", None, Some(42)),
            &Default::default(),
        )
        .expect("a shared run goes");

    // The runtime says what runs: pod-a holds 1-2; a run then gets others.
    controller
        .sync_runtime(&[running("pod-a", "2", "1-2")])
        .expect("sync");
    let run = controller
        .admit(
            &run_request("pinion-run-x", Some("2"), Some(41)),
            &Default::default(),
        )
        .expect("admitted after the Synchronize");
    assert!(run.placement.cpus.is_disjoint(&set("1-2")), "{run:?}");
}

/// Found from outside (session 45): that the runtime's containers were
/// still to be rebuilt from its first `Synchronize` was known in memory
/// only, while the start's own flush and fresh checkpoint already said
/// "none of them". An agent that stopped before that `Synchronize` (a
/// rollout, an OOM kill) started again from a valid checkpoint without
/// them: their exclusive CPUs went to the shared pool, and a standalone run
/// could be given them meanwhile. The pending rebuild is now durable.
#[test]
fn regression_a_pending_runtime_rebuild_survives_a_second_restart() {
    use crate::testing::run_request;
    let dir = tempfile::tempdir().expect("tempdir");
    let node = SyntheticNode {
        host: FakeCgroups::default(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (controller, _updates) = node.clone().start_with_runtime(dir.path()).expect("start");
    let why = controller
        .start_report
        .runtime_rebuild
        .clone()
        .expect("no checkpoint");
    drop(controller);

    let (mut controller, _updates) = node.clone().start_with_runtime(dir.path()).expect("again");
    assert_eq!(controller.start_report.runtime_rebuild, Some(why));
    assert!(
        controller
            .admit(
                &run_request("pinion-run-x", Some("2"), Some(41)),
                &Default::default(),
            )
            .is_err(),
        "exclusive runs still wait for the Synchronize"
    );
    controller
        .sync_runtime(&[running("pod-a", "2", "1-2")])
        .expect("sync");
    assert_eq!(
        controller.state().assignment("pod-a", "main"),
        Some(&set("1-2"))
    );
    drop(controller);

    // Done: a third start has nothing pending.
    let (controller, _updates) = node.start_with_runtime(dir.path()).expect("third");
    assert_eq!(controller.start_report.runtime_rebuild, None);
    assert_eq!(
        controller.state().assignment("pod-a", "main"),
        Some(&set("1-2"))
    );
}

/// Found from outside (session 45): an agent that started degraded on a
/// checkpoint that cannot be migrated journals its rebuilt state on top of
/// that file. Stopped before the start's compaction replaced the file, it
/// could never start again: "cannot take the journal's N records". The
/// journal is now kept aside and the state rebuilt from the node, as for a
/// journal that cannot be read to its end.
#[test]
fn regression_a_journal_on_an_unmigratable_checkpoint_does_not_stop_the_next_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = br#"{"policyName":"static","defaultCpuSet":"0,2-7","entries":{"0123abcd":"1"},"checksum":0}"#;
    std::fs::write(dir.path().join("cpu_manager_state"), v1).expect("write");
    let mut opened = pinion_host::journal::StateStore::open(dir.path(), "static").expect("open");
    opened
        .store
        .record(&pinion_core::record::Record::Assign {
            pod: "pod-a".into(),
            container: "main".into(),
            cpus: set("1-2"),
        })
        .expect("record");
    opened.store.flush().expect("flush");
    drop(opened);

    let node = SyntheticNode {
        host: FakeCgroups::default(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (mut controller, _updates) = node.start_with_runtime(dir.path()).expect("starts");
    let report = &controller.start_report;
    assert!(report.rebuilt, "{:?}", report.lines);
    assert!(
        report
            .runtime_rebuild
            .as_ref()
            .is_some_and(|why| why.contains("cannot take")),
        "{report:?}"
    );
    assert!(dir.path().join("pinion_journal.unreplayable-1").exists());
    controller
        .sync_runtime(&[running("pod-a", "2", "1-2")])
        .expect("sync");
    assert_eq!(
        controller.state().assignment("pod-a", "main"),
        Some(&set("1-2"))
    );
}
