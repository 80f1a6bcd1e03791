//! The hint merge (kubelet `policy.go`, spec §3) — with kubelet's results,
//! without kubelet's cross product.
//!
//! kubelet merges every permutation (one hint per list) and keeps the best
//! by a pairwise comparison ([`HintMerger::candidate_wins`]). The best is the
//! maximum of a total preorder, so neither the order of the permutations nor
//! their multiplicity matters; only the *set* of distinct merged hints does.
//! Pinion computes that set directly, in two bounded passes (see
//! `docs/decisions/002-bounded-hint-merge.md`):
//!
//! 1. **Preferred pass.** A merged hint is preferred iff every hint is
//!    preferred and all non-`None` masks are equal: its mask is a preferred
//!    mask of some list that every other list offers too (or answers with a
//!    preferred `None`). A non-empty one beats every non-preferred merge, so
//!    when one exists the answer is the best of them.
//! 2. **Non-preferred pass** (only when pass 1 found nothing): fold the lists
//!    keeping the set of distinct running ANDs, dropping empty ones (an AND
//!    only shrinks). Lists are folded most restrictive first, so the state set
//!    stays within the subsets of the narrowest list's nodes.
//!
//! The final candidates are then compared with kubelet's own pairwise rule.

use super::bitmask::NumaMask;
use super::hint::{max_of_min_affinity_counts, TopologyHint};
use super::numa_info::NumaInfo;

/// kubelet `HintMerger`: the NUMA info, the mask comparison in use and
/// `bestNonPreferredAffinityCount`.
#[derive(Debug, Clone, Copy)]
pub struct HintMerger<'a> {
    numa: &'a NumaInfo,
    closest: bool,
    best_non_preferred_count: u32,
}

impl<'a> HintMerger<'a> {
    /// A merger for `lists` (already normalised, and filtered for
    /// single-numa-node); `closest` selects `prefer-closest-numa-nodes`.
    #[must_use]
    pub fn new(numa: &'a NumaInfo, lists: &[Vec<TopologyHint>], closest: bool) -> Self {
        Self::with_count(numa, closest, max_of_min_affinity_counts(lists))
    }

    /// A merger with an explicit `bestNonPreferredAffinityCount`.
    #[must_use]
    pub fn with_count(numa: &'a NumaInfo, closest: bool, best_non_preferred_count: u32) -> Self {
        Self {
            numa,
            closest,
            best_non_preferred_count,
        }
    }

    /// True when `candidate` is a strictly better mask than `current`:
    /// narrowest (fewer nodes, then numerically smaller) or, with
    /// `prefer-closest-numa-nodes`, kubelet's `Closest`.
    #[must_use]
    pub fn better_mask(&self, current: NumaMask, candidate: NumaMask) -> bool {
        if self.closest {
            self.numa.closer(current, candidate)
        } else {
            candidate.is_narrower_than(current)
        }
    }

    /// kubelet `HintMerger.compare`: true when `candidate` replaces
    /// `current` as the best merged hint so far.
    #[must_use]
    pub fn candidate_wins(&self, current: Option<&TopologyHint>, candidate: &TopologyHint) -> bool {
        let cand = candidate.affinity.unwrap_or_default();
        if cand.is_empty() {
            return false;
        }
        let Some(current) = current else {
            return true;
        };
        let cur = current.affinity.unwrap_or_default();
        match (current.preferred, candidate.preferred) {
            (false, true) => true,
            (true, false) => false,
            (true, true) => self.better_mask(cur, cand),
            (false, false) => self.non_preferred_wins(cur, cand),
        }
    }

    /// Both non-preferred: aim for exactly `bestNonPreferredAffinityCount`
    /// nodes, not for the narrowest mask (spec §3.4 step 5).
    fn non_preferred_wins(&self, cur: NumaMask, cand: NumaMask) -> bool {
        let best = self.best_non_preferred_count;
        let (c, k) = (cur.count(), cand.count());
        if c > best {
            return self.better_mask(cur, cand);
        }
        if c == best {
            return k == best && self.better_mask(cur, cand);
        }
        if k > best {
            return false;
        }
        if k == best || k > c {
            return true;
        }
        k == c && self.better_mask(cur, cand)
    }

