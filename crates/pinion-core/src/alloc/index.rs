//! A dense, precomputed view of a topology for the allocator: CPU positions,
//! dense entity indices per kind (NUMA node, socket, core, uncore cache),
//! member lists, and the parent → child relations the sort orders walk.
//! Built once per topology (O(#CPUs)); every allocation then works on small
//! integer arrays instead of rebuilding CPU sets.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use crate::cpuset::CpuSet;
use crate::topology::Topology;

/// The entity kinds, used as array indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Numa = 0,
    Socket = 1,
    Core = 2,
    Uncore = 3,
}

pub(super) const KINDS: [Kind; 4] = [Kind::Numa, Kind::Socket, Kind::Core, Kind::Uncore];

/// Compressed lists: the items of entry `e` are `items[start[e]..start[e + 1]]`.
#[derive(Debug, Clone, Default)]
pub(super) struct Csr {
    start: Vec<u32>,
    items: Vec<u32>,
}

impl Csr {
    pub(super) fn get(&self, e: usize) -> &[u32] {
        &self.items[self.start[e] as usize..self.start[e + 1] as usize]
    }
}

/// Parent → child relation: the children having CPUs in each parent (ascending
/// child index) and, aligned with them, the index of the (parent, child) pair.
#[derive(Debug, Clone, Default)]
pub(super) struct Relation {
    pub(super) child: usize,
    pub(super) children: Csr,
    pub(super) pairs: Csr,
    pub(super) pair_count: usize,
    /// Pair index of every CPU position.
    pub(super) cpu_pair: Vec<u32>,
}

/// Relation slots.
pub(super) const REL_LEVEL2: usize = 0; // first level → second level (NUMA→socket or socket→NUMA)
pub(super) const REL_CORES: usize = 1; // second level → core
pub(super) const REL_NUMA_UNCORE: usize = 2;
pub(super) const REL_UNCORE_CORE: usize = 3;

/// A shared topology with the allocator's index of it, built on first use
/// and then shared by every clone: what a caller that allocates again and
/// again on one topology keeps (the static policy; `pinion alloc`'s timing).
/// The topology model itself caches nothing.
#[derive(Debug, Clone)]
pub struct IndexedTopology {
    topology: Arc<Topology>,
    index: Arc<OnceLock<AllocIndex>>,
}

impl IndexedTopology {
    /// `topology`, its index not built yet.
    #[must_use]
    pub fn new(topology: Arc<Topology>) -> Self {
        Self {
            topology,
            index: Arc::new(OnceLock::new()),
        }
    }

    /// The topology.
    #[must_use]
    pub fn topology(&self) -> &Arc<Topology> {
        &self.topology
    }

    /// The index of the topology (built by the first call).
    #[must_use]
    pub fn index(&self) -> &AllocIndex {
        self.index.get_or_init(|| AllocIndex::new(&self.topology))
    }
}

/// The precomputed allocation view of one topology. Build once per topology
/// with [`AllocIndex::new`] and pass to [`super::take_with_index`], or keep
/// one built on first use beside its topology: [`IndexedTopology`].
#[derive(Clone)]
pub struct AllocIndex {
    pub(super) cpu_ids: Vec<u32>,
    pos_of: Vec<u32>,
    /// CPU position → dense entity index per kind (one cache line per CPU).
    pub(super) ent: Vec<[u32; 4]>,
    /// Per kind: dense index → entity id.
    pub(super) ids: [Vec<u32>; 4],
    /// Per kind: dense index → CPU positions (ascending id).
    pub(super) members: [Csr; 4],
    pub(super) rels: [Relation; 4],
    pub(super) numa_first: bool,
    pub(super) cpus_per_core: usize,
    pub(super) cpus_per_uncore: usize,
    /// Smallest real size of an entity, per kind.
    pub(super) min_size: [usize; 4],
    /// Some child appears under several parents (irregular topology): order
    /// lists then need de-duplication.
    pub(super) irregular: bool,
    /// Per dense NUMA node: its socket when all its CPUs are on one socket.
    pub(super) numa_socket: Vec<Option<u32>>,
    /// Every CPU of the topology.
    pub(super) all: CpuSet,
    /// Free counts of an idle machine: per kind, and per relation pair (the
    /// pair counts only on irregular topologies; regular ones use the
    /// child's count).
    pub(super) full_count: [Vec<u32>; 4],
    pub(super) full_pair: [Vec<u32>; 4],
}

impl std::fmt::Debug for AllocIndex {
    /// A summary (the arrays are large and derived from the topology).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocIndex")
            .field("cpus", &self.cpu_ids.len())
            .field("numa_nodes", &self.ids[Kind::Numa as usize].len())
            .field("sockets", &self.ids[Kind::Socket as usize].len())
            .field("cores", &self.ids[Kind::Core as usize].len())
            .field("uncore_caches", &self.ids[Kind::Uncore as usize].len())
            .field("numa_first", &self.numa_first)
            .field("irregular", &self.irregular)
            .finish_non_exhaustive()
    }
}

fn map_of(topo: &Topology, kind: Kind) -> &BTreeMap<u32, CpuSet> {
    match kind {
        Kind::Numa => topo.numa_cpus(),
        Kind::Socket => topo.sockets(),
        Kind::Core => topo.cores(),
        Kind::Uncore => topo.uncores(),
    }
}

