//! The CPU plugin's state (saved as JSON in its state file) and what is
//! derived from it: CPUs held off the pools, pool demands, and every
//! container's current cpuset.

use std::collections::BTreeMap;

use pinion_core::pools::{Cpus, PoolDemand, Pools, PoolsWithoutParams};
use pinion_core::record::SideValue;
use pinion_core::state::State;
use pinion_core::{CpuSet, Topology};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::api::Hint;

/// How one container gets its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "level")]
pub enum MemberKind {
    /// `dedicated_cores`: exclusive CPUs.
    Dedicated {
        numa_binding: bool,
        numa_exclusive: bool,
    },
    /// A Guaranteed pod with integer CPUs and no QoS annotation: exclusive
    /// CPUs exactly as the static policy gives them.
    Static,
    /// `shared_cores` in pool `pool` (NUMA-bound pools carry their nodes).
    Shared {
        pool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        numa: Option<CpuSet>,
    },
    /// `reclaimed_cores` (on the reclaim CPUs of `numa` when bound).
    Reclaimed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        numa: Option<CpuSet>,
    },
    /// `system_cores`: the reserved CPUs.
    System,
}

impl MemberKind {
    /// The pool name shown to operators.
    #[must_use]
    pub fn pool_name(&self) -> &str {
        match self {
            Self::Dedicated { .. } => "dedicated",
            Self::Static => "static",
            Self::Shared { pool, .. } => pool,
            Self::Reclaimed { .. } => "reclaim",
            Self::System => "system",
        }
    }

    /// Exclusive CPUs (dedicated or static).
    #[must_use]
    pub fn is_exclusive(&self) -> bool {
        matches!(self, Self::Dedicated { .. } | Self::Static)
    }
}

/// One container the plugin placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    #[serde(default)]
    pub pod_namespace: String,
    #[serde(default)]
    pub pod_name: String,
    pub kind: MemberKind,
    /// CPU request in milli-CPUs.
    pub request_milli: u64,
    /// The hint it was allocated for (empty = none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<Hint>,
    /// Its CPUs at allocation time.
    pub original: CpuSet,
}

/// Everything the CPU plugin remembers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuState {
    /// Exclusive CPUs in kubelet's shape: the default set and the
    /// assignments of dedicated and static containers.
    pub exclusive: State,
    /// Pod UID → the NUMA nodes it holds alone (`numa_exclusive`).
    #[serde(default)]
    pub exclusive_numa: BTreeMap<String, CpuSet>,
    /// Pod UID → container → member.
    #[serde(default)]
    pub containers: BTreeMap<String, BTreeMap<String, Member>>,
    #[serde(default)]
    pub pools: Pools,
}

impl CpuState {
    /// The member `pod`/`container`.
    #[must_use]
    pub fn member(&self, pod: &str, container: &str) -> Option<&Member> {
        self.containers.get(pod)?.get(container)
    }

    /// Every member with its pod and container.
    pub fn members(&self) -> impl Iterator<Item = (&str, &str, &Member)> {
        self.containers.iter().flat_map(|(pod, containers)| {
            containers
                .iter()
                .map(move |(name, member)| (pod.as_str(), name.as_str(), member))
        })
    }

    /// The CPUs of NUMA nodes that pods hold exclusively (except `pod`'s own).
    #[must_use]
    pub fn blocked(&self, topology: &Topology, except: Option<&str>) -> CpuSet {
        let mut cpus = CpuSet::new();
        for (owner, nodes) in &self.exclusive_numa {
            if Some(owner.as_str()) == except {
                continue;
            }
            for node in nodes {
                if let Some(node_cpus) = topology.numa_cpus().get(&node) {
                    cpus.union_with(node_cpus);
                }
            }
        }
        cpus
    }

    /// NUMA nodes held exclusively by pods other than `except`.
    #[must_use]
    pub fn held_nodes(&self, except: Option<&str>) -> CpuSet {
        let mut nodes = CpuSet::new();
        for (owner, held) in &self.exclusive_numa {
            if Some(owner.as_str()) != except {
                nodes.union_with(held);
            }
        }
        nodes
    }

    /// CPUs the pools may not use: exclusive CPUs and exclusive NUMA nodes.
    #[must_use]
    pub fn held(&self, topology: &Topology) -> CpuSet {
        let mut held = self.exclusive.exclusive_cpus();
        held.union_with(&self.blocked(topology, None));
        held
    }

    /// The shared pools' demands from their members.
    #[must_use]
    pub fn demands(&self) -> BTreeMap<String, PoolDemand> {
        let mut demands: BTreeMap<String, PoolDemand> = BTreeMap::new();
        for (_, _, member) in self.members() {
            if let MemberKind::Shared { pool, numa } = &member.kind {
                let demand = demands.entry(pool.clone()).or_default();
                demand.members += 1;
                demand.requests_milli = demand.requests_milli.saturating_add(member.request_milli);
                demand.numa.clone_from(numa);
            }
        }
        demands
    }

    /// Syncs the pools with their members and lays them out.
    pub fn relayout(&mut self, topology: &Topology, reserved: &CpuSet) {
        let demands = self.demands();
        self.pools.sync(&demands);
        let held = self.held(topology);
        self.pools.relayout(Cpus {
            topology,
            reserved,
            held: &held,
        });
    }

