//! Topology Manager admission inside the engine (spec
//! `kubelet-topology-manager.md` §5.2–§5.3): collect the hints of the CPU
//! manager and of the caller's extra [`HintProvider`]s, merge them under the
//! policy and scope, reject with `TopologyAffinityError` or allocate inside
//! the merged affinity, and store it.
//!
//! kubelet admits a whole pod at once; Pinion's front-ends admit one
//! container at a time, in kubelet's order (init containers first). So:
//! * **container scope**: one merge per container, as kubelet;
//! * **pod scope**: the first container of a pod triggers the pod's single
//!   merge (`GetPodTopologyHints`); later containers of the pod reuse the
//!   stored result without merging;
//! * `topology_manager_admission_requests_total` counts pods: a request is
//!   counted when a pod with no stored affinity is admitted.

use std::collections::BTreeMap;
use std::time::Duration;

use super::metrics::{AlignBoundary, AlignScope};
use super::Engine;
use crate::cpuset::CpuSet;
use crate::pod::{Pod, PodLevel};
use crate::policy::hints::{CpuManagerHints, Operation};
use crate::policy::PolicyError;
use crate::topomgr::numa_score::{NumaAllocationStrategy, NumaScores};
use crate::topomgr::provider::HintProvider;
use crate::topomgr::{Policy as TmPolicy, ProviderHints, Scope, TopologyHint, TopologyManager};

/// What the Topology Manager decided for one admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyDecision {
    pub scope: Scope,
    /// Every provider's answer, resource by resource, in provider order (the
    /// CPU manager first); providers that do not care are left out.
    pub hints: Vec<(String, Option<Vec<TopologyHint>>)>,
    /// The merged hint (the stored affinity when admitted).
    pub hint: TopologyHint,
    pub admit: bool,
    /// Pod scope: the affinity was merged for an earlier container of the
    /// pod and reused (`hints` is then empty).
    pub reused: bool,
}

/// Who decides a container's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuOwner {
    /// The CPU manager policy (`none` / `static`).
    Policy,
    /// A resource plugin (the container's placement carries its answer).
    Plugin,
}

/// The result of [`Engine::admit_container_with`]: the admission result and,
/// when the Topology Manager was consulted (policy other than `none`), its
/// decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmitReport {
    pub result: Result<Option<CpuSet>, PolicyError>,
    pub topology: Option<TopologyDecision>,
}

impl Engine {
    /// Admits container `name` of `pod` through the Topology Manager with the
    /// CPU manager and `providers` as hint providers (kubelet `Admit`, one
    /// container at a time; see the module notes for the pod scope).
    pub fn admit_container_with(
        &mut self,
        pod: &Pod,
        name: &str,
        providers: &[&dyn HintProvider],
    ) -> AdmitReport {
        self.admit_container_as(pod, name, providers, CpuOwner::Policy)
    }

