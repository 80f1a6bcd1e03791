//! In-place resize of a container's exclusive CPUs through the engine
//! (KEP-5554; kubelet gate `InPlacePodVerticalScalingExclusiveCPUs`, here
//! [`crate::policy::Features::in_place_resize_exclusive_cpus`], off by
//! default).
//!
//! kubelet handles a resize like an admission with `ResizeOperation`: the
//! Topology Manager merges the hint providers' resize hints (the CPU
//! manager's keep the container's own NUMA nodes), then the static policy
//! checks feasibility and reallocates inside the merged affinity. The
//! engine does the same for one container per call:
//!
//! 1. Topology Manager (unless its policy is `none`): resize hints, merge,
//!    reject with `TopologyAffinityError`;
//! 2. [`check_feasible`]: no move between shared pool and exclusive CPUs,
//!    no shrinking below the promised CPUs;
//! 3. a container left in the shared pool (or a pod with pod-level
//!    resources, which kubelet skips) keeps what it has;
//! 4. [`StaticPolicy::resize`](crate::policy::StaticPolicy::resize):
//!    `full-pcpus-only` checks, then grow/shrink in place.
//!
//! On error nothing changes (state, stored affinity, promised CPUs); only
//! the counters move, as kubelet's do.

use super::metrics::{self, AlignBoundary, AlignScope};
use super::{find_container, AdmitReport, CpuOwner, Engine};
use crate::cpuset::CpuSet;
use crate::pod::{guaranteed_cpus_in, pod_qos_in, Pod, QosClass};
use crate::policy::hints::Operation;
use crate::policy::resize::{check_feasible, Feasibility, ResizeRequest};
use crate::policy::{Policy, PolicyError};
use crate::quantity::Quantity;
use crate::topomgr::provider::HintProvider;
use crate::topomgr::{Policy as TmPolicy, Scope, TopologyAffinityError};

impl Engine {
    /// Resizes container `name` of `pod` in place to `new_request` CPUs
    /// (its new CPU request and limit), with the CPU manager as the only
    /// hint provider. `pod` is the pod as last admitted or resized (its
    /// CPU request for `name` is what the container holds now).
    ///
    /// Returns the container's exclusive CPUs after the resize (`None`: it
    /// runs in the shared pool). Errors: [`PolicyError::ResizeDisabled`]
    /// (switch off, and the container holds exclusive CPUs or would get
    /// them; a resize within the shared pool has nothing to do, as in
    /// kubelet), [`PolicyError::UnknownContainer`],
    /// [`PolicyError::TopologyAffinity`],
    /// [`PolicyError::InconsistentCpuAllocation`],
    /// [`PolicyError::ProhibitedCpuAllocation`],
    /// [`PolicyError::GetOriginalCpuSet`], the `full-pcpus-only` errors,
    /// [`PolicyError::ResizeAllocateCpus`] and
    /// [`PolicyError::SharedPoolWouldBeEmpty`]. On error the engine's state
    /// is unchanged.
    pub fn resize_container(
        &mut self,
        pod: &Pod,
        name: &str,
        new_request: &Quantity,
    ) -> Result<Option<CpuSet>, PolicyError> {
        self.resize_container_with(pod, name, new_request, &[])
            .result
    }

    /// [`Engine::resize_container`] with extra hint providers (answering
    /// for the resized pod), reporting the Topology Manager's decision.
    pub fn resize_container_with(
        &mut self,
        pod: &Pod,
        name: &str,
        new_request: &Quantity,
        providers: &[&dyn HintProvider],
    ) -> AdmitReport {
        let report = self.resize_inner(pod, name, new_request, providers);
        self.debug_check();
        report
    }

