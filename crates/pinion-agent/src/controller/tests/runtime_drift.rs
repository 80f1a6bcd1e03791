//! Owns the tests of the reconcile pass over runtime (NRI) containers.
//!
//! Issue 28 item 5: the reconcile pass covers runtime (NRI) containers —
//! their cgroup is read back and a changed cpuset is sent again through
//! the executor — and a Guaranteed container the runtime created while no
//! plugin was connected is admitted at `Synchronize`.

use std::sync::Arc;

use pinion_host::cgroup::{ContainerCgroup, ContainerCpuset};

use super::*;

fn cgroup(id: &str) -> ContainerCgroup {
    ContainerCgroup::resolve(&format!("/kubepods/pod-x/{id}")).expect("path")
}

/// A runtime container `id` of pod `uid` asking for `cpus`, in its cgroup.
fn in_cgroup(uid: &str, cpus: &str, id: &str) -> AdmitRequest {
    let mut request = runtime_request(uid, Some(cpus), id);
    request.frontend = Frontend::runtime_in(id, Some(cgroup(id)));
    request
}

/// Admits runtime container `id` and marks it started (NRI
/// `StartContainer`): the reconcile pass compares it from then on.
fn admit_started(controller: &mut Controller, uid: &str, cpus: &str, id: &str) -> Admitted {
    let admitted = admit(controller, &in_cgroup(uid, cpus, id)).expect("admit");
    assert!(controller.container_started(id), "{id} is known");
    admitted
}

/// What the runtime wrote into container `id`'s cgroup.
fn runtime_wrote(host: &FakeCgroups, id: &str, cpus: &CpuSet, mems: &CpuSet) {
    host.tree().containers.insert(
        cgroup(id),
        ContainerCpuset {
            cpus: Some(cpus.clone()),
            mems: Some(mems.clone()),
        },
    );
}

#[test]
fn reconcile_sends_a_runtime_containers_changed_cpuset_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let g = admit_started(&mut controller, "pod-g", "2", "cg");
    let b = admit_started(&mut controller, "pod-b", "500m", "cb");
    answer_updates(&mut controller, &mut updates);
    runtime_wrote(&host, "cg", &g.placement.cpus, &g.placement.mems);
    runtime_wrote(&host, "cb", &b.placement.cpus, &b.placement.mems);
    assert_eq!(
        controller.reconcile(),
        ReconcileReport::default(),
        "nothing changed"
    );
    assert!(updates.try_recv().is_err(), "no update without drift");

    // Someone widens the Guaranteed container's cpuset by hand.
    runtime_wrote(&host, "cg", &set("0-7"), &g.placement.mems);
    let report = controller.reconcile();
    assert_eq!(
        report.repaired,
        vec!["pod-g/main (/kubepods/pod-x/cg)".to_string()]
    );
    let sent = answer_updates(&mut controller, &mut updates);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].container_id, "cg");
    assert_eq!(sent[0].placement, g.placement, "its placement again");
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.metrics.counters.runtime_drift_repairs_total, 1);
    assert_eq!(
        snapshot.metrics.counters.drift_repairs_total, 0,
        "no cgroup of Pinion's"
    );

    // The runtime applied it: the next pass finds nothing.
    runtime_wrote(&host, "cg", &g.placement.cpus, &g.placement.mems);
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    assert!(updates.try_recv().is_err());
}

