//! In-place resize of a container's exclusive CPUs (KEP-5554, kubelet gate
//! `InPlacePodVerticalScalingExclusiveCPUs`, kubernetes/kubernetes PR
//! #140629; read from `esotsal/kubernetes@332ea1b21b22806c6a55e0011a8462b9c952878b`
//! `pkg/kubelet/cm/cpumanager/policy_static.go`: `isFeasibleResize`,
//! `allocateForResize`, `allocateCPUsForResize`, `takeByTopologyForResize`).
//!
//! * A container stays where it is: exclusive CPUs ↔ shared pool moves are
//!   refused ([`check_feasible`]).
//! * Growing keeps every CPU the container holds and adds CPUs next to
//!   them (the allocator's `…ForResize` variants, [`crate::alloc::resize`]).
//! * Shrinking gives CPUs back without moving the others, and never below
//!   the CPUs the container was first given (the "promised" CPUs, which are
//!   always kept).
//!
//! Pinion keeps two guards of its own: under `strict-cpu-reservation` a
//! resize that would empty the shared pool is refused, as for admissions;
//! and a shrink never returns to the shared pool a CPU another container of
//! the pod still holds (init-container CPU reuse), as removal does not —
//! kubelet's `allocateCPUsForResize` releases them.

use crate::alloc::resize::{take_distributed_for_resize, take_packed_for_resize};
use crate::alloc::Algorithm;
use crate::cpuset::CpuSet;
use crate::policy::static_policy::{ContainerKind, StaticPolicy};
use crate::policy::PolicyError;
use crate::quantity::Quantity;
use crate::state::State;

/// One resize for the static policy, after [`check_feasible`].
#[derive(Debug, Clone, Copy)]
pub struct ResizeRequest<'a> {
    pub pod: &'a str,
    pub container: &'a str,
    pub kind: ContainerKind,
    /// The new exclusive CPU count (kubelet `guaranteedCPUs` of the resized
    /// container).
    pub cpus: usize,
    /// The CPU count allocated before the resize (kubelet: the container
    /// status' allocated CPU quantity, rounded up), which the
    /// `full-pcpus-only` check counts as available.
    pub allocated_cpus: usize,
    /// The CPUs that must stay (the container's first CPUs).
    pub promised: &'a CpuSet,
}

/// The quantities of one resize, as kubelet's `isFeasibleResize` sees them.
#[derive(Debug, Clone, Copy)]
pub struct Feasibility<'a> {
    pub pod: &'a str,
    pub container: &'a str,
    /// The pod's QoS class is Guaranteed.
    pub guaranteed: bool,
    /// The CPU request the container was admitted (or last resized) with.
    pub allocated: Option<&'a Quantity>,
    /// The new CPU request.
    pub requested: Option<&'a Quantity>,
    /// The promised CPUs (`None`: the container holds no exclusive CPUs).
    pub promised: Option<&'a CpuSet>,
    /// The new exclusive CPU count.
    pub cpus: usize,
}

/// kubelet `isFeasibleResize`: refuses moves between the shared pool and
/// exclusive CPUs, and shrinking below the promised CPUs. Pods that are not
/// Guaranteed always pass (they hold no exclusive CPUs).
pub fn check_feasible(f: &Feasibility<'_>) -> Result<(), PolicyError> {
    if !f.guaranteed {
        return Ok(());
    }
    let zero = Quantity::from_units(0);
    let requested = f.requested.unwrap_or(&zero);
    let allocated = f.allocated.unwrap_or(&zero);
    let inconsistent = |shared_to_exclusive| PolicyError::InconsistentCpuAllocation {
        requested: requested.canonical(),
        allocated: allocated.canonical(),
        shared_to_exclusive,
    };
    if allocated.value() == 0 {
        return if requested.is_integral() {
            Err(inconsistent(true))
        } else {
            Ok(())
        };
    }
    if !allocated.is_integral() {
        return if requested.is_integral() {
            Err(inconsistent(true))
        } else {
            Ok(())
        };
    }
    if !requested.is_integral() {
        return Err(inconsistent(false));
    }
    let Some(promised) = f.promised else {
        return Err(PolicyError::GetOriginalCpuSet {
            pod: f.pod.to_owned(),
            container: f.container.to_owned(),
        });
    };
    if promised.len() <= f.cpus {
        return Ok(());
    }
    Err(PolicyError::ProhibitedCpuAllocation {
        requested: requested.canonical(),
        allocated: allocated.canonical(),
        promised: promised.len(),
        guaranteed: f.cpus,
    })
}

