//! The scenario runner on small machines: the manager's rules (tolerated
//! failures of `shared_cores` pods, whole-pod rejection, hints only with a
//! Topology Manager policy) and step validation.

use serde_json::json;

use super::*;

fn scenario(value: serde_json::Value) -> QrmScenario {
    serde_json::from_value(value).expect("scenario")
}

fn machine() -> serde_json::Value {
    json!({"sockets": 2, "numa_per_socket": 1, "cores_per_socket": 4, "threads_per_core": 1})
}

fn run_it(scenario: &QrmScenario) -> Result<Outcome, ScenarioError> {
    let topology = inline_topology(scenario).expect("machine").expect("inline");
    run(scenario, &topology)
}

const BW: &str = "resource.katalyst.kubewharf.io/net_bandwidth";

#[test]
fn a_shared_cores_pod_skips_a_failed_resource_a_dedicated_pod_is_rejected() {
    let pod = |level: Option<&str>| {
        let annotations = level
            .map(|l| json!({"katalyst.kubewharf.io/qos_level": l}))
            .unwrap_or(json!({}));
        json!({"annotations": annotations,
               "containers": [{"name": "app", "requests": {"cpu": "1", BW: "100"}}]})
    };
    let s = scenario(json!({
        "machine": machine(),
        "plugins": {"cpu": {}, "nic": null},
        "pods": {"web": pod(None), "db": pod(Some("dedicated_cores"))},
        "steps": [{"op": "add", "pod": "web"}, {"op": "add", "pod": "db"}],
    }));
    let out = run_it(&s).expect("runs");
    let web = out.steps[0].admission.as_ref().expect("admission");
    assert!(web.admitted);
    assert_eq!(web.containers[0].skipped.len(), 1, "no nic: skipped");
    assert!(web.containers[0].skipped[0].starts_with(BW));
    let db = out.steps[1].admission.as_ref().expect("admission");
    assert!(!db.admitted);
    assert!(db.reason.as_deref().is_some_and(|r| r.contains("no nic")));
    // The rejected pod holds nothing: only web is placed, no dedicated cpus.
    let snapshot = &out.steps[1].snapshot;
    assert_eq!(snapshot.placements.len(), 1);
    assert!(snapshot.pools.as_ref().expect("pools").dedicated.is_empty());
}

#[test]
fn hints_are_asked_only_under_a_topology_manager_policy() {
    let base = |policy: Option<&str>| {
        scenario(json!({
            "machine": machine(),
            "topologyManagerPolicy": policy,
            "plugins": {"cpu": {}},
            "pods": {"db": {"annotations": {"katalyst.kubewharf.io/qos_level": "dedicated_cores"},
                             "containers": [{"name": "app", "requests": {"cpu": "2"}}]}},
            "steps": [{"op": "add", "pod": "db"}],
        }))
    };
    let none = run_it(&base(None)).expect("runs");
    assert_eq!(none.topology_manager_policy, "none");
    assert_eq!(
        none.steps[0].admission.as_ref().expect("a").containers[0].hint,
        None
    );
    let aligned = run_it(&base(Some("single-numa-node"))).expect("runs");
    let hint = aligned.steps[0].admission.as_ref().expect("a").containers[0]
        .hint
        .clone()
        .expect("merged hint");
    assert_eq!(hint.nodes.len(), 1);
    let bad = run_it(&base(Some("sometimes"))).expect_err("bad policy");
    assert!(
        matches!(bad, ScenarioError::TopologyManager { .. }),
        "{bad}"
    );
}

#[test]
fn steps_are_checked_before_they_run() {
    let cases = [
        json!({"op": "pressure", "pool": "share", "pressure": -1}),
        json!({"op": "pressure", "pool": "share", "pressure": 10, "usage": -2}),
        json!({"op": "reconcile", "periods": 0}),
        json!({"op": "advisor", "pool": "share", "size": "0"}),
        json!({"op": "add"}),
    ];
    for value in cases {
        let err = Step::parse(4, &value).expect_err("bad step");
        assert!(
            matches!(err, ScenarioError::BadStep { index: 4, .. }),
            "{value}: {err}"
        );
    }
    let ok = Step::parse(1, &json!({"op": "advisor", "pool": "share", "size": 12})).expect("ok");
    assert_eq!(ok.describe(), "advisor sets share to 12");
}

#[test]
fn the_machine_and_plugins_are_checked() {
    let no_machine = scenario(json!({"plugins": {"cpu": {}}}));
    assert!(matches!(
        inline_topology(&no_machine),
        Err(ScenarioError::Machine { .. })
    ));
    let twice = scenario(json!({
        "machine": machine(), "plugins": {"memory": {}},
        "memory": [{"numa": 0, "total": "1Gi"}, {"numa": 0, "total": "1Gi"}],
    }));
    let err = run_it(&twice).expect_err("node twice");
    assert!(
        err.to_string().contains("numa node 0 is given twice"),
        "{err}"
    );
    let bad_nic = scenario(json!({
        "machine": machine(), "plugins": {"nic": {}},
        "nics": [{"name": "eth0", "addresses": ["10.0.0.300"]}],
    }));
    let err = run_it(&bad_nic).expect_err("bad address");
    assert!(err.to_string().contains("\"10.0.0.300\""), "{err}");
    let none = scenario(json!({"machine": machine(), "plugins": {}}));
    assert!(matches!(run_it(&none), Err(ScenarioError::Plugins { .. })));
}