/// Regression: in the TCG guest's pod churn containerd left a shared
/// container's cpuset narrower than the update a reply carried; the
/// repair went out unsolicited as one that takes CPUs away, 2 s into the
/// runtime's apparent quiet, and wedged containerd 1.7. A repair that only
/// gives back what is missing now waits like any growth; one that takes
/// CPUs a writer added does not.
#[test]
fn regression_a_repair_that_gives_back_missing_cpus_is_a_growth() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let b = admit_started(&mut controller, "pod-b", "500m", "cb");
    answer_updates(&mut controller, &mut updates);
    let pool = b.placement.cpus.clone();
    let narrower = CpuSet::from_iter(pool.iter().take(1));
    runtime_wrote(&host, "cb", &narrower, &b.placement.mems);
    assert_eq!(controller.reconcile().repaired.len(), 1);
    let sent = answer_updates(&mut controller, &mut updates);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].placement.cpus, pool);
    assert!(sent[0].only_adds, "gives back CPUs only: {:?}", sent[0]);
    runtime_wrote(&host, "cb", &pool, &b.placement.mems);
    assert_eq!(controller.reconcile(), ReconcileReport::default());

    // A Guaranteed container's CPUs leave the pool; someone gives them
    // back to b by hand.
    let g = admit_started(&mut controller, "pod-g", "2", "cg");
    answer_updates(&mut controller, &mut updates);
    runtime_wrote(&host, "cg", &g.placement.cpus, &g.placement.mems);
    let pool = pool.difference(&g.placement.cpus);
    runtime_wrote(&host, "cb", &pool, &b.placement.mems);
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    runtime_wrote(
        &host,
        "cb",
        &pool.union(&g.placement.cpus),
        &b.placement.mems,
    );
    assert_eq!(controller.reconcile().repaired.len(), 1, "pool {pool}");
    let sent = answer_updates(&mut controller, &mut updates);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].placement.cpus, pool);
    assert!(!sent[0].only_adds, "takes CPUs away: {:?}", sent[0]);
}

#[test]
fn changed_memory_nodes_are_drift_and_a_gone_cgroup_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let b = admit_started(&mut controller, "pod-b", "500m", "cb");
    admit_started(&mut controller, "pod-c", "1", "cc");
    answer_updates(&mut controller, &mut updates);
    // cc's cgroup is gone (the container ended; its stop event releases it).
    host.tree().containers.insert(
        cgroup("cb"),
        ContainerCpuset {
            cpus: Some(b.placement.cpus.clone()),
            mems: None,
        },
    );
    let report = controller.reconcile();
    assert_eq!(
        report.repaired,
        vec!["pod-b/main (/kubepods/pod-x/cb)".to_string()]
    );
    let sent = updates.try_recv().expect("an update");
    assert_eq!(
        sent.iter()
            .map(|u| u.container_id.as_str())
            .collect::<Vec<_>>(),
        ["cb"]
    );
}

#[test]
fn an_update_in_flight_is_not_counted_as_drift() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let b = admit_started(&mut controller, "pod-b", "500m", "cb");
    runtime_wrote(&host, "cb", &b.placement.cpus, &b.placement.mems);
    // The runtime failed to apply an update: not applied, retried by the
    // executor, not drift.
    controller.runtime_updates_failed(&["cb".to_string()]);
    answer_updates(&mut controller, &mut updates);
    let report = controller.reconcile();
    assert!(report.repaired.is_empty(), "{report:?}");
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.metrics.counters.runtime_drift_repairs_total, 0);
    let sent = updates.try_recv().expect("the retry");
    assert_eq!(sent[0].container_id, "cb");
}

/// Found under a real kubelet: between `CreateContainer` and
/// `StartContainer` the container's cgroup does not hold what runc will
/// write yet; the pass took that for a foreign write and sent an update
/// to a container the runtime had not started.
#[test]
fn regression_a_container_not_started_yet_is_not_compared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let g = admit(&mut controller, &in_cgroup("pod-g", "2", "cg")).expect("g");
    answer_updates(&mut controller, &mut updates);
    // Created, not started: the cgroup holds its parent's cpus.
    runtime_wrote(&host, "cg", &set("0-7"), &set("0"));
    let report = controller.reconcile();
    assert!(report.repaired.is_empty(), "{report:?}");
    assert!(updates.try_recv().is_err(), "no update before the start");
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert!(
        snapshot.metrics.counters.foreign_writes_total.is_empty(),
        "{:?}",
        snapshot.metrics.counters.foreign_writes_total
    );

    // Started: runc wrote the placement; nothing to repair.
    runtime_wrote(&host, "cg", &g.placement.cpus, &g.placement.mems);
    assert!(controller.container_started("cg"));
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    // And a later write by hand is drift again.
    runtime_wrote(&host, "cg", &set("0-7"), &g.placement.mems);
    assert_eq!(controller.reconcile().repaired.len(), 1);
}

