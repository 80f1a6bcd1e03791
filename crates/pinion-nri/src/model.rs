//! Pinion's view of NRI objects: the pod sandboxes and containers the runtime
//! reports, and the CPU assignments Pinion sends back. Conversions to and from
//! the protobuf types live here and nowhere else.

use std::collections::BTreeMap;

use pinion_core::placement::{ResourceSettings, UNLIMITED_QUOTA};
use pinion_core::plugin_allocation::unified_default;
use pinion_core::Placement;

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
    /// The sandbox (pause) container's own cgroup (an OCI `cgroupsPath`,
    /// `<parent>/<sandbox id>` with the cgroupfs driver); it is there while
    /// the pod runs. Empty when the runtime sent none.
    pub cgroups_path: String,
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
    /// The OCI `linux.cgroupsPath` the runtime created it with ("" = not
    /// sent): a cgroupfs path or systemd's `slice:prefix:name`.
    pub cgroups_path: String,
}

/// The Linux resources Pinion reads (absent = not set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub memory_limit: Option<i64>,
    /// Memory + swap limit in bytes.
    pub memory_swap_limit: Option<i64>,
    /// cgroup v2 files and their values (OCI `unified`).
    pub unified: BTreeMap<String, String>,
    /// cpuset.cpus as a cpulist ("" = not set).
    pub cpus: String,
    /// cpuset.mems as a list ("" = not set).
    pub mems: String,
}

impl Resources {
    /// Takes the settings `update` gives (kubelet's `UpdateContainerResources`,
    /// relayed by the runtime): the container's own values from then on.
    pub fn follow(&mut self, update: &Self) {
        let Self {
            cpu_shares,
            cpu_quota,
            cpu_period,
            memory_limit,
            memory_swap_limit,
            unified,
            cpus: _,
            mems: _,
        } = update;
        self.cpu_shares = cpu_shares.or(self.cpu_shares);
        self.cpu_quota = cpu_quota.or(self.cpu_quota);
        self.cpu_period = cpu_period.or(self.cpu_period);
        self.memory_limit = memory_limit.or(self.memory_limit);
        self.memory_swap_limit = memory_swap_limit.or(self.memory_swap_limit);
        self.unified
            .extend(unified.iter().map(|(k, v)| (k.clone(), v.clone())));
    }

    /// Puts into `placement` the value each setting of `taken_back` (the
    /// settings Pinion sent and no longer sends: a plugin's answer
    /// dropped) should have again: these resources' own (the container's
    /// as the runtime created it, or as kubelet last updated it), else an
    /// unset setting's — no quota (`-1`), the 100 ms period, 1024 shares,
    /// no memory or swap limit, each `Unified` file's default. An update
    /// that left them out would keep the plugin's values: the runtime
    /// keeps what an update does not name.
    pub fn give_back(&self, placement: &mut Placement, taken_back: &ResourceSettings) {
        fn own<T: Copy + PartialEq + Default>(value: Option<T>, unset: T) -> Option<T> {
            Some(value.filter(|v| *v != T::default()).unwrap_or(unset))
        }
        let r = &mut placement.resources;
        if taken_back.cpu_quota.is_some() {
            r.cpu_quota = own(self.cpu_quota, UNLIMITED_QUOTA);
        }
        if taken_back.cpu_period.is_some() {
            r.cpu_period = own(self.cpu_period, DEFAULT_CPU_PERIOD);
        }
        if taken_back.cpu_shares.is_some() {
            r.cpu_shares = own(self.cpu_shares, DEFAULT_CPU_SHARES);
        }
        if taken_back.memory_limit.is_some() {
            r.memory_limit = own(self.memory_limit, -1);
        }
        if taken_back.memory_swap_limit.is_some() {
            r.memory_swap_limit = own(self.memory_swap_limit, -1);
        }
        for (file, old) in &taken_back.unified {
            let value = self
                .unified
                .get(file)
                .cloned()
                .or_else(|| unified_default(file, old));
            if let Some(value) = value {
                r.unified.insert(file.clone(), value);
            }
        }
    }
}

/// The CFS period of a container the runtime created without one (µs).
const DEFAULT_CPU_PERIOD: u64 = 100_000;
/// The CPU shares of a container the runtime created without any.
const DEFAULT_CPU_SHARES: u64 = 1024;

/// A change to an existing container: its new placement (only the
/// resource settings reach a running container; environment and
/// annotations are set at creation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUpdate {
    pub container_id: String,
    pub placement: Placement,
    /// Which of two updates of one container is newer: the one with the
    /// larger order (the front-end numbers the decisions its updates come
    /// from; `0` when it does not, older than any numbered one). A reply
    /// names a container once: a queued update carried beside the
    /// handler's own update of the same container replaces it only when
    /// its order is larger.
    pub order: u64,
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
            cgroups_path: linux.cgroups_path,
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
            cgroups_path: linux.cgroups_path,
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
            memory_swap_limit: resources.memory.and_then(|m| m.swap).map(|v| v.value),
            unified: resources.unified.into_iter().collect(),
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
            memory: (r.memory_limit.is_some() || r.memory_swap_limit.is_some()).then(|| {
                pb::LinuxMemory {
                    limit: r.memory_limit.map(|value| pb::OptionalInt64 { value }),
                    swap: r.memory_swap_limit.map(|value| pb::OptionalInt64 { value }),
                    ..pb::LinuxMemory::default()
                }
            }),
            unified: r
                .unified
                .iter()
                .map(|(file, value)| (file.clone(), value.clone()))
                .collect(),
        }
    }
}

