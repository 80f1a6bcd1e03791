//! The engine: one policy and the state it decides over, plus the counters
//! kubelet exports for it. Front-ends (simulator, agent) drive the engine with
//! admissions and removals; the engine never performs I/O — callers persist
//! [`Engine::state`] before acting on a decision.
//!
//! Admissions go through the Topology Manager (module [`topology`]) unless
//! the caller gives the NUMA affinity explicitly.

pub mod metrics;
mod pod_level;
mod resize;
pub mod topology;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cpuset::CpuSet;
use crate::placement::Placement;
use crate::pod::{guaranteed_cpus_in, Container, Pod, PodResources};
use crate::policy::static_policy::shared_without_isolated;
use crate::policy::{ContainerKind, ContainerRequest, CpuAsk, Policy, PolicyError};
use crate::state::{PodCpus, State};
use crate::topology::Topology;
use crate::topomgr::metrics::AdmissionMetrics;
use crate::topomgr::{TopologyHint, TopologyManager};

pub use metrics::{
    AlignBoundary, AlignScope, AlignmentCounts, AllocationSource, AssignmentType, CpuGauges,
    ResourceManagerCounts,
};
pub use topology::{admission_before_engine, AdmitReport, CpuOwner, TopologyDecision};

/// Counters of the CPU and Topology Managers (kubelet names, see
/// `docs/metrics.md` and [`metrics`] for when each one counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metrics {
    /// `cpu_manager_pinning_requests_total`: admissions asking for exclusive CPUs.
    pub pinning_requests_total: u64,
    /// `cpu_manager_pinning_errors_total`: those that failed.
    pub pinning_errors_total: u64,
    /// `container_aligned_compute_resources_count{scope,boundary}`.
    pub aligned: AlignmentCounts,
    /// `container_aligned_compute_resources_failure_count{scope,boundary}`.
    pub aligned_failures: AlignmentCounts,
    /// `resource_manager_allocations_total`, `…_allocation_errors_total`,
    /// `…_container_assignments` for `resource_name="cpu"`.
    pub resource_manager: ResourceManagerCounts,
    /// `topology_manager_admission_*` (see [`AdmissionMetrics`]).
    pub topology: AdmissionMetrics,
}

/// Policy + Topology Manager + state + metrics, with a single owner.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The machine (shared with the static policy: cloning the engine does
    /// not copy it).
    machine: Arc<Topology>,
    policy: Policy,
    topology: TopologyManager,
    /// Stored affinity per pod UID → container (kubelet `GetAffinity`).
    affinities: BTreeMap<String, BTreeMap<String, TopologyHint>>,
    state: State,
    /// Pod-level resources registered by the front-end, by pod UID.
    pod_resources: BTreeMap<String, PodResources>,
    /// Pod-level CPU sets (kubelet's checkpoint `podEntries`): pod UID →
    /// the CPUs allocated to the pod as a whole (pod-level resources).
    pod_cpus: PodCpus,
    /// The CPUs a resized container was first given (KEP-5554's "promised"
    /// CPUs), for containers resized at least once.
    promised: BTreeMap<String, BTreeMap<String, CpuSet>>,
    metrics: Metrics,
    started: bool,
}

impl Engine {
    /// An engine for `machine` over `state` (not yet validated: call
    /// [`Engine::start`]), with the `none` Topology Manager. The static
    /// policy's own copy of the machine is shared rather than cloned.
    #[must_use]
    pub fn new(machine: &Topology, policy: Policy, state: State) -> Self {
        let machine = match &policy {
            Policy::Static(policy) => policy.shared_topology(),
            Policy::None => Arc::new(machine.clone()),
        };
        Self {
            machine,
            policy,
            topology: TopologyManager::none(),
            affinities: BTreeMap::new(),
            state,
            pod_resources: BTreeMap::new(),
            pod_cpus: PodCpus::new(),
            promised: BTreeMap::new(),
            metrics: Metrics::default(),
            started: false,
        }
    }

