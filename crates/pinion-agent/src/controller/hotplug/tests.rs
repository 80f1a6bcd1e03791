//! Owns the tests of CPU hot-plug with fake cgroups on a synthetic machine.
//!
//! CPU hot-plug with fake cgroups on a synthetic machine (1 socket × 4
//! cores × 2 threads: core n = cpus n and n+4; cpu 0 reserved).

use pinion_core::testing::without_cpus;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::CgroupName;

use super::super::Controller;
use crate::hints::GatheredHints;
use crate::testing::{machine, run_request, SyntheticNode};
use pinion_core::{CpuSet, Topology};

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn start(dir: &std::path::Path, host: &FakeCgroups) -> Controller {
    SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(machine(1, 4, 2))
    }
    .start(dir)
    .expect("start")
}

fn run(controller: &mut Controller, id: &str, cpus: &str, pid: u32) -> CpuSet {
    let admitted = controller
        .admit(
            &run_request(id, Some(cpus), Some(pid)),
            &GatheredHints::default(),
        )
        .expect("admit");
    admitted.placement.cpus
}

fn cgroup_cpus(host: &FakeCgroups, id: &str) -> CpuSet {
    host.tree().children[&CgroupName::new(id).expect("name")]
        .cpus
        .clone()
}

/// The checkpoint (with the journal replayed) a restart would start from.
fn on_disk(dir: &std::path::Path) -> pinion_core::state::State {
    let inspection = pinion_host::journal::inspect(dir).expect("readable");
    let view = inspection
        .journal
        .expect("a journal")
        .expect("readable journal");
    let checkpoint = view.effective.expect("replays").expect("a checkpoint");
    let parsed = checkpoint.to_state().expect("parses");
    pinion_core::state::State {
        default: parsed.default_cpu_set,
        assignments: parsed.assignments,
    }
}

fn offline(cpus: &str) -> Topology {
    without_cpus(&machine(1, 4, 2), &set(cpus))
}

#[test]
fn an_offline_pinned_cpu_is_replaced_and_comes_back_to_the_shared_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host);
    let a = run(&mut controller, "pinion-run-a", "2", 10);
    let b = run(&mut controller, "pinion-run-b", "2", 11);
    let shared = run(&mut controller, "pinion-run-s", "0.5", 12);
    assert_eq!(
        cgroup_cpus(&host, "pinion-run-s"),
        controller.engine.shared_pool()
    );
    let victim = a.last().expect("a has cpus");
    let lost = CpuSet::from_iter([victim]);
    let kept = a.difference(&lost);

    let report = controller
        .follow_topology(&offline(&lost.to_string()))
        .expect("follows");
    assert_eq!(report.offline, lost);
    let now = controller
        .state()
        .assignment("pinion-run-a", "main")
        .expect("still exclusive")
        .clone();
    assert_eq!(now.len(), 2, "as many cpus as it asked for: {now}");
    assert!(kept.is_subset(&now), "keeps its online cpu: {now}");
    assert!(!now.contains(victim));
    assert!(now.intersection(&b).is_empty(), "not b's cpus");
    assert_eq!(
        controller.state().assignment("pinion-run-b", "main"),
        Some(&b)
    );
    assert_eq!(cgroup_cpus(&host, "pinion-run-a"), now, "applied");
    assert_eq!(cgroup_cpus(&host, "pinion-run-b"), b, "b untouched");
    assert!(!shared.is_empty());
    let pool = controller.engine.shared_pool();
    assert!(!pool.contains(victim));
    assert_eq!(
        cgroup_cpus(&host, "pinion-run-s"),
        pool,
        "shared pool followed"
    );
    assert_eq!(&on_disk(dir.path()), controller.state(), "durable");
    assert_eq!(controller.counters.cpu_online_changes_total, 1);
    assert_eq!(controller.counters.cpu_offline_replaced_total, 1);
    assert_eq!(controller.counters.cpu_offline_short_total, 0);
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert!(
        snapshot
            .hotplug
            .iter()
            .any(|l| l.starts_with(&format!("pinion-run-a/main had cpus {a}, now cpus {now}"))),
        "{:?}",
        snapshot.hotplug
    );
    assert!(!snapshot.all_cpus.contains(victim));

    // The same topology again changes nothing.
    let again = controller
        .follow_topology(&offline(&lost.to_string()))
        .expect("follows");
    assert!(again.unchanged());
    assert_eq!(controller.counters.cpu_online_changes_total, 1);

    // Back online: to the shared pool; nobody moves.
    let report = controller
        .follow_topology(&machine(1, 4, 2))
        .expect("follows");
    assert_eq!(report.online, lost);
    assert_eq!(report.lines.len(), 1, "{:?}", report.lines);
    assert_eq!(
        controller.state().assignment("pinion-run-a", "main"),
        Some(&now)
    );
    assert!(controller.engine.shared_pool().contains(victim));
    assert_eq!(
        cgroup_cpus(&host, "pinion-run-s"),
        controller.engine.shared_pool()
    );
    assert_eq!(&on_disk(dir.path()), controller.state());
}