/// Found under a real kubelet: containerd applies an update with one
/// `runc update` per container, which under load takes longer than a
/// reconcile period; the pass read the cgroup before the runtime had
/// written it, took the old value for a foreign write and sent the update
/// again, every period, feeding the runtime's backlog.
#[test]
fn regression_a_pass_while_the_runtime_applies_an_update_is_no_foreign_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let b = admit_started(&mut controller, "pod-b", "500m", "cb");
    answer_updates(&mut controller, &mut updates);
    runtime_wrote(&host, "cb", &b.placement.cpus, &b.placement.mems);
    // An exclusive admission shrinks the shared pool: b gets an update the
    // runtime has not answered yet; its cgroup still holds the old pool.
    let g = admit_started(&mut controller, "pod-g", "2", "cg");
    runtime_wrote(&host, "cg", &g.placement.cpus, &g.placement.mems);
    let sent: Vec<RuntimeUpdate> = std::iter::from_fn(|| updates.try_recv().ok())
        .flatten()
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].container_id, "cb");
    for _ in 0..3 {
        assert_eq!(controller.reconcile(), ReconcileReport::default());
    }
    assert!(
        updates.try_recv().is_err(),
        "not sent again while in flight"
    );
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert!(snapshot.metrics.counters.foreign_writes_total.is_empty());

    // The runtime answers that it applied it: compared again from then on.
    runtime_wrote(
        &host,
        "cb",
        &sent[0].placement.cpus,
        &sent[0].placement.mems,
    );
    controller.runtime_updates_applied(&["cb".to_string()]);
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    runtime_wrote(&host, "cb", &set("0-7"), &sent[0].placement.mems);
    assert_eq!(controller.reconcile().repaired.len(), 1, "drift again");

    // A refused update is sent again at the next pass, and not drift.
    let resent = answer_updates(&mut controller, &mut updates);
    assert_eq!(resent.len(), 1);
    runtime_wrote(&host, "cb", &b.placement.cpus, &b.placement.mems);
    controller.count_in_flight(&["cb"], true);
    controller.runtime_updates_failed(&["cb".to_string()]);
    let report = controller.reconcile();
    assert!(report.repaired.is_empty(), "{report:?}");
    assert_eq!(
        answer_updates(&mut controller, &mut updates).len(),
        1,
        "the retry"
    );
}

/// A writer that puts its value back after every repair (found under a
/// real kubelet: a repair loop every period). The repairs back off; a
/// repair that holds starts over.
#[test]
fn regression_a_repair_another_writer_undoes_backs_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let g = admit_started(&mut controller, "pod-g", "2", "cg");
    answer_updates(&mut controller, &mut updates);
    let mut repaired_in = Vec::new();
    for pass in 1..=20 {
        // The other writer's value, back before every pass.
        runtime_wrote(&host, "cg", &set("0-7"), &g.placement.mems);
        if !controller.reconcile().repaired.is_empty() {
            repaired_in.push(pass);
            let sent = answer_updates(&mut controller, &mut updates);
            assert_eq!(sent.len(), 1, "pass {pass}: one update");
            assert_eq!(sent[0].placement, g.placement);
        }
        assert!(
            updates.try_recv().is_err(),
            "pass {pass}: one update at most"
        );
    }
    assert_eq!(repaired_in, [1, 2, 4, 8, 16]);
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(
        snapshot
            .metrics
            .counters
            .foreign_writes_total
            .get("container"),
        Some(&5),
        "one foreign write per repair, not per pass"
    );
    assert_eq!(snapshot.metrics.counters.runtime_drift_repairs_total, 5);

    // The repair holds for one pass: the next change is repaired at once.
    runtime_wrote(&host, "cg", &g.placement.cpus, &g.placement.mems);
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    runtime_wrote(&host, "cg", &set("0-7"), &g.placement.mems);
    assert_eq!(controller.reconcile().repaired.len(), 1);
}

