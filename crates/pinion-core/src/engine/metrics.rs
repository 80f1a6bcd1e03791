//! The counters and gauges kubelet's CPU and Topology Managers export, kept
//! by the engine (names, labels and meanings: `docs/metrics.md`). Core only
//! counts; the agent renders.
//!
//! Counting follows newest kubelet (`pkg/kubelet/cm/cpumanager/policy_static.go`
//! v1.36 line, `pkg/kubelet/cm/topologymanager/scope_container.go` and
//! `scope_pod.go`, `pkg/kubelet/metrics/metrics.go`):
//! * `container_aligned_compute_resources_count{scope="container",boundary="physical_cpu"}`:
//!   every successful exclusive admission (fresh or already in the state)
//!   while `full-pcpus-only` is on; its failure counterpart: every failed
//!   one while the option is on (any error, not only SMT alignment errors).
//! * `…{scope="container",boundary="uncore_cache"}`: every fresh allocation
//!   whose CPUs share one uncore cache (whatever the options; a single CPU
//!   is always aligned).
//! * `…{boundary="numa_node"}`: only under the Topology Manager policy
//!   `single-numa-node` (kubelet's `IsAlignmentGuaranteed`). Container
//!   scope: every container admitted (exclusive or not) counts one success;
//!   a rejected merge counts one failure. Pod scope: a pod whose containers
//!   were all admitted counts one success (`scope="pod"`); a rejected merge
//!   one failure. Allocation errors after a successful merge count neither.
//! * `resource_manager_*` (KEP-5526): allocations, allocation errors and
//!   container assignments by source (`node` or `pod`), `resource_name="cpu"`.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::state::{PodCpus, State};
use crate::topology::Topology;

/// The `scope` label of the alignment counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlignScope {
    Container,
    Pod,
}

/// The `boundary` label of the alignment counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlignBoundary {
    NumaNode,
    PhysicalCpu,
    UncoreCache,
}

impl AlignScope {
    /// Every scope, in label order.
    pub const ALL: [AlignScope; 2] = [AlignScope::Container, AlignScope::Pod];

    /// The label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Pod => "pod",
        }
    }
}

impl AlignBoundary {
    /// Every boundary, in label order.
    pub const ALL: [AlignBoundary; 3] = [
        AlignBoundary::NumaNode,
        AlignBoundary::PhysicalCpu,
        AlignBoundary::UncoreCache,
    ];

    /// The label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::NumaNode => "numa_node",
            Self::PhysicalCpu => "physical_cpu",
            Self::UncoreCache => "uncore_cache",
        }
    }
}

/// One counter per (scope, boundary).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlignmentCounts {
    counts: [[u64; 3]; 2],
}

impl AlignmentCounts {
    /// The value of one series.
    #[must_use]
    pub fn get(&self, scope: AlignScope, boundary: AlignBoundary) -> u64 {
        self.counts[scope as usize][boundary as usize]
    }

    /// Adds one to a series.
    pub fn inc(&mut self, scope: AlignScope, boundary: AlignBoundary) {
        let slot = &mut self.counts[scope as usize][boundary as usize];
        *slot = slot.saturating_add(1);
    }

    /// Every series (all label combinations, zeros included), in label
    /// order: `(scope, boundary, value)`.
    pub fn series(&self) -> impl Iterator<Item = (AlignScope, AlignBoundary, u64)> + '_ {
        AlignScope::ALL.into_iter().flat_map(move |scope| {
            AlignBoundary::ALL
                .into_iter()
                .map(move |boundary| (scope, boundary, self.get(scope, boundary)))
        })
    }
}

/// The `source` label of the resource-manager counters (KEP-5526).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AllocationSource {
    /// Exclusive CPUs from the node's shared pool (container-level).
    Node,
    /// A pod-level CPU set (pod-level resources).
    Pod,
}

impl AllocationSource {
    /// Every source, in label order.
    pub const ALL: [AllocationSource; 2] = [AllocationSource::Node, AllocationSource::Pod];

    /// The label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Node => "node",
            Self::Pod => "pod",
        }
    }
}

/// The `assignment_type` label of `resource_manager_container_assignments`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AssignmentType {
    ExclusiveFromNode,
    ExclusiveFromPod,
    SharedFromPod,
}

impl AssignmentType {
    /// Every type, in label order.
    pub const ALL: [AssignmentType; 3] = [
        AssignmentType::ExclusiveFromNode,
        AssignmentType::ExclusiveFromPod,
        AssignmentType::SharedFromPod,
    ];

