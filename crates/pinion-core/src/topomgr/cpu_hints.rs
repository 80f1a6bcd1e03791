//! The CPU manager as a hint provider (static policy, spec
//! `kubelet-topology-manager.md` §8): kubelet's `generateCPUTopologyHints`,
//! `GetTopologyHints` (container scope) and `GetPodTopologyHints` (pod scope).
//!
//! Masks are enumerated over the NUMA nodes that own CPUs, in
//! [`super::bitmask::iterate_masks`] order, so the output lists every
//! feasible mask (all supersets included) exactly as kubelet does. Per mask
//! the work is O(nodes) thanks to per-node counts. The number of masks is
//! `2^n − 1` for `n` CPU-bearing nodes, so beyond [`EXHAUSTIVE_NODES`] the
//! list is cut to a budget (`docs/decisions/004-bounded-cpu-hints.md`).

use super::bitmask::{iterate_masks_while, NumaMask};
use super::hint::TopologyHint;
use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// Per-node figures for one hint generation.
struct NodeCounts {
    ids: Vec<u32>,
    /// `(total CPUs, available CPUs)` per node, same order as `ids`.
    counts: Vec<(usize, usize)>,
    /// Available CPUs by node id (0–63), for per-mask sums.
    free_by_id: [usize; 64],
    /// Nodes holding at least one reusable CPU.
    reusable_nodes: NumaMask,
}

impl NodeCounts {
    fn new(topology: &Topology, available: &CpuSet, reusable: &CpuSet) -> Self {
        let mut ids = Vec::new();
        let mut counts = Vec::new();
        let mut reusable_nodes = NumaMask::empty();
        let mut free_by_id = [0; 64];
        for (&node, cpus) in topology.numa_cpus() {
            ids.push(node);
            let free = cpus.intersection_len(available);
            counts.push((cpus.len(), free));
            if let Some(slot) = free_by_id.get_mut(node as usize) {
                *slot = free;
            }
            if cpus.intersection_len(reusable) > 0 {
                reusable_nodes = reusable_nodes.or(NumaMask::single(node).unwrap_or_default());
            }
        }
        Self {
            ids,
            counts,
            free_by_id,
            reusable_nodes,
        }
    }

    /// kubelet's `minAffinitySize`: the fewest nodes whose **total** CPUs
    /// reach `request` (the largest nodes first), else the node count.
    fn min_affinity_size(&self, request: usize) -> u32 {
        let mut totals: Vec<usize> = self.counts.iter().map(|&(total, _)| total).collect();
        totals.sort_unstable_by(|a, b| b.cmp(a));
        let mut sum = 0usize;
        for (size, total) in totals.iter().enumerate() {
            sum += total;
            if sum >= request {
                return u32::try_from(size + 1).unwrap_or(u32::MAX);
            }
        }
        u32::try_from(totals.len()).unwrap_or(u32::MAX)
    }

    /// Available CPUs on the nodes of `mask` (O(nodes in the mask)).
    fn free_in(&self, mask: NumaMask) -> usize {
        let mut bits = mask.raw();
        let mut sum = 0;
        while bits != 0 {
            sum += self.free_by_id[bits.trailing_zeros() as usize];
            bits &= bits - 1;
        }
        sum
    }
}

/// Up to this many NUMA nodes with CPUs, hints list every mask (kubelet's
/// exact output: at most 65,535 masks).
pub const EXHAUSTIVE_NODES: usize = 16;

/// Beyond [`EXHAUSTIVE_NODES`], how many masks are visited (in kubelet's
/// order) before the list is cut; see `docs/decisions/004-bounded-cpu-hints.md`.
pub const MASK_BUDGET: usize = 65_536;

/// kubelet `generateCPUTopologyHints`: every NUMA mask (over nodes with CPUs)
/// that covers all reusable CPUs' nodes and holds at least `request` CPUs
/// counting `|reusable|` plus the available CPUs on its nodes; preferred when
/// its size is the minimum whose **total** CPUs cover the request (with
/// `align_by_socket`: also when it spans exactly the minimal socket count).
///
/// With more than [`EXHAUSTIVE_NODES`] CPU-bearing nodes the list is bounded
/// ([`generate_cpu_hints_bounded`] with [`MASK_BUDGET`]).
#[must_use]
pub fn generate_cpu_hints(
    topology: &Topology,
    available: &CpuSet,
    reusable: &CpuSet,
    request: usize,
    align_by_socket: bool,
) -> Vec<TopologyHint> {
    let nodes = topology.numa_cpus().len();
    let budget = if nodes <= EXHAUSTIVE_NODES {
        usize::MAX
    } else {
        MASK_BUDGET
    };
    let inputs = HintInputs {
        topology,
        available,
        reusable,
        align_by_socket,
    };
    generate_cpu_hints_bounded(&inputs, request, budget)
}

