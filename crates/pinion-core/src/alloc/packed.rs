//! kubelet's packed allocator (`takeByTopologyNUMAPacked`, spec §2) and the
//! allocation phase of the distributed one (§4), over [`State`].

use std::ops::ControlFlow;

use super::distributed::{self, Choice, SearchInput};
use super::index::{AllocIndex, Kind, REL_CORES};
use super::state::State;
use super::{AllocError, CpuSortingStrategy};
use crate::cpuset::CpuSet;

impl State<'_> {
    /// Whether entity `e` is entirely free (all its CPUs, counted on the
    /// entity itself: kubelet since PR #140498) and fits in what is still
    /// needed.
    fn takeable(&self, kind: Kind, e: usize) -> bool {
        let free = self.free_count(kind, e);
        free == self.ix.size(kind, e) && self.needs_at_least(free)
    }

    /// `takeFull<X>`: walks the free entities in sorted order (frozen) and
    /// takes each one whose size is at most what is still needed. Skipped
    /// outright when no entity could be taken (the walk would be a no-op).
    pub(super) fn take_full(&mut self, kind: Kind) {
        if !self.any_takeable(kind) {
            return;
        }
        if kind == Kind::Core && !self.ix.irregular {
            let smallest = self.ix.min_size[Kind::Core as usize];
            self.walk_cores(|state, core| {
                if state.takeable(Kind::Core, core) {
                    state.take_entity(Kind::Core, core);
                }
                if state.needs_at_least(smallest) {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            });
            return;
        }
        for e in self.free_entities(kind) {
            let e = e as usize;
            if self.needs_at_least(self.ix.size(kind, e)) {
                self.take_entity(kind, e);
            }
        }
    }

    /// Visits the cores in kubelet's core order. On regular topologies the
    /// order is produced parent by parent (cores of different parents are
    /// disjoint, so taking from one parent cannot reorder another's cores:
    /// identical to kubelet's list frozen up front, without sorting cores
    /// that are never reached).
    fn walk_cores(&mut self, mut visit: impl FnMut(&mut Self, usize) -> ControlFlow<()>) {
        let parents = self.second_level();
        let mut cores = Vec::new();
        for p in parents {
            self.sorted_children(REL_CORES, p, &mut cores);
            for &core in &cores {
                if visit(self, core as usize).is_break() {
                    return;
                }
            }
        }
    }

    /// `takeRemainingCPUs`: single CPUs in kubelet's CPU order.
    fn take_remaining(&mut self) {
        if self.ix.irregular {
            for pos in self.cpu_order() {
                self.take_cpu(pos as usize);
                if self.satisfied() {
                    return;
                }
            }
            return;
        }
        let ix = self.ix;
        let take_free = |state: &mut Self, kind: Kind, e: usize| {
            for &pos in ix.members[kind as usize].get(e) {
                if state.is_free(pos as usize) {
                    state.take_cpu(pos as usize);
                    if state.satisfied() {
                        return ControlFlow::Break(());
                    }
                }
            }
            ControlFlow::Continue(())
        };
        if self.spread {
            for socket in self.sort_sockets() {
                if take_free(self, Kind::Socket, socket as usize).is_break() {
                    return;
                }
            }
        } else {
            self.walk_cores(|state, core| take_free(state, Kind::Core, core));
        }
    }

    /// The packed steps after the early checks; true when satisfied.
    fn run_packed(&mut self, prefer_uncore: bool) -> bool {
        let (first, second) = if self.ix.numa_first {
            (Kind::Numa, Kind::Socket)
        } else {
            (Kind::Socket, Kind::Numa)
        };
        self.take_full(first);
        if self.satisfied() {
            return true;
        }
        self.take_full(second);
        if self.satisfied() {
            return true;
        }
        if prefer_uncore {
            self.take_uncore_caches();
            if self.satisfied() {
                return true;
            }
        }
        if !self.spread {
            self.take_full(Kind::Core);
            if self.satisfied() {
                return true;
            }
        }
        self.take_remaining();
        self.satisfied()
    }
}

fn not_enough(n: usize, available: &CpuSet) -> AllocError {
    AllocError::NotEnoughCpus {
        requested: n,
        available: available.len(),
    }
}

