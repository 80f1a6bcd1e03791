//! Pinion's view of NRI objects: the pod sandboxes and containers the runtime
//! reports, and the CPU assignments Pinion sends back. Conversions to and from
//! the protobuf types live here and nowhere else.

use std::collections::BTreeMap;

use pinion_core::{CpuSet, Topology};

use crate::proto::nri as pb;

/// A pod sandbox as the runtime reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSandbox {
    pub id: String,
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The pod's cgroup parent exactly as kubelet sent it.
    pub cgroup_parent: String,
    /// Pod-level resources (kubelet's pod totals), when the runtime sends them.
    pub pod_resources: Option<Resources>,
    /// The pod overhead, when set.
    pub overhead: Option<Resources>,
}

/// Container states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainerState {
    #[default]
    Unknown,
    Created,
    Paused,
    Running,
    Stopped,
}

/// A container as the runtime reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub pod_sandbox_id: String,
    pub name: String,
    pub state: ContainerState,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub resources: Resources,
    pub oom_score_adj: Option<i64>,
}

/// The Linux resources Pinion reads (absent = not set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub memory_limit: Option<i64>,
    /// cpuset.cpus as a cpulist ("" = not set).
    pub cpus: String,
    /// cpuset.mems as a list ("" = not set).
    pub mems: String,
}

/// The CPU placement Pinion gives a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuAssignment {
    pub cpus: CpuSet,
    /// NUMA memory nodes (`None` = leave cpuset.mems alone).
    pub mems: Option<CpuSet>,
    /// Remove the CFS quota (exclusive CPUs are never throttled).
    pub unlimited_quota: bool,
}

/// A change to an existing container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUpdate {
    pub container_id: String,
    pub assignment: CpuAssignment,
}

/// The CFS quota value meaning "unlimited".
pub const UNLIMITED_QUOTA: i64 = -1;

impl CpuAssignment {
    /// Exclusive CPUs: `cpuset.cpus`, `cpuset.mems` = the NUMA nodes of those
    /// CPUs, and no CFS quota (kubelet's `DisableCPUQuotaWithExclusiveCPUs`).
    #[must_use]
    pub fn exclusive(cpus: CpuSet, topology: &Topology) -> Self {
        let mems = topology.numa_nodes_of(&cpus).into_iter().collect();
        Self {
            cpus,
            mems: Some(mems),
            unlimited_quota: true,
        }
    }

    /// The shared pool: only `cpuset.cpus` (memory nodes and quota untouched).
    #[must_use]
    pub fn shared(cpus: CpuSet) -> Self {
        Self {
            cpus,
            mems: None,
            unlimited_quota: false,
        }
    }
}

impl From<pb::PodSandbox> for PodSandbox {
    fn from(pod: pb::PodSandbox) -> Self {
        let linux = pod.linux.unwrap_or_default();
        Self {
            id: pod.id,
            name: pod.name,
            uid: pod.uid,
            namespace: pod.namespace,
            labels: pod.labels.into_iter().collect(),
            annotations: pod.annotations.into_iter().collect(),
            cgroup_parent: linux.cgroup_parent,
            pod_resources: linux.pod_resources.map(Resources::from),
            overhead: linux.pod_overhead.map(Resources::from),
        }
    }
}

impl From<pb::Container> for Container {
    fn from(container: pb::Container) -> Self {
        let state = container.state();
        let linux = container.linux.unwrap_or_default();
        Self {
            id: container.id,
            pod_sandbox_id: container.pod_sandbox_id,
            name: container.name,
            state: match state {
                pb::ContainerState::ContainerUnknown => ContainerState::Unknown,
                pb::ContainerState::ContainerCreated => ContainerState::Created,
                pb::ContainerState::ContainerPaused => ContainerState::Paused,
                pb::ContainerState::ContainerRunning => ContainerState::Running,
                pb::ContainerState::ContainerStopped => ContainerState::Stopped,
            },
            labels: container.labels.into_iter().collect(),
            annotations: container.annotations.into_iter().collect(),
            resources: linux.resources.map(Resources::from).unwrap_or_default(),
            oom_score_adj: linux.oom_score_adj.map(|v| v.value),
        }
    }
}

impl From<pb::LinuxResources> for Resources {
    fn from(resources: pb::LinuxResources) -> Self {
        let cpu = resources.cpu.unwrap_or_default();
        Self {
            cpu_shares: cpu.shares.map(|v| v.value),
            cpu_quota: cpu.quota.map(|v| v.value),
            cpu_period: cpu.period.map(|v| v.value),
            memory_limit: resources.memory.and_then(|m| m.limit).map(|v| v.value),
            cpus: cpu.cpus,
            mems: cpu.mems,
        }
    }
}

