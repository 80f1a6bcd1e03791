//! Owns the tests of exclusive runs' cpuset partitions on the fake host.
//!
//! Issue 31 item 1: exclusive runs' cgroups as cpuset partitions, at the
//! controller level with the fake host (which models the kernel's rules for
//! `cpuset.cpus.exclusive` and the partition file).

use pinion_core::partition::PartitionMode;
use pinion_core::policy::Features;
use pinion_core::Quantity;

use super::*;

fn partitioned(host: &FakeCgroups, mode: PartitionMode) -> SyntheticNode {
    node(host).with_partition(mode)
}

/// An isolated-partition node whose runs may be resized in place.
fn resizable_isolated(host: &FakeCgroups) -> SyntheticNode {
    partitioned(host, PartitionMode::Isolated).with_features(Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    })
}

/// The partition writes, as `dir/file=value`.
fn partition_writes(host: &FakeCgroups) -> Vec<String> {
    host.tree()
        .partitions
        .writes
        .iter()
        .map(|(dir, file, value)| format!("{dir}/{file}={}", value.trim()))
        .collect()
}

/// An isolated-partition node on `dir` with run `pinion-run-a` (2 CPUs,
/// pid 10) admitted.
fn isolated_with_run_a(host: &FakeCgroups, dir: &Path) -> (Controller, Admitted) {
    let mut controller = partitioned(host, PartitionMode::Isolated)
        .start(dir)
        .expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("a");
    (controller, a)
}

/// Run `pod` ends: its cgroup has no process left, and it is released.
fn end_run(controller: &mut Controller, host: &FakeCgroups, pod: &str) {
    host.tree()
        .children
        .get_mut(&name(pod))
        .expect("the run's cgroup")
        .pids
        .clear();
    controller.release(pod, None).expect("released");
}

fn view(controller: &Controller, pod: &str) -> WorkloadView {
    controller
        .subscribe_snapshots()
        .borrow()
        .workload(pod, RUN_CONTAINER)
        .expect("workload")
        .clone()
}

#[test]
fn an_exclusive_run_becomes_an_isolated_partition_after_its_cpuset_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = partitioned(&host, PartitionMode::Isolated)
        .start(dir.path())
        .expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    let cpus = a.placement.cpus.to_string();
    assert_eq!(
        partition_writes(&host),
        vec![
            format!("pinion/cpuset.cpus.exclusive={cpus}"),
            format!("pinion/pinion-run-a/cpuset.cpus={cpus}"),
            format!("pinion/pinion-run-a/cpuset.cpus.exclusive={cpus}"),
            "pinion/pinion-run-a/cpuset.cpus.partition=isolated".to_string(),
        ]
    );
    assert_eq!(
        host.tree().partitions.partition("pinion/pinion-run-a"),
        "isolated"
    );
    assert_eq!(
        view(&controller, "pinion-run-a").partition.as_deref(),
        Some("isolated")
    );
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.isolated_cpus, Some(a.placement.cpus.clone()));
    assert_eq!(snapshot.metrics.counters.partitions_made_total, 1);
    assert_eq!(snapshot.metrics.counters.partition_fallbacks_total, 0);
    // A shared run is never a partition.
    admit(&mut controller, &run("pinion-run-s", None, 11)).expect("shared");
    assert_eq!(view(&controller, "pinion-run-s").partition, None);
    assert_eq!(
        host.tree().partitions.partition("pinion/pinion-run-s"),
        "member"
    );
}

#[test]
fn member_mode_writes_no_partition_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host).expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    assert!(partition_writes(&host).is_empty());
    assert_eq!(view(&controller, "pinion-run-a").partition, None);
}

#[test]
fn release_takes_the_partition_apart_member_first_then_exclusive_child_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, a) = isolated_with_run_a(&host, dir.path());
    let b = admit(&mut controller, &run("pinion-run-b", Some("1"), 11)).expect("b");
    host.tree().partitions.writes.clear();
    end_run(&mut controller, &host, "pinion-run-a");
    let left = b.placement.cpus.to_string();
    assert_eq!(
        partition_writes(&host),
        vec![
            "pinion/pinion-run-a/cpuset.cpus.partition=member".to_string(),
            "pinion/pinion-run-a/cpuset.cpus.exclusive=".to_string(),
            format!("pinion/cpuset.cpus.exclusive={left}"),
        ]
    );
    assert!(!host.tree().children.contains_key(&name("pinion-run-a")));
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.isolated_cpus, Some(b.placement.cpus.clone()));
    assert!(!a
        .placement
        .cpus
        .is_subset(snapshot.isolated_cpus.as_ref().expect("isolated")));
}

