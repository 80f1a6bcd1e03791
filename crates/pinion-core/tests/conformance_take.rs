//! Runs every `"kind": "take"` case of `../shared/conformance/kubelet/*.json`
//! (read in place) through `take_by_topology`, asserting kubelet's exact CPUs
//! or error text. Cases upstream never returns from (`{"hang": true}`) must
//! return promptly with our documented result (decision 001): a valid
//! allocation of the requested size.

mod common;

use std::path::{Path, PathBuf};

use pinion_core::alloc::case::TakeCase;
use pinion_core::alloc::take_by_topology;
use pinion_core::{CpuSet, Topology};
use serde_json::Value;

fn corpus_dir() -> Option<PathBuf> {
    common::shared::shared("conformance/kubelet")
}

fn take_cases(dir: &Path) -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read corpus dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read corpus file");
        let Ok(Value::Array(cases)) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let stem = file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for case in cases {
            if case.get("kind").and_then(Value::as_str) == Some("take") {
                out.push((stem.clone(), case));
            }
        }
    }
    out
}

/// Checks one case; returns a failure description.
fn check(file: &str, raw: &Value) -> Option<String> {
    let case: TakeCase = serde_json::from_value(raw.clone()).expect("case parses");
    let label = format!("{file}: {}", case.name);
    let topology = Topology::new(case.topology.clone()).expect("topology valid");
    let available = case.available().expect("available parses");
    let algorithm = case.algorithm(&topology).expect("algorithm");
    let got = take_by_topology(&topology, &available, case.request, algorithm);
    let expect = &raw["expect"];
    if let Some(cpus) = expect.get("cpus").and_then(Value::as_str) {
        let want = CpuSet::parse_list(cpus).expect("expected cpus parse");
        return match got {
            Ok(set) if set == want => None,
            other => Some(format!("{label}: want cpus {want}, got {other:?}")),
        };
    }
    if let Some(text) = expect.get("error").and_then(Value::as_str) {
        return match got {
            Err(err) if err.to_string() == text => None,
            other => Some(format!("{label}: want error {text:?}, got {other:?}")),
        };
    }
    if expect.get("hang").and_then(Value::as_bool) == Some(true) {
        // Decision 001: return a valid allocation of the requested size.
        return match got {
            Ok(set) if set.len() == case.request && set.is_subset(&available) => None,
            other => Some(format!(
                "{label}: want a valid {}-cpu result, got {other:?}",
                case.request
            )),
        };
    }
    Some(format!("{label}: unknown expectation {expect}"))
}

#[test]
fn every_take_case_matches_kubelet() {
    let Some(dir) = corpus_dir() else {
        return;
    };
    let cases = take_cases(&dir);
    assert!(
        !cases.is_empty(),
        "no take cases found in {}",
        dir.display()
    );
    let failures: Vec<String> = cases.iter().filter_map(|(f, c)| check(f, c)).collect();
    eprintln!("take cases: {} run, {} failed", cases.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} take cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
