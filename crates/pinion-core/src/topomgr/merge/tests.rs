use super::*;
use proptest::prelude::*;

fn mask(ids: &[u32]) -> NumaMask {
    NumaMask::from_ids(ids.iter().copied()).unwrap()
}

fn hint(ids: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint::new(mask(ids), preferred)
}

fn numa(n: u32) -> NumaInfo {
    let nodes: Vec<u32> = (0..n).collect();
    let distances = nodes
        .iter()
        .map(|&i| {
            let row = nodes
                .iter()
                .map(|&j| (j, if i == j { 10 } else { 10 + (i ^ j) }))
                .collect();
            (i, row)
        })
        .collect();
    NumaInfo::new(&nodes, Some(&distances)).unwrap()
}

/// kubelet's algorithm, literally: every permutation in nested-loop order.
fn cross_product(
    merger: &HintMerger<'_>,
    lists: &[Vec<TopologyHint>],
    default: NumaMask,
) -> TopologyHint {
    let mut best: Option<TopologyHint> = None;
    let mut picks = vec![0usize; lists.len()];
    if lists.iter().any(Vec::is_empty) {
        return TopologyHint::new(default, false);
    }
    loop {
        let perm: Vec<TopologyHint> = picks.iter().zip(lists).map(|(&i, l)| l[i]).collect();
        let masks: Vec<NumaMask> = perm.iter().filter_map(|h| h.affinity).collect();
        let affinity = masks.iter().fold(default, |acc, &m| acc.and(m));
        let preferred = perm.iter().all(|h| h.preferred) && masks.windows(2).all(|w| w[0] == w[1]);
        let merged = TopologyHint::new(affinity, preferred);
        if merger.candidate_wins(best.as_ref(), &merged) {
            best = Some(merged);
        }
        // Advance the odometer, last list fastest.
        let mut position = lists.len();
        loop {
            if position == 0 {
                return best.unwrap_or(TopologyHint::new(default, false));
            }
            position -= 1;
            picks[position] += 1;
            if picks[position] < lists[position].len() {
                break;
            }
            picks[position] = 0;
        }
    }
}

#[test]
fn worked_examples_from_the_spec() {
    let info = numa(4);
    let lists = vec![
        vec![hint(&[0], true), hint(&[1], true)],
        vec![hint(&[0], true), hint(&[0, 1], false)],
    ];
    let merger = HintMerger::new(&info, &lists, false);
    assert_eq!(merger.merge(&lists), hint(&[0], true));
    let lists = vec![
        vec![hint(&[0, 1, 2, 3], false), hint(&[0, 1], false)],
        vec![hint(&[1, 2], false), hint(&[2, 3], false)],
    ];
    let merger = HintMerger::new(&info, &lists, false);
    assert_eq!(merger.merge(&lists), hint(&[1, 2], false));
    assert_eq!(
        HintMerger::new(&info, &[], false).merge(&[]),
        hint(&[0, 1, 2, 3], true)
    );
}

#[test]
fn wider_preferred_masks_merge_to_not_preferred() {
    let info = numa(2);
    let lists = vec![vec![hint(&[0], true)], vec![hint(&[0, 1], true)]];
    assert_eq!(
        HintMerger::new(&info, &lists, false).merge(&lists),
        hint(&[0], false)
    );
}

#[test]
fn an_empty_list_means_the_default_not_preferred() {
    let info = numa(2);
    let lists = vec![vec![hint(&[0], true)], vec![]];
    assert_eq!(
        HintMerger::new(&info, &lists, false).merge(&lists),
        hint(&[0, 1], false)
    );
}

fn arb_hint(nodes: u32) -> impl Strategy<Value = TopologyHint> {
    let raw_mask = 0u64..(1u64 << nodes);
    (prop::option::weighted(0.85, raw_mask), any::<bool>()).prop_map(|(m, preferred)| {
        TopologyHint {
            affinity: m.map(NumaMask::from_raw),
            preferred,
        }
    })
}

fn arb_case() -> impl Strategy<Value = (u32, Vec<Vec<TopologyHint>>, bool)> {
    (1u32..=5).prop_flat_map(|nodes| {
        let list = prop::collection::vec(arb_hint(nodes), 0..5);
        (
            Just(nodes),
            prop::collection::vec(list, 0..4),
            any::<bool>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn bounded_merge_equals_the_cross_product((nodes, lists, closest) in arb_case()) {
        let info = numa(nodes);
        let merger = HintMerger::new(&info, &lists, closest);
        let expected = cross_product(&merger, &lists, info.default_affinity());
        prop_assert_eq!(merger.merge(&lists), expected);
    }

    #[test]
    fn merged_mask_is_within_the_machine_and_deterministic((nodes, lists, closest) in arb_case()) {
        let info = numa(nodes);
        let merger = HintMerger::new(&info, &lists, closest);
        let merged = merger.merge(&lists);
        let affinity = merged.affinity.unwrap_or_default();
        prop_assert!(affinity.is_subset_of(info.default_affinity()));
        let mut reversed = lists.clone();
        reversed.reverse();
        prop_assert_eq!(HintMerger::new(&info, &reversed, closest).merge(&reversed), merged);
        // Every non-None mask of every list contains the merged mask
        // unless nothing merged at all (then it is the default).
        if merged != TopologyHint::new(info.default_affinity(), false) {
            for list in &lists {
                prop_assert!(list.iter().any(|h| h.affinity.is_none_or(|m| affinity.is_subset_of(m))));
            }
        }
    }
}
