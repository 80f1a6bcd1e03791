//! Owns the tests of housekeeping cgroups, other writers and the system partition on the fake host.
//!
//! Issue 31 items 2 and 6 on the fake host: housekeeping cgroups follow the
//! shared pool (shrunk before an exclusive run's process joins, grown after
//! its release), other writers are reported and repaired or yielded to,
//! and KEP-5894's system partition places its namespaces' shared
//! containers.

use std::collections::BTreeSet;

use pinion_core::drift::OtherWriters;
use pinion_host::cgroup::{ContainerCgroup, ContainerCpuset};

use super::*;
use crate::config::SystemPartition;

fn path(text: &str) -> ContainerCgroup {
    ContainerCgroup::resolve(text).expect("path")
}

fn isolation(cgroups: &[&str], mode: OtherWriters) -> Isolation {
    Isolation {
        housekeeping: cgroups.iter().map(|c| path(c)).collect(),
        pinion_root: Some("pinion".into()),
        other_writers: mode,
        system_partition: None,
    }
}

fn start_with(dir: &Path, host: &FakeCgroups, isolation: Isolation) -> Controller {
    let mut parts = node(host).parts_on(dir, Box::new(host.clone()));
    parts.isolation = isolation;
    Controller::start(parts).expect("start")
}

fn start_runtime_with(
    dir: &Path,
    host: &FakeCgroups,
    isolation: Isolation,
) -> (
    Controller,
    tokio::sync::mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut parts = node(host).parts_on(dir, Box::new(host.clone()));
    parts.isolation = isolation;
    parts.runtime_updates = Some(tx);
    (Controller::start(parts).expect("start"), rx)
}

fn system_slice(host: &FakeCgroups) -> Option<CpuSet> {
    host.tree().housekeeping[&path("/system.slice")].clone()
}

fn snapshot(controller: &Controller) -> Arc<Snapshot> {
    controller.subscribe_snapshots().borrow().clone()
}

fn name(text: &str) -> CgroupName {
    CgroupName::new(text).expect("name")
}

#[test]
fn a_housekeeping_cgroup_shrinks_before_an_exclusive_run_joins_and_grows_after_release() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    let mut controller = start_with(
        dir.path(),
        &host,
        isolation(&["/system.slice"], OtherWriters::Repair),
    );
    assert_eq!(
        system_slice(&host),
        Some(set("0-7")),
        "the whole shared pool"
    );

    host.tree().log.clear();
    let a = admit(&mut controller, &run("run-a", Some("2"), 10)).expect("a");
    let shared = controller.engine.shared_pool();
    assert_eq!(system_slice(&host), Some(shared.clone()));
    assert!(
        shared.is_disjoint(&a.placement.cpus),
        "{shared} vs {}",
        a.placement.cpus
    );
    let log = host.tree().log.clone();
    let shrink = log
        .iter()
        .position(|l| *l == format!("housekeeping /system.slice {shared}"))
        .expect("shrunk");
    let joined = log
        .iter()
        .position(|l| l == "pid run-a 10")
        .expect("joined");
    assert!(shrink < joined, "shrunk before the process joined: {log:?}");

    // The run ends: released, and the cgroup grows back after.
    host.tree().log.clear();
    host.tree()
        .children
        .get_mut(&name("run-a"))
        .expect("a")
        .pids
        .clear();
    let report = controller.reconcile();
    assert_eq!(report.released, vec!["run-a/main".to_string()]);
    assert_eq!(system_slice(&host), Some(set("0-7")));
    let snap = snapshot(&controller);
    assert_eq!(
        snap.housekeeping,
        vec!["/system.slice cpus 0-7 (kept)".to_string()]
    );
    assert_eq!(snap.metrics.housekeeping_states.get("kept"), Some(&1));
}

#[test]
fn every_cpu_exclusive_but_the_reserved_one_leaves_the_reserved_cpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    let mut controller = start_with(
        dir.path(),
        &host,
        isolation(&["/system.slice"], OtherWriters::Repair),
    );
    let reserved = controller.engine.policy().reserved();
    admit(&mut controller, &run("run-all", Some("7"), 10)).expect("all but reserved");
    assert_eq!(system_slice(&host), Some(reserved.clone()));
    assert!(!reserved.is_empty());
}

