//! `pinion simulate` with the Topology Manager: the SNC example scenario
//! (read from `../shared` in place), kubelet's camelCase keys, extra
//! providers' hints, the pod scope, and bad Topology Manager input.

mod common;

use std::process::Output;

use common::pinion_with_stdin as pinion;
use serde_json::Value;

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one json document")
}

fn cpus(value: &Value) -> Vec<u32> {
    let text = value.as_str().expect("cpulist");
    pinion_core::CpuSet::parse_list(text)
        .expect("cpulist")
        .iter()
        .collect()
}

const REJECTION: &str = "Resources cannot be allocated with Topology locality";

#[test]
fn snc_example_aligns_one_pod_and_rejects_others() {
    // The scenario reads its machine from ../shared.
    if common::shared("topologies/x86-2s-intel-xeon-gold-6230-ht-snc2").is_none() {
        return;
    }
    let example = common::workspace().join("examples/scenarios/snc-single-numa-node.yaml");
    let example = example.to_string_lossy();
    let out = json(&pinion(&["simulate", "--format", "json", &example], ""));
    let steps = out["steps"].as_array().expect("steps");
    // SNC2 numbering: NUMA node of CPU n is n mod 4.
    let trading = &steps[1];
    assert!(cpus(&trading["cpus"]).iter().all(|cpu| cpu % 4 == 1));
    assert_eq!(
        trading["topology"]["merged"]["mask"],
        serde_json::json!([1])
    );
    assert_eq!(trading["topology"]["merged"]["preferred"], true);
    let analytics = &steps[2];
    assert_eq!(cpus(&analytics["cpus"]).len(), 16);
    assert!(cpus(&analytics["cpus"]).iter().all(|cpu| cpu % 4 == 0));
    for rejected in [&steps[3], &steps[4]] {
        assert_eq!(rejected["error"], REJECTION);
        assert_eq!(rejected["reason"], "TopologyAffinityError");
        assert_eq!(rejected["cpus"], Value::Null);
        assert_eq!(rejected["topology"]["admit"], false);
        assert!(rejected["topology"]["why"].is_string());
    }
    assert_eq!(steps[5]["cpus"], Value::Null, "burstable pod: shared pool");
    let text = pinion(&["simulate", &example], "");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("topology manager: single-numa-node, scope container"));
    assert!(
        text.contains("-> rejected: single-numa-node: cpu has no preferred single-NUMA-node hint")
    );
}

const POD_SCOPE: &str = r#"{
  "machine": {"sockets": 2, "numa_per_socket": 1, "cores_per_socket": 4, "threads_per_core": 2},
  "num_reserved": 0,
  "reserved": "",
  "topologyManagerPolicy": "restricted",
  "topologyManagerScope": "pod",
  "hints": {"p": {"gpu": [{"numa": [1], "preferred": true}]}},
  "pods": {"p": {"containers": [
    {"name": "a", "cpu_request": "2", "cpu_limit": "2", "memory_request": "1Gi", "memory_limit": "1Gi"},
    {"name": "b", "cpu_request": "2", "cpu_limit": "2", "memory_request": "1Gi", "memory_limit": "1Gi"}]}},
  "steps": [{"op": "start"}, {"op": "add", "pod": "p", "container": "a"},
            {"op": "add", "pod": "p", "container": "b"}]
}"#;

#[test]
fn pod_scope_with_kubelet_keys_and_extra_hints() {
    let out = json(&pinion(&["simulate", "--format", "json", "-"], POD_SCOPE));
    let steps = out["steps"].as_array().expect("steps");
    let (a, b) = (&steps[1], &steps[2]);
    assert_eq!(a["topology"]["scope"], "pod");
    assert_eq!(a["topology"]["merged"]["mask"], serde_json::json!([1]));
    assert!(a["topology"].get("reused").is_none());
    assert_eq!(b["topology"]["reused"], true);
    // Node 1 = CPUs 4-7,12-15.
    for step in [a, b] {
        assert!(cpus(&step["cpus"])
            .iter()
            .all(|cpu| (4..8).contains(&(cpu % 8))));
    }
}

#[test]
fn bad_topology_manager_input_is_reported() {
    let bad_scope = POD_SCOPE.replace("\"pod\",", "\"node\",");
    let out = json(&pinion(&["simulate", "--format", "json", "-"], &bad_scope));
    assert_eq!(out["error"], "unknown scope: \"node\"");
    let bad_node = POD_SCOPE.replace("\"numa\": [1]", "\"numa\": [64]");
    let out = json(&pinion(&["simulate", "--format", "json", "-"], &bad_node));
    let error = out["error"].as_str().expect("error text");
    assert!(error.contains("\"p\"") && error.contains("64"), "{error}");
    let typo = POD_SCOPE.replace(r#""hints": {"p":"#, r#""hints": {"p/c":"#);
    let out = json(&pinion(&["simulate", "--format", "json", "-"], &typo));
    let error = out["error"].as_str().expect("error text");
    assert!(
        error.starts_with("hints key \"p/c\" names no pod"),
        "{error}"
    );
    let ambiguous = POD_SCOPE.replace(
        r#""hints": {"p": {"gpu": [{"numa": [1], "preferred": true}]}}"#,
        r#""hints": {"p/a": {"nic": null}, "p/b": {"nic": null}}"#,
    );
    let out = json(&pinion(&["simulate", "--format", "json", "-"], &ambiguous));
    let error = out["error"].as_str().expect("error text");
    assert!(error.contains("give a \"p\" entry"), "{error}");
}