fn to_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl AllocIndex {
    /// Builds the index of `topo`.
    #[must_use]
    pub fn new(topo: &Topology) -> Self {
        let cpu_ids: Vec<u32> = topo.cpus().iter().map(|c| c.id).collect();
        let max_id = cpu_ids.last().copied().unwrap_or(0) as usize;
        let mut pos_of = vec![u32::MAX; max_id + 1];
        for (pos, &id) in cpu_ids.iter().enumerate() {
            pos_of[id as usize] = to_u32(pos);
        }
        let mut index = AllocIndex {
            cpu_ids,
            pos_of,
            ent: Vec::new(),
            ids: Default::default(),
            members: Default::default(),
            rels: Default::default(),
            numa_first: topo.num_sockets() >= topo.num_numa_nodes(),
            cpus_per_core: topo.cpus_per_core(),
            cpus_per_uncore: topo.cpus_per_uncore(),
            min_size: [0; 4],
            irregular: false,
            numa_socket: Vec::new(),
            all: topo.all_cpus().clone(),
            full_count: Default::default(),
            full_pair: Default::default(),
        };
        for kind in KINDS {
            index.add_kind(kind, map_of(topo, kind));
        }
        let (first, second) = if index.numa_first {
            (Kind::Numa, Kind::Socket)
        } else {
            (Kind::Socket, Kind::Numa)
        };
        index.rels = [
            index.relation(first, second),
            index.relation(second, Kind::Core),
            index.relation(Kind::Numa, Kind::Uncore),
            index.relation(Kind::Uncore, Kind::Core),
        ];
        index.numa_socket = (0..index.ids[Kind::Numa as usize].len())
            .map(|m| index.single_socket(m))
            .collect();
        index.full_count = std::array::from_fn(|k| {
            (0..index.ids[k].len())
                .map(|e| to_u32(index.members[k].get(e).len()))
                .collect()
        });
        if index.irregular {
            index.full_pair = std::array::from_fn(|r| {
                let mut sizes = vec![0u32; index.rels[r].pair_count];
                for &pair in &index.rels[r].cpu_pair {
                    sizes[pair as usize] += 1;
                }
                sizes
            });
        }
        index
    }

    fn add_kind(&mut self, kind: Kind, map: &BTreeMap<u32, CpuSet>) {
        let k = kind as usize;
        if self.ent.len() != self.cpu_ids.len() {
            self.ent = vec![[0; 4]; self.cpu_ids.len()];
        }
        let mut members = Csr {
            start: vec![0],
            items: Vec::with_capacity(self.cpu_ids.len()),
        };
        let mut min_size = usize::MAX;
        for (dense, (&id, cpus)) in map.iter().enumerate() {
            self.ids[k].push(id);
            for cpu in cpus {
                let pos = self.pos_of[cpu as usize];
                self.ent[pos as usize][k] = to_u32(dense);
                members.items.push(pos);
            }
            members.start.push(to_u32(members.items.len()));
            min_size = min_size.min(cpus.len());
        }
        self.members[k] = members;
        self.min_size[k] = min_size;
    }

    fn relation(&mut self, parent: Kind, child: Kind) -> Relation {
        let (p, c) = (parent as usize, child as usize);
        let n_child = self.ids[c].len();
        let mut stamp = vec![u32::MAX; n_child];
        let mut slot = vec![0u32; n_child];
        let mut parents_of = vec![0u32; n_child];
        let mut rel = Relation {
            child: c,
            children: Csr {
                start: vec![0],
                items: Vec::new(),
            },
            pairs: Csr {
                start: vec![0],
                items: Vec::new(),
            },
            pair_count: 0,
            cpu_pair: vec![0; self.cpu_ids.len()],
        };
        let mut segment: Vec<u64> = Vec::new();
        for parent_ix in 0..self.ids[p].len() {
            segment.clear();
            for &pos in self.members[p].get(parent_ix) {
                let ch = self.ent[pos as usize][c] as usize;
                if stamp[ch] != to_u32(parent_ix) {
                    stamp[ch] = to_u32(parent_ix);
                    slot[ch] = to_u32(rel.pair_count);
                    segment.push((u64::from(to_u32(ch)) << 32) | rel.pair_count as u64);
                    rel.pair_count += 1;
                    parents_of[ch] += 1;
                }
                rel.cpu_pair[pos as usize] = slot[ch];
            }
            segment.sort_unstable();
            for &packed in &segment {
                rel.children.items.push((packed >> 32) as u32);
                rel.pairs.items.push((packed & 0xffff_ffff) as u32);
            }
            rel.children.start.push(to_u32(rel.children.items.len()));
            rel.pairs.start.push(to_u32(rel.pairs.items.len()));
        }
        if parents_of.iter().any(|&n| n > 1) {
            self.irregular = true;
        }
        rel
    }

    fn single_socket(&self, numa: usize) -> Option<u32> {
        let mut sockets = self.members[Kind::Numa as usize]
            .get(numa)
            .iter()
            .map(|&pos| self.ent[pos as usize][Kind::Socket as usize]);
        let first = sockets.next()?;
        sockets
            .all(|s| s == first)
            .then(|| self.ids[Kind::Socket as usize][first as usize])
    }

    /// The position of CPU `id`, if the topology has it.
    pub(super) fn position(&self, id: u32) -> Option<usize> {
        let pos = *self.pos_of.get(id as usize)?;
        (pos != u32::MAX).then_some(pos as usize)
    }

    pub(super) fn num_cpus(&self) -> usize {
        self.cpu_ids.len()
    }

    pub(super) fn count(&self, kind: Kind) -> usize {
        self.ids[kind as usize].len()
    }

    /// Real number of CPUs of an entity.
    pub(super) fn size(&self, kind: Kind, e: usize) -> usize {
        self.members[kind as usize].get(e).len()
    }
}
