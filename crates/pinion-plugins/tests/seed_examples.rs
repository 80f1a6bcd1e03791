//! The three worked examples of the QoS Resource Manager proposal
//! (`../shared/seeds/qos-resource-manager-proposal.txt`), at the plugin
//! level, on the seed's 80-CPU two-NUMA machine: the plugins give the
//! seed's results.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{admit_hint, list, meminfo_tree, nic_tree, seed_machine, Pod};
use pinion_core::pools::{PoolParams, PoolSize};
use pinion_core::qos;
use pinion_host::net::{discover_nics, FixedAddresses, Netns};
use pinion_plugins::cpu::{CpuPlugin, CpuPluginConfig};
use pinion_plugins::memory::{MemoryPlugin, MemoryPluginConfig};
use pinion_plugins::nic::{
    NicPlugin, NicPluginConfig, ENV_NIC_IPV6, ENV_NIC_NAME, NETNS_ANNOTATION,
};
use pinion_plugins::{Allocation, ResourcePlugin};

const GB: f64 = 1e9;

fn cpus_of(allocation: &Allocation) -> (String, f64) {
    let info = &allocation["cpu"];
    assert_eq!(info.oci_property_name, "CpusetCpus");
    (info.allocation_result.clone(), info.allocated_quantity)
}

/// Example 1: online pods share one pool, offline (ETL) pods run in the
/// reclaim pool; the QoS-aware system then shrinks the online pool from 76
/// to 28 CPUs and every container follows.
#[test]
fn example_one_online_and_offline_pools_adjusted_by_an_advisor() {
    let config = CpuPluginConfig {
        reserved_cpus: 0,
        pools: PoolParams {
            reclaim_min: 4,
            ..PoolParams::default()
        },
        ..CpuPluginConfig::default()
    };
    let mut cpu = CpuPlugin::open(seed_machine(), &config, None).expect("plugin");
    // "suppose 0-37,40-77 for online pool, and 38-39,78-79 for offline pool by default"
    cpu.set_pool_size("share", PoolSize::Fixed(76))
        .expect("pin");
    let online = |name: &str| Pod::new(name).role("online-micro_service");
    let pod1 = online("pod1");
    let pod2 = Pod::new("pod2").role("ETL").level("reclaimed_cores");
    let pod3 = online("pod3");

    let a1 = cpu
        .allocate(&pod1.request("cpu", 4.0, None))
        .expect("pod1")
        .expect("answer");
    assert_eq!(cpus_of(&a1), ("0-37,40-77".into(), 76.0));
    assert!(a1["cpu"].resource_hints.is_empty(), "no NUMA preference");
    let a2 = cpu
        .allocate(&pod2.request("cpu", 2.0, None))
        .expect("pod2")
        .expect("answer");
    assert_eq!(cpus_of(&a2), ("38-39,78-79".into(), 4.0));
    let a3 = cpu
        .allocate(&pod3.request("cpu", 4.0, None))
        .expect("pod3")
        .expect("answer");
    assert_eq!(cpus_of(&a3), ("0-37,40-77".into(), 76.0));

    // "the QoS aware system adjusts the online cpuset.cpus pool to 0-13,40-53
    // and the offline cpuset.cpus pool 14-39,54-79"
    let report = cpu
        .set_pool_size("share", PoolSize::Fixed(28))
        .expect("advisor");
    let changed: BTreeSet<&str> = report
        .containers
        .iter()
        .map(|c| c.pod_uid.as_str())
        .collect();
    assert_eq!(
        changed,
        BTreeSet::from(["uid-pod1", "uid-pod2", "uid-pod3"])
    );
    let all = cpu.allocations();
    assert_eq!(
        cpus_of(&all["uid-pod1"]["container0"]),
        ("0-13,40-53".into(), 28.0)
    );
    assert_eq!(
        cpus_of(&all["uid-pod2"]["container0"]),
        ("14-39,54-79".into(), 52.0)
    );
    assert_eq!(
        cpus_of(&all["uid-pod3"]["container0"]),
        ("0-13,40-53".into(), 28.0)
    );
}