#[test]
fn a_missing_housekeeping_cgroup_is_reported_not_fatal_and_kept_once_it_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start_with(
        dir.path(),
        &host,
        isolation(&["/system.slice"], OtherWriters::Repair),
    );
    let snap = snapshot(&controller);
    assert_eq!(snap.metrics.housekeeping_states.get("missing"), Some(&1));
    assert_eq!(
        snap.housekeeping,
        vec!["/system.slice cpus - (missing)".to_string()]
    );
    admit(&mut controller, &run("run-a", Some("2"), 10)).expect("admissions go on");

    host.tree().housekeeping.insert(path("/system.slice"), None);
    controller.reconcile();
    assert_eq!(system_slice(&host), Some(controller.engine.shared_pool()));
    assert_eq!(
        snapshot(&controller)
            .metrics
            .housekeeping_states
            .get("kept"),
        Some(&1)
    );
}

#[test]
fn a_failing_write_is_counted_once_and_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    let mut controller = start_with(
        dir.path(),
        &host,
        isolation(&["/system.slice"], OtherWriters::Repair),
    );
    host.tree().fail_writes = true;
    controller.reconcile();
    controller.reconcile();
    host.tree().fail_writes = false;
    // Nothing to change: a write is needed only when the pool moves.
    let _ = admit(&mut controller, &run("run-a", Some("2"), 10));
    host.tree().fail_writes = true;
    host.tree()
        .children
        .get_mut(&name("run-a"))
        .expect("a")
        .pids
        .clear();
    controller.reconcile();
    controller.reconcile();
    let snap = snapshot(&controller);
    assert_eq!(snap.metrics.counters.housekeeping_write_failures_total, 1);
    assert_eq!(snap.metrics.housekeeping_states.get("failed"), Some(&1));
    host.tree().fail_writes = false;
    controller.reconcile();
    assert_eq!(system_slice(&host), Some(set("0-7")));
    assert_eq!(
        snapshot(&controller)
            .metrics
            .housekeeping_states
            .get("kept"),
        Some(&1)
    );
}

#[test]
fn a_housekeeping_cgroup_above_an_exclusive_container_or_pinions_root_is_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(path("/kubepods"), Some(set("0-7")));
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    let mut iso = isolation(&["/kubepods", "/system.slice"], OtherWriters::Repair);
    iso.pinion_root = Some("system.slice/pinion".into());
    let (mut controller, _updates) = start_runtime_with(dir.path(), &host, iso);
    let mut request = runtime_request("pod-g", Some("2"), "cg");
    request.frontend = Frontend::runtime_in("cg", Some(path("/kubepods/pod-g/cg")));
    admit(&mut controller, &request).expect("g");
    let tree = host.tree();
    assert_eq!(
        tree.housekeeping[&path("/kubepods")],
        Some(set("0-7")),
        "not shrunk"
    );
    assert_eq!(
        tree.housekeeping[&path("/system.slice")],
        Some(set("0-7")),
        "not shrunk"
    );
    drop(tree);
    let snap = snapshot(&controller);
    assert_eq!(snap.metrics.housekeeping_states.get("conflict"), Some(&2));
    assert!(
        snap.housekeeping[0].contains("pod pod-g container main"),
        "{:?}",
        snap.housekeeping
    );
    assert!(
        snap.housekeeping[1].contains("Pinion's cgroups"),
        "{:?}",
        snap.housekeeping
    );
}

#[test]
fn a_housekeeping_cgroup_changed_by_hand_is_repaired_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    let mut controller = start_with(
        dir.path(),
        &host,
        isolation(&["/system.slice"], OtherWriters::Repair),
    );
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-1")));
    controller.reconcile();
    assert_eq!(system_slice(&host), Some(set("0-7")), "repaired");
    let snap = snapshot(&controller);
    assert_eq!(
        snap.metrics
            .counters
            .foreign_writes_total
            .get("housekeeping"),
        Some(&1)
    );
    assert!(
        snap.housekeeping[0].contains("0-7 -> 0-1 (repaired)"),
        "{:?}",
        snap.housekeeping
    );
    controller.reconcile();
    assert_eq!(
        snapshot(&controller)
            .metrics
            .counters
            .foreign_writes_total
            .get("housekeeping"),
        Some(&1),
        "nothing new"
    );
}

