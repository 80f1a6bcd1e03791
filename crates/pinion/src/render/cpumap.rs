//! A per-CPU map of who holds which CPU, grouped socket → NUMA node → LLC
//! group → cores, with a legend. Used by `pinion simulate` and
//! `pinion state inspect --sysroot`.
//!
//! ```text
//! socket 0
//!   numa 0
//!     llc 0  [0 R 4 R] [1 A 5 A] [2 . 6 .] [3 . 7 .]
//! ```
//! Each `[...]` is one core with its threads: `.` shared pool, `R` reserved
//! (in the shared pool unless strict), `i` free but isolated at boot
//! (`isolcpus=`: never in the shared pool), letters = exclusive holders.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pinion_core::state::State;
use pinion_core::{CpuSet, Topology};

/// Cores per output line inside one LLC group.
const CORES_PER_LINE: usize = 8;

/// Renders the map of `state` on `topology`.
#[must_use]
pub fn render(topology: &Topology, state: &State, reserved: &CpuSet) -> String {
    let holders = holders(state);
    let mut out = String::from(
        "cpu map ([threads of one core]; . shared, R reserved, letters exclusive, - in no pool):\n",
    );
    let isolated = topology.isolated();
    out.push_str(&grid(topology, &|id| {
        mark(id, state, reserved, &holders, isolated)
    }));
    out.push_str("legend:\n  .  shared pool\n");
    if !reserved.is_empty() {
        let _ = writeln!(out, "  R  reserved ({reserved})");
    }
    let free_isolated = isolated.intersection(&state.default).difference(reserved);
    if !free_isolated.is_empty() {
        let _ = writeln!(
            out,
            "  i  free, isolated at boot ({free_isolated}): not in the shared pool, only for pinion.io/isolated-cpus"
        );
    }
    for (label, key, cpus) in &holders {
        let _ = writeln!(out, "  {label}  {key} ({cpus}, {} cpus)", cpus.len());
    }
    out
}

/// The machine's CPUs grouped socket → NUMA node → LLC group → cores, each
/// CPU followed by its `mark`.
#[must_use]
pub fn grid(topology: &Topology, mark: &dyn Fn(u32) -> String) -> String {
    let mut out = String::new();
    for (socket, socket_cpus) in topology.sockets() {
        let _ = writeln!(out, "socket {socket}");
        for (numa, numa_cpus) in topology.numa_cpus() {
            let in_socket = numa_cpus.intersection(socket_cpus);
            if in_socket.is_empty() {
                continue;
            }
            let _ = writeln!(out, "  numa {numa}");
            for (llc, llc_cpus) in topology.llcs() {
                let cpus = llc_cpus.intersection(&in_socket);
                if !cpus.is_empty() {
                    render_llc(&mut out, topology, *llc, &cpus, mark);
                }
            }
        }
    }
    out
}

fn render_llc(
    out: &mut String,
    topology: &Topology,
    llc: u32,
    cpus: &CpuSet,
    mark: &dyn Fn(u32) -> String,
) {
    let mut cores: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for id in cpus {
        if let Some(info) = topology.cpu(id) {
            cores.entry(info.core).or_default().push(id);
        }
    }
    let cells: Vec<String> = cores
        .values()
        .map(|threads| {
            let parts: Vec<String> = threads
                .iter()
                .map(|&id| format!("{id} {}", mark(id)))
                .collect();
            format!("[{}]", parts.join(" "))
        })
        .collect();
    for (line, chunk) in cells.chunks(CORES_PER_LINE).enumerate() {
        let head = if line == 0 {
            format!("llc {llc}")
        } else {
            String::new()
        };
        let _ = writeln!(out, "    {head:<7} {}", chunk.join(" "));
    }
}

fn mark(
    id: u32,
    state: &State,
    reserved: &CpuSet,
    holders: &[(char, String, CpuSet)],
    isolated: &CpuSet,
) -> String {
    let held: String = holders
        .iter()
        .filter(|(_, _, cpus)| cpus.contains(id))
        .map(|(label, _, _)| *label)
        .collect();
    if !held.is_empty() {
        return held;
    }
    if reserved.contains(id) {
        "R".to_string()
    } else if state.default.contains(id) && isolated.contains(id) {
        "i".to_string()
    } else if state.default.contains(id) {
        ".".to_string()
    } else {
        "-".to_string()
    }
}

/// One label per container holding exclusive CPUs, in pod/container order.
fn holders(state: &State) -> Vec<(char, String, CpuSet)> {
    const LABELS: &str = "ABCDEFGHIJKLMNOPQSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = Vec::new();
    let mut labels = LABELS.chars();
    for (pod, containers) in &state.assignments {
        for (container, cpus) in containers {
            let label = labels.next().unwrap_or('#');
            out.push((label, format!("{pod}/{container}"), cpus.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinion_core::testing::cpus;
    use pinion_core::topology::{synthetic, Shape};

    #[test]
    fn map_marks_shared_reserved_and_holders() {
        let topology = synthetic(Shape {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads_per_core: 2,
            cores_per_uncore: 0,
        });
        let mut state = State {
            default: cpus("0,2-4,6-7"),
            ..State::default()
        };
        state.assign("pod", "app", cpus("1,5"));
        let text = render(&topology, &state, &cpus("0,4"));
        assert!(
            text.contains("llc 0   [0 R 4 R] [1 A 5 A] [2 . 6 .] [3 . 7 .]"),
            "{text}"
        );
        assert!(text.contains("A  pod/app (1,5, 2 cpus)"), "{text}");
        assert!(text.contains("R  reserved (0,4)"), "{text}");
    }
}
