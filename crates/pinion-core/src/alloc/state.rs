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
    pub(super) result: CpuSet,
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
            result: CpuSet::new(),
            needed: to_i64(n),
            spread,
        };
        for pos in free_positions {
            if !state.free[pos] {
                state.free[pos] = true;
                state.free_total += 1;
                state.adjust(pos, |c| c + 1);
            }
        }
        state
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
            result: CpuSet::new(),
            needed: to_i64(n),
            spread,
        }
    }

    fn adjust(&mut self, pos: usize, f: impl Fn(u32) -> u32) {
        let ent = self.ix.ent[pos];
        for (count, e) in self.count.iter_mut().zip(ent) {
            count[e as usize] = f(count[e as usize]);
        }
        if self.ix.irregular {
            for r in 0..4 {
                let p = self.ix.rels[r].cpu_pair[pos] as usize;
                self.pair[r][p] = f(self.pair[r][p]);
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

    /// Takes one CPU (must be free).
    pub(super) fn take_cpu(&mut self, pos: usize) {
        debug_assert!(self.free[pos]);
        self.free[pos] = false;
        self.free_total -= 1;
        self.adjust(pos, |c| c - 1);
        self.result.insert(self.ix.cpu_ids[pos]);
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
        let mut out = Vec::new();
        for &p in parents {
            let start = out.len();
            let children = relation.children.get(p as usize);
            let pairs = relation.pairs.get(p as usize);
            for (&c, &pr) in children.iter().zip(pairs) {
                if self.child_has_free(rel, c, pr) {
                    out.push(c);
                }
            }
            sort_by_count(&mut out[start..], count);
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
        let pairs = relation.pairs.get(parent as usize);
        for (&c, &pr) in children.iter().zip(pairs) {
            if self.child_has_free(rel, c, pr) {
                out.push(c);
            }
        }
        sort_by_count(out, &self.count[relation.child]);
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