fn late(request: &AdmitRequest, id: &str, hints: Option<GatheredHints>) -> RunningContainer {
    RunningContainer {
        key: (request.pod.uid.clone(), request.container.clone()),
        container_id: id.to_string(),
        observed: Observed {
            cpus: None,
            mems: None,
            cpu_quota: Some(100_000),
        },
        pod: Some(Arc::new(request.pod.clone())),
        cgroup: Some(cgroup(id)),
        late: hints,
    }
}

#[test]
fn regression_a_guaranteed_container_created_while_no_plugin_was_connected_is_admitted_at_synchronize(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    // The runtime's first Synchronize (nothing ran yet), as on connecting.
    controller.sync_runtime(&[]).expect("first sync");
    let known = admit(&mut controller, &in_cgroup("pod-k", "2", "ck")).expect("k");
    drop(controller);
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("restart");
    let mut running_known = late(
        &in_cgroup("pod-k", "2", "ck"),
        "ck",
        Some(GatheredHints::default()),
    );
    running_known.observed = Observed {
        cpus: Some(known.placement.cpus.clone()),
        mems: Some(known.placement.mems.clone()),
        cpu_quota: Some(-1),
    };
    let g = in_cgroup("pod-late", "2", "cl");
    let shared = in_cgroup("pod-shared", "500m", "cs");
    let running = [
        running_known,
        late(&g, "cl", Some(GatheredHints::default())),
        late(&shared, "cs", Some(GatheredHints::default())),
    ];
    let (released, updates) = controller.sync_runtime(&running).expect("sync");
    assert!(released.containers.is_empty(), "{released:?}");
    let state = controller.state().clone();
    assert_eq!(
        state.assignment("pod-k", "main"),
        Some(&known.placement.cpus),
        "nothing moved"
    );
    let given = state
        .assignment("pod-late", "main")
        .expect("admitted")
        .clone();
    assert_eq!(given.len(), 2);
    assert!(
        given.is_disjoint(&known.placement.cpus),
        "no cpu handed out twice"
    );
    assert_eq!(
        state.assignment("pod-shared", "main"),
        None,
        "a shared container is not admitted"
    );
    let update = |id: &str| updates.iter().find(|u| u.container_id == id).cloned();
    let late_update = update("cl").expect("the late container gets an update");
    assert_eq!(late_update.placement.cpus, given);
    assert!(late_update.placement.is_exclusive());
    assert_eq!(late_update.placement.resources.cpu_quota, Some(-1));
    assert!(
        update("ck").is_none(),
        "the known container already runs where it should"
    );
    let pool = update("cs")
        .expect("the shared container follows the pool")
        .placement
        .cpus;
    assert!(pool.is_disjoint(&given) && pool.is_disjoint(&known.placement.cpus));
    assert_eq!(&on_disk(dir.path()), &state, "durable before the answer");
}

/// Regression: the cluster bed's node, after the agent's restart: the
/// `Synchronize` reply gave a container created while no plugin was
/// connected its exclusive CPUs, the reconcile pass read its cgroup before
/// containerd wrote them ("cpus 2-3 -> cpus (empty)"), took that for a
/// foreign write, and its repair went out unsolicited while containerd was
/// still applying the reply: containerd 1.7 deadlocked. A `Synchronize`
/// reply's updates are in flight until the runtime applied them.
#[test]
fn regression_a_synchronize_replys_updates_are_in_flight_until_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    // The runtime's first Synchronize (nothing ran yet), as on connecting.
    controller.sync_runtime(&[]).expect("first sync");
    drop(controller);
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("restart");
    let g = in_cgroup("pod-late", "2", "cl");
    let (_, updates) = controller
        .sync_runtime(&[late(&g, "cl", Some(GatheredHints::default()))])
        .expect("sync");
    let given = controller
        .state()
        .assignment("pod-late", "main")
        .expect("admitted")
        .clone();
    let mems = updates
        .iter()
        .find(|u| u.container_id == "cl")
        .expect("its update")
        .placement
        .mems
        .clone();
    // The runtime has not written it yet: its cgroup holds no cpuset.
    runtime_wrote(&host, "cl", &CpuSet::new(), &mems);
    assert_eq!(
        controller.reconcile(),
        ReconcileReport::default(),
        "not a foreign write while the update is in flight"
    );
    runtime_wrote(&host, "cl", &given, &mems);
    controller.runtime_updates_applied(&["cl".to_string()]);
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    // Once applied, a change is a foreign write again.
    runtime_wrote(&host, "cl", &CpuSet::new(), &mems);
    assert_eq!(controller.reconcile().repaired.len(), 1);
}

