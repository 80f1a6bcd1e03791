//! The allocator's working state over an [`AllocIndex`]: which CPUs are still
//! free, free counts per entity and per (parent, child) pair, the result, and
//! kubelet's sort orders (§2.2) computed from those counts. Sorting compares
//! packed `(free count, index)` integers: no set is built per comparison.

use super::index::{AllocIndex, Kind, REL_CORES, REL_LEVEL2, REL_NUMA_UNCORE};
use crate::cpuset::CpuSet;

pub(super) struct State<'i> {
    pub(super) ix: &'i AllocIndex,
    free: Vec<bool>,
    count: [Vec<u32>; 4],
    pair: [Vec<u32>; 4],
    pub(super) free_total: usize,
    /// The CPUs taken so far, as bit words indexed by CPU id (bit `i` of
    /// word `w` = CPU `64*w + i`); [`State::result`] turns them into a set.
    taken: Vec<u64>,
    pub(super) needed: i64,
    pub(super) spread: bool,
}

fn to_i64(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Sorts entity indices by (free count, index) — kubelet's comparator, as
/// dense indices ascend with ids. In place, no allocation.
fn sort_by_count(list: &mut [u32], count: &[u32]) {
    list.sort_unstable_by_key(|&e| (u64::from(count[e as usize]) << 32) | u64::from(e));
}

/// Widest range of free counts for which [`sort_tail_by_count`] buckets
/// instead of sorting (cores have a few CPUs).
const MAX_BUCKETED_SPAN: u32 = 8;

/// Sorts `out[start..]`, which holds entity indices in ascending order, by
/// (free count, index). Equal counts need nothing; when the counts span a
/// small range, one stable pass per count value (appending behind the list,
/// then moving back) gives the comparison sort's order in linear time.
fn sort_tail_by_count(out: &mut Vec<u32>, start: usize, count: &[u32]) {
    debug_assert!(out[start..].windows(2).all(|w| w[0] < w[1]));
    let end = out.len();
    let (mut min, mut max) = (u32::MAX, 0);
    for &e in &out[start..] {
        min = min.min(count[e as usize]);
        max = max.max(count[e as usize]);
    }
    if min >= max {
        return;
    }
    if max - min > MAX_BUCKETED_SPAN || end - start <= 8 {
        sort_by_count(&mut out[start..], count);
        return;
    }
    for value in min..=max {
        for i in start..end {
            let e = out[i];
            if count[e as usize] == value {
                out.push(e);
            }
        }
    }
    out.copy_within(end.., start);
    out.truncate(end);
}

/// Words of a bit set holding every CPU id of the index.
fn id_words(ix: &AllocIndex) -> usize {
    ix.cpu_ids.last().map_or(0, |&id| id as usize / 64 + 1)
}

/// Keeps the first occurrence of every entry.
pub(super) fn dedup(list: &mut Vec<u32>, universe: usize) {
    let mut seen = vec![false; universe];
    list.retain(|&e| !std::mem::replace(&mut seen[e as usize], true));
}

impl<'i> State<'i> {
    /// A state whose free CPUs are the given positions.
    pub(super) fn new(
        ix: &'i AllocIndex,
        free_positions: impl Iterator<Item = usize>,
        n: usize,
        spread: bool,
    ) -> Self {
        let mut state = State {
            ix,
            free: vec![false; ix.num_cpus()],
            count: std::array::from_fn(|k| vec![0; ix.ids[k].len()]),
            pair: std::array::from_fn(|r| vec![0; ix.full_pair[r].len()]),
            free_total: 0,
            taken: vec![0; id_words(ix)],
            needed: to_i64(n),
            spread,
        };
        state.mark_free(free_positions);
        state
    }

    /// Marks the given positions free and counts them in their entities
    /// (one tight loop over local slices; pairs only on irregular
    /// topologies).
    fn mark_free(&mut self, positions: impl Iterator<Item = usize>) {
        let ix = self.ix;
        let [numa, socket, core, uncore] = &mut self.count;
        let (numa, socket, core, uncore) = (
            &mut numa[..],
            &mut socket[..],
            &mut core[..],
            &mut uncore[..],
        );
        let free = &mut self.free[..];
        for pos in positions {
            if free[pos] {
                continue;
            }
            free[pos] = true;
            self.free_total += 1;
            let [a, b, c, d] = ix.ent[pos];
            numa[a as usize] += 1;
            socket[b as usize] += 1;
            core[c as usize] += 1;
            uncore[d as usize] += 1;
        }
        if ix.irregular {
            for (pos, _) in free.iter().enumerate().filter(|(_, &f)| f) {
                for r in 0..4 {
                    let p = ix.rels[r].cpu_pair[pos] as usize;
                    self.pair[r][p] += 1;
                }
            }
        }
    }

    /// A state over `available` (CPUs the topology lacks are ignored).
    pub(super) fn from_set(ix: &'i AllocIndex, available: &CpuSet, n: usize, spread: bool) -> Self {
        if !ix.all.is_subset(available) {
            let positions = available.iter().filter_map(|id| ix.position(id));
            return State::new(ix, positions, n, spread);
        }
        State {
            ix,
            free: vec![true; ix.num_cpus()],
            count: ix.full_count.clone(),
            pair: ix.full_pair.clone(),
            free_total: ix.num_cpus(),
            taken: vec![0; id_words(ix)],
            needed: to_i64(n),
            spread,
        }
    }

    /// The CPUs taken so far.
    pub(super) fn result(&self) -> CpuSet {
        CpuSet::from_words(&self.taken)
    }

    /// Whether the CPU at `pos` was taken by this state.
    pub(super) fn was_taken(&self, pos: usize) -> bool {
        let id = self.ix.cpu_ids[pos];
        self.taken[(id / 64) as usize] & (1 << (id % 64)) != 0
    }

    /// Uncounts a taken CPU from its entities (and pairs).
    fn count_taken(&mut self, pos: usize) {
        let [numa, socket, core, uncore] = &mut self.count;
        let [a, b, c, d] = self.ix.ent[pos];
        numa[a as usize] -= 1;
        socket[b as usize] -= 1;
        core[c as usize] -= 1;
        uncore[d as usize] -= 1;
        if self.ix.irregular {
            for r in 0..4 {
                let p = self.ix.rels[r].cpu_pair[pos] as usize;
                self.pair[r][p] -= 1;
            }
        }
    }

    /// Whether `child` (of relation `rel`, pair `pair`) has a free CPU in
    /// its parent. On regular topologies a child has one parent, so its own
    /// free count answers.
    pub(super) fn child_has_free(&self, rel: usize, child: u32, pair: u32) -> bool {
        if self.ix.irregular {
            self.pair[rel][pair as usize] > 0
        } else {
            self.count[self.ix.rels[rel].child][child as usize] > 0
        }
    }

    pub(super) fn is_free(&self, pos: usize) -> bool {
        self.free[pos]
    }

    pub(super) fn satisfied(&self) -> bool {
        self.needed < 1
    }

    pub(super) fn needs_at_least(&self, k: usize) -> bool {
        self.needed >= to_i64(k)
    }

    pub(super) fn free_count(&self, kind: Kind, e: usize) -> usize {
        self.count[kind as usize][e] as usize
    }

    /// Whether some entity of `kind` is entirely free and fits in what is
    /// still needed (one pass over the counts against the idle ones).
    pub(super) fn any_takeable(&self, kind: Kind) -> bool {
        let k = kind as usize;
        let needed = self.needed;
        self.count[k]
            .iter()
            .zip(&self.ix.full_count[k])
            .any(|(&free, &size)| free == size && i64::from(free) <= needed)
    }

    /// Takes one CPU (must be free).
    pub(super) fn take_cpu(&mut self, pos: usize) {
        debug_assert!(self.free[pos]);
        self.free[pos] = false;
        self.free_total -= 1;
        self.count_taken(pos);
        let id = self.ix.cpu_ids[pos];
        self.taken[(id / 64) as usize] |= 1 << (id % 64);
        self.needed -= 1;
    }

    /// Takes every CPU of an entity (all must be free).
    pub(super) fn take_entity(&mut self, kind: Kind, e: usize) {
        let ix = self.ix;
        for &pos in ix.members[kind as usize].get(e) {
            self.take_cpu(pos as usize);
        }
    }

    /// Entities of `kind` with a free CPU, sorted.
    fn sorted_top(&self, kind: Kind) -> Vec<u32> {
        let count = &self.count[kind as usize];
        let mut list: Vec<u32> = (0..count.len())
            .filter(|&e| count[e] > 0)
            .map(|e| u32::try_from(e).unwrap_or(u32::MAX))
            .collect();
        sort_by_count(&mut list, count);
        list
    }

    /// For each parent in order, its children with free CPUs in it, sorted.
    fn nested(&self, rel: usize, parents: &[u32]) -> Vec<u32> {
        let relation = &self.ix.rels[rel];
        let count = &self.count[relation.child];
        // Room for every child and the bucket passes of the sort.
        let mut out = Vec::with_capacity(2 * count.len());
        for &p in parents {
            let start = out.len();
            let children = relation.children.get(p as usize);
            let pairs = relation.pairs.get(p as usize);
            for (&c, &pr) in children.iter().zip(pairs) {
                if self.child_has_free(rel, c, pr) {
                    out.push(c);
                }
            }
            sort_tail_by_count(&mut out, start, count);
        }
        out
    }

    pub(super) fn sort_numas(&self) -> Vec<u32> {
        if self.ix.numa_first {
            self.sorted_top(Kind::Numa)
        } else {
            self.nested(REL_LEVEL2, &self.sorted_top(Kind::Socket))
        }
    }

    pub(super) fn sort_sockets(&self) -> Vec<u32> {
        if self.ix.numa_first {
            self.nested(REL_LEVEL2, &self.sorted_top(Kind::Numa))
        } else {
            self.sorted_top(Kind::Socket)
        }
    }

    /// The children of `parent` in relation `rel` that have a free CPU in
    /// it, sorted, into `out`.
    pub(super) fn sorted_children(&self, rel: usize, parent: u32, out: &mut Vec<u32>) {
        let relation = &self.ix.rels[rel];
        out.clear();
        let children = relation.children.get(parent as usize);
        out.reserve(2 * children.len());
        let pairs = relation.pairs.get(parent as usize);
        for (&c, &pr) in children.iter().zip(pairs) {
            if self.child_has_free(rel, c, pr) {
                out.push(c);
            }
        }
        sort_tail_by_count(out, 0, &self.count[relation.child]);
    }

    /// The second level in kubelet's order: sockets (NUMA-first) or NUMA
    /// nodes (socket-first), the parents of the cores.
    pub(super) fn second_level(&self) -> Vec<u32> {
        if self.ix.numa_first {
            self.sort_sockets()
        } else {
            self.sort_numas()
        }
    }

    pub(super) fn sort_cores(&self) -> Vec<u32> {
        self.nested(REL_CORES, &self.second_level())
    }

    /// Uncore caches per NUMA node in NUMA order (kept with repeats, as
    /// kubelet walks it).
    pub(super) fn sort_uncores(&self) -> Vec<u32> {
        self.nested(REL_NUMA_UNCORE, &self.sort_numas())
    }

    pub(super) fn sorted(&self, kind: Kind) -> Vec<u32> {
        match kind {
            Kind::Numa => self.sort_numas(),
            Kind::Socket => self.sort_sockets(),
            Kind::Core => self.sort_cores(),
            Kind::Uncore => self.sort_uncores(),
        }
    }

    /// Free CPU positions in kubelet's order (packed: per core; spread: per
    /// socket, ascending id), frozen.
    pub(super) fn cpu_order(&self) -> Vec<u32> {
        let (kind, mut parents) = if self.spread {
            (Kind::Socket, self.sort_sockets())
        } else {
            (Kind::Core, self.sort_cores())
        };
        if self.ix.irregular {
            dedup(&mut parents, self.ix.count(kind));
        }
        let mut out = Vec::with_capacity(self.free_total);
        for &e in &parents {
            let members = self.ix.members[kind as usize].get(e as usize);
            out.extend(members.iter().filter(|&&pos| self.free[pos as usize]));
        }
        if self.ix.irregular {
            dedup(&mut out, self.ix.num_cpus());
        }
        out
    }

    /// Entities of `kind` whose CPUs are all free (kubelet's fullness test:
    /// the free count equals the entity's own size), in sorted order, frozen.
    pub(super) fn free_entities(&self, kind: Kind) -> Vec<u32> {
        let mut list = self.sorted(kind);
        if self.ix.irregular {
            dedup(&mut list, self.ix.count(kind));
        }
        list.retain(|&e| {
            let e = e as usize;
            self.free_count(kind, e) == self.ix.size(kind, e)
        });
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucketed sort gives the comparison sort's order for every span
    /// of counts (equal, bucketed, and too wide to bucket) and list length.
    #[test]
    fn bucketed_sort_matches_the_comparison_sort() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for span in [1, 2, 3, 9, 40] {
            for len in [0, 1, 5, 9, 17, 64, 130] {
                let count: Vec<u32> = (0..200)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        u32::try_from(seed % span).unwrap() + 1
                    })
                    .collect();
                let list: Vec<u32> = (0..len).map(|i| i * 3 % 200).collect();
                let mut sorted = list.clone();
                sorted.sort_unstable();
                let mut want = sorted.clone();
                sort_by_count(&mut want, &count);
                let mut got = vec![7, 7];
                got.extend(&sorted);
                sort_tail_by_count(&mut got, 2, &count);
                assert_eq!(&got[..2], &[7, 7], "span {span}, len {len}");
                assert_eq!(&got[2..], &want[..], "span {span}, len {len}");
            }
        }
    }
}
