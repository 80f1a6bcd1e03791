//! The pod spec model the CPU manager needs: containers with CPU and memory
//! requests/limits, pod QoS class, and the exclusive-CPU count kubelet gives
//! each container (`guaranteedCPUs`) or the whole pod (pod scope).
//!
//! The serde form is the conformance corpus `pods` entry:
//! `{"init_containers": [ctr…], "containers": [ctr…]}` with
//! `ctr = {"name", "cpu_request", "cpu_limit", "memory_request",
//! "memory_limit", "restart_policy"?}`; a null or absent quantity is "not set".
//! The pod UID is the key of the `pods` map, so `uid` defaults to empty.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

/// A pod: its UID and its containers in spec order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pod {
    #[serde(default)]
    pub uid: String,
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
        let cpu = request_and_limit(self.cpu_request.as_ref(), self.cpu_limit.as_ref());
        let memory = request_and_limit(self.memory_request.as_ref(), self.memory_limit.as_ref());
        if cpu.0 != cpu.1 || memory.0 != memory.1 {
            return QosClass::Burstable;
        }
        match (cpu.0 == 0, memory.0 == 0) {
            (true, true) => QosClass::BestEffort,
            (false, false) => QosClass::Guaranteed,
            _ => QosClass::Burstable,
        }
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
    if pod.qos() != QosClass::Guaranteed {
        return 0;
    }
    container_cpus(container)
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
    if pod.qos() != QosClass::Guaranteed {
        return 0;
    }
    let mut sidecars = 0usize;
    let mut largest_init = 0usize;
    for init in &pod.init_containers {
        let cpus = container_cpus(init);
        if init.is_restartable() {
            sidecars = sidecars.saturating_add(cpus);
        } else {
            largest_init = largest_init.max(cpus.saturating_add(sidecars));
        }
    }
    let apps = pod
        .containers
        .iter()
        .map(container_cpus)
        .fold(sidecars, usize::saturating_add);
    largest_init.max(apps)
}

#[cfg(test)]
mod tests;
