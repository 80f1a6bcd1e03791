//! Pods with pod-level resources (`PodLevelResourceManagers`, KEP-5526)
//! inside the engine: the front-end registers a pod's pod-level resources
//! ([`Engine::set_pod_resources`]); admissions then follow kubelet:
//!
//! * switch off: the CPU manager skips the pod (no hints, shared pool);
//! * switch on, Topology Manager scope `pod` with a policy other than
//!   `none` (or an explicit NUMA affinity): the first container admitted
//!   triggers the pod's single merge and `AllocatePod` (the whole pod's
//!   CPUs, partitioned); later containers get their part;
//! * switch on, any other Topology Manager setting: containers are admitted
//!   one by one, and only those whose own resources are Guaranteed get
//!   exclusive CPUs (from the node).
//!
//! Removing a container of such a pod releases nothing until its last
//! container is removed; then the pod's CPUs go back to the shared pool.

use super::metrics::{self, AlignBoundary, AlignScope, AllocationSource};
use super::{AdmitReport, CpuOwner, Engine};
use crate::cpuset::CpuSet;
use crate::pod::{Pod, PodLevel, PodResources};
use crate::policy::hints::Operation;
use crate::policy::{Policy, PolicyError};
use crate::topomgr::provider::HintProvider;
use crate::topomgr::{Policy as TmPolicy, Scope};

impl Engine {
    /// Registers the pod-level resources (`spec.resources`) of pod `uid`
    /// (`None` forgets them). Call before admitting the pod's containers.
    pub fn set_pod_resources(&mut self, uid: &str, resources: Option<PodResources>) {
        match resources {
            Some(resources) => {
                self.pod_resources.insert(uid.to_owned(), resources);
            }
            None => {
                self.pod_resources.remove(uid);
            }
        }
    }

    /// The pod-level resources registered for pod `uid`.
    #[must_use]
    pub fn pod_resources(&self, uid: &str) -> Option<&PodResources> {
        self.pod_resources.get(uid)
    }

    /// How pod `uid` is treated: see [`PodLevel`].
    pub(super) fn pod_level(&self, uid: &str) -> PodLevel {
        let Policy::Static(policy) = &self.policy else {
            return PodLevel::None;
        };
        PodLevel::of(
            self.pod_resources.get(uid),
            policy.features().pod_level_resource_managers,
        )
    }

    /// Whether pod `uid` is admitted as a whole (`AllocatePod`).
    pub(super) fn allocates_pod_as_a_whole(&self, uid: &str, explicit_affinity: bool) -> bool {
        self.pod_level(uid) == PodLevel::Managed
            && (explicit_affinity
                || (self.topology.scope() == Scope::Pod
                    && self.topology.policy() != TmPolicy::None))
    }

    /// Admits container `name` of a pod allocated as a whole: the pod's
    /// first container triggers the merge (unless `affinity` is given) and
    /// the allocation; later ones get their part.
    pub(super) fn admit_pod_level(
        &mut self,
        pod: &Pod,
        name: &str,
        providers: &[&dyn HintProvider],
        affinity: Option<&[u32]>,
    ) -> AdmitReport {
        if pod.container(name).is_none() {
            let err = PolicyError::UnknownContainer {
                pod: pod.uid.clone(),
                container: name.to_owned(),
            };
            return AdmitReport {
                result: Err(err),
                topology: None,
            };
        }
        if self.pod_cpus.contains_key(&pod.uid) || self.pod_admitted_shared(pod) {
            let result = match self.state.assignment(&pod.uid, name) {
                Some(cpus) => Ok(Some(cpus.clone())),
                None => self.admit_late_container(pod, name),
            };
            self.debug_check();
            return AdmitReport {
                result,
                topology: None,
            };
        }
        let mut decision = None;
        let hint_affinity: Option<Vec<u32>> = match affinity {
            Some(nodes) => Some(nodes.to_vec()),
            None => {
                self.metrics.topology.requests_total += 1;
                decision = self.decide(pod, name, providers, CpuOwner::Policy, Operation::Add);
                let hint = decision.as_ref().map(|d| d.hint);
                if decision.as_ref().is_some_and(|d| !d.admit) {
                    self.metrics.topology.errors_total += 1;
                    if self.topology.policy() == TmPolicy::SingleNumaNode {
                        self.metrics
                            .aligned_failures
                            .inc(AlignScope::Pod, AlignBoundary::NumaNode);
                    }
                    return AdmitReport {
                        result: Err(PolicyError::topology_refusal(true, true)),
                        topology: decision,
                    };
                }
                hint.and_then(|h| h.affinity).map(|mask| mask.ids())
            }
        };
        let result = self.allocate_pod(pod, hint_affinity.as_deref());
        if result.is_err() && affinity.is_none() {
            self.metrics.topology.errors_total += 1;
        }
        if let Some(hint) = decision.as_ref().map(|d| d.hint) {
            if result.is_ok() {
                for container in pod.all_containers() {
                    self.store_affinity(pod, &container.name, hint);
                }
                if self.topology.policy() == TmPolicy::SingleNumaNode {
                    self.metrics
                        .aligned
                        .inc(AlignScope::Pod, AlignBoundary::NumaNode);
                }
            }
        }
        self.debug_check();
        AdmitReport {
            result: result.map(|()| self.state.assignment(&pod.uid, name).cloned()),
            topology: decision,
        }
    }

