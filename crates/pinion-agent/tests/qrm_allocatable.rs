//! podresources' `GetAllocatableResources` carries what the resource
//! plugins can hand out (their `GetTopologyAwareAllocatableResources`), as
//! the kubelet fork and katalyst's ORM answer (spec `qrm.md` §6.4) — found by
//! katalyst's own wire code (`scripts/interop-katalyst.sh`): Pinion answered
//! only its own `cpu` and `memory`, so a plugin's resources (a NIC plugin's
//! bandwidth per NIC) never reached katalyst's node reporter. Real gRPC over
//! unix sockets between the manager and the plugins.

mod qrm_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use pinion_agent::podresources::PodResourcesService;
use pinion_agent::testing::machine;
use pinion_api::podresources::v1;
use pinion_api::podresources::v1::pod_resources_lister_server::PodResourcesLister as _;
use pinion_plugins::{AllocatableResource, TopologyAwareQuantity};
use qrm_common::{wait_until, Agent, Allocatable};

const BANDWIDTH: &str = "resource.katalyst.kubewharf.io/net_bandwidth";

fn nic(node: u64, name: &str, mbps: f64) -> TopologyAwareQuantity {
    TopologyAwareQuantity {
        resource_value: mbps,
        node,
        name: name.into(),
        kind: "NIC".into(),
        ..TopologyAwareQuantity::default()
    }
}

fn resource(per_node: Vec<TopologyAwareQuantity>) -> AllocatableResource {
    let total = per_node.iter().map(|q| q.resource_value).sum();
    AllocatableResource {
        is_node_resource: true,
        is_scalar_resource: true,
        aggregated_allocatable_quantity: total,
        topology_aware_allocatable_quantity_list: per_node.clone(),
        aggregated_capacity_quantity: total,
        topology_aware_capacity_quantity_list: per_node,
    }
}

async fn allocatable_of(
    service: &PodResourcesService,
) -> BTreeMap<String, v1::AllocatableTopologyAwareResource> {
    service
        .get_allocatable_resources(tonic::Request::new(v1::AllocatableResourcesRequest {}))
        .await
        .expect("GetAllocatableResources")
        .into_inner()
        .resources
        .into_iter()
        .map(|r| (r.resource_name.clone(), r))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_get_allocatable_resources_carries_the_plugins_allocatable_resources() {
    let agent = Agent::start();
    let service = PodResourcesService::new(
        agent.handle.snapshots(),
        Arc::new(machine(2, 4, 2)),
        1000,
        1000,
    )
    .with_plugin_resources(agent.qrm.registry().node_resources());
    let own = allocatable_of(&service).await;
    assert_eq!(
        own["cpu"].aggregated_allocatable_quantity, 15.0,
        "Pinion's own cpu: 16 CPUs, one reserved"
    );
    assert!(!own.contains_key(BANDWIDTH));

    // A NIC plugin, and a `cpu` plugin that says only 6 CPUs are allocatable.
    let bandwidth = Allocatable {
        resource: BANDWIDTH.into(),
        allocatable: [(
            BANDWIDTH.to_string(),
            resource(vec![nic(0, "eth0", 25000.0), nic(1, "eth1", 10000.0)]),
        )]
        .into(),
    };
    let cpu = Allocatable {
        resource: "cpu".into(),
        allocatable: [(
            "cpu".to_string(),
            resource(vec![
                TopologyAwareQuantity::numa(0, 2.0),
                TopologyAwareQuantity::numa(1, 4.0),
            ]),
        )]
        .into(),
    };
    let _bandwidth = agent.serve_as(bandwidth, "bandwidth.sock");
    let _cpu = agent.serve_as(cpu, "cpu.sock");
    agent.wait_for_plugin(BANDWIDTH, "active").await;
    agent.wait_for_plugin("cpu", "active").await;
    let plugins = agent.qrm.registry().node_resources();
    wait_until("the plugins' allocatable resources", || {
        let plugins = plugins.borrow();
        let has = |name: &str| plugins.iter().any(|r| r.resource_name == name);
        has(BANDWIDTH) && has("cpu")
    })
    .await;

    let answer = allocatable_of(&service).await;
    let nics = &answer[BANDWIDTH];
    assert_eq!(nics.aggregated_allocatable_quantity, 35000.0);
    assert_eq!(nics.aggregated_capacity_quantity, 35000.0);
    let listed: Vec<(u64, &str, &str, f64)> = nics
        .topology_aware_allocatable_quantity_list
        .iter()
        .map(|q| (q.node, q.name.as_str(), q.r#type.as_str(), q.resource_value))
        .collect();
    assert_eq!(
        listed,
        [(0, "eth0", "NIC", 25000.0), (1, "eth1", "NIC", 10000.0)]
    );
    assert!(nics.is_node_resource && nics.is_scalar_resource);
    // The plugin serving `cpu` decides what is allocatable: its entry
    // replaces Pinion's own, once.
    assert_eq!(answer["cpu"].aggregated_allocatable_quantity, 6.0);
    let cpu_entries = service
        .get_allocatable_resources(tonic::Request::new(v1::AllocatableResourcesRequest {}))
        .await
        .expect("GetAllocatableResources")
        .into_inner()
        .resources
        .iter()
        .filter(|r| r.resource_name == "cpu")
        .count();
    assert_eq!(cpu_entries, 1);
}
