//! Whole-uncore exclusivity (Pinion's own, issue 31 item 4): a container's
//! exclusive CPUs made of whole uncore (L3) caches, every CPU of which is
//! free, so that no other container — nor the shared pool — shares those
//! caches while it runs.
//!
//! Because the container holds every CPU of its caches, "nobody else uses
//! them" follows from the exclusive sets being disjoint; and a cache one of
//! whose CPUs is already taken (or reserved) is never chosen, so a per-CPU
//! allocation blocks a later whole-cache request and vice versa.

use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// Why whole uncore caches cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WholeUncoreError {
    #[error("pinion.io/uncore: exclusive needs the machine's L3 caches, but this machine reports none (its uncore groups are {reason})")]
    NoCacheInfo { reason: &'static str },
    #[error("pinion.io/uncore: exclusive: {requested} cpus is not a whole number of uncore caches of {group_size} cpus (ask for a multiple of {group_size}, or set pinion.io/uncore-round-up: \"true\" to get {rounded})")]
    Unaligned {
        requested: usize,
        group_size: usize,
        rounded: usize,
    },
    #[error("pinion.io/uncore: exclusive: {requested} cpus need {groups_needed} whole free uncore caches of {group_size} cpus; only {groups_free} are wholly free ({free_cpus})")]
    NotEnough {
        requested: usize,
        group_size: usize,
        groups_needed: usize,
        groups_free: usize,
        free_cpus: String,
    },
}

/// A cache's sort key: outside the affinity, on a NUMA node too short of
/// free caches for the request, its node, its id (lowest first).
type Preference = (bool, bool, Option<u32>, u32);

/// Whether the topology's uncore groups are real caches: sysfs discovery
/// falls back to the socket when a machine has no L3, and then its
/// last-level cache groups (L2 or L1) differ from the uncore groups.
/// Topologies that give no `llc` (simulator shapes, corpus files) are taken
/// as they say.
pub fn uncore_is_cache(topology: &Topology) -> Result<(), WholeUncoreError> {
    let groups = |map: &std::collections::BTreeMap<u32, CpuSet>| {
        let mut sets: Vec<CpuSet> = map.values().cloned().collect();
        sets.sort_unstable_by_key(CpuSet::first);
        sets
    };
    if groups(topology.uncores()) != groups(topology.llcs()) {
        return Err(WholeUncoreError::NoCacheInfo {
            reason: "its sockets: no L3 cache was found",
        });
    }
    Ok(())
}