    /// The same engine with restored pod-level CPU sets (what a front-end
    /// persisted from [`Engine::pod_cpus`]); call before [`Engine::start`].
    #[must_use]
    pub fn with_pod_cpus(mut self, pod_cpus: PodCpus) -> Self {
        self.pod_cpus = pod_cpus;
        self
    }

    /// The same engine with restored promised CPUs of resized containers
    /// (what a front-end persisted from [`Engine::promised_cpus`]).
    #[must_use]
    pub fn with_promised_cpus(
        mut self,
        promised: BTreeMap<String, BTreeMap<String, CpuSet>>,
    ) -> Self {
        self.promised = promised;
        self
    }

    /// Validates (or initialises) the state with the policy's rules, and
    /// refuses a machine whose shared pool would hold only CPUs the kernel
    /// isolates at boot ([`PolicyError::SharedPoolAllIsolated`]).
    pub fn start(&mut self) -> Result<(), PolicyError> {
        self.policy.start_with(&mut self.state, &self.pod_cpus)?;
        shared_without_isolated(&self.pool_base(), self.machine.isolated())?;
        self.started = true;
        self.debug_check();
        Ok(())
    }

    /// The same engine with Topology Manager `manager`.
    #[must_use]
    pub fn with_topology_manager(mut self, manager: TopologyManager) -> Self {
        self.topology = manager;
        self
    }

    /// Admits container `name` of `pod` (the entry point of every front-end):
    /// computes its exclusive CPU count and role from the pod spec, then
    /// [`Engine::admit`]s it. An explicit `numa_affinity` is used as given;
    /// `None` asks the Topology Manager (with the CPU manager as the only
    /// hint provider, see [`Engine::admit_container_with`]). Fails with
    /// [`PolicyError::UnknownContainer`] when the pod has no such container
    /// and [`PolicyError::TopologyAffinity`] when the Topology Manager
    /// rejects it.
    pub fn admit_container(
        &mut self,
        pod: &Pod,
        name: &str,
        numa_affinity: Option<&[u32]>,
    ) -> Result<Option<CpuSet>, PolicyError> {
        match numa_affinity {
            Some(nodes) if self.allocates_pod_as_a_whole(&pod.uid, true) => {
                self.admit_pod_level(pod, name, &[], Some(nodes)).result
            }
            Some(_) => {
                let request = self.container_request(pod, name)?;
                self.admit(&request, numa_affinity)
            }
            None => self.admit_container_with(pod, name, &[]).result,
        }
    }

    /// Admits one container: `Ok(Some(cpus))` for exclusive CPUs, `Ok(None)`
    /// for the shared pool. On error the state is unchanged.
    pub fn admit(
        &mut self,
        request: &ContainerRequest<'_>,
        numa_affinity: Option<&[u32]>,
    ) -> Result<Option<CpuSet>, PolicyError> {
        let exclusive = request.cpus > 0 && matches!(self.policy, Policy::Static(_));
        if exclusive {
            self.metrics.pinning_requests_total += 1;
        }
        let fresh = self
            .state
            .assignment(request.pod, request.container)
            .is_none();
        let result = self
            .policy
            .allocate(&mut self.state, request, numa_affinity);
        if exclusive {
            self.count_allocation(&result, fresh);
        }
        self.debug_check();
        result
    }

    /// The CPUs pod `pod`'s init containers pass on to its later
    /// containers, recalled when another pod's admission or a restart made
    /// the policy forget them ([`crate::policy::StaticPolicy::recall_reuse`],
    /// `kind_of` naming each container's kind): what kubelet's admission of
    /// a whole pod keeps. For callers that admit a pod's containers one by
    /// one as a runtime creates them (the agent); not done by the
    /// admissions themselves, which follow kubelet's `Allocate` call by call
    /// (`pinion simulate`, the conformance tables).
    pub fn recall_reuse(&mut self, pod: &str, kind_of: impl Fn(&str) -> Option<ContainerKind>) {
        if let Policy::Static(policy) = &mut self.policy {
            policy.recall_reuse(&self.state, pod, kind_of);
        }
    }

