//! The CPU plugin (resource `cpu`): katalyst's QoS levels over Pinion's
//! role-based pools.
//!
//! | who | CPUs |
//! |---|---|
//! | Guaranteed pod, integer CPUs, no `qos_level` annotation | exclusive, exactly as the static policy (`StaticPolicy`) chooses them |
//! | `dedicated_cores` | exclusive (the same allocator); `numa_binding` → only CPUs of the hinted NUMA node(s); `numa_exclusive` → those nodes hold no other pod |
//! | `shared_cores` | the named shared pool (`cpuset_pool`, default `share`; `<pool>@<nodes>` when NUMA-bound) |
//! | `reclaimed_cores` | the reclaim pool (its CPUs on the hinted nodes when NUMA-bound) |
//! | `system_cores` | the reserved CPUs |
//!
//! Answers are katalyst's (`qrm.md` §4.9): `CpusetCpus`, the cpulist, the
//! number of CPUs as `allocated_quantity`. [`CpuPlugin::reconcile`] runs
//! one period of the pools' closed loop and reports the containers whose
//! cpuset changed.

pub use handle::{CpuPluginHandle, LoadSources, Pinned, SetPoolError};

mod admit;
mod class;
mod handle;
mod hints;
#[cfg(test)]
mod isolated_tests;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use pinion_core::policy::{Reservation, StaticPolicy, StaticPolicyOptions};
use pinion_core::pools::{Change, Cpus, PoolLoad, PoolParams, PoolSize, Pools};
use pinion_core::qos::QosLevel;
use pinion_core::{CpuSet, Topology};
use serde::{Deserialize, Serialize};

use crate::api::{
    AllocatableResource, Allocation, AllocationInfo, Allocations, Options, Request, ResourcePlugin,
    TopologyAwareQuantity, TopologyAwareResource,
};
use crate::store::{Changed, StateFile, Store};
use crate::{request, PluginError};

pub use state::{CpuState, Member, MemberKind};

/// The resource this plugin serves.
pub const RESOURCE: &str = "cpu";
/// Its state file in the state directory.
pub const STATE_FILE: &str = "pinion_cpu_plugin_state.json";

/// Configuration (agent config `qosResourceManager.plugins.cpu`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct CpuPluginConfig {
    /// How many CPUs are reserved (the system pool), chosen like kubelet's
    /// static policy when `reservedCpuList` is empty. Default 1, as the agent.
    pub reserved_cpus: usize,
    /// Explicit reserved CPUs (its size must equal `reservedCpus`).
    pub reserved_cpu_list: CpuSet,
    /// Static policy options for exclusive allocations.
    pub static_policy_options: StaticPolicyOptions,
    /// Pool sizing.
    pub pools: PoolParams,
}

impl Default for CpuPluginConfig {
    fn default() -> Self {
        Self {
            reserved_cpus: 1,
            reserved_cpu_list: CpuSet::new(),
            static_policy_options: StaticPolicyOptions::default(),
            pools: PoolParams::default(),
        }
    }
}

/// One container whose cpuset changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerChange {
    pub pod_uid: String,
    pub container: String,
    pub from: CpuSet,
    pub to: CpuSet,
}

/// What a reconcile period or a pin changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconcileReport {
    /// Pool size changes, with their reasons.
    pub pools: Vec<Change>,
    /// Containers whose cpuset changed.
    pub containers: Vec<ContainerChange>,
}

/// The CPU plugin.
#[derive(Debug)]
pub struct CpuPlugin {
    policy: StaticPolicy,
    state: CpuState,
    store: Store,
}

impl CpuPlugin {
    /// A plugin for `topology`, restoring its state from `state_dir` (none =
    /// in memory only). A restored state must fit the machine and the
    /// reservation (kubelet's `validateState` rules).
    pub fn open(
        topology: Topology,
        config: &CpuPluginConfig,
        state_dir: Option<&Path>,
    ) -> Result<Self, PluginError> {
        Self::open_with_store(
            topology,
            config,
            StateFile::new(state_dir, STATE_FILE).into(),
        )
    }

