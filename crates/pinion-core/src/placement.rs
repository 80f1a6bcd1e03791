//! Placements: the one answer both front-ends apply to a workload — its
//! CPUs, its memory nodes, the pool it runs in, and the resource settings,
//! environment variables and annotations that go with them. The engine
//! computes a placement for every workload ([`crate::engine::Engine::placement`]);
//! the agent's executor turns the difference between a workload's placement
//! and what was last applied into cgroup writes (standalone) or runtime
//! updates (NRI). CPU decisions leave a workload's memory nodes as they
//! are; only a resource plugin's `CpusetMems` answer sets them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// CFS quota meaning "unlimited" (kubelet's `DisableCPUQuotaWithExclusiveCPUs`
/// sets it for containers with exclusive CPUs).
pub const UNLIMITED_QUOTA: i64 = -1;

/// The pool a workload's CPUs come from.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    /// CPUs held by this container alone (static policy).
    Exclusive,
    /// The shared pool (kubelet's default cpuset).
    #[default]
    Shared,
    /// CPUs chosen by a resource plugin (QoS Resource Manager).
    Plugin,
}

impl Pool {
    /// The pool's name as shown to operators.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Exclusive => "exclusive",
            Self::Shared => "shared",
            Self::Plugin => "plugin",
        }
    }
}

impl std::fmt::Display for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// OCI Linux resource settings beyond the cpuset; `None` leaves a setting
/// as the runtime (or the cgroup) has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSettings {
    /// CFS quota in microseconds per period; [`UNLIMITED_QUOTA`] = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_period: Option<u64>,
    /// CPU shares (cgroup v1 weight; converted for v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<u64>,
    /// Memory limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<i64>,
    /// Memory + swap limit in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_swap_limit: Option<i64>,
    /// The OOM score adjustment of the container's processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i64>,
    /// cgroup v2 files and their values (OCI `unified`), only those of
    /// [`crate::plugin_allocation::UNIFIED_FILES`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unified: BTreeMap<String, String>,
}

impl ResourceSettings {
    /// True when no setting is given.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The settings `applied` gave that these no longer give, with their
    /// applied values: a plugin's answer dropped or changed to name fewer
    /// settings. Writing only these settings would leave the old values in
    /// place (a cgroup file keeps its text; the runtime keeps what an update
    /// does not name), so the writer puts each one back explicitly: the
    /// kernel's default for a run's cgroup, the runtime's own value for a
    /// container. Zero is CRI's "not set" on both sides; the OOM score
    /// adjustment is not a cgroup setting (the launcher sets it on itself).
    #[must_use]
    pub fn taken_back(&self, applied: &Self) -> Self {
        fn gone<T: PartialEq + Copy + Default>(want: Option<T>, had: Option<T>) -> Option<T> {
            let unset = |v: &Option<T>| v.is_none_or(|v| v == T::default());
            (unset(&want) && !unset(&had)).then_some(had).flatten()
        }
        Self {
            cpu_quota: gone(self.cpu_quota, applied.cpu_quota),
            cpu_period: gone(self.cpu_period, applied.cpu_period),
            cpu_shares: gone(self.cpu_shares, applied.cpu_shares),
            memory_limit: gone(self.memory_limit, applied.memory_limit),
            memory_swap_limit: gone(self.memory_swap_limit, applied.memory_swap_limit),
            oom_score_adj: None,
            unified: applied
                .unified
                .iter()
                .filter(|(file, _)| !self.unified.contains_key(*file))
                .map(|(file, value)| (file.clone(), value.clone()))
                .collect(),
        }
    }
}