    /// kubelet's CPU manager counters after one exclusive admission:
    /// `fresh` when the container held no CPUs before.
    fn count_allocation(&mut self, result: &Result<Option<CpuSet>, PolicyError>, fresh: bool) {
        let Policy::Static(policy) = &self.policy else {
            return;
        };
        let full_pcpus = policy.options().full_pcpus_only;
        let m = &mut self.metrics;
        match result {
            Err(_) => {
                m.pinning_errors_total += 1;
                m.resource_manager.add_error(AllocationSource::Node);
                if full_pcpus {
                    m.aligned_failures
                        .inc(AlignScope::Container, AlignBoundary::PhysicalCpu);
                }
            }
            Ok(cpus) => {
                if full_pcpus {
                    m.aligned
                        .inc(AlignScope::Container, AlignBoundary::PhysicalCpu);
                }
                if let (true, Some(cpus)) = (fresh, cpus) {
                    if metrics::uncore_aligned(policy.topology(), cpus) {
                        m.aligned
                            .inc(AlignScope::Container, AlignBoundary::UncoreCache);
                    }
                    m.resource_manager.add_allocation(AllocationSource::Node);
                    m.resource_manager
                        .add_assignment(AssignmentType::ExclusiveFromNode);
                }
            }
        }
    }

    /// Releases one container; returns the CPUs that went back to the
    /// shared pool (empty for unknown containers).
    pub fn remove(&mut self, pod: &str, container: &str) -> CpuSet {
        self.forget_affinity(pod, container);
        if let Some(containers) = self.promised.get_mut(pod) {
            containers.remove(container);
            if containers.is_empty() {
                self.promised.remove(pod);
            }
        }
        let released = match self.pod_cpus.get(pod) {
            Some(_) => self.remove_pod_level(pod, container),
            None => self
                .policy
                .remove_container(&mut self.state, pod, container),
        };
        if !self.state.assignments.contains_key(pod)
            && !self.pod_cpus.contains_key(pod)
            && !self.affinities.contains_key(pod)
        {
            self.pod_resources.remove(pod);
        }
        self.debug_check();
        released
    }

    /// The exclusive CPUs container `name` of `pod` asks for (kubelet's
    /// Guaranteed integer request; 0 for the shared pool or when the pod
    /// has no such container).
    #[must_use]
    pub fn exclusive_cpus_asked(&self, pod: &Pod, name: &str) -> usize {
        self.container_request(pod, name)
            .map_or(0, |request| request.cpus)
    }