    /// [`CpuPlugin::open`] with its state in `store`.
    pub fn open_with_store(
        topology: Topology,
        config: &CpuPluginConfig,
        mut store: Store,
    ) -> Result<Self, PluginError> {
        config.pools.validate()?;
        if config.pools.reclaim_min == 0 {
            return Err(PluginError::Config {
                plugin: RESOURCE,
                reason: format!(
                    "pools.reclaimMin must be at least 1 ({} need a cpu)",
                    QosLevel::ReclaimedCores
                ),
            });
        }
        let reservation = Reservation {
            count: config.reserved_cpus,
            cpus: config.reserved_cpu_list.clone(),
        };
        let policy = StaticPolicy::new(topology, config.static_policy_options, &reservation)?;
        let mut state: CpuState = store.load()?.unwrap_or_default();
        state.pools.set_params(config.pools.clone());
        // CPUs that went offline (or came back) while the agent was down:
        // followed as at run time, instead of refusing the state (which
        // kept the agent from starting).
        let known = state
            .exclusive
            .default
            .union(&state.exclusive.exclusive_cpus());
        if !state.exclusive.default.is_empty() && &known != policy.topology().all_cpus() {
            state.exclusive = follow_online_cpus(&policy, &state.exclusive, &known)?;
        }
        policy
            .start(&mut state.exclusive)
            .map_err(|err| PluginError::Restore {
                plugin: RESOURCE,
                reason: err.to_string(),
            })?;
        check_members(&state)?;
        let mut plugin = Self {
            policy,
            state,
            store,
        };
        plugin
            .state
            .relayout(plugin.policy.topology(), plugin.policy.reserved());
        plugin.save(Changed::All)?;
        Ok(plugin)
    }

    /// The machine.
    #[must_use]
    pub fn topology(&self) -> &Topology {
        self.policy.topology()
    }

    /// The reserved (system) CPUs.
    #[must_use]
    pub fn reserved(&self) -> &CpuSet {
        self.policy.reserved()
    }

    /// The state (for `pinion pools` and tests).
    #[must_use]
    pub fn state(&self) -> &CpuState {
        &self.state
    }

    /// The pools.
    #[must_use]
    pub fn pools(&self) -> &Pools {
        &self.state.pools
    }

    /// The current cpuset of a container (empty when unknown).
    #[must_use]
    pub fn cpuset(&self, pod: &str, container: &str) -> CpuSet {
        self.state
            .cpuset(self.topology(), self.reserved(), pod, container)
    }

    /// Every container's current cpuset.
    #[must_use]
    pub fn cpusets(&self) -> BTreeMap<(String, String), CpuSet> {
        self.state.cpusets(self.topology(), self.reserved())
    }

    /// Members of each pool (pool name → (pod, container)), for the caller
    /// that reads their cgroups' load.
    #[must_use]
    pub fn pool_members(&self) -> BTreeMap<String, Vec<(String, String)>> {
        let mut pools: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (pod, container, member) in self.state.members() {
            if let MemberKind::Shared { pool, .. } = &member.kind {
                pools
                    .entry(pool.clone())
                    .or_default()
                    .push((pod.to_string(), container.to_string()));
            }
        }
        pools
    }

    /// Per-pool loads from per-container loads: the highest pressure and
    /// the sum of the busy CPUs (unknown when any member's is unknown).
    #[must_use]
    pub fn pool_loads(
        &self,
        containers: &BTreeMap<(String, String), PoolLoad>,
    ) -> BTreeMap<String, PoolLoad> {
        let mut loads: BTreeMap<String, PoolLoad> = BTreeMap::new();
        for (pool, members) in self.pool_members() {
            let mut pressure = 0.0f64;
            let mut usage = Some(0.0f64);
            let mut measured = false;
            for key in &members {
                let Some(load) = containers.get(key) else {
                    usage = None;
                    continue;
                };
                measured = true;
                pressure = pressure.max(load.pressure);
                usage = usage.zip(load.usage).map(|(a, b)| a + b);
            }
            if measured {
                loads.insert(pool, PoolLoad { pressure, usage });
            }
        }
        loads
    }

