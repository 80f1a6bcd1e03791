//! The allocator variants kubelet uses to resize a container's exclusive
//! CPUs in place (KEP-5554, gate `InPlacePodVerticalScalingExclusiveCPUs`,
//! kubernetes/kubernetes PR #140629: `takeByTopologyNUMAPackedForResize`
//! and `takeByTopologyNUMADistributedForResize`, read from
//! `esotsal/kubernetes@338ac0c3719590d2989c72fa02241f6c1df03239`
//! `pkg/kubelet/cm/cpumanager/cpu_assignment.go`).
//!
//! Both start from the container's CPUs: growing keeps all of them
//! (`current`) and adds more; shrinking keeps the promised ones
//! (`must_keep`) and chooses the rest among `current`. Every sort order
//! puts the NUMA nodes, sockets, uncore caches and cores that already hold
//! the container's CPUs first (each part sorted by free CPUs, as kubelet's
//! usual order), so new CPUs land next to the old ones. An entity is
//! "full" when its CPUs are all free or already the container's.
//!
//! This is a plain set-based transcription (resizes are rare; no dense
//! index). Two guards where kubelet misbehaves, as in the usual allocator:
//! frozen lists keep only the first occurrence of an entity or CPU, and the
//! remainder hand-outs of the distributed variant stop when a pass places
//! nothing (kubelet spins forever there).
use super::entities::{dedup, ids, members, Kind};
use super::{AllocError, CpuSortingStrategy};
use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// Errors of the resize variants (kubelet's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResizeAllocError {
    #[error(transparent)]
    Alloc(#[from] AllocError),
    #[error(
        "requested CPUs to be retained {must_keep} are not a subset of reusable CPUs {current}"
    )]
    RetainedNotCurrent { must_keep: String, current: String },
}