#[test]
fn a_late_container_that_does_not_fit_stays_shared_and_takes_no_held_cpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    // 8 cpus, one reserved: 6 held leaves 1 free.
    let big = admit(&mut controller, &in_cgroup("pod-big", "6", "cbig")).expect("big");
    let g = in_cgroup("pod-late", "2", "cl");
    let (_, updates) = controller
        .sync_runtime(&[
            {
                let mut r = late(&in_cgroup("pod-big", "6", "cbig"), "cbig", None);
                r.observed = Observed {
                    cpus: Some(big.placement.cpus.clone()),
                    mems: Some(big.placement.mems.clone()),
                    cpu_quota: Some(-1),
                };
                r
            },
            late(&g, "cl", Some(GatheredHints::default())),
        ])
        .expect("sync");
    assert_eq!(controller.state().assignment("pod-late", "main"), None);
    assert_eq!(
        controller.state().assignment("pod-big", "main"),
        Some(&big.placement.cpus)
    );
    let sent = updates
        .iter()
        .find(|u| u.container_id == "cl")
        .expect("shared pool");
    assert!(!sent.placement.is_exclusive());
    assert!(sent.placement.cpus.is_disjoint(&big.placement.cpus));
}

#[test]
fn a_container_the_handle_did_not_clear_for_admission_follows_the_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    let g = in_cgroup("pod-late", "2", "cl");
    let (_, updates) = controller
        .sync_runtime(&[late(&g, "cl", None)])
        .expect("sync");
    assert_eq!(controller.state().assignment("pod-late", "main"), None);
    assert!(!updates[0].placement.is_exclusive());
}

/// Regression: an NRI `UpdateContainer` reply's own update was read from a
/// snapshot, and a newer update of the same container queued before the
/// reply went out was dropped for it (the container went back to CPUs
/// another pod had just been given). Each update and each snapshot now
/// names the executor pass it comes from, so the front-end keeps the newer
/// of the two (`ContainerUpdate::order`).
#[test]
fn regression_runtime_updates_and_snapshots_name_the_pass_that_decided_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) = node(&host).start_with_runtime(dir.path()).expect("start");
    admit_started(&mut controller, "pod-b", "500m", "cb");
    answer_updates(&mut controller, &mut updates);
    let snapshots = controller.subscribe_snapshots();

    let mut passes = Vec::new();
    for (uid, id) in [("pod-g1", "cg1"), ("pod-g2", "cg2")] {
        admit_started(&mut controller, uid, "2", id);
        let sent = answer_updates(&mut controller, &mut updates);
        let shrink = sent
            .iter()
            .find(|u| u.container_id == "cb")
            .unwrap_or_else(|| panic!("the shared container shrinks: {sent:?}"));
        let snapshot = snapshots.borrow().clone();
        assert_eq!(
            snapshot.pass, shrink.pass,
            "the snapshot published after the update names its pass"
        );
        assert_eq!(
            snapshot.placement_of("pod-b", "main"),
            shrink.placement,
            "and holds the placement that pass decided"
        );
        passes.push(shrink.pass);
    }
    assert!(
        passes[0] > 0 && passes[1] > passes[0],
        "a later decision has a larger pass: {passes:?}"
    );
}
