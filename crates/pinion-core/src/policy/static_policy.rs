//! kubelet's `static` CPU manager policy (spec §5): reserved CPUs, exclusive
//! CPUs for integral Guaranteed containers, init-container CPU reuse,
//! `validateState` at start, and release on removal.
//!
//! The policy owns no state: every call gets the [`State`] to read and mutate,
//! so the engine (or a test) decides when the result is made durable.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::alloc::whole_uncore::take_whole_uncores;
use crate::alloc::{take_with_index, Algorithm, AllocError, IndexedTopology};
use crate::cpuset::CpuSet;
use crate::policy::config::Features;
use crate::policy::cpu_ask::{CpuAsk, IsolatedAsk, UncoreAsk};
use crate::policy::options::StaticPolicyOptions;
use crate::policy::PolicyError;
use crate::state::{Expected, State};
use crate::topology::Topology;

/// How the reserved CPUs are chosen (kubelet `NewStaticPolicy`): an explicit
/// list is used verbatim when non-empty, otherwise `count` CPUs are taken
/// with the policy's own allocator; either way the size must equal `count`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservation {
    pub count: usize,
    pub cpus: CpuSet,
}

/// The role of a container inside its pod, for init-container CPU reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// A regular init container: its CPUs may be reused by later containers.
    Init,
    /// A restartable init container (sidecar): keeps its CPUs.
    Sidecar,
    /// An application container.
    App,
}

/// One admission request: which container and how many exclusive CPUs
/// (0 = shared pool; see `pod::guaranteed_cpus`), and what it asks of them
/// beyond the count (boot-isolated CPUs, whole uncore caches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerRequest<'a> {
    pub pod: &'a str,
    pub container: &'a str,
    pub cpus: usize,
    pub kind: ContainerKind,
    pub ask: CpuAsk,
}

/// The static policy.
#[derive(Debug, Clone)]
pub struct StaticPolicy {
    /// Shared with the allocator's index of it, so cloning a policy (the
    /// agent decides on a copy of the engine) copies neither.
    topology: IndexedTopology,
    options: StaticPolicyOptions,
    algorithm: Algorithm,
    reserved: CpuSet,
    /// The reserved CPUs as chosen at start, offline ones included: after
    /// CPU hot-plug `reserved` is the online part of these
    /// ([`crate::hotplug::policy_on`]), and a CPU that comes back is
    /// reserved again.
    configured_reserved: CpuSet,
    /// Every sibling thread of a reserved CPU (full-pcpus-only admission).
    reserved_physical: CpuSet,
    /// Reusable init-container CPUs of at most one pod (kubelet `cpusToReuse`).
    reuse: BTreeMap<String, CpuSet>,
    /// Feature switches (kubelet gates behind a switch).
    features: Features,
}

impl StaticPolicy {
    /// kubelet `NewStaticPolicy` after option parsing.
    pub fn new(
        topology: Topology,
        options: StaticPolicyOptions,
        reservation: &Reservation,
    ) -> Result<Self, PolicyError> {
        let algorithm = Algorithm::select(&options.alloc_options(), &topology);
        let indexed = IndexedTopology::new(Arc::new(topology));
        let topology = indexed.topology();
        let reserved = if reservation.cpus.is_empty() {
            // kubelet ignores the allocator's error here and checks the size.
            take_with_index(
                indexed.index(),
                topology.all_cpus(),
                reservation.count,
                algorithm,
            )
            .unwrap_or_default()
        } else {
            let unknown = reservation.cpus.difference(topology.all_cpus());
            if !unknown.is_empty() {
                return Err(PolicyError::ReservedNotOnline {
                    cpus: unknown.to_string(),
                });
            }
            reservation.cpus.clone()
        };
        if reserved.len() != reservation.count {
            return Err(PolicyError::ReserveFailed {
                cpus: reserved.to_string(),
                count: reservation.count,
            });
        }
        if options.strict_cpu_reservation && topology.all_cpus().is_subset(&reserved) {
            return Err(PolicyError::NoSharedCpus {
                reserved: reserved.to_string(),
            });
        }
        let reserved_physical = topology.core_siblings(&reserved);
        Ok(Self {
            topology: indexed,
            options,
            algorithm,
            configured_reserved: reserved.clone(),
            reserved,
            reserved_physical,
            reuse: BTreeMap::new(),
            features: Features::default(),
        })
    }