#[test]
fn without_a_free_cpu_the_workload_keeps_what_is_left_and_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host);
    // Cores 1-3 and CPU 4 taken: the shared pool is 0 (reserved), which
    // admission leaves, as kubelet does.
    let mut held = CpuSet::new();
    for (id, cpus, pid) in [
        ("pinion-run-a", "2", 10),
        ("pinion-run-b", "2", 11),
        ("pinion-run-c", "2", 12),
        ("pinion-run-d", "1", 13),
    ] {
        held.union_with(&run(&mut controller, id, cpus, pid));
    }
    assert_eq!(controller.engine.shared_pool(), set("0"));
    let c = controller
        .state()
        .assignment("pinion-run-c", "main")
        .expect("c")
        .clone();
    let victim = c.last().expect("c has cpus");
    controller
        .follow_topology(&offline(&victim.to_string()))
        .expect("follows");
    let now = controller
        .state()
        .assignment("pinion-run-c", "main")
        .expect("c keeps one")
        .clone();
    assert_eq!(now, c.difference(&CpuSet::from_iter([victim])));
    assert_eq!(controller.engine.shared_pool(), set("0"), "not emptied");
    assert_eq!(controller.counters.cpu_offline_short_total, 1);
    assert_eq!(controller.counters.cpu_offline_replaced_total, 0);
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert!(
        snapshot
            .hotplug
            .iter()
            .any(|l| l.ends_with("asked for 2 cpus, keeps 1: no free cpu left")),
        "{:?}",
        snapshot.hotplug
    );
    assert_eq!(cgroup_cpus(&host, "pinion-run-c"), now);
}

/// Issue 27, item 3: the rule that keeps the shared pool is admission's —
/// the reserved CPU keeps it, so the last free CPU replaces a lost one.
#[test]
fn a_lost_cpu_is_replaced_by_the_last_free_one_when_the_reserved_cpu_keeps_the_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host);
    for (id, pid) in [
        ("pinion-run-a", 10),
        ("pinion-run-b", 11),
        ("pinion-run-c", 12),
    ] {
        run(&mut controller, id, "2", pid);
    }
    assert_eq!(controller.engine.shared_pool(), set("0,4"));
    let c = controller
        .state()
        .assignment("pinion-run-c", "main")
        .expect("c")
        .clone();
    let victim = c.last().expect("c has cpus");
    controller
        .follow_topology(&offline(&victim.to_string()))
        .expect("follows");
    let now = controller
        .state()
        .assignment("pinion-run-c", "main")
        .expect("c")
        .clone();
    assert_eq!(now.len(), 2, "{now}");
    assert!(now.contains(4), "{now}");
    assert_eq!(controller.engine.shared_pool(), set("0"));
    assert_eq!(controller.counters.cpu_offline_replaced_total, 1);
    assert_eq!(cgroup_cpus(&host, "pinion-run-c"), now);
}

