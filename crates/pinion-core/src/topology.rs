//! The CPU topology model: logical CPUs with their core, socket, die, NUMA
//! node and uncore (last-level cache) group, plus NUMA nodes with distances,
//! and the isolated / nohz_full / offline CPU sets.
//!
//! Identifiers follow kubelet (spec §1.2): a core id is platform-unique (the
//! lowest CPU id among the core's threads when discovered from sysfs); the
//! counts kubelet derives (`num_cores`, `cpus_per_core`, …) are distinct-id
//! counts and integer divisions of totals.
//!
//! `cpus` holds the **online** CPUs only (the kernel removes the topology of an
//! offline CPU, and kubelet never sees them); present-but-offline CPUs are in
//! [`Topology::offline`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::{CpuSet, MAX_CPU_ID};

/// One online logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    pub id: u32,
    /// Platform-unique core id (kubelet: lowest CPU id of the core's threads).
    pub core: u32,
    pub socket: u32,
    pub numa: u32,
    /// Uncore cache group id, as kubelet sees it (cAdvisor): the L3 the CPU
    /// belongs to, or its socket id when the machine has no cache above L2;
    /// 0 when the machine reports no caches at all.
    pub uncore: u32,
    /// The last-level cache group as discovered (the highest unified cache,
    /// else the highest data cache: L3, or L2/L1 on machines without an L3).
    /// Absent in topologies that do not say (it then equals `uncore`); see
    /// [`Topology::llcs`] and [`Topology::with_llc_as_uncore`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llc: Option<u32>,
    /// Die id where the kernel reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub die: Option<u32>,
    /// Core type on hybrid machines (e.g. `intel_core`, `intel_atom`), the
    /// arm64 core design (`arm-0x41-0xd87`), or the CPU capacity class
    /// (`capacity-1024`); see `docs/topology-discovery.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_type: Option<String>,
}

/// One NUMA node; it may have no CPUs (memory-only node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    pub id: u32,
    /// Distances to every node of the topology, in ascending node-id order
    /// (the kernel's `distance` file). Empty when unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub distances: Vec<u32>,
    /// Total memory in bytes, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// Errors from [`Topology::new`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("topology has no online cpus")]
    NoCpus,
    #[error("cpu {id} appears more than once")]
    DuplicateCpu { id: u32 },
    #[error("cpu id {id} is beyond the maximum {MAX_CPU_ID}")]
    CpuIdTooLarge { id: u32 },
    #[error("numa node {id} appears more than once")]
    DuplicateNumaNode { id: u32 },
    #[error("cpu {cpu} is on numa node {numa}, which the topology does not list")]
    UnknownNumaNode { cpu: u32, numa: u32 },
    #[error("numa node {node} has {got} distances, expected one per node ({expected})")]
    DistanceCount {
        node: u32,
        expected: usize,
        got: usize,
    },
    #[error("cpus {cpus} are listed both online and offline")]
    OfflineOverlapsOnline { cpus: String },
    #[error("die {die} spans sockets {first} and {second}")]
    DieSpansSockets { die: u32, first: u32, second: u32 },
}

/// The JSON / serde form of a topology (the conformance corpus shape, with
/// optional extras).
/// Unknown keys are ignored (the corpus carries informational ones such as
/// `declared_counts`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TopologySpec {
    pub cpus: Vec<CpuInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_nodes: Vec<NumaNode>,
    #[serde(default, skip_serializing_if = "CpuSet::is_empty")]
    pub offline: CpuSet,
    #[serde(default, skip_serializing_if = "CpuSet::is_empty")]
    pub isolated: CpuSet,
    #[serde(default, skip_serializing_if = "CpuSet::is_empty")]
    pub nohz_full: CpuSet,
}

/// A validated CPU topology with precomputed views. Build with
/// [`Topology::new`]; serialises as its [`TopologySpec`]. Equality compares
/// the spec (every view is derived from it).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "TopologySpec", into = "TopologySpec")]
pub struct Topology {
    spec: TopologySpec,
    /// `cpu_index[id]` = position of CPU `id` in `spec.cpus`, or `u32::MAX`.
    cpu_index: Vec<u32>,
    all: CpuSet,
    cores: BTreeMap<u32, CpuSet>,
    sockets: BTreeMap<u32, CpuSet>,
    numa: BTreeMap<u32, CpuSet>,
    uncores: BTreeMap<u32, CpuSet>,
    llcs: BTreeMap<u32, CpuSet>,
}

