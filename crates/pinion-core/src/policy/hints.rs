//! The CPU manager as a [`HintProvider`] (spec `kubelet-topology-manager.md`
//! §8): the static policy answers for the `cpu` resource from the current
//! state; the `none` policy never has hints.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::pod::{guaranteed_cpus_in, pod_guaranteed_cpus_in, Pod, PodLevel, PodResources};
use crate::policy::{CpuAsk, IsolatedAsk, Policy, StaticPolicy, UncoreAsk};
use crate::state::State;
use crate::topomgr::cpu_hints::{
    container_cpu_hints, container_cpu_hints_for_resize, pod_cpu_hints, whole_uncore_hints,
    ContainerCpus, HintInputs,
};
use crate::topomgr::provider::HintProvider;
use crate::topomgr::{ProviderHints, TopologyHint};

/// The resource name of the CPU manager's hints.
pub const CPU_RESOURCE: &str = "cpu";

/// What the hints are for (kubelet's `lifecycle.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Operation {
    /// Admitting a container (`AddOperation`).
    #[default]
    Add,
    /// Resizing a container in place (`ResizeOperation`): the pod carries
    /// the new requests.
    Resize,
}

/// The CPU manager's view for one admission: its policy, the state, and
/// the admitted pod's pod-level resources (with the
/// `PodLevelResourceManagers` switch).
#[derive(Debug, Clone, Copy)]
pub struct CpuManagerHints<'a> {
    pub policy: &'a Policy,
    pub state: &'a State,
    pub pod_resources: Option<&'a PodResources>,
    pub pod_level_managers: bool,
    pub operation: Operation,
}

impl CpuManagerHints<'_> {
    /// The hints `hints` gives on the pod's available CPUs; with
    /// `whole_uncore: Some(request)`, only the masks where whole free uncore
    /// caches can hold `request` CPUs ([`whole_uncore_hints`]).
    fn answer(
        &self,
        pod: &Pod,
        whole_uncore: Option<usize>,
        hints: impl FnOnce(&HintInputs<'_>) -> Option<Vec<TopologyHint>>,
    ) -> ProviderHints {
        let Policy::Static(policy) = self.policy else {
            return None;
        };
        let available = available_for(policy, self.state, pod);
        let reusable = CpuSet::new();
        let inputs = HintInputs {
            topology: policy.topology(),
            available: &available,
            reusable: &reusable,
            align_by_socket: policy.options().align_by_socket,
        };
        let list = hints(&inputs)?;
        let list = match whole_uncore {
            Some(request) => {
                let free = available.union(&policy.reusable(&pod.uid));
                whole_uncore_hints(policy.topology(), &free, request, list)
            }
            None => list,
        };
        Some(BTreeMap::from([(CPU_RESOURCE.to_owned(), Some(list))]))
    }

    /// `Some(request)` when the hints must count whole uncore caches: an
    /// admission (not a resize) of a pod asking `pinion.io/uncore:
    /// exclusive` whose CPUs are not assigned yet.
    fn whole_uncore(&self, pod: &Pod, request: usize, assigned: bool) -> Option<usize> {
        let asks = CpuAsk::from_annotations(&pod.annotations)
            .is_ok_and(|ask| matches!(ask.uncore, UncoreAsk::Exclusive { .. }));
        (asks && !assigned && request > 0 && self.operation == Operation::Add).then_some(request)
    }

    fn reusable(policy: &Policy, pod: &str) -> CpuSet {
        match policy {
            Policy::Static(policy) => StaticPolicy::reusable(policy, pod),
            Policy::None => CpuSet::new(),
        }
    }
}

/// The CPUs the pod's containers may get, as the static policy hands them
/// out: boot-isolated CPUs only for pods that ask for them (`require`: only
/// those, `prefer`: those too). A bad annotation counts as no ask (the
/// admission itself refuses it).
fn available_for(policy: &StaticPolicy, state: &State, pod: &Pod) -> CpuSet {
    let available = state.default.difference(policy.reserved());
    let ask =
        CpuAsk::from_annotations(&pod.annotations).map_or(IsolatedAsk::No, |ask| ask.isolated);
    ask.candidates(&available, policy.topology().isolated())
}

impl HintProvider for CpuManagerHints<'_> {
    fn container_hints(&self, pod: &Pod, container: &str) -> ProviderHints {
        let spec = pod.container(container)?;
        if self.operation == Operation::Resize {
            // kubelet: pods with pod-level resources get no resize hints.
            if self.pod_resources.is_some_and(PodResources::is_set) {
                return None;
            }
            let request = guaranteed_cpus_in(pod, None, false, spec);
            let assigned = self.state.assignment(&pod.uid, container);
            let reusable = Self::reusable(self.policy, &pod.uid);
            return self.answer(pod, None, |inputs| {
                let inputs = HintInputs {
                    reusable: &reusable,
                    ..*inputs
                };
                container_cpu_hints_for_resize(&inputs, request, assigned)
            });
        }
        let request = guaranteed_cpus_in(pod, self.pod_resources, self.pod_level_managers, spec);
        let assigned = self.state.assignment(&pod.uid, container);
        let reusable = Self::reusable(self.policy, &pod.uid);
        let whole_uncore = self.whole_uncore(pod, request, assigned.is_some());
        self.answer(pod, whole_uncore, |inputs| {
            let inputs = HintInputs {
                reusable: &reusable,
                ..*inputs
            };
            container_cpu_hints(&inputs, request, assigned)
        })
    }

    fn pod_hints(&self, pod: &Pod) -> ProviderHints {
        if self.operation == Operation::Resize
            && self.pod_resources.is_some_and(PodResources::is_set)
        {
            return None;
        }
        let (res, managers) = (self.pod_resources, self.pod_level_managers);
        let request = pod_guaranteed_cpus_in(pod, res, managers);
        if let (Policy::Static(policy), PodLevel::Managed, Some(res), true) =
            (self.policy, PodLevel::of(res, managers), res, request > 0)
        {
            // kubelet: no hint can satisfy a pod whose shared containers
            // would get no CPUs.
            if policy.validate_pod_scope_resources(pod, res).is_err() {
                return Some(BTreeMap::from([(
                    CPU_RESOURCE.to_owned(),
                    Some(Vec::new()),
                )]));
            }
        }
        let containers: Vec<ContainerCpus> = pod
            .all_containers()
            .map(|c| ContainerCpus {
                request: guaranteed_cpus_in(pod, res, managers, c),
                assigned: self.state.assignment(&pod.uid, &c.name).cloned(),
            })
            .collect();
        let reusable = Self::reusable(self.policy, &pod.uid);
        let assigned = containers.iter().any(|c| c.assigned.is_some());
        let whole_uncore = self.whole_uncore(pod, request, assigned);
        self.answer(pod, whole_uncore, |inputs| {
            let inputs = HintInputs {
                reusable: &reusable,
                ..*inputs
            };
            pod_cpu_hints(&inputs, request, &containers)
        })
    }
}