struct Acc<'t> {
    topo: &'t Topology,
    free: CpuSet,
    result: CpuSet,
    needed: i64,
    numa_first: bool,
    spread: bool,
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl<'t> Acc<'t> {
    /// kubelet `newCPUAccumulatorForResize`.
    fn new(
        topo: &'t Topology,
        available: &CpuSet,
        n: usize,
        strategy: CpuSortingStrategy,
        current: &CpuSet,
        must_keep: &CpuSet,
    ) -> Self {
        let mut acc = Acc {
            topo,
            free: available.intersection(topo.all_cpus()),
            result: CpuSet::new(),
            needed: to_i64(n),
            numa_first: topo.num_sockets() >= topo.num_numa_nodes(),
            spread: strategy == CpuSortingStrategy::Spread,
        };
        if !current.is_empty() {
            if n > current.len() || n == current.len() {
                acc.take(current);
            } else if !must_keep.is_empty() {
                acc.take(must_keep);
            }
        }
        acc
    }

    fn take(&mut self, cpus: &CpuSet) {
        self.result.union_with(cpus);
        self.free.difference_with(&self.result);
        self.needed -= to_i64(cpus.len());
    }

    fn satisfied(&self) -> bool {
        self.needed < 1
    }

    fn needs_at_least(&self, k: usize) -> bool {
        self.needed >= to_i64(k)
    }

    fn free_in(&self, kind: Kind, id: u32) -> CpuSet {
        self.free.intersection(&members(self.topo, kind, id))
    }

    /// Sorts by free CPUs, then id (kubelet's comparator).
    fn sorted(&self, kind: Kind, ids: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut list: Vec<u32> = ids.into_iter().collect();
        list.sort_by_key(|&id| (self.free_in(kind, id).len(), id));
        list
    }

    /// The ids of `kind` with free CPUs (inside `within`): first those also
    /// holding result CPUs, then the others, each part sorted.
    fn allocated_first(&self, kind: Kind, within: Option<(Kind, u32)>) -> Vec<u32> {
        let available = ids(self.topo, &self.free, kind, within);
        let allocated = ids(self.topo, &self.result, kind, within);
        let mut out = self.sorted(kind, available.intersection(&allocated).copied());
        out.extend(self.sorted(kind, available.difference(&allocated).copied()));
        out
    }

    fn nested(&self, parent: Kind, parents: &[u32], kind: Kind) -> Vec<u32> {
        let mut out = Vec::new();
        for &p in parents {
            out.extend(self.allocated_first(kind, Some((parent, p))));
        }
        out
    }

    fn sort_numas(&self) -> Vec<u32> {
        if self.numa_first {
            self.allocated_first(Kind::Numa, None)
        } else {
            self.nested(Kind::Socket, &self.sort_sockets(), Kind::Numa)
        }
    }

    fn sort_sockets(&self) -> Vec<u32> {
        if self.numa_first {
            self.nested(Kind::Numa, &self.sort_numas(), Kind::Socket)
        } else {
            self.allocated_first(Kind::Socket, None)
        }
    }

    fn sort_cores(&self) -> Vec<u32> {
        if self.numa_first {
            self.nested(Kind::Socket, &self.sort_sockets(), Kind::Core)
        } else {
            self.nested(Kind::Numa, &self.sort_numas(), Kind::Core)
        }
    }

    fn sort_uncores(&self) -> Vec<u32> {
        self.nested(Kind::Numa, &self.sort_numas(), Kind::Uncore)
    }

    fn sorted_of(&self, kind: Kind) -> Vec<u32> {
        dedup(match kind {
            Kind::Numa => self.sort_numas(),
            Kind::Socket => self.sort_sockets(),
            Kind::Core => self.sort_cores(),
            Kind::Uncore => self.sort_uncores(),
        })
    }

    /// `takeFull<X>ForResize`: every entity whose CPUs are all free or the
    /// container's gives its free CPUs when they fit.
    fn take_full(&mut self, kind: Kind) {
        for id in self.sorted_of(kind) {
            let all = members(self.topo, kind, id);
            if self.result.intersection_len(&all) + self.free.intersection_len(&all) != all.len() {
                continue;
            }
            let free = self.free_in(kind, id);
            if self.needs_at_least(free.len()) {
                self.take(&free);
            }
        }
    }

    /// kubelet `takePartialUncore` (unchanged for resize).
    fn take_partial_uncore(&mut self, uncore: u32) {
        let per_core = self.topo.cpus_per_core().max(1);
        let needed = usize::try_from(self.needed).unwrap_or(0);
        let cores_needed = needed.div_ceil(per_core);
        let cores = ids(
            self.topo,
            &self.free,
            Kind::Core,
            Some((Kind::Uncore, uncore)),
        );
        let mut cpus = CpuSet::new();
        for &core in cores.iter().take(cores_needed) {
            cpus.union_with(&self.free_in(Kind::Core, core));
        }
        if needed % 2 != 0 && per_core > 1 && cpus.len() > needed {
            if let Some(last) = cpus.last() {
                cpus.remove(last);
            }
        }
        if cpus.len() == needed {
            self.take(&cpus);
        }
    }

    /// kubelet `takeUncoreCacheForResize`.
    fn take_uncore_caches(&mut self) {
        self.take_full(Kind::Uncore);
        if self.satisfied() {
            return;
        }
        for uncore in self.sorted_of(Kind::Uncore) {
            self.take_partial_uncore(uncore);
            if self.satisfied() {
                return;
            }
        }
    }

    /// kubelet `takeRemainingCPUsForResize`.
    fn take_remaining(&mut self) {
        let (kind, parents) = if self.spread {
            (Kind::Socket, self.sorted_of(Kind::Socket))
        } else {
            (Kind::Core, self.sorted_of(Kind::Core))
        };
        let mut order = Vec::new();
        for p in parents {
            order.extend(self.free_in(kind, p).iter());
        }
        for cpu in dedup(order) {
            self.take(&CpuSet::from_iter([cpu]));
            if self.satisfied() {
                return;
            }
        }
    }
}

fn not_enough(n: usize, available: &CpuSet) -> ResizeAllocError {
    AllocError::NotEnoughCpus {
        requested: n,
        available: available.len(),
    }
    .into()
}

fn check_retained(current: &CpuSet, must_keep: &CpuSet) -> Result<(), ResizeAllocError> {
    if !current.is_empty() && !must_keep.is_empty() && !must_keep.is_subset(current) {
        return Err(ResizeAllocError::RetainedNotCurrent {
            must_keep: must_keep.to_string(),
            current: current.to_string(),
        });
    }
    Ok(())
}