    /// The same policy with feature switches.
    #[must_use]
    pub fn with_features(mut self, features: Features) -> Self {
        self.features = features;
        self
    }

    /// The feature switches.
    #[must_use]
    pub fn features(&self) -> Features {
        self.features
    }

    /// The same policy remembering `cpus` as the reserved CPUs chosen at
    /// start (see [`Self::configured_reserved`]).
    #[must_use]
    pub fn with_configured_reserved(mut self, cpus: CpuSet) -> Self {
        self.configured_reserved = cpus;
        self
    }

    /// The reserved CPUs as chosen at start, those offline now included.
    #[must_use]
    pub fn configured_reserved(&self) -> &CpuSet {
        &self.configured_reserved
    }

    /// The reserved CPUs.
    #[must_use]
    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    /// The parsed options.
    #[must_use]
    pub fn options(&self) -> &StaticPolicyOptions {
        &self.options
    }

    /// The CPUs of `pod`'s finished init containers that its next
    /// containers may reuse (kubelet `cpusToReuse`).
    #[must_use]
    pub fn reusable(&self, pod: &str) -> CpuSet {
        self.reuse.get(pod).cloned().unwrap_or_default()
    }

    /// The topology the policy allocates on, shared.
    #[must_use]
    pub fn shared_topology(&self) -> Arc<Topology> {
        Arc::clone(self.topology.topology())
    }

    /// The allocator's index of the topology (built on first use, shared
    /// by clones of the policy).
    #[must_use]
    pub fn alloc_index(&self) -> &crate::alloc::AllocIndex {
        self.topology.index()
    }

    /// The topology the policy allocates on.
    #[must_use]
    pub fn topology(&self) -> &Topology {
        self.topology.topology()
    }

    /// The CPUs the state must account for: all online CPUs, minus the
    /// reserved ones under `strict-cpu-reservation`.
    #[must_use]
    pub fn pool_cpus(&self) -> CpuSet {
        if self.options.strict_cpu_reservation {
            self.topology().all_cpus().difference(&self.reserved)
        } else {
            self.topology().all_cpus().clone()
        }
    }

    /// What [`State::check_invariants`] needs for this policy.
    #[must_use]
    pub fn expected<'a>(&'a self, all: &'a CpuSet) -> Expected<'a> {
        Expected::new(all, &self.reserved, self.options.strict_cpu_reservation)
    }

    /// kubelet `Start` / `validateState`, with kubelet's checks and texts in
    /// kubelet's order. An empty state is initialised (shared = all CPUs,
    /// minus reserved when strict).
    pub fn start(&self, state: &mut State) -> Result<(), PolicyError> {
        self.start_with(state, &crate::state::PodCpus::new())
    }

    /// [`StaticPolicy::start`] with pod-level CPU sets (kubelet counts them
    /// among the known CPUs when `PodLevelResourceManagers` is on).
    pub fn start_with(
        &self,
        state: &mut State,
        pod_cpus: &crate::state::PodCpus,
    ) -> Result<(), PolicyError> {
        let all = self.pool_cpus();
        if state.default.is_empty() {
            if !state.assignments.is_empty() {
                return Err(PolicyError::DefaultEmpty);
            }
            state.default = all;
            return Ok(());
        }
        if self.options.strict_cpu_reservation {
            let present = self.reserved.intersection(&state.default);
            if !present.is_empty() {
                return Err(PolicyError::StrictReservedInDefault {
                    reserved: present.to_string(),
                    default: state.default.to_string(),
                });
            }
        } else if !self.reserved.is_subset(&state.default) {
            return Err(PolicyError::ReservedNotInDefault {
                reserved: self.reserved.to_string(),
                default: state.default.to_string(),
            });
        }
        for (pod, containers) in &state.assignments {
            for (container, cpus) in containers {
                if !cpus.is_disjoint(&state.default) {
                    return Err(PolicyError::AssignmentOverlapsDefault {
                        pod: pod.clone(),
                        container: container.clone(),
                        cpus: cpus.to_string(),
                        default: state.default.to_string(),
                    });
                }
            }
        }
        Self::check_pods_apart(state)?;
        Self::check_pod_cpus(state, pod_cpus)?;
        let mut known = state.default.union(&state.exclusive_cpus());
        for cpus in pod_cpus.values() {
            known.union_with(cpus);
        }
        if known != all {
            return Err(PolicyError::CpusChanged {
                online: all.to_string(),
                state: known.to_string(),
            });
        }
        Ok(())
    }

