//! Unit tests of the allocator (the corpus runs in `tests/conformance_take.rs`).

use super::*;
use crate::topology::{synthetic, Shape};

fn shape(sockets: u32, numa: u32, cores: u32, threads: u32, per_uncore: u32) -> Topology {
    synthetic(Shape {
        sockets,
        numa_per_socket: numa,
        cores_per_socket: cores,
        threads_per_core: threads,
        cores_per_uncore: per_uncore,
    })
}

fn list(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("valid cpulist")
}

const PACKED: Algorithm = Algorithm::Packed {
    strategy: CpuSortingStrategy::Packed,
    prefer_uncore: false,
};

#[test]
fn select_follows_kubelet_policy_options() {
    let topo = shape(2, 1, 4, 2, 0);
    let cases = [
        (AllocOptions::default(), PACKED),
        (
            AllocOptions {
                prefer_align_cpus_by_uncorecache: true,
                ..AllocOptions::default()
            },
            Algorithm::Packed {
                strategy: CpuSortingStrategy::Packed,
                prefer_uncore: true,
            },
        ),
        (
            AllocOptions {
                distribute_cpus_across_cores: true,
                ..AllocOptions::default()
            },
            Algorithm::Packed {
                strategy: CpuSortingStrategy::Spread,
                prefer_uncore: false,
            },
        ),
        (
            AllocOptions {
                distribute_cpus_across_numa: true,
                ..AllocOptions::default()
            },
            Algorithm::Distributed {
                group_size: 1,
                strategy: CpuSortingStrategy::Packed,
                align_by_socket: false,
            },
        ),
        (
            AllocOptions {
                distribute_cpus_across_numa: true,
                full_pcpus_only: true,
                align_by_socket: true,
                ..AllocOptions::default()
            },
            Algorithm::Distributed {
                group_size: 2,
                strategy: CpuSortingStrategy::Packed,
                align_by_socket: true,
            },
        ),
        (
            AllocOptions {
                full_pcpus_only: true,
                ..AllocOptions::default()
            },
            PACKED,
        ),
    ];
    for (options, want) in cases {
        assert_eq!(Algorithm::select(&options, &topo), want, "{options:?}");
    }
}

#[test]
fn error_texts_are_kubelets() {
    let topo = shape(1, 1, 4, 2, 0);
    let err = take_by_topology(&topo, &list("0,2,4,6"), 5, PACKED).unwrap_err();
    assert_eq!(
        err.to_string(),
        "not enough cpus available to satisfy request: requested=5, available=4"
    );
    assert_eq!(AllocError::Failed.to_string(), "failed to allocate cpus");
    assert_eq!(
        AllocError::AccountingNotEnough { remaining: 2 }.to_string(),
        "accounting error, not enough CPUs allocated, remaining: 2"
    );
    assert_eq!(
        AllocError::AccountingTooMany { remaining: -2 }.to_string(),
        "accounting error, too many CPUs allocated, remaining: -2"
    );
}

#[test]
fn zero_request_is_empty_and_zero_group_is_an_error() {
    let topo = shape(1, 1, 4, 2, 0);
    assert_eq!(
        take_by_topology(&topo, &list("0-7"), 0, PACKED),
        Ok(CpuSet::new())
    );
    let bad = Algorithm::Distributed {
        group_size: 0,
        strategy: CpuSortingStrategy::Packed,
        align_by_socket: false,
    };
    assert_eq!(
        take_by_topology(&topo, &list("0-7"), 2, bad),
        Err(AllocError::ZeroGroupSize)
    );
}

#[test]
fn unknown_available_cpus_are_ignored_but_counted_in_the_error() {
    let topo = shape(1, 1, 2, 1, 0);
    assert_eq!(
        take_by_topology(&topo, &list("0-1,100"), 2, PACKED),
        Ok(list("0-1"))
    );
    let err = take_by_topology(&topo, &list("0,100"), 2, PACKED).unwrap_err();
    assert_eq!(
        err,
        AllocError::NotEnoughCpus {
            requested: 2,
            available: 2
        }
    );
}