/// kubelet `takeByTopologyNUMAPackedForResize`: `n` CPUs of `available`,
/// starting from the container's `current` CPUs (kept when growing) or its
/// `must_keep` CPUs (kept when shrinking).
pub fn take_packed_for_resize(
    topo: &Topology,
    available: &CpuSet,
    n: usize,
    strategy: CpuSortingStrategy,
    prefer_uncore: bool,
    current: &CpuSet,
    must_keep: &CpuSet,
) -> Result<CpuSet, ResizeAllocError> {
    check_retained(current, must_keep)?;
    let mut acc = Acc::new(topo, available, n, strategy, current, must_keep);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if acc.needed > to_i64(acc.free.len()) {
        return Err(not_enough(n, available));
    }
    let (first, second) = if acc.numa_first {
        (Kind::Numa, Kind::Socket)
    } else {
        (Kind::Socket, Kind::Numa)
    };
    for step in [first, second] {
        acc.take_full(step);
        if acc.satisfied() {
            return Ok(acc.result);
        }
    }
    if prefer_uncore {
        acc.take_uncore_caches();
        if acc.satisfied() {
            return Ok(acc.result);
        }
    }
    if !acc.spread {
        acc.take_full(Kind::Core);
        if acc.satisfied() {
            return Ok(acc.result);
        }
    }
    acc.take_remaining();
    if acc.satisfied() {
        return Ok(acc.result);
    }
    Err(AllocError::Failed.into())
}

/// kubelet's balance score (population standard deviation, mean and result
/// rounded to 3 decimals), over possibly negative counts.
fn balance(values: &[i64]) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let len = values.len().max(1) as f64;
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