    /// One reconcile period of the pools' closed loop with `loads` (pool
    /// name → load); returns the pool changes and the containers whose
    /// cpuset changed. The state is saved when anything changed.
    pub fn reconcile(
        &mut self,
        loads: &BTreeMap<String, PoolLoad>,
    ) -> Result<ReconcileReport, PluginError> {
        let before = self.cpusets();
        let topology = self.policy.topology();
        let held = self.state.held(topology);
        let demands = self.state.demands();
        self.state.pools.sync(&demands);
        let pools = self.state.pools.reconcile(
            Cpus {
                topology,
                reserved: self.policy.reserved(),
                held: &held,
            },
            loads,
        );
        self.finish(&before, pools)
    }

    /// Follows the machine's online CPUs (`topology`, after CPU hot-plug),
    /// as the agent's own state does (`pinion_core::hotplug`): an exclusive
    /// container that lost a CPU gets a free one in its place (or keeps
    /// what is left), a CPU back online is free, reserved CPUs stay
    /// reserved, and the pools are laid out again on the CPUs left. Returns
    /// the containers whose cpuset changed (the manager's next poll pushes
    /// them). Until now the plugin kept the machine it started on: it
    /// answered offline CPUs, which the manager refuses.
    pub fn follow_topology(&mut self, topology: &Topology) -> Result<ReconcileReport, PluginError> {
        if topology.all_cpus() == self.policy.topology().all_cpus() {
            return Ok(ReconcileReport::default());
        }
        let before = self.cpusets();
        let known = self.policy.topology().all_cpus().clone();
        let policy = policy_on(&self.policy, topology)?;
        let mut state = self.state.clone();
        state.exclusive = follow_online_cpus(&policy, &state.exclusive, &known)?;
        check_members(&state)?;
        state.relayout(policy.topology(), policy.reserved());
        self.policy = policy;
        self.state = state;
        self.save(Changed::All)?;
        self.finish(&before, Vec::new())
    }

    /// Pins pool `name` (`pinion pools set NAME=SIZE|MIN-MAX|auto`).
    /// Whether pinning pool `name` to `size` keeps every pool's minimum and
    /// reclaim's on the CPUs the exclusive holders leave (the check every
    /// admission makes; a pin that fails it would refuse them all). When
    /// the pools do not fit already (CPUs went offline), a pin that does not
    /// raise the pool's minimum makes nothing worse and is taken.
    pub fn pin_fits(
        &self,
        name: &str,
        size: PoolSize,
    ) -> Result<(), pinion_core::pools::PoolError> {
        let mut trial = self.state.pools.clone();
        trial.set_pin(name, size);
        let held = self.state.held(self.policy.topology());
        let demands = self.state.demands();
        let fits = trial.check(
            Cpus {
                topology: self.policy.topology(),
                reserved: self.policy.reserved(),
                held: &held,
            },
            &demands,
        );
        let requests = demands.get(name).map_or(0, |d| d.requests_milli);
        let floor = |pools: &pinion_core::pools::Pools| pools.bounds_of(name, requests).0;
        match fits {
            Err(_) if floor(&trial) <= floor(&self.state.pools) => Ok(()),
            fits => fits,
        }
    }

    pub fn set_pool_size(
        &mut self,
        name: &str,
        size: PoolSize,
    ) -> Result<ReconcileReport, PluginError> {
        let before = self.cpusets();
        let mut pools: Vec<Change> = self.state.pools.set_pin(name, size).into_iter().collect();
        let held = self.state.held(self.policy.topology());
        pools.extend(self.state.pools.relayout(Cpus {
            topology: self.policy.topology(),
            reserved: self.policy.reserved(),
            held: &held,
        }));
        let report = self.finish(&before, pools)?;
        if report.pools.is_empty() && report.containers.is_empty() {
            // The pin itself is kept, even when the pool already has that size.
            self.save(Changed::Rest)?;
        }
        Ok(report)
    }

