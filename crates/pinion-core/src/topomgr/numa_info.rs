//! The NUMA nodes the Topology Manager knows, with their distances
//! (kubelet `NUMAInfo`): the default affinity (all nodes), average distance
//! of a mask and the `Closest` choice used by `prefer-closest-numa-nodes`.
//!
//! Distances are keyed by node **id** on both sides. (kubelet indexes the
//! distance vector by id although the kernel lists it by position; the two
//! differ only with non-contiguous node ids, where kubelet would fail.)

use std::collections::BTreeMap;
use std::sync::Arc;

use super::bitmask::{BitMaskError, NumaMask, MAX_NUMA_ID};
use crate::topology::Topology;

/// Row node id → column node id → distance.
pub type Distances = BTreeMap<u32, BTreeMap<u32, u32>>;

const SIDE: usize = MAX_NUMA_ID as usize + 1;

/// NUMA node ids and (optionally) their distance matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaInfo {
    nodes: Vec<u32>,
    default: NumaMask,
    /// Dense 64×64 matrix (`row * 64 + column`), 0 where unknown. Never
    /// changed once built, so shared: the agent clones its engine (and
    /// this with it) at the start of every batch.
    distances: Arc<[u32]>,
    /// Nodes that have a complete distance row.
    complete_rows: NumaMask,
}

impl NumaInfo {
    /// Nodes (ids 0–63) with optional distances.
    pub fn new(nodes: &[u32], distances: Option<&Distances>) -> Result<Self, BitMaskError> {
        let default = NumaMask::from_ids(nodes.iter().copied())?;
        let mut matrix = vec![0u32; SIDE * SIDE];
        let mut complete_rows = NumaMask::empty();
        for (&row, columns) in distances.into_iter().flatten() {
            for (&column, &distance) in columns {
                if row <= MAX_NUMA_ID && column <= MAX_NUMA_ID {
                    matrix[row as usize * SIDE + column as usize] = distance;
                }
            }
            let covered =
                NumaMask::from_ids(columns.keys().copied().filter(|&c| c <= MAX_NUMA_ID))?;
            if row <= MAX_NUMA_ID && default.is_subset_of(covered) {
                complete_rows = complete_rows.or(NumaMask::single(row)?);
            }
        }
        Ok(Self {
            nodes: nodes.to_vec(),
            default,
            distances: matrix.into(),
            complete_rows,
        })
    }

    /// No NUMA node at all (what a `none` Topology Manager needs).
    #[must_use]
    pub fn empty() -> Self {
        Self {
            nodes: Vec::new(),
            default: NumaMask::empty(),
            distances: vec![0; SIDE * SIDE].into(),
            complete_rows: NumaMask::empty(),
        }
    }

    /// All NUMA nodes of `topology` (memory-only ones included), with the
    /// distances the topology carries.
    pub fn from_topology(topology: &Topology) -> Result<Self, BitMaskError> {
        let nodes: Vec<u32> = topology.numa_nodes().iter().map(|n| n.id).collect();
        let mut distances = Distances::new();
        for node in topology.numa_nodes() {
            if node.distances.is_empty() {
                continue;
            }
            let row = nodes
                .iter()
                .copied()
                .zip(node.distances.iter().copied())
                .collect();
            distances.insert(node.id, row);
        }
        Self::new(&nodes, Some(&distances))
    }

    /// Node ids, in the order given.
    #[must_use]
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// The mask of all nodes (kubelet's default affinity).
    #[must_use]
    pub fn default_affinity(&self) -> NumaMask {
        self.default
    }

    /// True when every node has a distance to every node.
    #[must_use]
    pub fn has_distances(&self) -> bool {
        self.default.is_subset_of(self.complete_rows)
    }

    /// kubelet `calculateAvgDistanceFor`: the mean of `d[i][j]` over all
    /// ordered pairs of nodes in `mask`, `i = j` included (0 for an empty mask).
    #[must_use]
    pub fn average_distance(&self, mask: NumaMask) -> f64 {
        let ids = mask.ids();
        if ids.is_empty() {
            return 0.0;
        }
        let mut sum = 0u64;
        for &row in &ids {
            for &column in &ids {
                sum += u64::from(self.distances[row as usize * SIDE + column as usize]);
            }
        }
        let count = ids.len() as f64;
        // Sums of u32 distances over at most 64×64 pairs are exact in f64.
        #[allow(clippy::cast_precision_loss)]
        let total = sum as f64;
        total / (count * count)
    }

    /// kubelet `Closest`: true when `candidate` beats `current` — fewer
    /// nodes; equal counts: smaller average distance; equal averages:
    /// numerically smaller mask. Equal masks keep `current`.
    #[must_use]
    pub fn closer(&self, current: NumaMask, candidate: NumaMask) -> bool {
        if candidate.count() != current.count() {
            return candidate.count() < current.count();
        }
        let (mine, theirs) = (
            self.average_distance(candidate),
            self.average_distance(current),
        );
        if mine == theirs {
            return candidate.is_less_than(current);
        }
        mine < theirs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologySpec;

    fn mask(ids: &[u32]) -> NumaMask {
        NumaMask::from_ids(ids.iter().copied()).unwrap()
    }

    #[test]
    fn distances_come_from_the_topology_by_position() {
        let spec: TopologySpec = serde_json::from_str(
            r#"{"cpus": [{"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0},
                         {"id": 1, "core": 1, "socket": 0, "numa": 2, "uncore": 0}],
                "numa_nodes": [{"id": 0, "distances": [10, 21, 12]},
                               {"id": 1, "distances": [21, 10, 21]},
                               {"id": 2, "distances": [12, 21, 10]}]}"#,
        )
        .unwrap();
        let info = NumaInfo::from_topology(&Topology::new(spec).unwrap()).unwrap();
        assert_eq!(info.nodes(), [0, 1, 2]);
        assert_eq!(info.default_affinity(), mask(&[0, 1, 2]));
        assert!(info.has_distances());
        // Node ids 0 and 2: d = 10, 12, 12, 10.
        assert!((info.average_distance(mask(&[0, 2])) - 11.0).abs() < f64::EPSILON);
        assert!(info.closer(mask(&[0, 1]), mask(&[0, 2])));
        assert!(!info.closer(mask(&[0, 2]), mask(&[0, 2])));
    }

    #[test]
    fn missing_rows_mean_no_distances() {
        let partial = Distances::from([(0, BTreeMap::from([(0, 10), (1, 20)]))]);
        let info = NumaInfo::new(&[0, 1], Some(&partial)).unwrap();
        assert!(!info.has_distances());
        assert!(!NumaInfo::new(&[0, 1], None).unwrap().has_distances());
        assert!(NumaInfo::new(&[64], None).is_err());
    }

    #[test]
    fn a_clone_shares_the_distance_matrix_and_answers_the_same() {
        let distances = Distances::from([
            (0, BTreeMap::from([(0, 10), (1, 20)])),
            (1, BTreeMap::from([(0, 20), (1, 10)])),
        ]);
        let info = NumaInfo::new(&[0, 1], Some(&distances)).unwrap();
        let copy = info.clone();
        // 16 KiB that never change: the engine is cloned for every batch.
        assert!(Arc::ptr_eq(&info.distances, &copy.distances));
        assert_eq!(copy, info);
        assert!((copy.average_distance(mask(&[0, 1])) - 15.0).abs() < f64::EPSILON);
    }
}
