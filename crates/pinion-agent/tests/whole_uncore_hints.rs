//! Issue 31: the Topology Manager hints of a whole-uncore request
//! (`pinion.io/uncore: exclusive`) counted free CPUs, not whole free uncore
//! (L3) caches, so a NUMA node with enough free CPUs but no wholly free
//! cache was preferred and the container's memory nodes were not where its
//! caches are. On a real machine's sysfs tree (AMD EPYC 7451: 8 NUMA nodes,
//! two 6-CPU L3 caches each), read in place from `../shared/topologies`.

#[path = "../../pinion-core/tests/common/shared.rs"]
mod shared;

use pinion_agent::api::{run_pod, RunRequest};
use pinion_agent::controller::{AdmitRequest, Frontend, RUN_CONTAINER};
use pinion_agent::hints::GatheredHints;
use pinion_agent::testing::SyntheticNode;
use pinion_core::engine::CpuOwner;
use pinion_core::policy::PolicyConfig;
use pinion_core::{CpuSet, Topology};

const MACHINE: &str = "topologies/x86-2s-amd-epyc-7451-ht-16ccx-8numa";

fn epyc() -> Option<Topology> {
    let root = shared::shared(MACHINE)?;
    Some(pinion_host::discover(&root).expect("discovery"))
}

fn uncore_run(id: &str, cpus: &str) -> AdmitRequest {
    let run = RunRequest {
        cpus: Some(cpus.to_owned()),
        annotations: [("pinion.io/uncore".to_owned(), "exclusive".to_owned())]
            .into_iter()
            .collect(),
        ..RunRequest::new(id)
    };
    AdmitRequest {
        frontend: Frontend::standalone(id, Some(100)).expect("valid id"),
        pod: run_pod(&run).expect("pod"),
        container: RUN_CONTAINER.into(),
        cpu_owner: CpuOwner::Policy,
    }
}

#[test]
fn regression_whole_uncore_hints_skip_nodes_without_a_wholly_free_cache() {
    let Some(topology) = epyc() else {
        return;
    };
    let node0 = topology.numa_cpus()[&0].clone();
    let caches0: Vec<CpuSet> = topology
        .uncores()
        .values()
        .filter(|cpus| cpus.is_subset(&node0))
        .cloned()
        .collect();
    assert_eq!(caches0.len(), 2, "node 0 holds two L3 caches");
    // One reserved CPU in each of node 0's caches: node 0 keeps 10 free
    // CPUs, but no wholly free cache.
    let reserved: CpuSet = caches0.iter().filter_map(CpuSet::first).collect();
    let config = PolicyConfig {
        policy: Some("static".into()),
        reserved: Some(reserved.clone()),
        num_reserved: Some(reserved.len()),
        topology_manager_policy: Some("single-numa-node".into()),
        ..PolicyConfig::default()
    };
    let node = SyntheticNode::new(topology.clone()).with_config(config);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut controller = node.start(dir.path()).expect("start");
    let size = topology.cpus_per_uncore();
    let admitted = controller
        .admit(
            &uncore_run("pinion-run-l3", &size.to_string()),
            &GatheredHints::default(),
        )
        .expect("a node with a wholly free cache exists");
    let cpus = &admitted.placement.cpus;
    assert!(
        topology.uncores().values().any(|cache| cache == cpus),
        "one whole cache: {cpus}"
    );
    assert_eq!(topology.numa_nodes_of(cpus), [1], "{cpus}");
    // The memory nodes are left as they are (kubelet's static policy).
    assert!(
        admitted.placement.mems.is_empty(),
        "{:?}",
        admitted.placement
    );
}
