//! Allocate and release: the member a request's class makes, and the
//! exclusive CPUs, pool membership and NUMA ownership that go with it.

use pinion_core::policy::{ContainerKind, ContainerRequest, CpuAsk, IsolatedAsk};
use pinion_core::pools::{Cpus, PoolDemand};
use pinion_core::CpuSet;

use super::class::{bound_pool, classify, Class};
use super::state::{Member, MemberKind};
use super::{CpuPlugin, RESOURCE};
use crate::api::{ContainerType, Hint, Request};
use crate::{hints as wire, request, PluginError};

/// Places the container of `request`: `Ok(true)` when it became a member
/// (or already was), `Ok(false)` when there is nothing to place.
pub(super) fn admit(plugin: &mut CpuPlugin, request: &Request) -> Result<bool, PluginError> {
    let pod = request.pod_uid.as_str();
    let container = request.container_name.as_str();
    if plugin.state.member(pod, container).is_some() {
        return Ok(true);
    }
    let quantity = request::quantity(request, RESOURCE, |_| false)?;
    let qos = request::qos(request)?;
    let Some(class) = classify(request, &qos, quantity) else {
        return Ok(false);
    };
    let hint_nodes = request::hint_nodes(request);
    let (kind, hints) = match class {
        Class::Static { cpus } => {
            let kind = match request.container_type {
                ContainerType::Init => ContainerKind::Init,
                _ => ContainerKind::App,
            };
            let asked = Asked {
                cpus,
                kind,
                isolated: request::isolated_ask(request)?,
            };
            exclusive(plugin, request, asked, hint_nodes.as_ref(), false)?;
            (MemberKind::Static, hint_list(hint_nodes.as_ref()))
        }
        Class::Dedicated {
            cpus,
            binding,
            exclusive: numa_exclusive,
        } => {
            let nodes = if binding {
                Some(binding_nodes(plugin, request, hint_nodes)?)
            } else {
                hint_nodes
            };
            let asked = Asked {
                cpus,
                kind: ContainerKind::App,
                isolated: request::isolated_ask(request)?,
            };
            if binding {
                check_numa(plugin, pod, nodes.as_ref(), &asked, numa_exclusive)?;
            }
            exclusive(plugin, request, asked, nodes.as_ref(), numa_exclusive)?;
            let kind = MemberKind::Dedicated {
                numa_binding: binding,
                numa_exclusive,
            };
            (kind, hint_list(nodes.as_ref()))
        }
        Class::Shared { pool, binding } => {
            let numa = if binding {
                Some(binding_nodes(plugin, request, hint_nodes)?)
            } else {
                None
            };
            let name = match &numa {
                Some(nodes) => bound_pool(&pool, nodes),
                None => pool,
            };
            join_pool(plugin, &name, numa.as_ref(), request::milli(quantity))?;
            let hints = hint_list(numa.as_ref());
            (MemberKind::Shared { pool: name, numa }, hints)
        }
        Class::Reclaimed { binding } => {
            let numa = if binding { hint_nodes } else { None };
            let hints = hint_list(numa.as_ref());
            (MemberKind::Reclaimed { numa }, hints)
        }
        Class::System => (MemberKind::System, Vec::new()),
    };
    let member = Member {
        pod_namespace: request.pod_namespace.clone(),
        pod_name: request.pod_name.clone(),
        kind,
        request_milli: request::milli(quantity),
        hints,
        original: CpuSet::new(),
    };
    plugin
        .state
        .containers
        .entry(pod.to_string())
        .or_default()
        .insert(container.to_string(), member);
    let (topology, reserved) = (plugin.policy.topology(), plugin.policy.reserved());
    plugin.state.relayout(topology, reserved);
    let original = plugin.state.cpuset(topology, reserved, pod, container);
    if let Some(member) = plugin
        .state
        .containers
        .get_mut(pod)
        .and_then(|c| c.get_mut(container))
    {
        member.original = original;
    }
    Ok(true)
}

fn hint_list(nodes: Option<&CpuSet>) -> Vec<Hint> {
    nodes
        .map(|nodes| vec![wire::of_nodes(nodes, true)])
        .unwrap_or_default()
}