    /// No CPU is held by containers of two pods (containers of one pod may
    /// share: app containers reuse their init containers' CPUs). Pinion's
    /// own check, after kubelet's: a state written by a kubelet that handed
    /// a CPU out twice (hybrid machines) is refused here, and migrated or
    /// rebuilt as any other state the start refuses.
    fn check_pods_apart(state: &State) -> Result<(), PolicyError> {
        let mut held = CpuSet::new();
        for (pod, containers) in &state.assignments {
            for (container, cpus) in containers {
                if cpus.is_disjoint(&held) {
                    continue;
                }
                let earlier = state.assignments.iter().take_while(|(p, _)| *p != pod);
                for (other, theirs) in earlier {
                    for (other_container, their_cpus) in theirs {
                        let shared = cpus.intersection(their_cpus);
                        if !shared.is_empty() {
                            return Err(PolicyError::AssignmentsShared {
                                holder: format!("pod: {pod}, container: {container}"),
                                cpus: cpus.to_string(),
                                shared: shared.to_string(),
                                other: format!("pod: {other}, container: {other_container}"),
                            });
                        }
                    }
                }
            }
            for cpus in containers.values() {
                held.union_with(cpus);
            }
        }
        Ok(())
    }

    /// Pod-level CPU sets are out of the shared pool and of each other, and
    /// hold their pods' containers (Pinion's own check: kubelet's v1.36
    /// `validateState` does not look at `podEntries`).
    fn check_pod_cpus(state: &State, pod_cpus: &crate::state::PodCpus) -> Result<(), PolicyError> {
        let mut seen: Vec<(&String, &CpuSet)> = Vec::new();
        for (pod, cpus) in pod_cpus {
            if !cpus.is_disjoint(&state.default) {
                return Err(PolicyError::PodCpusOverlapDefault {
                    pod: pod.clone(),
                    cpus: cpus.to_string(),
                    default: state.default.to_string(),
                });
            }
            if let Some((other, shared)) = seen
                .iter()
                .map(|(other, theirs)| (*other, cpus.intersection(theirs)))
                .find(|(_, shared)| !shared.is_empty())
            {
                return Err(PolicyError::PodCpusOverlap {
                    pod: pod.clone(),
                    other: other.clone(),
                    cpus: shared.to_string(),
                });
            }
            seen.push((pod, cpus));
            for (container, held) in state.assignments.get(pod).into_iter().flatten() {
                if !held.is_subset(cpus) {
                    return Err(PolicyError::AssignmentOutsidePodCpus {
                        pod: pod.clone(),
                        container: container.clone(),
                        cpus: held.to_string(),
                        pod_cpus: cpus.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// kubelet `Allocate`: exclusive CPUs for `request` inside the NUMA
    /// affinity (if any). Returns the container's exclusive CPUs, or `None`
    /// when it runs in the shared pool.
    pub fn allocate(
        &mut self,
        state: &mut State,
        request: &ContainerRequest<'_>,
        numa_affinity: Option<&[u32]>,
    ) -> Result<Option<CpuSet>, PolicyError> {
        let n = request.cpus;
        if n == 0 {
            return Ok(None);
        }
        if self.options.full_pcpus_only {
            self.check_smt_alignment(state, n)?;
        }
        if let Some(cpus) = state.assignment(request.pod, request.container).cloned() {
            self.update_reuse(request, &cpus);
            return Ok(Some(cpus));
        }
        let reusable = self.reuse.get(request.pod).cloned().unwrap_or_default();
        let cpus = self.allocate_asked(state, n, numa_affinity, &reusable, request.ask)?;
        state.assign(request.pod, request.container, cpus.clone());
        self.update_reuse(request, &cpus);
        Ok(Some(cpus))
    }

    /// kubelet `enforceSMTAlignment` (`full-pcpus-only`).
    pub(super) fn check_smt(&self, state: &State, n: usize) -> Result<(), PolicyError> {
        if self.options.full_pcpus_only {
            self.check_smt_alignment(state, n)?;
        }
        Ok(())
    }

    fn check_smt_alignment(&self, state: &State, n: usize) -> Result<(), PolicyError> {
        let per_core = self.topology().cpus_per_core();
        if per_core == 0 || !n.is_multiple_of(per_core) {
            return Err(PolicyError::SmtNotMultiple {
                requested: n,
                cpus_per_core: per_core,
            });
        }
        let available = self.available_physical(state);
        if n > available {
            return Err(PolicyError::SmtNotEnoughPhysical {
                available,
                requested: n,
                cpus_per_core: per_core,
            });
        }
        Ok(())
    }

    /// kubelet `GetAvailablePhysicalCPUs` (size): shared CPUs outside the
    /// cores of the reserved CPUs.
    pub(super) fn available_physical(&self, state: &State) -> usize {
        state.default.difference(&self.reserved_physical).len()
    }

    /// The allocation algorithm the options select.
    pub(super) fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// [`StaticPolicy::aligned_cpus`] for the resize path.
    pub(super) fn aligned_cpus_in(&self, nodes: &[u32], allocatable: &CpuSet) -> CpuSet {
        self.aligned_cpus(nodes, allocatable)
    }

    /// kubelet `allocateCPUs` (for the pod-level path).
    pub(super) fn allocate_cpus_for(
        &self,
        state: &mut State,
        n: usize,
        numa_affinity: Option<&[u32]>,
        reusable: &CpuSet,
    ) -> Result<CpuSet, PolicyError> {
        self.allocate_cpus(state, n, numa_affinity, reusable)
    }

    /// `takeByTopology` over `available` with the policy's algorithm.
    pub(super) fn take_from(&self, available: &CpuSet, n: usize) -> Result<CpuSet, PolicyError> {
        Ok(self.take(available, n)?)
    }

    /// kubelet `allocateCPUs` for a plain request.
    fn allocate_cpus(
        &self,
        state: &mut State,
        n: usize,
        numa_affinity: Option<&[u32]>,
        reusable: &CpuSet,
    ) -> Result<CpuSet, PolicyError> {
        self.allocate_asked(state, n, numa_affinity, reusable, CpuAsk::default())
    }

    /// kubelet `allocateCPUs` (aligned CPUs first, then the rest) with
    /// Pinion's asks: boot-isolated CPUs are handed out only to containers
    /// that ask for them (`require`: only those; `prefer`: those first),
    /// and whole uncore caches to those that ask for them. On a machine
    /// without isolated CPUs a plain request is exactly kubelet's.
    fn allocate_asked(
        &self,
        state: &mut State,
        n: usize,
        numa_affinity: Option<&[u32]>,
        reusable: &CpuSet,
        ask: CpuAsk,
    ) -> Result<CpuSet, PolicyError> {
        let allocatable = state.default.difference(&self.reserved).union(reusable);
        let isolated = self.topology().isolated();
        let ordinary = allocatable.difference(isolated);
        let free_isolated = allocatable.intersection(isolated);
        let result = match (ask.uncore, ask.isolated) {
            (UncoreAsk::Exclusive { round_up }, isolation) => {
                let allowed = match isolation {
                    IsolatedAsk::No => &ordinary,
                    IsolatedAsk::Prefer => &allocatable,
                    IsolatedAsk::Require => &free_isolated,
                };
                take_whole_uncores(self.topology(), allowed, n, round_up, numa_affinity)?
            }
            (UncoreAsk::Any, IsolatedAsk::No) => self.take_aligned(&ordinary, n, numa_affinity)?,
            (UncoreAsk::Any, IsolatedAsk::Require) => {
                if free_isolated.len() < n {
                    return Err(PolicyError::IsolatedShortfall {
                        requested: n,
                        free: free_isolated.len(),
                        shortfall: n - free_isolated.len(),
                        isolated: listed(isolated),
                    });
                }
                self.take_aligned(&free_isolated, n, numa_affinity)?
            }
            (UncoreAsk::Any, IsolatedAsk::Prefer) => {
                let first = n.min(free_isolated.len());
                let mut cpus = self.take_aligned(&free_isolated, first, numa_affinity)?;
                let rest = self.take_aligned(&ordinary, n - first, numa_affinity)?;
                cpus.union_with(&rest);
                cpus
            }
        };
        let shared = state.default.difference(&result);
        // Every reserved CPU offline (CPU hot-plug): nothing else keeps a
        // CPU in the shared pool. (A policy built without a reservation,
        // as kubelet's tests do, allocates as kubelet does.)
        if shared.is_empty() && self.reserved.is_empty() && !self.configured_reserved.is_empty() {
            return Err(PolicyError::NoReservedCpuOnline {
                requested: n,
                configured: self.configured_reserved.to_string(),
            });
        }
        if shared.is_empty() && self.options.strict_cpu_reservation {
            return Err(PolicyError::SharedPoolWouldBeEmpty { requested: n });
        }
        if !isolated.is_empty() && !shared.is_empty() && shared.is_subset(isolated) {
            return Err(PolicyError::SharedPoolAllIsolated {
                pool: shared.to_string(),
                isolated: isolated.to_string(),
            });
        }
        state.default = shared;
        Ok(result)
    }

    /// `n` CPUs of `allocatable`: those in the affinity's NUMA nodes first,
    /// then the rest (kubelet `allocateCPUs`' two takes).
    fn take_aligned(
        &self,
        allocatable: &CpuSet,
        n: usize,
        numa_affinity: Option<&[u32]>,
    ) -> Result<CpuSet, PolicyError> {
        let mut result = CpuSet::new();
        if n == 0 {
            return Ok(result);
        }
        if let Some(nodes) = numa_affinity {
            let aligned = self.aligned_cpus(nodes, allocatable);
            let count = n.min(aligned.len());
            result = self.take(&aligned, count)?;
        }
        let rest = self.take(&allocatable.difference(&result), n - result.len())?;
        result.union_with(&rest);
        Ok(result)
    }

    /// The shared pool containers run in: the state's default set without
    /// the CPUs the kernel isolates at boot. Fails when that leaves nothing
    /// (every CPU the pool could use is isolated).
    pub fn shared_pool_of(&self, state: &State) -> Result<CpuSet, PolicyError> {
        shared_without_isolated(&state.default, self.topology().isolated())
    }

    /// Allocatable CPUs in the NUMA nodes of the affinity (with
    /// `align-by-socket`: in the sockets of those NUMA nodes).
    fn aligned_cpus(&self, nodes: &[u32], allocatable: &CpuSet) -> CpuSet {
        let mut scope = CpuSet::new();
        for node in nodes {
            let Some(node_cpus) = self.topology().numa_cpus().get(node) else {
                continue;
            };
            if self.options.align_by_socket {
                for cpu in node_cpus {
                    if let Some(socket) = self.topology().cpu(cpu).map(|c| c.socket) {
                        if let Some(socket_cpus) = self.topology().sockets().get(&socket) {
                            scope.union_with(socket_cpus);
                        }
                    }
                }
            } else {
                scope.union_with(node_cpus);
            }
        }
        scope.intersection(allocatable)
    }

    fn take(&self, available: &CpuSet, n: usize) -> Result<CpuSet, AllocError> {
        take_with_index(self.topology.index(), available, n, self.algorithm)
    }

    /// kubelet `updateCPUsToReuse`.
    fn update_reuse(&mut self, request: &ContainerRequest<'_>, cpus: &CpuSet) {
        self.note_reuse(request.pod, request.kind, cpus);
    }

    /// kubelet's re-admission of pod `pod`, as far as `cpusToReuse` goes:
    /// when the CPUs its init containers pass on are not remembered —
    /// another pod was admitted since (kubelet keeps one pod's), or the
    /// agent restarted — they are what its init containers hold less what
    /// its other containers hold, as kubelet's `Allocate` of each container
    /// leaves them when it admits the pod again (`updateCPUsToReuse`, init
    /// containers first). `kind_of` tells each container's kind by name
    /// (`None`: not known, left out). Kubelet admits a pod's containers one
    /// after the other at once; a runtime creates them one by one (NRI),
    /// and other pods come in between.
    pub fn recall_reuse(
        &mut self,
        state: &State,
        pod: &str,
        kind_of: impl Fn(&str) -> Option<ContainerKind>,
    ) {
        if self.reuse.contains_key(pod) {
            return;
        }
        let Some(held) = state.assignments.get(pod) else {
            return;
        };
        let mut inits = CpuSet::new();
        let mut others = CpuSet::new();
        for (container, cpus) in held {
            match kind_of(container) {
                Some(ContainerKind::Init) => inits.union_with(cpus),
                Some(ContainerKind::Sidecar | ContainerKind::App) => others.union_with(cpus),
                None => {}
            }
        }
        self.note_reuse(pod, ContainerKind::Init, &inits);
        self.note_reuse(pod, ContainerKind::App, &others);
    }

    /// kubelet `updateCPUsToReuse` for container `kind` of `pod`.
    pub(super) fn note_reuse(&mut self, pod: &str, kind: ContainerKind, cpus: &CpuSet) {
        self.reuse.retain(|p, _| p == pod);
        let entry = self.reuse.entry(pod.to_string()).or_default();
        if kind == ContainerKind::Init {
            entry.union_with(cpus);
        } else {
            entry.difference_with(cpus);
        }
    }

    /// kubelet `RemoveContainer`: returns to the shared pool the CPUs of the
    /// container that no other container of the same pod holds. Unknown
    /// containers are a no-op. Returns the CPUs given back.
    pub fn remove_container(&self, state: &mut State, pod: &str, container: &str) -> CpuSet {
        let Some(cpus) = state.unassign(pod, container) else {
            return CpuSet::new();
        };
        let mut in_use = CpuSet::new();
        if let Some(siblings) = state.assignments.get(pod) {
            for held in siblings.values() {
                in_use.union_with(held);
            }
        }
        let released = cpus.difference(&in_use);
        state.default.union_with(&released);
        released
    }
}

/// `default` without `isolated`, or the error naming both when nothing
/// is left.
pub(crate) fn shared_without_isolated(
    default: &CpuSet,
    isolated: &CpuSet,
) -> Result<CpuSet, PolicyError> {
    let shared = default.difference(isolated);
    if shared.is_empty() && !default.is_empty() {
        return Err(PolicyError::SharedPoolAllIsolated {
            pool: default.to_string(),
            isolated: isolated.to_string(),
        });
    }
    Ok(shared)
}

fn listed(cpus: &CpuSet) -> String {
    if cpus.is_empty() {
        "none".to_owned()
    } else {
        cpus.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{synthetic, Shape};

    fn list(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    /// 4 cores × 2 threads: core n = CPUs n and n+4.
    fn machine() -> Topology {
        synthetic(Shape {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads_per_core: 2,
            cores_per_uncore: 0,
        })
    }

    fn strict() -> StaticPolicyOptions {
        StaticPolicyOptions {
            strict_cpu_reservation: true,
            ..Default::default()
        }
    }

    fn app(pod: &'static str, cpus: usize) -> ContainerRequest<'static> {
        ContainerRequest {
            pod,
            container: "app",
            cpus,
            kind: ContainerKind::App,
            ask: Default::default(),
        }
    }

    /// A CPU held by containers of two pods (what a kubelet on a hybrid
    /// machine writes) passed kubelet's start checks, and from then on two
    /// workloads were told the CPU was theirs alone. Containers of one pod
    /// may still share (an app container reusing its init container's).
    #[test]
    fn regression_a_state_with_a_cpu_held_by_two_pods_does_not_start() {
        let policy = StaticPolicy::new(
            machine(),
            StaticPolicyOptions::default(),
            &Reservation {
                count: 1,
                cpus: list("0"),
            },
        )
        .expect("policy");
        let mut state = State {
            default: list("0,3-4,7"),
            ..State::default()
        };
        state.assign("pod-a", "init", list("1-2"));
        state.assign("pod-a", "app", list("1-2,5"));
        state.assign("pod-b", "app", list("6"));
        policy
            .start(&mut state.clone())
            .expect("one pod's containers may share");
        state.assign("pod-c", "app", list("2,6"));
        let err = policy
            .start(&mut state)
            .expect_err("cpus 2 and 6 are held twice");
        assert_eq!(
            err.to_string(),
            "pod: pod-c, container: app cpuset: \"2,6\" shares cpus \"2\" with pod: pod-a, container: app"
        );
    }

    #[test]
    fn reserved_count_takes_whole_low_cores_like_kubelet() {
        let policy = StaticPolicy::new(
            machine(),
            StaticPolicyOptions::default(),
            &Reservation {
                count: 2,
                cpus: CpuSet::new(),
            },
        );
        assert_eq!(policy.expect("policy").reserved(), &list("0,4"));
    }

    #[test]
    fn reserved_cpus_must_be_online() {
        let err = StaticPolicy::new(
            machine(),
            StaticPolicyOptions::default(),
            &Reservation {
                count: 1,
                cpus: list("9"),
            },
        );
        assert_eq!(
            err.expect_err("cpu 9 does not exist"),
            PolicyError::ReservedNotOnline { cpus: "9".into() }
        );
    }

    /// Regression: with strict-cpu-reservation a reservation of every CPU
    /// left the shared pool empty (found by the engine invariant property test).
    #[test]
    fn strict_reservation_of_every_cpu_is_refused() {
        let err = StaticPolicy::new(
            machine(),
            strict(),
            &Reservation {
                count: 8,
                cpus: CpuSet::new(),
            },
        );
        assert_eq!(
            err.expect_err("no shared cpu"),
            PolicyError::NoSharedCpus {
                reserved: "0-7".into()
            }
        );
    }

    /// Regression: with strict-cpu-reservation kubelet hands out the last
    /// shared CPU; Pinion refuses and keeps the state unchanged.
    #[test]
    fn strict_allocation_never_takes_the_last_shared_cpu() {
        let mut policy = StaticPolicy::new(
            machine(),
            strict(),
            &Reservation {
                count: 2,
                cpus: CpuSet::new(),
            },
        )
        .expect("policy");
        let mut state = State::default();
        policy.start(&mut state).expect("start");
        assert_eq!(state.default, list("1-3,5-7"));
        assert_eq!(
            policy.allocate(&mut state, &app("a", 4), None),
            Ok(Some(list("1-2,5-6")))
        );
        let before = state.clone();
        let err = policy
            .allocate(&mut state, &app("b", 2), None)
            .expect_err("would empty the pool");
        assert_eq!(err, PolicyError::SharedPoolWouldBeEmpty { requested: 2 });
        assert_eq!(state, before);
        assert_eq!(
            policy.allocate(&mut state, &app("b", 1), None),
            Ok(Some(list("3")))
        );
    }

    #[test]
    fn zero_cpu_request_runs_in_the_shared_pool() {
        let mut policy = StaticPolicy::new(
            machine(),
            StaticPolicyOptions::default(),
            &Reservation {
                count: 1,
                cpus: CpuSet::new(),
            },
        )
        .expect("policy");
        let mut state = State::default();
        policy.start(&mut state).expect("start");
        assert_eq!(policy.allocate(&mut state, &app("a", 0), None), Ok(None));
        assert!(state.assignments.is_empty());
    }
}
