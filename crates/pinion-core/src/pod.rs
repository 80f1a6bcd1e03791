//! The pod spec model the CPU manager needs: containers with CPU and memory
//! requests/limits, pod QoS class, and the exclusive-CPU count kubelet gives
//! each container (`guaranteedCPUs`) or the whole pod (pod scope).
//!
//! The serde form is the conformance corpus `pods` entry:
//! `{"init_containers": [ctr…], "containers": [ctr…]}` with
//! `ctr = {"name", "cpu_request", "cpu_limit", "memory_request",
//! "memory_limit", "restart_policy"?}`; a null or absent quantity is "not set".
//! The pod UID is the key of the `pods` map, so `uid` defaults to empty.
//!
//! Pod-level resources (`spec.resources`, KEP-2837; used by the CPU manager
//! under `PodLevelResourceManagers`, KEP-5526) are a [`PodResources`] given
//! beside the pod (the `_in` functions below; the engine keeps them per pod,
//! see `Engine::set_pod_resources`). With them the pod's QoS class is the
//! class of the pod-level resources (kubelet's `ComputePodQOS` with
//! `PodLevelResources` on, the default since 1.34).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

/// A pod: its UID, its identity and metadata where known (resource plugins
/// and podresources consumers read them), and its containers in spec order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    #[serde(default)]
    pub uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub init_containers: Vec<Container>,
    #[serde(default)]
    pub containers: Vec<Container>,
}

/// One container's resources.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub name: String,
    #[serde(default)]
    pub cpu_request: Option<Quantity>,
    #[serde(default)]
    pub cpu_limit: Option<Quantity>,
    #[serde(default)]
    pub memory_request: Option<Quantity>,
    #[serde(default)]
    pub memory_limit: Option<Quantity>,
    /// `Always` on an init container marks a restartable ("sidecar") one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
    /// Requests of other resources (extended resources such as
    /// `example.com/nic`, served by resource plugins), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended_requests: BTreeMap<String, Quantity>,
}

/// Pod-level resources (`spec.resources`): the pod's CPU and memory
/// requests and limits as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodResources {
    #[serde(default)]
    pub cpu_request: Option<Quantity>,
    #[serde(default)]
    pub cpu_limit: Option<Quantity>,
    #[serde(default)]
    pub memory_request: Option<Quantity>,
    #[serde(default)]
    pub memory_limit: Option<Quantity>,
}

impl PodResources {
    /// kubelet's `resourceQOS` of the pod-level resources.
    #[must_use]
    pub fn qos(&self) -> QosClass {
        resource_qos(
            (self.cpu_request.as_ref(), self.cpu_limit.as_ref()),
            (self.memory_request.as_ref(), self.memory_limit.as_ref()),
        )
    }

    /// Whether the pod-level resources set anything (kubelet's
    /// `IsPodLevelResourcesSet`: a CPU or memory request or limit).
    #[must_use]
    pub fn is_set(&self) -> bool {
        self.cpu_request.is_some()
            || self.cpu_limit.is_some()
            || self.memory_request.is_some()
            || self.memory_limit.is_some()
    }
}

/// A container-level restart policy (Kubernetes spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

/// Pod QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        })
    }
}

impl Container {
    /// True for an init container with `restart_policy: Always` (a sidecar).
    #[must_use]
    pub fn is_restartable(&self) -> bool {
        self.restart_policy == Some(RestartPolicy::Always)
    }

    /// The effective CPU request: the request, or the limit when only the
    /// limit is set (Kubernetes defaulting).
    #[must_use]
    pub fn effective_cpu_request(&self) -> Option<&Quantity> {
        self.cpu_request.as_ref().or(self.cpu_limit.as_ref())
    }

    /// This container's own QoS class (kubelet's per-container rule): a
    /// resource whose request differs from its limit makes it Burstable;
    /// otherwise CPU and memory both zero → BestEffort, both non-zero →
    /// Guaranteed, one of each → Burstable. Missing values count as zero
    /// and a missing request defaults to the limit.
    #[must_use]
    pub fn qos(&self) -> QosClass {
        resource_qos(
            (self.cpu_request.as_ref(), self.cpu_limit.as_ref()),
            (self.memory_request.as_ref(), self.memory_limit.as_ref()),
        )
    }

    /// kubelet's `IsContainerEquivalentQOSGuaranteed` (pod-level resource
    /// management): CPU and memory requests both set, non-zero, and equal
    /// to their limits. (A missing request defaults to the limit, as the
    /// API server does.)
    #[must_use]
    pub fn is_equivalent_guaranteed(&self) -> bool {
        let equal = |request: Option<&Quantity>, limit: Option<&Quantity>| {
            let request = request.or(limit);
            matches!((request, limit), (Some(r), Some(l)) if !r.is_zero() && r.milli_value() == l.milli_value())
        };
        equal(self.cpu_request.as_ref(), self.cpu_limit.as_ref())
            && equal(self.memory_request.as_ref(), self.memory_limit.as_ref())
    }

