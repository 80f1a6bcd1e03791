//! The engine's counters and gauges against newest kubelet's counting
//! (`pkg/kubelet/cm/cpumanager/policy_static.go` `Allocate` and
//! `updateMetricsOnAllocate`, `pkg/kubelet/cm/topologymanager/scope_container.go`
//! and `scope_pod.go`, `policy_static_metrics_test.go`); `docs/metrics.md`
//! has the names.

use pinion_core::engine::{AlignBoundary, AlignScope, AllocationSource, AssignmentType, Engine};
use pinion_core::pod::{Container, Pod};
use pinion_core::policy::PolicyConfig;
use pinion_core::state::State;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::topomgr::{NumaInfo, TopologyManager};
use pinion_core::{CpuSet, Quantity, Topology};

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("test cpulist")
}

/// 2 sockets = 2 NUMA nodes × 4 cores × 2 threads, an L3 per 2 cores.
fn machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 2,
    })
}

fn engine(options: &[(&str, &str)], tm: Option<(&str, &str)>) -> Engine {
    let t = machine();
    let config = PolicyConfig {
        options: options
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        num_reserved: Some(2),
        ..PolicyConfig::default()
    };
    let mut engine = Engine::new(&t, config.build(&t).expect("policy"), State::default());
    if let Some((policy, scope)) = tm {
        let numa = NumaInfo::from_topology(&t).expect("numa");
        let manager = TopologyManager::new(policy, scope, &Default::default(), numa).expect("tm");
        engine = engine.with_topology_manager(manager);
    }
    engine.start().expect("starts");
    engine
}

fn guaranteed(uid: &str, names: &[(&str, &str)]) -> Pod {
    let q = |t: &str| Some(Quantity::parse(t).expect("quantity"));
    Pod {
        uid: uid.to_owned(),
        init_containers: Vec::new(),
        containers: names
            .iter()
            .map(|(name, cpu)| Container {
                name: (*name).to_owned(),
                cpu_request: q(cpu),
                cpu_limit: q(cpu),
                memory_request: q("1Gi"),
                memory_limit: q("1Gi"),
                restart_policy: None,
                ..Container::default()
            })
            .collect(),
        ..Pod::default()
    }
}

#[test]
fn full_pcpus_only_counts_physical_cpu_success_and_any_failure() {
    let mut e = engine(&[("full-pcpus-only", "true")], None);
    let ok = guaranteed("a", &[("c", "2")]);
    assert!(e.admit_container(&ok, "c", None).is_ok());
    // Already in the state: kubelet's deferred counter runs again.
    assert!(e.admit_container(&ok, "c", None).is_ok());
    let odd = guaranteed("b", &[("c", "3")]);
    assert!(e.admit_container(&odd, "c", None).is_err());
    let big = guaranteed("d", &[("c", "20")]);
    assert!(
        e.admit_container(&big, "c", None).is_err(),
        "not an SMT error"
    );
    let m = e.metrics();
    assert_eq!(
        m.aligned
            .get(AlignScope::Container, AlignBoundary::PhysicalCpu),
        2
    );
    assert_eq!(
        m.aligned_failures
            .get(AlignScope::Container, AlignBoundary::PhysicalCpu),
        2,
        "kubelet counts every failure while full-pcpus-only is on"
    );
    assert_eq!((m.pinning_requests_total, m.pinning_errors_total), (4, 2));
    let rm = m.resource_manager;
    assert_eq!(
        rm.allocations(AllocationSource::Node),
        1,
        "fresh allocations only"
    );
    assert_eq!(rm.assignments(AssignmentType::ExclusiveFromNode), 1);
    assert_eq!(rm.errors(AllocationSource::Node), 2);
}

#[test]
fn uncore_alignment_is_counted_on_fresh_allocations_whatever_the_options() {
    let mut e = engine(&[], None);
    // Reserved 0,8 (core 0). 2 CPUs: whole core 1 = {1,9}, in L3 0.
    let a = guaranteed("a", &[("c", "2")]);
    assert_eq!(e.admit_container(&a, "c", None), Ok(Some(set("1,9"))));
    let m = e.metrics();
    assert_eq!(
        m.aligned
            .get(AlignScope::Container, AlignBoundary::UncoreCache),
        1
    );
    assert_eq!(
        m.aligned
            .get(AlignScope::Container, AlignBoundary::PhysicalCpu),
        0
    );
    // 8 CPUs span two L3 groups: not aligned.
    let b = guaranteed("b", &[("c", "8")]);
    assert!(e.admit_container(&b, "c", None).is_ok());
    assert_eq!(
        e.metrics()
            .aligned
            .get(AlignScope::Container, AlignBoundary::UncoreCache),
        1
    );
}

