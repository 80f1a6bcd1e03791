//! A full engine admission on 64-NUMA machines: CPU hint generation, extra
//! providers' hints (memory, hugepages, NIC), the Topology Manager merge and
//! the CPU allocation inside the merged affinity, as
//! `Engine::admit_container_with` does it for one Guaranteed container.
//!
//! Run: `cargo bench -p pinion-core --bench engine_admission -- --warm-up-time 1 --measurement-time 2`
//! Figures: docs/performance.md (## Topology Manager admission).

use std::collections::BTreeMap;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use pinion_core::engine::Engine;
use pinion_core::pod::{Container, Pod};
use pinion_core::policy::PolicyConfig;
use pinion_core::state::State;
use pinion_core::topology::{CpuInfo, NumaNode, Topology, TopologySpec};
use pinion_core::topomgr::provider::{HintProvider, ResourceHints, StaticHints};
use pinion_core::topomgr::{NumaMask, TopologyHint};
use pinion_core::Quantity;

/// 64 NUMA nodes; the first `cpu_nodes` hold `cores` cores × 2 threads each,
/// the others are memory-only (GPU HBM, CXL…). Distances: 10 local, 12
/// within a group of 4 nodes, 20 within 16, 30 beyond.
fn machine(cpu_nodes: u32, cores: u32) -> Topology {
    let total_cores = cpu_nodes * cores;
    let mut cpus = Vec::new();
    for thread in 0..2 {
        for core in 0..total_cores {
            let numa = core / cores;
            cpus.push(CpuInfo {
                id: thread * total_cores + core,
                core,
                socket: numa * 2 / cpu_nodes,
                numa,
                uncore: numa,
                llc: None,
                die: None,
                core_type: None,
            });
        }
    }
    let distance = |i: u32, j: u32| match () {
        () if i == j => 10,
        () if i / 4 == j / 4 => 12,
        () if i / 16 == j / 16 => 20,
        () => 30,
    };
    let numa_nodes = (0..64)
        .map(|id| NumaNode {
            id,
            distances: (0..64).map(|j| distance(id, j)).collect(),
            memory_bytes: Some(64 << 30),
        })
        .collect();
    Topology::new(TopologySpec {
        cpus,
        numa_nodes,
        ..TopologySpec::default()
    })
    .expect("valid topology")
}

fn engine(topology: &Topology, policy: &str) -> Engine {
    let config = PolicyConfig {
        num_reserved: Some(2),
        topology_manager_policy: Some(policy.to_owned()),
        topology_manager_policy_options: BTreeMap::from([(
            "max-allowable-numa-nodes".to_owned(),
            "64".to_owned(),
        )]),
        ..PolicyConfig::default()
    };
    let manager = config.build_topology_manager(topology).expect("manager");
    let policy = config.build(topology).expect("policy");
    let mut engine = Engine::new(topology, policy, State::default()).with_topology_manager(manager);
    engine.start().expect("start");
    engine
}

fn mask(ids: &[u32]) -> NumaMask {
    NumaMask::from_ids(ids.iter().copied()).expect("ids below 64")
}

/// Memory-like hints: every node and pair of nodes, singles preferred.
fn singles_and_pairs() -> Vec<TopologyHint> {
    let mut hints: Vec<TopologyHint> = (0..64)
        .map(|n| TopologyHint::new(mask(&[n]), true))
        .collect();
    for a in 0..64 {
        for b in a + 1..64 {
            hints.push(TopologyHint::new(mask(&[a, b]), false));
        }
    }
    hints
}

/// Extra providers for `bench/app`: memory and hugepages on any node or
/// pair, a NIC on `nic_node`.
fn extra(nic_node: u32) -> StaticHints {
    let memory = singles_and_pairs();
    let resources: ResourceHints = BTreeMap::from([
        ("memory".to_owned(), Some(memory.clone())),
        ("hugepages-1Gi".to_owned(), Some(memory)),
        (
            "example.com/nic".to_owned(),
            Some(vec![TopologyHint::new(mask(&[nic_node]), true)]),
        ),
    ]);
    StaticHints::new(BTreeMap::from([("bench/app".to_owned(), resources)]))
}

fn pod(cpus: u32) -> Pod {
    let cpu = Quantity::parse(&cpus.to_string()).expect("quantity");
    let memory = Quantity::parse("8Gi").expect("quantity");
    Pod {
        uid: "bench".to_owned(),
        containers: vec![Container {
            name: "app".to_owned(),
            cpu_request: Some(cpu.clone()),
            cpu_limit: Some(cpu),
            memory_request: Some(memory.clone()),
            memory_limit: Some(memory),
            ..Container::default()
        }],
        ..Pod::default()
    }
}

fn bench_case(c: &mut Criterion, name: &str, engine: &Engine, pod: &Pod, extra: &StaticHints) {
    let providers: [&dyn HintProvider; 1] = [extra];
    let mut check = engine.clone();
    let report = check.admit_container_with(pod, "app", &providers);
    assert!(report.result.is_ok(), "{name}: {report:?}");
    c.bench_function(name, |b| {
        b.iter_batched(
            || engine.clone(),
            |mut engine| engine.admit_container_with(pod, "app", &providers),
            BatchSize::SmallInput,
        );
    });
}

fn bench_admission(c: &mut Criterion) {
    // GB200-like: CPUs on 4 nodes (36 CPUs each), 60 memory-only nodes.
    let gb200 = machine(4, 18);
    let single = engine(&gb200, "single-numa-node");
    bench_case(
        c,
        "admit_64numa_4cpu_nodes_single_numa_node",
        &single,
        &pod(8),
        &extra(2),
    );
    // 16 nodes with CPUs (every mask listed: 65,535), 48 memory-only.
    let sixteen = machine(16, 8);
    let best = engine(&sixteen, "best-effort");
    bench_case(
        c,
        "admit_64numa_16cpu_nodes_best_effort",
        &best,
        &pod(8),
        &extra(5),
    );
    // 64 nodes with CPUs: bounded hint list (65,537 hints).
    let all = machine(64, 4);
    let restricted = engine(&all, "restricted");
    bench_case(
        c,
        "admit_64numa_64cpu_nodes_restricted",
        &restricted,
        &pod(6),
        &extra(9),
    );
    // A request spanning 3 nodes: no preferred merge, the non-preferred pass runs.
    let best_all = engine(&all, "best-effort");
    bench_case(
        c,
        "admit_64numa_64cpu_nodes_3node_request_best_effort",
        &best_all,
        &pod(20),
        &extra(9),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench_admission
}
criterion_main!(benches);