impl StaticPolicy {
    /// kubelet `allocateForResize` for a container holding exclusive CPUs:
    /// the `full-pcpus-only` checks (the container's own CPUs count as
    /// available), then [`StaticPolicy::allocate_cpus_for_resize`] inside
    /// the NUMA affinity. Returns the container's new CPUs; on error the
    /// state is unchanged.
    pub fn resize(
        &mut self,
        state: &mut State,
        request: &ResizeRequest<'_>,
        numa_affinity: Option<&[u32]>,
    ) -> Result<CpuSet, PolicyError> {
        let n = request.cpus;
        if self.options().full_pcpus_only {
            self.check_smt_for_resize(state, n, request.allocated_cpus)?;
        }
        let Some(current) = state.assignment(request.pod, request.container).cloned() else {
            return Err(PolicyError::GetOriginalCpuSet {
                pod: request.pod.to_owned(),
                container: request.container.to_owned(),
            });
        };
        // CPUs the container shares with others of its pod (an init
        // container's CPUs reused by a later container) never go back to
        // the shared pool on a shrink (as on removal).
        let mut in_use = CpuSet::new();
        if let Some(siblings) = state.assignments.get(request.pod) {
            for (name, cpus) in siblings {
                if name != request.container {
                    in_use.union_with(cpus);
                }
            }
        }
        let mut next = state.clone();
        let cpus = self
            .allocate_cpus_for_resize(&mut next, n, numa_affinity, &current, request.promised)
            .map_err(|topology_error| PolicyError::ResizeAllocateCpus {
                pod: request.pod.to_owned(),
                container: request.container.to_owned(),
                topology_error,
            })?;
        next.default.difference_with(&in_use);
        if next.default.is_empty() && self.options().strict_cpu_reservation {
            return Err(PolicyError::SharedPoolWouldBeEmpty { requested: n });
        }
        next.assign(request.pod, request.container, cpus.clone());
        *state = next;
        self.note_reuse(request.pod, request.kind, &cpus);
        Ok(cpus)
    }

    /// kubelet's `full-pcpus-only` checks of a resize.
    fn check_smt_for_resize(
        &self,
        state: &State,
        n: usize,
        allocated: usize,
    ) -> Result<(), PolicyError> {
        let per_core = self.topology().cpus_per_core();
        if per_core == 0 || !n.is_multiple_of(per_core) {
            return Err(PolicyError::SmtNotMultiple {
                requested: n,
                cpus_per_core: per_core,
            });
        }
        let available = self.available_physical(state) + allocated;
        if n > available {
            return Err(PolicyError::SmtNotEnoughPhysical {
                available,
                requested: n,
                cpus_per_core: per_core,
            });
        }
        Ok(())
    }

    /// kubelet `allocateCPUsForResize`: the promised CPUs, plus (growing)
    /// the available and current CPUs or (shrinking) the current ones are
    /// allocatable; the CPUs in the affinity's NUMA nodes are taken first.
    /// Updates the shared pool of `state` (not the assignment). Errors are
    /// the allocator's texts.
    pub fn allocate_cpus_for_resize(
        &self,
        state: &mut State,
        n: usize,
        numa_affinity: Option<&[u32]>,
        current: &CpuSet,
        must_keep: &CpuSet,
    ) -> Result<CpuSet, String> {
        if n < must_keep.len() {
            return Err(format!(
                "requested number of CPUs ( {n} ) are less than number of retained CPUs ( {} )",
                must_keep.len()
            ));
        }
        let mut allocatable = must_keep.clone();
        if n >= current.len() {
            // Growth never reaches into boot-isolated CPUs (Pinion: only
            // an admission that asks for them gets them).
            let free = state.default.difference(self.reserved());
            allocatable.union_with(&free.difference(self.topology().isolated()));
        }
        allocatable.union_with(current);
        let mut result = CpuSet::new();
        if let Some(nodes) = numa_affinity {
            let aligned = self.aligned_cpus_in(nodes, &allocatable);
            let count = n.min(aligned.len());
            result = self.take_for_resize(&aligned, count, current, must_keep)?;
        }
        if n > result.len() {
            let rest = self.take_for_resize(
                &allocatable.difference(&result),
                n - result.len(),
                current,
                must_keep,
            )?;
            result.union_with(&rest);
        }
        if !must_keep.is_subset(&result) {
            return Err(format!(
                "requested CPUs to be retained {must_keep} are not a subset of resulted CPUs {result}"
            ));
        }
        if current.len() < result.len() {
            state.default.difference_with(&result);
        } else if current.len() > result.len() {
            state.default.union_with(&current.difference(&result));
        }
        Ok(result)
    }

    /// kubelet `takeByTopologyForResize`: the leak checks, then the
    /// policy's allocator in its resize variant.
    fn take_for_resize(
        &self,
        available: &CpuSet,
        n: usize,
        current: &CpuSet,
        must_keep: &CpuSet,
    ) -> Result<CpuSet, String> {
        if !must_keep.is_subset(available) {
            return Err(format!(
                "requested CPUs to be retained {must_keep} are not a subset of available CPUs {available}"
            ));
        }
        if !current.is_subset(available) {
            return Err(format!(
                "reusable CPUs {current} are not a subset of available CPUs {available}"
            ));
        }
        if !must_keep.is_subset(current) {
            return Err(format!(
                "requested CPUs to be retained {must_keep} are not a subset of reusable CPUs {current}"
            ));
        }
        let topo = self.topology();
        let taken = match self.algorithm() {
            Algorithm::Packed {
                strategy,
                prefer_uncore,
            } => take_packed_for_resize(
                topo,
                available,
                n,
                strategy,
                prefer_uncore,
                current,
                must_keep,
            ),
            Algorithm::Distributed {
                group_size,
                strategy,
                ..
            } => take_distributed_for_resize(
                topo, available, n, group_size, strategy, current, must_keep,
            ),
        };
        taken.map_err(|err| err.to_string())
    }
}