    /// [`Engine::admit_container_with`], with the container's CPUs owned by
    /// `owner`: with [`CpuOwner::Plugin`] a resource plugin decides them
    /// (kubewharf's QoS Resource Manager takes `cpu` over from the CPU
    /// manager): the CPU manager gives no hints and allocates nothing, the
    /// container runs in the shared pool until the plugin's answer places
    /// it.
    pub fn admit_container_as(
        &mut self,
        pod: &Pod,
        name: &str,
        providers: &[&dyn HintProvider],
        owner: CpuOwner,
    ) -> AdmitReport {
        if owner == CpuOwner::Policy && self.allocates_pod_as_a_whole(&pod.uid, false) {
            return self.admit_pod_level(pod, name, providers, None);
        }
        let request = match self.container_request(pod, name) {
            Ok(request) => request,
            Err(err) => {
                return AdmitReport {
                    result: Err(err),
                    topology: None,
                }
            }
        };
        if !self.affinities.contains_key(&pod.uid) {
            self.metrics.topology.requests_total += 1;
        }
        let decision = self.decide(pod, name, providers, owner, Operation::Add);
        // No decision: the `none` policy's hint (`TopologyManager::fixed_hint`).
        let hint = decision
            .as_ref()
            .map_or(TopologyHint::cannot_satisfy(), |d| d.hint);
        let guaranteed = self.topology.policy() == TmPolicy::SingleNumaNode;
        let scope = match self.topology.scope() {
            Scope::Pod => AlignScope::Pod,
            Scope::Container | Scope::None => AlignScope::Container,
        };
        if decision.as_ref().is_some_and(|d| !d.admit) {
            self.metrics.topology.errors_total += 1;
            if guaranteed {
                self.metrics
                    .aligned_failures
                    .inc(scope, AlignBoundary::NumaNode);
            }
            let pod_level = self.pod_level(&pod.uid) == PodLevel::Managed;
            return AdmitReport {
                result: Err(PolicyError::topology_refusal(
                    pod_level,
                    scope == AlignScope::Pod,
                )),
                topology: decision,
            };
        }
        self.store_affinity(pod, name, hint);
        if owner == CpuOwner::Plugin {
            return AdmitReport {
                result: Ok(None),
                topology: decision,
            };
        }
        let affinity = hint.affinity.map(|mask| mask.ids());
        let result = self.admit(&request, affinity.as_deref());
        if scope == AlignScope::Pod && decision.as_ref().is_some_and(|d| !d.reused) {
            if result.is_ok() {
                // kubelet's pod scope stores the pod's hint for every one of
                // its containers at admission: a container removed before
                // its siblings are added leaves them the pod's affinity.
                for container in pod.all_containers() {
                    self.store_affinity(pod, &container.name, hint);
                }
            } else {
                // kubelet rejects the pod; the next container is admitted afresh.
                self.forget_affinity(&pod.uid, name);
            }
        }
        if result.is_err() {
            self.metrics.topology.errors_total += 1;
        } else if guaranteed {
            // kubelet: one per admitted container (container scope), one per
            // pod once its last container is admitted (pod scope).
            let last = pod.all_containers().last().map(|c| c.name.as_str());
            if scope == AlignScope::Container || last == Some(name) {
                self.metrics.aligned.inc(scope, AlignBoundary::NumaNode);
            }
        }
        AdmitReport {
            result,
            topology: decision,
        }
    }

    /// kubelet `Admit(pod)`: admits the containers of `pod` in kubelet's
    /// order (init containers, then app containers), stopping at the first
    /// failure, whose report is then the last one. As in kubelet, containers
    /// admitted before a failure keep their CPUs until removed.
    pub fn admit_pod(
        &mut self,
        pod: &Pod,
        providers: &[&dyn HintProvider],
    ) -> Vec<(String, AdmitReport)> {
        let mut reports = Vec::new();
        for container in pod.all_containers() {
            let report = self.admit_container_with(pod, &container.name, providers);
            let failed = report.result.is_err();
            reports.push((container.name.clone(), report));
            if failed {
                break;
            }
        }
        reports
    }

    /// The merged decision for one container; `None` under policy `none`.
    /// A resize (`operation`) always merges afresh.
    pub(super) fn decide(
        &self,
        pod: &Pod,
        name: &str,
        providers: &[&dyn HintProvider],
        owner: CpuOwner,
        operation: Operation,
    ) -> Option<TopologyDecision> {
        let scope = self.topology.scope();
        if self.topology.policy() == TmPolicy::None {
            return None;
        }
        if scope == Scope::Pod && operation == Operation::Add {
            if let Some(hint) = self.pod_affinity(&pod.uid) {
                return Some(TopologyDecision {
                    scope,
                    hints: Vec::new(),
                    hint,
                    admit: true,
                    reused: true,
                });
            }
        }
        let managers = match &self.policy {
            crate::policy::Policy::Static(policy) => policy.features().pod_level_resource_managers,
            crate::policy::Policy::None => false,
        };
        let cpu = CpuManagerHints {
            policy: &self.policy,
            state: &self.state,
            pod_resources: self.pod_resources.get(&pod.uid),
            pod_level_managers: managers,
            operation,
        };
        let cpu_manager = (owner == CpuOwner::Policy).then_some(&cpu as &dyn HintProvider);
        let all = cpu_manager.into_iter().chain(providers.iter().copied());
        let answers: Vec<ProviderHints> = match scope {
            Scope::Pod => all.map(|p| p.pod_hints(pod)).collect(),
            Scope::Container | Scope::None => all.map(|p| p.container_hints(pod, name)).collect(),
        };
        let admission = match self.numa_scores() {
            Some(scores) => self.topology.merge_scored(&answers, &scores),
            None => self.topology.merge(&answers),
        };
        Some(TopologyDecision {
            scope,
            hints: flatten(answers),
            hint: admission.hint,
            admit: admission.admit,
            reused: false,
        })
    }

