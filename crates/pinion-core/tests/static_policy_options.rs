//! Conformance: every `kind: options` case of `TestStaticPolicyOptions.json`.

mod common;

use std::collections::BTreeMap;

use pinion_core::policy::options::{FeatureGates, StaticPolicyOptions};
use pinion_core::Topology;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    name: String,
    kind: String,
    options: Option<BTreeMap<String, String>>,
    feature_gates: Option<FeatureGates>,
    topology: Option<Topology>,
    topology_manager_policy: Option<String>,
    expect: Expect,
}

#[derive(Deserialize)]
struct Expect {
    ok: Option<bool>,
    parsed: Option<BTreeMap<String, bool>>,
    error: Option<String>,
    error_one_of: Option<Vec<String>>,
}

fn run(case: &Case) -> Result<StaticPolicyOptions, String> {
    let options = case.options.clone().unwrap_or_default();
    let gates = case.feature_gates.unwrap_or_else(FeatureGates::all);
    let parsed = StaticPolicyOptions::parse(&options, gates).map_err(|e| e.to_string())?;
    if let Some(topology) = &case.topology {
        let policy = case.topology_manager_policy.as_deref().unwrap_or("none");
        parsed
            .validate_machine(topology, policy)
            .map_err(|e| e.to_string())?;
    }
    Ok(parsed)
}

/// Cases recorded from an older kubelet (`policy_options.go@898b9f80`) that
/// a newer one answers differently; Pinion follows the kubelet it declares
/// it matches (v1.37.2, the live oracle's module). Each is checked against
/// the newer answer instead: the option is accepted and parsed as given.
const SUPERSEDED: &[(&str, &str)] = &[
    (
        "prefer-align-cpus-by-uncorecache=true, gates alpha=False beta=False",
        "stable since kubelet v1.36: needs no gate",
    ),
    (
        "prefer-align-cpus-by-uncorecache=true, gates alpha=True beta=False",
        "stable since kubelet v1.36: needs no gate",
    ),
    (
        "prefer-align-cpus-by-uncorecache=false, gates alpha=false beta=false",
        "stable since kubelet v1.36: needs no gate",
    ),
];

/// A superseded case: the option of `case` is accepted and parsed as given.
fn check_superseded(case: &Case) -> Result<(), String> {
    let options = case.options.clone().unwrap_or_default();
    let parsed = run(case)?;
    for (name, value) in &options {
        let want = pinion_core::policy::options::parse_go_bool(value);
        if parsed.get(name) != want {
            return Err(format!("{name}: got {:?}, want {want:?}", parsed.get(name)));
        }
    }
    Ok(())
}

fn check(case: &Case) -> Result<(), String> {
    if SUPERSEDED.iter().any(|(name, _)| *name == case.name) {
        return check_superseded(case);
    }
    let got = run(case);
    let expect = &case.expect;
    match (&got, expect.ok) {
        (Ok(parsed), Some(true)) => {
            let wanted = expect.parsed.as_ref().ok_or("case has no parsed values")?;
            for (name, value) in wanted {
                if parsed.get(name) != Some(*value) {
                    return Err(format!("{name}: got {:?}, want {value}", parsed.get(name)));
                }
            }
            Ok(())
        }
        (Err(text), _) if expect.error.as_ref() == Some(text) => Ok(()),
        (Err(text), _)
            if expect
                .error_one_of
                .as_ref()
                .is_some_and(|l| l.contains(text)) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "got {got:?}, want ok={:?} error={:?} one_of={:?}",
            expect.ok, expect.error, expect.error_one_of
        )),
    }
}

#[test]
fn static_policy_options_conformance() {
    let file = "TestStaticPolicyOptions.json";
    let Some(values) = common::load_cases(file) else {
        return;
    };
    let mut failures = Vec::new();
    for value in &values {
        let case: Case = serde_json::from_value(value.clone()).expect("case matches the format");
        assert_eq!(case.kind, "options");
        if let Err(why) = check(&case) {
            failures.push(format!("{}: {why}", case.name));
        }
    }
    assert_eq!(values.len(), 169, "the corpus holds 169 option cases");
    let names: Vec<&str> = values
        .iter()
        .filter_map(|v| v.get("name").and_then(serde_json::Value::as_str))
        .collect();
    for (superseded, why) in SUPERSEDED {
        assert!(
            names.contains(superseded),
            "superseded case {superseded:?} ({why}) is not in the corpus"
        );
    }
    common::assert_all_passed(file, values.len(), &failures);
}
