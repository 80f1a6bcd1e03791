//! Allocation speed on the machines (figures in docs/performance.md):
//! 384 CPUs = 2 sockets × 96 cores, SMT2, 2 NUMA nodes per socket, L3 groups
//! of 8 cores; 1024 CPUs = 4 × 128 cores, SMT2, 1 NUMA node per socket, L3
//! groups of 8 cores. Requests 1, 8, 64 and half the machine; packed,
//! uncore-aligned and distribute-numa (group size 1, as kubelet's figures);
//! all CPUs free, and 40 % taken at random (fixed seed). Each machine's
//! `AllocIndex` is built once, outside the timing, as the static policy
//! keeps one (`IndexedTopology`); its one-time cost is the `index` group.
//!
//! Run: `cargo bench -p pinion-core --bench alloc -- --warm-up-time 1 --measurement-time 2`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use pinion_core::alloc::{take_with_index, Algorithm, AllocIndex, CpuSortingStrategy};
use pinion_core::topology::{synthetic, Shape};
use pinion_core::{CpuSet, Topology};

fn machines() -> [(&'static str, Topology); 2] {
    let m384 = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 2,
        cores_per_socket: 96,
        threads_per_core: 2,
        cores_per_uncore: 8,
    });
    let m1024 = synthetic(Shape {
        sockets: 4,
        numa_per_socket: 1,
        cores_per_socket: 128,
        threads_per_core: 2,
        cores_per_uncore: 8,
    });
    [("384", m384), ("1024", m1024)]
}

const ALGORITHMS: [(&str, Algorithm); 3] = [
    (
        "packed",
        Algorithm::Packed {
            strategy: CpuSortingStrategy::Packed,
            prefer_uncore: false,
        },
    ),
    (
        "uncore",
        Algorithm::Packed {
            strategy: CpuSortingStrategy::Packed,
            prefer_uncore: true,
        },
    ),
    (
        "distribute-numa",
        Algorithm::Distributed {
            group_size: 1,
            strategy: CpuSortingStrategy::Packed,
            align_by_socket: false,
        },
    ),
];

/// 60 % of the CPUs, chosen with a fixed-seed xorshift generator.
fn fragmented(all: &CpuSet) -> CpuSet {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    all.iter()
        .filter(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % 100 >= 40
        })
        .collect()
}

fn bench_alloc(c: &mut Criterion) {
    let mut group = c.benchmark_group("alloc");
    for (name, topo) in machines() {
        let index = AllocIndex::new(&topo);
        let all = topo.all_cpus().clone();
        let states = [("idle", all.clone()), ("fragmented", fragmented(&all))];
        for (algo_name, algo) in ALGORITHMS {
            for (state_name, free) in &states {
                for n in [1, 8, 64, all.len() / 2] {
                    let id = BenchmarkId::new(format!("{name}/{algo_name}/{state_name}"), n);
                    group.bench_with_input(id, &n, |b, &n| {
                        b.iter(|| take_with_index(black_box(&index), black_box(free), n, algo));
                    });
                }
            }
        }
    }
    group.finish();
}

fn bench_index(c: &mut Criterion) {
    let mut group = c.benchmark_group("index");
    for (name, topo) in machines() {
        group.bench_function(name, |b| b.iter(|| AllocIndex::new(black_box(&topo))));
    }
    group.finish();
}

/// The bounded search: 64 NUMA nodes (8 sockets × 8 nodes × 4 cores, SMT2),
/// every even CPU free plus every 7th (odd counts), groups of 2 — requests
/// whose combination search runs into `MAX_COMBINATIONS`.
fn bench_many_numa(c: &mut Criterion) {
    let topo = synthetic(Shape {
        sockets: 8,
        numa_per_socket: 8,
        cores_per_socket: 32,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    let free: CpuSet = topo
        .all_cpus()
        .iter()
        .filter(|id| id % 2 == 0 || id % 7 == 0)
        .collect();
    let algo = Algorithm::Distributed {
        group_size: 2,
        strategy: CpuSortingStrategy::Packed,
        align_by_socket: false,
    };
    let index = AllocIndex::new(&topo);
    let mut group = c.benchmark_group("many-numa");
    for n in [2, 64, 130] {
        group.bench_with_input(BenchmarkId::new("64/distribute-numa-g2", n), &n, |b, &n| {
            b.iter(|| take_with_index(black_box(&index), black_box(&free), n, algo));
        });
    }
    group.finish();
}

criterion_group!(benches, bench_alloc, bench_index, bench_many_numa);
criterion_main!(benches);
