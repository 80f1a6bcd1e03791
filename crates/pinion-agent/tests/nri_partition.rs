//! Issue 31 item 1 through the NRI front-end: with `exclusiveCpus.partition:
//! isolated`, a Guaranteed container's cgroup (the fake runtime's
//! `linux.cgroups_path`, as containerd's cgroupfs driver sends it) becomes an
//! isolated cpuset partition when the runtime relays `StartContainer`, not
//! before; its stop takes the partition apart while its CPUs stay held for
//! a restart; the pod's end gives them to the shared pool. The fake host
//! models the kernel's rules for `cpuset.cpus.exclusive`.

mod nri_common;

use nri_common::*;
use pinion_agent::testing::SyntheticNode;
use pinion_core::partition::PartitionMode;
use pinion_core::CpuSet;

/// The agent of `node` with `exclusiveCpus.partition: mode`.
async fn agent(node: &Node, mode: PartitionMode) -> Agent {
    let synthetic = SyntheticNode {
        host: node.host.clone(),
        ..SyntheticNode::new(topology())
    }
    .with_partition(mode);
    let agent = Agent::start_on(&synthetic, node.state.path(), &node.socket(), None);
    node.runtime.wait_synced(1).await;
    agent
}

fn exclusive_of(node: &Node, dir: &str) -> String {
    node.host
        .tree()
        .partitions
        .get(std::path::Path::new(dir), "cpuset.cpus.exclusive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guaranteed_container_is_an_isolated_partition_from_its_start_to_its_stop() {
    let node = Node::new();
    let agent = agent(&node, PartitionMode::Isolated).await;
    let (_, web) = node
        .pod_with(burstable_pod("web"), burstable("web", 500))
        .await;
    let db_pod = node.runtime.run_pod(guaranteed_pod("db")).await.unwrap();
    let db = node
        .runtime
        .create_container(&db_pod, container("db", 2000))
        .await
        .unwrap();
    let leaf = format!("kubepods/poddb/{db}");
    assert!(
        node.host.tree().partitions.writes.is_empty(),
        "no partition before the task exists"
    );
    node.runtime.start_container(&db).await.unwrap();
    let cpus = set(&node.runtime.cpus(&db));
    assert_eq!(cpus.len(), 2);
    assert_eq!(node.host.tree().partitions.partition(&leaf), "isolated");
    assert_eq!(node.host.tree().partitions.isolated(), cpus);
    assert_eq!(set(&exclusive_of(&node, "kubepods")), cpus);
    let shared = agent.handle.snapshot().shared_pool.clone();
    node.wait_cpus(&web, &shared.to_string()).await;
    assert_eq!(set(&node.runtime.cpus(&web)).intersection_len(&cpus), 0);
    let view = agent
        .handle
        .snapshot()
        .workload("db", "db")
        .cloned()
        .expect("db");
    assert_eq!(view.partition.as_deref(), Some("isolated"));

    // Stopped while its pod runs: held, so its CPUs stay out of the shared
    // pool, but its partition is taken apart, the ancestors' claims too.
    node.runtime.stop_container(&db).await.unwrap();
    assert_eq!(node.host.tree().partitions.partition(&leaf), "member");
    assert_eq!(node.host.tree().partitions.isolated(), CpuSet::new());
    assert_eq!(exclusive_of(&node, "kubepods"), "");
    assert_eq!(exclusive_of(&node, "kubepods/poddb"), "");
    assert_eq!(agent.handle.snapshot().assignments["db"]["db"], cpus);

    // The pod's end gives the CPUs back to the shared pool.
    node.runtime.remove_container(&db).await.unwrap();
    node.runtime.stop_pod(&db_pod).await.unwrap();
    node.runtime.remove_pod(&db_pod).await.unwrap();
    node.wait_cpus(&web, "0-7").await;
    let snapshot = agent.handle.snapshot();
    assert_eq!(snapshot.metrics.counters.partitions_made_total, 1);
    assert_eq!(snapshot.metrics.counters.partition_fallbacks_total, 0);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_mode_writes_no_partition_for_a_started_container() {
    let node = Node::new();
    let agent = agent(&node, PartitionMode::Member).await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    assert_eq!(set(&node.runtime.cpus(&db)).len(), 2);
    assert!(node.host.tree().partitions.writes.is_empty());
    let view = agent
        .handle
        .snapshot()
        .workload("db", "db")
        .cloned()
        .expect("db");
    assert_eq!(view.partition, None);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_kernel_falls_back_and_the_container_runs_on_its_cpus() {
    let node = Node::new();
    node.host.tree().partitions.unsupported = true;
    let agent = agent(&node, PartitionMode::Isolated).await;
    let (_, db) = node
        .pod_with(guaranteed_pod("db"), container("db", 2000))
        .await;
    assert_eq!(set(&node.runtime.cpus(&db)).len(), 2);
    let snapshot = agent.handle.snapshot();
    let view = snapshot.workload("db", "db").cloned().expect("db");
    let partition = view.partition.expect("marked");
    assert!(
        partition.starts_with("member (fallback: kubepods/cpuset.cpus.exclusive is missing"),
        "{partition}"
    );
    assert!(partition.contains("Linux 6.7"), "{partition}");
    assert_eq!(snapshot.metrics.counters.partition_fallbacks_total, 1);
    agent.stop().await;
}