/// [`generate_cpu_hints`] visiting at most `budget` masks in kubelet's order
/// (by size, then lexicographically), so the hints are a prefix of kubelet's
/// list; the mask of all CPU-bearing nodes is added when it was not visited
/// and is feasible (kubelet lists it last). Preferred flags are kubelet's:
/// the minimal size is computed in closed form, not from the visited masks.
#[must_use]
pub fn generate_cpu_hints_bounded(
    inputs: &HintInputs<'_>,
    request: usize,
    budget: usize,
) -> Vec<TopologyHint> {
    let topology = inputs.topology;
    let nodes = NodeCounts::new(topology, inputs.available, inputs.reusable);
    let min_affinity_size = nodes.min_affinity_size(request);
    let feasible = |mask: NumaMask| {
        nodes.reusable_nodes.is_subset_of(mask)
            && inputs.reusable.len() + nodes.free_in(mask) >= request
    };
    let mut hints = Vec::new();
    let mut visited = 0usize;
    let complete = iterate_masks_while(&nodes.ids, nodes.ids.len(), |mask| {
        if visited == budget {
            return false;
        }
        visited += 1;
        if feasible(mask) {
            hints.push(TopologyHint::new(mask, false));
        }
        true
    });
    let all = NumaMask::from_ids(nodes.ids.iter().copied()).unwrap_or_default();
    if !complete && !all.is_empty() && feasible(all) {
        hints.push(TopologyHint::new(all, false));
    }
    let min_sockets = inputs
        .align_by_socket
        .then(|| min_socket_count(topology, min_affinity_size));
    for hint in &mut hints {
        let mask = hint.affinity.unwrap_or_default();
        let socket_aligned = min_sockets
            .flatten()
            .is_some_and(|wanted| sockets_of(topology, mask) == wanted);
        hint.preferred = mask.count() == min_affinity_size || socket_aligned;
    }
    hints
}

/// `ceil(min_affinity_size / (NUMA nodes per socket))`; `None` when a socket
/// holds less than one NUMA node (integer division gives 0).
fn min_socket_count(topology: &Topology, min_affinity_size: u32) -> Option<usize> {
    let per_socket = topology.num_numa_nodes() / topology.num_sockets().max(1);
    (per_socket > 0).then(|| (min_affinity_size as usize).div_ceil(per_socket))
}

/// Number of distinct sockets of the CPUs on the nodes of `mask`.
fn sockets_of(topology: &Topology, mask: NumaMask) -> usize {
    let mut sockets: Vec<u32> = topology
        .cpus()
        .iter()
        .filter(|cpu| mask.is_set(cpu.numa))
        .map(|cpu| cpu.socket)
        .collect();
    sockets.sort_unstable();
    sockets.dedup();
    sockets.len()
}

/// Pinion's whole-uncore requests (`pinion.io/uncore: exclusive`, issue 31
/// item 4): of `hints`, those whose NUMA nodes wholly contain uncore caches
/// every CPU of which is in `free`, holding at least `request` CPUs
/// together — where `alloc::whole_uncore::take_whole_uncores` can place the
/// request without leaving the mask. A hint without a mask is kept; the
/// preferred flags stay kubelet's.
#[must_use]
pub fn whole_uncore_hints(
    topology: &Topology,
    free: &CpuSet,
    request: usize,
    hints: Vec<TopologyHint>,
) -> Vec<TopologyHint> {
    let caches: Vec<(NumaMask, usize)> = topology
        .uncores()
        .values()
        .filter(|cpus| !cpus.is_empty() && cpus.is_subset(free))
        .filter_map(|cpus| {
            let nodes = NumaMask::from_ids(topology.numa_nodes_of(cpus)).ok()?;
            Some((nodes, cpus.len()))
        })
        .collect();
    hints
        .into_iter()
        .filter(|hint| {
            let Some(mask) = hint.affinity else {
                return true;
            };
            let inside: usize = caches
                .iter()
                .filter(|(nodes, _)| nodes.is_subset_of(mask))
                .map(|(_, cpus)| cpus)
                .sum();
            inside >= request
        })
        .collect()
}

/// Inputs of a hint request besides the request size.
#[derive(Debug, Clone, Copy)]
pub struct HintInputs<'a> {
    pub topology: &'a Topology,
    /// The static policy's available CPUs (default set − reserved).
    pub available: &'a CpuSet,
    /// CPUs of this pod's finished init containers that may be reused.
    pub reusable: &'a CpuSet,
    pub align_by_socket: bool,
}

