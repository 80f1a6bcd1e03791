//! `pinion nrt --sysroot` on real machines' sysfs trees
//! (`../shared/topologies`, skipped with a notice when absent): the object
//! an agent would publish with nothing placed, checked against the trees'
//! own files (each node's `cpulist` and `distance`), the configuration's
//! reservation and Topology Manager settings, YAML = JSON, and clear
//! errors for bad input.

mod common;

use std::path::Path;

use common::pinion;
use pinion_core::CpuSet;
use serde_json::Value;

const SNC2: &str = "topologies/x86-2s-intel-xeon-gold-6230-ht-snc2";

fn object(args: &[&str]) -> Value {
    let out = pinion(args);
    assert!(
        out.status.success(),
        "pinion {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

fn node_file(tree: &Path, node: u64, file: &str) -> String {
    std::fs::read_to_string(tree.join(format!("sys/devices/system/node/node{node}/{file}")))
        .expect("node file")
        .trim()
        .to_string()
}

fn zone_id(zone: &Value) -> u64 {
    zone["name"]
        .as_str()
        .and_then(|n| n.strip_prefix("node-"))
        .and_then(|n| n.parse().ok())
        .expect("zone name node-N")
}

fn cpu(zone: &Value) -> &Value {
    zone["resources"]
        .as_array()
        .and_then(|list| list.iter().find(|r| r["name"] == "cpu"))
        .expect("cpu resource")
}

fn number(value: &Value) -> u64 {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("whole quantity")
}

fn attribute<'v>(object: &'v Value, name: &str) -> Option<&'v str> {
    object["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
        .and_then(|a| a["value"].as_str())
}

#[test]
fn zones_costs_and_cpus_follow_the_machines_sysfs_tree() {
    let Some(tree) = common::shared(SNC2) else {
        return;
    };
    let root = tree.to_str().expect("utf-8");
    let object = object(&[
        "nrt",
        "--sysroot",
        root,
        "--node-name",
        "worker-1",
        "-o",
        "json",
    ]);
    assert_eq!(object["kind"], "NodeResourceTopology");
    assert_eq!(object["metadata"]["name"], "worker-1");
    let zones = object["zones"].as_array().expect("zones");
    assert_eq!(zones.len(), 4, "the tree has 4 NUMA nodes (SNC2)");
    let (mut capacity, mut allocatable) = (0, 0);
    for zone in zones {
        let id = zone_id(zone);
        assert_eq!(zone["type"], "Node");
        let distances: Vec<i64> = node_file(&tree, id, "distance")
            .split_whitespace()
            .map(|d| d.parse().expect("distance"))
            .collect();
        let costs: Vec<i64> = zone["costs"]
            .as_array()
            .expect("costs")
            .iter()
            .map(|c| c["value"].as_i64().expect("value"))
            .collect();
        assert_eq!(costs, distances, "{}", zone["name"]);
        let cpus = CpuSet::parse_list(&node_file(&tree, id, "cpulist")).expect("cpulist");
        assert_eq!(number(&cpu(zone)["capacity"]), cpus.len() as u64);
        capacity += number(&cpu(zone)["capacity"]);
        allocatable += number(&cpu(zone)["allocatable"]);
        // Nothing is placed: everything allocatable is available.
        assert_eq!(cpu(zone)["available"], cpu(zone)["allocatable"]);
    }
    // The agent's default reservation: one CPU.
    assert_eq!(allocatable, capacity - 1);
    assert_eq!(
        attribute(&object, "nodeTopologyPodsFingerprint"),
        Some("pfp0v001ef46db3751d8e999"),
        "no pods: the empty set's signature"
    );
    assert_eq!(attribute(&object, "topologyManagerPolicy"), Some("none"));
}

#[test]
fn the_agents_config_sets_the_reservation_and_the_topology_manager_attributes() {
    let Some(tree) = common::shared(SNC2) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("agent.yaml");
    std::fs::write(
        &config,
        "reservedSystemCPUs: \"0,40\"\ntopologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n",
    )
    .expect("config");
    let root = tree.to_str().expect("utf-8");
    let config = config.to_str().expect("utf-8");
    let object = object(&["nrt", "--sysroot", root, "--config", config, "-o", "json"]);
    assert_eq!(
        attribute(&object, "topologyManagerPolicy"),
        Some("single-numa-node")
    );
    assert_eq!(attribute(&object, "topologyManagerScope"), Some("pod"));
    let zones = object["zones"].as_array().expect("zones");
    let first_cpus = CpuSet::parse_list(&node_file(&tree, 0, "cpulist")).expect("cpulist");
    for zone in zones {
        let id = zone_id(zone);
        let cpus = CpuSet::parse_list(&node_file(&tree, id, "cpulist")).expect("cpulist");
        let reserved = cpus
            .intersection(&CpuSet::parse_list("0,40").expect("cpus"))
            .len() as u64;
        assert_eq!(
            number(&cpu(zone)["allocatable"]),
            cpus.len() as u64 - reserved,
            "{}",
            zone["name"]
        );
        // Whole cores: CPU 0 and its sibling 40 are node 0's, so node 0 has
        // one whole core fewer.
        let whole = zone["attributes"]
            .as_array()
            .and_then(|list| {
                list.iter()
                    .find(|a| a["name"] == "pinion.io/freeWholeCores")
            })
            .and_then(|a| a["value"].as_str())
            .and_then(|v| v.parse::<u64>().ok())
            .expect("freeWholeCores");
        let expected = cpus.len() as u64 / 2 - u64::from(cpus == first_cpus && reserved > 0);
        assert_eq!(whole, expected, "{}", zone["name"]);
    }
}

#[test]
fn yaml_is_the_same_object_as_json() {
    let Some(tree) = common::shared(SNC2) else {
        return;
    };
    let root = tree.to_str().expect("utf-8");
    let json = object(&["nrt", "--sysroot", root, "-o", "json"]);
    let out = pinion(&["nrt", "--sysroot", root, "-o", "yaml"]);
    assert!(out.status.success());
    let yaml: Value = serde_yaml_ng::from_slice(&out.stdout).expect("yaml");
    assert_eq!(yaml, json);
    let out = pinion(&["nrt", "--sysroot", root]);
    let table = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        table.contains("ZONE    RESOURCE  CAPACITY  ALLOCATABLE  AVAILABLE"),
        "{table}"
    );
}

#[test]
fn bad_input_is_refused_naming_the_bad_value() {
    let out = pinion(&["nrt", "--sysroot", "/nonexistent-sysroot"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent-sysroot"), "{err}");
    let out = pinion(&[
        "nrt",
        "--sysroot",
        "/",
        "--pods-fingerprint-method",
        "exclusive",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"exclusive\""), "{err}");
    let out = pinion(&["nrt", "--config", "/etc/pinion/agent.yaml"]);
    assert!(!out.status.success(), "--config needs --sysroot");
}
