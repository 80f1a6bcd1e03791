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
use super::numa_score::{NumaAllocationStrategy, NumaScores};

/// kubelet `HintMerger`: the NUMA info, the mask comparison in use and
/// `bestNonPreferredAffinityCount`.
#[derive(Debug, Clone, Copy)]
pub struct HintMerger<'a> {
    numa: &'a NumaInfo,
    closest: bool,
    best_non_preferred_count: u32,
    /// KEP-6007's tie-break, when on.
    scoring: Option<(NumaAllocationStrategy, &'a NumaScores)>,
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
            scoring: None,
        }
    }

    /// The same merger with KEP-6007's `numa-allocation-strategy`
    /// tie-break over `scores` (no change with the `none` strategy).
    #[must_use]
    pub fn with_scoring(
        mut self,
        strategy: NumaAllocationStrategy,
        scores: &'a NumaScores,
    ) -> Self {
        self.scoring = (strategy != NumaAllocationStrategy::None).then_some((strategy, scores));
        self
    }

    /// True when `candidate` is a strictly better mask than `current`:
    /// narrowest (fewer nodes, then numerically smaller) or, with
    /// `prefer-closest-numa-nodes`, kubelet's `Closest`.
    #[must_use]
    pub fn better_mask(&self, current: NumaMask, candidate: NumaMask) -> bool {
        if let Some(wins) = self.strategy_tie_break(current, candidate) {
            return wins;
        }
        if self.closest {
            self.numa.closer(current, candidate)
        } else {
            candidate.is_narrower_than(current)
        }
    }

    /// KEP-6007: between masks of as many nodes (and, with closest, the
    /// same average distance) the strategy decides by score; `None` when
    /// it is off, the masks are not structurally equal, or scores tie.
    fn strategy_tie_break(&self, current: NumaMask, candidate: NumaMask) -> Option<bool> {
        let (strategy, scores) = self.scoring?;
        if current.count() != candidate.count() {
            return None;
        }
        #[allow(clippy::float_cmp)] // kubelet compares the averages exactly
        if self.closest
            && self.numa.average_distance(current) != self.numa.average_distance(candidate)
        {
            return None;
        }
        strategy.prefers(scores.score(current), scores.score(candidate))
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
/// whose non-`None` masks are all equal. Such a permutation's mask `M` is a
/// preferred mask of some list, and every list offers `M` or a preferred
/// `None` (a "wildcard"); the all-`None` permutation exists iff every list
/// has a wildcard. Candidates come from the list without a wildcard that has
/// the fewest preferred masks, and every other such list is scanned once with
/// binary searches into the candidates: `O(Σ L log d)`, not `states × L`.
fn preferred_merges(lists: &[Vec<TopologyHint>], default: NumaMask) -> Vec<TopologyHint> {
    let strict: Vec<&Vec<TopologyHint>> = lists.iter().filter(|l| !has_wildcard(l)).collect();
    let driver = strict
        .iter()
        .min_by_key(|list| list.iter().filter(|h| h.preferred).count());
    let mut candidates: Vec<NumaMask> = match driver {
        Some(list) => preferred_masks(list).collect(),
        None => lists.iter().flat_map(|l| preferred_masks(l)).collect(),
    };
    candidates.sort_unstable();
    candidates.dedup();
    for list in &strict {
        let mut offered = vec![false; candidates.len()];
        for mask in preferred_masks(list) {
            if let Ok(index) = candidates.binary_search(&mask) {
                offered[index] = true;
            }
        }
        let mut keep = offered.into_iter();
        candidates.retain(|_| keep.next().unwrap_or(false));
    }
    if strict.is_empty() {
        candidates.push(default);
    }
    candidates
        .into_iter()
        .map(|mask| mask.and(default))
        .filter(|mask| !mask.is_empty())
        .map(|mask| TopologyHint::new(mask, true))
        .collect()
}

/// True when the list has a preferred `None` hint.
fn has_wildcard(list: &[TopologyHint]) -> bool {
    list.iter().any(|h| h.preferred && h.affinity.is_none())
}

/// The list's preferred non-`None` masks.
fn preferred_masks(list: &[TopologyHint]) -> impl Iterator<Item = NumaMask> + '_ {
    list.iter()
        .filter(|h| h.preferred)
        .filter_map(|h| h.affinity)
}

/// The distinct non-empty ANDs of all permutations (`None` masks do not
/// restrict), ascending by raw value.
fn non_preferred_merges(lists: &[Vec<TopologyHint>], default: NumaMask) -> Vec<NumaMask> {
    // Most restrictive lists first (fewest nodes, then fewest hints): the
    // states then stay small. The order changes the cost, not the result.
    let mut order: Vec<(u32, usize, &Vec<TopologyHint>)> = lists
        .iter()
        .map(|list| {
            let union = list.iter().fold(NumaMask::empty(), |acc, h| {
                acc.or(h.affinity.unwrap_or(ANY))
            });
            (union.count(), list.len(), list)
        })
        .collect();
    order.sort_by_key(|&(nodes, len, _)| (nodes, len));
    let mut states = if default.is_empty() {
        Vec::new()
    } else {
        vec![default]
    };
    for (_, _, list) in order {
        let mut next = Vec::new();
        for &state in &states {
            push_ands(state, list, &mut next);
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

/// A `None` mask: it restricts nothing.
const ANY: NumaMask = NumaMask::from_raw(u64::MAX);

/// Appends the non-empty `state AND mask` over `list`. The results are
/// subsets of `state`, so for a state of at most 6 nodes they are kept
/// distinct and the scan stops once all `2^k − 1` subsets were found.
fn push_ands(state: NumaMask, list: &[TopologyHint], out: &mut Vec<NumaMask>) {
    let ands = list
        .iter()
        .map(|h| state.and(h.affinity.unwrap_or(ANY)))
        .filter(|m| !m.is_empty());
    if state.count() > 6 {
        out.extend(ands);
        return;
    }
    let all_subsets = (1usize << state.count()) - 1;
    let start = out.len();
    for mask in ands {
        if !out[start..].contains(&mask) {
            out.push(mask);
            if out.len() - start == all_subsets {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
