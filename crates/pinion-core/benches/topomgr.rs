//! Topology Manager merge and admission on many-NUMA machines.
//!
//! Run: `cargo bench -p pinion-core --bench topomgr -- --warm-up-time 1 --measurement-time 2`
//! Figures are recorded in docs/performance.md (## Topology Manager).

use std::collections::BTreeMap;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pinion_core::topology::{CpuInfo, NumaNode, Topology, TopologySpec};
use pinion_core::topomgr::bitmask::iterate_masks;
use pinion_core::topomgr::cpu_hints::generate_cpu_hints;
use pinion_core::topomgr::{NumaInfo, NumaMask, ProviderHints, TopologyHint, TopologyManager};
use pinion_core::CpuSet;

fn mask(ids: &[u32]) -> NumaMask {
    NumaMask::from_ids(ids.iter().copied()).expect("ids below 64")
}

/// Every single node and pair of `nodes`; singles preferred.
fn singles_and_pairs(nodes: &[u32]) -> Vec<TopologyHint> {
    let mut hints: Vec<TopologyHint> = nodes
        .iter()
        .map(|&n| TopologyHint::new(mask(&[n]), true))
        .collect();
    for (i, &a) in nodes.iter().enumerate() {
        for &b in &nodes[i + 1..] {
            hints.push(TopologyHint::new(mask(&[a, b]), false));
        }
    }
    hints
}

/// Every non-empty subset of `nodes`; the single nodes preferred.
fn all_subsets(nodes: &[u32]) -> Vec<TopologyHint> {
    let mut hints = Vec::new();
    iterate_masks(nodes, |m| hints.push(TopologyHint::new(m, m.count() == 1)));
    hints
}

fn provider(resources: &[(&str, Vec<TopologyHint>)]) -> ProviderHints {
    Some(
        resources
            .iter()
            .map(|(name, hints)| ((*name).to_owned(), Some(hints.clone())))
            .collect(),
    )
}

/// Distances: 10 local, 12 within a group of 4 nodes, 20 within 16, 30 beyond.
fn distances(n: u32) -> BTreeMap<u32, BTreeMap<u32, u32>> {
    (0..n)
        .map(|i| {
            let row = (0..n)
                .map(|j| {
                    let d = match (i, j) {
                        _ if i == j => 10,
                        _ if i / 4 == j / 4 => 12,
                        _ if i / 16 == j / 16 => 20,
                        _ => 30,
                    };
                    (j, d)
                })
                .collect();
            (i, row)
        })
        .collect()
}

fn manager(nodes: u32, options: &[(&str, &str)], policy: &str) -> TopologyManager {
    let ids: Vec<u32> = (0..nodes).collect();
    let numa = NumaInfo::new(&ids, Some(&distances(nodes))).expect("valid nodes");
    let mut map: BTreeMap<String, String> = options
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    map.insert("max-allowable-numa-nodes".to_owned(), "64".to_owned());
    TopologyManager::new(policy, "container", &map, numa).expect("valid manager")
}

/// 64 NUMA nodes, CPUs on nodes 0-3 only (the rest memory-only, like GPU HBM
/// nodes on GB200 trays): 4 nodes × 18 cores × 2 threads.
fn gb200_like() -> Topology {
    let mut cpus = Vec::new();
    for thread in 0..2u32 {
        for core in 0..72u32 {
            cpus.push(CpuInfo {
                id: thread * 72 + core,
                core,
                socket: core / 36,
                numa: core / 18,
                uncore: core / 18,
                llc: None,
                die: None,
                core_type: None,
            });
        }
    }
    let numa_nodes = (0..64)
        .map(|id| NumaNode {
            id,
            distances: Vec::new(),
            memory_bytes: None,
        })
        .collect();
    Topology::new(TopologySpec {
        cpus,
        numa_nodes,
        ..TopologySpec::default()
    })
    .expect("valid topology")
}

fn bench_merge(c: &mut Criterion) {
    let mut group = c.benchmark_group("topomgr_merge");
    group.sample_size(10);

    // kubernetes #131738: 8 NUMA nodes, 4 resources × 255 hints (kubelet: ~21 min).
    let eight: Vec<u32> = (0..8).collect();
    let m8 = manager(8, &[], "best-effort");
    let p8: Vec<ProviderHints> = (0..4)
        .map(|i| provider(&[(["a", "b", "c", "d"][i], all_subsets(&eight))]))
        .collect();
    group.bench_function("8numa_4x255_best_effort", |b| {
        b.iter(|| m8.merge(black_box(&p8)));
    });

    // 64 NUMA nodes, 4 providers × 2080 hints (all singles and pairs).
    let sixty_four: Vec<u32> = (0..64).collect();
    let p64: Vec<ProviderHints> = (0..4)
        .map(|i| {
            provider(&[(
                ["cpu", "memory", "hugepages-1Gi", "nic"][i],
                singles_and_pairs(&sixty_four),
            )])
        })
        .collect();
    let m64 = manager(64, &[], "restricted");
    group.bench_function("64numa_4x2080_restricted", |b| {
        b.iter(|| m64.merge(black_box(&p64)));
    });
    let m64c = manager(64, &[("prefer-closest-numa-nodes", "true")], "best-effort");
    group.bench_function("64numa_4x2080_closest", |b| {
        b.iter(|| m64c.merge(black_box(&p64)));
    });

    // No common preferred mask: the non-preferred pass does the work.
    let shifted: Vec<ProviderHints> = (0..4u32)
        .map(|i| {
            let nodes: Vec<u32> = (0..64).filter(|n| n % 4 != i).collect();
            let hints: Vec<TopologyHint> = singles_and_pairs(&nodes)
                .into_iter()
                .map(|h| TopologyHint {
                    preferred: false,
                    ..h
                })
                .collect();
            provider(&[("r", hints)])
        })
        .collect();
    group.bench_function("64numa_4x1500_no_preferred_best_effort", |b| {
        b.iter(|| m64.merge(black_box(&shifted)));
    });
    group.finish();
}

fn bench_admission(c: &mut Criterion) {
    let mut group = c.benchmark_group("topomgr_admission");
    group.sample_size(10);
    let topology = gb200_like();
    let manager = manager(64, &[], "single-numa-node");
    let available = CpuSet::range(2, 143);
    let all: Vec<u32> = (0..64).collect();
    let memory = singles_and_pairs(&all);
    group.bench_function("64numa_gb200_like_cpu_hints_and_merge", |b| {
        b.iter(|| {
            let cpu =
                generate_cpu_hints(&topology, &available, &CpuSet::new(), black_box(16), false);
            let providers = vec![
                provider(&[("cpu", cpu)]),
                provider(&[
                    ("memory", memory.clone()),
                    ("hugepages-1Gi", memory.clone()),
                ]),
            ];
            manager.merge(&providers)
        });
    });
    group.finish();
}

criterion_group!(benches, bench_merge, bench_admission);
criterion_main!(benches);
