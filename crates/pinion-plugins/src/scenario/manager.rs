//! The simulated manager: what the agent's QoS Resource Manager does with
//! its plugins (spec `qrm.md` §4), one step at a time, without sockets.

use std::collections::{BTreeMap, BTreeSet};

use pinion_core::cpuset::CpuSet;
use pinion_core::pod::Pod;
use pinion_core::pools::{Change, PoolLoad};
use pinion_core::qos::{self, QosLevel};
use pinion_core::qrm_rules::{self, allocation_failure_is_tolerated, PluginRequest};
use pinion_core::topomgr::{Policy, TopologyHint, TopologyManager};

use super::spec::{QrmScenario, Step};
use super::{
    pool_size, Admission, ContainerAdmission, CpuChange, Loads, Plugins, PoolChange, ScenarioError,
    Snapshot, StepOutcome,
};
use crate::api::ResourcePlugin;
use crate::qrm_request;
use crate::PluginError;

/// Why an admission stopped.
enum Refusal {
    /// The pod is rejected (the machine cannot take it).
    Rejected(String),
    /// The scenario is wrong.
    Input(String),
}

pub(super) struct Manager<'a> {
    scenario: &'a QrmScenario,
    topology_manager: TopologyManager,
    plugins: Plugins,
    /// Admitted pods, in admission order of their UIDs.
    pods: BTreeMap<String, Pod>,
    loads: Loads,
}

impl<'a> Manager<'a> {
    pub(super) fn new(
        scenario: &'a QrmScenario,
        topology_manager: TopologyManager,
        plugins: Plugins,
    ) -> Self {
        Self {
            scenario,
            topology_manager,
            plugins,
            pods: BTreeMap::new(),
            loads: Loads::new(),
        }
    }