    /// Every resource this container requests, by name: `cpu` and `memory`
    /// (when set, the limit standing in for a missing request) and the
    /// extended resources.
    #[must_use]
    pub fn requests(&self) -> BTreeMap<String, Quantity> {
        let mut requests = self.extended_requests.clone();
        if let Some(cpu) = self.effective_cpu_request() {
            requests.insert("cpu".to_string(), cpu.clone());
        }
        if let Some(memory) = self.memory_request.as_ref().or(self.memory_limit.as_ref()) {
            requests.insert("memory".to_string(), memory.clone());
        }
        requests
    }

    /// Every limit this container sets, by name: `cpu` and `memory` when
    /// set, and the extended resources (whose limit Kubernetes requires to
    /// equal the request).
    #[must_use]
    pub fn limits(&self) -> BTreeMap<String, Quantity> {
        let mut limits = self.extended_requests.clone();
        if let Some(cpu) = &self.cpu_limit {
            limits.insert("cpu".to_string(), cpu.clone());
        }
        if let Some(memory) = &self.memory_limit {
            limits.insert("memory".to_string(), memory.clone());
        }
        limits
    }
}

/// kubelet's `resourceQOS` for one set of requirements: a resource whose
/// request differs from its limit makes it Burstable; otherwise CPU and
/// memory both zero → BestEffort, both non-zero → Guaranteed, one of each →
/// Burstable. Missing values count as zero; a missing request defaults to
/// the limit.
fn resource_qos(
    cpu: (Option<&Quantity>, Option<&Quantity>),
    memory: (Option<&Quantity>, Option<&Quantity>),
) -> QosClass {
    let cpu = request_and_limit(cpu.0, cpu.1);
    let memory = request_and_limit(memory.0, memory.1);
    if cpu.0 != cpu.1 || memory.0 != memory.1 {
        return QosClass::Burstable;
    }
    match (cpu.0 == 0, memory.0 == 0) {
        (true, true) => QosClass::BestEffort,
        (false, false) => QosClass::Guaranteed,
        _ => QosClass::Burstable,
    }
}

/// (request, limit) in milli units; a missing request defaults to the limit.
fn request_and_limit(request: Option<&Quantity>, limit: Option<&Quantity>) -> (u128, u128) {
    let limit = limit.map_or(0, Quantity::milli_value);
    let request = request.map_or(limit, Quantity::milli_value);
    (request, limit)
}

impl Pod {
    /// Init containers (spec order), then app containers.
    pub fn all_containers(&self) -> impl Iterator<Item = &Container> {
        self.init_containers.iter().chain(&self.containers)
    }

    /// The container called `name` (init containers first), if any.
    #[must_use]
    pub fn container(&self, name: &str) -> Option<&Container> {
        self.all_containers().find(|c| c.name == name)
    }

    /// This pod with container `name`'s CPU request (and limit, when it has
    /// one) changed to `cpus`: the pod after an in-place resize.
    #[must_use]
    pub fn with_container_cpus(&self, name: &str, cpus: &Quantity) -> Pod {
        let mut resized = self.clone();
        resized.set_container_cpus(name, cpus);
        resized
    }

    /// [`Pod::with_container_cpus`], in place.
    pub fn set_container_cpus(&mut self, name: &str, cpus: &Quantity) {
        if let Some(container) = self
            .init_containers
            .iter_mut()
            .chain(self.containers.iter_mut())
            .find(|c| c.name == name)
        {
            container.cpu_request = Some(cpus.clone());
            if container.cpu_limit.is_some() {
                container.cpu_limit = Some(cpus.clone());
            }
        }
    }

    /// Pod QoS (newest kubelet, per container): BestEffort for a pod without
    /// containers; otherwise the class all containers share, and Burstable as
    /// soon as one container is Burstable or two containers disagree.
    #[must_use]
    pub fn qos(&self) -> QosClass {
        let mut classes = self.all_containers().map(Container::qos);
        let Some(first) = classes.next() else {
            return QosClass::BestEffort;
        };
        if classes.all(|class| class == first) {
            first
        } else {
            QosClass::Burstable
        }
    }
}

/// kubelet `guaranteedCPUs`: the exclusive CPUs `container` of `pod` gets —
/// its CPU request when the pod is Guaranteed and the request is a whole
/// number of CPUs (`ceil(q)*1000 == ceil(q*1000)`), else 0.
#[must_use]
pub fn guaranteed_cpus(pod: &Pod, container: &Container) -> usize {
    guaranteed_cpus_in(pod, None, false, container)
}

