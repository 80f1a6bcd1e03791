//! In-place resize of exclusive CPUs (KEP-5554): kubelet's own tables for
//! the allocator variants, transcribed from
//! `esotsal/kubernetes@3892f45923fc7b80df8b65bc79e7a25a180463d9`
//! `pkg/kubelet/cm/cpumanager/cpu_assignment_test.go` (the branch of
//! kubernetes/kubernetes PR #140629): `commonTakeByTopologyTestCasesForResize`
//! (all 28 rows, `TestTakeByTopologyNUMAPackedForResize`) and
//! `commonTakeByTopologyExtendedTestCasesForResize` (all 24 rows,
//! `TestTakeByTopologyNUMADistributedForResize`). A row's `current` is the
//! test's `reusableCPUs` (the container's CPUs), `must_keep` its
//! `mustKeepCPUs` (the promised ones). Fixtures are read from the
//! conformance corpus by their Go names; one row upstream names twice gets
//! `#01`, as `t.Run` would.

mod common;

use pinion_core::alloc::resize::{take_distributed_for_resize, take_packed_for_resize};
use pinion_core::alloc::CpuSortingStrategy;
use pinion_core::{CpuSet, Topology};

struct PackedRow {
    name: &'static str,
    fixture: &'static str,
    /// "" packed, "spread" (distribute-cpus-across-cores), "uncore"
    /// (prefer-align-cpus-by-uncorecache).
    mode: &'static str,
    available: &'static str,
    current: &'static str,
    must_keep: &'static str,
    n: usize,
    error: &'static str,
    expect: &'static str,
}

struct DistributedRow {
    name: &'static str,
    fixture: &'static str,
    available: &'static str,
    current: &'static str,
    must_keep: &'static str,
    n: usize,
    group_size: usize,
    error: &'static str,
    expect: &'static str,
}

include!("data/resize_rows.rs");

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("test cpulist")
}

/// The topology of the first corpus case built from Go fixture `name`.
fn fixture(name: &str) -> Option<Topology> {
    for file in [
        "TestTakeByTopologyNUMAPacked.json",
        "TestTakeByTopologyNUMADistributed.json",
        "TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption.json",
        "TestStaticPolicyAdd.json",
    ] {
        let cases = common::load_cases(file)?;
        if let Some(case) = cases.iter().find(|c| c["fixture"] == name) {
            return Some(
                serde_json::from_value(case["topology"].clone()).expect("corpus topology"),
            );
        }
    }
    panic!("fixture {name} is not in the corpus")
}

#[test]
fn kubelet_take_by_topology_numa_packed_for_resize_table() {
    let mut failures = Vec::new();
    for row in PACKED {
        let Some(topo) = fixture(row.fixture) else {
            return;
        };
        let strategy = if row.mode == "spread" {
            CpuSortingStrategy::Spread
        } else {
            CpuSortingStrategy::Packed
        };
        let got = take_packed_for_resize(
            &topo,
            &set(row.available),
            row.n,
            strategy,
            row.mode == "uncore",
            &set(row.current),
            &set(row.must_keep),
        );
        check(
            &mut failures,
            row.name,
            got.map_err(|e| e.to_string()),
            row.error,
            row.expect,
        );
    }
    common::assert_all_passed(
        "TestTakeByTopologyNUMAPackedForResize",
        PACKED.len(),
        &failures,
    );
}

#[test]
fn kubelet_take_by_topology_numa_distributed_for_resize_table() {
    let mut failures = Vec::new();
    for row in DISTRIBUTED {
        let Some(topo) = fixture(row.fixture) else {
            return;
        };
        let got = take_distributed_for_resize(
            &topo,
            &set(row.available),
            row.n,
            row.group_size,
            CpuSortingStrategy::Packed,
            &set(row.current),
            &set(row.must_keep),
        );
        check(
            &mut failures,
            row.name,
            got.map_err(|e| e.to_string()),
            row.error,
            row.expect,
        );
    }
    common::assert_all_passed(
        "TestTakeByTopologyNUMADistributedForResize",
        DISTRIBUTED.len(),
        &failures,
    );
}

fn check(
    failures: &mut Vec<String>,
    name: &str,
    got: Result<CpuSet, String>,
    error: &str,
    expect: &str,
) {
    match got {
        Ok(cpus) if error.is_empty() && cpus == set(expect) => {}
        Err(text) if !error.is_empty() && text == error => {}
        other => failures.push(format!(
            "{name}: got {other:?}, expected {expect:?} / error {error:?}"
        )),
    }
}