#[test]
fn regression_a_housekeeping_repair_another_writer_undoes_backs_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    let mut controller = start_with(
        dir.path(),
        &host,
        isolation(&["/system.slice"], OtherWriters::Repair),
    );
    let mut repaired_in = Vec::new();
    for pass in 1..=10 {
        // systemd (say) puts its value back before every pass.
        host.tree()
            .housekeeping
            .insert(path("/system.slice"), Some(set("0-1")));
        controller.reconcile();
        if system_slice(&host) == Some(set("0-7")) {
            repaired_in.push(pass);
        }
    }
    assert_eq!(repaired_in, [1, 2, 4, 8]);
    assert_eq!(
        snapshot(&controller)
            .metrics
            .counters
            .foreign_writes_total
            .get("housekeeping"),
        Some(&4),
        "one foreign write per repair"
    );
    // The other writer gives up (its value becomes Pinion's): a pass that
    // finds Pinion's value starts over.
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    controller.reconcile();
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-1")));
    controller.reconcile();
    assert_eq!(system_slice(&host), Some(set("0-7")), "repaired at once");
}

#[test]
fn in_report_mode_a_changed_housekeeping_cgroup_is_kept_and_reported_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-7")));
    let mut controller = start_with(
        dir.path(),
        &host,
        isolation(&["/system.slice"], OtherWriters::Report),
    );
    host.tree()
        .housekeeping
        .insert(path("/system.slice"), Some(set("0-1")));
    controller.reconcile();
    controller.reconcile();
    assert_eq!(
        system_slice(&host),
        Some(set("0-1")),
        "the other writer's value"
    );
    let snap = snapshot(&controller);
    assert_eq!(
        snap.metrics
            .counters
            .foreign_writes_total
            .get("housekeeping"),
        Some(&1)
    );
    assert!(
        snap.housekeeping[0].contains("(kept, otherWriters: report)"),
        "{:?}",
        snap.housekeeping
    );
    // Pinion's own next change is written.
    admit(&mut controller, &run("run-a", Some("2"), 10)).expect("a");
    assert_eq!(system_slice(&host), Some(controller.engine.shared_pool()));
}

#[test]
fn a_pinned_runs_cpuset_changed_by_hand_is_repaired_and_marked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start_with(dir.path(), &host, isolation(&[], OtherWriters::Repair));
    let a = admit(&mut controller, &run("run-a", Some("2"), 10)).expect("a");
    host.tree()
        .children
        .get_mut(&name("run-a"))
        .expect("a")
        .cpus = set("0-7");
    let report = controller.reconcile();
    assert_eq!(report.repaired, vec!["run-a".to_string()]);
    assert_eq!(host.tree().children[&name("run-a")].cpus, a.placement.cpus);
    let snap = snapshot(&controller);
    assert_eq!(
        snap.metrics.counters.foreign_writes_total.get("container"),
        Some(&1)
    );
    assert_eq!(snap.metrics.counters.drift_repairs_total, 1);
    let mark = snap.workloads[0].foreign_write.clone().expect("marked");
    assert!(
        mark.contains(&format!("cpus {} -> cpus 0-7 (repaired)", a.placement.cpus)),
        "{mark}"
    );
}

#[test]
fn in_report_mode_a_pinned_runs_changed_cpuset_is_kept_and_reported_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start_with(dir.path(), &host, isolation(&[], OtherWriters::Report));
    admit(&mut controller, &run("run-a", Some("2"), 10)).expect("a");
    host.tree()
        .children
        .get_mut(&name("run-a"))
        .expect("a")
        .cpus = set("0-7");
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    assert_eq!(
        host.tree().children[&name("run-a")].cpus,
        set("0-7"),
        "kept"
    );
    let snap = snapshot(&controller);
    assert_eq!(
        snap.metrics.counters.foreign_writes_total.get("container"),
        Some(&1)
    );
    assert_eq!(snap.metrics.counters.drift_repairs_total, 0);
    let mark = snap.workloads[0].foreign_write.clone().expect("marked");
    assert!(mark.ends_with("(kept, otherWriters: report)"), "{mark}");
    // Another value is another write.
    host.tree()
        .children
        .get_mut(&name("run-a"))
        .expect("a")
        .cpus = set("1");
    controller.reconcile();
    assert_eq!(
        snapshot(&controller)
            .metrics
            .counters
            .foreign_writes_total
            .get("container"),
        Some(&2)
    );
}