/// The nodes a NUMA-bound container is bound to: the hint's, else the
/// plugin's own best hint.
fn binding_nodes(
    plugin: &CpuPlugin,
    request: &Request,
    hint_nodes: Option<CpuSet>,
) -> Result<CpuSet, PluginError> {
    if let Some(nodes) = hint_nodes {
        let known: CpuSet = plugin.topology().numa_cpus().keys().copied().collect();
        let unknown = nodes.difference(&known);
        if !unknown.is_empty() {
            return Err(PluginError::UnknownNuma {
                nodes: unknown.to_string(),
            });
        }
        return Ok(nodes);
    }
    let hints = super::hints::topology_hints(plugin, request)?.unwrap_or_default();
    hints
        .iter()
        .find(|h| h.preferred)
        .or_else(|| hints.first())
        .map(wire::nodes)
        .ok_or_else(|| PluginError::Insufficient {
            resource: RESOURCE.into(),
            nodes: "any".into(),
            requested: format!("{} cpus", request.resource_requests.values().sum::<f64>()),
            available: "no numa node".into(),
        })
}

/// An exclusive request: how many CPUs, for which kind of container, and
/// whether it asks for boot-isolated CPUs.
#[derive(Debug, Clone, Copy)]
struct Asked {
    cpus: usize,
    kind: ContainerKind,
    isolated: IsolatedAsk,
}

/// NUMA-bound dedicated CPUs: the nodes are not someone else's, are free
/// of other pods when exclusive, and have enough free CPUs the request may
/// take (boot-isolated ones only when it asks for them).
fn check_numa(
    plugin: &CpuPlugin,
    pod: &str,
    nodes: Option<&CpuSet>,
    asked: &Asked,
    numa_exclusive: bool,
) -> Result<(), PluginError> {
    let cpus = asked.cpus;
    let Some(nodes) = nodes else { return Ok(()) };
    let state = &plugin.state;
    for (owner, held) in &state.exclusive_numa {
        if owner != pod && !held.is_disjoint(nodes) {
            return Err(PluginError::NumaHeld {
                nodes: held.intersection(nodes).to_string(),
                pod: owner.clone(),
            });
        }
    }
    if numa_exclusive && super::hints::nodes_in_use(plugin, pod).intersection_len(nodes) > 0 {
        return Err(PluginError::NumaBusy {
            pod: pod.to_string(),
            nodes: nodes.to_string(),
        });
    }
    let topology = plugin.topology();
    let scope =
        pinion_core::pools::layout::allowed_cpus(topology, topology.all_cpus(), Some(nodes));
    let free = scope
        .intersection(&state.exclusive.default)
        .difference(plugin.policy.reserved());
    let free = asked.isolated.candidates(&free, topology.isolated());
    if free.len() < cpus {
        return Err(PluginError::Insufficient {
            resource: RESOURCE.into(),
            nodes: nodes.to_string(),
            requested: format!("{cpus} cpus"),
            available: format!("{} cpus", free.len()),
        });
    }
    Ok(())
}

