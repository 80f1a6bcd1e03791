//! Pinion's extension attributes (issue 32 item 2): per NUMA zone, which
//! request shapes still fit now without a refusal. Each figure asks the
//! allocator itself ([`take_by_topology`], [`take_whole_uncores`]) rather
//! than re-deriving its rules, so it says what an admission would get.
//!
//! The free CPUs are the static policy's: its default set without the
//! reserved CPUs and without boot-isolated ones (only containers that ask
//! for those get them). Names are documented in `docs/nrt.md`.

use crate::alloc::whole_uncore::{take_whole_uncores, uncore_is_cache};
use crate::alloc::{take_by_topology, Algorithm, AllocOptions};
use crate::cpuset::CpuSet;
use crate::topology::Topology;

use super::Attribute;

/// Zone attribute: the most free whole cores that share one uncore (L3)
/// group inside the zone.
pub const LARGEST_FREE_CORE_BLOCK: &str = "pinion.io/largestFreeCoreBlock";
/// Zone attribute: free whole cores in the zone.
pub const FREE_WHOLE_CORES: &str = "pinion.io/freeWholeCores";
/// Zone attribute: uncore (L3) groups of the zone all of whose CPUs are free.
pub const FREE_UNCORE_GROUPS: &str = "pinion.io/freeUncoreGroups";
/// Zone attribute: the largest CPU request `full-pcpus-only` accepts inside
/// the zone now.
pub const MAX_FULL_PCPUS_REQUEST: &str = "pinion.io/maxFullPcpusOnlyRequest";
/// Top-level attribute: the largest CPU request `distribute-cpus-across-numa`
/// accepts now (it spreads over zones by design, so it is the node's).
pub const MAX_DISTRIBUTED_REQUEST: &str = "pinion.io/maxDistributeCpusAcrossNumaRequest";

/// What the extension attributes are computed from.
#[derive(Debug, Clone, Copy)]
pub struct FitInput<'a> {
    /// The static policy's default set (shared pool, reserved CPUs in it).
    pub default: &'a CpuSet,
    pub reserved: &'a CpuSet,
    /// The node's allocation options (`cpuManagerPolicyOptions`).
    pub options: AllocOptions,
}

impl FitInput<'_> {
    /// CPUs a plain exclusive request may get.
    fn free(&self, topology: &Topology) -> CpuSet {
        self.default
            .difference(self.reserved)
            .difference(topology.isolated())
    }
}

/// The extension attributes of zone `node`.
#[must_use]
pub fn zone_attributes(topology: &Topology, node: u32, input: &FitInput<'_>) -> Vec<Attribute> {
    let Some(zone_cpus) = topology.numa_cpus().get(&node) else {
        return Vec::new();
    };
    let free = input.free(topology).intersection(zone_cpus);
    let whole_cores: Vec<&CpuSet> = topology
        .cores()
        .values()
        .filter(|core| core.is_subset(&free))
        .collect();
    let largest_block = topology
        .uncores()
        .values()
        .map(|group| whole_cores.iter().filter(|c| c.is_subset(group)).count())
        .max()
        .unwrap_or(0);
    let mut out = vec![
        Attribute::new(FREE_WHOLE_CORES, &whole_cores.len()),
        Attribute::new(LARGEST_FREE_CORE_BLOCK, &largest_block),
    ];
    if uncore_is_cache(topology).is_ok() {
        out.push(Attribute::new(
            FREE_UNCORE_GROUPS,
            &free_uncore_groups(topology, node, &free),
        ));
    }
    out.push(Attribute::new(
        MAX_FULL_PCPUS_REQUEST,
        &max_full_pcpus_request(topology, &free, input),
    ));
    out
}

/// The node-wide extension attributes.
#[must_use]
pub fn node_attributes(topology: &Topology, input: &FitInput<'_>) -> Vec<Attribute> {
    vec![Attribute::new(
        MAX_DISTRIBUTED_REQUEST,
        &max_distributed_request(topology, &input.free(topology), input.options),
    )]
}

/// The most whole uncore groups `take_whole_uncores` hands out from the
/// zone's free CPUs.
fn free_uncore_groups(topology: &Topology, node: u32, free: &CpuSet) -> usize {
    let group_size = topology.cpus_per_uncore().max(1);
    let most = free.len() / group_size;
    (1..=most)
        .rev()
        .find(|&groups| {
            take_whole_uncores(topology, free, groups * group_size, false, Some(&[node])).is_ok()
        })
        .unwrap_or(0)
}

/// The largest multiple of the CPUs per core that passes kubelet's
/// `full-pcpus-only` check (at most the node's free CPUs outside the
/// reserved CPUs' cores) and that the allocator fills from the zone's free
/// CPUs with whole cores only.
fn max_full_pcpus_request(topology: &Topology, zone_free: &CpuSet, input: &FitInput<'_>) -> usize {
    let per_core = topology.cpus_per_core();
    if per_core == 0 {
        return 0;
    }
    let physical = input
        .default
        .difference(&topology.core_siblings(input.reserved))
        .len();
    let options = AllocOptions {
        full_pcpus_only: true,
        ..input.options
    };
    let algorithm = Algorithm::select(&options, topology);
    let most = zone_free.len().min(physical) / per_core;
    (1..=most)
        .rev()
        .map(|cores| cores * per_core)
        .find(|&n| {
            take_by_topology(topology, zone_free, n, algorithm)
                .is_ok_and(|cpus| topology.core_siblings(&cpus) == cpus)
        })
        .unwrap_or(0)
}

/// The largest request the distributed allocator takes from `free` (in
/// groups of the CPUs per core under `full-pcpus-only`, as kubelet).
fn max_distributed_request(topology: &Topology, free: &CpuSet, options: AllocOptions) -> usize {
    let options = AllocOptions {
        distribute_cpus_across_numa: true,
        ..options
    };
    let algorithm = Algorithm::select(&options, topology);
    let step = match algorithm {
        Algorithm::Distributed { group_size, .. } => group_size.max(1),
        Algorithm::Packed { .. } => 1,
    };
    (1..=free.len() / step)
        .rev()
        .map(|groups| groups * step)
        .find(|&n| take_by_topology(topology, free, n, algorithm).is_ok())
        .unwrap_or(0)
}