#[test]
fn in_report_mode_a_runtime_containers_changed_cpuset_gets_no_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) =
        start_runtime_with(dir.path(), &host, isolation(&[], OtherWriters::Report));
    let mut request = runtime_request("pod-g", Some("2"), "cg");
    request.pod.namespace = "team-a".into();
    request.pod.name = "web".into();
    request.frontend = Frontend::runtime_in("cg", Some(path("/kubepods/pod-g/cg")));
    let g = admit(&mut controller, &request).expect("g");
    assert!(controller.container_started("cg"), "started: compared");
    answer_updates(&mut controller, &mut updates);
    host.tree().containers.insert(
        path("/kubepods/pod-g/cg"),
        ContainerCpuset {
            cpus: Some(set("0-7")),
            mems: Some(g.placement.mems.clone()),
        },
    );
    assert_eq!(controller.reconcile(), ReconcileReport::default());
    assert!(updates.try_recv().is_err(), "no update: yielded");
    let snap = snapshot(&controller);
    assert_eq!(
        snap.metrics.counters.foreign_writes_total.get("container"),
        Some(&1)
    );
    assert_eq!(snap.metrics.counters.runtime_drift_repairs_total, 0);
    assert!(snap.workloads[0].foreign_write.is_some());
}

#[test]
fn the_system_partitions_namespaces_run_their_shared_containers_on_its_cpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut iso = isolation(&[], OtherWriters::Repair);
    iso.system_partition = Some(SystemPartition {
        cpuset: Some(set("0")),
        memory_limit: Some(1 << 30),
        cgroups: Vec::new(),
        namespaces: BTreeSet::from(["kube-system".to_string()]),
    });
    let (mut controller, _updates) = start_runtime_with(dir.path(), &host, iso);
    let mut system = runtime_request("pod-s", Some("500m"), "cs");
    system.pod.namespace = "kube-system".into();
    let mut guaranteed = runtime_request("pod-sg", Some("2"), "csg");
    guaranteed.pod.namespace = "kube-system".into();
    let mut other = runtime_request("pod-o", Some("500m"), "co");
    other.pod.namespace = "default".into();
    let s = admit(&mut controller, &system).expect("s");
    let sg = admit(&mut controller, &guaranteed).expect("sg");
    let o = admit(&mut controller, &other).expect("o");
    assert_eq!(s.placement.cpus, set("0"), "the partition's cpus");
    assert_eq!(
        sg.placement.pool,
        Pool::Exclusive,
        "exclusive cpus stay theirs"
    );
    assert_eq!(
        o.placement.cpus,
        controller.engine.shared_pool(),
        "the default partition"
    );
    let gauges = snapshot(&controller)
        .metrics
        .system_partition
        .clone()
        .expect("gauges");
    assert_eq!(gauges.memory_limit, Some(1 << 30));
    assert_eq!(gauges.pods, 2);
}