/// A change of the online CPUs that cannot be made durable changes nothing
/// (no cgroup is rewritten) and is followed at the next tick.
#[test]
fn a_hotplug_that_cannot_be_flushed_changes_nothing_and_is_retried() {
    use pinion_host::fileops::{Effect, FileOp};
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let node = SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(machine(1, 4, 2))
    };
    let (mut controller, plan) = node.start_with_faults(dir.path());
    let a = run(&mut controller, "pinion-run-a", "2", 10);
    let victim = a.last().expect("a has cpus");
    let topology = offline(&victim.to_string());
    let before = controller.state().clone();
    plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(5));
    controller
        .follow_topology(&topology)
        .expect_err("not durable");
    assert_eq!(controller.state(), &before);
    assert_eq!(cgroup_cpus(&host, "pinion-run-a"), a, "not rewritten");
    assert_eq!(controller.counters.cpu_online_changes_total, 0);
    let report = controller.follow_topology(&topology).expect("follows");
    assert_eq!(report.offline, CpuSet::from_iter([victim]));
    assert!(!cgroup_cpus(&host, "pinion-run-a").contains(victim));
    assert_eq!(&on_disk(dir.path()), controller.state());
}

/// Found from outside (session 44): on cgroup v1, when all of a run's CPUs
/// went offline the kernel moved the run's processes to Pinion's root; the
/// next reconcile pass saw the run's cgroup empty and released the run
/// while it still ran, unpinned, in the root.
#[test]
fn regression_a_v1_run_whose_cpus_all_went_offline_is_moved_back_not_released() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree().version = pinion_host::cgroup::CgroupVersion::V1;
    let mut controller = start(dir.path(), &host);
    let a = run(&mut controller, "pinion-run-a", "2", 10);
    let name = CgroupName::new("pinion-run-a").expect("name");
    // The run's child, and a process of no run that sits in the root.
    host.tree()
        .children
        .get_mut(&name)
        .expect("cgroup")
        .pids
        .push(20);
    host.tree()
        .root_processes
        .push(pinion_host::cgroup::RootProcess {
            pid: 30,
            parent: Some(1),
        });
    host.tree().all_cpus_offline_v1(&name, &[(10, 1), (20, 10)]);

    // A pass before the hot-plug is followed: the run is not over.
    let report = controller.reconcile();
    assert!(report.released.is_empty(), "{report:?}");
    assert!(controller
        .state()
        .assignment("pinion-run-a", "main")
        .is_some());

    controller
        .follow_topology(&offline(&a.to_string()))
        .expect("follows");
    let report = controller.reconcile();
    assert!(report.released.is_empty(), "{report:?}");
    let now = controller
        .state()
        .assignment("pinion-run-a", "main")
        .expect("still exclusive")
        .clone();
    assert_eq!(now.len(), 2, "{now}");
    assert!(now.is_disjoint(&a), "off the offline cpus: {now}");
    let tree = host.tree();
    assert_eq!(tree.children[&name].cpus, now);
    let mut pids = tree.children[&name].pids.clone();
    pids.sort_unstable();
    assert_eq!(pids, [10, 20], "both processes back in the run's cgroup");
    assert_eq!(
        tree.root_processes
            .iter()
            .map(|p| p.pid)
            .collect::<Vec<_>>(),
        [30],
        "a process of no run stays where it is"
    );
    drop(tree);
    let snapshot = controller.subscribe_snapshots().borrow().clone();
    assert!(
        snapshot
            .hotplug
            .iter()
            .any(|line| line.contains("pinion-run-a/main: processes 10,20 moved back")),
        "{:?}",
        snapshot.hotplug
    );
}

/// A run whose processes the kernel moved ends while they wait in the root:
/// once none is left, the run is released as any run that ended.
#[test]
fn a_stranded_run_that_ends_in_the_root_is_released() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    host.tree().version = pinion_host::cgroup::CgroupVersion::V1;
    let mut controller = start(dir.path(), &host);
    run(&mut controller, "pinion-run-a", "2", 10);
    let name = CgroupName::new("pinion-run-a").expect("name");
    host.tree().all_cpus_offline_v1(&name, &[(10, 1)]);
    assert!(controller.reconcile().released.is_empty());
    host.tree().root_processes.clear();
    assert_eq!(controller.reconcile().released, ["pinion-run-a/main"]);
}

