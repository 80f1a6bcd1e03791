//! The memory and NIC plugins beyond the seed's examples.

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;

use common::{meminfo_tree, seed_machine, write, Pod};
use pinion_core::qos;
use pinion_host::meminfo::{read_node_memory, HugePages, NodeMemory};
use pinion_host::net::{Netns, Nic};
use pinion_plugins::memory::{MemoryPlugin, MemoryPluginConfig};
use pinion_plugins::nic::{
    NicPlugin, NicPluginConfig, ENV_NIC_IPV4, ENV_NIC_NAME, NETNS_ANNOTATION,
};
use pinion_plugins::{Hint, PluginError, ResourcePlugin};

const GIB: u64 = 1 << 30;

fn nodes() -> Vec<NodeMemory> {
    vec![
        NodeMemory {
            node: 0,
            total: 8 * GIB,
            free: 8 * GIB,
            hugepages: vec![HugePages {
                size_kib: 2048,
                total: 512,
                free: 512,
            }],
        },
        NodeMemory {
            node: 1,
            total: 8 * GIB,
            free: 8 * GIB,
            hugepages: vec![],
        },
    ]
}

fn memory_plugin(dir: Option<&std::path::Path>) -> MemoryPlugin {
    let config = MemoryPluginConfig {
        reserved_bytes_per_node: GIB,
    };
    MemoryPlugin::open(nodes(), config, dir).expect("plugin")
}

