//! The topology entities the set-based allocators walk (NUMA nodes,
//! sockets, cores, uncore caches) and their CPUs: shared by the resize
//! variants (`resize.rs`) and the test oracle (`reference.rs`).

use std::collections::BTreeSet;

use crate::cpuset::CpuSet;
use crate::topology::{CpuInfo, Topology};

/// A kind of topology entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Numa,
    Socket,
    Core,
    Uncore,
}

impl Kind {
    /// The id of the `self` entity holding `cpu`.
    pub(super) fn of(self, cpu: &CpuInfo) -> u32 {
        match self {
            Kind::Numa => cpu.numa,
            Kind::Socket => cpu.socket,
            Kind::Core => cpu.core,
            Kind::Uncore => cpu.uncore,
        }
    }
}

/// The CPUs of entity `id` of `kind` (none for an unknown id).
pub(super) fn members(topo: &Topology, kind: Kind, id: u32) -> CpuSet {
    let map = match kind {
        Kind::Numa => topo.numa_cpus(),
        Kind::Socket => topo.sockets(),
        Kind::Core => topo.cores(),
        Kind::Uncore => topo.uncores(),
    };
    map.get(&id).cloned().unwrap_or_default()
}

/// `list` with only the first occurrence of each id (the guard both
/// allocators keep where kubelet's frozen lists repeat an entity).
pub(super) fn dedup(list: Vec<u32>) -> Vec<u32> {
    let mut seen = BTreeSet::new();
    list.into_iter().filter(|id| seen.insert(*id)).collect()
}

/// Distinct `kind` ids of `cpus`, restricted to the CPUs of `within`.
pub(super) fn ids(
    topo: &Topology,
    cpus: &CpuSet,
    kind: Kind,
    within: Option<(Kind, u32)>,
) -> BTreeSet<u32> {
    let scope = match within {
        Some((k, id)) => cpus.intersection(&members(topo, k, id)),
        None => cpus.clone(),
    };
    scope
        .iter()
        .filter_map(|cpu| topo.cpu(cpu).map(|c| kind.of(c)))
        .collect()
}
