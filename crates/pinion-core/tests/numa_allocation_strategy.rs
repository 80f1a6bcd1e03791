//! KEP-6007's `numa-allocation-strategy` through the engine: among equally
//! good NUMA nodes `most-allocated` packs onto the node holding more
//! exclusive CPUs and `least-allocated` spreads onto the one holding fewer;
//! `none` (and no option) keep kubelet's lowest-node choice.

use std::collections::BTreeMap;

use pinion_core::engine::Engine;
use pinion_core::pod::{Container, Pod};
use pinion_core::policy::{Policy, Reservation, StaticPolicy, StaticPolicyOptions};
use pinion_core::quantity::Quantity;
use pinion_core::state::State;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::topomgr::{NumaInfo, TopologyManager};
use pinion_core::{CpuSet, Topology};

/// 2 NUMA nodes (one per socket) of 4 cores × 2 threads: node 0 = 0-3,8-11,
/// node 1 = 4-7,12-15.
fn machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
}

fn engine(policy: &str, scope: &str, strategy: Option<&str>) -> Engine {
    let t = machine();
    let reservation = Reservation {
        count: 1,
        cpus: CpuSet::from_iter([0]),
    };
    let static_policy = StaticPolicy::new(t.clone(), StaticPolicyOptions::default(), &reservation)
        .expect("test setup or admission");
    let options: BTreeMap<String, String> = strategy
        .map(|s| [("numa-allocation-strategy".to_owned(), s.to_owned())].into())
        .unwrap_or_default();
    let numa = NumaInfo::from_topology(&t).expect("test setup or admission");
    let manager =
        TopologyManager::new(policy, scope, &options, numa).expect("test setup or admission");
    let mut engine = Engine::new(
        &t,
        Policy::Static(Box::new(static_policy)),
        State::default(),
    )
    .with_topology_manager(manager);
    engine.start().expect("test setup or admission");
    engine
}

fn pod(uid: &str, cpus: &str) -> Pod {
    let quantity = Quantity::parse(cpus).expect("test setup or admission");
    let memory = Quantity::parse("1Gi").expect("test setup or admission");
    Pod {
        uid: uid.to_owned(),
        containers: vec![Container {
            name: "c".to_owned(),
            cpu_request: Some(quantity.clone()),
            cpu_limit: Some(quantity),
            memory_request: Some(memory.clone()),
            memory_limit: Some(memory),
            ..Container::default()
        }],
        ..Pod::default()
    }
}

/// The NUMA node of a second 2-CPU pod after a first one was placed on
/// node `first_on`.
fn second_pod_node(policy: &str, strategy: Option<&str>, first_on: u32) -> Vec<u32> {
    let mut e = engine(policy, "container", strategy);
    e.admit_container(&pod("first", "2"), "c", Some(&[first_on]))
        .expect("test setup or admission");
    let cpus = e
        .admit_container(&pod("second", "2"), "c", None)
        .expect("test setup or admission")
        .expect("test setup or admission");
    e.machine().numa_nodes_of(&cpus)
}

#[test]
fn most_allocated_packs_onto_the_busier_node() {
    for policy in ["best-effort", "restricted", "single-numa-node"] {
        assert_eq!(
            second_pod_node(policy, Some("most-allocated"), 1),
            vec![1],
            "{policy}"
        );
    }
}

#[test]
fn least_allocated_spreads_onto_the_idler_node() {
    for policy in ["best-effort", "restricted", "single-numa-node"] {
        assert_eq!(
            second_pod_node(policy, Some("least-allocated"), 0),
            vec![1],
            "{policy}"
        );
    }
}

#[test]
fn off_or_none_keeps_the_lowest_node() {
    for strategy in [None, Some("none")] {
        assert_eq!(second_pod_node("best-effort", strategy, 0), vec![0]);
        assert_eq!(second_pod_node("best-effort", strategy, 1), vec![0]);
    }
}

#[test]
fn the_strategy_never_overrides_a_narrower_or_preferred_hint() {
    // A 10-CPU pod fits no single node (7 and 8 allocatable): both nodes,
    // whatever the strategy.
    for strategy in ["most-allocated", "least-allocated"] {
        let mut e = engine("best-effort", "container", Some(strategy));
        e.admit_container(&pod("first", "2"), "c", Some(&[1]))
            .expect("test setup or admission");
        let cpus = e
            .admit_container(&pod("big", "10"), "c", None)
            .expect("test setup or admission")
            .expect("test setup or admission");
        assert_eq!(e.machine().numa_nodes_of(&cpus), vec![0, 1], "{strategy}");
    }
}