impl From<&Placement> for pb::LinuxResources {
    /// The cpuset, and each resource setting the placement gives (absent
    /// ones stay as the runtime has them).
    fn from(p: &Placement) -> Self {
        let r = &p.resources;
        let memory =
            (r.memory_limit.is_some() || r.memory_swap_limit.is_some()).then(|| pb::LinuxMemory {
                limit: r.memory_limit.map(|value| pb::OptionalInt64 { value }),
                swap: r.memory_swap_limit.map(|value| pb::OptionalInt64 { value }),
                ..pb::LinuxMemory::default()
            });
        Self {
            cpu: Some(pb::LinuxCpu {
                cpus: p.cpus.to_string(),
                mems: p.mems.to_string(),
                quota: r.cpu_quota.map(|value| pb::OptionalInt64 { value }),
                period: r.cpu_period.map(|value| pb::OptionalUInt64 { value }),
                shares: r.cpu_shares.map(|value| pb::OptionalUInt64 { value }),
                ..pb::LinuxCpu::default()
            }),
            memory,
            unified: r
                .unified
                .iter()
                .map(|(file, value)| (file.clone(), value.clone()))
                .collect(),
        }
    }
}

impl From<&Placement> for pb::ContainerAdjustment {
    fn from(p: &Placement) -> Self {
        Self {
            annotations: p
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            env: p
                .env
                .iter()
                .map(|(key, value)| pb::KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            linux: Some(pb::LinuxContainerAdjustment {
                resources: Some(p.into()),
                oom_score_adj: p
                    .resources
                    .oom_score_adj
                    .map(|value| pb::OptionalInt { value }),
            }),
        }
    }
}

impl From<&ContainerUpdate> for pb::ContainerUpdate {
    fn from(u: &ContainerUpdate) -> Self {
        Self {
            container_id: u.container_id.clone(),
            linux: Some(pb::LinuxContainerUpdate {
                resources: Some((&u.placement).into()),
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

    fn set(text: &str) -> pinion_core::CpuSet {
        pinion_core::CpuSet::parse_list(text).unwrap()
    }

    #[test]
    fn exclusive_placement_sets_cpus_and_unlimited_quota_and_leaves_mems() {
        let placement = Placement::exclusive(set("1,5"));
        let r = pb::LinuxResources::from(&placement);
        let cpu = r.cpu.unwrap();
        assert_eq!(cpu.cpus, "1,5");
        assert_eq!(cpu.mems, "", "an empty list leaves the runtime's mems");
        assert_eq!(cpu.quota, Some(pb::OptionalInt64 { value: -1 }));
        assert_eq!(cpu.shares, None);
        assert!(r.memory.is_none());
    }

    #[test]
    fn shared_placement_sets_cpus_and_leaves_mems_and_quota_alone() {
        let placement = Placement::shared(set("0-1,4-5"));
        let cpu = pb::LinuxResources::from(&placement).cpu.unwrap();
        assert_eq!(cpu.cpus, "0-1,4-5");
        assert_eq!(cpu.mems, "");
        assert_eq!(cpu.quota, None);
    }

    #[test]
    fn adjustment_carries_env_annotations_and_every_resource_setting() {
        let mut placement = Placement::shared(set("2-3,6-7"));
        // Memory nodes as a memory plugin's `CpusetMems` sets them.
        placement.mems = set("1");
        placement.env.insert("NIC".into(), "eth1".into());
        placement.annotations.insert("team".into(), "a".into());
        placement.resources = pinion_core::placement::ResourceSettings {
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            cpu_shares: Some(512),
            memory_limit: Some(1 << 30),
            memory_swap_limit: Some(2 << 30),
            oom_score_adj: Some(-998),
            unified: [("memory.high".to_string(), "1073741824".to_string())].into(),
        };
        let adjust = pb::ContainerAdjustment::from(&placement);
        assert_eq!(
            adjust.annotations.get("team").map(String::as_str),
            Some("a")
        );
        assert_eq!(
            adjust.env,
            vec![pb::KeyValue {
                key: "NIC".into(),
                value: "eth1".into()
            }]
        );
        let linux = adjust.linux.unwrap();
        assert_eq!(linux.oom_score_adj, Some(pb::OptionalInt { value: -998 }));
        let resources = linux.resources.unwrap();
        let cpu = resources.cpu.unwrap();
        assert_eq!((cpu.cpus.as_str(), cpu.mems.as_str()), ("2-3,6-7", "1"));
        assert_eq!(cpu.quota.map(|q| q.value), Some(50_000));
        assert_eq!(cpu.period.map(|q| q.value), Some(100_000));
        assert_eq!(cpu.shares.map(|q| q.value), Some(512));
        let memory = resources.memory.unwrap();
        assert_eq!(memory.limit.map(|q| q.value), Some(1 << 30));
        assert_eq!(memory.swap.map(|q| q.value), Some(2 << 30));
        assert_eq!(
            resources.unified.get("memory.high").map(String::as_str),
            Some("1073741824")
        );
    }

    #[test]
    fn resources_round_trip_through_proto() {
        let r = Resources {
            cpu_shares: Some(2048),
            cpu_quota: Some(200_000),
            cpu_period: Some(100_000),
            memory_limit: Some(1 << 30),
            memory_swap_limit: Some(2 << 30),
            unified: [("memory.high".to_string(), "900M".to_string())].into(),
            cpus: "1-2".to_string(),
            mems: "0".to_string(),
        };
        assert_eq!(Resources::from(pb::LinuxResources::from(&r)), r);
    }
}
