//! A plain transcription of kubelet's allocator over `CpuSet`s (spec §2–§4):
//! every list is rebuilt from set operations, like kubelet does. Kept as the
//! test oracle of the optimised allocator (`packed.rs`, `index.rs`).
//!
//! Fullness follows kubelet since PR #140498: an entity counts as free when
//! its free CPUs equal its own size (cores and sockets included). Guard
//! shared with the optimised version (kubelet is only different where its
//! result is invalid): every frozen list keeps only the first occurrence of
//! an entity or CPU.

use std::collections::BTreeSet;

use super::distributed::{self, Choice, SearchInput};
use super::entities::{dedup, ids, members, Kind};
use super::{Algorithm, AllocError, CpuSortingStrategy};
use crate::cpuset::CpuSet;
use crate::topology::Topology;

struct Acc<'t> {
    topo: &'t Topology,
    free: CpuSet,
    result: CpuSet,
    needed: i64,
    numa_first: bool,
    spread: bool,
}

impl<'t> Acc<'t> {
    fn new(topo: &'t Topology, available: &CpuSet, n: usize, strategy: CpuSortingStrategy) -> Self {
        Acc {
            topo,
            free: available.intersection(topo.all_cpus()),
            result: CpuSet::new(),
            needed: i64::try_from(n).unwrap_or(i64::MAX),
            numa_first: topo.num_sockets() >= topo.num_numa_nodes(),
            spread: strategy == CpuSortingStrategy::Spread,
        }
    }

    fn satisfied(&self) -> bool {
        self.needed < 1
    }

    fn needs_at_least(&self, k: usize) -> bool {
        self.needed >= i64::try_from(k).unwrap_or(i64::MAX)
    }

    fn take(&mut self, cpus: &CpuSet) {
        self.result.union_with(cpus);
        self.free.difference_with(cpus);
        self.needed -= i64::try_from(cpus.len()).unwrap_or(i64::MAX);
    }

    fn free_count(&self, kind: Kind, id: u32) -> usize {
        self.free.intersection_len(&members(self.topo, kind, id))
    }

    /// Distinct `kind` ids of the free CPUs inside `within` (all when None).
    fn ids_in(&self, kind: Kind, within: Option<(Kind, u32)>) -> Vec<u32> {
        ids(self.topo, &self.free, kind, within)
            .into_iter()
            .collect()
    }

    fn sorted(&self, kind: Kind, mut ids: Vec<u32>) -> Vec<u32> {
        ids.sort_by_key(|&id| (self.free_count(kind, id), id));
        ids
    }

    fn nested(&self, parent: Kind, parents: &[u32], kind: Kind) -> Vec<u32> {
        let mut out = Vec::new();
        for &p in parents {
            out.extend(self.sorted(kind, self.ids_in(kind, Some((parent, p)))));
        }
        out
    }

    fn sort_numas(&self) -> Vec<u32> {
        if self.numa_first {
            self.sorted(Kind::Numa, self.ids_in(Kind::Numa, None))
        } else {
            self.nested(Kind::Socket, &self.sort_sockets(), Kind::Numa)
        }
    }

