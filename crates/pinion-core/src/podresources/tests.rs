use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::plugin_allocation::PluginAllocation;
use crate::pod::{Container, RestartPolicy};
use crate::quantity::Quantity;
use crate::topology::{synthetic, Shape};

/// 2 NUMA nodes of 4 CPUs each (0-3 on node 0, 4-7 on node 1), 1 GiB each.
fn machine() -> Topology {
    let mut spec = synthetic(Shape {
        sockets: 1,
        numa_per_socket: 2,
        cores_per_socket: 8,
        threads_per_core: 1,
        cores_per_uncore: 0,
    })
    .spec()
    .clone();
    for node in &mut spec.numa_nodes {
        node.memory_bytes = Some(1 << 30);
    }
    Topology::new(spec).expect("topology")
}

fn list_of(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn container(name: &str, memory: Option<&str>) -> Container {
    Container {
        name: name.to_string(),
        memory_request: memory.map(|m| Quantity::parse(m).expect("quantity")),
        ..Container::default()
    }
}

fn pod(uid: &str, name: &str, namespace: &str) -> Pod {
    Pod {
        uid: uid.to_string(),
        name: name.to_string(),
        namespace: namespace.to_string(),
        ..Pod::default()
    }
}

fn exclusive(cpus: &str, mems: &str) -> Placement {
    Placement {
        cpus: list_of(cpus),
        mems: list_of(mems),
        pool: Pool::Exclusive,
        ..Placement::default()
    }
}

fn shared() -> Placement {
    Placement {
        cpus: list_of("2-7"),
        mems: list_of("0-1"),
        pool: Pool::Shared,
        ..Placement::default()
    }
}

fn pods(list: Vec<Pod>) -> BTreeMap<String, Arc<Pod>> {
    list.into_iter()
        .map(|p| (p.uid.clone(), Arc::new(p)))
        .collect()
}

#[test]
fn exclusive_containers_report_their_cpus_and_numa_memory_shared_ones_nothing() {
    let mut p = pod("u1", "web", "prod");
    p.containers = vec![container("app", Some("256Mi")), container("log", None)];
    let pods = pods(vec![p]);
    let app = exclusive("0-1", "0");
    let log = shared();
    let none = PluginAllocations::new();
    let holdings = [
        Holding {
            pod: "u1",
            container: "app",
            placement: &app,
            plugins: &none,
        },
        Holding {
            pod: "u1",
            container: "log",
            placement: &log,
            plugins: &none,
        },
    ];
    let listed = list(&pods, &holdings);
    assert_eq!(listed.len(), 1);
    let pod = &listed[0];
    assert_eq!(
        (pod.name.as_str(), pod.namespace.as_str(), pod.uid.as_str()),
        ("web", "prod", "u1")
    );
    assert_eq!(pod.containers[0].name, "app");
    assert_eq!(pod.containers[0].cpu_ids, vec![0, 1]);
    assert_eq!(
        pod.containers[0].memory,
        vec![MemoryBlock {
            memory_type: "memory".into(),
            size: 256 << 20,
            numa_nodes: vec![0]
        }]
    );
    assert_eq!(pod.containers[1].name, "log");
    assert!(pod.containers[1].cpu_ids.is_empty());
    assert!(pod.containers[1].memory.is_empty());
}

#[test]
fn restartable_init_containers_come_first_and_other_init_containers_are_left_out() {
    let mut p = pod("u1", "job", "ns");
    let mut sidecar = container("sidecar", None);
    sidecar.restart_policy = Some(RestartPolicy::Always);
    p.init_containers = vec![container("setup", None), sidecar];
    p.containers = vec![container("main", None), container("helper", None)];
    let pods = pods(vec![p]);
    let listed = list(&pods, &[]);
    let names: Vec<&str> = listed[0]
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["sidecar", "main", "helper"]);
}

#[test]
fn pods_are_sorted_by_namespace_and_name_and_get_finds_one_by_both() {
    let pods = pods(vec![
        pod("u1", "b", "ns2"),
        pod("u2", "a", "ns2"),
        pod("u3", "z", "ns1"),
    ]);
    let listed = list(&pods, &[]);
    let order: Vec<(&str, &str)> = listed
        .iter()
        .map(|p| (p.namespace.as_str(), p.name.as_str()))
        .collect();
    assert_eq!(order, [("ns1", "z"), ("ns2", "a"), ("ns2", "b")]);
    assert_eq!(
        get(&pods, &[], "ns2", "b", |_| 0).map(|p| p.uid),
        Some("u1".to_string())
    );
    assert_eq!(get(&pods, &[], "ns1", "b", |_| 0), None);
}

