//! NUMA nodes: `sys/devices/system/node/nodeN/{cpulist|cpumap,distance,meminfo}`.
//!
//! * No node directory (or no `nodeN` in it): one node 0 holding every CPU.
//! * A CPU listed by several nodes (buggy firmware) belongs to the lowest one.
//! * Online CPUs that no node lists go to node 0, which is created (without
//!   distances) when the tree lacks it: Linux places CPUs without NUMA
//!   affinity on node 0.
//! * Nodes without CPUs (memory-only: PMEM, CXL, empty LPAR nodes) are kept.

use std::path::Path;

use pinion_core::{CpuSet, NumaNode};

use super::read;
use super::DiscoveryError;

/// The NUMA nodes and the node of every online CPU (indexed by CPU id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Numa {
    pub nodes: Vec<NumaNode>,
    pub cpu_node: Vec<u32>,
}

/// Reads the node directory `node_dir` for the CPUs in `online`.
pub(crate) fn read_numa(node_dir: &Path, online: &CpuSet) -> Result<Numa, DiscoveryError> {
    let size = online.last().map_or(0, |id| id as usize + 1);
    let ids = read::numbered_entries(node_dir, "node")?.unwrap_or_default();
    let mut nodes = Vec::with_capacity(ids.len() + 1);
    let mut cpu_node: Vec<Option<u32>> = vec![None; size];
    for id in ids {
        let dir = node_dir.join(format!("node{id}"));
        let cpus = read::read_list_or_mask(&dir, "cpulist", "cpumap")?.unwrap_or_default();
        for cpu in &cpus.intersection(online) {
            let slot = &mut cpu_node[cpu as usize];
            if slot.is_none() {
                *slot = Some(id);
            }
        }
        nodes.push(NumaNode {
            id,
            distances: read_distances(&dir.join("distance"))?,
            memory_bytes: read_memory(&dir.join("meminfo"))?,
        });
    }
    let unplaced = online.iter().any(|cpu| cpu_node[cpu as usize].is_none());
    if unplaced && !nodes.iter().any(|n| n.id == 0) {
        nodes.insert(
            0,
            NumaNode {
                id: 0,
                distances: Vec::new(),
                memory_bytes: None,
            },
        );
    }
    check_distances(node_dir, &nodes)?;
    Ok(Numa {
        nodes,
        cpu_node: cpu_node.into_iter().map(|node| node.unwrap_or(0)).collect(),
    })
}

/// Space-separated distances; empty when the file is absent.
fn read_distances(path: &Path) -> Result<Vec<u32>, DiscoveryError> {
    let Some(text) = read::read_trimmed(path)? else {
        return Ok(Vec::new());
    };
    text.split_ascii_whitespace()
        .map(|word| {
            word.parse::<u32>()
                .map_err(|_| read::malformed(path, format!("distance {word:?} is not a number")))
        })
        .collect()
}

/// Every node with distances must have one per node of the tree.
fn check_distances(node_dir: &Path, nodes: &[NumaNode]) -> Result<(), DiscoveryError> {
    for node in nodes {
        if !node.distances.is_empty() && node.distances.len() != nodes.len() {
            return Err(read::malformed(
                &node_dir.join(format!("node{}/distance", node.id)),
                format!(
                    "{} distances for {} nodes",
                    node.distances.len(),
                    nodes.len()
                ),
            ));
        }
    }
    Ok(())
}

/// `MemTotal` of a node's `meminfo` (`Node 0 MemTotal:  16384 kB`) in bytes.
fn read_memory(path: &Path) -> Result<Option<u64>, DiscoveryError> {
    let Some(text) = read::read_optional(path)? else {
        return Ok(None);
    };
    let Some(line) = text.lines().find(|line| line.contains("MemTotal:")) else {
        return Ok(None);
    };
    let mut words = line
        .split_once("MemTotal:")
        .map_or("", |(_, rest)| rest)
        .split_ascii_whitespace();
    let value = words.next().unwrap_or_default();
    let kib = value
        .parse::<u64>()
        .map_err(|_| read::malformed(path, format!("memtotal {value:?} is not a number")))?;
    match words.next() {
        Some("kB") => kib
            .checked_mul(1024)
            .map(Some)
            .ok_or_else(|| read::malformed(path, format!("memtotal {kib} kB overflows"))),
        unit => Err(read::malformed(
            path,
            format!("memtotal unit {unit:?}, expected \"kB\""),
        )),
    }
}