    /// A container of a pod holding its CPU set that was not part of the
    /// pod's partition (it arrived later, see
    /// [`StaticPolicy::admit_late_container`](crate::policy::StaticPolicy::admit_late_container));
    /// `Ok(None)` for a pod without CPUs of its own.
    fn admit_late_container(
        &mut self,
        pod: &Pod,
        name: &str,
    ) -> Result<Option<CpuSet>, PolicyError> {
        let (Policy::Static(policy), Some(pod_cpus), Some(resources)) = (
            &self.policy,
            self.pod_cpus.get(&pod.uid),
            self.pod_resources.get(&pod.uid),
        ) else {
            return Ok(None);
        };
        let cpus = policy.admit_late_container(&mut self.state, pod, resources, pod_cpus, name)?;
        if let Some(hint) = self
            .affinities
            .get(&pod.uid)
            .and_then(|containers| containers.values().next().copied())
        {
            self.store_affinity(pod, name, hint);
        }
        Ok(Some(cpus))
    }

    /// Whether `pod` went through `AllocatePod` and got no CPUs of its own
    /// (every container in the node's shared pool).
    fn pod_admitted_shared(&self, pod: &Pod) -> bool {
        self.affinities.contains_key(&pod.uid) && !self.pod_cpus.contains_key(&pod.uid)
    }

    /// kubelet `AllocatePod` with its counters; the state is unchanged on
    /// error.
    fn allocate_pod(&mut self, pod: &Pod, affinity: Option<&[u32]>) -> Result<(), PolicyError> {
        let Policy::Static(policy) = &self.policy else {
            return Ok(());
        };
        let Some(resources) = self.pod_resources.get(&pod.uid) else {
            return Ok(());
        };
        match policy.allocate_pod(&mut self.state, pod, resources, affinity) {
            Ok(None) => Ok(()),
            Ok(Some(allocation)) => {
                let m = &mut self.metrics;
                m.pinning_requests_total += allocation.exclusive_requests as u64;
                if metrics::uncore_aligned(policy.topology(), &allocation.pod_cpus) {
                    m.aligned
                        .inc(AlignScope::Container, AlignBoundary::UncoreCache);
                }
                for (_, _, kind) in &allocation.containers {
                    m.resource_manager.add_assignment(*kind);
                    m.resource_manager.add_allocation(AllocationSource::Pod);
                }
                self.pod_cpus.insert(pod.uid.clone(), allocation.pod_cpus);
                Ok(())
            }
            Err(err) => {
                self.metrics.pinning_errors_total += 1;
                self.metrics
                    .resource_manager
                    .add_error(AllocationSource::Pod);
                Err(err)
            }
        }
    }

    /// kubelet `RemoveContainer` for a pod with its own CPUs: the pod's CPUs
    /// go back to the shared pool with its last container.
    pub(super) fn remove_pod_level(&mut self, pod: &str, container: &str) -> CpuSet {
        self.state.unassign(pod, container);
        if self.state.assignments.contains_key(pod) {
            return CpuSet::new();
        }
        let released = self.pod_cpus.remove(pod).unwrap_or_default();
        self.state.default.union_with(&released);
        released
    }
}