/// Found from outside (session 47): while two pods shared a name (a
/// StatefulSet's pod terminating beside its successor), `Get` answered
/// the lowest UID; kubelet answers the pod it added last.
#[test]
fn regression_get_of_a_name_two_pods_share_answers_the_one_admitted_last() {
    let pods = pods(vec![pod("u1", "web-0", "ns"), pod("u2", "web-0", "ns")]);
    let order = |later: &'static str| move |uid: &str| u64::from(uid == later) + 1;
    assert_eq!(
        get(&pods, &[], "ns", "web-0", order("u2")).map(|p| p.uid),
        Some("u2".to_string()),
        "the successor, admitted last"
    );
    assert_eq!(
        get(&pods, &[], "ns", "web-0", order("u1")).map(|p| p.uid),
        Some("u1".to_string()),
        "whatever its UID sorts as"
    );
    assert_eq!(
        get(&pods, &[], "ns", "web-0", |_| 0).map(|p| p.uid),
        Some("u1".to_string()),
        "no order known (both recovered at start): the lowest UID"
    );
}

#[test]
fn plugin_allocations_become_topology_aware_resources() {
    let mut p = pod("u1", "gpu", "ns");
    p.labels.insert(POD_ROLE_LABEL.into(), "worker".into());
    p.annotations
        .insert(POD_TYPE_ANNOTATION.into(), "batch".into());
    p.containers = vec![container("c", None)];
    let pods = pods(vec![p]);
    let placement = Placement {
        pool: Pool::Plugin,
        ..exclusive("4-5", "1")
    };
    let mut plugins = PluginAllocations::new();
    plugins.insert(
        "example.com/nic".into(),
        PluginAllocation {
            is_scalar_resource: true,
            allocated_quantity: 2.0,
            topology_assignments: BTreeMap::from([(1, 2)]),
            ..PluginAllocation::default()
        },
    );
    let holdings = [Holding {
        pod: "u1",
        container: "c",
        placement: &placement,
        plugins: &plugins,
    }];
    let listed = list(&pods, &holdings);
    let pod = &listed[0];
    assert_eq!(
        (pod.pod_role.as_str(), pod.pod_type.as_str()),
        ("worker", "batch")
    );
    let c = &pod.containers[0];
    assert!(c.cpu_ids.is_empty(), "plugin cpus are not exclusive: {c:?}");
    assert_eq!(c.memory[0].numa_nodes, vec![1]);
    assert_eq!(
        c.resources,
        vec![TopologyAwareResource {
            resource_name: "example.com/nic".into(),
            is_node_resource: false,
            is_scalar_resource: true,
            aggregated_quantity: 2.0,
            per_numa: vec![NumaQuantity::new(1, 2.0)],
        }]
    );
}

#[test]
fn allocatable_cpus_are_all_but_reserved_only_with_exclusive_cpus() {
    let topology = machine();
    let reserved = list_of("0,4");
    let static_policy = allocatable(&topology, true, &reserved);
    assert_eq!(static_policy.cpu_ids, vec![1, 2, 3, 5, 6, 7]);
    let cpu = &static_policy.resources[0];
    assert_eq!((cpu.allocatable, cpu.capacity), (6.0, 8.0));
    assert_eq!(
        cpu.allocatable_per_numa,
        vec![NumaQuantity::new(0, 3.0), NumaQuantity::new(1, 3.0)]
    );
    assert_eq!(static_policy.memory.len(), 2);
    assert_eq!(static_policy.memory[1].numa_nodes, vec![1]);
    assert_eq!(static_policy.resources[1].capacity, f64::from(2u32 << 30));
    let none_policy = allocatable(&topology, false, &CpuSet::new());
    assert!(none_policy.cpu_ids.is_empty());
}

