//! Take-by-topology: which free CPUs a container gets, exactly as kubelet's
//! CPU Manager chooses them (spec `kubelet-cpumanager.md` §2–§4).
//!
//! * [`Algorithm::Packed`]: kubelet's `takeByTopologyNUMAPacked` — whole NUMA
//!   nodes / sockets first, then (optionally) uncore caches, whole cores, and
//!   single CPUs, always preferring the entities with the fewest free CPUs.
//! * [`Algorithm::Distributed`]: kubelet's `takeByTopologyNUMADistributed` —
//!   spread the request evenly over the smallest set of NUMA nodes that can
//!   take it, in groups of `group_size` CPUs.
//!
//! Differences from kubelet (all where kubelet misbehaves; see
//! `docs/decisions/001-distributed-allocation-never-hangs.md`): the
//! distributed search never hangs and is bounded on many-NUMA machines, and
//! the allocator never hands out a CPU that is not available nor returns fewer
//! CPUs than requested on irregular topologies.

pub mod case;
mod distributed;
mod entities;
mod index;
mod packed;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod reference;
pub mod resize;
mod state;
#[cfg(test)]
mod tests;
mod uncore;
pub mod whole_uncore;

use crate::cpuset::CpuSet;
use crate::topology::Topology;

pub use distributed::MAX_COMBINATIONS;
pub use index::{AllocIndex, IndexedTopology};

/// How the CPUs of the last, partially used level are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuSortingStrategy {
    /// Fill whole cores first (kubelet's default).
    Packed,
    /// Spread over cores (`distribute-cpus-across-cores`): CPUs in ascending
    /// id order per socket; the whole-core step is skipped.
    Spread,
}

/// The allocation algorithm and its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `takeByTopologyNUMAPacked`.
    Packed {
        strategy: CpuSortingStrategy,
        /// `prefer-align-cpus-by-uncorecache`.
        prefer_uncore: bool,
    },
    /// `takeByTopologyNUMADistributed`.
    Distributed {
        /// CPUs handed out together (CPUs per core under `full-pcpus-only`, else 1).
        group_size: usize,
        strategy: CpuSortingStrategy,
        /// `align-by-socket`: prefer NUMA combinations within one socket.
        align_by_socket: bool,
    },
}

/// The allocation-relevant static policy options.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocOptions {
    pub full_pcpus_only: bool,
    pub distribute_cpus_across_numa: bool,
    pub distribute_cpus_across_cores: bool,
    pub prefer_align_cpus_by_uncorecache: bool,
    pub align_by_socket: bool,
}

impl Algorithm {
    /// The algorithm kubelet's static policy (`staticPolicy.takeByTopology`)
    /// uses for these options: spread sorting under
    /// `distribute-cpus-across-cores`; the distributed allocator under
    /// `distribute-cpus-across-numa` (group size = CPUs per core under
    /// `full-pcpus-only`, else 1); otherwise packed, with uncore alignment
    /// when `prefer-align-cpus-by-uncorecache` is on.
    #[must_use]
    pub fn select(options: &AllocOptions, topology: &Topology) -> Algorithm {
        let strategy = if options.distribute_cpus_across_cores {
            CpuSortingStrategy::Spread
        } else {
            CpuSortingStrategy::Packed
        };
        if options.distribute_cpus_across_numa {
            let group_size = if options.full_pcpus_only {
                topology.cpus_per_core().max(1)
            } else {
                1
            };
            return Algorithm::Distributed {
                group_size,
                strategy,
                align_by_socket: options.align_by_socket,
            };
        }
        Algorithm::Packed {
            strategy,
            prefer_uncore: options.prefer_align_cpus_by_uncorecache,
        }
    }
}

/// Errors of [`take_by_topology`]. The texts are kubelet's (they reach users
/// as admission errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("not enough cpus available to satisfy request: requested={requested}, available={available}")]
    NotEnoughCpus { requested: usize, available: usize },
    #[error("failed to allocate cpus")]
    Failed,
    #[error("accounting error, not enough CPUs allocated, remaining: {remaining}")]
    AccountingNotEnough { remaining: i64 },
    #[error("accounting error, too many CPUs allocated, remaining: {remaining}")]
    AccountingTooMany { remaining: i64 },
    #[error("cpu group size must be at least 1, got 0")]
    ZeroGroupSize,
}

/// Chooses `n` CPUs of `available` on `topology` with `algorithm`, exactly as
/// kubelet does. CPUs of `available` that the topology does not know are
/// ignored (they still count in the "available=" figure of the error, as in
/// kubelet). Builds the topology's [`AllocIndex`] for this one call: a
/// caller allocating again and again on one topology keeps an
/// [`IndexedTopology`] and calls [`take_with_index`].
pub fn take_by_topology(
    topology: &Topology,
    available: &CpuSet,
    n: usize,
    algorithm: Algorithm,
) -> Result<CpuSet, AllocError> {
    take_with_index(&AllocIndex::new(topology), available, n, algorithm)
}

/// [`take_by_topology`] with an explicit [`AllocIndex`] (one built with
/// [`AllocIndex::new`], or kept by an [`IndexedTopology`]).
pub fn take_with_index(
    index: &AllocIndex,
    available: &CpuSet,
    n: usize,
    algorithm: Algorithm,
) -> Result<CpuSet, AllocError> {
    match algorithm {
        Algorithm::Packed {
            strategy,
            prefer_uncore,
        } => packed::take_packed(index, available, n, strategy, prefer_uncore),
        Algorithm::Distributed {
            group_size,
            strategy,
            align_by_socket,
        } => packed::take_distributed(index, available, n, group_size, strategy, align_by_socket),
    }
}
