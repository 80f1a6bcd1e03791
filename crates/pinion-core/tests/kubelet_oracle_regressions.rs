//! Differences found by the live kubelet oracle (`scripts/kubelet-diff.sh`,
//! `interop/kubelet-oracle`): each case is the smallest scenario that showed
//! it, with kubelet v1.37.2's answer as the expectation.

use pinion_core::scenario::{self, Scenario};

fn run(json: &str) -> Result<scenario::Outcome, scenario::ScenarioError> {
    let scenario: Scenario = serde_json::from_str(json).expect("scenario parses");
    let topology = scenario::inline_topology(&scenario)
        .expect("inline topology")
        .expect("topology given");
    scenario::run(&scenario, &topology)
}

/// kubelet's container manager builds the Topology Manager before the CPU
/// manager: `prefer-closest-numa-nodes` on a machine without NUMA distances
/// together with `align-by-socket` under `single-numa-node` fails with the
/// Topology Manager's error, not the static policy's (oracle case c00115).
#[test]
fn regression_topology_manager_error_comes_before_the_static_policy_error() {
    let err = run(r#"{
        "topology": {"cpus": [
            {"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 1, "core": 1, "socket": 0, "numa": 0, "uncore": 0}]},
        "options": {"align-by-socket": "true"},
        "feature_gates": {"alpha": true, "beta": true},
        "num_reserved": 1,
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true"},
        "pods": {},
        "steps": [{"op": "start"}]}"#)
    .expect_err("kubelet refuses this configuration");
    assert_eq!(
        err.to_string(),
        "cannot discover NUMA topology: error getting NUMA distances from cadvisor"
    );
}

/// kubelet's pod scope stores the pod's hint for all of its containers at
/// admission: an init container removed before the app container is added
/// leaves the app container the pod's affinity, so a machine filled in
/// between does not make the pod's later container fail the merge (oracle
/// case c00277: `single-numa-node`, pod scope).
#[test]
fn regression_pod_scope_keeps_the_pod_affinity_after_its_init_container_is_removed() {
    let outcome = run(r#"{
        "topology": {"cpus": [
            {"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 1, "core": 1, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 2, "core": 2, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 3, "core": 3, "socket": 0, "numa": 0, "uncore": 0}]},
        "num_reserved": 1,
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerScope": "pod",
        "pods": {
          "a": {"init_containers": [{"name": "init", "cpu_request": "2", "cpu_limit": "2",
                                     "memory_request": "1Gi", "memory_limit": "1Gi"}],
                "containers": [{"name": "app", "cpu_request": "1500m", "cpu_limit": "1500m",
                                "memory_request": "1Gi", "memory_limit": "1Gi"}]},
          "b": {"containers": [{"name": "app", "cpu_request": "2", "cpu_limit": "2",
                                "memory_request": "1Gi", "memory_limit": "1Gi"}]}},
        "steps": [{"op": "start"},
                  {"op": "add", "pod": "a", "container": "init"},
                  {"op": "remove", "pod": "a", "container": "init"},
                  {"op": "add", "pod": "b", "container": "app"},
                  {"op": "add", "pod": "a", "container": "app"}]}"#)
    .expect("scenario runs");
    let json = serde_json::to_value(&outcome).expect("outcome serializes");
    let last = &json["steps"][4];
    assert_eq!(last["error"], serde_json::Value::Null, "{last}");
    assert_eq!(last["cpus"], serde_json::Value::Null, "shared pool: {last}");
}