fn example_two_machine(dir: &std::path::Path) -> (CpuPlugin, MemoryPlugin) {
    let config = CpuPluginConfig {
        reserved_cpus: 4,
        reserved_cpu_list: list("0-1,40-41"),
        ..CpuPluginConfig::default()
    };
    let cpu = CpuPlugin::open(seed_machine(), &config, None).expect("cpu plugin");
    meminfo_tree(dir, &[237_706_936_320, 237_806_551_040]);
    let nodes = pinion_host::meminfo::read_node_memory(dir).expect("meminfo");
    let memory =
        MemoryPlugin::open(nodes, MemoryPluginConfig::default(), None).expect("memory plugin");
    (cpu, memory)
}

/// Admits `pod` (one container asking for `cpus` and `memory` bytes) with
/// the merged hint of both plugins; returns (cpuset, mems).
fn admit(
    cpu: &mut CpuPlugin,
    memory: &mut MemoryPlugin,
    pod: &Pod,
    cpus: f64,
    bytes: f64,
) -> (String, String) {
    let cpu_ask = pod.request("cpu", cpus, None);
    let mem_ask = pod.request("memory", bytes, None);
    let hint = admit_hint(&[(&*cpu, &cpu_ask), (&*memory, &mem_ask)]).expect("a common hint");
    let c = cpu
        .allocate(&pod.request("cpu", cpus, Some(&hint)))
        .expect("cpu")
        .expect("answer");
    let m = memory
        .allocate(&pod.request("memory", bytes, Some(&hint)))
        .expect("memory")
        .expect("answer");
    assert_eq!(m["memory"].oci_property_name, "CpusetMems");
    (
        c["cpu"].allocation_result.clone(),
        m["memory"].allocation_result.clone(),
    )
}