    fn resize_inner(
        &mut self,
        pod: &Pod,
        name: &str,
        new_request: &Quantity,
        providers: &[&dyn HintProvider],
    ) -> AdmitReport {
        let fail = |err: PolicyError| AdmitReport {
            result: Err(err),
            topology: None,
        };
        let Policy::Static(policy) = &self.policy else {
            return AdmitReport {
                result: Ok(None),
                topology: None,
            };
        };
        let features = policy.features();
        if !features.in_place_resize_exclusive_cpus {
            // kubelet's `Allocate` has nothing to do for a container of the
            // shared pool, switch or not: only a resize from or to
            // exclusive CPUs is refused.
            let shared = |pod: &Pod| {
                find_container(pod, name).is_some() && self.exclusive_cpus_asked(pod, name) == 0
            };
            let resized = pod.with_container_cpus(name, new_request);
            let holds = self.state.assignment(&pod.uid, name).is_some();
            if !holds && shared(pod) && shared(&resized) {
                return AdmitReport {
                    result: Ok(None),
                    topology: None,
                };
            }
            return fail(PolicyError::ResizeDisabled {
                pod: pod.uid.clone(),
                container: name.to_owned(),
            });
        }
        let Some((spec, kind)) = find_container(pod, name) else {
            return fail(PolicyError::UnknownContainer {
                pod: pod.uid.clone(),
                container: name.to_owned(),
            });
        };
        let allocated = spec.effective_cpu_request().cloned();
        let resized = pod.with_container_cpus(name, new_request);

        // 1. The Topology Manager's resize admission.
        self.metrics.topology.requests_total += 1;
        let decision = self.decide(
            &resized,
            name,
            providers,
            CpuOwner::Policy,
            Operation::Resize,
        );
        let guaranteed_alignment = self.topology.policy() == TmPolicy::SingleNumaNode;
        let scope = match self.topology.scope() {
            Scope::Pod => AlignScope::Pod,
            Scope::Container | Scope::None => AlignScope::Container,
        };
        if decision.as_ref().is_some_and(|d| !d.admit) {
            self.metrics.topology.errors_total += 1;
            if guaranteed_alignment {
                self.metrics
                    .aligned_failures
                    .inc(scope, AlignBoundary::NumaNode);
            }
            return AdmitReport {
                result: Err(TopologyAffinityError.into()),
                topology: decision,
            };
        }
        let affinity = decision
            .as_ref()
            .and_then(|d| d.hint.affinity)
            .map(|mask| mask.ids());

        // 2.–4. The static policy.
        let result = self.resize_static(
            pod,
            &resized,
            name,
            kind,
            allocated.as_ref(),
            new_request,
            affinity.as_deref(),
        );
        match &result {
            Err(_) => self.metrics.topology.errors_total += 1,
            Ok(_) => {
                if let Some(d) = &decision {
                    self.store_affinity(pod, name, d.hint);
                }
                if guaranteed_alignment {
                    self.metrics.aligned.inc(scope, AlignBoundary::NumaNode);
                }
            }
        }
        AdmitReport {
            result,
            topology: decision,
        }
    }

    /// The static policy's part of a resize (kubelet `allocateForResize`).
    #[allow(clippy::too_many_arguments)]
    fn resize_static(
        &mut self,
        pod: &Pod,
        resized: &Pod,
        name: &str,
        kind: crate::policy::ContainerKind,
        allocated: Option<&Quantity>,
        new_request: &Quantity,
        affinity: Option<&[u32]>,
    ) -> Result<Option<CpuSet>, PolicyError> {
        let Policy::Static(policy) = &mut self.policy else {
            return Ok(None);
        };
        let resources = self.pod_resources.get(&pod.uid);
        let current = self.state.assignment(&pod.uid, name).cloned();
        if resources.is_none() && self.pod_cpus.contains_key(&pod.uid) {
            // A pod holding its own CPU set (`AllocatePod`) has pod-level
            // resources even while they are not registered (the front-end
            // registers them): not resized, as below, and never judged by
            // its containers alone, which would move them out of the set.
            return Ok(current);
        }
        let managers = policy.features().pod_level_resource_managers;
        let guaranteed = pod_qos_in(pod, resources) == QosClass::Guaranteed;
        let cpus = match resized.container(name) {
            Some(container) if guaranteed => {
                guaranteed_cpus_in(resized, resources, managers, container)
            }
            _ => 0,
        };
        let promised = self
            .promised
            .get(&pod.uid)
            .and_then(|containers| containers.get(name))
            .cloned()
            .or_else(|| current.clone());
        check_feasible(&Feasibility {
            pod: &pod.uid,
            container: name,
            guaranteed,
            allocated,
            requested: Some(new_request),
            promised: promised.as_ref(),
            cpus,
        })?;
        if cpus == 0 {
            return Ok(None);
        }
        if resources.is_some_and(crate::pod::PodResources::is_set) {
            // kubelet: pods with pod-level resources are not resized.
            return Ok(current);
        }
        let promised = promised.unwrap_or_default();
        let full_pcpus = policy.options().full_pcpus_only;
        self.metrics.pinning_requests_total += 1;
        let request = ResizeRequest {
            pod: &pod.uid,
            container: name,
            kind,
            cpus,
            allocated_cpus: allocated
                .map_or(0, |q| usize::try_from(q.value()).unwrap_or(usize::MAX)),
            promised: &promised,
        };
        let result = policy.resize(&mut self.state, &request, affinity);
        let m = &mut self.metrics;
        match &result {
            Err(_) => {
                m.pinning_errors_total += 1;
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
                if metrics::uncore_aligned(policy.topology(), cpus) {
                    m.aligned
                        .inc(AlignScope::Container, AlignBoundary::UncoreCache);
                }
                if current.as_ref() != Some(cpus) {
                    self.promised
                        .entry(pod.uid.clone())
                        .or_default()
                        .entry(name.to_owned())
                        .or_insert_with(|| current.clone().unwrap_or_default());
                }
            }
        }
        result.map(Some)
    }
}
