//! Pool recomputation (figures in docs/performance.md): a 384-CPU machine
//! (2 sockets × 96 cores, SMT2, 2 NUMA nodes per socket), 4 reserved CPUs,
//! 64 dedicated CPUs, 50 shared pools (10 of them NUMA-bound) and 2,000
//! member containers. One pass is what the CPU plugin does every reconcile
//! period: sum the members' requests per pool, sync the pools, run the
//! closed loop with every pool's load, lay the pools out, and give every
//! member container its pool's CPUs, counting those whose cpuset changed.
//!
//! * `steady`: loads inside the hysteresis band (nothing moves);
//! * `churn`: half the pools under pressure, half idle, with no cooldown
//!   (every pool changes size every period, CPUs move between pools).
//!
//! Run: `cargo bench -p pinion-core --bench pools -- --warm-up-time 1 --measurement-time 3`

use std::collections::BTreeMap;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pinion_core::pools::{Cpus, PoolDemand, PoolLoad, PoolParams, Pools};
use pinion_core::topology::{synthetic, Shape};
use pinion_core::{CpuSet, Topology};

const POOLS: usize = 50;
const CONTAINERS: usize = 2_000;

struct Member {
    pool: usize,
    request_milli: u64,
    cpus: CpuSet,
}

struct Bench {
    topology: Topology,
    reserved: CpuSet,
    dedicated: CpuSet,
    names: Vec<String>,
    numa: Vec<Option<CpuSet>>,
    members: Vec<Member>,
    pools: Pools,
}

impl Bench {
    fn new(cooldown: u32) -> Self {
        let topology = synthetic(Shape {
            sockets: 2,
            numa_per_socket: 2,
            cores_per_socket: 96,
            threads_per_core: 2,
            cores_per_uncore: 8,
        });
        let reserved = CpuSet::from_iter([0, 192, 1, 193]);
        let dedicated: CpuSet = (100..132).chain(292..324).collect();
        let names = (0..POOLS).map(|i| format!("pool{i:02}")).collect();
        let numa = (0..POOLS)
            .map(|i| (i % 5 == 0).then(|| CpuSet::from_iter([u32::try_from(i % 4).unwrap_or(0)])))
            .collect();
        let members = (0..CONTAINERS)
            .map(|i| Member {
                pool: i % POOLS,
                request_milli: 50 + 25 * (i % 7) as u64,
                cpus: CpuSet::new(),
            })
            .collect();
        let params = PoolParams {
            cooldown,
            max_headroom: 4,
            ..PoolParams::default()
        };
        let mut bench = Self {
            topology,
            reserved,
            dedicated,
            names,
            numa,
            members,
            pools: Pools::new(params),
        };
        bench.pass(&BTreeMap::new());
        bench
    }

    /// One reconcile period; returns how many containers changed cpuset.
    fn pass(&mut self, loads: &BTreeMap<String, PoolLoad>) -> usize {
        let mut sums: Vec<PoolDemand> = self
            .numa
            .iter()
            .map(|numa| PoolDemand {
                members: 0,
                requests_milli: 0,
                numa: numa.clone(),
            })
            .collect();
        for member in &self.members {
            sums[member.pool].members += 1;
            sums[member.pool].requests_milli += member.request_milli;
        }
        let demands: BTreeMap<String, PoolDemand> = self.names.iter().cloned().zip(sums).collect();
        self.pools.sync(&demands);
        let cpus = Cpus {
            topology: &self.topology,
            reserved: &self.reserved,
            held: &self.dedicated,
        };
        self.pools.reconcile(cpus, loads);
        let plan = self.pools.plan();
        let mut changed = 0;
        for member in &mut self.members {
            if let Some(cpus) = plan.shared.get(&self.names[member.pool]) {
                if *cpus != member.cpus {
                    member.cpus.clone_from(cpus);
                    changed += 1;
                }
            }
        }
        changed
    }
}

fn loads(names: &[String], pressure: impl Fn(usize) -> f64) -> BTreeMap<String, PoolLoad> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            (
                name.clone(),
                PoolLoad {
                    pressure: pressure(i),
                    usage: Some(0.5),
                },
            )
        })
        .collect()
}

fn bench_pools(c: &mut Criterion) {
    let mut group = c.benchmark_group("pools_384cpu_50pools_2000containers");
    let mut steady = Bench::new(2);
    let band = loads(&steady.names, |_| 5.0);
    group.bench_function("steady", |b| b.iter(|| black_box(steady.pass(&band))));
    let mut churn = Bench::new(0);
    let names = churn.names.clone();
    let mut flip = false;
    group.bench_function("churn", |b| {
        b.iter(|| {
            flip = !flip;
            let phase = flip;
            let pressure = loads(&names, |i| if (i % 2 == 0) == phase { 80.0 } else { 0.0 });
            black_box(churn.pass(&pressure))
        });
    });
    group.finish();
}

criterion_group!(benches, bench_pools);
criterion_main!(benches);