/// How a pod's containers are allocated, given its pod-level resources and
/// the `PodLevelResourceManagers` switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodLevel {
    /// No pod-level resources: kubelet's container-level rules.
    None,
    /// Pod-level resources, switch off: kubelet skips the CPU manager for
    /// the pod (no hints, no exclusive CPUs).
    Skipped,
    /// Pod-level resources, switch on: only containers whose own resources
    /// are Guaranteed-equivalent are eligible for exclusive CPUs.
    Managed,
}

impl PodLevel {
    /// The case of a pod with `resources` under the switch.
    #[must_use]
    pub fn of(resources: Option<&PodResources>, managers: bool) -> PodLevel {
        match (resources.is_some_and(PodResources::is_set), managers) {
            (false, _) => PodLevel::None,
            (true, false) => PodLevel::Skipped,
            (true, true) => PodLevel::Managed,
        }
    }
}

/// The pod's QoS class with its pod-level resources (when set, they decide).
#[must_use]
pub fn pod_qos_in(pod: &Pod, resources: Option<&PodResources>) -> QosClass {
    match resources.filter(|r| r.is_set()) {
        Some(resources) => resources.qos(),
        None => pod.qos(),
    }
}

/// kubelet `guaranteedCPUs` for a pod with pod-level `resources` under the
/// `PodLevelResourceManagers` switch (`managers`): 0 when the pod is not
/// Guaranteed (its class from the pod-level resources when set), when the
/// pod has pod-level resources and the switch is off (kubelet skips such
/// pods), or when the switch is on and the container is not
/// Guaranteed-equivalent on its own; else the container's whole-CPU request.
#[must_use]
pub fn guaranteed_cpus_in(
    pod: &Pod,
    resources: Option<&PodResources>,
    managers: bool,
    container: &Container,
) -> usize {
    if pod_qos_in(pod, resources) != QosClass::Guaranteed {
        return 0;
    }
    match PodLevel::of(resources, managers) {
        PodLevel::Skipped => 0,
        PodLevel::Managed if !container.is_equivalent_guaranteed() => 0,
        PodLevel::None | PodLevel::Managed => container_cpus(container),
    }
}

fn container_cpus(container: &Container) -> usize {
    match container.effective_cpu_request() {
        Some(cpu) if cpu.is_integral() => usize::try_from(cpu.value()).unwrap_or(usize::MAX),
        _ => 0,
    }
}

/// kubelet `podGuaranteedCPUs` (pod scope): the larger of (a) the biggest
/// regular init container plus the sidecars declared before it and (b) all
/// app containers plus all sidecars. 0 unless the pod is Guaranteed.
#[must_use]
pub fn pod_guaranteed_cpus(pod: &Pod) -> usize {
    pod_guaranteed_cpus_in(pod, None, false)
}

/// kubelet `podGuaranteedCPUs` with pod-level `resources` under the
/// `PodLevelResourceManagers` switch: when the switch is on and the pod has
/// pod-level resources, its pod-level CPU request when whole (else 0);
/// otherwise [`pod_guaranteed_cpus`] over the containers'
/// [`guaranteed_cpus_in`].
#[must_use]
pub fn pod_guaranteed_cpus_in(
    pod: &Pod,
    resources: Option<&PodResources>,
    managers: bool,
) -> usize {
    if pod_qos_in(pod, resources) != QosClass::Guaranteed {
        return 0;
    }
    match (PodLevel::of(resources, managers), resources) {
        (PodLevel::Managed, Some(resources)) => {
            return match resources
                .cpu_request
                .as_ref()
                .or(resources.cpu_limit.as_ref())
            {
                Some(cpu) if cpu.is_integral() => {
                    usize::try_from(cpu.value()).unwrap_or(usize::MAX)
                }
                _ => 0,
            };
        }
        (PodLevel::Skipped, _) => return 0,
        _ => {}
    }
    let cpus_of = |c: &Container| guaranteed_cpus_in(pod, resources, managers, c);
    let mut sidecars = 0usize;
    let mut largest_init = 0usize;
    for init in &pod.init_containers {
        let cpus = cpus_of(init);
        if init.is_restartable() {
            sidecars = sidecars.saturating_add(cpus);
        } else {
            largest_init = largest_init.max(cpus.saturating_add(sidecars));
        }
    }
    let apps = pod
        .containers
        .iter()
        .map(cpus_of)
        .fold(sidecars, usize::saturating_add);
    largest_init.max(apps)
}

#[cfg(test)]
mod tests;