#[test]
fn a_runtime_containers_changed_cpuset_is_repaired_reported_and_marked_with_its_pod() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, mut updates) =
        start_runtime_with(dir.path(), &host, isolation(&[], OtherWriters::Repair));
    let mut request = runtime_request("pod-g", Some("2"), "cg");
    request.pod.namespace = "team-a".into();
    request.pod.name = "web".into();
    request.frontend = Frontend::runtime_in("cg", Some(path("/kubepods/pod-g/cg")));
    let g = admit(&mut controller, &request).expect("g");
    assert!(controller.container_started("cg"), "started: compared");
    answer_updates(&mut controller, &mut updates);
    host.tree().containers.insert(
        path("/kubepods/pod-g/cg"),
        ContainerCpuset {
            cpus: Some(set("0-7")),
            mems: Some(g.placement.mems.clone()),
        },
    );
    let report = controller.reconcile();
    assert_eq!(
        report.repaired,
        vec!["pod-g/main (/kubepods/pod-g/cg)".to_string()]
    );
    let sent = updates.try_recv().expect("an update");
    assert_eq!(sent[0].placement, g.placement, "its placement again");
    let snap = snapshot(&controller);
    assert_eq!(
        snap.metrics.counters.foreign_writes_total.get("container"),
        Some(&1)
    );
    assert_eq!(snap.metrics.counters.runtime_drift_repairs_total, 1);
    let mark = snap.workloads[0].foreign_write.clone().expect("marked");
    assert!(
        mark.contains(&format!("cpus {} -> cpus 0-7", g.placement.cpus))
            && mark.ends_with("(repaired)"),
        "{mark}"
    );
}

fn limited_partition(cgroups: &[&str]) -> Isolation {
    let mut iso = isolation(&[], OtherWriters::Repair);
    iso.system_partition = Some(SystemPartition {
        cpuset: None,
        memory_limit: Some(2 << 30),
        cgroups: cgroups.iter().map(|c| path(c)).collect(),
        namespaces: BTreeSet::from(["kube-system".to_string()]),
    });
    iso
}

fn limit_enforced(controller: &Controller) -> bool {
    snapshot(controller)
        .metrics
        .system_partition
        .clone()
        .expect("gauges")
        .memory_limit_enforced
}

/// Issue 31: `systemPartition.memoryLimit` was parsed but never written. The
/// executor writes it to the first of the partition's cgroups that exists
/// (the systemd driver's name is missing here, the cgroupfs one exists).
#[test]
fn regression_the_system_partitions_memory_limit_is_written_to_its_cgroup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .memory_limits
        .insert(path("/kubepods/system"), None);
    let iso = limited_partition(&["/kubepods.slice/kubepods-system.slice", "/kubepods/system"]);
    let controller = start_with(dir.path(), &host, iso);
    assert_eq!(
        host.tree().memory_limits[&path("/kubepods/system")],
        Some(2 << 30)
    );
    assert!(!host
        .tree()
        .memory_limits
        .contains_key(&path("/kubepods.slice/kubepods-system.slice")));
    assert!(limit_enforced(&controller));
    // Written once, not at every pass.
    let mut controller = controller;
    controller.reconcile();
    let writes = host
        .tree()
        .log
        .iter()
        .filter(|line| line.starts_with("memory "))
        .count();
    assert_eq!(writes, 1);
}

#[test]
fn regression_a_missing_partition_cgroup_is_tried_again_until_it_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let iso = limited_partition(&["/kubepods/system"]);
    let mut controller = start_with(dir.path(), &host, iso);
    assert!(!limit_enforced(&controller));
    assert_eq!(
        controller.partition_memory,
        crate::controller::system_partition::LimitState::Missing
    );
    assert!(host.tree().memory_limits.is_empty(), "never created");
    host.tree()
        .memory_limits
        .insert(path("/kubepods/system"), None);
    controller.reconcile();
    assert!(limit_enforced(&controller));
    assert_eq!(
        host.tree().memory_limits[&path("/kubepods/system")],
        Some(2 << 30)
    );
}

#[test]
fn regression_a_refused_partition_memory_limit_names_the_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree()
        .memory_limits
        .insert(path("/kubepods/system"), None);
    host.tree().fail_files.insert("memory.max".to_string());
    let iso = limited_partition(&["/kubepods/system"]);
    let mut controller = start_with(dir.path(), &host, iso);
    assert!(!limit_enforced(&controller));
    let crate::controller::system_partition::LimitState::Failed(why) = &controller.partition_memory
    else {
        panic!("{:?}", controller.partition_memory);
    };
    assert!(why.contains("2147483648"), "{why}");
    assert!(why.contains("/kubepods/system"), "{why}");
    // The kernel takes it later: the next pass writes it.
    host.tree().fail_files.clear();
    controller.reconcile();
    assert!(limit_enforced(&controller));
}