impl PartialEq for Topology {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl Eq for Topology {}

impl PartialEq for TopologySpec {
    fn eq(&self, other: &Self) -> bool {
        self.cpus == other.cpus
            && self.numa_nodes == other.numa_nodes
            && self.offline == other.offline
            && self.isolated == other.isolated
            && self.nohz_full == other.nohz_full
    }
}

impl Eq for TopologySpec {}

impl TryFrom<TopologySpec> for Topology {
    type Error = TopologyError;
    fn try_from(spec: TopologySpec) -> Result<Self, TopologyError> {
        Self::new(spec)
    }
}

impl From<Topology> for TopologySpec {
    fn from(topology: Topology) -> Self {
        topology.spec
    }
}

impl Topology {
    /// Validates `spec` and builds the derived views. CPUs are kept sorted by
    /// id; NUMA nodes by id. When `spec.numa_nodes` is empty, one node entry
    /// (without distances) is created for every NUMA id the CPUs use.
    pub fn new(mut spec: TopologySpec) -> Result<Self, TopologyError> {
        if spec.cpus.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        spec.cpus.sort_by_key(|c| c.id);
        spec.numa_nodes.sort_by_key(|n| n.id);
        let max_id = spec.cpus.last().map_or(0, |c| c.id);
        if max_id > MAX_CPU_ID {
            return Err(TopologyError::CpuIdTooLarge { id: max_id });
        }
        let mut cpu_index = vec![u32::MAX; max_id as usize + 1];
        let mut all = CpuSet::new();
        let (mut cores, mut sockets, mut numa, mut uncores, mut llcs) = (
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
            BTreeMap::new(),
        );
        let mut die_socket: BTreeMap<u32, u32> = BTreeMap::new();
        for (position, cpu) in spec.cpus.iter().enumerate() {
            if !all.insert(cpu.id) {
                return Err(TopologyError::DuplicateCpu { id: cpu.id });
            }
            cpu_index[cpu.id as usize] = u32::try_from(position).unwrap_or(u32::MAX);
            add_to(&mut cores, cpu.core, cpu.id);
            add_to(&mut sockets, cpu.socket, cpu.id);
            add_to(&mut numa, cpu.numa, cpu.id);
            add_to(&mut uncores, cpu.uncore, cpu.id);
            add_to(&mut llcs, cpu.llc.unwrap_or(cpu.uncore), cpu.id);
            if let Some(die) = cpu.die {
                let first = *die_socket.entry(die).or_insert(cpu.socket);
                if first != cpu.socket {
                    return Err(TopologyError::DieSpansSockets {
                        die,
                        first,
                        second: cpu.socket,
                    });
                }
            }
        }
        if spec.numa_nodes.is_empty() {
            spec.numa_nodes = numa
                .keys()
                .map(|&id| NumaNode {
                    id,
                    distances: Vec::new(),
                    memory_bytes: None,
                })
                .collect();
        }
        validate_numa_nodes(&spec)?;
        let overlap = spec.offline.intersection(&all);
        if !overlap.is_empty() {
            return Err(TopologyError::OfflineOverlapsOnline {
                cpus: overlap.to_string(),
            });
        }
        Ok(Self {
            spec,
            cpu_index,
            all,
            cores,
            sockets,
            numa,
            uncores,
            llcs,
        })
    }

    /// The same machine with the last-level cache groups as its uncore
    /// groups (Pinion's `uncoreCacheSource: last-level-cache`): on machines
    /// without an L3, `prefer-align-cpus-by-uncorecache` then aligns to the
    /// L2 (or L1) groups instead of kubelet's socket fallback. CPUs without
    /// an `llc` keep their uncore id.
    #[must_use]
    pub fn with_llc_as_uncore(&self) -> Topology {
        let mut spec = self.spec.clone();
        for cpu in &mut spec.cpus {
            if let Some(llc) = cpu.llc {
                cpu.uncore = llc;
            }
        }
        // Only uncore ids changed; every check of `new` still holds.
        Topology::new(spec).unwrap_or_else(|_| self.clone())
    }

    /// The serialisable form.
    #[must_use]
    pub fn spec(&self) -> &TopologySpec {
        &self.spec
    }

    /// Online CPUs, ascending by id.
    #[must_use]
    pub fn cpus(&self) -> &[CpuInfo] {
        &self.spec.cpus
    }

    /// The online CPU `id`, if any.
    #[must_use]
    pub fn cpu(&self, id: u32) -> Option<&CpuInfo> {
        let position = *self.cpu_index.get(id as usize)?;
        self.spec.cpus.get(position as usize)
    }

