//! The CPU plugin's topology hints.
//!
//! * static path: kubelet's own hints (`container_cpu_hints`), exactly;
//!   like the static policy, over ordinary CPUs only unless the pod asks for
//!   boot-isolated ones (`pinion.io/isolated-cpus`);
//! * `dedicated_cores`: kubelet's hint generation over the CPUs that are
//!   free for exclusive use, minus masks touching NUMA nodes other pods hold
//!   exclusively (and, for `numa_exclusive`, nodes other pods use), then
//!   `numa_ids` / `numa_number`;
//! * NUMA-bound `shared_cores`: every single node where the pool (with this
//!   container) still fits; NUMA-bound `reclaimed_cores`: nodes with
//!   reclaim CPUs;
//! * everything else, and init containers: no preference.
//!
//! A container already placed gets the hint of where it is.

use pinion_core::pools::{Cpus, PoolDemand};
use pinion_core::qos::QosRequest;
use pinion_core::topomgr::cpu_hints::{container_cpu_hints, generate_cpu_hints, HintInputs};
use pinion_core::CpuSet;

use super::class::{bound_pool, classify, Class};
use super::state::MemberKind;
use super::{CpuPlugin, RESOURCE};
use crate::api::{Hint, Request};
use crate::{hints as wire, request, PluginError};

pub(super) fn topology_hints(
    plugin: &CpuPlugin,
    request: &Request,
) -> Result<Option<Vec<Hint>>, PluginError> {
    request::check_resource(request, RESOURCE)?;
    let pod = request.pod_uid.as_str();
    if let Some(member) = plugin.state.member(pod, &request.container_name) {
        return Ok(match &member.kind {
            MemberKind::Dedicated { .. } | MemberKind::Static => {
                let cpus = plugin.cpuset(pod, &request.container_name);
                let nodes: CpuSet = plugin.topology().numa_nodes_of(&cpus).into_iter().collect();
                Some(vec![wire::of_nodes(&nodes, true)])
            }
            _ => (!member.hints.is_empty()).then(|| member.hints.clone()),
        });
    }
    let quantity = request::quantity(request, RESOURCE, |_| false)?;
    let qos = request::qos(request)?;
    let Some(class) = classify(request, &qos, quantity) else {
        return Ok(None);
    };
    let topology = plugin.topology();
    let state = &plugin.state;
    let free = state
        .exclusive
        .default
        .difference(plugin.reserved())
        .difference(&state.blocked(topology, Some(pod)));
    // Boot-isolated CPUs count only for a request that asks for them.
    let available = match class {
        Class::Static { .. } | Class::Dedicated { .. } => {
            request::isolated_ask(request)?.candidates(&free, topology.isolated())
        }
        _ => free,
    };
    Ok(match class {
        Class::Static { cpus } => {
            let reusable = plugin.policy.reusable(pod);
            let inputs = HintInputs {
                topology,
                available: &available,
                reusable: &reusable,
                align_by_socket: plugin.policy.options().align_by_socket,
            };
            container_cpu_hints(&inputs, cpus, None)
                .map(|hints| hints.iter().map(wire::from_core).collect())
        }
        Class::Dedicated {
            cpus, exclusive, ..
        } => {
            let hints: Vec<Hint> =
                generate_cpu_hints(topology, &available, &CpuSet::new(), cpus, false)
                    .iter()
                    .map(wire::from_core)
                    .collect();
            let mut excluded = state.held_nodes(Some(pod));
            if exclusive {
                excluded.union_with(&nodes_in_use(plugin, pod));
            }
            Some(wire::restrict(hints, &qos, &excluded))
        }
        Class::Shared {
            pool,
            binding: true,
        } => Some(shared_hints(plugin, &qos, &pool, quantity)),
        Class::Reclaimed { binding: true } => {
            let reclaim = &state.pools.plan().reclaim;
            let hints = topology
                .numa_cpus()
                .iter()
                .filter(|(_, cpus)| !cpus.is_disjoint(reclaim))
                .map(|(&node, _)| wire::of_nodes(&CpuSet::from_iter([node]), true))
                .collect();
            Some(wire::restrict(hints, &qos, &state.held_nodes(Some(pod))))
        }
        Class::Shared { .. } | Class::Reclaimed { .. } | Class::System => None,
    })
}

/// Single nodes where NUMA-bound pool `pool` can take this container.
fn shared_hints(plugin: &CpuPlugin, qos: &QosRequest, pool: &str, quantity: f64) -> Vec<Hint> {
    let topology = plugin.topology();
    let state = &plugin.state;
    let held = state.held(topology);
    let cpus = Cpus {
        topology,
        reserved: plugin.reserved(),
        held: &held,
    };
    let mut hints = Vec::new();
    for &node in topology.numa_cpus().keys() {
        let nodes = CpuSet::from_iter([node]);
        let mut demands = state.demands();
        let demand = demands
            .entry(bound_pool(pool, &nodes))
            .or_insert_with(|| PoolDemand {
                members: 0,
                requests_milli: 0,
                numa: Some(nodes.clone()),
            });
        demand.members += 1;
        demand.requests_milli = demand
            .requests_milli
            .saturating_add(request::milli(quantity));
        if state.pools.check(cpus, &demands).is_ok() {
            hints.push(wire::of_nodes(&nodes, true));
        }
    }
    wire::restrict(hints, qos, &state.held_nodes(None))
}

/// NUMA nodes where pods other than `pod` have exclusive CPUs or a
/// NUMA-bound shared pool.
pub(super) fn nodes_in_use(plugin: &CpuPlugin, pod: &str) -> CpuSet {
    let topology = plugin.topology();
    let state = &plugin.state;
    let mut cpus = CpuSet::new();
    for (owner, containers) in &state.exclusive.assignments {
        if owner != pod {
            for assigned in containers.values() {
                cpus.union_with(assigned);
            }
        }
    }
    let mut nodes: CpuSet = topology.numa_nodes_of(&cpus).into_iter().collect();
    for entry in state.pools.entries().values() {
        if let Some(bound) = &entry.numa {
            nodes.union_with(bound);
        }
    }
    nodes
}