    fn sort_sockets(&self) -> Vec<u32> {
        if self.numa_first {
            self.nested(Kind::Numa, &self.sort_numas(), Kind::Socket)
        } else {
            self.sorted(Kind::Socket, self.ids_in(Kind::Socket, None))
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

    fn cpu_order(&self) -> Vec<u32> {
        let (kind, parents) = if self.spread {
            (Kind::Socket, self.sort_sockets())
        } else {
            (Kind::Core, self.sort_cores())
        };
        let mut out = Vec::new();
        for p in parents {
            out.extend(self.free.intersection(&members(self.topo, kind, p)).iter());
        }
        dedup(out)
    }

    fn free_entities(&self, kind: Kind, sorted: Vec<u32>) -> Vec<u32> {
        dedup(sorted)
            .into_iter()
            .filter(|&id| self.free_count(kind, id) == members(self.topo, kind, id).len())
            .collect()
    }

    fn take_full(&mut self, kind: Kind, list: &[u32]) {
        for &id in list {
            let cpus = members(self.topo, kind, id);
            if self.needs_at_least(cpus.len()) {
                self.take(&cpus);
            }
        }
    }

    fn take_full_level(&mut self, kind: Kind) {
        let sorted = match kind {
            Kind::Numa => self.sort_numas(),
            Kind::Socket => self.sort_sockets(),
            Kind::Core => self.sort_cores(),
            Kind::Uncore => self.sort_uncores(),
        };
        let list = self.free_entities(kind, sorted);
        self.take_full(kind, &list);
    }

    fn take_partial_uncore(&mut self, uncore: u32) {
        let per_core = self.topo.cpus_per_core().max(1);
        let needed = usize::try_from(self.needed).unwrap_or(0);
        let cores_needed = needed.div_ceil(per_core);
        let cores: Vec<u32> = self.ids_in(Kind::Core, Some((Kind::Uncore, uncore)));
        let mut cpus = CpuSet::new();
        for &core in cores.iter().take(cores_needed) {
            cpus.union_with(
                &self
                    .free
                    .intersection(&members(self.topo, Kind::Core, core)),
            );
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

    fn take_uncore_caches(&mut self) {
        let per_uncore = self.topo.cpus_per_uncore();
        for uncore in self.sort_uncores() {
            if self.needs_at_least(per_uncore) {
                self.take_full_level(Kind::Uncore);
            }
            if self.satisfied() {
                return;
            }
            self.take_partial_uncore(uncore);
            if self.satisfied() {
                return;
            }
        }
    }

    fn take_remaining(&mut self) {
        for cpu in self.cpu_order() {
            let mut one = CpuSet::new();
            one.insert(cpu);
            self.take(&one);
            if self.satisfied() {
                return;
            }
        }
    }
}

fn not_enough(n: usize, available: &CpuSet) -> AllocError {
    AllocError::NotEnoughCpus {
        requested: n,
        available: available.len(),
    }
}

fn packed(
    topo: &Topology,
    available: &CpuSet,
    n: usize,
    strategy: CpuSortingStrategy,
    prefer_uncore: bool,
) -> Result<CpuSet, AllocError> {
    let mut acc = Acc::new(topo, available, n, strategy);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if n > acc.free.len() {
        return Err(not_enough(n, available));
    }
    let (first, second) = if acc.numa_first {
        (Kind::Numa, Kind::Socket)
    } else {
        (Kind::Socket, Kind::Numa)
    };
    acc.take_full_level(first);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    acc.take_full_level(second);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if prefer_uncore {
        acc.take_uncore_caches();
        if acc.satisfied() {
            return Ok(acc.result);
        }
    }
    if !acc.spread {
        acc.take_full_level(Kind::Core);
        if acc.satisfied() {
            return Ok(acc.result);
        }
    }
    acc.take_remaining();
    if acc.satisfied() {
        return Ok(acc.result);
    }
    Err(AllocError::Failed)
}

/// The socket of a NUMA node when all its CPUs are on one socket.
fn numa_socket(topo: &Topology, numa: u32) -> Option<u32> {
    let sockets: BTreeSet<u32> = topo
        .cpus()
        .iter()
        .filter(|c| c.numa == numa)
        .map(|c| c.socket)
        .collect();
    (sockets.len() == 1)
        .then(|| sockets.first().copied())
        .flatten()
}

fn distributed(
    topo: &Topology,
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
        return packed(topo, available, n, strategy, false);
    }
    let mut acc = Acc::new(topo, available, n, strategy);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if n > acc.free.len() {
        return Err(not_enough(n, available));
    }
    let numas = dedup(acc.sort_numas());
    let free: Vec<usize> = numas
        .iter()
        .map(|&m| acc.free_count(Kind::Numa, m))
        .collect();
    let socket: Vec<Option<u32>> = numas.iter().map(|&m| numa_socket(topo, m)).collect();
    let input = SearchInput {
        free: &free,
        socket: &socket,
        request: n,
        group_size,
        align_by_socket,
        total_cpus: topo.num_cpus(),
        total_numas: topo.num_numa_nodes(),
    };
    let Some(choice) = distributed::search(&input) else {
        return packed(topo, available, n, strategy, false);
    };
    allocate_choice(&mut acc, &numas, &free, &choice, group_size, strategy)
}

fn take_from_numa(acc: &mut Acc, numa: u32, count: usize, strategy: CpuSortingStrategy) {
    let pool = acc.free.intersection(&members(acc.topo, Kind::Numa, numa));
    let cpus = packed(acc.topo, &pool, count, strategy, false).unwrap_or_default();
    acc.take(&cpus);
}

fn allocate_choice(
    acc: &mut Acc,
    numas: &[u32],
    free: &[usize],
    choice: &Choice,
    g: usize,
    strategy: CpuSortingStrategy,
) -> Result<CpuSet, AllocError> {
    let n = usize::try_from(acc.needed).unwrap_or(0);
    let share = distributed::distribution(free, choice, n, g);
    for &m in &choice.combo {
        take_from_numa(acc, numas[m], share, strategy);
    }
    let mut remainder = n - share * choice.combo.len();
    while remainder > 0 {
        let mut progress = false;
        for &m in &choice.remainder {
            if remainder == 0 {
                break;
            }
            if acc.free_count(Kind::Numa, numas[m]) < g {
                continue;
            }
            take_from_numa(acc, numas[m], g, strategy);
            remainder = remainder.saturating_sub(g);
            progress = true;
        }
        if !progress {
            break;
        }
    }
    match acc.needed {
        0 => Ok(std::mem::take(&mut acc.result)),
        r if r > 0 => Err(AllocError::AccountingNotEnough { remaining: r }),
        r => Err(AllocError::AccountingTooMany { remaining: r }),
    }
}

/// Entry point of the transcription.
pub(super) fn take(
    topo: &Topology,
    available: &CpuSet,
    n: usize,
    algorithm: Algorithm,
) -> Result<CpuSet, AllocError> {
    match algorithm {
        Algorithm::Packed {
            strategy,
            prefer_uncore,
        } => packed(topo, available, n, strategy, prefer_uncore),
        Algorithm::Distributed {
            group_size,
            strategy,
            align_by_socket,
        } => distributed(topo, available, n, group_size, strategy, align_by_socket),
    }
}