/// Example 2: a storage service and a reranker pinned to NUMA nodes they do
/// not share: the storage pod (numa_exclusive) gets 2-21 and memory node 0,
/// the reranker 42-51 and node 1 although node 0 still has room.
#[test]
fn example_two_numa_exclusive_storage_and_reranker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut cpu, mut memory) = example_two_machine(dir.path());
    // The memory plugin's machine state of the seed.
    let allocatable = &memory.allocatable_resources()["memory"];
    let per_node: Vec<f64> = allocatable
        .topology_aware_allocatable_quantity_list
        .iter()
        .map(|q| q.resource_value)
        .collect();
    assert_eq!(per_node, vec![237_182_648_320.0, 237_282_263_040.0]);

    let binding = r#"{"numa_binding":"true","numa_exclusive":"true"}"#;
    let storage = Pod::new("pod1")
        .role("storage-service")
        .level("dedicated_cores")
        .annotate(qos::MEMORY_ENHANCEMENT_KEY, binding);
    assert_eq!(
        admit(&mut cpu, &mut memory, &storage, 20.0, 40.0 * GB),
        ("2-21".into(), "0".into())
    );
    let reranker = Pod::new("pod2")
        .role("reranker")
        .level("dedicated_cores")
        .annotate(qos::MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#);
    // Node 0 has 18 free CPUs, but it belongs to the storage pod.
    let hints = cpu
        .topology_hints(&reranker.request("cpu", 10.0, None))
        .expect("hints");
    assert_eq!(
        hints.map(|h| h.iter().map(|h| h.nodes.clone()).collect::<Vec<_>>()),
        Some(vec![vec![1]])
    );
    assert_eq!(
        admit(&mut cpu, &mut memory, &reranker, 10.0, 20.0 * GB),
        ("42-51".into(), "1".into())
    );
    // Binding the reranker to node 0 anyway is refused by both plugins.
    let pushy = Pod::new("pod3")
        .level("dedicated_cores")
        .annotate(qos::MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#);
    let err = cpu
        .allocate(&pushy.request("cpu", 2.0, Some(&[0])))
        .expect_err("held");
    assert!(
        matches!(err, pinion_plugins::PluginError::NumaHeld { .. }),
        "{err}"
    );
    let err = memory
        .allocate(&pushy.request("memory", GB, Some(&[0])))
        .expect_err("held");
    assert!(
        matches!(err, pinion_plugins::PluginError::NumaHeld { .. }),
        "{err}"
    );
}

/// Example 3: NUMA node 0 is taken; two pods of the same role share the
/// NUMA-affine NIC eth1 (in namespace ns1) on node 1, with consecutive CPUs.
#[test]
fn example_three_two_pods_share_a_numa_affine_nic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut cpu, mut memory) = example_two_machine(&dir.path().join("mem"));
    let host = dir.path().join("host");
    let ns1 = dir.path().join("ns1");
    nic_tree(&host, "eth0", 0, 25_000);
    nic_tree(&ns1, "eth1", 1, 25_000);
    let netns = Netns {
        name: "ns1".into(),
        path: "/var/run/netns/ns1".into(),
        sysfs_root: Some(ns1),
    };
    let v6 = |text: &str| vec![text.parse().expect("ipv6")];
    let addresses = FixedAddresses(BTreeMap::from([
        (
            None,
            BTreeMap::from([("eth0".to_string(), v6("fdbd:dc05:3:154::20"))]),
        ),
        (
            Some("ns1".to_string()),
            BTreeMap::from([("eth1".to_string(), v6("fdbd:dc05:3:155::20"))]),
        ),
    ]));
    let nics = discover_nics(&host, &[netns], &addresses).expect("nics");
    let mut nic = NicPlugin::open(&seed_machine(), nics, &NicPluginConfig::default(), None)
        .expect("nic plugin");
    let resource = nic.resource_name().to_string();

    // "all related resources in NUMA node0 have been allocated"
    let filler = Pod::new("filler").level("dedicated_cores").annotate(
        qos::MEMORY_ENHANCEMENT_KEY,
        r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
    );
    admit(&mut cpu, &mut memory, &filler, 38.0, 200.0 * GB);

    let role = Pod::new("x")
        .role("numa-enhancement")
        .level("dedicated_cores")
        .annotate(qos::MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#);
    let mut results = Vec::new();
    for name in ["pod1", "pod2"] {
        let pod = Pod {
            uid: format!("uid-{name}"),
            name: name.into(),
            ..role.clone()
        };
        let asks = [
            pod.request("cpu", 10.0, None),
            pod.request("memory", 20.0 * GB, None),
            pod.request(&resource, 1000.0, None),
        ];
        let hint =
            admit_hint(&[(&cpu, &asks[0]), (&memory, &asks[1]), (&nic, &asks[2])]).expect("hint");
        assert_eq!(hint, vec![1]);
        let c = cpu
            .allocate(&pod.request("cpu", 10.0, Some(&hint)))
            .expect("cpu")
            .expect("answer");
        let m = memory
            .allocate(&pod.request("memory", 20.0 * GB, Some(&hint)))
            .expect("mem")
            .expect("answer");
        let n = nic
            .allocate(&pod.request(&resource, 1000.0, Some(&hint)))
            .expect("nic")
            .expect("answer");
        let info = &n[&resource];
        assert_eq!(info.oci_property_name, "");
        assert_eq!(info.envs[ENV_NIC_NAME], "eth1");
        assert_eq!(info.envs[ENV_NIC_IPV6], "fdbd:dc05:3:155::20");
        assert_eq!(info.annotations[NETNS_ANNOTATION], "/var/run/netns/ns1");
        results.push((
            c["cpu"].allocation_result.clone(),
            m["memory"].allocation_result.clone(),
        ));
    }
    assert_eq!(
        results,
        vec![
            ("42-51".to_string(), "1".to_string()),
            ("52-61".to_string(), "1".to_string())
        ]
    );
    assert_eq!(nic.allocations().len(), 2, "both pods hold eth1");
}