/// `takeByTopologyNUMAPacked`.
pub(super) fn take_packed(
    ix: &AllocIndex,
    available: &CpuSet,
    n: usize,
    strategy: CpuSortingStrategy,
    prefer_uncore: bool,
) -> Result<CpuSet, AllocError> {
    let mut state = State::from_set(ix, available, n, strategy == CpuSortingStrategy::Spread);
    if state.satisfied() {
        return Ok(state.result());
    }
    if n > state.free_total {
        return Err(not_enough(n, available));
    }
    if state.run_packed(prefer_uncore) {
        Ok(state.result())
    } else {
        Err(AllocError::Failed)
    }
}

/// `takeByTopologyNUMADistributed`.
pub(super) fn take_distributed(
    ix: &AllocIndex,
    available: &CpuSet,
    n: usize,
    group_size: usize,
    strategy: CpuSortingStrategy,
    align_by_socket: bool,
) -> Result<CpuSet, AllocError> {
    if group_size == 0 {
        return Err(AllocError::ZeroGroupSize);
    }
    let leftover = n % group_size;
    if leftover != 0 {
        return take_packed(ix, available, n, strategy, false);
    }
    let spread = strategy == CpuSortingStrategy::Spread;
    let mut state = State::from_set(ix, available, n, spread);
    if state.satisfied() {
        return Ok(state.result());
    }
    if n > state.free_total {
        return Err(not_enough(n, available));
    }
    let mut numas = state.sort_numas();
    if ix.irregular {
        super::state::dedup(&mut numas, ix.count(Kind::Numa));
    }
    let free: Vec<usize> = numas
        .iter()
        .map(|&m| state.free_count(Kind::Numa, m as usize))
        .collect();
    let socket: Vec<Option<u32>> = numas.iter().map(|&m| ix.numa_socket[m as usize]).collect();
    let input = SearchInput {
        free: &free,
        socket: &socket,
        request: n,
        group_size,
        align_by_socket,
        total_cpus: ix.num_cpus(),
        total_numas: ix.count(Kind::Numa),
    };
    let Some(choice) = distributed::search(&input) else {
        return take_packed(ix, available, n, strategy, false);
    };
    allocate_choice(&mut state, &numas, &free, &choice, group_size)
}

/// Takes `count` CPUs from NUMA node `numa` with the packed allocator run on
/// that node's free CPUs alone (kubelet ignores its errors: nothing taken).
fn take_from_numa(state: &mut State, numa: usize, count: usize) {
    let ix = state.ix;
    let members = ix.members[Kind::Numa as usize].get(numa);
    if count > 0 && count == state.free_count(Kind::Numa, numa) {
        // Any allocator asked for every CPU of its pool returns the pool.
        for &pos in members {
            if state.is_free(pos as usize) {
                state.take_cpu(pos as usize);
            }
        }
        return;
    }
    let pool = members
        .iter()
        .map(|&p| p as usize)
        .filter(|&p| state.is_free(p));
    let mut local = State::new(ix, pool, count, state.spread);
    if count == 0 || count > local.free_total || !local.run_packed(false) {
        return;
    }
    for &pos in members {
        if local.was_taken(pos as usize) {
            state.take_cpu(pos as usize);
        }
    }
}

fn allocate_choice(
    state: &mut State,
    numas: &[u32],
    free: &[usize],
    choice: &Choice,
    g: usize,
) -> Result<CpuSet, AllocError> {
    let n = usize::try_from(state.needed).unwrap_or(0);
    let share = distributed::distribution(free, choice, n, g);
    for &m in &choice.combo {
        take_from_numa(state, numas[m] as usize, share);
    }
    let mut remainder = n - share * choice.combo.len();
    while remainder > 0 {
        let mut progress = false;
        for &m in &choice.remainder {
            if remainder == 0 {
                break;
            }
            if state.free_count(Kind::Numa, numas[m] as usize) < g {
                continue;
            }
            take_from_numa(state, numas[m] as usize, g);
            remainder = remainder.saturating_sub(g);
            progress = true;
        }
        if !progress {
            break;
        }
    }
    match state.needed {
        0 => Ok(state.result()),
        r if r > 0 => Err(AllocError::AccountingNotEnough { remaining: r }),
        r => Err(AllocError::AccountingTooMany { remaining: r }),
    }
}