    /// NUMA nodes ascending by id, including CPU-less ones.
    #[must_use]
    pub fn numa_nodes(&self) -> &[NumaNode] {
        &self.spec.numa_nodes
    }

    /// Distance between two NUMA nodes, when known.
    #[must_use]
    pub fn numa_distance(&self, from: u32, to: u32) -> Option<u32> {
        let nodes = &self.spec.numa_nodes;
        let from = nodes.iter().find(|n| n.id == from)?;
        let to_pos = nodes.iter().position(|n| n.id == to)?;
        from.distances.get(to_pos).copied()
    }

    /// All online CPUs.
    #[must_use]
    pub fn all_cpus(&self) -> &CpuSet {
        &self.all
    }

    /// Present but offline CPUs.
    #[must_use]
    pub fn offline(&self) -> &CpuSet {
        &self.spec.offline
    }

    /// CPUs isolated from the scheduler (`isolcpus`).
    #[must_use]
    pub fn isolated(&self) -> &CpuSet {
        &self.spec.isolated
    }

    /// `nohz_full` CPUs.
    #[must_use]
    pub fn nohz_full(&self) -> &CpuSet {
        &self.spec.nohz_full
    }

    /// Core id → its online CPUs.
    #[must_use]
    pub fn cores(&self) -> &BTreeMap<u32, CpuSet> {
        &self.cores
    }

    /// Socket id → its online CPUs.
    #[must_use]
    pub fn sockets(&self) -> &BTreeMap<u32, CpuSet> {
        &self.sockets
    }

    /// NUMA node id → its online CPUs (nodes without CPUs are absent here;
    /// see [`Topology::numa_nodes`]).
    #[must_use]
    pub fn numa_cpus(&self) -> &BTreeMap<u32, CpuSet> {
        &self.numa
    }

    /// Uncore (LLC) group id → its online CPUs.
    #[must_use]
    pub fn uncores(&self) -> &BTreeMap<u32, CpuSet> {
        &self.uncores
    }

    /// Last-level cache group id → its online CPUs (the `llc` of each CPU,
    /// or its uncore id when the topology does not give one).
    #[must_use]
    pub fn llcs(&self) -> &BTreeMap<u32, CpuSet> {
        &self.llcs
    }

    /// NUMA nodes that have no online CPU (memory-only nodes).
    #[must_use]
    pub fn cpuless_numa_nodes(&self) -> Vec<u32> {
        self.spec
            .numa_nodes
            .iter()
            .map(|n| n.id)
            .filter(|id| !self.numa.contains_key(id))
            .collect()
    }

    /// The CPUs of the cores that `cpus` touch (every sibling thread).
    #[must_use]
    pub fn core_siblings(&self, cpus: &CpuSet) -> CpuSet {
        let mut out = CpuSet::new();
        for id in cpus {
            if let Some(core) = self.cpu(id).and_then(|c| self.cores.get(&c.core)) {
                out.union_with(core);
            }
        }
        out
    }

    /// The NUMA nodes holding any of `cpus`, ascending (what `cpuset.mems`
    /// should allow for a container pinned to `cpus`).
    #[must_use]
    pub fn numa_nodes_of(&self, cpus: &CpuSet) -> Vec<u32> {
        self.numa
            .iter()
            .filter(|(_, node)| !node.is_disjoint(cpus))
            .map(|(id, _)| *id)
            .collect()
    }

    /// kubelet `NumCPUs`.
    #[must_use]
    pub fn num_cpus(&self) -> usize {
        self.spec.cpus.len()
    }
    /// kubelet `NumCores` (distinct core ids).
    #[must_use]
    pub fn num_cores(&self) -> usize {
        self.cores.len()
    }
    /// kubelet `NumSockets` (distinct socket ids).
    #[must_use]
    pub fn num_sockets(&self) -> usize {
        self.sockets.len()
    }
    /// kubelet `NumNUMANodes` (distinct NUMA ids of CPUs).
    #[must_use]
    pub fn num_numa_nodes(&self) -> usize {
        self.numa.len()
    }
    /// kubelet `NumUncoreCache` (distinct uncore ids).
    #[must_use]
    pub fn num_uncore_caches(&self) -> usize {
        self.uncores.len()
    }
    /// kubelet `CPUsPerCore` = `NumCPUs / NumCores` (integer division).
    #[must_use]
    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus().checked_div(self.num_cores()).unwrap_or(0)
    }
    /// kubelet `CPUsPerSocket`.
    #[must_use]
    pub fn cpus_per_socket(&self) -> usize {
        self.num_cpus().checked_div(self.num_sockets()).unwrap_or(0)
    }
    /// kubelet `CPUsPerUncore`.
    #[must_use]
    pub fn cpus_per_uncore(&self) -> usize {
        self.num_cpus()
            .checked_div(self.num_uncore_caches())
            .unwrap_or(0)
    }
}