    /// The label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::ExclusiveFromNode => "exclusive_from_node",
            Self::ExclusiveFromPod => "exclusive_from_pod",
            Self::SharedFromPod => "shared_from_pod",
        }
    }
}

/// kubelet's resource-manager counters for `resource_name="cpu"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceManagerCounts {
    allocations: [u64; 2],
    errors: [u64; 2],
    assignments: [u64; 3],
}

impl ResourceManagerCounts {
    /// `resource_manager_allocations_total{resource_name="cpu",source}`.
    #[must_use]
    pub fn allocations(&self, source: AllocationSource) -> u64 {
        self.allocations[source as usize]
    }

    /// `resource_manager_allocation_errors_total{resource_name="cpu",source}`.
    #[must_use]
    pub fn errors(&self, source: AllocationSource) -> u64 {
        self.errors[source as usize]
    }

    /// `resource_manager_container_assignments{resource_name="cpu",assignment_type}`.
    #[must_use]
    pub fn assignments(&self, kind: AssignmentType) -> u64 {
        self.assignments[kind as usize]
    }

    pub(crate) fn add_allocation(&mut self, source: AllocationSource) {
        let slot = &mut self.allocations[source as usize];
        *slot = slot.saturating_add(1);
    }

    pub(crate) fn add_error(&mut self, source: AllocationSource) {
        let slot = &mut self.errors[source as usize];
        *slot = slot.saturating_add(1);
    }

    pub(crate) fn add_assignment(&mut self, kind: AssignmentType) {
        let slot = &mut self.assignments[kind as usize];
        *slot = slot.saturating_add(1);
    }
}

/// kubelet's `isAlignedAtUncoreCache`: every CPU of `cpus` is in the same
/// uncore cache (true for zero or one CPU; false for a CPU the topology
/// does not know).
#[must_use]
pub fn uncore_aligned(topology: &Topology, cpus: &CpuSet) -> bool {
    let mut ids = cpus.iter().map(|cpu| topology.cpu(cpu).map(|c| c.uncore));
    let Some(first) = ids.next() else {
        return true;
    };
    first.is_some() && ids.all(|id| id == first)
}

/// The CPU manager's gauges, derived from the state (kubelet recomputes
/// them after every allocation and release).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuGauges {
    /// `cpu_manager_shared_pool_size_millicores`: the shared pool minus the
    /// reserved CPUs (kubelet's `GetAvailableCPUs`), in millicores. The
    /// CPUs isolated at boot (`isolcpus=`) are not counted: they stay in the
    /// checkpoint's default set but never in the shared pool.
    pub shared_pool_millicores: u64,
    /// `cpu_manager_exclusive_cpu_allocation_count`: CPUs held exclusively —
    /// the union of every container's CPUs (a CPU an app container reuses
    /// from its init container counts once) and of every pod-level CPU set.
    pub exclusive_cpus: usize,
    /// `cpu_manager_allocation_per_numa{numa_node}`: those CPUs per NUMA
    /// node, with a series (possibly 0) for every NUMA node that has CPUs.
    pub allocation_per_numa: BTreeMap<u32, usize>,
}

