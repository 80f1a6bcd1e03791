//! Text form of a [`Topology`] for `pinion topology`: a summary line, a
//! tree socket → NUMA node → LLC group → cores (with their thread ids),
//! memory-only nodes, and the NUMA distance matrix when there is more than
//! one node. Built to stay readable at a few hundred CPUs: cores are packed
//! several to a line.

use std::fmt::Write as _;

use pinion_core::{CpuSet, Topology};

use super::text::plural;

/// Width at which core entries wrap to a new line.
const LINE_WIDTH: usize = 100;

/// The whole text rendering, ending with a newline.
#[must_use]
pub fn render(topology: &Topology) -> String {
    let mut out = String::new();
    out.push_str(&summary(topology));
    out.push('\n');
    for (socket, socket_cpus) in topology.sockets() {
        let _ = writeln!(out, "socket {socket}: {}", cpus_text(socket_cpus));
        for (node, node_cpus) in topology.numa_cpus() {
            let here = socket_cpus.intersection(node_cpus);
            if !here.is_empty() {
                render_node(&mut out, topology, *node, &here, node_cpus);
            }
        }
    }
    for id in topology.cpuless_numa_nodes() {
        let _ = writeln!(out, "memory-only node {id}{}", memory(topology, id));
    }
    if topology.numa_nodes().len() > 1 {
        out.push_str(&distance_matrix(topology));
    }
    out
}

/// One line with the counts a person looks for first (plus a core-type
/// line on hybrid machines).
#[must_use]
pub fn summary(topology: &Topology) -> String {
    let nodes = topology.numa_nodes().len();
    let cpu_less = topology.cpuless_numa_nodes().len();
    let node_text = if cpu_less > 0 {
        format!(
            "{} ({} with cpus)",
            plural(nodes, "NUMA node"),
            nodes - cpu_less
        )
    } else {
        plural(nodes, "NUMA node")
    };
    let mut line = format!(
        "{}, {node_text}, {}, {} per core, {}; cpus: {} online ({}), {} offline{}, {} isolated{}",
        plural(topology.num_sockets(), "socket"),
        plural(topology.num_cores(), "core"),
        threads_per_core(topology),
        plural(topology.llcs().len(), "LLC group"),
        topology.num_cpus(),
        topology.all_cpus(),
        topology.offline().len(),
        listed(topology.offline()),
        topology.isolated().len(),
        listed(topology.isolated()),
    );
    if !topology.nohz_full().is_empty() {
        let _ = write!(line, ", nohz_full {}", topology.nohz_full());
    }
    if topology.uncores() != topology.llcs() {
        let _ = write!(
            line,
            "\nuncore groups (kubelet: the L3, else the socket): {}",
            plural(topology.num_uncore_caches(), "group")
        );
    }
    let types = core_types(topology);
    if !types.is_empty() {
        let _ = write!(line, "\ncore types: {types}");
    }
    line
}

/// `intel_core (cpus 0-7), intel_atom (cpus 8-15)` on hybrid machines,
/// in order of first appearance; empty otherwise.
fn core_types(topology: &Topology) -> String {
    let mut types: Vec<(&str, CpuSet)> = Vec::new();
    for cpu in topology.cpus() {
        let Some(kind) = cpu.core_type.as_deref() else {
            continue;
        };
        match types.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, cpus)) => {
                cpus.insert(cpu.id);
            }
            None => types.push((kind, CpuSet::from_iter([cpu.id]))),
        }
    }
    let parts: Vec<String> = types
        .iter()
        .map(|(kind, cpus)| format!("{kind} ({cpus})"))
        .collect();
    parts.join(", ")
}

fn render_node(out: &mut String, topology: &Topology, node: u32, here: &CpuSet, all: &CpuSet) {
    let _ = writeln!(
        out,
        "  node {node}: {}{}",
        part_of(here, all),
        memory(topology, node)
    );
    for (llc, llc_cpus) in topology.llcs() {
        let cpus = here.intersection(llc_cpus);
        if cpus.is_empty() {
            continue;
        }
        let _ = writeln!(out, "    llc {llc}: {}", part_of(&cpus, llc_cpus));
        render_cores(out, topology, &cpus);
    }
}

/// The cores whose first thread is in `cpus`, packed on lines of
/// [`LINE_WIDTH`], each as `core N: threads`.
fn render_cores(out: &mut String, topology: &Topology, cpus: &CpuSet) {
    let mut line = String::new();
    for (core, threads) in topology.cores() {
        if !threads.first().is_some_and(|first| cpus.contains(first)) {
            continue;
        }
        let entry = format!("core {core}: {threads}");
        if !line.is_empty() && line.len() + entry.len() + 3 > LINE_WIDTH {
            let _ = writeln!(out, "      {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push_str("   ");
        }
        line.push_str(&entry);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "      {line}");
    }
}