/// Every `k`-combination of `items` in lexicographic order.
fn combinations(items: &[u32], k: usize) -> Vec<Vec<u32>> {
    let n = items.len();
    if k == 0 || k > n {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        out.push(idx.iter().map(|&i| items[i]).collect());
        let Some(i) = (0..k).rev().find(|&i| idx[i] < n - k + i) else {
            return out;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// The chosen NUMA nodes, the remainder subset and kubelet's count of
/// members already holding a full share plus one group.
struct Best {
    combo: Vec<u32>,
    remainder: Vec<u32>,
    extra_groups: usize,
}

/// The NUMA search of kubelet's `takeByTopologyNUMADistributedForResize`
/// for combinations of `k` nodes.
fn search_k(acc: &Acc, numas: &[u32], n: usize, g: usize, k: usize) -> Option<Best> {
    let result_numas = ids(acc.topo, &acc.result, Kind::Numa, None);
    let free_of = |m: u32| acc.free_in(Kind::Numa, m).len();
    let held_of = |m: u32| {
        acc.result
            .intersection_len(&members(acc.topo, Kind::Numa, m))
    };
    let mut best_balance = f64::MAX;
    let mut best: Option<(Vec<u32>, Vec<u32>)> = None;
    // kubelet declares this counter once per k, so it accumulates over the
    // combinations visited (reproduced).
    let mut extra_groups = 0usize;
    for combo in combinations(numas, k) {
        if best_balance == 0.0 {
            break;
        }
        if !result_numas.iter().all(|m| combo.contains(m)) {
            continue;
        }
        let free_total: usize = combo.iter().map(|&m| free_of(m)).sum();
        if free_total + acc.result.len() < n {
            continue;
        }
        let groups: usize = combo.iter().map(|&m| (free_of(m) + held_of(m)) / g).sum();
        if groups * g < n {
            continue;
        }
        let distribution = n / combo.len() / g * g;
        let mut fits = true;
        for &m in &combo {
            let held = held_of(m);
            if free_of(m) + held < distribution || held > distribution + g {
                fits = false;
                break;
            }
            if held == distribution + g {
                extra_groups += 1;
            }
        }
        if !fits {
            continue;
        }
        let mut after: Vec<i64> = numas.iter().map(|&m| to_i64(free_of(m))).collect();
        for &m in &combo {
            let pos = numas.iter().position(|&x| x == m).unwrap_or(0);
            let held = held_of(m);
            if held == distribution + g {
                after[pos] = 0;
            } else {
                after[pos] -= to_i64(distribution) - to_i64(held);
            }
        }
        let remainder = to_i64(n) - to_i64(distribution * combo.len()) - to_i64(extra_groups * g);
        let position = |m: u32| numas.iter().position(|&x| x == m).unwrap_or(0);
        let candidates: Vec<u32> = combo
            .iter()
            .copied()
            .filter(|&m| after[position(m)] >= to_i64(g))
            .collect();
        let mut local_balance = f64::MAX;
        let mut local_remainder = Vec::new();
        if remainder == 0 {
            local_balance = balance(&after);
        }
        let mut size = candidates.len();
        while remainder > 0 && size >= 1 {
            for subset in combinations(&candidates, size) {
                let mut left = after.clone();
                let sum: i64 = subset.iter().map(|&m| left[position(m)]).sum();
                if sum < remainder {
                    continue;
                }
                let mut rest = remainder;
                let mut stuck = false;
                while rest > 0 {
                    let mut progress = false;
                    for &m in &subset {
                        if rest == 0 {
                            break;
                        }
                        let slot = &mut left[position(m)];
                        if *slot < to_i64(g) {
                            continue;
                        }
                        *slot -= to_i64(g);
                        rest -= to_i64(g);
                        progress = true;
                    }
                    if !progress {
                        stuck = true;
                        break;
                    }
                }
                if stuck {
                    continue;
                }
                let score = balance(&left);
                if score < local_balance {
                    local_balance = score;
                    local_remainder = subset;
                }
            }
            size -= 1;
        }
        if local_balance < best_balance {
            best_balance = local_balance;
            best = Some((combo, local_remainder));
        }
    }
    best.map(|(combo, remainder)| Best {
        combo,
        remainder,
        extra_groups,
    })
}

/// kubelet `takeByTopologyNUMADistributedForResize`.
#[allow(clippy::too_many_arguments)]
pub fn take_distributed_for_resize(
    topo: &Topology,
    available: &CpuSet,
    n: usize,
    group_size: usize,
    strategy: CpuSortingStrategy,
    current: &CpuSet,
    must_keep: &CpuSet,
) -> Result<CpuSet, ResizeAllocError> {
    if group_size == 0 {
        return Err(AllocError::ZeroGroupSize.into());
    }
    let g = group_size;
    if !n.is_multiple_of(g) {
        return take_packed_for_resize(topo, available, n, strategy, false, current, must_keep);
    }
    check_retained(current, must_keep)?;
    let mut acc = Acc::new(topo, available, n, strategy, current, must_keep);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if acc.needed > to_i64(acc.free.len()) {
        return Err(not_enough(n, available));
    }
    let numas = acc.sorted_of(Kind::Numa);
    let needed = usize::try_from(acc.needed).unwrap_or(0);
    let total_numas = topo.num_numa_nodes().max(1);
    let groups = (topo.num_cpus().max(1) - 1) / g + 1;
    let per_numa = (groups - 1) / total_numas + 1;
    let groups_needed = (needed.max(1) - 1) / g + 1;
    let min =
        ((groups_needed - 1) / per_numa + 1).max(ids(topo, &acc.result, Kind::Numa, None).len());
    let max = groups_needed.min(ids(topo, &acc.free, Kind::Numa, None).len());
    for k in min..=max {
        let Some(best) = search_k(&acc, &numas, n, g, k) else {
            continue;
        };
        let distribution = n / best.combo.len() / g * g;
        for &m in &best.combo {
            let held = acc.result.intersection(&members(topo, Kind::Numa, m));
            let pool = acc.free_in(Kind::Numa, m);
            let cpus = take_packed_for_resize(
                topo,
                &pool,
                distribution,
                strategy,
                false,
                &held,
                &CpuSet::new(),
            )
            .unwrap_or_default();
            acc.take(&cpus.difference(&held));
        }
        let mut remainder =
            to_i64(n) - to_i64(distribution * best.combo.len()) - to_i64(best.extra_groups * g);
        while remainder > 0 {
            let mut progress = false;
            for &m in &best.remainder {
                if remainder == 0 {
                    break;
                }
                if acc.free_in(Kind::Numa, m).len() < g {
                    continue;
                }
                let held = acc.result.intersection(&members(topo, Kind::Numa, m));
                let pool = acc.free_in(Kind::Numa, m);
                let cpus = take_packed_for_resize(
                    topo,
                    &pool,
                    held.len() + g,
                    strategy,
                    false,
                    &held,
                    &CpuSet::new(),
                )
                .unwrap_or_default();
                acc.take(&cpus.difference(&held));
                remainder -= to_i64(g);
                progress = true;
            }
            if !progress {
                break;
            }
        }
        return match acc.needed {
            0 => Ok(acc.result),
            r if r > 0 => Err(AllocError::AccountingNotEnough { remaining: r }.into()),
            r => Err(AllocError::AccountingTooMany { remaining: r }.into()),
        };
    }
    take_packed_for_resize(topo, available, n, strategy, false, current, must_keep)
}