/// Where and how a workload runs. The default (empty sets, nothing set)
/// changes nothing: empty `cpus`/`mems` leave the cpuset as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The CPUs it may run on (`cpuset.cpus`).
    pub cpus: CpuSet,
    /// The memory nodes it may allocate from (`cpuset.mems`); empty: as
    /// they are. CPU decisions leave them (kubelet's CPU manager never
    /// writes `cpuset.mems`); only a resource plugin's answer sets them —
    /// the memory plugin's NUMA binding.
    #[serde(default, skip_serializing_if = "CpuSet::is_empty")]
    pub mems: CpuSet,
    pub pool: Pool,
    #[serde(default, skip_serializing_if = "ResourceSettings::is_empty")]
    pub resources: ResourceSettings,
    /// Environment variables the workload starts with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Annotations of the container (runtime front-end only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Placement {
    /// Exclusive CPUs and no CFS quota (exclusive CPUs are never
    /// throttled); memory nodes as they are, like kubelet's static policy.
    /// Narrowing them to the CPUs' nodes would migrate the container's
    /// pages on every move into the cgroup (cgroup v2 always migrates
    /// memory on attach) and confine memory the pod never asked to bind.
    #[must_use]
    pub fn exclusive(cpus: CpuSet) -> Self {
        Self {
            mems: CpuSet::default(),
            cpus,
            pool: Pool::Exclusive,
            resources: ResourceSettings {
                cpu_quota: Some(UNLIMITED_QUOTA),
                ..ResourceSettings::default()
            },
            env: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }

    /// The shared pool `cpus`; memory nodes and other settings are left as
    /// they are.
    #[must_use]
    pub fn shared(cpus: CpuSet) -> Self {
        Self {
            mems: CpuSet::default(),
            cpus,
            pool: Pool::Shared,
            resources: ResourceSettings::default(),
            env: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }

    /// True for exclusive CPUs.
    #[must_use]
    pub fn is_exclusive(&self) -> bool {
        self.pool == Pool::Exclusive
    }

    /// What a cgroup or the runtime may hold once `self` and `earlier` were
    /// both given to it, when it is not known which took (a write that
    /// failed part way, an update the runtime has not answered): `self`'s
    /// memory nodes and each of its resource settings, else `earlier`'s.
    /// Only for deciding what to take back ([`ResourceSettings::taken_back`]);
    /// the CPUs and the rest are `self`'s.
    #[must_use]
    pub fn may_hold_with(&self, earlier: &Self) -> Self {
        let (now, then) = (&self.resources, &earlier.resources);
        let mut unified = then.unified.clone();
        unified.extend(now.unified.iter().map(|(k, v)| (k.clone(), v.clone())));
        Self {
            mems: if self.mems.is_empty() {
                earlier.mems.clone()
            } else {
                self.mems.clone()
            },
            resources: ResourceSettings {
                cpu_quota: now.cpu_quota.or(then.cpu_quota),
                cpu_period: now.cpu_period.or(then.cpu_period),
                cpu_shares: now.cpu_shares.or(then.cpu_shares),
                memory_limit: now.memory_limit.or(then.memory_limit),
                memory_swap_limit: now.memory_swap_limit.or(then.memory_swap_limit),
                oom_score_adj: now.oom_score_adj.or(then.oom_score_adj),
                unified,
            },
            ..self.clone()
        }
    }

    /// Whether `other` asks a running container for the same: CPUs, memory
    /// nodes and resource settings. Environment and annotations reach a
    /// container only when it is created (NRI's `UpdateContainers` cannot
    /// change them), and the pool is a name.
    #[must_use]
    pub fn same_resources(&self, other: &Self) -> bool {
        self.cpus == other.cpus && self.mems == other.mems && self.resources == other.resources
    }

    /// Whether moving a container from `held` to `self` only gives it
    /// more: every CPU and memory node of `held` and at least one more,
    /// and the same resource settings. Such a change takes nothing from
    /// anyone, so it can wait (the shared pool growing back after a pod's
    /// removal). Empty memory nodes are every node.
    #[must_use]
    pub fn only_adds_to(&self, held: &Self) -> bool {
        let mems_kept =
            self.mems.is_empty() || (!held.mems.is_empty() && held.mems.is_subset(&self.mems));
        held.cpus.is_subset(&self.cpus)
            && mems_kept
            && self.resources == held.resources
            && !self.same_resources(held)
    }
}

/// Every memory node of the machine (CPU-less nodes included); node 0 when
/// the machine reports none.
#[must_use]
pub fn all_memory_nodes(topology: &Topology) -> CpuSet {
    let nodes: CpuSet = topology.numa_nodes().iter().map(|n| n.id).collect();
    if nodes.is_empty() {
        CpuSet::from_iter([0])
    } else {
        nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{synthetic, Shape};

    fn two_nodes() -> Topology {
        synthetic(Shape {
            sockets: 2,
            numa_per_socket: 1,
            cores_per_socket: 2,
            threads_per_core: 2,
            cores_per_uncore: 0,
        })
    }

    fn set(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    #[test]
    fn settings_no_longer_given_are_taken_back_with_their_applied_values() {
        let applied = ResourceSettings {
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            cpu_shares: Some(512),
            memory_limit: Some(1 << 30),
            memory_swap_limit: Some(2 << 30),
            oom_score_adj: Some(-998),
            unified: BTreeMap::from([
                ("memory.high".to_string(), "1G".to_string()),
                ("pids.max".to_string(), "100".to_string()),
            ]),
        };
        let desired = ResourceSettings {
            cpu_quota: Some(20_000),
            cpu_period: Some(0),
            unified: BTreeMap::from([("pids.max".to_string(), "50".to_string())]),
            ..ResourceSettings::default()
        };
        let back = desired.taken_back(&applied);
        assert_eq!(
            back,
            ResourceSettings {
                cpu_quota: None,
                cpu_period: Some(100_000),
                cpu_shares: Some(512),
                memory_limit: Some(1 << 30),
                memory_swap_limit: Some(2 << 30),
                oom_score_adj: None,
                unified: BTreeMap::from([("memory.high".to_string(), "1G".to_string())]),
            },
            "a changed value is no take-back; a zero one (CRI's not set) is"
        );
        assert!(applied.taken_back(&applied).is_empty());
        assert!(
            ResourceSettings::default()
                .taken_back(&ResourceSettings {
                    cpu_quota: Some(0),
                    ..ResourceSettings::default()
                })
                .is_empty(),
            "a zero that was applied was never a value"
        );
    }

    #[test]
    fn what_may_be_held_keeps_every_setting_either_placement_gave() {
        let earlier = Placement {
            mems: set("0"),
            resources: ResourceSettings {
                cpu_quota: Some(50_000),
                memory_limit: Some(1 << 30),
                unified: BTreeMap::from([("pids.max".to_string(), "64".to_string())]),
                ..ResourceSettings::default()
            },
            ..Placement::shared(set("0-3"))
        };
        let now = Placement {
            resources: ResourceSettings {
                cpu_quota: Some(20_000),
                cpu_shares: Some(512),
                ..ResourceSettings::default()
            },
            ..Placement::shared(set("4-7"))
        };
        let held = now.may_hold_with(&earlier);
        assert_eq!(held.cpus, set("4-7"));
        assert_eq!(held.mems, set("0"));
        assert_eq!(held.resources.cpu_quota, Some(20_000));
        assert_eq!(held.resources.cpu_shares, Some(512));
        assert_eq!(held.resources.memory_limit, Some(1 << 30));
        assert_eq!(held.resources.unified.len(), 1);
        // What neither names any more is taken back, with either's value.
        let back = ResourceSettings::default().taken_back(&held.resources);
        assert_eq!(back.memory_limit, Some(1 << 30));
        assert_eq!(back.cpu_quota, Some(20_000));
    }

    #[test]
    fn exclusive_placements_have_no_quota_and_shared_ones_leave_it() {
        let topology = two_nodes();
        let node0 = topology.numa_cpus()[&0].clone();
        let exclusive = Placement::exclusive(node0.clone());
        assert_eq!(exclusive.resources.cpu_quota, Some(UNLIMITED_QUOTA));
        assert!(exclusive.is_exclusive());
        let shared = Placement::shared(node0);
        assert_eq!(shared.resources, ResourceSettings::default());
        assert_eq!(shared.pool, Pool::Shared);
    }

    /// Regression: exclusive CPUs on NUMA node 0 narrowed the container's
    /// `cpuset.mems` to node 0. kubelet's static policy never writes
    /// `cpuset.mems`, and on cgroup v2 the narrowing migrated the memory of
    /// every process entering the cgroup (runc's, at a container's start).
    #[test]
    fn cpu_decisions_leave_the_memory_nodes_as_they_are() {
        let topology = two_nodes();
        let node0 = topology.numa_cpus()[&0].clone();
        assert!(Placement::exclusive(node0.clone()).mems.is_empty());
        assert!(Placement::shared(node0).mems.is_empty());
    }

    #[test]
    fn placements_serialize_without_empty_parts() {
        let shared = Placement::shared(set("0-1"));
        let json = serde_json::to_string(&shared).expect("json");
        assert_eq!(json, r#"{"cpus":"0-1","pool":"shared"}"#);
        let back: Placement = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, shared);
        // Placements written with memory nodes (by earlier versions, or
        // from a plugin's answer) still read.
        let bound: Placement =
            serde_json::from_str(r#"{"cpus":"0-1","mems":"0","pool":"shared"}"#).expect("parses");
        assert_eq!(bound.mems, set("0"));
    }

    #[test]
    fn only_a_placement_that_gives_more_and_takes_nothing_adds() {
        let held = Placement::shared(set("2-5"));
        assert!(Placement::shared(set("0-7")).only_adds_to(&held));
        assert!(
            !Placement::shared(set("2-5")).only_adds_to(&held),
            "no change"
        );
        assert!(
            !Placement::shared(set("3-7")).only_adds_to(&held),
            "CPU 2 taken"
        );
        assert!(
            !Placement::exclusive(set("0-7")).only_adds_to(&held),
            "quota set"
        );

        let bound = |cpus: &str, mems: &str| Placement {
            mems: set(mems),
            ..Placement::shared(set(cpus))
        };
        assert!(bound("2-5", "0-1").only_adds_to(&bound("2-5", "0")));
        assert!(
            !bound("2-7", "0").only_adds_to(&bound("2-5", "0-1")),
            "node 1 taken"
        );
        assert!(
            Placement::shared(set("2-5")).only_adds_to(&bound("2-5", "0")),
            "every node again"
        );
        assert!(
            !bound("2-7", "0").only_adds_to(&held),
            "bound to node 0 from every node"
        );
    }
}
