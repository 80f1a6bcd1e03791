//! `NumaMask`: a set of NUMA node ids 0–63 stored in one `u64`, with the
//! Topology Manager's ordering rules (spec `kubelet-topology-manager.md` §2).
//!
//! * [`NumaMask::is_less_than`] is a plain numeric comparison of the `u64`
//!   values (decided by the *highest* differing bit: `{1,2}` < `{0,3}`).
//! * [`NumaMask::is_narrower_than`]: fewer nodes, or equally many and less.
//! * [`iterate_masks`] yields every non-empty subset of a node list by size,
//!   then in lexicographic order of positions in the list.

use std::fmt;

/// Highest representable NUMA node id.
pub const MAX_NUMA_ID: u32 = 63;

/// Errors from building a mask.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitMaskError {
    /// kubelet's text, plus the offending id.
    #[error("bit number must be in range 0-63 (got {bit})")]
    OutOfRange { bit: u64 },
}

/// A set of NUMA node ids 0–63. `Default` is the empty mask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NumaMask(u64);

impl NumaMask {
    /// The empty mask.
    #[must_use]
    pub const fn empty() -> Self {
        Self(0)
    }

    /// The mask with the given raw bits.
    #[must_use]
    pub const fn from_raw(bits: u64) -> Self {
        Self(bits)
    }

    /// The raw `u64` value.
    #[must_use]
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// A mask of `ids`; fails (changing nothing) when one is above 63.
    pub fn from_ids<I: IntoIterator<Item = u32>>(ids: I) -> Result<Self, BitMaskError> {
        let mut mask = 0u64;
        for id in ids {
            if id > MAX_NUMA_ID {
                return Err(BitMaskError::OutOfRange { bit: u64::from(id) });
            }
            mask |= 1 << id;
        }
        Ok(Self(mask))
    }

    /// The mask of one node; fails when `id` is above 63.
    pub fn single(id: u32) -> Result<Self, BitMaskError> {
        Self::from_ids([id])
    }

    /// True when node `id` is in the mask (false for ids above 63).
    #[must_use]
    pub fn is_set(self, id: u32) -> bool {
        id <= MAX_NUMA_ID && self.0 & (1 << id) != 0
    }

    /// Number of nodes (`Count`).
    #[must_use]
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// True when no node is set.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Node ids, ascending (`GetBits`).
    #[must_use]
    pub fn ids(self) -> Vec<u32> {
        (0..=MAX_NUMA_ID).filter(|&id| self.is_set(id)).collect()
    }

    /// Intersection.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// Union.
    #[must_use]
    pub fn or(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// True when every node of `self` is in `other`.
    #[must_use]
    pub fn is_subset_of(self, other: Self) -> bool {
        self.0 & !other.0 == 0
    }

    /// kubelet `IsLessThan`: numeric comparison of the raw values.
    #[must_use]
    pub fn is_less_than(self, other: Self) -> bool {
        self.0 < other.0
    }

    /// kubelet `IsNarrowerThan`: fewer nodes; equal counts → `is_less_than`.
    #[must_use]
    pub fn is_narrower_than(self, other: Self) -> bool {
        match self.count().cmp(&other.count()) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => self.is_less_than(other),
        }
    }
}

/// Prints the ids as a cpulist-style list (`0-2,5`); the empty mask prints
/// as the empty string.
impl fmt::Display for NumaMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = self.ids();
        let mut first = true;
        let mut i = 0;
        while i < ids.len() {
            let start = ids[i];
            let mut end = start;
            while i + 1 < ids.len() && ids[i + 1] == end + 1 {
                i += 1;
                end = ids[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// Serialises as an array of node ids (`[0, 2]`).
impl serde::Serialize for NumaMask {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.ids())
    }
}

impl<'de> serde::Deserialize<'de> for NumaMask {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ids = Vec::<u64>::deserialize(deserializer)?;
        let mut mask = 0u64;
        for id in ids {
            if id > u64::from(MAX_NUMA_ID) {
                return Err(serde::de::Error::custom(BitMaskError::OutOfRange {
                    bit: id,
                }));
            }
            mask |= 1 << id;
        }
        Ok(Self(mask))
    }
}