    /// The admission request of container `name` of `pod` (with the pod's
    /// registered pod-level resources).
    fn container_request<'a>(
        &self,
        pod: &'a Pod,
        name: &'a str,
    ) -> Result<ContainerRequest<'a>, PolicyError> {
        let (container, kind) =
            find_container(pod, name).ok_or_else(|| PolicyError::UnknownContainer {
                pod: pod.uid.clone(),
                container: name.to_string(),
            })?;
        let managers = match &self.policy {
            Policy::Static(policy) => policy.features().pod_level_resource_managers,
            Policy::None => false,
        };
        Ok(ContainerRequest {
            pod: &pod.uid,
            container: name,
            cpus: guaranteed_cpus_in(pod, self.pod_resources.get(&pod.uid), managers, container),
            kind,
            ask: CpuAsk::from_annotations(&pod.annotations)?,
        })
    }

    /// The same engine on `machine`, whose online CPUs changed (CPU
    /// hot-plug) or whose state was rebuilt from the node: `policy` built
    /// for it and `state` with the pod-level CPU sets `pod_cpus` valid for
    /// it ([`crate::hotplug`], [`crate::rebuild`]). Started; the engine
    /// itself is unchanged on error.
    pub fn on_machine(
        &self,
        machine: &Topology,
        policy: Policy,
        state: State,
        pod_cpus: PodCpus,
    ) -> Result<Engine, PolicyError> {
        let mut next = self.clone();
        next.machine = match &policy {
            Policy::Static(policy) => policy.shared_topology(),
            Policy::None => Arc::new(machine.clone()),
        };
        next.policy = policy;
        next.state = state;
        next.pod_cpus = pod_cpus;
        next.start()?;
        Ok(next)
    }

    /// The current state.
    #[must_use]
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The policy.
    #[must_use]
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The machine.
    #[must_use]
    pub fn machine(&self) -> &Topology {
        &self.machine
    }

    /// [`Engine::machine`], shared (no copy of the topology).
    #[must_use]
    pub fn shared_machine(&self) -> Arc<Topology> {
        Arc::clone(&self.machine)
    }

    /// The shared pool: the state's default set under the static policy,
    /// every CPU under `none` (and before the static policy started) —
    /// without the CPUs the kernel isolates at boot (`isolcpus=`), which
    /// only containers that ask for them get. [`Engine::start`] refuses a
    /// machine where that would leave nothing; should it happen anyway, the
    /// pool keeps the isolated CPUs rather than being empty.
    #[must_use]
    pub fn shared_pool(&self) -> CpuSet {
        let base = self.pool_base();
        shared_without_isolated(&base, self.machine.isolated()).unwrap_or(base)
    }

    /// The shared pool before boot-isolated CPUs are taken out.
    fn pool_base(&self) -> CpuSet {
        let default = &self.state.default;
        if default.is_empty() || matches!(self.policy, Policy::None) {
            self.machine.all_cpus().clone()
        } else {
            default.clone()
        }
    }

    /// The placement of container `container` of pod `pod`: its exclusive
    /// CPUs when it holds some, else the shared pool. Any container the
    /// engine does not know runs in the shared pool.
    #[must_use]
    pub fn placement(&self, pod: &str, container: &str) -> Placement {
        match self.state.assignment(pod, container) {
            Some(cpus) => Placement::exclusive(cpus.clone()),
            None => Placement::shared(self.shared_pool()),
        }
    }

    /// The counters.
    #[must_use]
    pub fn metrics(&self) -> Metrics {
        self.metrics
    }

    /// The CPU manager's gauges (shared pool, exclusive CPUs, per NUMA
    /// node) for the current state; all zero under the `none` policy.
    #[must_use]
    pub fn cpu_gauges(&self) -> CpuGauges {
        match &self.policy {
            Policy::Static(policy) => CpuGauges::of(
                &self.state,
                &self.pod_cpus,
                policy.topology(),
                policy.reserved(),
            ),
            Policy::None => CpuGauges::default(),
        }
    }

    /// Pod-level CPU sets (pod UID → CPUs), kubelet's `podEntries`. A
    /// front-end that persists the state must persist these too.
    #[must_use]
    pub fn pod_cpus(&self) -> &PodCpus {
        &self.pod_cpus
    }

    /// The promised (first) CPUs of containers resized in place, pod UID →
    /// container → CPUs. A front-end that persists the state must persist
    /// these too.
    #[must_use]
    pub fn promised_cpus(&self) -> &BTreeMap<String, BTreeMap<String, CpuSet>> {
        &self.promised
    }

    /// Checks the state invariants (static policy with a reservation, after
    /// a successful start). Returns `Ok` when they do not apply.
    pub fn check_invariants(&self) -> Result<(), crate::state::InvariantError> {
        let Policy::Static(policy) = &self.policy else {
            return Ok(());
        };
        if !self.started || policy.reserved().is_empty() {
            return Ok(());
        }
        let all = policy.topology().all_cpus();
        let expected = crate::state::Expected {
            pod_cpus: &self.pod_cpus,
            ..policy.expected(all)
        };
        self.state.check_invariants(expected)
    }

    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            if let Err(err) = self.check_invariants() {
                panic!(
                    "engine broke a state invariant: {err}; state: {:?}",
                    self.state
                );
            }
        }
    }
}

/// The container `name` of `pod` and its role (init / sidecar / app).
#[must_use]
pub fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<(&'a Container, ContainerKind)> {
    if let Some(c) = pod.init_containers.iter().find(|c| c.name == name) {
        let kind = if c.is_restartable() {
            ContainerKind::Sidecar
        } else {
            ContainerKind::Init
        };
        return Some((c, kind));
    }
    pod.containers
        .iter()
        .find(|c| c.name == name)
        .map(|c| (c, ContainerKind::App))
}