#[test]
fn a_partition_the_kernel_refuses_leaves_a_member_logged_counted_and_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree().partitions.reject = Some("Parent is not a partition root".to_string());
    let mut controller = partitioned(&host, PartitionMode::Root)
        .start(dir.path())
        .expect("start");
    let a =
        admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admitted all the same");
    assert!(a.exclusive());
    assert_eq!(
        host.tree().children[&name("pinion-run-a")].cpus,
        a.placement.cpus
    );
    assert_eq!(
        view(&controller, "pinion-run-a").partition.as_deref(),
        Some("member (fallback: Parent is not a partition root)")
    );
    // Taken back: the ancestor claims nothing.
    assert_eq!(
        host.tree()
            .partitions
            .get(Path::new("pinion"), "cpuset.cpus.exclusive"),
        ""
    );
    admit(&mut controller, &run("pinion-run-b", Some("1"), 11)).expect("b");
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.metrics.counters.partition_fallbacks_total, 2);
    assert_eq!(snapshot.metrics.counters.partitions_made_total, 0);
    // Tried once per run, not at every pass.
    let writes = host.tree().partitions.writes.len();
    controller.reconcile();
    assert_eq!(host.tree().partitions.writes.len(), writes);
}

#[test]
fn cgroup_v1_falls_back_without_writing_and_admits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree().version = pinion_host::cgroup::CgroupVersion::V1;
    let mut controller = partitioned(&host, PartitionMode::Isolated)
        .start(dir.path())
        .expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admitted");
    assert!(partition_writes(&host).is_empty());
    let partition = view(&controller, "pinion-run-a").partition.expect("marked");
    assert!(
        partition.starts_with("member (fallback: cgroup v1"),
        "{partition}"
    );
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert_eq!(snapshot.isolated_cpus, None);
    assert_eq!(snapshot.metrics.counters.partition_fallbacks_total, 1);
}

#[test]
fn a_kernel_before_6_7_falls_back_naming_the_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree().partitions.unsupported = true;
    let mut controller = partitioned(&host, PartitionMode::Isolated)
        .start(dir.path())
        .expect("start");
    admit(&mut controller, &run("pinion-run-a", Some("1"), 10)).expect("admitted");
    let partition = view(&controller, "pinion-run-a").partition.expect("marked");
    assert!(partition.contains("6.7"), "{partition}");
}

#[test]
fn a_resize_takes_the_partition_apart_before_the_cpuset_write_and_makes_it_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = resizable_isolated(&host).start(dir.path()).expect("start");
    let first = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    host.tree().partitions.writes.clear();
    let key = ("pinion-run-a".to_string(), RUN_CONTAINER.to_string());
    let grown = controller
        .resize(&key, &Quantity::parse("4").expect("quantity"))
        .expect("resized");
    let (old, new) = (
        first.placement.cpus.to_string(),
        grown.placement.cpus.to_string(),
    );
    assert_eq!(
        partition_writes(&host),
        vec![
            "pinion/pinion-run-a/cpuset.cpus.partition=member".to_string(),
            "pinion/pinion-run-a/cpuset.cpus.exclusive=".to_string(),
            "pinion/cpuset.cpus.exclusive=".to_string(),
            format!("pinion/cpuset.cpus.exclusive={new}"),
            format!("pinion/pinion-run-a/cpuset.cpus={new}"),
            format!("pinion/pinion-run-a/cpuset.cpus.exclusive={new}"),
            "pinion/pinion-run-a/cpuset.cpus.partition=isolated".to_string(),
        ],
        "from {old} to {new}"
    );
    assert_eq!(
        controller.subscribe_snapshots().borrow().isolated_cpus,
        Some(grown.placement.cpus.clone())
    );
}

/// Found from outside (forty-fourth session): a partition whose take-down
/// failed was forgotten. The kernel kept its CPUs exclusive (the ancestors
/// listing them in `cpuset.cpus.exclusive`) while Pinion recorded no
/// partition and nothing tried again. It is now taken apart at the next
/// pass, and its cgroup is not made a partition again before.
#[test]
fn regression_a_failed_take_down_is_tried_again_until_it_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = resizable_isolated(&host).start(dir.path()).expect("start");
    let first = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    let claimed = |host: &FakeCgroups| {
        host.tree()
            .partitions
            .get(std::path::Path::new("pinion"), "cpuset.cpus.exclusive")
    };
    let key = ("pinion-run-a".to_string(), RUN_CONTAINER.to_string());
    host.tree()
        .partitions
        .fail_files
        .insert("cpuset.cpus.exclusive".to_string());
    let grown = controller
        .resize(&key, &Quantity::parse("4").expect("quantity"))
        .expect("resized");
    assert_eq!(
        claimed(&host),
        first.placement.cpus.to_string(),
        "still claimed"
    );
    assert_eq!(view(&controller, "pinion-run-a").partition, None);
    host.tree().partitions.writes.clear();
    controller.reconcile();
    let writes = partition_writes(&host);
    assert!(
        !writes.is_empty()
            && writes
                .iter()
                .all(|w| w == "pinion/pinion-run-a/cpuset.cpus.partition=member"),
        "tried again (each pass), still refused, nothing made: {writes:?}"
    );
    host.tree().partitions.fail_files.clear();
    controller.reconcile();
    assert_eq!(claimed(&host), grown.placement.cpus.to_string());
    assert_eq!(
        view(&controller, "pinion-run-a").partition.as_deref(),
        Some("isolated")
    );
    assert_eq!(host.tree().partitions.isolated(), grown.placement.cpus);
}

