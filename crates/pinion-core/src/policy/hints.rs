//! The CPU manager as a [`HintProvider`] (spec `kubelet-topology-manager.md`
//! §8): the static policy answers for the `cpu` resource from the current
//! state; the `none` policy never has hints.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::pod::{guaranteed_cpus, pod_guaranteed_cpus, Pod};
use crate::policy::{Policy, StaticPolicy};
use crate::state::State;
use crate::topomgr::cpu_hints::{container_cpu_hints, pod_cpu_hints, ContainerCpus, HintInputs};
use crate::topomgr::provider::HintProvider;
use crate::topomgr::{ProviderHints, TopologyHint};

/// The resource name of the CPU manager's hints.
pub const CPU_RESOURCE: &str = "cpu";

/// The CPU manager's view for one admission: its policy and the state.
#[derive(Debug, Clone, Copy)]
pub struct CpuManagerHints<'a> {
    pub policy: &'a Policy,
    pub state: &'a State,
}

impl CpuManagerHints<'_> {
    fn answer(
        &self,
        hints: impl FnOnce(&HintInputs<'_>) -> Option<Vec<TopologyHint>>,
    ) -> ProviderHints {
        let Policy::Static(policy) = self.policy else {
            return None;
        };
        let available = self.state.default.difference(policy.reserved());
        let reusable = CpuSet::new();
        let inputs = HintInputs {
            topology: policy.topology(),
            available: &available,
            reusable: &reusable,
            align_by_socket: policy.options().align_by_socket,
        };
        hints(&inputs).map(|list| BTreeMap::from([(CPU_RESOURCE.to_owned(), Some(list))]))
    }

    fn reusable(policy: &Policy, pod: &str) -> CpuSet {
        match policy {
            Policy::Static(policy) => StaticPolicy::reusable(policy, pod),
            Policy::None => CpuSet::new(),
        }
    }
}

impl HintProvider for CpuManagerHints<'_> {
    fn container_hints(&self, pod: &Pod, container: &str) -> ProviderHints {
        let spec = pod.container(container)?;
        let request = guaranteed_cpus(pod, spec);
        let assigned = self.state.assignment(&pod.uid, container);
        let reusable = Self::reusable(self.policy, &pod.uid);
        self.answer(|inputs| {
            let inputs = HintInputs {
                reusable: &reusable,
                ..*inputs
            };
            container_cpu_hints(&inputs, request, assigned)
        })
    }

    fn pod_hints(&self, pod: &Pod) -> ProviderHints {
        let request = pod_guaranteed_cpus(pod);
        let containers: Vec<ContainerCpus> = pod
            .all_containers()
            .map(|c| ContainerCpus {
                request: guaranteed_cpus(pod, c),
                assigned: self.state.assignment(&pod.uid, &c.name).cloned(),
            })
            .collect();
        let reusable = Self::reusable(self.policy, &pod.uid);
        self.answer(|inputs| {
            let inputs = HintInputs {
                reusable: &reusable,
                ..*inputs
            };
            pod_cpu_hints(&inputs, request, &containers)
        })
    }
}