#[test]
fn single_numa_node_counts_numa_alignment_per_container() {
    let mut e = engine(&[], Some(("single-numa-node", "container")));
    let pod = guaranteed("a", &[("small", "2"), ("too-big", "10")]);
    assert!(e.admit_container_with(&pod, "small", &[]).result.is_ok());
    assert!(e.admit_container_with(&pod, "too-big", &[]).result.is_err());
    let m = e.metrics();
    assert_eq!(
        m.aligned
            .get(AlignScope::Container, AlignBoundary::NumaNode),
        1
    );
    assert_eq!(
        m.aligned_failures
            .get(AlignScope::Container, AlignBoundary::NumaNode),
        1
    );
    assert_eq!(m.aligned.get(AlignScope::Pod, AlignBoundary::NumaNode), 0);
}

#[test]
fn single_numa_node_counts_numa_alignment_per_pod_in_pod_scope() {
    let mut e = engine(&[], Some(("single-numa-node", "pod")));
    let pod = guaranteed("a", &[("one", "1"), ("two", "2")]);
    assert!(e.admit_container_with(&pod, "one", &[]).result.is_ok());
    assert_eq!(
        e.metrics()
            .aligned
            .get(AlignScope::Pod, AlignBoundary::NumaNode),
        0
    );
    assert!(e.admit_container_with(&pod, "two", &[]).result.is_ok());
    assert_eq!(
        e.metrics()
            .aligned
            .get(AlignScope::Pod, AlignBoundary::NumaNode),
        1
    );
    let wide = guaranteed("b", &[("c", "12")]);
    assert!(e.admit_container_with(&wide, "c", &[]).result.is_err());
    assert_eq!(
        e.metrics()
            .aligned_failures
            .get(AlignScope::Pod, AlignBoundary::NumaNode),
        1
    );
}

#[test]
fn other_topology_policies_never_count_numa_alignment() {
    let mut e = engine(&[], Some(("restricted", "container")));
    let pod = guaranteed("a", &[("c", "2")]);
    assert!(e.admit_container_with(&pod, "c", &[]).result.is_ok());
    let m = e.metrics();
    assert!(m
        .aligned
        .series()
        .all(|(_, b, v)| b != AlignBoundary::NumaNode || v == 0));
}

/// kubelet's `TestStaticPolicyMetricsContainerAllocation` "init container
/// CPU reuse counted once" on Pinion's gauges.
#[test]
fn gauges_count_reused_cpus_once_and_exclude_reserved_from_the_shared_pool() {
    let mut e = engine(&[], None);
    let idle = e.cpu_gauges();
    assert_eq!(
        (idle.exclusive_cpus, idle.shared_pool_millicores),
        (0, 14_000)
    );
    assert_eq!(idle.allocation_per_numa.len(), 2);
    let q = |t: &str| Some(Quantity::parse(t).expect("quantity"));
    let ctr = |name: &str, cpu: &str| Container {
        name: name.to_owned(),
        cpu_request: q(cpu),
        cpu_limit: q(cpu),
        memory_request: q("1Gi"),
        memory_limit: q("1Gi"),
        restart_policy: None,
        ..Container::default()
    };
    let pod = Pod {
        uid: "p".to_owned(),
        init_containers: vec![ctr("init", "4")],
        containers: vec![ctr("app", "2")],
        ..Pod::default()
    };
    assert!(e.admit_container(&pod, "init", None).is_ok());
    assert!(e.admit_container(&pod, "app", None).is_ok());
    let g = e.cpu_gauges();
    assert_eq!((g.exclusive_cpus, g.shared_pool_millicores), (4, 10_000));
    e.remove("p", "init");
    assert_eq!(e.cpu_gauges().exclusive_cpus, 2);
    e.remove("p", "app");
    assert_eq!(e.cpu_gauges(), idle);
}

/// kubelet only sets the per-NUMA gauge of nodes that still hold exclusive
/// CPUs, so a node whose last exclusive CPU is released keeps its old value;
/// Pinion's gauges are recomputed from the state and read 0 there.
#[test]
fn gauges_read_zero_on_a_numa_node_whose_cpus_were_released() {
    let mut e = engine(&[], None);
    let pod = guaranteed("p", &[("app", "4")]);
    let cpus = e
        .admit_container(&pod, "app", None)
        .expect("admit")
        .expect("exclusive");
    let node = machine()
        .cpu(cpus.iter().next().expect("a cpu"))
        .expect("cpu")
        .numa;
    assert_eq!(e.cpu_gauges().allocation_per_numa[&node], 4);
    e.remove("p", "app");
    let after = e.cpu_gauges().allocation_per_numa;
    assert_eq!(after.len(), 2);
    assert!(after.values().all(|&n| n == 0), "{after:?}");
}
