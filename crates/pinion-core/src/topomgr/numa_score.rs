//! KEP-6007's NUMA allocation strategy (`numa-allocation-strategy`, spec
//! `isolation.md` §5), as a Pinion option until kubelet ships it: when the
//! hint merge is left with two candidates that are equally preferred and
//! equally narrow (and, with `prefer-closest-numa-nodes`, equally close),
//! `most-allocated` takes the one whose NUMA nodes hold more exclusive CPUs
//! (pack), `least-allocated` the one that holds fewer (spread); equal
//! scores keep today's lowest-node-id choice. Admission outcomes never
//! change, only which equal candidate wins.
//!
//! Scores are the KEP's CPU manager score, `max(1, assigned * 100 /
//! allocatable)` with integer division, over the mask's nodes: `assigned`
//! is the exclusive CPUs held there, `allocatable` the online CPUs there
//! minus the reserved ones. Only the CPU manager scores (the KEP's memory
//! and device manager scores and `numa-score-weights` are not in Pinion).

use std::collections::BTreeMap;
use std::fmt;

use super::bitmask::NumaMask;
use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// `numa-allocation-strategy`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum NumaAllocationStrategy {
    /// Today's tie-break (the lowest NUMA node ids).
    #[default]
    None,
    /// Pack: the more allocated candidate wins a tie.
    MostAllocated,
    /// Spread: the less allocated candidate wins a tie.
    LeastAllocated,
}

impl NumaAllocationStrategy {
    /// Parses the option's value (`none`, `most-allocated`,
    /// `least-allocated`).
    #[must_use]
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "none" => Some(Self::None),
            "most-allocated" => Some(Self::MostAllocated),
            "least-allocated" => Some(Self::LeastAllocated),
            _ => None,
        }
    }

    /// The option's value.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::MostAllocated => "most-allocated",
            Self::LeastAllocated => "least-allocated",
        }
    }

    /// True when `candidate_score` beats `current_score` under the
    /// strategy; `None` when the strategy does not decide (off, or equal).
    #[must_use]
    pub fn prefers(self, current_score: u64, candidate_score: u64) -> Option<bool> {
        if current_score == candidate_score {
            return None;
        }
        match self {
            Self::None => None,
            Self::MostAllocated => Some(candidate_score > current_score),
            Self::LeastAllocated => Some(candidate_score < current_score),
        }
    }
}

impl fmt::Display for NumaAllocationStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Per NUMA node: exclusive CPUs held and allocatable CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaScores {
    nodes: BTreeMap<u32, (u64, u64)>,
}

impl NumaScores {
    /// The scores of `topology`'s nodes with `exclusive` CPUs held and
    /// `reserved` CPUs not allocatable.
    #[must_use]
    pub fn of(topology: &Topology, exclusive: &CpuSet, reserved: &CpuSet) -> Self {
        let nodes = topology
            .numa_cpus()
            .iter()
            .map(|(&id, cpus)| {
                let allocatable = cpus.difference(reserved);
                let assigned = allocatable.intersection_len(exclusive) as u64;
                (id, (assigned, allocatable.len() as u64))
            })
            .collect();
        Self { nodes }
    }

    /// The KEP's score of `mask`: `max(1, assigned * 100 / allocatable)`
    /// summed over its nodes; 1 when it has nothing allocatable.
    #[must_use]
    pub fn score(&self, mask: NumaMask) -> u64 {
        let (assigned, allocatable) = mask
            .ids()
            .iter()
            .filter_map(|id| self.nodes.get(id))
            .fold((0, 0), |(a, t), &(assigned, total)| {
                (a + assigned, t + total)
            });
        (assigned * 100)
            .checked_div(allocatable)
            .unwrap_or(0)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{synthetic, Shape};

    fn mask(ids: &[u32]) -> NumaMask {
        NumaMask::from_ids(ids.iter().copied()).unwrap()
    }

    #[test]
    fn scores_follow_the_keps_integer_formula() {
        // 2 nodes of 4 CPUs (0-3, 4-7); CPU 0 reserved.
        let t = synthetic(Shape {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads_per_core: 1,
            cores_per_uncore: 0,
        });
        let reserved = CpuSet::from_iter([0]);
        let scores = NumaScores::of(&t, &CpuSet::from_iter([1, 2, 4]), &reserved);
        assert_eq!(scores.score(mask(&[0])), 66, "2 of 3");
        assert_eq!(scores.score(mask(&[1])), 25, "1 of 4");
        assert_eq!(scores.score(mask(&[0, 1])), 42, "3 of 7");
        let idle = NumaScores::of(&t, &CpuSet::new(), &reserved);
        assert_eq!(idle.score(mask(&[1])), 1, "never below 1");
    }

    #[test]
    fn strategies_pick_the_higher_or_lower_score() {
        use NumaAllocationStrategy::{LeastAllocated, MostAllocated, None};
        assert_eq!(MostAllocated.prefers(10, 20), Some(true));
        assert_eq!(MostAllocated.prefers(20, 10), Some(false));
        assert_eq!(LeastAllocated.prefers(10, 20), Some(false));
        assert_eq!(LeastAllocated.prefers(20, 10), Some(true));
        assert_eq!(MostAllocated.prefers(7, 7), Option::None);
        assert_eq!(None.prefers(1, 99), Option::None);
    }

    #[test]
    fn values_parse_and_print() {
        for name in ["none", "most-allocated", "least-allocated"] {
            assert_eq!(NumaAllocationStrategy::parse(name).unwrap().name(), name);
        }
        assert_eq!(NumaAllocationStrategy::parse("pack"), Option::None);
    }
}
