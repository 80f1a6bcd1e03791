//! The NUMA-combination search of kubelet's distributed allocator
//! (`takeByTopologyNUMADistributed`, spec §4), over per-NUMA free counts.
//!
//! Two deliberate differences from kubelet, both where kubelet misbehaves
//! (see `docs/decisions/001-distributed-allocation-never-hangs.md`):
//! * a remainder subset whose round-robin hand-out cannot place the whole
//!   remainder in groups is skipped (kubelet loops forever on it), and a
//!   combination with a remainder but no usable subset is never chosen;
//! * at most [`MAX_COMBINATIONS`] NUMA combinations and remainder subsets are
//!   evaluated per allocation; when the budget runs out the best combination
//!   found so far is used, or, without one, the packed fallback.
//!
//! kubelet's Go slice aliasing (the stored best combination ends up holding
//! the last combination visited with the same prefix) is reproduced, see
//! [`go_shared_prefix`], unless the aliased choice cannot be allocated.

use std::cell::Cell;
use std::ops::ControlFlow;

/// Upper bound on the NUMA-node combinations plus remainder subsets one
/// distributed allocation evaluates. A full search costs at most 3^N
/// evaluations for N NUMA nodes with free CPUs, so it is never cut with up to
/// 11 of them (3^11 = 177 147); it bounds the search on many-NUMA machines
/// (C(64, 32) combinations would never finish).
pub const MAX_COMBINATIONS: usize = 200_000;

/// What the search needs to know, in kubelet's sorted NUMA order.
pub(super) struct SearchInput<'a> {
    /// Free CPUs of each available NUMA node, in sorted order.
    pub free: &'a [usize],
    /// The socket of each such NUMA node when all its CPUs are on one socket.
    pub socket: &'a [Option<u32>],
    pub request: usize,
    pub group_size: usize,
    pub align_by_socket: bool,
    /// CPUs of the whole topology.
    pub total_cpus: usize,
    /// NUMA nodes (with CPUs) of the whole topology.
    pub total_numas: usize,
}

/// The chosen NUMA nodes (positions in the sorted order) and the subset of
/// them that receives the remainder groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Choice {
    pub combo: Vec<usize>,
    pub remainder: Vec<usize>,
}

struct Best {
    balance: f64,
    in_one_socket: bool,
    combo: Stored,
    remainder: Stored,
}

impl Best {
    /// kubelet's choice (the aliased slices) when it can complete the
    /// allocation, else the combination it scored.
    fn into_choice(self, input: &SearchInput) -> Choice {
        let aliased = Choice {
            combo: self.combo.aliased,
            remainder: self.remainder.aliased,
        };
        if feasible(input, &aliased) {
            return aliased;
        }
        Choice {
            combo: self.combo.chosen,
            remainder: self.remainder.chosen,
        }
    }
}

/// kubelet's `rangeNUMANodesNeededToSatisfy` (request ≥ 1, group ≥ 1).
fn numa_range(input: &SearchInput) -> (usize, usize) {
    let g = input.group_size;
    let groups = (input.total_cpus.max(1) - 1) / g + 1;
    let per_numa = (groups - 1) / input.total_numas.max(1) + 1;
    let needed = (input.request - 1) / g + 1;
    let min = (needed - 1) / per_numa + 1;
    (min, needed.min(input.free.len()))
}

/// kubelet's balance score: population standard deviation, with the mean and
/// the result rounded to 3 decimals.
fn balance(values: &[usize]) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let len = values.len() as f64;
    #[allow(clippy::cast_precision_loss)]
    let mean = values.iter().map(|&v| v as f64).sum::<f64>() / len;
    let mean = (mean * 1000.0).round() / 1000.0;
    #[allow(clippy::cast_precision_loss)]
    let var = values
        .iter()
        .map(|&v| (v as f64 - mean) * (v as f64 - mean))
        .sum::<f64>()
        / len;
    (var.sqrt() * 1000.0).round() / 1000.0
}

