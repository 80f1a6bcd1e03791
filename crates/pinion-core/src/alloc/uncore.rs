//! Uncore-cache alignment (`prefer-align-cpus-by-uncorecache`, spec §3).

use super::index::{Kind, REL_UNCORE_CORE};
use super::state::State;

impl State<'_> {
    /// `takeUncoreCache`: for each uncore cache in the frozen order, take
    /// whole free caches while a cache's worth is needed, then try to fit the
    /// whole remaining request into this cache.
    ///
    /// `takeFullUncore` runs at most once here: after one walk every fully
    /// free cache left is larger than what was needed, the need only shrinks
    /// and partial takes never free a cache, so kubelet's repeated walks are
    /// no-ops.
    pub(super) fn take_uncore_caches(&mut self) {
        let per_uncore = self.ix.cpus_per_uncore;
        let mut full_done = false;
        for uncore in self.sort_uncores() {
            if !full_done && self.needs_at_least(per_uncore) {
                self.take_full(Kind::Uncore);
                full_done = true;
            }
            if self.satisfied() {
                return;
            }
            self.take_partial_uncore(uncore as usize);
            if self.satisfied() {
                return;
            }
        }
    }

    /// `takePartialUncore`: the free CPUs of the lowest-id cores that still
    /// have a free CPU in this cache, `ceil(needed / CPUsPerCore)` cores;
    /// with SMT and an odd need the highest CPU is dropped; taken only when
    /// the count matches the need exactly.
    fn take_partial_uncore(&mut self, uncore: usize) {
        let ix = self.ix;
        let per_core = ix.cpus_per_core.max(1);
        let needed = usize::try_from(self.needed).unwrap_or(0);
        let cores_needed = needed.div_ceil(per_core);
        let rel = &ix.rels[REL_UNCORE_CORE];
        let children = rel.children.get(uncore);
        let pairs = rel.pairs.get(uncore);
        let cores = children
            .iter()
            .zip(pairs)
            .filter(|&(&core, &pair)| self.child_has_free(REL_UNCORE_CORE, core, pair))
            .map(|(&core, _)| core as usize)
            .take(cores_needed);
        // Count first: the CPUs are gathered only when they match the need.
        let free: usize = cores.clone().map(|c| self.free_count(Kind::Core, c)).sum();
        let drop_last = needed % 2 != 0 && per_core > 1 && free > needed;
        if free - usize::from(drop_last) != needed {
            return;
        }
        let mut cpus: Vec<u32> = Vec::with_capacity(free);
        for core in cores {
            let members = ix.members[Kind::Core as usize].get(core);
            cpus.extend(members.iter().filter(|&&p| self.is_free(p as usize)));
        }
        cpus.sort_unstable();
        if drop_last {
            cpus.pop();
        }
        for pos in cpus {
            self.take_cpu(pos as usize);
        }
    }
}