#[test]
fn an_smt_misaligned_pod_is_rejected_not_an_input_error() {
    let s = scenario(json!({
        "machine": {"sockets": 1, "numa_per_socket": 1, "cores_per_socket": 4, "threads_per_core": 2},
        "plugins": {"cpu": {"staticPolicyOptions": {
            "full_pcpus_only": true, "distribute_cpus_across_numa": false,
            "align_by_socket": false, "distribute_cpus_across_cores": false,
            "strict_cpu_reservation": false, "prefer_align_cpus_by_uncorecache": false}}},
        "pods": {"odd": {"annotations": {"katalyst.kubewharf.io/qos_level": "dedicated_cores"},
                          "containers": [{"name": "app", "requests": {"cpu": "3"}}]}},
        "steps": [{"op": "add", "pod": "odd"}],
    }));
    let out = run_it(&s).expect("runs");
    let odd = out.steps[0].admission.as_ref().expect("admission");
    assert!(!odd.admitted);
    assert!(
        odd.reason.as_deref().is_some_and(|r| r.contains("SMT")),
        "{odd:?}"
    );
}

#[test]
fn the_names_map_sends_reclaimed_millicpu_to_the_cpu_plugin() {
    const RECLAIMED: &str = "resource.katalyst.kubewharf.io/reclaimed_millicpu";
    let pod = |requests: serde_json::Value| {
        json!({"annotations": {"katalyst.kubewharf.io/qos_level": "reclaimed_cores"},
               "containers": [{"name": "job", "requests": requests}]})
    };
    let s = scenario(json!({
        "machine": machine(),
        "resourceNamesMap": {RECLAIMED: "cpu"},
        "plugins": {"cpu": {}},
        "pods": {"etl": pod(json!({RECLAIMED: "2k"})),
                 "both": pod(json!({RECLAIMED: "2k", "cpu": "1"}))},
        "steps": [{"op": "add", "pod": "etl"}, {"op": "add", "pod": "both"}],
    }));
    let err = run_it(&s).expect_err("both names");
    assert!(
        matches!(&err, ScenarioError::Step { index: 2, what, .. } if what.contains("both")),
        "{err}"
    );
    let mut first = s.clone();
    first.steps.truncate(1);
    let out = run_it(&first).expect("runs");
    let etl = &out.steps[0].snapshot.placements[0];
    assert_eq!(etl.pool.as_deref(), Some("reclaim"));
    let bad = scenario(json!({"machine": machine(), "plugins": {"cpu": {}},
                              "resourceNamesMap": {"cpu": "cpu"}}));
    assert!(matches!(run_it(&bad), Err(ScenarioError::Plugins { .. })));
}

/// Regression: the simulator gave the memory plugin the CPU plugin's
/// cpusets, so an unbound container's memory followed the NUMA node of its
/// CPUs in `pinion simulate` — while the agent, which never did, left it
/// on every node. Both now leave it as it is until a pod holds a node
/// alone; only `numa_binding` binds memory.
#[test]
fn unbound_memory_does_not_follow_the_cpus() {
    let s = scenario(json!({
        "machine": machine(),
        "plugins": {"cpu": {}, "memory": {}},
        "memory": [{"numa": 0, "total": "8Gi"}, {"numa": 1, "total": "8Gi"}],
        "pods": {
            "db": {"annotations": {"katalyst.kubewharf.io/qos_level": "dedicated_cores"},
                   "containers": [{"name": "app", "requests": {"cpu": "2", "memory": "1Gi"}}]},
            "web": {"containers": [{"name": "app", "requests": {"cpu": "1", "memory": "1Gi"}}]},
        },
        "steps": [{"op": "add", "pod": "db"}, {"op": "add", "pod": "web"}],
    }));
    let out = run_it(&s).expect("runs");
    let placements = &out.steps[1].snapshot.placements;
    assert_eq!(placements.len(), 2);
    for placement in placements {
        let cpus = placement.cpus.clone().expect("cpus from the cpu plugin");
        assert!(!cpus.is_empty());
        assert_eq!(
            placement.mems, None,
            "{}: memory left as it is, whatever its cpus ({cpus})",
            placement.pod
        );
    }
    let db = placements.iter().find(|p| p.pod == "db").expect("db");
    assert_eq!(db.cpus.as_ref().map(CpuSet::len), Some(2));
}