fn add_to(map: &mut BTreeMap<u32, CpuSet>, key: u32, cpu: u32) {
    map.entry(key).or_default().insert(cpu);
}

fn validate_numa_nodes(spec: &TopologySpec) -> Result<(), TopologyError> {
    let nodes = &spec.numa_nodes;
    for pair in nodes.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(TopologyError::DuplicateNumaNode { id: pair[0].id });
        }
    }
    for node in nodes {
        if !node.distances.is_empty() && node.distances.len() != nodes.len() {
            return Err(TopologyError::DistanceCount {
                node: node.id,
                expected: nodes.len(),
                got: node.distances.len(),
            });
        }
    }
    for cpu in &spec.cpus {
        if nodes.binary_search_by_key(&cpu.numa, |n| n.id).is_err() {
            return Err(TopologyError::UnknownNumaNode {
                cpu: cpu.id,
                numa: cpu.numa,
            });
        }
    }
    Ok(())
}

/// Shape of a regular machine for [`synthetic`]: tests, benches, examples,
/// and the `machine` key of simulator scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    pub sockets: u32,
    pub numa_per_socket: u32,
    pub cores_per_socket: u32,
    pub threads_per_core: u32,
    /// Cores sharing one uncore (L3) group; 0 = one group per socket.
    #[serde(default)]
    pub cores_per_uncore: u32,
}

/// A [`Shape`] that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("machine shape {shape:?}: every count must be at least 1")]
    ZeroCount { shape: Shape },
    #[error("machine shape {shape:?}: numa_per_socket must divide cores_per_socket")]
    UnevenNuma { shape: Shape },
    #[error("machine shape {shape:?} has more than {} cpus", MAX_CPU_ID + 1)]
    TooLarge { shape: Shape },
}

/// Builds a regular topology with Linux numbering: thread `t` of core `c` is
/// CPU `t * total_cores + c`, so sibling = id + number of cores. Core ids are
/// kubelet's (lowest CPU id of the core = `c`). Uncore groups hold
/// `cores_per_uncore` consecutive cores (the last may be smaller).
pub fn try_synthetic(shape: Shape) -> Result<Topology, ShapeError> {
    let Shape {
        sockets,
        numa_per_socket,
        cores_per_socket,
        threads_per_core,
        cores_per_uncore,
    } = shape;
    if sockets == 0 || numa_per_socket == 0 || cores_per_socket == 0 || threads_per_core == 0 {
        return Err(ShapeError::ZeroCount { shape });
    }
    if cores_per_socket % numa_per_socket != 0 {
        return Err(ShapeError::UnevenNuma { shape });
    }
    let total = u64::from(sockets) * u64::from(cores_per_socket) * u64::from(threads_per_core);
    if total > u64::from(MAX_CPU_ID) + 1 {
        return Err(ShapeError::TooLarge { shape });
    }
    let cores_per_uncore = if cores_per_uncore == 0 {
        cores_per_socket
    } else {
        cores_per_uncore
    };
    let total_cores = sockets * cores_per_socket;
    let cores_per_numa = cores_per_socket / numa_per_socket;
    let mut cpus = Vec::new();
    for thread in 0..threads_per_core {
        for core in 0..total_cores {
            cpus.push(CpuInfo {
                id: thread * total_cores + core,
                core,
                socket: core / cores_per_socket,
                numa: core / cores_per_numa,
                uncore: core / cores_per_uncore,
                llc: None,
                die: None,
                core_type: None,
            });
        }
    }
    let spec = TopologySpec {
        cpus,
        ..TopologySpec::default()
    };
    // A regular shape within the limits always validates.
    Topology::new(spec).map_err(|_| ShapeError::TooLarge { shape })
}

/// [`try_synthetic`] for shapes written in code (tests, benches).
///
/// # Panics
/// When the shape is invalid (a programming error there).
#[must_use]
pub fn synthetic(shape: Shape) -> Topology {
    match try_synthetic(shape) {
        Ok(topology) => topology,
        Err(err) => panic!("{err}"),
    }
}

#[cfg(test)]
mod tests;