fn bound() -> Pod {
    Pod::new("b").annotate(qos::MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#)
}

/// Unbound containers' memory is neither confined nor accounted: no
/// `CpusetMems` while no pod holds a node alone (the manager leaves the
/// memory nodes as they are), whatever CPUs the container runs on.
#[test]
fn unbound_containers_keep_every_memory_node_until_one_is_held_alone() {
    let mut memory = memory_plugin(None);
    let pod = Pod::new("web");
    assert_eq!(
        memory
            .topology_hints(&pod.request("memory", 1e9, None))
            .expect("hints"),
        None
    );
    let answer = memory
        .allocate(&pod.request("memory", 1e9, None))
        .expect("allocate")
        .expect("answer");
    assert_eq!(answer["memory"].oci_property_name, "");
    assert_eq!(answer["memory"].allocation_result, "");
    let reported = memory.allocations();
    assert_eq!(
        reported["uid-web"]["container0"]["memory"].allocation_result, "",
        "the reconcile answer gives no memory nodes either"
    );
    // A NUMA-exclusive pod holding node 1: the others are kept off it.
    let exclusive = Pod::new("exclusive").level("dedicated_cores").annotate(
        qos::MEMORY_ENHANCEMENT_KEY,
        r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
    );
    let held = memory
        .allocate(&exclusive.request("memory", 1e9, Some(&[1])))
        .expect("allocate")
        .expect("answer");
    assert_eq!(held["memory"].allocation_result, "1");
    let third = Pod::new("third");
    let answer = memory
        .allocate(&third.request("memory", 1e9, None))
        .expect("allocate")
        .expect("answer");
    assert_eq!(
        (
            answer["memory"].oci_property_name.as_str(),
            answer["memory"].allocation_result.as_str()
        ),
        ("CpusetMems", "0")
    );
}

#[test]
fn bound_memory_is_accounted_per_node_with_hugepages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut memory = memory_plugin(Some(dir.path()));
    let allocatable = memory.allocatable_resources();
    assert_eq!(
        allocatable["memory"].aggregated_allocatable_quantity,
        (14 * GIB) as f64
    );
    assert_eq!(
        allocatable["hugepages-2Mi"].aggregated_capacity_quantity,
        GIB as f64
    );
    // 6 GiB fits one node; 10 GiB needs both.
    let hints = memory
        .topology_hints(&bound().request("memory", (6 * GIB) as f64, None))
        .expect("h")
        .expect("some");
    assert_eq!(
        hints[0],
        Hint {
            nodes: vec![0],
            preferred: true
        }
    );
    let mut ask = bound().request("memory", (10 * GIB) as f64, Some(&[0, 1]));
    ask.resource_requests
        .insert("hugepages-2Mi".into(), (512u64 << 20) as f64);
    let answer = memory.allocate(&ask).expect("allocate").expect("answer");
    let info = &answer["memory"];
    assert_eq!(info.allocation_result, "0-1");
    assert_eq!(
        info.topology_assignments,
        BTreeMap::from([(0, 7 * GIB), (1, 3 * GIB)])
    );
    // Node 0 is full now, and its hugepages are half gone.
    let more = Pod::new("c").annotate(qos::MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#);
    let mut big_huge = more.request("memory", GIB as f64, None);
    big_huge
        .resource_requests
        .insert("hugepages-2Mi".into(), (600u64 << 20) as f64);
    assert_eq!(
        memory.topology_hints(&big_huge).expect("hints"),
        Some(vec![])
    );
    let err = memory
        .allocate(&more.request("memory", GIB as f64, Some(&[0])))
        .expect_err("full");
    assert!(matches!(err, PluginError::Insufficient { .. }), "{err}");
    // Restart keeps the accounting; RemovePod frees it.
    drop(memory);
    let mut memory = memory_plugin(Some(dir.path()));
    assert_eq!(memory.allocations(), {
        let mut m = memory_plugin(None);
        m.allocate(&ask).expect("same").expect("answer");
        m.allocations()
    });
    memory.remove_pod("uid-b").expect("remove");
    assert!(memory
        .allocate(&more.request("memory", GIB as f64, Some(&[0])))
        .is_ok());
}

#[test]
fn this_machines_memory_feeds_the_plugin() {
    let Ok(nodes) = read_node_memory(std::path::Path::new("/")) else {
        eprintln!("skipping: no readable memory information on this machine");
        return;
    };
    let plugin = MemoryPlugin::open(nodes, MemoryPluginConfig::default(), None).expect("plugin");
    assert!(plugin.allocatable_resources()["memory"].aggregated_capacity_quantity > 0.0);
}

#[test]
fn meminfo_from_a_fake_sysfs() {
    let dir = tempfile::tempdir().expect("tempdir");
    meminfo_tree(dir.path(), &[4 * GIB, 2 * GIB]);
    write(
        dir.path(),
        "sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages",
        "1\n",
    );
    write(
        dir.path(),
        "sys/devices/system/node/node1/hugepages/hugepages-1048576kB/free_hugepages",
        "1\n",
    );
    let nodes = read_node_memory(dir.path()).expect("read");
    let plugin = MemoryPlugin::open(nodes, MemoryPluginConfig::default(), None).expect("plugin");
    let allocatable = plugin.allocatable_resources();
    assert_eq!(
        allocatable["hugepages-1Gi"].aggregated_capacity_quantity,
        GIB as f64
    );
}

fn nic(
    name: &str,
    numa: Option<u32>,
    speed: Option<u64>,
    address: &str,
    netns: Option<&str>,
) -> Nic {
    Nic {
        name: name.into(),
        numa,
        speed_mbps: speed,
        addresses: vec![
            address.parse::<IpAddr>().expect("ip"),
            "fe80::1".parse().expect("ip"),
        ],
        netns: netns.map(|ns| Netns {
            name: ns.into(),
            path: format!("/var/run/netns/{ns}").into(),
            sysfs_root: None,
        }),
    }
}

fn nic_plugin(nics: Vec<Nic>) -> NicPlugin {
    NicPlugin::open(&seed_machine(), nics, &NicPluginConfig::default(), None).expect("plugin")
}

#[test]
fn nics_are_shared_until_their_bandwidth_is_gone() {
    let mut plugin = nic_plugin(vec![nic("eth0", Some(0), Some(1000), "10.0.0.1", None)]);
    let resource = plugin.resource_name().to_string();
    let ask = |name: &str, amount: f64| Pod::new(name).request(&resource, amount, None);
    let hints = plugin
        .topology_hints(&ask("a", 600.0))
        .expect("hints")
        .expect("some");
    assert_eq!(
        hints,
        vec![
            Hint {
                nodes: vec![0],
                preferred: true
            },
            Hint {
                nodes: vec![0, 1],
                preferred: false
            }
        ]
    );
    let answer = plugin
        .allocate(&ask("a", 600.0))
        .expect("a")
        .expect("answer");
    let info = &answer[&resource];
    assert_eq!(info.envs[ENV_NIC_NAME], "eth0");
    assert_eq!(info.envs[ENV_NIC_IPV4], "10.0.0.1");
    assert!(
        !info.envs.contains_key("AFFINITY_NIC_ADDR_IPV6"),
        "link-local only"
    );
    assert!(info.annotations.is_empty());
    plugin.allocate(&ask("b", 400.0)).expect("b still fits");
    assert_eq!(
        plugin.topology_hints(&ask("c", 1.0)).expect("hints"),
        Some(vec![])
    );
    let err = plugin.allocate(&ask("c", 1.0)).expect_err("full");
    assert!(matches!(err, PluginError::NoNic { .. }), "{err}");
    plugin.remove_pod("uid-a").expect("remove");
    assert!(plugin.allocate(&ask("c", 1.0)).is_ok());
}

#[test]
fn namespace_types_choose_between_host_and_other_namespaces() {
    let nics = vec![
        nic("eth0", Some(0), None, "10.0.0.1", None),
        nic("eth1", Some(1), None, "10.0.1.1", Some("ns1")),
    ];
    let mut plugin = nic_plugin(nics);
    let resource = plugin.resource_name().to_string();
    let pod = |name: &str, kind: &str| {
        Pod::new(name).annotate(
            qos::NETWORK_ENHANCEMENT_KEY,
            &format!(r#"{{"namespace_type":"{kind}"}}"#),
        )
    };
    let hints = plugin
        .topology_hints(&pod("a", "anti_host_ns").request(&resource, 1.0, None))
        .expect("h");
    assert_eq!(
        hints.expect("some")[0],
        Hint {
            nodes: vec![1],
            preferred: true
        }
    );
    let answer = plugin
        .allocate(&pod("a", "anti_host_ns").request(&resource, 1.0, None))
        .expect("a")
        .expect("x");
    assert_eq!(
        answer[&resource].annotations[NETNS_ANNOTATION],
        "/var/run/netns/ns1"
    );
    let answer = plugin
        .allocate(&pod("b", "host_ns").request(&resource, 1.0, Some(&[1])))
        .expect("b")
        .expect("x");
    assert_eq!(
        answer[&resource].envs[ENV_NIC_NAME], "eth0",
        "host_ns wins over the hint"
    );
    let answer = plugin
        .allocate(&pod("c", "host_ns_preferred").request(&resource, 1.0, None))
        .expect("c")
        .expect("x");
    assert_eq!(answer[&resource].envs[ENV_NIC_NAME], "eth0");
}

#[test]
fn a_nic_without_numa_information_serves_every_node() {
    let plugin = nic_plugin(vec![nic("eth0", None, None, "10.0.0.1", None)]);
    let resource = plugin.resource_name().to_string();
    let hints = plugin
        .topology_hints(&Pod::new("a").request(&resource, 1.0, None))
        .expect("h")
        .expect("some");
    assert_eq!(hints.len(), 3);
    assert!(hints.iter().all(|h| !h.preferred));
    let allocatable = &plugin.allocatable_resources()[&resource];
    assert_eq!(
        allocatable.topology_aware_allocatable_quantity_list[0].name,
        "eth0"
    );
}