    /// The plugins that run, in call order (the NIC plugin with its
    /// resource name).
    pub(super) fn plugin_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if self.plugins.cpu.is_some() {
            names.push("cpu".to_string());
        }
        if self.plugins.memory.is_some() {
            names.push("memory".to_string());
        }
        if let Some(nic) = &self.plugins.nic {
            names.push(format!("nic ({})", nic.resource_name()));
        }
        names
    }

    /// The plugins, in call order (cpu, memory, nic).
    fn each(&mut self) -> Vec<&mut dyn ResourcePlugin> {
        let mut out: Vec<&mut dyn ResourcePlugin> = Vec::new();
        if let Some(cpu) = &mut self.plugins.cpu {
            out.push(cpu);
        }
        if let Some(memory) = &mut self.plugins.memory {
            out.push(memory);
        }
        if let Some(nic) = &mut self.plugins.nic {
            out.push(nic);
        }
        out
    }

    fn plugin(&mut self, resource: &str) -> Option<&mut dyn ResourcePlugin> {
        self.each()
            .into_iter()
            .find(|p| p.resource_name() == resource)
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot::take(&self.plugins, &self.pods)
    }

    pub(super) fn step(&mut self, index: usize, step: &Step) -> Result<StepOutcome, ScenarioError> {
        let before = self.cpusets();
        let sizes_before = self.pool_sizes();
        let mut admission = None;
        let mut changes: Option<Vec<Change>> = None;
        let mut untouched = None;
        match step {
            Step::Add { pod } => {
                untouched = Some(pod.clone());
                admission = Some(self.add(index, pod)?);
            }
            Step::Remove { pod } => {
                untouched = Some(pod.clone());
                self.remove(index, pod)?;
            }
            Step::Pressure {
                pool,
                pressure,
                usage,
                periods,
            } => {
                self.check_existing_pool(index, pool)?;
                self.loads.insert(
                    pool.clone(),
                    PoolLoad {
                        pressure: *pressure,
                        usage: *usage,
                    },
                );
                changes = Some(self.reconcile(index, *periods)?);
            }
            Step::Reconcile { periods } => changes = Some(self.reconcile(index, *periods)?),
            Step::Advisor { pool, size } => {
                self.check_known_pool(index, pool)?;
                let cpu = self.cpu(index)?;
                let report = cpu
                    .set_pool_size(pool, pool_size(size))
                    .map_err(|err| step_error(index, &err))?;
                changes = Some(report.pools);
            }
        }
        let pool_changes = match changes {
            Some(changes) => changes
                .into_iter()
                .map(|c| PoolChange {
                    pool: c.pool,
                    from: c.from,
                    to: c.to,
                    reason: c.reason.to_string(),
                })
                .collect(),
            None => self.size_changes(&sizes_before),
        };
        let after = self.cpusets();
        let cpu_changes = after
            .iter()
            .filter(|((pod, _), _)| Some(pod) != untouched.as_ref())
            .filter_map(|(key, to)| {
                let from = before.get(key)?;
                (from != to).then(|| CpuChange {
                    pod: key.0.clone(),
                    container: key.1.clone(),
                    from: from.clone(),
                    to: to.clone(),
                })
            })
            .collect();
        Ok(StepOutcome {
            index,
            step: step.describe(),
            admission,
            pool_changes,
            cpu_changes,
            snapshot: self.snapshot(),
        })
    }

    fn cpu(&mut self, index: usize) -> Result<&mut crate::cpu::CpuPlugin, ScenarioError> {
        self.plugins.cpu.as_mut().ok_or(ScenarioError::Step {
            index,
            step: String::new(),
            what: "pools need the cpu plugin (plugins.cpu)".into(),
        })
    }

    fn cpusets(&self) -> BTreeMap<(String, String), CpuSet> {
        self.plugins
            .cpu
            .as_ref()
            .map(crate::cpu::CpuPlugin::cpusets)
            .unwrap_or_default()
    }

    fn pool_sizes(&self) -> BTreeMap<String, u32> {
        self.plugins
            .cpu
            .as_ref()
            .map(|cpu| {
                cpu.pools()
                    .entries()
                    .iter()
                    .map(|(name, entry)| (name.clone(), entry.size))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Pools whose size changed since `before`, with the reason of their
    /// last change.
    fn size_changes(&self, before: &BTreeMap<String, u32>) -> Vec<PoolChange> {
        let Some(cpu) = &self.plugins.cpu else {
            return Vec::new();
        };
        let entries = cpu.pools().entries();
        let names: BTreeSet<&String> = before.keys().chain(entries.keys()).collect();
        names
            .into_iter()
            .filter_map(|name| {
                let from = before.get(name).copied().unwrap_or(0);
                let entry = entries.get(name);
                let to = entry.map_or(0, |e| e.size);
                let reason = match entry.and_then(|e| e.last_change.as_ref()) {
                    None if entry.is_none() => "removed".to_string(),
                    None => "requests changed".to_string(),
                    Some(change) => change.reason.to_string(),
                };
                (from != to).then(|| PoolChange {
                    pool: name.clone(),
                    from,
                    to,
                    reason,
                })
            })
            .collect()
    }

    /// A pool that exists now (a pressure needs members to measure).
    fn check_existing_pool(&self, index: usize, pool: &str) -> Result<(), ScenarioError> {
        let sizes = self.pool_sizes();
        if sizes.contains_key(pool) {
            return Ok(());
        }
        Err(ScenarioError::Step {
            index,
            step: String::new(),
            what: format!(
                "pool {pool:?} does not exist (pools now: {})",
                names(sizes.keys())
            ),
        })
    }

    /// A pool that exists now or that a pod of the scenario would create
    /// (an advisor may size a pool before its first member arrives).
    fn check_known_pool(&self, index: usize, pool: &str) -> Result<(), ScenarioError> {
        let mut known: BTreeSet<String> = self.pool_sizes().into_keys().collect();
        for spec in self.scenario.pods.values() {
            if let Ok(request) = qos::parse(&spec.annotations) {
                if request.level == QosLevel::SharedCores {
                    known.insert(request.cpuset_pool.clone());
                }
            }
        }
        if known.contains(pool) {
            return Ok(());
        }
        Err(ScenarioError::Step {
            index,
            step: String::new(),
            what: format!(
                "pool {pool:?} does not exist and no pod of the scenario uses it (known pools: {})",
                names(known.iter())
            ),
        })
    }

    fn reconcile(&mut self, index: usize, periods: u32) -> Result<Vec<Change>, ScenarioError> {
        let loads = self.loads.clone();
        let cpu = self.cpu(index)?;
        let mut changes = Vec::new();
        for _ in 0..periods {
            let report = cpu
                .reconcile(&loads)
                .map_err(|err| step_error(index, &err))?;
            changes.extend(report.pools);
        }
        Ok(changes)
    }

    fn remove(&mut self, index: usize, uid: &str) -> Result<(), ScenarioError> {
        if self.pods.remove(uid).is_none() {
            return Err(ScenarioError::Step {
                index,
                step: String::new(),
                what: format!("pod {uid:?} is not admitted"),
            });
        }
        for plugin in self.each() {
            plugin
                .remove_pod(uid)
                .map_err(|err| step_error(index, &err))?;
        }
        let pools = self.pool_sizes();
        self.loads.retain(|pool, _| pools.contains_key(pool));
        Ok(())
    }

    fn add(&mut self, index: usize, uid: &str) -> Result<Admission, ScenarioError> {
        let spec = self
            .scenario
            .pods
            .get(uid)
            .ok_or_else(|| ScenarioError::Step {
                index,
                step: String::new(),
                what: format!("pod {uid:?} is not in `pods`"),
            })?;
        if self.pods.contains_key(uid) {
            return Err(ScenarioError::Step {
                index,
                step: String::new(),
                what: format!("pod {uid:?} is already admitted"),
            });
        }
        let pod = spec.to_pod(uid).map_err(|what| ScenarioError::Step {
            index,
            step: String::new(),
            what: format!("pod {uid}: {what}"),
        })?;
        let mut containers = Vec::new();
        let names: Vec<String> = pod.all_containers().map(|c| c.name.clone()).collect();
        for name in &names {
            match self.admit_container(&pod, name) {
                Ok(admitted) => containers.push(admitted),
                Err(Refusal::Input(what)) => {
                    return Err(ScenarioError::Step {
                        index,
                        step: String::new(),
                        what: format!("pod {uid} container {name}: {what}"),
                    })
                }
                Err(Refusal::Rejected(reason)) => {
                    for plugin in self.each() {
                        plugin
                            .remove_pod(uid)
                            .map_err(|err| step_error(index, &err))?;
                    }
                    return Ok(Admission {
                        pod: uid.to_string(),
                        admitted: false,
                        reason: Some(format!("container {name}: {reason}")),
                        containers,
                    });
                }
            }
        }
        self.pods.insert(uid.to_string(), pod);
        Ok(Admission {
            pod: uid.to_string(),
            admitted: true,
            reason: None,
            containers,
        })
    }

    /// Hints, merge, `Allocate` for one container (spec §4.4, §4.5).
    fn admit_container(&mut self, pod: &Pod, name: &str) -> Result<ContainerAdmission, Refusal> {
        let asks = self.asks(pod, name)?;
        let affinity = if self.topology_manager.policy() == Policy::None {
            None
        } else {
            Some(self.merged_hint(pod, name, &asks)?)
        };
        let mut skipped = Vec::new();
        for ask in &asks {
            let Some(plugin) = self.plugin(&ask.resource) else {
                continue;
            };
            let hint =
                qrm_request::allocate_hint(plugin.options().with_topology_alignment, affinity);
            let request = qrm_request::request(pod, name, ask, hint);
            match plugin.allocate(&request) {
                Ok(_) => {}
                Err(err) if is_input_error(&err) => {
                    return Err(Refusal::Input(format!("{}: {err}", ask.resource)))
                }
                Err(err) if allocation_failure_is_tolerated(pod, name) => {
                    skipped.push(format!("{}: {err}", ask.resource));
                }
                Err(err) => return Err(Refusal::Rejected(format!("{}: {err}", ask.resource))),
            }
        }
        Ok(ContainerAdmission {
            container: name.to_string(),
            hint: affinity.map(|a| qrm_request::hint(&a)),
            skipped,
        })
    }

    /// The requested resources a plugin that runs serves (the rules of
    /// the agent's manager, `pinion_core::qrm_rules::plugin_requests`).
    fn asks(&mut self, pod: &Pod, name: &str) -> Result<Vec<PluginRequest>, Refusal> {
        let served: BTreeSet<String> = self
            .each()
            .into_iter()
            .map(|p| p.resource_name().to_string())
            .collect();
        qrm_rules::plugin_requests(pod, name, &self.scenario.resource_names_map, |resource| {
            served.contains(resource)
        })
        .map_err(|err| Refusal::Input(err.to_string()))
    }

    /// Every topology-aligned plugin's hints for the container, merged by
    /// the Topology Manager; a rejection when the policy refuses.
    fn merged_hint(
        &mut self,
        pod: &Pod,
        name: &str,
        asks: &[PluginRequest],
    ) -> Result<TopologyHint, Refusal> {
        let mut hints = BTreeMap::new();
        for ask in asks.iter().filter(|a| qrm_rules::asks_for_hints(a)) {
            let request = qrm_request::request(pod, name, ask, None);
            let Some(plugin) = self.plugin(&ask.resource) else {
                continue;
            };
            if !plugin.options().with_topology_alignment {
                continue;
            }
            let list = match plugin.topology_hints(&request) {
                Ok(list) => list.map(|l| l.iter().filter_map(qrm_request::topology_hint).collect()),
                Err(err) if is_input_error(&err) => {
                    return Err(Refusal::Input(format!("{}: {err}", ask.resource)))
                }
                Err(_) => Some(Vec::new()),
            };
            hints.insert(ask.resource.clone(), list);
        }
        let admission = self.topology_manager.merge(&[Some(hints)]);
        admission
            .result()
            .map_err(|err| Refusal::Rejected(format!("{err} (TopologyAffinityError)")))
    }
}

fn names<'n>(names: impl Iterator<Item = &'n String>) -> String {
    let list: Vec<&str> = names.map(String::as_str).collect();
    if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    }
}

fn step_error(index: usize, err: &PluginError) -> ScenarioError {
    ScenarioError::Step {
        index,
        step: String::new(),
        what: err.to_string(),
    }
}

/// Errors of the scenario's own making (bad annotations or quantities) or
/// of the plugin itself, which stop the simulation; every other error (no
/// room, NUMA nodes held, SMT alignment, …) rejects the pod.
fn is_input_error(err: &PluginError) -> bool {
    matches!(
        err,
        PluginError::Qos(_)
            | PluginError::BadQuantity { .. }
            | PluginError::RequestCount { .. }
            | PluginError::RequestMissing { .. }
            | PluginError::WrongResource { .. }
            | PluginError::Store(_)
            | PluginError::Config { .. }
            | PluginError::Restore { .. }
    )
}