    /// The NUMA nodes' allocation scores for `numa-allocation-strategy`
    /// (KEP-6007), when the option is on and the policy is static.
    fn numa_scores(&self) -> Option<NumaScores> {
        let strategy = self.topology.options().numa_allocation_strategy;
        let crate::policy::Policy::Static(policy) = &self.policy else {
            return None;
        };
        (strategy != NumaAllocationStrategy::None).then(|| {
            let mut exclusive = self.state.exclusive_cpus();
            for cpus in self.pod_cpus.values() {
                exclusive.union_with(cpus);
            }
            NumaScores::of(policy.topology(), &exclusive, policy.reserved())
        })
    }

    /// Stores the admitted hint for the container. (kubelet stores the pod
    /// scope's hint for every container at once; Pinion stores it as each
    /// container is admitted, so nothing outlives the pod's containers.)
    pub(super) fn store_affinity(&mut self, pod: &Pod, name: &str, hint: TopologyHint) {
        self.affinities
            .entry(pod.uid.clone())
            .or_default()
            .insert(name.to_owned(), hint);
    }

    /// The affinity stored for any container of `pod` (pod scope).
    fn pod_affinity(&self, pod: &str) -> Option<TopologyHint> {
        self.affinities
            .get(pod)
            .and_then(|containers| containers.values().next().copied())
    }

    /// Drops the stored affinity of one container (and of the pod with its
    /// last container).
    pub(super) fn forget_affinity(&mut self, pod: &str, container: &str) {
        if let Some(containers) = self.affinities.get_mut(pod) {
            containers.remove(container);
            if containers.is_empty() {
                self.affinities.remove(pod);
            }
        }
    }

    /// kubelet `GetAffinity`: the hint stored for a container admitted
    /// through the Topology Manager (what e.g. a memory provider aligns to).
    #[must_use]
    pub fn topology_affinity(&self, pod: &str, container: &str) -> Option<TopologyHint> {
        self.affinities.get(pod)?.get(container).copied()
    }

    /// The Topology Manager.
    #[must_use]
    pub fn topology_manager(&self) -> &TopologyManager {
        &self.topology
    }

    /// Records the duration of one pod admission (timed by the caller; core
    /// has no clock) into `topology_manager_admission_duration_ms`.
    pub fn record_admission_duration(&mut self, elapsed: Duration) {
        self.metrics.topology.observe_duration(elapsed);
    }
}

/// The Topology Manager's admission of container `name` of `pod` when it is
/// known before the engine is asked: the hint the admission will store (and
/// the resource plugins' `Allocate` is given) and whether it admits, from
/// the outside providers' hints (`outside`) alone. `None` when it depends on
/// the engine's state, so the engine must decide first:
///
/// * policy `none`: the fixed empty hint, always admitted (nothing merged);
/// * CPUs owned by a resource plugin (`owner`), container scope, no NUMA
///   allocation scores: the CPU manager gives no hints, so the merge is the
///   outside providers' alone — as [`Engine::admit_container_as`] merges it;
/// * otherwise `None`: the CPU manager's hints depend on the free CPUs, pod
///   scope reuses the affinity stored for the pod's earlier containers, and
///   `numa-allocation-strategy` scores nodes by the exclusive CPUs taken.
#[must_use]
pub fn admission_before_engine(
    manager: &TopologyManager,
    pod: &Pod,
    name: &str,
    outside: &dyn HintProvider,
    owner: CpuOwner,
) -> Option<crate::topomgr::Admission> {
    if manager.policy() == TmPolicy::None {
        return Some(crate::topomgr::Admission {
            hint: TopologyHint::cannot_satisfy(),
            admit: true,
        });
    }
    let stateless = owner == CpuOwner::Plugin
        && manager.scope() != Scope::Pod
        && manager.options().numa_allocation_strategy == NumaAllocationStrategy::None;
    stateless.then(|| manager.merge(&[outside.container_hints(pod, name)]))
}

/// The providers' answers as one `(resource, hints)` list.
fn flatten(answers: Vec<ProviderHints>) -> Vec<(String, Option<Vec<TopologyHint>>)> {
    answers
        .into_iter()
        .flatten()
        .flat_map(BTreeMap::into_iter)
        .collect()
}

#[cfg(test)]
mod tests;