/// Longest cpulist printed in a header; longer ones become a count (the
/// core lines below list every thread anyway).
const MAX_LIST: usize = 40;

/// `cpus 0-5,48-53`, or `56 cpus` when the list is long.
fn cpus_text(cpus: &CpuSet) -> String {
    let list = cpus.to_string();
    if list.len() <= MAX_LIST {
        format!("cpus {list}")
    } else {
        plural(cpus.len(), "cpu")
    }
}

/// Like [`cpus_text`], noting when `here` is only part of its group (an L3
/// spanning SNC nodes, a NUMA node spanning sockets).
fn part_of(here: &CpuSet, whole: &CpuSet) -> String {
    if here == whole {
        cpus_text(here)
    } else {
        format!(
            "{} (of {} in the whole group)",
            cpus_text(here),
            whole.len()
        )
    }
}

fn memory(topology: &Topology, node: u32) -> String {
    topology
        .numa_nodes()
        .iter()
        .find(|n| n.id == node)
        .and_then(|n| n.memory_bytes)
        .map_or(String::new(), |bytes| {
            format!(", memory {}", human_bytes(bytes))
        })
}

fn human_bytes(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if bytes >= GIB {
        format!("{} GiB", bytes / GIB)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

/// "2 threads" or "1-2 threads" when cores differ (hybrid parts).
fn threads_per_core(topology: &Topology) -> String {
    let sizes = topology.cores().values().map(CpuSet::len);
    let min = sizes.clone().min().unwrap_or(0);
    let max = sizes.max().unwrap_or(0);
    let word = if max == 1 { "thread" } else { "threads" };
    if min == max {
        format!("{max} {word}")
    } else {
        format!("{min}-{max} {word}")
    }
}

fn listed(cpus: &CpuSet) -> String {
    if cpus.is_empty() {
        String::new()
    } else {
        format!(" ({cpus})")
    }
}

/// `numa distances:` then a header row of node ids and one row per node;
/// `-` where the kernel reported no distances.
fn distance_matrix(topology: &Topology) -> String {
    let nodes = topology.numa_nodes();
    if nodes.iter().all(|n| n.distances.is_empty()) {
        return "numa distances: not reported\n".to_string();
    }
    let mut out = String::from("numa distances:\n  node");
    for node in nodes {
        let _ = write!(out, " {:>4}", node.id);
    }
    out.push('\n');
    for from in nodes {
        let _ = write!(out, "  {:>4}", from.id);
        for to in nodes {
            match topology.numa_distance(from.id, to.id) {
                Some(distance) => {
                    let _ = write!(out, " {distance:>4}");
                }
                None => out.push_str("    -"),
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinion_core::topology::{synthetic, Shape};

    fn shape() -> Shape {
        Shape {
            sockets: 2,
            numa_per_socket: 2,
            cores_per_socket: 4,
            threads_per_core: 2,
            cores_per_uncore: 2,
        }
    }

    #[test]
    fn summary_counts_the_synthetic_machine() {
        let text = summary(&synthetic(shape()));
        assert_eq!(
            text,
            "2 sockets, 4 NUMA nodes, 8 cores, 2 threads per core, 4 LLC groups; \
             cpus: 16 online (0-15), 0 offline, 0 isolated"
        );
    }

    #[test]
    fn tree_lists_every_core_with_its_threads_under_its_node_and_llc() {
        let text = render(&synthetic(shape()));
        assert!(text.contains("socket 1: cpus 4-7,12-15\n"), "{text}");
        assert!(
            text.contains("  node 3: cpus 6-7,14-15\n    llc 3: cpus 6-7,14-15\n"),
            "{text}"
        );
        assert!(text.contains("socket 0: cpus 0-3,8-11\n"), "{text}");
        assert!(
            text.contains("      core 6: 6,14   core 7: 7,15\n"),
            "{text}"
        );
        assert!(text.ends_with("numa distances: not reported\n"), "{text}");
    }

    #[test]
    fn long_core_lists_wrap() {
        let topology = synthetic(Shape {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 64,
            threads_per_core: 2,
            cores_per_uncore: 0,
        });
        let text = render(&topology);
        let core_lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("      core"))
            .collect();
        assert!(core_lines.len() > 5, "{text}");
        assert!(
            core_lines.iter().all(|line| line.len() <= LINE_WIDTH + 6),
            "{text}"
        );
        assert!(text.contains("core 63: 63,127"));
    }
}