/// kubelet `IterateBitMasks`: calls `visit` with every non-empty subset of
/// `ids`, by size ascending, then lexicographically by position in `ids`.
/// Ids above 63 are ignored. `2^n − 1` calls: callers keep `n` small.
pub fn iterate_masks(ids: &[u32], mut visit: impl FnMut(NumaMask)) {
    iterate_masks_while(ids, ids.len(), |mask| {
        visit(mask);
        true
    });
}

/// [`iterate_masks`] limited to masks of at most `max_size` nodes; stops
/// early when `visit` returns false (the same order, so the visited masks
/// are always a prefix of [`iterate_masks`]' sequence).
pub fn iterate_masks_while(
    ids: &[u32],
    max_size: usize,
    mut visit: impl FnMut(NumaMask) -> bool,
) -> bool {
    let ids: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|&id| id <= MAX_NUMA_ID)
        .collect();
    let mut positions = Vec::with_capacity(ids.len());
    for size in 1..=max_size.min(ids.len()) {
        positions.clear();
        positions.extend(0..size);
        loop {
            let mask = positions.iter().fold(0u64, |acc, &p| acc | 1 << ids[p]);
            if !visit(NumaMask(mask)) {
                return false;
            }
            if !next_combination(&mut positions, ids.len()) {
                break;
            }
        }
    }
    true
}

/// Advances `positions` (strictly increasing indices below `n`) to the next
/// combination in lexicographic order; false after the last one.
fn next_combination(positions: &mut [usize], n: usize) -> bool {
    let k = positions.len();
    let Some(i) = (0..k).rev().find(|&i| positions[i] < n - k + i) else {
        return false;
    };
    positions[i] += 1;
    for j in i + 1..k {
        positions[j] = positions[j - 1] + 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(ids: &[u32]) -> NumaMask {
        NumaMask::from_ids(ids.iter().copied()).unwrap()
    }

    #[test]
    fn ordering_is_numeric_and_narrowest_counts_first() {
        assert!(mask(&[1, 2]).is_less_than(mask(&[0, 3])));
        assert!(mask(&[1, 2]).is_narrower_than(mask(&[0, 3])));
        assert!(mask(&[7]).is_narrower_than(mask(&[0, 1])));
        assert!(!mask(&[0, 2]).is_narrower_than(mask(&[0, 2])));
    }

    #[test]
    fn out_of_range_ids_are_rejected() {
        assert_eq!(
            NumaMask::from_ids([1, 64]),
            Err(BitMaskError::OutOfRange { bit: 64 })
        );
        assert!(NumaMask::single(63).unwrap().is_set(63));
        assert!(!mask(&[0]).is_set(64));
        assert!(serde_json::from_str::<NumaMask>("[0, 70]").is_err());
    }

    #[test]
    fn iteration_order_is_by_size_then_position() {
        let mut seen = Vec::new();
        iterate_masks(&[2, 0, 1], |m| seen.push(m.ids()));
        let expected: Vec<Vec<u32>> = vec![
            vec![2],
            vec![0],
            vec![1],
            vec![0, 2],
            vec![1, 2],
            vec![0, 1],
            vec![0, 1, 2],
        ];
        assert_eq!(seen, expected);
        let mut count = 0;
        iterate_masks(&[], |_| count += 1);
        assert_eq!(count, 0);
    }

    #[test]
    fn display_and_serde() {
        assert_eq!(mask(&[0, 1, 2, 5]).to_string(), "0-2,5");
        assert_eq!(NumaMask::empty().to_string(), "");
        assert_eq!(serde_json::to_string(&mask(&[3, 1])).unwrap(), "[1,3]");
        assert_eq!(
            serde_json::from_str::<NumaMask>("[3,1]").unwrap(),
            mask(&[1, 3])
        );
    }
}
