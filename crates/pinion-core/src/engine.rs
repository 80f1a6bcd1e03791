//! The engine: one policy and the state it decides over, plus the counters
//! kubelet exports for it. Front-ends (simulator, agent) drive the engine with
//! admissions and removals; the engine never performs I/O — callers persist
//! [`Engine::state`] before acting on a decision.
//!
//! Admissions go through the Topology Manager (module [`topology`]) unless
//! the caller gives the NUMA affinity explicitly.

pub mod topology;

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::pod::{guaranteed_cpus, Container, Pod};
use crate::policy::{ContainerKind, ContainerRequest, Policy, PolicyError};
use crate::state::State;
use crate::topomgr::metrics::AdmissionMetrics;
use crate::topomgr::{TopologyHint, TopologyManager};

pub use topology::{AdmitReport, TopologyDecision};

/// Counters of the CPU manager (kubelet names, see `docs/metrics.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metrics {
    /// `cpu_manager_pinning_requests_total`: admissions asking for exclusive CPUs.
    pub pinning_requests_total: u64,
    /// `cpu_manager_pinning_errors_total`: those that failed.
    pub pinning_errors_total: u64,
    /// `topology_manager_admission_*` (see [`AdmissionMetrics`]).
    pub topology: AdmissionMetrics,
}

/// Policy + Topology Manager + state + metrics, with a single owner.
#[derive(Debug, Clone)]
pub struct Engine {
    policy: Policy,
    topology: TopologyManager,
    /// Stored affinity per pod UID → container (kubelet `GetAffinity`).
    affinities: BTreeMap<String, BTreeMap<String, TopologyHint>>,
    state: State,
    metrics: Metrics,
    started: bool,
}

impl Engine {
    /// An engine over `state` (not yet validated: call [`Engine::start`]),
    /// with the `none` Topology Manager.
    #[must_use]
    pub fn new(policy: Policy, state: State) -> Self {
        Self {
            policy,
            topology: TopologyManager::none(),
            affinities: BTreeMap::new(),
            state,
            metrics: Metrics::default(),
            started: false,
        }
    }

    /// Validates (or initialises) the state with the policy's rules.
    pub fn start(&mut self) -> Result<(), PolicyError> {
        self.policy.start(&mut self.state)?;
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
            Some(_) => {
                let request = container_request(pod, name)?;
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
        let result = self
            .policy
            .allocate(&mut self.state, request, numa_affinity);
        if result.is_err() && exclusive {
            self.metrics.pinning_errors_total += 1;
        }
        self.debug_check();
        result
    }

    /// Releases one container; returns the CPUs that went back to the
    /// shared pool (empty for unknown containers).
    pub fn remove(&mut self, pod: &str, container: &str) -> CpuSet {
        self.forget_affinity(pod, container);
        let released = self
            .policy
            .remove_container(&mut self.state, pod, container);
        self.debug_check();
        released
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

    /// The counters.
    #[must_use]
    pub fn metrics(&self) -> Metrics {
        self.metrics
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
        self.state.check_invariants(policy.expected(all))
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

/// The admission request of container `name` of `pod`.
fn container_request<'a>(pod: &'a Pod, name: &'a str) -> Result<ContainerRequest<'a>, PolicyError> {
    let (container, kind) =
        find_container(pod, name).ok_or_else(|| PolicyError::UnknownContainer {
            pod: pod.uid.clone(),
            container: name.to_string(),
        })?;
    Ok(ContainerRequest {
        pod: &pod.uid,
        container: name,
        cpus: guaranteed_cpus(pod, container),
        kind,
    })
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
