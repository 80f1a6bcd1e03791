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
