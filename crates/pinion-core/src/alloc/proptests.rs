//! Property tests over random regular topologies (sockets, NUMA nodes per
//! socket, SMT 1/2/4, L3 groups that may straddle NUMA nodes), random free
//! sets and requests. The optimised allocator is checked against the plain
//! transcription in `reference.rs` on every case.

use proptest::prelude::*;

use super::{reference, take_by_topology, Algorithm, AllocOptions, CpuSortingStrategy};
use crate::cpuset::CpuSet;
use crate::topology::{synthetic, Shape, Topology};

fn shapes() -> impl Strategy<Value = Shape> {
    (
        1u32..=3,
        1u32..=3,
        1u32..=4,
        prop::sample::select(vec![1u32, 2, 4]),
        0u32..=5,
    )
        .prop_map(
            |(sockets, numa_per_socket, cores_per_numa, threads_per_core, cores_per_uncore)| {
                Shape {
                    sockets,
                    numa_per_socket,
                    cores_per_socket: numa_per_socket * cores_per_numa,
                    threads_per_core,
                    cores_per_uncore,
                }
            },
        )
}

fn algorithms() -> impl Strategy<Value = (u8, bool)> {
    (0u8..5, any::<bool>())
}

fn algorithm(topo: &Topology, pick: u8, align: bool) -> Algorithm {
    let strategy = CpuSortingStrategy::Packed;
    match pick {
        0 => Algorithm::Packed {
            strategy,
            prefer_uncore: false,
        },
        1 => Algorithm::Packed {
            strategy,
            prefer_uncore: true,
        },
        2 => Algorithm::Packed {
            strategy: CpuSortingStrategy::Spread,
            prefer_uncore: false,
        },
        3 => Algorithm::Distributed {
            group_size: 1,
            strategy,
            align_by_socket: align,
        },
        _ => Algorithm::Distributed {
            group_size: topo.cpus_per_core(),
            strategy,
            align_by_socket: align,
        },
    }
}

/// A case: topology, free set (from a mask over CPU ids), request.
fn cases() -> impl Strategy<Value = (Topology, CpuSet, usize, u8, bool)> {
    (
        shapes(),
        prop::collection::vec(any::<bool>(), 96),
        0usize..=100,
        algorithms(),
    )
        .prop_map(|(shape, mask, request, (pick, align))| {
            let topo = synthetic(shape);
            let free: CpuSet = topo
                .all_cpus()
                .iter()
                .filter(|&id| mask[id as usize % mask.len()])
                .collect();
            let request = request % (free.len() + 2);
            (topo, free, request, pick, align)
        })
}

fn numa_count(topo: &Topology, cpus: &CpuSet) -> usize {
    topo.numa_cpus()
        .values()
        .filter(|set| !set.is_disjoint(cpus))
        .count()
}

proptest! {

    /// Same CPUs (or error) as the plain transcription; a subset of the
    /// free CPUs of exactly the requested size, or kubelet's "not enough"
    /// error when the request exceeds the free CPUs; deterministic.
    #[test]
    fn matches_transcription_and_is_valid((topo, free, n, pick, align) in cases()) {
        let algo = algorithm(&topo, pick, align);
        let got = take_by_topology(&topo, &free, n, algo);
        prop_assert_eq!(&got, &reference::take(&topo, &free, n, algo));
        prop_assert_eq!(&got, &take_by_topology(&topo, &free, n, algo));
        match got {
            Ok(cpus) => {
                prop_assert_eq!(cpus.len(), n);
                prop_assert!(cpus.is_subset(&free));
            }
            Err(err) => prop_assert_eq!(err, super::AllocError::NotEnoughCpus { requested: n, available: free.len() }),
        }
    }

    /// kubelet's whole-core guarantee under `full-pcpus-only`: when every
    /// free CPU belongs to a core whose threads are all free and the request
    /// is a multiple of CPUsPerCore, every core the result touches is
    /// entirely in the result (packed, uncore-aligned and distributed).
    #[test]
    fn full_pcpus_only_takes_whole_cores(
        shape in shapes(),
        core_mask in prop::collection::vec(any::<bool>(), 48),
        cores_wanted in 0usize..40,
        numa in any::<bool>(),
        uncore in any::<bool>(),
    ) {
        let topo = synthetic(shape);
        let mut free = CpuSet::new();
        for (i, cpus) in topo.cores().values().enumerate() {
            if core_mask[i % core_mask.len()] {
                free.union_with(cpus);
            }
        }
        let per_core = topo.cpus_per_core();
        let n = (cores_wanted % (free.len() / per_core + 1)) * per_core;
        let options = AllocOptions {
            full_pcpus_only: true,
            distribute_cpus_across_numa: numa,
            prefer_align_cpus_by_uncorecache: uncore && !numa,
            ..AllocOptions::default()
        };
        let cpus = take_by_topology(&topo, &free, n, Algorithm::select(&options, &topo));
        let cpus = cpus.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(cpus.len(), n);
        prop_assert_eq!(topo.core_siblings(&cpus), cpus);
    }

    /// On a machine with every CPU free, a packed allocation of n CPUs
    /// touches exactly ceil(n / CPUs per NUMA node) NUMA nodes — never more
    /// than needed. (With CPUs already taken kubelet gives no such bound: it
    /// fills the emptiest NUMA node first even when another could take the
    /// whole request; and the spread order of distribute-cpus-across-cores
    /// walks a socket by CPU id across its NUMA nodes.)
    #[test]
    fn packed_on_idle_machine_spans_minimal_numa_nodes(shape in shapes(), n in 1usize..=96) {
        let topo = synthetic(shape);
        let all = topo.all_cpus().clone();
        let n = (n - 1) % all.len() + 1;
        let strategy = CpuSortingStrategy::Packed;
        let cpus = take_by_topology(&topo, &all, n, Algorithm::Packed { strategy, prefer_uncore: false });
        let cpus = cpus.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let per_numa = topo.num_cpus() / topo.num_numa_nodes();
        prop_assert_eq!(numa_count(&topo, &cpus), n.div_ceil(per_numa));
    }
}

