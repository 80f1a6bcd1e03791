//! Hint helpers shared by the plugins: core masks to wire hints, the
//! katalyst restrictions (`numa_ids`, `numa_number`), nodes others hold,
//! and capacity-based hints (memory, NICs).

use pinion_core::qos::QosRequest;
use pinion_core::topomgr::bitmask::iterate_masks;
use pinion_core::topomgr::{NumaMask, TopologyHint};
use pinion_core::CpuSet;

use crate::api::Hint;

/// A core hint as a wire hint (`None` affinity = no nodes).
#[must_use]
pub fn from_core(hint: &TopologyHint) -> Hint {
    Hint {
        nodes: hint
            .affinity
            .map(|mask| mask.ids().into_iter().map(u64::from).collect())
            .unwrap_or_default(),
        preferred: hint.preferred,
    }
}

/// A hint for `nodes`.
#[must_use]
pub fn of_nodes(nodes: &CpuSet, preferred: bool) -> Hint {
    Hint {
        nodes: nodes.iter().map(u64::from).collect(),
        preferred,
    }
}

/// The nodes of a hint (ids no machine has, beyond
/// [`pinion_core::cpuset::MAX_CPU_ID`], dropped: a set cannot hold them).
#[must_use]
pub fn nodes(hint: &Hint) -> CpuSet {
    hint.nodes
        .iter()
        .filter_map(|&n| u32::try_from(n).ok())
        .filter(|&n| n <= pinion_core::cpuset::MAX_CPU_ID)
        .collect()
}

/// Drops hints that touch `excluded` nodes, lie outside `numa_ids` or do not
/// span exactly `numa_number` nodes.
#[must_use]
pub fn restrict(hints: Vec<Hint>, qos: &QosRequest, excluded: &CpuSet) -> Vec<Hint> {
    hints
        .into_iter()
        .filter(|hint| {
            let nodes = nodes(hint);
            nodes.is_disjoint(excluded)
                && qos.numa_ids.as_ref().is_none_or(|ids| nodes.is_subset(ids))
                && qos
                    .numa_number
                    .is_none_or(|count| nodes.len() == count as usize)
        })
        .collect()
}

/// One node's figures for [`capacity_hints`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCapacity {
    pub node: u32,
    /// What is still free for this request.
    pub free: u64,
    /// What the node offers when empty.
    pub allocatable: u64,
}

/// kubelet's memory-manager style hints: every mask (over `nodes`) whose
/// free amounts add up to `request`; preferred when it has the fewest nodes
/// whose *allocatable* amounts (largest first) could hold the request.
#[must_use]
pub fn capacity_hints(nodes: &[NodeCapacity], request: u64) -> Vec<Hint> {
    let mut allocatable: Vec<u64> = nodes.iter().map(|n| n.allocatable).collect();
    allocatable.sort_unstable_by(|a, b| b.cmp(a));
    let mut sum = 0u64;
    let mut min_nodes = allocatable.len();
    for (count, amount) in allocatable.iter().enumerate() {
        sum = sum.saturating_add(*amount);
        if sum >= request {
            min_nodes = count + 1;
            break;
        }
    }
    let ids: Vec<u32> = nodes.iter().map(|n| n.node).collect();
    let mut hints = Vec::new();
    iterate_masks(&ids, |mask: NumaMask| {
        let free: u64 = nodes
            .iter()
            .filter(|n| mask.is_set(n.node))
            .fold(0u64, |sum, n| sum.saturating_add(n.free));
        if free >= request {
            hints.push(Hint {
                nodes: mask.ids().into_iter().map(u64::from).collect(),
                preferred: mask.count() as usize == min_nodes,
            });
        }
    });
    hints
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use pinion_core::qos;

    use super::*;

    fn hint(nodes: &[u64], preferred: bool) -> Hint {
        Hint {
            nodes: nodes.to_vec(),
            preferred,
        }
    }

    #[test]
    fn capacity_hints_prefer_the_fewest_nodes() {
        let nodes = [
            NodeCapacity {
                node: 0,
                free: 10,
                allocatable: 100,
            },
            NodeCapacity {
                node: 1,
                free: 60,
                allocatable: 100,
            },
        ];
        assert_eq!(
            capacity_hints(&nodes, 50),
            vec![hint(&[1], true), hint(&[0, 1], false)]
        );
        assert_eq!(capacity_hints(&nodes, 150), vec![]);
        assert_eq!(capacity_hints(&nodes, 65), vec![hint(&[0, 1], false)]);
    }

    #[test]
    fn restrictions_follow_the_annotations() {
        let all = vec![hint(&[0], true), hint(&[1], true), hint(&[0, 1], false)];
        let annotations = BTreeMap::from([(qos::NUMA_IDS_KEY.to_string(), "1".to_string())]);
        let ids = qos::parse(&annotations).expect("qos");
        assert_eq!(
            restrict(all.clone(), &ids, &CpuSet::new()),
            vec![hint(&[1], true)]
        );
        let annotations = BTreeMap::from([(qos::NUMA_NUMBER_KEY.to_string(), "2".to_string())]);
        let number = qos::parse(&annotations).expect("qos");
        assert_eq!(
            restrict(all.clone(), &number, &CpuSet::new()),
            vec![hint(&[0, 1], false)]
        );
        let plain = qos::parse(&BTreeMap::new()).expect("qos");
        assert_eq!(
            restrict(all, &plain, &CpuSet::from_iter([0])),
            vec![hint(&[1], true)]
        );
    }
}
