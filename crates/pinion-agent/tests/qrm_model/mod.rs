//! The model both reconcile property tests share (`qrm_property.rs`, the
//! controller; `qrm_property_wire.rs`, the manager over unix sockets): three
//! [`TablePlugin`]s, their answers, the admissions, and the placement the
//! plugins' last answers make.
#![allow(dead_code)]

use std::collections::BTreeMap;

use pinion_agent::controller::{AdmitRequest, Frontend};
use pinion_agent::testing::table_plugin::TablePlugin;
use pinion_agent::testing::{machine, run_request};
use pinion_core::plugin_allocation::PluginAllocation;
use pinion_core::{CpuSet, Placement, Quantity, Topology};
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::CgroupName;
use pinion_plugins::AllocationInfo;

/// The three plugins: a cpuset (the `cpu` plugin: only it may set one),
/// memory nodes, and a CFS quota (an OCI resource setting); each answer
/// also sets an environment variable and an annotation.
pub const RESOURCES: [(&str, &str); 3] = [
    ("cpu", "CpusetCpus"),
    ("example.com/mems", "CpusetMems"),
    ("example.com/quota", "CpuQuota"),
];
pub const CPUSET: usize = 0;
pub const MEMS: usize = 1;
pub const QUOTA: usize = 2;
/// Pod slots: a slot is empty or holds one live pod.
pub const SLOTS: usize = 5;
/// What the cpuset plugin says when it answers garbage.
pub const GARBAGE: &str = "7-2";

pub fn topology() -> Topology {
    machine(2, 4, 2)
}

/// Plugin `plugin`'s answer number `value`: any non-empty set of the 16
/// CPUs, one or both memory nodes, one of seven quotas.
pub fn answer(plugin: usize, value: u32) -> String {
    match plugin {
        CPUSET => {
            let mask = (value & 0xffff).max(1);
            let cpus: CpuSet = (0..16).filter(|cpu| mask & (1 << cpu) != 0).collect();
            cpus.to_string()
        }
        MEMS => ["0", "1", "0-1"][(value % 3) as usize].to_string(),
        _ => (10_000 * (value % 7 + 1)).to_string(),
    }
}

pub fn plugins() -> [TablePlugin; 3] {
    RESOURCES.map(|(resource, property)| TablePlugin::new(resource, property, ""))
}

/// An allocation as the manager stores it (what `GetResourcesAllocation`
/// carries: no hints).
pub fn stored(info: &AllocationInfo) -> PluginAllocation {
    PluginAllocation {
        oci_property_name: info.oci_property_name.clone(),
        is_node_resource: info.is_node_resource,
        is_scalar_resource: info.is_scalar_resource,
        allocated_quantity: info.allocated_quantity,
        allocation_result: info.allocation_result.clone(),
        envs: info.envs.clone(),
        annotations: info.annotations.clone(),
        resource_hints: None,
        topology_assignments: info.topology_assignments.clone(),
    }
}

/// A valid answer of `plugin`: one the merge accepts.
pub fn valid(plugin: usize, value: &str) -> bool {
    plugin != CPUSET || CpuSet::parse_list(value).is_ok()
}

/// `pinion run` of pod `uid` with one of each wanted plugin resource —
/// the cpuset plugin's is `cpu`: half a CPU (shared, so that no CPU is
/// exclusive and every cpuset of the machine is a valid answer), else no
/// CPU request; a runtime container `c-<uid>` when `runtime`.
pub fn admission(uid: &str, wants: [bool; 3], runtime: bool) -> AdmitRequest {
    let cpus = wants[CPUSET].then_some("500m");
    let mut request = run_request(uid, cpus, None);
    let name = request.container.clone();
    let container = request
        .pod
        .containers
        .iter_mut()
        .find(|c| c.name == name)
        .expect("the run's container");
    for (plugin, (resource, _)) in RESOURCES.iter().enumerate() {
        if wants[plugin] && plugin != CPUSET {
            container
                .extended_requests
                .insert((*resource).to_string(), Quantity::parse("1").expect("1"));
        }
    }
    if runtime {
        request.frontend = Frontend::runtime(format!("c-{uid}"));
    }
    request
}

/// What a container's placement must be: its placement without plugins
/// (`base`) with the last valid answer of every plugin it asked (`said`):
/// the cpuset plugin's CPUs, the memory plugin's nodes (the only source of
/// memory nodes: CPUs, the plugin's or Pinion's, leave them as they are),
/// the quota plugin's CFS quota, each plugin's environment variable and
/// annotation.
pub fn expected(
    plugins: &[TablePlugin; 3],
    base: &Placement,
    said: &BTreeMap<usize, String>,
) -> Placement {
    let mut placement = base.clone();
    if let Some(cpus) = said.get(&CPUSET) {
        placement.cpus = CpuSet::parse_list(cpus).expect("said is valid");
    }
    if let Some(mems) = said.get(&MEMS) {
        placement.mems = CpuSet::parse_list(mems).expect("said is valid");
    }
    if let Some(quota) = said.get(&QUOTA) {
        placement.resources.cpu_quota = Some(quota.parse().expect("said is valid"));
    }
    for (plugin, value) in said {
        placement
            .env
            .insert(plugins[*plugin].env_name().to_string(), value.clone());
        placement
            .annotations
            .insert(RESOURCES[*plugin].0.to_string(), value.clone());
    }
    placement
}

/// The parts of a placement plugins decide.
#[derive(Debug, PartialEq, Eq)]
pub struct PluginView<'a> {
    cpus: CpuSet,
    mems: CpuSet,
    cpu_quota: Option<i64>,
    env: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
}

pub fn plugin_view(p: &Placement) -> PluginView<'_> {
    PluginView {
        cpus: p.cpus.clone(),
        mems: p.mems.clone(),
        cpu_quota: p.resources.cpu_quota,
        env: &p.env,
        annotations: &p.annotations,
    }
}

/// The CFS quota a run placed at `want` has in its (fake, cgroup v2)
/// `cpu.max`: the plugin's, or none — never written, or `max` again after
/// the plugin's answer was dropped.
pub fn quota_written(want: &Placement) -> Option<String> {
    want.resources.cpu_quota.map(|q| q.to_string())
}

/// The quota in the fake cgroup `name`'s `cpu.max` (`max` or absent: none).
pub fn quota_of(host: &FakeCgroups, name: &str) -> Option<String> {
    let name = CgroupName::new(name).expect("cgroup name");
    host.tree()
        .children
        .get(&name)
        .and_then(|c| c.files.get("cpu.max").cloned())
        .and_then(|text| text.split_whitespace().next().map(str::to_string))
        .filter(|quota| quota != "max")
}

/// What the cgroup of a run placed at `want` holds: its CPUs, and its
/// memory nodes where the placement names some, else its parent's (Pinion's
/// root's).
pub fn written(host: &FakeCgroups, want: &Placement) -> Option<(CpuSet, CpuSet)> {
    let mems = if want.mems.is_empty() {
        host.tree().root.as_ref().map(|(_, mems)| mems.clone())?
    } else {
        want.mems.clone()
    };
    Some((want.cpus.clone(), mems))
}

pub fn cgroup_of(host: &FakeCgroups, name: &str) -> Option<(CpuSet, CpuSet)> {
    let name = CgroupName::new(name).expect("cgroup name");
    host.tree()
        .children
        .get(&name)
        .map(|c| (c.cpus.clone(), c.mems.clone()))
}