/// Irregular machines: core ids shared across sockets, cores of different
/// sizes, NUMA nodes spanning sockets, uncore caches spanning NUMA nodes.
fn irregular() -> impl Strategy<Value = (Topology, CpuSet, usize, u8, bool)> {
    let cpu = (0u32..12, 0u32..3, 0u32..4, 0u32..4, any::<bool>());
    (prop::collection::vec(cpu, 1..40), 0usize..50, algorithms()).prop_map(
        |(cpus, request, (pick, align))| {
            let mut free = CpuSet::new();
            let infos = cpus
                .iter()
                .enumerate()
                .map(|(i, &(core, socket, numa, uncore, is_free))| {
                    let id = u32::try_from(i).unwrap_or(0);
                    if is_free {
                        free.insert(id);
                    }
                    crate::topology::CpuInfo {
                        id,
                        core,
                        socket,
                        numa,
                        uncore,
                        llc: None,
                        die: None,
                        core_type: None,
                    }
                })
                .collect();
            let spec = crate::topology::TopologySpec {
                cpus: infos,
                ..Default::default()
            };
            let topo =
                Topology::new(spec).unwrap_or_else(|e| panic!("generated topology invalid: {e}"));
            let request = request % (free.len() + 2);
            (topo, free, request, pick, align)
        },
    )
}

proptest! {

    /// On irregular topologies the result still equals the transcription's
    /// and is a subset of the free CPUs of exactly the requested size
    /// (kubelet itself can hand out busy CPUs or too few here; see the
    /// module documentation of `reference.rs`).
    #[test]
    fn irregular_topologies_stay_valid((topo, free, n, pick, align) in irregular()) {
        let algo = algorithm(&topo, pick, align);
        let got = take_by_topology(&topo, &free, n, algo);
        prop_assert_eq!(&got, &reference::take(&topo, &free, n, algo));
        if let Ok(cpus) = got {
            prop_assert_eq!(cpus.len(), n);
            prop_assert!(cpus.is_subset(&free));
        } else {
            prop_assert!(n > free.len());
        }
    }
}

/// Hybrid machines: per socket P-cores with 2 threads beside single-thread
/// E-cores (kubelet's `CPUsPerCore()` is then below the P-cores' size), with
/// random free sets and requests.
fn hybrid() -> impl Strategy<Value = (Topology, CpuSet, usize, u8, bool)> {
    (
        1u32..=2,
        0u32..=5,
        0u32..=5,
        any::<bool>(),
        prop::collection::vec(any::<bool>(), 48),
        0usize..40,
        algorithms(),
    )
        .prop_map(|(sockets, p, e, adjacent, mask, request, (pick, align))| {
            let mut infos = Vec::new();
            let mut next = 0u32;
            for socket in 0..sockets {
                let base = next;
                for k in 0..p {
                    let pair = if adjacent {
                        [base + 2 * k, base + 2 * k + 1]
                    } else {
                        [base + k, base + k + p]
                    };
                    for id in pair {
                        infos.push((id, pair[0], socket));
                    }
                }
                for k in 0..e {
                    let id = base + 2 * p + k;
                    infos.push((id, id, socket));
                }
                next = base + 2 * p + e;
            }
            if infos.is_empty() {
                infos.push((0, 0, 0));
            }
            let cpus = infos
                .iter()
                .map(|&(id, core, socket)| crate::topology::CpuInfo {
                    id,
                    core,
                    socket,
                    numa: socket,
                    uncore: socket,
                    llc: None,
                    die: None,
                    core_type: None,
                })
                .collect();
            let topo = Topology::new(crate::topology::TopologySpec {
                cpus,
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("generated hybrid topology invalid: {e}"));
            let free: CpuSet = topo
                .all_cpus()
                .iter()
                .filter(|&id| mask[id as usize % mask.len()])
                .collect();
            let request = request % (free.len() + 2);
            (topo, free, request, pick, align)
        })
}

proptest! {

    /// On hybrid machines the allocator equals the transcription, hands out
    /// only free CPUs, exactly as many as requested, and never a busy thread
    /// of a partially used P-core (kubernetes/kubernetes#140495).
    #[test]
    fn hybrid_machines_only_get_free_cpus((topo, free, n, pick, align) in hybrid()) {
        let algo = algorithm(&topo, pick, align);
        let got = take_by_topology(&topo, &free, n, algo);
        prop_assert_eq!(&got, &reference::take(&topo, &free, n, algo));
        match got {
            Ok(cpus) => {
                prop_assert_eq!(cpus.len(), n);
                prop_assert!(cpus.is_subset(&free));
            }
            Err(err) => prop_assert_eq!(err, super::AllocError::NotEnoughCpus { requested: n, available: free.len() }),
        }
    }
}