    fn finish(
        &mut self,
        before: &BTreeMap<(String, String), CpuSet>,
        pools: Vec<Change>,
    ) -> Result<ReconcileReport, PluginError> {
        let after = self.cpusets();
        let containers: Vec<ContainerChange> = after
            .into_iter()
            .filter_map(|(key, to)| {
                let from = before.get(&key).cloned().unwrap_or_default();
                (from != to).then_some(ContainerChange {
                    pod_uid: key.0,
                    container: key.1,
                    from,
                    to,
                })
            })
            .collect();
        if !pools.is_empty() || !containers.is_empty() {
            // Pools and pins are the rest of the state; members' cpusets
            // follow from them.
            self.save(Changed::Rest)?;
        }
        Ok(ReconcileReport { pools, containers })
    }

    fn save(&mut self, changed: Changed<'_>) -> Result<(), PluginError> {
        Ok(self.store.save(&self.state, changed)?)
    }

    /// The allocation answer for a member.
    fn info(&self, pod: &str, container: &str) -> Option<AllocationInfo> {
        let member = self.state.member(pod, container)?;
        let cpus = self.cpuset(pod, container);
        Some(answer(member, &CpusetAnswer::of(self.topology(), &cpus)))
    }
}

/// The parts of an answer that follow from the cpuset alone: its list text
/// and CPUs per NUMA node. Every shared container of a pool has the same
/// cpuset, so [`ResourcePlugin::allocations`] works them out once per
/// distinct cpuset rather than once per container.
#[derive(Debug)]
struct CpusetAnswer {
    count: usize,
    list: String,
    per_numa: BTreeMap<u64, u64>,
}

impl CpusetAnswer {
    fn of(topology: &Topology, cpus: &CpuSet) -> Self {
        Self {
            count: cpus.len(),
            list: cpus.to_string(),
            per_numa: per_numa(topology, cpus)
                .into_iter()
                .map(|(node, count)| (u64::from(node), count as u64))
                .collect(),
        }
    }
}

/// A member's allocation answer for cpuset `cpus`.
fn answer(member: &Member, cpus: &CpusetAnswer) -> AllocationInfo {
    AllocationInfo {
        oci_property_name: "CpusetCpus".into(),
        is_node_resource: false,
        is_scalar_resource: true,
        allocated_quantity: cpus.count as f64,
        allocation_result: cpus.list.clone(),
        resource_hints: member.hints.clone(),
        topology_assignments: cpus.per_numa.clone(),
        ..AllocationInfo::default()
    }
}

/// Each member's exclusive CPUs must be in the restored assignments.
/// `policy` (the plugin's static policy) on the machine `topology`: the
/// same options, its reserved CPUs those online now
/// (`pinion_core::hotplug::policy_on`).
fn policy_on(policy: &StaticPolicy, topology: &Topology) -> Result<StaticPolicy, PluginError> {
    let old = pinion_core::policy::Policy::Static(Box::new(policy.clone()));
    match pinion_core::hotplug::policy_on(&old, topology)? {
        pinion_core::policy::Policy::Static(new) => Ok(*new),
        pinion_core::policy::Policy::None => Err(PluginError::Restore {
            plugin: RESOURCE,
            reason: "the cpu plugin's policy is not the static policy".to_string(),
        }),
    }
}

/// The exclusive state `exclusive`, made when the online CPUs were
/// `known`, followed onto `policy`'s machine with the agent's hot-plug rule
/// (`pinion_core::hotplug::follow_online`); each container that moved is
/// logged.
fn follow_online_cpus(
    policy: &StaticPolicy,
    exclusive: &pinion_core::state::State,
    known: &CpuSet,
) -> Result<pinion_core::state::State, PluginError> {
    let policy = pinion_core::policy::Policy::Static(Box::new(policy.clone()));
    let followed = pinion_core::hotplug::follow_online(
        exclusive,
        &pinion_core::state::PodCpus::new(),
        known,
        &policy,
    );
    tracing::warn!(gone = %followed.gone, back = %followed.back, "the cpu plugin follows the online cpus");
    for outcome in followed.rebuilt.outcomes.iter().filter(|o| !o.unmoved()) {
        tracing::warn!(pod = %outcome.pod, container = %outcome.container, from = %outcome.observed, to = %outcome.cpus, "the cpu plugin moved a container off offline cpus");
    }
    Ok(followed.rebuilt.state)
}