/// `n` CPUs as whole uncore caches all of whose CPUs are in `allowed`
/// (rounded up to whole caches with `round_up`, else refused when `n` is not
/// a whole number of caches). Caches inside `affinity`'s NUMA nodes come
/// first, then the others; ties by cache id.
pub fn take_whole_uncores(
    topology: &Topology,
    allowed: &CpuSet,
    n: usize,
    round_up: bool,
    affinity: Option<&[u32]>,
) -> Result<CpuSet, WholeUncoreError> {
    uncore_is_cache(topology)?;
    let group_size = topology.cpus_per_uncore().max(1);
    let uniform = topology.uncores().values().all(|g| g.len() == group_size);
    let rounded = n.div_ceil(group_size) * group_size;
    if uniform && rounded != n && !round_up {
        return Err(WholeUncoreError::Unaligned {
            requested: n,
            group_size,
            rounded,
        });
    }
    let inside = |cpus: &CpuSet| {
        affinity.is_some_and(|nodes| {
            topology
                .numa_nodes_of(cpus)
                .iter()
                .all(|node| nodes.contains(node))
        })
    };
    // A cache's NUMA node (its lowest), and how many free caches each node
    // has: nodes that hold the whole request come first (no straddling).
    let node_of = |cpus: &CpuSet| topology.numa_nodes_of(cpus).first().copied();
    let candidates: Vec<(u32, &CpuSet)> = topology
        .uncores()
        .iter()
        .filter(|(_, cpus)| cpus.is_subset(allowed))
        .map(|(&id, cpus)| (id, cpus))
        .collect();
    let mut per_node: std::collections::BTreeMap<Option<u32>, usize> = Default::default();
    for (_, cpus) in &candidates {
        *per_node.entry(node_of(cpus)).or_default() += 1;
    }
    let groups_needed = rounded / group_size;
    let mut free: Vec<(Preference, &CpuSet)> = candidates
        .iter()
        .map(|&(id, cpus)| {
            let node = node_of(cpus);
            let short = per_node.get(&node).copied().unwrap_or(0) < groups_needed;
            ((!inside(cpus), short, node, id), cpus)
        })
        .collect();
    free.sort_unstable_by_key(|&(key, _)| key);
    let mut taken = CpuSet::new();
    for (_, cpus) in &free {
        if taken.len() >= n {
            break;
        }
        taken.union_with(cpus);
    }
    if taken.len() < n {
        let mut free_cpus = CpuSet::new();
        for (_, cpus) in &free {
            free_cpus.union_with(cpus);
        }
        return Err(WholeUncoreError::NotEnough {
            requested: n,
            group_size,
            groups_needed,
            groups_free: free.len(),
            free_cpus: if free_cpus.is_empty() {
                "none".to_owned()
            } else {
                free_cpus.to_string()
            },
        });
    }
    if taken.len() != n && !round_up {
        return Err(WholeUncoreError::Unaligned {
            requested: n,
            group_size,
            rounded: taken.len(),
        });
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{synthetic, Shape, TopologySpec};

    fn set(text: &str) -> CpuSet {
        CpuSet::parse_list(text).unwrap()
    }

    /// 2 sockets × 8 cores, no SMT, 4 cores per L3, one NUMA node per
    /// socket: L3s 0-3, 4-7, 8-11, 12-15.
    fn machine() -> Topology {
        synthetic(Shape {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 8,
            threads_per_core: 1,
            cores_per_uncore: 4,
        })
    }

    #[test]
    fn takes_whole_free_caches_lowest_first() {
        let t = machine();
        let all = t.all_cpus().clone();
        assert_eq!(take_whole_uncores(&t, &all, 4, false, None), Ok(set("0-3")));
        assert_eq!(take_whole_uncores(&t, &all, 8, false, None), Ok(set("0-7")));
    }

    #[test]
    fn a_cache_with_a_taken_cpu_is_never_chosen() {
        let t = machine();
        let allowed = t.all_cpus().difference(&set("1,9"));
        assert_eq!(
            take_whole_uncores(&t, &allowed, 8, false, None),
            Ok(set("4-7,12-15"))
        );
    }

    #[test]
    fn affinity_nodes_come_first() {
        let t = machine();
        let all = t.all_cpus().clone();
        assert_eq!(
            take_whole_uncores(&t, &all, 4, false, Some(&[1])),
            Ok(set("8-11"))
        );
    }

    #[test]
    fn caches_of_one_numa_node_are_preferred_to_straddling() {
        let t = machine();
        // Node 0 has one free cache (4-7), node 1 two (8-11, 12-15).
        let allowed = set("4-15");
        assert_eq!(
            take_whole_uncores(&t, &allowed, 8, false, None),
            Ok(set("8-15"))
        );
    }

    #[test]
    fn unaligned_requests_are_refused_unless_rounding_up() {
        let t = machine();
        let all = t.all_cpus().clone();
        assert_eq!(
            take_whole_uncores(&t, &all, 6, false, None),
            Err(WholeUncoreError::Unaligned {
                requested: 6,
                group_size: 4,
                rounded: 8
            })
        );
        assert_eq!(take_whole_uncores(&t, &all, 6, true, None), Ok(set("0-7")));
        assert_eq!(take_whole_uncores(&t, &all, 1, true, None), Ok(set("0-3")));
    }

    #[test]
    fn too_few_free_caches_is_refused_with_what_is_free() {
        let t = machine();
        let allowed = set("0-2,4-15");
        let err = take_whole_uncores(&t, &allowed, 16, false, None).unwrap_err();
        assert_eq!(
            err,
            WholeUncoreError::NotEnough {
                requested: 16,
                group_size: 4,
                groups_needed: 4,
                groups_free: 3,
                free_cpus: "4-15".to_owned(),
            }
        );
    }

    #[test]
    fn machines_whose_uncore_is_the_socket_fallback_are_refused() {
        // Discovery's shape on a machine without L3: uncore = socket, the
        // last-level cache is a per-core-pair L2.
        let mut spec: TopologySpec = machine().spec().clone();
        for cpu in &mut spec.cpus {
            cpu.llc = Some(cpu.id / 2);
            cpu.uncore = cpu.socket;
        }
        let t = Topology::new(spec).unwrap();
        let all = t.all_cpus().clone();
        assert!(matches!(
            take_whole_uncores(&t, &all, 8, false, None),
            Err(WholeUncoreError::NoCacheInfo { .. })
        ));
    }
}