/// Issue 28 item 2: a topology exporter reading `List` counted the CPUs a
/// resource plugin had dedicated to a container as free, because plugin
/// placements reported no `cpu_ids`.
#[test]
fn regression_plugin_placed_dedicated_containers_list_their_cpus() {
    let q = |text: &str| Quantity::parse(text).expect("quantity");
    let mut dedicated = pod("u1", "dedicated", "ns");
    dedicated.annotations.insert(
        crate::qos::QOS_LEVEL_KEY.into(),
        crate::qos::QosLevel::DedicatedCores.as_str().into(),
    );
    dedicated.containers = vec![container("c", None)];
    let mut guaranteed = pod("u2", "guaranteed", "ns");
    guaranteed.containers = vec![Container {
        cpu_request: Some(q("2")),
        cpu_limit: Some(q("2")),
        memory_request: Some(q("1Gi")),
        memory_limit: Some(q("1Gi")),
        ..container("c", None)
    }];
    let mut shared_level = pod("u3", "shared", "ns");
    shared_level.annotations.insert(
        crate::qos::QOS_LEVEL_KEY.into(),
        crate::qos::QosLevel::SharedCores.as_str().into(),
    );
    // Guaranteed with a whole CPU, but in a shared pool by its level.
    shared_level.containers = guaranteed.containers.clone();
    let pods = pods(vec![dedicated, guaranteed, shared_level]);
    let in_plugin = |cpus: &str| Placement {
        pool: Pool::Plugin,
        ..exclusive(cpus, "0")
    };
    let (a, b, c) = (in_plugin("1-2"), in_plugin("3,5"), in_plugin("0-7"));
    let none = PluginAllocations::new();
    let holdings = [
        Holding {
            pod: "u1",
            container: "c",
            placement: &a,
            plugins: &none,
        },
        Holding {
            pod: "u2",
            container: "c",
            placement: &b,
            plugins: &none,
        },
        Holding {
            pod: "u3",
            container: "c",
            placement: &c,
            plugins: &none,
        },
    ];
    let listed = list(&pods, &holdings);
    let cpus: BTreeMap<&str, Vec<u32>> = listed
        .iter()
        .map(|p| (p.name.as_str(), p.containers[0].cpu_ids.clone()))
        .collect();
    assert_eq!(cpus["dedicated"], vec![1, 2]);
    assert_eq!(cpus["guaranteed"], vec![3, 5]);
    assert!(
        cpus["shared"].is_empty(),
        "a shared pool is not held: {cpus:?}"
    );
}

/// Issue 28 item 2 (`IsNodeResource`): the plugins' allocatable resources
/// are listed beside Pinion's; a plugin's `cpu` replaces Pinion's own.
#[test]
fn plugin_node_resources_join_the_allocatable_resources() {
    let topology = machine();
    let own = allocatable(&topology, true, &list_of("0"));
    let widget = AllocatableResource {
        resource_name: "example.com/widget".into(),
        is_node_resource: true,
        is_scalar_resource: true,
        allocatable: 3.0,
        capacity: 4.0,
        ..AllocatableResource::default()
    };
    let plugin_cpu = AllocatableResource {
        resource_name: "cpu".into(),
        allocatable: 5.0,
        capacity: 8.0,
        ..AllocatableResource::default()
    };
    let merged = with_plugin_resources(own.clone(), &[widget.clone(), plugin_cpu.clone()]);
    let names: Vec<&str> = merged
        .resources
        .iter()
        .map(|r| r.resource_name.as_str())
        .collect();
    assert_eq!(names, ["cpu", "memory", "example.com/widget"]);
    assert_eq!(merged.resources[0], plugin_cpu);
    assert_eq!(merged.resources[2], widget);
    assert_eq!(merged.cpu_ids, own.cpu_ids);
    assert_eq!(with_plugin_resources(own.clone(), &[]), own);
}

/// A pod written in the QRM proposal's vocabulary showed an empty role in
/// podresources, which read only katalyst's label.
#[test]
fn regression_the_proposals_role_and_resource_type_reach_pod_role_and_pod_type() {
    let mut p = pod("u1", "web", "ns");
    p.annotations.insert(
        "kubernetes.io/pod-role".into(),
        "online-micro_service".into(),
    );
    p.annotations
        .insert("kubernetes.io/resource-type".into(), "cpu-sharing".into());
    p.containers = vec![container("c", None)];
    let listed = list(&pods(vec![p]), &[]);
    assert_eq!(
        (listed[0].pod_role.as_str(), listed[0].pod_type.as_str()),
        ("online-micro_service", "cpu-sharing")
    );
}
