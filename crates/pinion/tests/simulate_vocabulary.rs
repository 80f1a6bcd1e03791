//! The QRM proposal's three worked examples written in the proposal's own
//! vocabulary (`examples/scenarios/qrm-proposal-*.yaml`: annotations
//! `kubernetes.io/pod-role` and `kubernetes.io/resource-type`) give the same
//! numbers as the same examples in katalyst's vocabulary
//! (`examples/scenarios/qrm-*.yaml`): every step — admissions, hints,
//! rejections, pool changes, every container's placement and the pool map —
//! is compared. A pod whose two vocabularies contradict each other stops the
//! scenario naming both keys and values.

mod common;

use std::process::Output;

use common::pinion_with_stdin as pinion;
use serde_json::Value;

fn example(name: &str) -> String {
    common::workspace()
        .join("examples/scenarios")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn run_json(path: &str) -> Value {
    let out: Output = pinion(&["simulate", "-o", "json", path], "");
    assert!(
        out.status.success(),
        "{path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one json document")
}

#[test]
fn the_proposals_examples_give_the_same_placements_in_both_vocabularies() {
    for name in ["online-offline", "role-based-pools", "shared-nic"] {
        let katalyst = run_json(&example(&format!("qrm-{name}.yaml")));
        let proposal = run_json(&example(&format!("qrm-proposal-{name}.yaml")));
        for key in ["plugins", "topology_manager_policy", "initial"] {
            assert_eq!(katalyst[key], proposal[key], "{name}: {key}");
        }
        let (k, p) = (
            katalyst["steps"].as_array().expect("steps"),
            proposal["steps"].as_array().expect("steps"),
        );
        assert_eq!(k.len(), p.len(), "{name}: step count");
        assert!(!k.is_empty(), "{name}: no steps");
        for (a, b) in k.iter().zip(p) {
            assert_eq!(a, b, "{name}: step {}", a["index"]);
        }
        // The comparison is not vacuous: the proposal's files carry no
        // katalyst QoS level, so the table made every placement.
        let text = std::fs::read_to_string(example(&format!("qrm-proposal-{name}.yaml")))
            .expect("example");
        assert!(!text.contains("katalyst.kubewharf.io/qos_level"), "{name}");
        assert!(!text.contains("memory_enhancement"), "{name}");
    }
}

#[test]
fn the_offline_role_lands_in_the_reclaim_pool() {
    let out = run_json(&example("qrm-proposal-online-offline.yaml"));
    let step = &out["steps"][2];
    assert_eq!(step["step"], "add pod2");
    let pod2 = step["placements"]
        .as_array()
        .expect("placements")
        .iter()
        .find(|p| p["pod"] == "pod2")
        .expect("pod2 placed");
    assert_eq!(pod2["pool"], "reclaim");
    assert_eq!(pod2["cpus"], "38-39,78-79");
}

#[test]
fn contradictory_vocabularies_stop_the_scenario_naming_both() {
    let scenario = r#"
machine: { sockets: 1, numa_per_socket: 1, cores_per_socket: 4, threads_per_core: 1 }
plugins: { cpu: {} }
pods:
  db:
    annotations:
      kubernetes.io/pod-role: storage-service
      katalyst.kubewharf.io/qos_level: shared_cores
    containers:
      - { name: main, requests: { cpu: "1" } }
steps:
  - { op: add, pod: db }
"#;
    let out = pinion(&["simulate", "-"], scenario);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "kubernetes.io/pod-role: \"storage-service\" contradicts \
             katalyst.kubewharf.io/qos_level: \"shared_cores\""
        ),
        "{stderr}"
    );
}