impl From<&Resources> for pb::LinuxResources {
    fn from(r: &Resources) -> Self {
        Self {
            cpu: Some(pb::LinuxCpu {
                shares: r.cpu_shares.map(|value| pb::OptionalUInt64 { value }),
                quota: r.cpu_quota.map(|value| pb::OptionalInt64 { value }),
                period: r.cpu_period.map(|value| pb::OptionalUInt64 { value }),
                cpus: r.cpus.clone(),
                mems: r.mems.clone(),
                ..pb::LinuxCpu::default()
            }),
            memory: r.memory_limit.map(|value| pb::LinuxMemory {
                limit: Some(pb::OptionalInt64 { value }),
                ..pb::LinuxMemory::default()
            }),
        }
    }
}

impl From<&CpuAssignment> for pb::LinuxResources {
    fn from(a: &CpuAssignment) -> Self {
        Self {
            cpu: Some(pb::LinuxCpu {
                cpus: a.cpus.to_string(),
                mems: a.mems.as_ref().map(ToString::to_string).unwrap_or_default(),
                quota: a.unlimited_quota.then_some(pb::OptionalInt64 {
                    value: UNLIMITED_QUOTA,
                }),
                ..pb::LinuxCpu::default()
            }),
            memory: None,
        }
    }
}

impl From<&CpuAssignment> for pb::ContainerAdjustment {
    fn from(a: &CpuAssignment) -> Self {
        Self {
            linux: Some(pb::LinuxContainerAdjustment {
                resources: Some(a.into()),
            }),
            ..pb::ContainerAdjustment::default()
        }
    }
}

impl From<&ContainerUpdate> for pb::ContainerUpdate {
    fn from(u: &ContainerUpdate) -> Self {
        Self {
            container_id: u.container_id.clone(),
            linux: Some(pb::LinuxContainerUpdate {
                resources: Some((&u.assignment).into()),
            }),
            ignore_failure: false,
        }
    }
}

/// The updates in protobuf form.
#[must_use]
pub fn updates_to_proto(updates: &[ContainerUpdate]) -> Vec<pb::ContainerUpdate> {
    updates.iter().map(pb::ContainerUpdate::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_assignment_sets_cpus_mems_and_unlimited_quota() {
        let a = CpuAssignment {
            cpus: CpuSet::parse_list("2,6").unwrap(),
            mems: Some(CpuSet::parse_list("0").unwrap()),
            unlimited_quota: true,
        };
        let r = pb::LinuxResources::from(&a);
        let cpu = r.cpu.unwrap();
        assert_eq!(cpu.cpus, "2,6");
        assert_eq!(cpu.mems, "0");
        assert_eq!(cpu.quota, Some(pb::OptionalInt64 { value: -1 }));
        assert_eq!(cpu.shares, None);
        assert!(r.memory.is_none());
    }

    #[test]
    fn shared_assignment_leaves_quota_and_mems_alone() {
        let a = CpuAssignment {
            cpus: CpuSet::parse_list("0-3").unwrap(),
            mems: None,
            unlimited_quota: false,
        };
        let cpu = pb::LinuxResources::from(&a).cpu.unwrap();
        assert_eq!(cpu.cpus, "0-3");
        assert_eq!(cpu.mems, "");
        assert_eq!(cpu.quota, None);
    }

    #[test]
    fn exclusive_constructor_takes_the_numa_nodes_of_the_cpus() {
        let shape = pinion_core::topology::Shape {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 2,
            threads_per_core: 2,
            cores_per_uncore: 0,
        };
        let topology = pinion_core::topology::synthetic(shape);
        let node1 = topology.numa_cpus()[&1].clone();
        let first = CpuSet::from_iter(node1.iter().take(1));
        let a = CpuAssignment::exclusive(first, &topology);
        assert_eq!(a.mems.unwrap().to_string(), "1");
        assert!(a.unlimited_quota);
        let all = topology
            .numa_cpus()
            .values()
            .fold(CpuSet::default(), |acc, s| acc.union(s));
        assert_eq!(
            CpuAssignment::exclusive(all, &topology)
                .mems
                .unwrap()
                .to_string(),
            "0-1"
        );
        assert_eq!(CpuAssignment::shared(CpuSet::default()).mems, None);
    }

    #[test]
    fn resources_round_trip_through_proto() {
        let r = Resources {
            cpu_shares: Some(2048),
            cpu_quota: Some(200_000),
            cpu_period: Some(100_000),
            memory_limit: Some(1 << 30),
            cpus: "1-2".to_string(),
            mems: "0".to_string(),
        };
        assert_eq!(Resources::from(pb::LinuxResources::from(&r)), r);
    }
}