/// Calls `visit` on every `k`-combination of `0..len` in lexicographic order
/// while the budget lasts. Returns `Break` when `visit` broke or the budget
/// ran out (then `budget` is 0).
fn combinations(
    len: usize,
    k: usize,
    budget: &Cell<usize>,
    mut visit: impl FnMut(&[usize]) -> ControlFlow<()>,
) -> ControlFlow<()> {
    if k == 0 || k > len {
        return ControlFlow::Continue(());
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        if budget.get() == 0 {
            return ControlFlow::Break(());
        }
        budget.set(budget.get() - 1);
        visit(&idx)?;
        let Some(i) = (0..k).rev().find(|&i| idx[i] < len - k + i) else {
            return ControlFlow::Continue(());
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// Hands `remainder` CPUs out round-robin over `subset` in groups, as
/// kubelet's scoring loop does; `None` when a full pass places nothing
/// (kubelet spins forever there).
fn simulate(after: &mut [usize], subset: &[usize], mut remainder: usize, g: usize) -> Option<()> {
    while remainder > 0 {
        let mut progress = false;
        for &m in subset {
            if remainder == 0 {
                break;
            }
            if after[m] < g {
                continue;
            }
            after[m] -= g;
            remainder = remainder.saturating_sub(g);
            progress = true;
        }
        if !progress {
            return None;
        }
    }
    Some(())
}

/// Length of the prefix whose leaves share one backing array in kubelet's
/// recursive `iterateCombinations` (Go `append` grows capacity 0→1→2→4→8…,
/// and a slice with spare capacity is extended in place): for `k`
/// elements the array is allocated at the largest length in {0, 1, 2, 4,
/// 8, …} below `k`, so every combination sharing the first `that + 1`
/// elements is written into the same array. A combination kubelet stores
/// (`bestCombo = combo`) therefore ends up holding the **last** combination
/// visited with the same prefix. Spec gap; read from upstream
/// `cpu_assignment.go`.
fn go_shared_prefix(k: usize) -> usize {
    let (mut at, mut next) = (0, 1);
    while next < k {
        at = next;
        next = if next < 2 { next + 1 } else { next * 2 };
    }
    at + 1
}

/// A stored combination: the one chosen and what kubelet's aliased slice
/// holds at the end of the enumeration.
#[derive(Debug, Clone)]
struct Stored {
    chosen: Vec<usize>,
    aliased: Vec<usize>,
}

impl Stored {
    fn new(combo: &[usize]) -> Self {
        Stored {
            chosen: combo.to_vec(),
            aliased: combo.to_vec(),
        }
    }

    /// Records a visited combination (call for every leaf, in order).
    fn visit(&mut self, combo: &[usize]) {
        let p = go_shared_prefix(combo.len());
        if combo.len() == self.aliased.len() && combo[..p] == self.aliased[..p] {
            self.aliased.copy_from_slice(combo);
        }
    }
}

/// The best remainder subset of `candidates` and its score.
fn best_remainder(
    after: &[usize],
    candidates: &[usize],
    remainder: usize,
    g: usize,
    budget: &Cell<usize>,
) -> Option<(f64, Stored)> {
    let mut best: Option<(f64, Stored)> = None;
    let mut scratch = after.to_vec();
    let mut subset = Vec::with_capacity(candidates.len());
    for size in (1..=candidates.len()).rev() {
        let mut current: Option<(f64, Stored)> = None;
        let flow = combinations(candidates.len(), size, budget, |pos| {
            subset.clear();
            subset.extend(pos.iter().map(|&p| candidates[p]));
            if let Some((_, stored)) = &mut current {
                stored.visit(&subset);
            }
            if subset.iter().map(|&m| after[m]).sum::<usize>() < remainder {
                return ControlFlow::Continue(());
            }
            scratch.copy_from_slice(after);
            if simulate(&mut scratch, &subset, remainder, g).is_some() {
                let score = balance(&scratch);
                let to_beat = current.as_ref().or(best.as_ref()).map(|(b, _)| *b);
                if !matches!(to_beat, Some(b) if score >= b) {
                    current = Some((score, Stored::new(&subset)));
                }
            }
            ControlFlow::Continue(())
        });
        if current.is_some() {
            best = current;
        }
        if flow.is_break() {
            break;
        }
    }
    best
}

/// Scores one combination: `None` when it cannot take the request.
fn score(input: &SearchInput, combo: &[usize], budget: &Cell<usize>) -> Option<(f64, Stored)> {
    let (n, g) = (input.request, input.group_size);
    let free = input.free;
    if combo.iter().map(|&m| free[m]).sum::<usize>() < n {
        return None;
    }
    if combo.iter().map(|&m| free[m] / g * g).sum::<usize>() < n {
        return None;
    }
    let mut distribution = n / combo.len() / g * g;
    if input.align_by_socket {
        for &m in combo {
            distribution = distribution.min(free[m] / g * g);
        }
    }
    if combo.iter().any(|&m| free[m] < distribution) {
        return None;
    }
    let mut after = free.to_vec();
    for &m in combo {
        after[m] -= distribution;
    }
    let remainder = n - distribution * combo.len();
    if remainder == 0 {
        return Some((balance(&after), Stored::new(&[])));
    }
    let candidates: Vec<usize> = combo.iter().copied().filter(|&m| after[m] >= g).collect();
    best_remainder(&after, &candidates, remainder, g, budget)
}

fn in_one_socket(input: &SearchInput, combo: &[usize]) -> bool {
    let first = input.socket[combo[0]];
    first.is_some() && combo.iter().all(|&m| input.socket[m] == first)
}

/// The NUMA combination kubelet would choose (with the differences in the
/// module documentation), or `None` for "fall back to packed".
pub(super) fn search(input: &SearchInput) -> Option<Choice> {
    if input.request == 0 || input.group_size == 0 || input.free.is_empty() {
        return None;
    }
    let (min, max) = numa_range(input);
    let budget = Cell::new(MAX_COMBINATIONS);
    for k in min..=max {
        let mut best: Option<Best> = None;
        let flow = combinations(input.free.len(), k, &budget, |combo| {
            if let Some(b) = &mut best {
                b.combo.visit(combo);
                if b.balance == 0.0 && (!input.align_by_socket || b.in_one_socket) {
                    return ControlFlow::Break(());
                }
            }
            let Some((balance, remainder)) = score(input, combo, &budget) else {
                return ControlFlow::Continue(());
            };
            let same = input.align_by_socket && in_one_socket(input, combo);
            let mut better = !matches!(&best, Some(b) if balance >= b.balance);
            if let Some(b) = &best {
                if input.align_by_socket && same != b.in_one_socket {
                    better = same;
                }
            }
            if better {
                best = Some(Best {
                    balance,
                    in_one_socket: same,
                    combo: Stored::new(combo),
                    remainder,
                });
            }
            ControlFlow::Continue(())
        });
        if let Some(b) = best {
            return Some(b.into_choice(input));
        }
        if flow.is_break() && budget.get() == 0 {
            return None;
        }
    }
    None
}

/// Whether allocating `choice` hands out the whole request: every member
/// can give the share, and the remainder round-robin makes progress.
fn feasible(input: &SearchInput, choice: &Choice) -> bool {
    let (n, g) = (input.request, input.group_size);
    let share = distribution(input.free, choice, n, g);
    let mut after = input.free.to_vec();
    for &m in &choice.combo {
        after[m] -= share;
    }
    let remainder = n.saturating_sub(share * choice.combo.len());
    simulate(&mut after, &choice.remainder, remainder, g).is_some()
}

/// The per-member share handed out first: `request / k` rounded down to the
/// group size, never more than a member's free CPUs rounded down likewise.
pub(super) fn distribution(free: &[usize], choice: &Choice, request: usize, g: usize) -> usize {
    let mut d = request / choice.combo.len() / g * g;
    for &m in &choice.combo {
        d = d.min(free[m] / g * g);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_rounds_like_kubelet() {
        assert!((balance(&[1, 2]) - 0.5).abs() < 1e-12);
        assert!((balance(&[1, 1, 1, 3]) - 0.866).abs() < 1e-12);
        assert!(balance(&[4, 4, 4]).abs() < 1e-12);
    }

    #[test]
    fn combinations_are_lexicographic() {
        let mut seen = Vec::new();
        let budget = Cell::new(100);
        let flow = combinations(4, 2, &budget, |c| {
            seen.push(c.to_vec());
            ControlFlow::Continue(())
        });
        assert!(flow.is_continue());
        assert_eq!(
            seen,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
        assert_eq!(budget.get(), 94);
    }

    #[test]
    fn combinations_stop_when_budget_runs_out() {
        let mut count = 0;
        let budget = Cell::new(3);
        let flow = combinations(10, 3, &budget, |_| {
            count += 1;
            ControlFlow::Continue(())
        });
        assert!(flow.is_break());
        assert_eq!((count, budget.get()), (3, 0));
    }

    #[test]
    fn go_arrays_are_shared_below_the_last_growth() {
        let prefixes: Vec<usize> = (1..=10).map(go_shared_prefix).collect();
        assert_eq!(prefixes, vec![1, 2, 3, 3, 5, 5, 5, 5, 9, 9]);
    }

    #[test]
    fn stored_combination_holds_the_last_leaf_with_its_prefix() {
        let mut stored = Stored::new(&[0, 1, 2, 3]);
        stored.visit(&[0, 1, 2, 4]);
        stored.visit(&[0, 1, 2, 5]);
        stored.visit(&[0, 1, 3, 4]);
        assert_eq!(stored.chosen, vec![0, 1, 2, 3]);
        assert_eq!(stored.aliased, vec![0, 1, 2, 5]);
        let mut fresh = Stored::new(&[0, 1, 2]);
        fresh.visit(&[0, 1, 3]);
        assert_eq!(fresh.aliased, vec![0, 1, 2]);
    }

    /// What a Go program with the same recursive `append` enumerator keeps
    /// when it stores the first of the 10-choose-k combinations and lets the
    /// enumeration run to the end (measured with Go 1.19; slice growth below
    /// 256 elements is the same in the Go versions kubelet is built with).
    #[test]
    fn stored_combination_matches_go_after_a_full_enumeration() {
        let go_kept: [&[usize]; 9] = [
            &[0],
            &[0, 1],
            &[0, 1, 2],
            &[0, 1, 2, 9],
            &[0, 1, 2, 3, 4],
            &[0, 1, 2, 3, 4, 9],
            &[0, 1, 2, 3, 4, 8, 9],
            &[0, 1, 2, 3, 4, 7, 8, 9],
            &[0, 1, 2, 3, 4, 5, 6, 7, 8],
        ];
        for (k, want) in (1..=9).zip(go_kept) {
            let mut stored: Option<Stored> = None;
            let budget = Cell::new(usize::MAX);
            let _ = combinations(10, k, &budget, |c| {
                match &mut stored {
                    Some(s) => s.visit(c),
                    None => stored = Some(Stored::new(c)),
                }
                ControlFlow::Continue(())
            });
            let stored = stored.expect("a combination");
            assert_eq!(stored.aliased, want, "k = {k}");
            assert_eq!(stored.chosen, (0..k).collect::<Vec<_>>());
        }
    }

    #[test]
    fn simulation_without_progress_is_rejected() {
        // Two nodes left with 3 free CPUs each, remainder 6 in groups of 2:
        // kubelet loops forever here.
        let mut after = vec![3, 3];
        assert_eq!(simulate(&mut after, &[0, 1], 6, 2), None);
        let mut after = vec![3, 3];
        assert_eq!(simulate(&mut after, &[0, 1], 4, 2), Some(()));
        assert_eq!(after, vec![1, 1]);
    }
}
