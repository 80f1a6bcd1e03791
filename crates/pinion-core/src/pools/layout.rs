//! From pool sizes to CPU sets: the pure layout step.
//!
//! Each shared pool keeps what it had (minus CPUs no longer available),
//! then pools that are too large give CPUs back and pools that are too small
//! take free ones; what is left is the reclaim pool. Every move is NUMA-aware:
//! * a pool grows on the allowed NUMA node where it has the fewest CPUs
//!   (lowest node id on ties), taking first a free sibling thread of a core
//!   it already uses, else the lowest free CPU id — so pools stay balanced
//!   over nodes and made of whole cores;
//! * a pool shrinks on the node where it has the most CPUs (highest node id
//!   on ties), giving back first a CPU whose core it holds least of, highest
//!   CPU id on ties.
//!
//! NUMA-bound pools grow before the others (they have fewer choices). The
//! sizes given must fit (see [`super::Pools`]); a NUMA-bound pool whose
//! nodes have too few free CPUs gets fewer than asked.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::topology::Topology;

use super::PoolPlan;

/// One shared pool as the layout sees it.
#[derive(Debug, Clone, Copy)]
pub struct LayoutPool<'a> {
    pub name: &'a str,
    /// The CPUs it should have.
    pub size: u32,
    /// NUMA nodes it is bound to (`None` = any).
    pub numa: Option<&'a CpuSet>,
}

