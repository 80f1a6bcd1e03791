//! CPU topology discovery from sysfs.
//!
//! [`discover`] reads `<root>/sys/devices/system/cpu` and
//! `<root>/sys/devices/system/node` (plus `<root>/sys/devices/cpu_core` and
//! `cpu_atom` for Intel hybrid core types) and builds a validated
//! [`Topology`]. How every field is derived, and what happens on each quirk
//! the kernel or a capture can show, is written down in
//! `docs/topology-discovery.md`. The facets live in `cpu` (online state,
//! cores, sockets, dies, core types), `cache` (LLC and uncore groups) and `node`
//! (NUMA nodes); `read` holds the file helpers.

mod cache;
mod core_type;
mod cpu;
mod node;
mod read;

use std::path::{Path, PathBuf};

use pinion_core::{CpuInfo, Topology, TopologyError, TopologySpec};

/// Why discovery failed. Every variant names the path involved.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The CPU directory itself does not exist (wrong sysroot?).
    #[error("{} not found: is this a sysfs root?", path.display())]
    NotFound { path: PathBuf },
    /// A file or directory exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file's content is not what the kernel prints.
    #[error("malformed {}: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },
    /// The online list names a CPU that has no directory.
    #[error("cpu {cpu} is online but {} does not exist", path.display())]
    MissingCpu { path: PathBuf, cpu: u32 },
    /// No CPU is online.
    #[error("no online cpus under {}", path.display())]
    NoOnlineCpus { path: PathBuf },
    /// The files are each well-formed but do not describe a valid topology.
    #[error("inconsistent topology under {}: {source}", path.display())]
    Inconsistent {
        path: PathBuf,
        #[source]
        source: TopologyError,
    },
}

/// Discovers the CPU topology of the machine whose root directory is
/// `root` (`/` for this machine, or a captured sysfs tree).
pub fn discover(root: &Path) -> Result<Topology, DiscoveryError> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let state = cpu::read_state(&cpu_dir)?;
    let online = &state.online;
    let places = cpu::read_places(&cpu_dir, online)?;
    let llcs = cache::read_llcs(&cpu_dir, online)?;
    let l3s = cache::read_l3s(&cpu_dir, online)?;
    let mut core_types = core_type::read_core_types(root, &cpu_dir, online)?;
    let numa = node::read_numa(&root.join("sys/devices/system/node"), online)?;
    let mut cpus = Vec::with_capacity(online.len());
    for id in online {
        let index = id as usize;
        let place = places.get(index).copied().flatten().unwrap_or(cpu::Place {
            core: id,
            socket: 0,
            die: None,
        });
        cpus.push(CpuInfo {
            id,
            core: place.core,
            socket: place.socket,
            numa: numa.cpu_node.get(index).copied().unwrap_or(0),
            // kubelet (cAdvisor): the L3 group, else the socket.
            uncore: l3s.get(index).copied().flatten().unwrap_or(place.socket),
            llc: Some(llcs.get(index).copied().unwrap_or(0)),
            die: place.die,
            core_type: core_types.remove(&id),
        });
    }
    let spec = TopologySpec {
        cpus,
        numa_nodes: numa.nodes,
        offline: state.offline,
        isolated: read::read_optional_list(&cpu_dir.join("isolated"))?,
        nohz_full: read::read_optional_list(&cpu_dir.join("nohz_full"))?,
    };
    Topology::new(spec).map_err(|source| DiscoveryError::Inconsistent {
        path: root.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests;

/// The online CPUs of the machine whose root directory is `root`: one file
/// (or the per-CPU `online` files), cheap enough for the reconcile loop to
/// poll for CPU hot-plug before it discovers the whole topology again.
pub fn online_cpus(root: &Path) -> Result<pinion_core::CpuSet, DiscoveryError> {
    Ok(cpu::read_state(&root.join("sys/devices/system/cpu"))?.online)
}