/// kubelet `GetTopologyHints` for the `cpu` resource (container scope):
/// `None` ("don't care") when `request` is 0; an existing assignment of the
/// wrong size gives an empty list; an existing assignment of the right size
/// regenerates hints from its CPUs alone.
#[must_use]
pub fn container_cpu_hints(
    inputs: &HintInputs<'_>,
    request: usize,
    assigned: Option<&CpuSet>,
) -> Option<Vec<TopologyHint>> {
    if request == 0 {
        return None;
    }
    let hints = match assigned {
        Some(cpus) if cpus.len() != request => Vec::new(),
        Some(cpus) => generate_cpu_hints(
            inputs.topology,
            cpus,
            &CpuSet::new(),
            request,
            inputs.align_by_socket,
        ),
        None => generate_cpu_hints(
            inputs.topology,
            inputs.available,
            inputs.reusable,
            request,
            inputs.align_by_socket,
        ),
    };
    Some(hints)
}

/// kubelet `getTopologyHintsForResize` for `cpu` (container scope, in-place
/// resize of exclusive CPUs): `None` when `request` is 0. A container
/// growing past its `assigned` CPUs needs hints whose NUMA nodes hold all of
/// them (they are reusable) plus enough available CPUs; a shrinking one only
/// hints at the NUMA nodes of its own CPUs; an unchanged one regenerates
/// the hints of its CPUs. Without an assignment: as an admission.
#[must_use]
pub fn container_cpu_hints_for_resize(
    inputs: &HintInputs<'_>,
    request: usize,
    assigned: Option<&CpuSet>,
) -> Option<Vec<TopologyHint>> {
    if request == 0 {
        return None;
    }
    let align = inputs.align_by_socket;
    let topo = inputs.topology;
    let hints = match assigned {
        Some(cpus) if cpus.len() < request => generate_cpu_hints(
            topo,
            inputs.available,
            &cpus.union(inputs.reusable),
            request,
            align,
        ),
        Some(cpus) if cpus.len() > request => generate_cpu_hints(
            topo,
            &CpuSet::new(),
            &cpus.union(inputs.reusable),
            request,
            align,
        ),
        Some(cpus) => generate_cpu_hints(topo, cpus, &CpuSet::new(), request, align),
        None => generate_cpu_hints(topo, inputs.available, inputs.reusable, request, align),
    };
    Some(hints)
}

/// One container of a pod-scope request: its own exclusive CPU count and
/// its current assignment.
#[derive(Debug, Clone)]
pub struct ContainerCpus {
    pub request: usize,
    pub assigned: Option<CpuSet>,
}