fn check_members(state: &CpuState) -> Result<(), PluginError> {
    for (pod, container, member) in state.members() {
        if member.kind.is_exclusive() && state.exclusive.assignment(pod, container).is_none() {
            return Err(PluginError::Restore {
                plugin: RESOURCE,
                reason: format!("{pod}/{container} is exclusive but holds no cpus"),
            });
        }
    }
    Ok(())
}

/// CPUs per NUMA node (nodes without any omitted).
fn per_numa(topology: &Topology, cpus: &CpuSet) -> BTreeMap<u32, usize> {
    topology
        .numa_cpus()
        .iter()
        .map(|(&node, node_cpus)| (node, node_cpus.intersection_len(cpus)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn quantities(topology: &Topology, cpus: &CpuSet) -> Vec<TopologyAwareQuantity> {
    per_numa(topology, cpus)
        .into_iter()
        .map(|(node, n)| TopologyAwareQuantity::numa(u64::from(node), n as f64))
        .collect()
}

impl ResourcePlugin for CpuPlugin {
    fn resource_name(&self) -> &str {
        RESOURCE
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: true,
            need_reconcile: true,
        }
    }

    fn topology_hints(&self, request: &Request) -> Result<Option<Vec<crate::Hint>>, PluginError> {
        hints::topology_hints(self, request)
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        request::check_resource(request, RESOURCE)?;
        let placed = admit::admit(self, request)?;
        if !placed {
            return Ok(None);
        }
        if let Err(err) = self.save(Changed::Pod(&request.pod_uid)) {
            self.forget(&request.pod_uid, &request.container_name);
            return Err(err);
        }
        Ok(self
            .info(&request.pod_uid, &request.container_name)
            .map(|info| Allocation::from([(RESOURCE.to_string(), info)])))
    }

    fn allocations(&self) -> Allocations {
        let mut all = Allocations::new();
        let mut described: HashMap<CpuSet, CpusetAnswer> = HashMap::new();
        for (pod, container, member) in self.state.members() {
            let cpus = self.cpuset(pod, container);
            let cpus = described
                .entry(cpus)
                .or_insert_with_key(|cpus| CpusetAnswer::of(self.topology(), cpus));
            all.entry(pod.to_string()).or_default().insert(
                container.to_string(),
                Allocation::from([(RESOURCE.to_string(), answer(member, cpus))]),
            );
        }
        all
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        let Some(containers) = self.state.containers.get(pod_uid) else {
            return Ok(());
        };
        let names: Vec<String> = containers.keys().cloned().collect();
        for name in names {
            self.forget(pod_uid, &name);
        }
        self.save(Changed::Pod(pod_uid))
    }

    fn topology_aware_resources(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<BTreeMap<String, TopologyAwareResource>, PluginError> {
        let member =
            self.state
                .member(pod_uid, container)
                .ok_or_else(|| PluginError::UnknownContainer {
                    resource: RESOURCE.into(),
                    pod: pod_uid.into(),
                    container: container.into(),
                })?;
        let cpus = self.cpuset(pod_uid, container);
        let topology = self.topology();
        Ok(BTreeMap::from([(
            RESOURCE.to_string(),
            TopologyAwareResource {
                is_node_resource: false,
                is_scalar_resource: true,
                aggregated_quantity: cpus.len() as f64,
                original_aggregated_quantity: member.original.len() as f64,
                topology_aware_quantity_list: quantities(topology, &cpus),
                original_topology_aware_quantity_list: quantities(topology, &member.original),
            },
        )]))
    }

    fn allocatable_resources(&self) -> BTreeMap<String, AllocatableResource> {
        let topology = self.topology();
        let all = topology.all_cpus();
        let allocatable = all.difference(self.reserved());
        BTreeMap::from([(
            RESOURCE.to_string(),
            AllocatableResource {
                is_node_resource: false,
                is_scalar_resource: true,
                aggregated_allocatable_quantity: allocatable.len() as f64,
                topology_aware_allocatable_quantity_list: quantities(topology, &allocatable),
                aggregated_capacity_quantity: all.len() as f64,
                topology_aware_capacity_quantity_list: quantities(topology, all),
            },
        )])
    }
}