/// Found from outside (session 46): the partitions an agent made lived in
/// its memory only. Restarted with `exclusiveCpus.partition: member` (or
/// after a migration moved the run), the agent never took the old
/// partition apart: its CPUs stayed out of every other cgroup while
/// Pinion handed them out again. The start now takes over the partitions
/// it finds on its workloads' cgroups and takes apart the stale ones; one
/// that is still wanted is kept as it is (no second make).
#[test]
fn regression_a_partition_made_before_a_restart_is_taken_over_and_taken_apart_when_stale() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = partitioned(&host, PartitionMode::Isolated)
        .start(dir.path())
        .expect("start");
    let a = admit(&mut controller, &run("pinion-run-a", Some("2"), 10)).expect("admit");
    drop(controller);
    assert_eq!(
        host.tree().partitions.partition("pinion/pinion-run-a"),
        "isolated"
    );

    // The same mode: taken over as it is, nothing written again.
    let writes = host.tree().partitions.writes.len();
    let controller = partitioned(&host, PartitionMode::Isolated)
        .start(dir.path())
        .expect("restart");
    let now = host.tree().partitions.writes.len();
    assert_eq!(now, writes, "{:?}", partition_writes(&host));
    assert_eq!(
        view(&controller, "pinion-run-a").partition.as_deref(),
        Some("isolated")
    );
    drop(controller);

    // Member mode now: the partition is taken apart at start.
    let controller = partitioned(&host, PartitionMode::Member)
        .start(dir.path())
        .expect("restart as member");
    let files = &host.tree().partitions;
    assert_eq!(files.partition("pinion/pinion-run-a"), "member");
    let claimed = CpuSet::parse_list(
        files
            .get(std::path::Path::new("pinion"), "cpuset.cpus.exclusive")
            .trim(),
    )
    .unwrap_or_default();
    assert!(
        claimed.is_disjoint(&a.placement.cpus),
        "pinion still claims {claimed}"
    );
    assert!(files.isolated().is_empty());
    assert_eq!(view(&controller, "pinion-run-a").partition, None);
}

/// Found from outside (session 46): a run whose partition the kernel
/// refused stayed a member for good, even after what the kernel refused it
/// for was gone — its CPUs did not change, so nothing tried again. Now a
/// partition taken apart (its CPUs no longer exclusive) has the fallbacks
/// tried again; nothing else does (no write at every pass).
#[test]
fn regression_fallbacks_are_tried_again_once_a_partition_is_taken_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _) = isolated_with_run_a(&host, dir.path());
    host.tree().partitions.reject = Some("Parent is not a partition root".to_string());
    let b = admit(&mut controller, &run("pinion-run-b", Some("1"), 11)).expect("b");
    assert_eq!(
        view(&controller, "pinion-run-b").partition.as_deref(),
        Some("member (fallback: Parent is not a partition root)")
    );
    host.tree().partitions.reject = None;

    // Nothing of Pinion's changed: the pass writes nothing.
    let writes = host.tree().partitions.writes.len();
    controller.reconcile();
    assert_eq!(host.tree().partitions.writes.len(), writes);
    assert!(view(&controller, "pinion-run-b")
        .partition
        .is_some_and(|p| p.starts_with("member")));

    // run-a ends: its partition is taken apart, and run-b's is made.
    end_run(&mut controller, &host, "pinion-run-a");
    assert_eq!(
        view(&controller, "pinion-run-b").partition.as_deref(),
        Some("isolated")
    );
    let isolated = host.tree().partitions.isolated();
    assert_eq!(isolated, b.placement.cpus);
    let counters = controller
        .subscribe_snapshots()
        .borrow()
        .metrics
        .counters
        .clone();
    assert_eq!(
        (
            counters.partitions_made_total,
            counters.partition_fallbacks_total
        ),
        (2, 1),
        "one fallback, counted once"
    );
}

/// Found from outside (session 46): the partition state `pinion ps` shows
/// was read back once, at the make. A partition the kernel found invalid
/// later (an ancestor's claim rewritten, a CPU gone offline) still showed
/// as `isolated`. The reconcile pass reads it again.
#[test]
fn regression_the_reconcile_pass_reads_the_partitions_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let (mut controller, _) = isolated_with_run_a(&host, dir.path());
    let set_partition = |text: &str| {
        host.tree()
            .partitions
            .files
            .get_mut(std::path::Path::new("pinion/pinion-run-a"))
            .expect("the run's files")
            .insert("cpuset.cpus.partition".to_string(), text.to_string());
    };
    let invalid = "isolated invalid (Cpu list in cpuset.cpus not exclusive)";
    set_partition(invalid);
    controller.reconcile();
    assert_eq!(
        view(&controller, "pinion-run-a").partition.as_deref(),
        Some(invalid)
    );
    set_partition("isolated");
    controller.reconcile();
    assert_eq!(
        view(&controller, "pinion-run-a").partition.as_deref(),
        Some("isolated")
    );
}
