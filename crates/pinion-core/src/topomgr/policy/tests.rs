use super::*;
use proptest::prelude::*;

fn numa(n: u32) -> NumaInfo {
    let nodes: Vec<u32> = (0..n).collect();
    NumaInfo::new(&nodes, None).unwrap()
}

fn provider(hints: &[TopologyHint]) -> ProviderHints {
    Some(BTreeMap::from([("cpu".to_owned(), Some(hints.to_vec()))]))
}

fn hint(ids: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint::new(NumaMask::from_ids(ids.iter().copied()).unwrap(), preferred)
}

#[test]
fn restricted_rejects_a_non_preferred_result_with_kubelets_error() {
    let admission = merge_with_policy(
        Policy::Restricted,
        &numa(2),
        false,
        &[provider(&[hint(&[0, 1], false)])],
    );
    assert!(!admission.admit);
    let err = admission.result().unwrap_err();
    assert_eq!(
        err.to_string(),
        "Resources cannot be allocated with Topology locality"
    );
    assert_eq!(TopologyAffinityError::REASON, "TopologyAffinityError");
}

#[test]
fn best_effort_always_admits_and_none_never_merges() {
    let providers = [provider(&[hint(&[0, 1], false)])];
    let best_effort = merge_with_policy(Policy::BestEffort, &numa(2), false, &providers);
    assert!(best_effort.admit);
    assert_eq!(best_effort.hint, hint(&[0, 1], false));
    let none = merge_with_policy(Policy::None, &numa(2), false, &providers);
    assert_eq!(none.hint, TopologyHint::cannot_satisfy());
    assert!(none.admit);
}

#[test]
fn single_numa_node_turns_all_nodes_into_any() {
    let one = merge_with_policy(
        Policy::SingleNumaNode,
        &numa(1),
        false,
        &[provider(&[hint(&[0], true)])],
    );
    assert_eq!(one.hint, TopologyHint::dont_care());
    let nothing = merge_with_policy(Policy::SingleNumaNode, &numa(2), false, &[provider(&[])]);
    assert_eq!(nothing.hint, TopologyHint::cannot_satisfy());
    assert!(!nothing.admit);
}

#[test]
fn names_round_trip_and_unknown_names_fail() {
    for policy in [
        Policy::None,
        Policy::BestEffort,
        Policy::Restricted,
        Policy::SingleNumaNode,
    ] {
        assert_eq!(Policy::parse(policy.name()), Ok(policy));
    }
    assert_eq!(
        Policy::parse("x").unwrap_err().to_string(),
        "unknown policy: \"x\""
    );
    assert_eq!(Scope::parse("pod"), Ok(Scope::Pod));
    assert_eq!(
        Scope::parse("node").unwrap_err().to_string(),
        "unknown scope: \"node\""
    );
}

#[test]
fn max_allowable_numa_nodes_guards_construction() {
    let many = NumaInfo::new(&(0..64).collect::<Vec<u32>>(), None).unwrap();
    let err =
        TopologyManager::new("restricted", "pod", &BTreeMap::new(), many.clone()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsupported on machines with more than 8 NUMA Nodes"
    );
    let options = BTreeMap::from([("max-allowable-numa-nodes".to_owned(), "64".to_owned())]);
    let manager = TopologyManager::new("restricted", "pod", &options, many).unwrap();
    assert_eq!(manager.policy(), Policy::Restricted);
}

fn arb_providers() -> impl Strategy<Value = Vec<ProviderHints>> {
    let hint = (prop::option::weighted(0.9, 1u64..16), any::<bool>()).prop_map(|(m, preferred)| {
        TopologyHint {
            affinity: m.map(NumaMask::from_raw),
            preferred,
        }
    });
    let list = prop::option::weighted(0.9, prop::collection::vec(hint, 0..5));
    let map = prop::collection::btree_map("[a-c]", list, 0..3);
    prop::collection::vec(prop::option::weighted(0.9, map), 0..4)
}

proptest! {
    #[test]
    fn single_numa_node_never_admits_a_multi_node_affinity(providers in arb_providers()) {
        let admission = merge_with_policy(Policy::SingleNumaNode, &numa(4), false, &providers);
        if admission.admit {
            prop_assert!(admission.hint.affinity.is_none() || is_single_node(admission.hint.affinity));
        }
        prop_assert_eq!(admission, merge_with_policy(Policy::SingleNumaNode, &numa(4), false, &providers));
    }

    #[test]
    fn restricted_admits_exactly_the_preferred_best_effort_results(providers in arb_providers()) {
        let best_effort = merge_with_policy(Policy::BestEffort, &numa(4), false, &providers);
        let restricted = merge_with_policy(Policy::Restricted, &numa(4), false, &providers);
        prop_assert_eq!(best_effort.hint, restricted.hint);
        prop_assert_eq!(restricted.admit, best_effort.hint.preferred);
    }
}