const NUMA_GROUP_2: Algorithm = Algorithm::Distributed {
    group_size: 2,
    strategy: CpuSortingStrategy::Packed,
    align_by_socket: false,
};

/// The inputs of `random_take_hangs.json` (kubelet never returns): 4 NUMA
/// nodes of 10 cores (SMT2), 5 free CPUs each, 14 CPUs in groups of 2.
/// Decision 001: the remainder subsets that cannot be served are skipped,
/// so the best servable plan is used — 4 + 4 + 4 + 2 CPUs.
#[test]
fn kubelet_hang_inputs_return_the_best_servable_plan() {
    let topo = shape(2, 2, 20, 2, 0);
    for free in [
        "0-4,10-14,20-24,30-34",
        "0-2,40-41,10-12,50-51,20-22,60-61,30-32,70-71",
    ] {
        let free = list(free);
        let cpus = take_by_topology(&topo, &free, 14, NUMA_GROUP_2).expect("allocates");
        assert_eq!(cpus.len(), 14);
        assert!(cpus.is_subset(&free));
        let per_numa: Vec<usize> = topo
            .numa_cpus()
            .values()
            .map(|s| s.intersection_len(&cpus))
            .collect();
        assert_eq!(per_numa, vec![4, 4, 4, 2], "free {free}");
    }
}

/// 64 NUMA nodes (8 sockets × 8), odd free counts everywhere: the
/// combination search is cut by `MAX_COMBINATIONS` and still returns a
/// valid allocation.
#[test]
fn many_numa_nodes_terminate_with_a_valid_result() {
    let topo = shape(8, 8, 16, 2, 0);
    // Even CPU ids plus every 7th id: uneven, often odd, free counts per node.
    let free: CpuSet = topo
        .cpus()
        .iter()
        .filter(|c| c.id % 2 == 0 || c.id % 7 == 0)
        .map(|c| c.id)
        .collect();
    for n in [2, 64, 130, free.len() / 2 / 2 * 2] {
        for align_by_socket in [false, true] {
            let algo = Algorithm::Distributed {
                group_size: 2,
                strategy: CpuSortingStrategy::Packed,
                align_by_socket,
            };
            let cpus = take_by_topology(&topo, &free, n, algo).expect("allocates");
            assert_eq!(cpus.len(), n);
            assert!(cpus.is_subset(&free));
        }
    }
}

/// kubelet's stored combination aliases a Go slice: with 5 equal NUMA nodes
/// and k = 4, every combination scores the same, the first ({0,1,2,3}) is
/// kept, and the next one visited ({0,1,2,4}) overwrites its last element —
/// kubelet allocates from NUMA nodes 0, 1, 2 and 4.
#[test]
fn distributed_reproduces_kubelets_slice_aliasing() {
    let topo = shape(5, 1, 10, 1, 0);
    let algo = Algorithm::Distributed {
        group_size: 1,
        strategy: CpuSortingStrategy::Packed,
        align_by_socket: false,
    };
    let cpus = take_by_topology(&topo, topo.all_cpus(), 40, algo).expect("allocates");
    assert_eq!(cpus, list("0-29,40-49"));
}

#[test]
fn an_indexed_topology_allocates_as_a_fresh_index_and_clones_share_it() {
    let topo = shape(2, 1, 4, 2, 2);
    let indexed = IndexedTopology::new(std::sync::Arc::new(topo.clone()));
    let clone = indexed.clone();
    assert_eq!(
        take_with_index(indexed.index(), topo.all_cpus(), 3, PACKED),
        take_by_topology(&topo, topo.all_cpus(), 3, PACKED)
    );
    assert!(std::ptr::eq(indexed.index(), clone.index()), "built once");
    assert_eq!(**clone.topology(), topo);
    assert!(format!("{:?}", clone.index()).starts_with("AllocIndex { cpus: 16,"));
}
