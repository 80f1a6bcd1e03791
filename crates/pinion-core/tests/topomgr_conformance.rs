//! Conformance: the Topology Manager cases of `topomgr/` (bitmask, merge for
//! every policy, admit, the pairwise comparison, closest / average distance,
//! options, manager construction, single-numa filtering).

mod common;

use std::collections::BTreeMap;

use pinion_core::topomgr::bitmask::iterate_masks;
use pinion_core::topomgr::case::MergeCase;
use pinion_core::topomgr::hint::{filter_single_numa, max_of_min_affinity_counts};
use pinion_core::topomgr::merge::HintMerger;
use pinion_core::topomgr::options::TopologyManagerOptions;
use pinion_core::topomgr::{Distances, NumaInfo, NumaMask, TopologyHint, TopologyManager};
use serde::Deserialize;
use serde_json::Value;

const MERGE_FILES: [&str; 7] = [
    "topomgr/TestPolicyBestEffortMerge.json",
    "topomgr/TestPolicyBestEffortMergeClosestNUMA.json",
    "topomgr/TestPolicyRestrictedMerge.json",
    "topomgr/TestPolicyRestrictedMergeClosestNUMA.json",
    "topomgr/TestPolicySingleNumaNodeMerge.json",
    "topomgr/TestPolicyNoneMerge.json",
    "topomgr/TestAdmit.json",
];

/// Runs `check` on every case of `file`; fails listing the failures.
fn run_file(file: &str, check: impl Fn(&Value) -> Result<(), String>) {
    let Some(cases) = common::load_cases(file) else {
        return;
    };
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            check(case)
                .err()
                .map(|why| format!("{}: {why}", case["name"]))
        })
        .collect();
    common::assert_all_passed(file, cases.len(), &failures);
}

fn parse<T: for<'de> Deserialize<'de>>(value: &Value) -> T {
    serde_json::from_value(value.clone()).expect("case matches the format")
}

fn mask_of(value: &Value) -> NumaMask {
    parse(value)
}

#[derive(Deserialize)]
struct MergeExpect {
    mask: Option<Option<NumaMask>>,
    preferred: Option<bool>,
    admit: bool,
    reason: Option<String>,
    message: Option<String>,
}

fn check_merge(value: &Value) -> Result<(), String> {
    let case: MergeCase = parse(value);
    let expect: MergeExpect = parse(&value["expect"]);
    let scopes: Vec<String> = match value.get("scopes") {
        Some(scopes) => parse(scopes),
        None => vec!["container".to_owned()],
    };
    for scope in scopes {
        let case = MergeCase {
            scope: Some(scope.clone()),
            ..case.clone()
        };
        let got = case.run().map_err(|e| e.to_string())?;
        let hint = got.hint;
        let mask_ok = expect.mask.is_none_or(|m| m == hint.affinity);
        let preferred_ok = expect.preferred.is_none_or(|p| p == hint.preferred);
        let rejection = got.result().err();
        let reason_ok = expect.reason.as_deref().is_none_or(|r| {
            rejection.is_some() && r == pinion_core::topomgr::TopologyAffinityError::REASON
        });
        let message_ok = expect
            .message
            .as_deref()
            .is_none_or(|m| rejection.is_some_and(|e| e.to_string() == m));
        if !(mask_ok && preferred_ok && got.admit == expect.admit && reason_ok && message_ok) {
            return Err(format!(
                "scope {scope}: got {got:?}, want {}",
                value["expect"]
            ));
        }
    }
    Ok(())
}

#[test]
fn merge_conformance() {
    for file in MERGE_FILES {
        run_file(file, check_merge);
    }
}

fn check_bitmask(value: &Value) -> Result<(), String> {
    let op = value["op"].as_str().unwrap_or_default();
    let expect = &value["expect"];
    let got: Value = match op {
        "is_narrower_than" => mask_of(&value["a"])
            .is_narrower_than(mask_of(&value["b"]))
            .into(),
        "is_less_than" => mask_of(&value["a"])
            .is_less_than(mask_of(&value["b"]))
            .into(),
        "iterate_count" | "iterate_order" => {
            let bits: Vec<u32> = parse(&value["bits"]);
            let mut seen = Vec::new();
            iterate_masks(&bits, |m| seen.push(m.ids()));
            if op == "iterate_count" {
                seen.len().into()
            } else {
                serde_json::to_value(seen).expect("ids serialise")
            }
        }
        "and" | "or" => {
            let masks: Vec<NumaMask> = parse(&value["masks"]);
            let combined =
                masks
                    .iter()
                    .copied()
                    .reduce(|a, b| if op == "and" { a.and(b) } else { a.or(b) });
            serde_json::to_value(combined.unwrap_or_default().ids()).expect("ids serialise")
        }
        other => return Err(format!("unknown op {other}")),
    };
    if &got == expect {
        Ok(())
    } else {
        Err(format!("got {got}, want {expect}"))
    }
}

#[test]
fn bitmask_conformance() {
    run_file("topomgr/bitmask.json", check_bitmask);
}

fn numa_from(value: &Value) -> NumaInfo {
    let distances: Option<Distances> = parse(&value["distances"]);
    let nodes: Vec<u32> = match value.get("numa_nodes") {
        Some(nodes) => parse(nodes),
        None => distances.iter().flat_map(|d| d.keys().copied()).collect(),
    };
    NumaInfo::new(&nodes, distances.as_ref()).expect("valid nodes")
}

