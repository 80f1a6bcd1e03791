//! Conformance through the engine: every `merge` case of `topomgr/` (the
//! four policies' merge tables and `TestAdmit`, in each case's scopes) is
//! run as an admission of a one-container pod, each provider of the case
//! being a separate [`StaticHints`] provider next to the CPU manager (policy
//! `none` here, so it does not care).

mod common;

use std::collections::BTreeMap;

use pinion_core::engine::Engine;
use pinion_core::pod::{Container, Pod};
use pinion_core::policy::{Policy, PolicyError};
use pinion_core::state::State;
use pinion_core::topomgr::case::MergeCase;
use pinion_core::topomgr::provider::{HintProvider, StaticHints};
use pinion_core::topomgr::{
    NumaInfo, NumaMask, TopologyAffinityError, TopologyHint, TopologyManager,
};
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

#[derive(Deserialize)]
struct Expect {
    mask: Option<Option<NumaMask>>,
    preferred: Option<bool>,
    admit: bool,
    reason: Option<String>,
    message: Option<String>,
}

/// The engine's machine: the merge cases are about NUMA masks only, and
/// policy `none` allocates nothing.
fn machine() -> pinion_core::Topology {
    pinion_core::topology::synthetic(pinion_core::topology::Shape {
        sockets: 1,
        numa_per_socket: 1,
        cores_per_socket: 1,
        threads_per_core: 1,
        cores_per_uncore: 0,
    })
}

fn pod() -> Pod {
    Pod {
        uid: "pod".into(),
        containers: vec![Container {
            name: "c".into(),
            ..Container::default()
        }],
        ..Pod::default()
    }
}

/// One provider per case provider, answering for the pod's only container
/// (container scope) and the pod (pod scope).
fn providers(case: &MergeCase) -> Vec<StaticHints> {
    case.providers
        .iter()
        .map(|answer| {
            let entries = answer
                .iter()
                .flat_map(|resources| {
                    [
                        ("pod/c".to_owned(), resources.clone()),
                        ("pod".to_owned(), resources.clone()),
                    ]
                })
                .collect::<BTreeMap<_, _>>();
            StaticHints::new(entries)
        })
        .collect()
}

fn check(value: &Value, scope: &str) -> Result<(), String> {
    let case: MergeCase = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let expect: Expect =
        serde_json::from_value(value["expect"].clone()).map_err(|e| e.to_string())?;
    let numa =
        NumaInfo::new(&case.numa_nodes, case.distances.as_ref()).map_err(|e| e.to_string())?;
    let manager = TopologyManager::new(&case.policy, scope, &case.options, numa)
        .map_err(|e| e.to_string())?;
    let mut engine =
        Engine::new(&machine(), Policy::None, State::default()).with_topology_manager(manager);
    let owned = providers(&case);
    let refs: Vec<&dyn HintProvider> = owned.iter().map(|p| p as &dyn HintProvider).collect();
    let report = engine.admit_container_with(&pod(), "c", &refs);
    let admitted = report.result.is_ok();
    // Policy `none` merges nothing: its result is `{nil, not preferred}`.
    let hint = Some(
        report
            .topology
            .map_or(TopologyHint::cannot_satisfy(), |d| d.hint),
    );
    let mask_ok = expect
        .mask
        .is_none_or(|m| hint.is_some_and(|h| h.affinity == m));
    let preferred_ok = expect
        .preferred
        .is_none_or(|p| hint.is_some_and(|h| h.preferred == p));
    let rejection = report.result.err();
    let reason_ok = expect
        .reason
        .as_deref()
        .is_none_or(|r| rejection.as_ref().is_some_and(|e| e.reason() == r));
    let message_ok = expect
        .message
        .as_deref()
        .is_none_or(|m| rejection.as_ref().is_some_and(|e| e.to_string() == m));
    let kind_ok = rejection
        .as_ref()
        .is_none_or(|e| *e == PolicyError::TopologyAffinity(TopologyAffinityError));
    let metrics = engine.metrics().topology;
    let counters_ok = metrics.requests_total == 1 && metrics.errors_total == u64::from(!admitted);
    if mask_ok
        && preferred_ok
        && admitted == expect.admit
        && reason_ok
        && message_ok
        && kind_ok
        && counters_ok
    {
        Ok(())
    } else {
        Err(format!(
            "scope {scope}: got {hint:?}, error {rejection:?}, want {}",
            value["expect"]
        ))
    }
}

#[test]
fn merge_cases_through_the_engine() {
    for file in MERGE_FILES {
        let Some(cases) = common::load_cases(file) else {
            return;
        };
        let failures: Vec<String> = cases
            .iter()
            .flat_map(|case| {
                let scopes: Vec<String> = case
                    .get("scopes")
                    .and_then(|s| serde_json::from_value(s.clone()).ok())
                    .unwrap_or_else(|| vec!["container".to_owned(), "pod".to_owned()]);
                scopes
                    .into_iter()
                    .filter_map(|scope| check(case, &scope).err())
                    .map(|why| format!("{}: {why}", case["name"]))
                    .collect::<Vec<_>>()
            })
            .collect();
        common::assert_all_passed(file, cases.len(), &failures);
    }
}