/// Lays out `pools` (in the order given, normally by name) on `available`
/// CPUs, starting from `previous` (pool name → CPUs). Pools are disjoint,
/// inside `available`, and reclaim is every available CPU no pool holds.
#[must_use]
pub fn layout(
    topology: &Topology,
    available: &CpuSet,
    pools: &[LayoutPool<'_>],
    previous: &BTreeMap<String, CpuSet>,
) -> PoolPlan {
    let allowed: Vec<CpuSet> = pools
        .iter()
        .map(|pool| allowed_cpus(topology, available, pool.numa))
        .collect();
    let mut claimed = CpuSet::new();
    let mut sets: Vec<CpuSet> = Vec::with_capacity(pools.len());
    for (pool, allowed) in pools.iter().zip(&allowed) {
        let mut kept = previous
            .get(pool.name)
            .map(|cpus| cpus.intersection(allowed))
            .unwrap_or_default();
        kept.difference_with(&claimed);
        let size = pool.size as usize;
        let extra = kept.len().saturating_sub(size);
        if extra > 0 {
            shrink(topology, &mut kept, extra);
        }
        claimed.union_with(&kept);
        sets.push(kept);
    }
    let mut free = available.difference(&claimed);
    make_room_for_bound_pools(pools, &allowed, &mut sets, &mut free);
    let bound_first = (0..pools.len())
        .filter(|&i| pools[i].numa.is_some())
        .chain((0..pools.len()).filter(|&i| pools[i].numa.is_none()));
    for i in bound_first.collect::<Vec<_>>() {
        let size = pools[i].size as usize;
        let missing = size.saturating_sub(sets[i].len());
        if missing > 0 {
            grow(topology, &mut sets[i], &mut free, &allowed[i], missing);
        }
    }
    PoolPlan {
        shared: pools
            .iter()
            .zip(sets)
            .map(|(pool, cpus)| (pool.name.to_string(), cpus))
            .collect(),
        reclaim: free,
    }
}

/// A NUMA-bound pool that cannot grow on its nodes because unbound pools
/// hold the CPUs there takes them back (the unbound pools then grow
/// elsewhere): CPUs of the unbound pool holding the most on those nodes,
/// highest CPU id first.
fn make_room_for_bound_pools(
    pools: &[LayoutPool<'_>],
    allowed: &[CpuSet],
    sets: &mut [CpuSet],
    free: &mut CpuSet,
) {
    for i in (0..pools.len()).filter(|&i| pools[i].numa.is_some()) {
        let missing = (pools[i].size as usize).saturating_sub(sets[i].len());
        let mut short = missing.saturating_sub(free.intersection_len(&allowed[i]));
        while short > 0 {
            let donor = (0..pools.len())
                .filter(|&j| pools[j].numa.is_none())
                .map(|j| (sets[j].intersection_len(&allowed[i]), j))
                .filter(|(n, _)| *n > 0)
                .max();
            let Some((_, j)) = donor else { break };
            let Some(cpu) = sets[j].intersection(&allowed[i]).last() else {
                break;
            };
            sets[j].remove(cpu);
            free.insert(cpu);
            short -= 1;
        }
    }
}

/// The available CPUs of `numa` nodes (all available CPUs when unbound).
#[must_use]
pub fn allowed_cpus(topology: &Topology, available: &CpuSet, numa: Option<&CpuSet>) -> CpuSet {
    let Some(nodes) = numa else {
        return available.clone();
    };
    let mut cpus = CpuSet::new();
    for node in nodes {
        if let Some(node_cpus) = topology.numa_cpus().get(&node) {
            cpus.union_with(node_cpus);
        }
    }
    cpus.intersection(available)
}

/// Adds up to `count` CPUs of `free ∩ allowed` to `set`.
fn grow(topology: &Topology, set: &mut CpuSet, free: &mut CpuSet, allowed: &CpuSet, count: usize) {
    let nodes: Vec<(u32, CpuSet)> = topology
        .numa_cpus()
        .iter()
        .map(|(&id, cpus)| (id, cpus.intersection(allowed)))
        .filter(|(_, cpus)| !cpus.is_empty())
        .collect();
    let mut counts: Vec<usize> = nodes
        .iter()
        .map(|(_, cpus)| cpus.intersection_len(set))
        .collect();
    for _ in 0..count {
        let mut best: Option<(usize, usize)> = None; // (count, index)
        let mut candidates = CpuSet::new();
        for (index, (_, node_cpus)) in nodes.iter().enumerate() {
            if best.is_some_and(|(c, _)| counts[index] >= c) {
                continue;
            }
            let here = node_cpus.intersection(free);
            if !here.is_empty() {
                best = Some((counts[index], index));
                candidates = here;
            }
        }
        let Some((_, index)) = best else {
            return;
        };
        let Some(cpu) = pick_to_add(topology, set, &candidates) else {
            return;
        };
        set.insert(cpu);
        free.remove(cpu);
        counts[index] += 1;
    }
}

/// A sibling of a core `set` already uses, else the lowest candidate.
fn pick_to_add(topology: &Topology, set: &CpuSet, candidates: &CpuSet) -> Option<u32> {
    candidates
        .iter()
        .find(|&cpu| core_of(topology, cpu).is_some_and(|core| !core.is_disjoint(set)))
        .or_else(|| candidates.first())
}

/// Removes `count` CPUs from `set`.
fn shrink(topology: &Topology, set: &mut CpuSet, count: usize) {
    for _ in 0..count {
        let node = topology
            .numa_cpus()
            .iter()
            .map(|(&id, cpus)| (cpus.intersection_len(set), id, cpus))
            .filter(|(n, _, _)| *n > 0)
            .max_by_key(|(n, id, _)| (*n, *id));
        let on_node = match node {
            Some((_, _, cpus)) => cpus.intersection(set),
            None => set.clone(),
        };
        let victim = on_node
            .iter()
            .map(|cpu| {
                let held = core_of(topology, cpu).map_or(0, |core| core.intersection_len(set));
                (held, std::cmp::Reverse(cpu))
            })
            .min()
            .map(|(_, std::cmp::Reverse(cpu))| cpu);
        match victim {
            Some(cpu) => {
                set.remove(cpu);
            }
            None => return,
        }
    }
}

fn core_of(topology: &Topology, cpu: u32) -> Option<&CpuSet> {
    let core = topology.cpu(cpu)?.core;
    topology.cores().get(&core)
}