fn check_compare(value: &Value) -> Result<(), String> {
    let numa = numa_from(value);
    let count: i64 = parse(&value["best_non_preferred_affinity_count"]);
    let closest = value["options"]["prefer-closest-numa-nodes"] == "true";
    let merger = HintMerger::with_count(
        &numa,
        closest,
        u32::try_from(count.max(0)).unwrap_or(u32::MAX),
    );
    let current: Option<TopologyHint> = parse(&value["current"]);
    let candidate: TopologyHint = parse(&value["candidate"]);
    let got = if merger.candidate_wins(current.as_ref(), &candidate) {
        "candidate"
    } else {
        "current"
    };
    if value["expect"] == got {
        Ok(())
    } else {
        Err(format!("got {got}"))
    }
}

#[test]
fn compare_conformance() {
    run_file("topomgr/TestCompareHintsNarrowest.json", check_compare);
}

#[test]
fn max_of_min_conformance() {
    run_file("topomgr/TestMaxOfMinAffinityCounts.json", |value| {
        let lists: Vec<Vec<TopologyHint>> = parse(&value["hints"]);
        let got = max_of_min_affinity_counts(&lists);
        if value["expect"] == got {
            Ok(())
        } else {
            Err(format!("got {got}"))
        }
    });
}

#[test]
fn filter_single_numa_conformance() {
    run_file(
        "topomgr/TestPolicySingleNumaNodeFilterHints.json",
        |value| {
            let lists: Vec<Vec<TopologyHint>> = parse(&value["input"]);
            let got = filter_single_numa(&lists);
            // Go's nil and empty lists are the same here.
            let expect: Option<Vec<Option<Vec<TopologyHint>>>> = parse(&value["expect"]);
            let expect: Vec<Vec<TopologyHint>> = expect
                .unwrap_or_default()
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect();
            if got == expect {
                Ok(())
            } else {
                Err(format!("got {got:?}"))
            }
        },
    );
}

#[test]
fn closest_conformance() {
    run_file("topomgr/TestClosest.json", |value| {
        let numa = numa_from(value);
        let candidate_wins = numa.closer(mask_of(&value["current"]), mask_of(&value["candidate"]));
        let got = if candidate_wins {
            "candidate"
        } else {
            "current"
        };
        if value["expect"] == got {
            Ok(())
        } else {
            Err(format!("got {got}"))
        }
    });
}

#[test]
fn average_distance_conformance() {
    run_file("topomgr/TestCalculateAvgDistanceFor.json", |value| {
        let got = numa_from(value).average_distance(mask_of(&value["mask"]));
        let expect = value["expect"].as_f64().unwrap_or(f64::NAN);
        if got.to_bits() == expect.to_bits() {
            Ok(())
        } else {
            Err(format!("got {got}"))
        }
    });
}

#[test]
fn options_conformance() {
    run_file("topomgr/TestNewTopologyManagerOptions.json", |value| {
        let options: BTreeMap<String, String> = parse(&value["options"]);
        let expect = &value["expect"];
        match TopologyManagerOptions::parse(&options) {
            Ok(parsed) => {
                let ok = expect["prefer_closest_numa"] == parsed.prefer_closest_numa
                    && expect["max_allowable_numa_nodes"] == parsed.max_allowable_numa_nodes;
                if ok {
                    Ok(())
                } else {
                    Err(format!("got {parsed:?}"))
                }
            }
            Err(err) => check_error(&err.to_string(), expect),
        }
    });
}

fn check_error(text: &str, expect: &Value) -> Result<(), String> {
    let contains = expect["error_contains"]
        .as_str()
        .is_some_and(|part| text.contains(part));
    let exact = expect.get("error").is_none_or(|e| e == text);
    if contains && exact {
        Ok(())
    } else {
        Err(format!("got error {text:?}"))
    }
}

#[test]
fn manager_conformance() {
    run_file("topomgr/TestNewManager.json", |value| {
        let nodes: Vec<u32> = parse(&value["numa_nodes"]);
        let options: BTreeMap<String, String> = parse(&value["options"]);
        let distances: Distances = nodes
            .iter()
            .map(|&i| {
                (
                    i,
                    nodes
                        .iter()
                        .map(|&j| (j, if i == j { 10 } else { 20 }))
                        .collect(),
                )
            })
            .collect();
        let with_distances = value["has_distances"] == true;
        let numa =
            NumaInfo::new(&nodes, with_distances.then_some(&distances)).expect("valid nodes");
        let policy = value["policy"].as_str().unwrap_or_default();
        let scope = value["scope"].as_str().unwrap_or_default();
        let expect = &value["expect"];
        match TopologyManager::new(policy, scope, &options, numa) {
            Ok(manager) => {
                let ok = expect["policy"] == manager.policy().name()
                    && expect["scope"] == manager.scope().name();
                if ok {
                    Ok(())
                } else {
                    Err(format!("got {manager:?}"))
                }
            }
            Err(err) => check_error(&err.to_string(), expect),
        }
    });
}

const CPU_HINT_FILES: [&str; 3] = [
    "topomgr/TestGetTopologyHints.json",
    "topomgr/TestGetPodTopologyHints.json",
    "topomgr/TestGetPodTopologyHintsWithPolicyOptions.json",
];

fn check_cpu_hints(value: &Value) -> Result<(), String> {
    let case: pinion_core::topomgr::case::CpuHintsCase = parse(value);
    let got = case.run().map_err(|e| e.to_string())?.unwrap_or_default();
    let mut expect: Vec<TopologyHint> = parse(&value["expect"]);
    let mut sorted = got.clone();
    let key = |h: &TopologyHint| (!h.preferred, h.affinity.map(NumaMask::raw));
    sorted.sort_by_key(key);
    expect.sort_by_key(key);
    if sorted == expect {
        Ok(())
    } else {
        Err(format!("got {got:?}"))
    }
}

#[test]
fn cpu_hints_conformance() {
    for file in CPU_HINT_FILES {
        run_file(file, check_cpu_hints);
    }
}