    /// The current cpuset of `pod`/`container` (empty when unknown).
    #[must_use]
    pub fn cpuset(
        &self,
        topology: &Topology,
        reserved: &CpuSet,
        pod: &str,
        container: &str,
    ) -> CpuSet {
        let Some(member) = self.member(pod, container) else {
            return CpuSet::new();
        };
        let plan = self.pools.plan();
        match &member.kind {
            MemberKind::Dedicated { .. } | MemberKind::Static => self
                .exclusive
                .assignment(pod, container)
                .cloned()
                .unwrap_or_default(),
            MemberKind::Shared { pool, .. } => plan.shared.get(pool).cloned().unwrap_or_default(),
            MemberKind::Reclaimed { numa } => {
                let on_nodes = numa
                    .as_ref()
                    .map(|nodes| {
                        pinion_core::pools::layout::allowed_cpus(
                            topology,
                            &plan.reclaim,
                            Some(nodes),
                        )
                    })
                    .unwrap_or_default();
                if on_nodes.is_empty() {
                    plan.reclaim.clone()
                } else {
                    on_nodes
                }
            }
            MemberKind::System => {
                if reserved.is_empty() {
                    let mut held = self.held(topology);
                    held.union_with(topology.isolated());
                    topology.all_cpus().difference(&held)
                } else {
                    reserved.clone()
                }
            }
        }
    }

    /// Every member's current cpuset.
    #[must_use]
    pub fn cpusets(
        &self,
        topology: &Topology,
        reserved: &CpuSet,
    ) -> BTreeMap<(String, String), CpuSet> {
        self.members()
            .map(|(pod, container, _)| {
                (
                    (pod.to_string(), container.to_string()),
                    self.cpuset(topology, reserved, pod, container),
                )
            })
            .collect()
    }
}

/// A pod's part of the CPU state in the agent's journal, as read back.
#[derive(Debug, Default, Deserialize)]
struct PodPart {
    #[serde(default)]
    containers: BTreeMap<String, Member>,
    #[serde(default)]
    exclusive_numa: Option<CpuSet>,
    /// Its containers' exclusive CPUs.
    #[serde(default)]
    assignments: BTreeMap<String, CpuSet>,
}

/// [`PodPart`] as written: borrowed from the state (no copy), empty parts
/// left out.
#[derive(Serialize)]
struct PodPartRef<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    containers: Option<&'a BTreeMap<String, Member>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exclusive_numa: Option<&'a CpuSet>,
    #[serde(skip_serializing_if = "Option::is_none")]
    assignments: Option<&'a BTreeMap<String, CpuSet>>,
}

/// The rest: the shared CPUs and the pools. Entries written before
/// issue 30 carry the pools' parameters too; they are read and then
/// replaced by the configuration's, as the new entries' missing ones are.
#[derive(Debug, Deserialize)]
struct RestPart {
    default: CpuSet,
    pools: Pools,
}

/// [`RestPart`] borrowed from the state, to encode it without a copy, and
/// without the pools' parameters ([`Pools::without_params`]).
#[derive(Serialize)]
struct RestPartRef<'a> {
    default: &'a CpuSet,
    pools: PoolsWithoutParams<'a>,
}

/// In the journal: one entry per pod (its members, NUMA nodes held alone
/// and exclusive CPUs), and the default set and the pools as the rest.
impl crate::store::Entries for CpuState {
    fn pod_uids(&self) -> Vec<String> {
        let mut uids: std::collections::BTreeSet<&String> = self.containers.keys().collect();
        uids.extend(self.exclusive_numa.keys());
        uids.extend(self.exclusive.assignments.keys());
        uids.into_iter().cloned().collect()
    }

    fn pod_entry(&self, uid: &str) -> Option<SideValue> {
        let part = PodPartRef {
            containers: self.containers.get(uid).filter(|c| !c.is_empty()),
            exclusive_numa: self.exclusive_numa.get(uid),
            assignments: self
                .exclusive
                .assignments
                .get(uid)
                .filter(|a| !a.is_empty()),
        };
        let empty = part.containers.is_none()
            && part.exclusive_numa.is_none()
            && part.assignments.is_none();
        // CPU sets, strings and numbers always encode.
        (!empty).then(|| SideValue::encode(&part).unwrap_or_else(|_| json!({}).into()))
    }

    fn rest_entry(&self) -> SideValue {
        SideValue::encode(&RestPartRef {
            default: &self.exclusive.default,
            pools: self.pools.without_params(),
        })
        .unwrap_or_else(|_| json!({}).into())
    }

    fn from_entries(rest: SideValue, pods: BTreeMap<String, SideValue>) -> Result<Self, String> {
        let rest: RestPart = rest.decode().map_err(|err| format!("the rest: {err}"))?;
        let mut state = CpuState {
            pools: rest.pools,
            ..CpuState::default()
        };
        state.exclusive.default = rest.default;
        for (uid, part) in pods {
            let part: PodPart = part.decode().map_err(|err| format!("pod {uid}: {err}"))?;
            if !part.containers.is_empty() {
                state.containers.insert(uid.clone(), part.containers);
            }
            if let Some(nodes) = part.exclusive_numa {
                state.exclusive_numa.insert(uid.clone(), nodes);
            }
            if !part.assignments.is_empty() {
                state.exclusive.assignments.insert(uid, part.assignments);
            }
        }
        Ok(state)
    }
}