    /// The best of `candidates` by [`HintMerger::candidate_wins`].
    #[must_use]
    pub fn best_of(
        &self,
        candidates: impl IntoIterator<Item = TopologyHint>,
    ) -> Option<TopologyHint> {
        let mut best: Option<TopologyHint> = None;
        for candidate in candidates {
            if self.candidate_wins(best.as_ref(), &candidate) {
                best = Some(candidate);
            }
        }
        best
    }

    /// kubelet `HintMerger.Merge`: the best merged hint over all
    /// permutations of `lists`, or `{all nodes, not preferred}` when no
    /// permutation merges to a non-empty mask.
    #[must_use]
    pub fn merge(&self, lists: &[Vec<TopologyHint>]) -> TopologyHint {
        let default = self.numa.default_affinity();
        if let Some(best) = self.best_of(preferred_merges(lists, default)) {
            return best;
        }
        let merges = non_preferred_merges(lists, default);
        let candidates = merges
            .into_iter()
            .map(|mask| TopologyHint::new(mask, false));
        self.best_of(candidates)
            .unwrap_or(TopologyHint::new(default, false))
    }
}

/// The distinct non-empty preferred merges: permutations of preferred hints
/// whose non-`None` masks are all equal. Such a permutation's mask `M` lies
/// in some list's preferred masks and every list offers `M` or a preferred
/// `None`; the all-`None` permutation exists iff every list offers a
/// preferred `None`. Lookups are binary searches, so the cost is
/// `O(Σ L log L)`, not `states × L`.
fn preferred_merges(lists: &[Vec<TopologyHint>], default: NumaMask) -> Vec<TopologyHint> {
    let offers: Vec<(Vec<NumaMask>, bool)> = lists.iter().map(|l| preferred_offer(l)).collect();
    let accepts = |mask: &NumaMask| {
        offers
            .iter()
            .all(|(masks, any)| *any || masks.binary_search(mask).is_ok())
    };
    // Without a wildcard, a list bounds the candidates: start from the smallest.
    let driver = offers
        .iter()
        .filter(|(_, any)| !any)
        .min_by_key(|(masks, _)| masks.len());
    let mut candidates: Vec<NumaMask> = match driver {
        Some((masks, _)) => masks.clone(),
        None => offers
            .iter()
            .flat_map(|(masks, _)| masks.iter().copied())
            .collect(),
    };
    candidates.retain(accepts);
    if offers.iter().all(|(_, any)| *any) {
        candidates.push(default);
    }
    candidates
        .into_iter()
        .map(|mask| mask.and(default))
        .filter(|mask| !mask.is_empty())
        .map(|mask| TopologyHint::new(mask, true))
        .collect()
}

/// A list's preferred masks (sorted, distinct) and whether it has a
/// preferred `None` hint.
fn preferred_offer(list: &[TopologyHint]) -> (Vec<NumaMask>, bool) {
    let mut masks: Vec<NumaMask> = list
        .iter()
        .filter(|h| h.preferred)
        .filter_map(|h| h.affinity)
        .collect();
    masks.sort_unstable();
    masks.dedup();
    let any = list.iter().any(|h| h.preferred && h.affinity.is_none());
    (masks, any)
}

/// The distinct non-empty ANDs of all permutations (`None` masks do not
/// restrict), ascending by raw value.
fn non_preferred_merges(lists: &[Vec<TopologyHint>], default: NumaMask) -> Vec<NumaMask> {
    let all = NumaMask::from_raw(u64::MAX);
    let mut distinct: Vec<Vec<NumaMask>> = lists
        .iter()
        .map(|list| {
            let mut masks: Vec<NumaMask> = list.iter().map(|h| h.affinity.unwrap_or(all)).collect();
            masks.sort_unstable();
            masks.dedup();
            masks
        })
        .collect();
    // Most restrictive lists first: the states then stay small.
    distinct.sort_by_key(|masks| {
        let union = masks.iter().fold(NumaMask::empty(), |acc, &m| acc.or(m));
        (union.count(), masks.len())
    });
    let mut states = if default.is_empty() {
        Vec::new()
    } else {
        vec![default]
    };
    for masks in &distinct {
        let mut next = Vec::with_capacity(states.len() * masks.len());
        for &state in &states {
            next.extend(
                masks
                    .iter()
                    .map(|&m| state.and(m))
                    .filter(|m| !m.is_empty()),
            );
        }
        next.sort_unstable();
        next.dedup();
        states = next;
        if states.is_empty() {
            break;
        }
    }
    states
}

#[cfg(test)]
mod tests;