/// Exclusive CPUs through the static policy, on the state with other pods'
/// exclusive NUMA nodes taken out of the shared CPUs for the time of the
/// choice; refused when the shared pools and reclaim's minimum would no
/// longer fit. Boot-isolated CPUs go only to a request that asks for them,
/// as under the static policy.
///
/// The choice is made in place: a refusal puts back the two things it may
/// have changed (the shared CPUs and this pod's assignments), so the cost
/// does not grow with the pods the plugin holds (it cloned every
/// assignment before, issue 30).
fn exclusive(
    plugin: &mut CpuPlugin,
    request: &Request,
    asked: Asked,
    affinity: Option<&CpuSet>,
    numa_exclusive: bool,
) -> Result<(), PluginError> {
    let pod = request.pod_uid.as_str();
    let topology = plugin.policy.topology();
    // Only the blocked CPUs the shared set has are taken out and put back:
    // the node holders' own CPUs are not in it (putting those "back" gave
    // them to the shared set and the next exclusive request, and the start
    // refused the state saved so).
    let blocked = plugin
        .state
        .blocked(topology, Some(pod))
        .intersection(&plugin.state.exclusive.default);
    let undo = Undo {
        default: plugin.state.exclusive.default.clone(),
        pod_assignments: plugin.state.exclusive.assignments.get(pod).cloned(),
    };
    plugin.state.exclusive.default.difference_with(&blocked);
    let nodes: Option<Vec<u32>> = affinity.map(|n| n.iter().collect());
    let container_request = ContainerRequest {
        pod,
        container: &request.container_name,
        cpus: asked.cpus,
        kind: asked.kind,
        ask: CpuAsk {
            isolated: asked.isolated,
            ..CpuAsk::default()
        },
    };
    let allocated = plugin.policy.allocate(
        &mut plugin.state.exclusive,
        &container_request,
        nodes.as_deref(),
    );
    if let Err(err) = allocated {
        undo.apply(plugin, pod);
        return Err(err.into());
    }
    plugin.state.exclusive.default.union_with(&blocked);
    let topology = plugin.policy.topology();
    let mut held = plugin.state.exclusive.exclusive_cpus();
    held.union_with(&plugin.state.blocked(topology, None));
    if numa_exclusive {
        if let Some(nodes) = affinity {
            held.union_with(&pinion_core::pools::layout::allowed_cpus(
                topology,
                topology.all_cpus(),
                Some(nodes),
            ));
        }
    }
    let cpus_view = Cpus {
        topology,
        reserved: plugin.policy.reserved(),
        held: &held,
    };
    if let Err(err) = plugin.state.pools.check(cpus_view, &plugin.state.demands()) {
        undo.apply(plugin, pod);
        return Err(err.into());
    }
    if numa_exclusive {
        if let Some(nodes) = affinity {
            plugin
                .state
                .exclusive_numa
                .entry(pod.to_string())
                .or_default()
                .union_with(nodes);
        }
    }
    Ok(())
}

/// What an exclusive choice may change, as it was before: the shared CPUs
/// and the pod's assignments.
struct Undo {
    default: CpuSet,
    pod_assignments: Option<std::collections::BTreeMap<String, CpuSet>>,
}

impl Undo {
    fn apply(self, plugin: &mut CpuPlugin, pod: &str) {
        let exclusive = &mut plugin.state.exclusive;
        exclusive.default = self.default;
        match self.pod_assignments {
            Some(assignments) => {
                exclusive.assignments.insert(pod.to_string(), assignments);
            }
            None => {
                exclusive.assignments.remove(pod);
            }
        }
    }
}

/// Adds `milli` to pool `name`'s demand if it still fits.
fn join_pool(
    plugin: &CpuPlugin,
    name: &str,
    numa: Option<&CpuSet>,
    milli: u64,
) -> Result<(), PluginError> {
    let mut demands = plugin.state.demands();
    let demand = demands
        .entry(name.to_string())
        .or_insert_with(|| PoolDemand {
            members: 0,
            requests_milli: 0,
            numa: numa.cloned(),
        });
    demand.members += 1;
    demand.requests_milli = demand.requests_milli.saturating_add(milli);
    let topology = plugin.policy.topology();
    let held = plugin.state.held(topology);
    plugin.state.pools.check(
        Cpus {
            topology,
            reserved: plugin.policy.reserved(),
            held: &held,
        },
        &demands,
    )?;
    Ok(())
}

impl CpuPlugin {
    /// Drops one container: its exclusive CPUs go back, its pod's exclusive
    /// NUMA nodes too once the pod has no container left; pools follow.
    pub(super) fn forget(&mut self, pod: &str, container: &str) {
        let Some(containers) = self.state.containers.get_mut(pod) else {
            return;
        };
        let Some(member) = containers.remove(container) else {
            return;
        };
        if containers.is_empty() {
            self.state.containers.remove(pod);
            self.state.exclusive_numa.remove(pod);
        }
        if member.kind.is_exclusive() {
            self.policy
                .remove_container(&mut self.state.exclusive, pod, container);
        }
        let (topology, reserved) = (self.policy.topology(), self.policy.reserved());
        self.state.relayout(topology, reserved);
    }
}