/// kubelet `GetPodTopologyHints` for `cpu` (pod scope) with the pod total
/// `request` (see [`crate::pod::pod_guaranteed_cpus`]).
#[must_use]
pub fn pod_cpu_hints(
    inputs: &HintInputs<'_>,
    request: usize,
    containers: &[ContainerCpus],
) -> Option<Vec<TopologyHint>> {
    if request == 0 {
        return None;
    }
    let mut assigned = CpuSet::new();
    for container in containers {
        if let Some(cpus) = &container.assigned {
            if cpus.len() != container.request {
                return Some(Vec::new());
            }
            assigned.union_with(cpus);
        }
    }
    let align = inputs.align_by_socket;
    if !assigned.is_empty() && assigned.len() == request {
        return Some(generate_cpu_hints(
            inputs.topology,
            &assigned,
            &CpuSet::new(),
            request,
            align,
        ));
    }
    let reusable = inputs.reusable.union(&assigned);
    Some(generate_cpu_hints(
        inputs.topology,
        inputs.available,
        &reusable,
        request,
        align,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{synthetic, Shape};

    /// 2 NUMA nodes (= sockets) × 3 cores × 2 threads: node 0 = CPUs 0-2,6-8.
    fn machine() -> Topology {
        synthetic(Shape {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 3,
            threads_per_core: 2,
            cores_per_uncore: 0,
        })
    }

    fn list(text: &str) -> CpuSet {
        CpuSet::parse_list(text).unwrap()
    }

    fn hints(ids: &[(&[u32], bool)]) -> Vec<TopologyHint> {
        ids.iter()
            .map(|(ids, preferred)| {
                TopologyHint::new(NumaMask::from_ids(ids.iter().copied()).unwrap(), *preferred)
            })
            .collect()
    }

    #[test]
    fn minimal_masks_are_preferred_and_supersets_listed() {
        let topo = machine();
        // 4 free on node 0 (1,2,7,8), 6 on node 1.
        let free = list("1-5,7-11");
        let none = CpuSet::new();
        assert_eq!(
            generate_cpu_hints(&topo, &free, &none, 2, false),
            hints(&[(&[0], true), (&[1], true), (&[0, 1], false)])
        );
        assert_eq!(
            generate_cpu_hints(&topo, &free, &none, 5, false),
            hints(&[(&[1], true), (&[0, 1], false)])
        );
        assert_eq!(
            generate_cpu_hints(&topo, &free, &none, 7, false),
            hints(&[(&[0, 1], true)])
        );
        assert!(generate_cpu_hints(&topo, &free, &none, 11, false).is_empty());
        // Minimal size counts total CPUs, not free ones.
        assert_eq!(
            generate_cpu_hints(&topo, &list("0,3"), &none, 2, false),
            hints(&[(&[0, 1], false)])
        );
    }

    /// Issue 31: a whole-uncore request's hints counted free CPUs; a node
    /// with enough of them but no wholly free cache was preferred.
    #[test]
    fn regression_whole_uncore_hints_count_whole_free_caches_per_mask() {
        // 2 nodes × 4 CPUs, 2-CPU caches: node 0 = {0,1},{2,3}; node 1 = {4,5},{6,7}.
        let topo = synthetic(Shape {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads_per_core: 1,
            cores_per_uncore: 2,
        });
        // CPUs 0 and 2 are taken: node 0 has 2 free CPUs, no whole cache.
        let free = list("1,3-7");
        let none = CpuSet::new();
        let plain = generate_cpu_hints(&topo, &free, &none, 2, false);
        assert_eq!(
            plain,
            hints(&[(&[0], true), (&[1], true), (&[0, 1], false)])
        );
        assert_eq!(
            whole_uncore_hints(&topo, &free, 2, plain),
            hints(&[(&[1], true), (&[0, 1], false)])
        );
        // Two caches fit on node 1 only; three fit nowhere.
        let four = generate_cpu_hints(&topo, &free, &none, 4, false);
        assert_eq!(
            whole_uncore_hints(&topo, &free, 4, four),
            hints(&[(&[1], true), (&[0, 1], false)])
        );
        let six = generate_cpu_hints(&topo, &free, &none, 6, false);
        assert!(whole_uncore_hints(&topo, &free, 6, six).is_empty());
    }

    #[test]
    fn many_cpu_nodes_are_bounded_but_keep_the_preferred_singles() {
        // 64 NUMA nodes with 2 CPUs each.
        let topo = synthetic(Shape {
            sockets: 4,
            numa_per_socket: 16,
            cores_per_socket: 32,
            threads_per_core: 1,
            cores_per_uncore: 0,
        });
        let free = topo.all_cpus().clone();
        let got = generate_cpu_hints(&topo, &free, &CpuSet::new(), 2, false);
        assert_eq!(got.len(), MASK_BUDGET + 1);
        let singles: Vec<_> = got.iter().take_while(|h| h.preferred).collect();
        assert_eq!(singles.len(), 64);
        assert!(singles
            .iter()
            .all(|h| h.affinity.is_some_and(|m| m.count() == 1)));
        let last = got.last().and_then(|h| h.affinity).unwrap();
        assert_eq!(last.count(), 64, "the full mask closes the list");
        // 5 CPUs need 3 nodes: every 3-node mask is visited and preferred.
        let three = generate_cpu_hints(&topo, &free, &CpuSet::new(), 5, false);
        let preferred = three.iter().filter(|h| h.preferred).count();
        assert_eq!(preferred, 64 * 63 * 62 / 6);
    }

    #[test]
    fn reusable_cpus_must_lie_inside_the_mask() {
        let topo = machine();
        let hints_got = generate_cpu_hints(&topo, &list("3-5,9-11"), &list("0"), 2, false);
        assert_eq!(hints_got, hints(&[(&[0, 1], false)]));
    }

    #[test]
    fn scopes_handle_existing_assignments() {
        let topo = machine();
        let free = list("1-5,7-11");
        let none = CpuSet::new();
        let inputs = HintInputs {
            topology: &topo,
            available: &free,
            reusable: &none,
            align_by_socket: false,
        };
        assert_eq!(container_cpu_hints(&inputs, 0, None), None);
        assert_eq!(
            container_cpu_hints(&inputs, 2, Some(&list("0,3,6"))),
            Some(Vec::new())
        );
        let regenerated = container_cpu_hints(&inputs, 2, Some(&list("0,6")));
        assert_eq!(regenerated, Some(hints(&[(&[0], true), (&[0, 1], false)])));
        let containers = [ContainerCpus {
            request: 2,
            assigned: Some(list("0,6")),
        }];
        assert_eq!(pod_cpu_hints(&inputs, 2, &containers), regenerated);
        let wrong = [ContainerCpus {
            request: 3,
            assigned: Some(list("0,6")),
        }];
        assert_eq!(pod_cpu_hints(&inputs, 3, &wrong), Some(Vec::new()));
    }
}
