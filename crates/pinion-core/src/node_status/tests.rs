use super::*;

fn resource(name: &str, node: bool, scalar: bool, allocatable: f64) -> AllocatableResource {
    AllocatableResource {
        resource_name: name.to_string(),
        is_node_resource: node,
        is_scalar_resource: scalar,
        allocatable,
        allocatable_per_numa: Vec::new(),
        capacity: allocatable * 2.0,
        capacity_per_numa: Vec::new(),
    }
}

fn quantities(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
    list.iter().map(|(n, q)| ((*n).to_string(), *q)).collect()
}

#[test]
fn only_scalar_node_resources_reach_the_node_status_with_their_allocatable() {
    let plugins = [
        resource("example.com/widget", true, true, 4.0),
        resource("example.com/not-node", false, true, 4.0),
        resource("example.com/not-scalar", true, false, 4.0),
        resource("nic.example.io/bandwidth", true, true, 2500.0),
    ];
    let out = extended(&plugins);
    assert_eq!(
        out.quantities,
        quantities(&[
            ("example.com/widget", 4),
            ("nic.example.io/bandwidth", 2500)
        ]),
        "the allocatable, not the capacity (kubelet derives allocatable from capacity)"
    );
    assert!(out.refused.is_empty(), "{:?}", out.refused);
}

#[test]
fn kubelets_own_resources_are_refused_by_name() {
    // A plugin that marks native resources as node resources (katalyst's
    // cpu and memory plugins say false; a misbehaving one might not).
    let cases = [
        ("cpu", "no domain prefix"),
        ("memory", "no domain prefix"),
        ("hugepages-2Mi", "no domain prefix"),
        ("pods", "no domain prefix"),
        ("ephemeral-storage", "no domain prefix"),
        ("kubernetes.io/widget", "kubernetes.io/"),
        ("node.kubernetes.io/widget", "kubernetes.io/"),
        ("requests.example.com/widget", "requests."),
        ("example.com/a/b", "more than one"),
        ("Example.com/widget", "DNS subdomain"),
        ("-example.com/widget", "DNS subdomain"),
        ("example..com/widget", "DNS subdomain"),
        ("/widget", "DNS subdomain"),
        ("example.com/", "name after"),
        ("example.com/-widget", "name after"),
        ("example.com/wid get", "name after"),
    ];
    for (name, why) in cases {
        let out = extended(&[resource(name, true, true, 1.0)]);
        assert!(out.quantities.is_empty(), "{name}: {:?}", out.quantities);
        let [NodeStatusError::NotExtended {
            name: refused,
            defect,
        }] = out.refused.as_slice()
        else {
            panic!("{name}: {:?}", out.refused);
        };
        assert_eq!(refused, name);
        assert!(defect.contains(why), "{name}: {defect}");
        assert!(
            out.refused[0].to_string().contains(&format!("{name:?}")),
            "the message names the resource: {}",
            out.refused[0]
        );
    }
}

#[test]
fn valid_extended_names_are_accepted() {
    let long_name = format!("example.com/{}", "a".repeat(63));
    let long_prefix = format!("{}/widget", "a".repeat(244));
    for name in [
        "example.com/widget",
        "a/b",
        "example.com/Widget_1.x",
        long_name.as_str(),
        long_prefix.as_str(),
    ] {
        assert_eq!(extended_name_defect(name), None, "{name}");
    }
    let too_long_name = format!("example.com/{}", "a".repeat(64));
    let too_long_prefix = format!("{}/widget", "a".repeat(245));
    assert!(extended_name_defect(&too_long_name).is_some());
    assert!(
        extended_name_defect(&too_long_prefix).is_some(),
        "requests. + prefix > 253"
    );
}

#[test]
fn fractional_amounts_are_rounded_down_and_bad_ones_refused() {
    let out = extended(&[
        resource("example.com/half", true, true, 2.5),
        resource("example.com/under-one", true, true, 0.999),
        resource("example.com/nan", true, true, f64::NAN),
        resource("example.com/negative", true, true, -1.0),
        resource("example.com/huge", true, true, 1e300),
    ]);
    assert_eq!(
        out.quantities,
        quantities(&[("example.com/half", 2), ("example.com/under-one", 0)])
    );
    let refused: Vec<&str> = out
        .refused
        .iter()
        .map(|e| match e {
            NodeStatusError::Amount { name, .. } => name.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        refused,
        [
            "example.com/nan",
            "example.com/negative",
            "example.com/huge"
        ]
    );
}

#[test]
fn the_apply_configuration_holds_only_pinions_keys_in_both_maps() {
    let body = apply_configuration("worker-1", &quantities(&[("example.com/widget", 4)]));
    assert_eq!(
        body,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1"},
            "status": {
                "capacity": {"example.com/widget": "4"},
                "allocatable": {"example.com/widget": "4"},
            },
        })
    );
    let empty = apply_configuration("worker-1", &BTreeMap::new());
    assert_eq!(empty.get("status"), None, "{empty}");
}

fn observed(capacity: &[(&str, &str)], allocatable: &[(&str, &str)], owned: &[&str]) -> Observed {
    let map = |list: &[(&str, &str)]| {
        list.iter()
            .map(|(n, q)| ((*n).to_string(), (*q).to_string()))
            .collect()
    };
    Observed {
        capacity: map(capacity),
        allocatable: map(allocatable),
        owned: owned.iter().map(|n| (*n).to_string()).collect(),
    }
}

#[test]
fn the_check_finds_kubelets_reset_and_stale_keys() {
    let desired = quantities(&[("example.com/widget", 4)]);
    let kubelets = [("cpu", "8"), ("memory", "16Gi")];
    let widget = [("cpu", "8"), ("example.com/widget", "4")];
    let cases: &[(&str, Observed, bool)] = &[
        (
            "as applied",
            observed(&widget, &widget, &["example.com/widget"]),
            false,
        ),
        (
            "another spelling of the same quantity",
            observed(
                &[("example.com/widget", "4000m")],
                &[("example.com/widget", "4")],
                &["example.com/widget"],
            ),
            false,
        ),
        (
            "kubelet zeroed it at registration",
            observed(
                &[("example.com/widget", "0")],
                &[("example.com/widget", "0")],
                &[],
            ),
            true,
        ),
        (
            "missing from allocatable",
            observed(&widget, &kubelets, &["example.com/widget"]),
            true,
        ),
        (
            "not there at all",
            observed(&kubelets, &kubelets, &[]),
            true,
        ),
        (
            "a key owned from an earlier run",
            observed(
                &[("example.com/widget", "4"), ("example.com/gone", "1")],
                &[("example.com/widget", "4"), ("example.com/gone", "1")],
                &["example.com/widget", "example.com/gone"],
            ),
            true,
        ),
    ];
    for (name, observed, expected) in cases {
        assert_eq!(needs_apply(observed, &desired), *expected, "{name}");
    }
    assert!(
        !needs_apply(&observed(&kubelets, &kubelets, &[]), &BTreeMap::new()),
        "nothing wanted, nothing owned: the node is left alone"
    );
}

#[test]
fn owned_resources_are_read_from_managed_fields() {
    let fields = serde_json::json!({
        "f:status": {
            "f:capacity": {"f:example.com/widget": {}, "f:example.com/gone": {}},
            "f:allocatable": {"f:example.com/widget": {}},
        }
    });
    let owned: Vec<String> = owned_resources(&fields).into_iter().collect();
    assert_eq!(owned, ["example.com/gone", "example.com/widget"]);
    assert!(owned_resources(&serde_json::json!({"f:metadata": {}})).is_empty());
}
