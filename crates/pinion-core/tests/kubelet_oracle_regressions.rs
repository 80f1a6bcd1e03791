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

/// A pod with pod-level resources and the `PodLevelResourceManagers` gate
/// off runs in the shared pool (kubelet skips it) — also a container added
/// after its only added sibling was removed: the scenario's pod keeps its
/// `spec.resources` (oracle cases c01595 seed 1, c01123 seed 2).
#[test]
fn regression_pod_level_pod_stays_skipped_after_its_only_container_is_removed() {
    let outcome = run(r#"{
        "topology": {"cpus": [
            {"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 1, "core": 1, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 2, "core": 2, "socket": 0, "numa": 0, "uncore": 0},
            {"id": 3, "core": 3, "socket": 0, "numa": 0, "uncore": 0}]},
        "num_reserved": 1,
        "pod_resources": {"a": {"cpu_request": "2", "cpu_limit": "2",
                                "memory_request": "1Gi", "memory_limit": "1Gi"}},
        "pods": {
          "a": {"containers": [
            {"name": "one", "cpu_request": "1", "cpu_limit": "1",
             "memory_request": "128Mi", "memory_limit": "128Mi"},
            {"name": "two", "cpu_request": "1", "cpu_limit": "1",
             "memory_request": "128Mi", "memory_limit": "128Mi"}]}},
        "steps": [{"op": "start"},
                  {"op": "add", "pod": "a", "container": "one"},
                  {"op": "remove", "pod": "a", "container": "one"},
                  {"op": "add", "pod": "a", "container": "two"}]}"#)
    .expect("scenario runs");
    let json = serde_json::to_value(&outcome).expect("outcome serializes");
    for index in [1, 3] {
        let step = &json["steps"][index];
        assert_eq!(step["error"], serde_json::Value::Null, "{step}");
        assert_eq!(step["cpus"], serde_json::Value::Null, "shared pool: {step}");
    }
}

/// The Topology Manager's refusal of a pod with pod-level resources under
/// `PodLevelResourceManagers` is kubelet's `PodLevelTopologyAffinityError`,
/// whose text names the scope (oracle cases c00049, c00418 of seed 1 with
/// the gate on): 3 CPUs fit on no NUMA node of 2 CPUs under
/// `single-numa-node`.
#[test]
fn regression_pod_level_topology_refusal_has_kubelets_pod_scope_text() {
    for (scope, text) in [
        (
            "pod",
            "Pod Scope pod with pod-level resources failed admission under pod-scope topology manager",
        ),
        (
            "container",
            "Pod Scope pod with pod-level resources failed admission with a container-level topology manager",
        ),
    ] {
        let scenario = format!(
            r#"{{
            "topology": {{"cpus": [
                {{"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0}},
                {{"id": 1, "core": 1, "socket": 0, "numa": 0, "uncore": 0}},
                {{"id": 2, "core": 2, "socket": 1, "numa": 1, "uncore": 1}},
                {{"id": 3, "core": 3, "socket": 1, "numa": 1, "uncore": 1}},
                {{"id": 4, "core": 4, "socket": 1, "numa": 1, "uncore": 1}}],
              "numa_nodes": [{{"id": 0, "distances": [10, 21]}}, {{"id": 1, "distances": [21, 10]}}]}},
            "num_reserved": 1, "reserved": "0",
            "features": {{"PodLevelResourceManagers": true}},
            "topologyManagerPolicy": "single-numa-node",
            "topologyManagerScope": "{scope}",
            "pod_resources": {{"a": {{"cpu_request": "4", "cpu_limit": "4",
                                    "memory_request": "1Gi", "memory_limit": "1Gi"}}}},
            "pods": {{"a": {{"containers": [
                {{"name": "app", "cpu_request": "4", "cpu_limit": "4",
                 "memory_request": "1Gi", "memory_limit": "1Gi"}}]}}}},
            "steps": [{{"op": "start"}}, {{"op": "add", "pod": "a", "container": "app"}}]}}"#
        );
        let outcome = run(&scenario).expect("scenario runs");
        let json = serde_json::to_value(&outcome).expect("outcome serializes");
        let step = &json["steps"][1];
        assert_eq!(step["error"], text, "{scope} scope: {step}");
        assert_eq!(step["reason"], "TopologyAffinityError", "{scope} scope: {step}");
    }
}