impl CpuGauges {
    /// The gauges of `state` (with its pod-level CPU sets `pod_cpus`) on
    /// `topology` with `reserved` CPUs; the shared pool counts neither the
    /// reserved CPUs nor those `topology` says are isolated at boot.
    #[must_use]
    pub fn of(
        state: &State,
        pod_cpus: &PodCpus,
        topology: &Topology,
        reserved: &CpuSet,
    ) -> CpuGauges {
        let mut exclusive = state.exclusive_cpus();
        for cpus in pod_cpus.values() {
            exclusive.union_with(cpus);
        }
        let shared = state
            .default
            .difference(reserved)
            .difference(topology.isolated())
            .len();
        let allocation_per_numa = topology
            .numa_cpus()
            .iter()
            .map(|(node, cpus)| (*node, cpus.intersection_len(&exclusive)))
            .collect();
        CpuGauges {
            shared_pool_millicores: u64::try_from(shared)
                .unwrap_or(u64::MAX)
                .saturating_mul(1000),
            exclusive_cpus: exclusive.len(),
            allocation_per_numa,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{synthetic, Shape};

    fn set(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    /// kubelet's topoDualSocketHT: 12 CPUs, core = id mod 6, socket and
    /// NUMA node = core mod 2 (as `TestStaticPolicyMetricsInitialization`
    /// uses it).
    fn dual_socket_ht() -> Topology {
        let cpus = (0..12)
            .map(|id| {
                let core = id % 6;
                crate::topology::CpuInfo {
                    id,
                    core,
                    socket: core % 2,
                    numa: core % 2,
                    uncore: 0,
                    llc: None,
                    die: None,
                    core_type: None,
                }
            })
            .collect();
        Topology::new(crate::topology::TopologySpec {
            cpus,
            ..Default::default()
        })
        .expect("topology")
    }

    #[test]
    fn every_alignment_series_exists_and_counts_separately() {
        let mut counts = AlignmentCounts::default();
        counts.inc(AlignScope::Pod, AlignBoundary::NumaNode);
        counts.inc(AlignScope::Pod, AlignBoundary::NumaNode);
        counts.inc(AlignScope::Container, AlignBoundary::UncoreCache);
        let series: Vec<(&str, &str, u64)> = counts
            .series()
            .map(|(s, b, v)| (s.label(), b.label(), v))
            .collect();
        assert_eq!(
            series,
            vec![
                ("container", "numa_node", 0),
                ("container", "physical_cpu", 0),
                ("container", "uncore_cache", 1),
                ("pod", "numa_node", 2),
                ("pod", "physical_cpu", 0),
                ("pod", "uncore_cache", 0),
            ]
        );
    }

    #[test]
    fn uncore_alignment_is_one_shared_cache() {
        let t = synthetic(Shape {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads_per_core: 2,
            cores_per_uncore: 2,
        });
        assert!(uncore_aligned(&t, &set("")));
        assert!(uncore_aligned(&t, &set("3")));
        assert!(uncore_aligned(&t, &set("0-1,4-5")));
        assert!(!uncore_aligned(&t, &set("1-2")));
        assert!(!uncore_aligned(&t, &set("0,64")), "unknown cpu");
    }

    /// Rows of kubelet's `TestStaticPolicyMetricsInitialization` (newest
    /// `policy_static_metrics_test.go`): reused init-container CPUs count
    /// once, pod-level CPU sets count whole, every NUMA node has a series,
    /// and the shared pool excludes the reserved CPU 0.
    #[test]
    fn gauges_follow_kubelets_initialization_table() {
        let t = dual_socket_ht();
        let reserved = set("0");
        let mut state = State {
            default: set("0-11"),
            ..State::default()
        };
        let none = PodCpus::new();
        let gauges = CpuGauges::of(&state, &none, &t, &reserved);
        assert_eq!(gauges.shared_pool_millicores, 11_000);
        assert_eq!(gauges.exclusive_cpus, 0);
        assert_eq!(gauges.allocation_per_numa, BTreeMap::from([(0, 0), (1, 0)]));

        state.default = set("0-1,3-5,7,9-11");
        state.assign("podA", "init-cont", set("2,8"));
        state.assign("podA", "app-cont", set("2,6,8"));
        let gauges = CpuGauges::of(&state, &none, &t, &reserved);
        assert_eq!(
            (gauges.exclusive_cpus, gauges.shared_pool_millicores),
            (3, 8000)
        );
        assert_eq!(gauges.allocation_per_numa, BTreeMap::from([(0, 3), (1, 0)]));

        let mut state = State {
            default: set("0,5,9,11"),
            ..State::default()
        };
        let pods = PodCpus::from([("podA".to_owned(), set("1-4,6-8,10"))]);
        state.assign("podA", "shared-cont", set("2-4,6,8,10"));
        let gauges = CpuGauges::of(&state, &pods, &t, &reserved);
        assert_eq!(
            (gauges.exclusive_cpus, gauges.shared_pool_millicores),
            (8, 3000)
        );
        assert_eq!(gauges.allocation_per_numa, BTreeMap::from([(0, 5), (1, 3)]));
    }

    /// Issue 31: the shared-pool gauge counted free CPUs isolated at boot
    /// (they stay in the default set but never in the shared pool).
    #[test]
    fn regression_shared_pool_gauge_skips_boot_isolated_cpus() {
        let mut spec = dual_socket_ht().spec().clone();
        spec.isolated = set("4-5,10");
        let t = Topology::new(spec).expect("topology");
        let state = State {
            default: set("0-1,3-5,7,9-11"),
            ..State::default()
        };
        let gauges = CpuGauges::of(&state, &PodCpus::new(), &t, &set("0"));
        // 0-1,3-5,7,9-11 without reserved 0 and isolated 4,5,10: 1,3,7,9,11.
        assert_eq!(gauges.shared_pool_millicores, 5000);
    }
}