/// Found from outside (session 45): a hot-plug whose flush failed put the
/// engine back but kept the side data it had already changed (the
/// pod-level CPU sets of the failed attempt). A later compaction wrote
/// them, and the next start found sets that did not fit its state and
/// dropped them all.
#[test]
fn regression_a_hotplug_that_cannot_be_flushed_leaves_the_pod_level_sets_as_they_were() {
    use pinion_core::pod::PodResources;
    use pinion_core::record::kinds::POD_CPUS;
    use pinion_host::fileops::{Effect, FileOp};
    let q = |text: &str| Some(pinion_core::Quantity::parse(text).expect("quantity"));
    let dir = tempfile::tempdir().expect("tempdir");
    let node = SyntheticNode {
        features: pinion_core::policy::Features {
            pod_level_resource_managers: true,
            ..pinion_core::policy::Features::default()
        },
        ..SyntheticNode::new(machine(1, 4, 2))
    }
    .with_config(pinion_core::policy::PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(1),
        topology_manager_policy: Some("best-effort".into()),
        topology_manager_scope: Some("pod".into()),
        ..pinion_core::policy::PolicyConfig::default()
    });
    let (mut controller, plan) = node.start_with_faults(dir.path());
    controller.set_pod_resources(
        "pinion-run-p",
        Some(PodResources {
            cpu_request: q("4"),
            cpu_limit: q("4"),
            memory_request: q("1Gi"),
            memory_limit: q("1Gi"),
        }),
    );
    let held = run(&mut controller, "pinion-run-p", "2", 10);
    let sets = controller.plugin_data.side().get(POD_CPUS).cloned();
    let pod_set = controller
        .engine
        .pod_cpus()
        .get("pinion-run-p")
        .cloned()
        .expect("a pod-level set");
    assert_eq!(pod_set.len(), 4, "{pod_set}");
    assert!(sets.is_some());
    // A CPU of the pod's set that its container does not hold.
    let victim = pod_set
        .difference(&held)
        .last()
        .expect("a free cpu of the set");
    plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(5));
    controller
        .follow_topology(&offline(&victim.to_string()))
        .expect_err("not durable");
    assert_eq!(
        controller.engine.pod_cpus().get("pinion-run-p"),
        Some(&pod_set)
    );
    assert_eq!(
        controller.plugin_data.side().get(POD_CPUS).cloned(),
        sets,
        "the side data as it was"
    );
}

/// Found from outside (session 44, fixed in 45): after a CPU went offline
/// the state followed, but podresources' `GetAllocatableResources` and the
/// NodeResourceTopology object kept the CPUs of the agent's start: the
/// scheduler was told of an offline CPU as allocatable. Both read the
/// machine the state places on now.
#[tokio::test]
async fn regression_podresources_and_nrt_follow_a_cpu_going_offline() {
    use crate::podresources::PodResourcesService;
    use pinion_api::podresources::v1;
    use v1::pod_resources_lister_server::PodResourcesLister as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let mut controller = start(dir.path(), &host);
    let at_start = std::sync::Arc::new(machine(1, 4, 2));
    let service = PodResourcesService::new(
        controller.subscribe_snapshots(),
        std::sync::Arc::clone(&at_start),
        1000,
        1000,
    );
    let policy = pinion_core::testing::static_policy(machine(1, 4, 2), "0");
    let node = pinion_core::nrt::Node::new(
        &policy,
        None,
        None,
        Vec::new(),
        pinion_core::nrt::Method::All,
    );
    let nrt = crate::nrt::NrtSource::new(
        at_start,
        node,
        "node-a".to_string(),
        controller.subscribe_snapshots(),
    );
    let allocatable = || async {
        service
            .get_allocatable_resources(tonic::Request::new(v1::AllocatableResourcesRequest {}))
            .await
            .expect("answer")
            .into_inner()
            .cpu_ids
    };
    let cpu_capacity = || {
        let object = nrt.object(None);
        object["zones"]
            .as_array()
            .expect("zones")
            .iter()
            .flat_map(|z| z["resources"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["name"] == "cpu")
            .map(|r| {
                r["capacity"]
                    .as_str()
                    .map_or(0, |c| c.parse::<u32>().expect("count"))
            })
            .sum::<u32>()
    };
    assert!(allocatable().await.contains(&3));
    assert_eq!(cpu_capacity(), 8);

    controller.follow_topology(&offline("3")).expect("follows");
    let now = allocatable().await;
    assert!(!now.contains(&3), "{now:?}");
    assert_eq!(now.len(), 6, "7 online, cpu 0 reserved: {now:?}");
    assert_eq!(cpu_capacity(), 7);
}
