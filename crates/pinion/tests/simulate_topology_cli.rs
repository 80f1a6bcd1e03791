//! `pinion simulate` with the Topology Manager: the SNC example scenario
//! (on its own machine shape, and on the real machine from `../shared`), kubelet's camelCase keys, extra
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

/// The SNC example's story on a machine whose NUMA node of CPU n is
/// `node(n)`: the trading pod next to its NIC on node 1, analytics on one
/// node, the two pods no node can hold rejected, the Burstable one shared.
fn check_snc_story(scenario: &str, node: impl Fn(u32) -> u32) {
    let out = json(&pinion(&["simulate", "-o", "json", "-"], scenario));
    let steps = out["steps"].as_array().expect("steps");
    let trading = &steps[1];
    assert!(cpus(&trading["cpus"]).iter().all(|&cpu| node(cpu) == 1));
    assert_eq!(
        trading["topology"]["merged"]["mask"],
        serde_json::json!([1])
    );
    assert_eq!(trading["topology"]["merged"]["preferred"], true);
    let analytics = &steps[2];
    assert_eq!(cpus(&analytics["cpus"]).len(), 16);
    assert!(cpus(&analytics["cpus"]).iter().all(|&cpu| node(cpu) == 0));
    for rejected in [&steps[3], &steps[4]] {
        assert_eq!(rejected["error"], REJECTION);
        assert_eq!(rejected["reason"], "TopologyAffinityError");
        assert_eq!(rejected["cpus"], Value::Null);
        assert_eq!(rejected["topology"]["admit"], false);
        assert!(rejected["topology"]["why"].is_string());
    }
    assert_eq!(steps[5]["cpus"], Value::Null, "burstable pod: shared pool");
    let text = pinion(&["simulate", "-"], scenario);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("topology manager: single-numa-node, scope container"));
    assert!(
        text.contains("-> rejected: single-numa-node: cpu has no preferred single-NUMA-node hint")
    );
}

fn snc_example() -> String {
    let path = common::workspace().join("examples/scenarios/snc-single-numa-node.yaml");
    std::fs::read_to_string(path).expect("the SNC example")
}

#[test]
fn snc_example_aligns_one_pod_and_rejects_others() {
    // The example's machine shape: node n holds cores 10n..10n+9, CPU n is
    // a thread of core n mod 40.
    check_snc_story(&snc_example(), |cpu| (cpu % 40) / 10);
}

#[test]
fn snc_example_decides_the_same_on_the_real_machine() {
    // The real Xeon Gold 6230 (SNC2) numbers its nodes round-robin: the
    // NUMA node of CPU n is n mod 4.
    let Some(sysroot) = common::shared("topologies/x86-2s-intel-xeon-gold-6230-ht-snc2") else {
        return;
    };
    let example = snc_example();
    let machine = example
        .lines()
        .find(|line| line.starts_with("machine:"))
        .expect("the example's machine line");
    let real = example.replace(machine, &format!("sysroot: {}", sysroot.display()));
    check_snc_story(&real, |cpu| cpu % 4);
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
    let out = json(&pinion(&["simulate", "-o", "json", "-"], POD_SCOPE));
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
    let out = json(&pinion(&["simulate", "-o", "json", "-"], &bad_scope));
    assert_eq!(out["error"], "unknown scope: \"node\"");
    let bad_node = POD_SCOPE.replace("\"numa\": [1]", "\"numa\": [64]");
    let out = json(&pinion(&["simulate", "-o", "json", "-"], &bad_node));
    let error = out["error"].as_str().expect("error text");
    assert!(error.contains("\"p\"") && error.contains("64"), "{error}");
    let typo = POD_SCOPE.replace(r#""hints": {"p":"#, r#""hints": {"p/c":"#);
    let out = json(&pinion(&["simulate", "-o", "json", "-"], &typo));
    let error = out["error"].as_str().expect("error text");
    assert!(
        error.starts_with("hints key \"p/c\" names no pod"),
        "{error}"
    );
    let ambiguous = POD_SCOPE.replace(
        r#""hints": {"p": {"gpu": [{"numa": [1], "preferred": true}]}}"#,
        r#""hints": {"p/a": {"nic": null}, "p/b": {"nic": null}}"#,
    );
    // A mistake in a step's input: the steps before it, then a non-zero
    // exit naming the step (`docs/simulate.md`, exit status).
    let out = pinion(&["simulate", "-o", "json", "-"], &ambiguous);
    assert!(!out.status.success());
    let before: Value = serde_json::from_slice(&out.stdout).expect("one json document");
    assert_eq!(before["steps"].as_array().expect("steps").len(), 1);
    let error = common::stderr(&out);
    assert!(
        error.contains("step 2 (add p/a): ") && error.contains("give a \"p\" entry"),
        "{error}"
    );
}
