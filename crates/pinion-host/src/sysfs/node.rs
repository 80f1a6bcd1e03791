//! NUMA nodes: `sys/devices/system/node/nodeN/{cpulist|cpumap,distance,meminfo}`.
//!
//! * No node directory (or no `nodeN` in it): one node 0 holding every CPU.
//! * A CPU listed by several nodes (buggy firmware) belongs to the lowest one.
//! * Online CPUs that no node lists go to node 0, which is created (without
//!   distances) when the tree lacks it: Linux places CPUs without NUMA
//!   affinity on node 0.
//! * A `distance` file has one entry per node the tree lists (the kernel
//!   prints one per online node), in ascending id order. A created node 0
//!   is not one of them: a file may also keep a column for it (a tree whose
//!   node 0 was removed), which is then its distance. When the files have
//!   no column for the created node, the distances to it are unknown, and
//!   the model holds a row for every node or none: the machine has no
//!   distances.
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
    let listed = nodes.len();
    let unplaced = online.iter().any(|cpu| cpu_node[cpu as usize].is_none());
    let created = unplaced && !nodes.iter().any(|n| n.id == 0);
    check_distances(node_dir, &nodes, created)?;
    if created {
        if nodes
            .iter()
            .any(|n| !n.distances.is_empty() && n.distances.len() == listed)
        {
            // No column for the created node: unknown distances.
            for node in &mut nodes {
                node.distances.clear();
            }
        }
        nodes.insert(
            0,
            NumaNode {
                id: 0,
                distances: Vec::new(),
                memory_bytes: None,
            },
        );
    }
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

/// Every node with distances must have one per node the tree lists
/// (`nodes`), or one more when a node 0 is `created` for the CPUs no node
/// lists (a column the file kept for it).
fn check_distances(
    node_dir: &Path,
    nodes: &[NumaNode],
    created: bool,
) -> Result<(), DiscoveryError> {
    let listed = nodes.len();
    for node in nodes {
        let found = node.distances.len();
        if found == 0 || found == listed || (created && found == listed + 1) {
            continue;
        }
        let also = if created {
            format!(
                " (or {} with node 0, created for the cpus no node lists)",
                listed + 1
            )
        } else {
            String::new()
        };
        return Err(read::malformed(
            &node_dir.join(format!("node{}/distance", node.id)),
            format!("{found} distances for the {listed} nodes the tree lists{also}"),
        ));
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
