//! `CpuSet`: a set of logical CPU ids, stored as a bitset.
//!
//! Ids run from 0 to [`MAX_CPU_ID`]. Sets of up to [`INLINE_CPUS`] CPUs live
//! inline (no heap allocation, cheap to clone); larger ids spill to the heap.
//! The storage is always trimmed (no trailing zero words), so two equal sets
//! have equal storage and `Eq`/`Hash`/`Ord` work on the words directly.
//!
//! Text forms (see [`CpuSet::parse_list`], [`CpuSet::parse_mask`]):
//! * Linux cpulist: `0-3,8-11`; the empty set is the empty string.
//! * Linux hex mask as in sysfs `cpumap`: comma-separated 32-bit words, most
//!   significant first, e.g. `00000000,0000ff0f`.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{BitAnd, BitOr, Sub};

/// Highest CPU id a `CpuSet` can hold (Linux `NR_CPUS` maximum is 8192).
pub const MAX_CPU_ID: u32 = 8191;
/// CPU ids below this are stored without heap allocation.
pub const INLINE_CPUS: u32 = 1024;

const WORD_BITS: u32 = 64;
const INLINE_WORDS: usize = (INLINE_CPUS / WORD_BITS) as usize;

/// Errors from parsing the text forms of a CPU set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("invalid cpulist {text:?}: {reason}")]
    List { text: String, reason: String },
    #[error("invalid cpu mask {text:?}: {reason}")]
    Mask { text: String, reason: String },
    #[error("cpu id {id} is beyond the maximum {MAX_CPU_ID}")]
    IdTooLarge { id: u64 },
}

/// A set of CPU ids. See the module documentation.
#[derive(Clone, Default)]
pub struct CpuSet {
    /// Number of words in use (trimmed: word `len - 1` is non-zero).
    len: usize,
    inline: [u64; INLINE_WORDS],
    /// Used instead of `inline` when `len > INLINE_WORDS`.
    heap: Vec<u64>,
}

impl CpuSet {
    /// The empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a set from ids; fails on an id beyond [`MAX_CPU_ID`].
    pub fn from_ids<I: IntoIterator<Item = u32>>(ids: I) -> Result<Self, CpuSetError> {
        let mut set = Self::new();
        for id in ids {
            set.try_insert(id)?;
        }
        Ok(set)
    }

    /// The set `{lo, lo+1, …, hi}`; empty when `lo > hi`.
    ///
    /// # Panics
    /// When `hi` is beyond [`MAX_CPU_ID`] (a programming error, not input).
    #[must_use]
    pub fn range(lo: u32, hi: u32) -> Self {
        assert!(hi <= MAX_CPU_ID, "cpu id {hi} beyond {MAX_CPU_ID}");
        let mut set = Self::new();
        for id in lo..=hi {
            set.insert(id);
        }
        set
    }

    fn words(&self) -> &[u64] {
        if self.len <= INLINE_WORDS {
            &self.inline[..self.len]
        } else {
            &self.heap[..self.len]
        }
    }

    /// Builds a set from raw words (bit `i` of word `w` = CPU `64*w + i`).
    pub(crate) fn from_words(words: &[u64]) -> Self {
        let mut len = words.len();
        while len > 0 && words[len - 1] == 0 {
            len -= 1;
        }
        let mut set = Self {
            len,
            ..Self::default()
        };
        if len <= INLINE_WORDS {
            set.inline[..len].copy_from_slice(&words[..len]);
        } else {
            set.heap = words[..len].to_vec();
        }
        set
    }

    fn word_mut(&mut self, index: usize) -> &mut u64 {
        if index >= self.len {
            let new_len = index + 1;
            if new_len > INLINE_WORDS && self.len <= INLINE_WORDS {
                let mut heap = vec![0; new_len];
                heap[..self.len].copy_from_slice(&self.inline[..self.len]);
                self.heap = heap;
            } else if new_len > INLINE_WORDS {
                self.heap.resize(new_len, 0);
            }
            self.len = new_len;
        }
        if self.len <= INLINE_WORDS {
            &mut self.inline[index]
        } else {
            &mut self.heap[index]
        }
    }

    fn trim(&mut self) {
        let words = self.words();
        let mut len = words.len();
        while len > 0 && words[len - 1] == 0 {
            len -= 1;
        }
        if len == self.len {
            return;
        }
        if self.len > INLINE_WORDS && len <= INLINE_WORDS {
            self.inline = [0; INLINE_WORDS];
            self.inline[..len].copy_from_slice(&self.heap[..len]);
            self.heap = Vec::new();
        }
        self.len = len;
    }

    /// Adds `id`; returns whether it was new. Fails beyond [`MAX_CPU_ID`].
    pub fn try_insert(&mut self, id: u32) -> Result<bool, CpuSetError> {
        if id > MAX_CPU_ID {
            return Err(CpuSetError::IdTooLarge { id: u64::from(id) });
        }
        let word = self.word_mut((id / WORD_BITS) as usize);
        let bit = 1u64 << (id % WORD_BITS);
        let new = *word & bit == 0;
        *word |= bit;
        Ok(new)
    }

    /// Adds `id`; returns whether it was new.
    ///
    /// # Panics
    /// When `id` is beyond [`MAX_CPU_ID`] (use [`CpuSet::try_insert`] for input).
    pub fn insert(&mut self, id: u32) -> bool {
        match self.try_insert(id) {
            Ok(new) => new,
            Err(err) => panic!("{err}"),
        }
    }

    /// Adds every id from `lo` to `hi` (`lo <= hi <= MAX_CPU_ID`), a word
    /// at a time: a list's range (`0-127`) costs its words, not its CPUs.
    fn insert_range(&mut self, lo: u32, hi: u32) {
        let (first, last) = ((lo / WORD_BITS) as usize, (hi / WORD_BITS) as usize);
        for index in first..=last {
            let from = if index == first { lo % WORD_BITS } else { 0 };
            let to = if index == last {
                hi % WORD_BITS
            } else {
                WORD_BITS - 1
            };
            *self.word_mut(index) |= (u64::MAX >> (WORD_BITS - 1 - to)) & (u64::MAX << from);
        }
    }

    /// Removes `id`; returns whether it was present.
    pub fn remove(&mut self, id: u32) -> bool {
        let index = (id / WORD_BITS) as usize;
        if index >= self.len {
            return false;
        }
        let bit = 1u64 << (id % WORD_BITS);
        let word = self.word_mut(index);
        let present = *word & bit != 0;
        *word &= !bit;
        self.trim();
        present
    }

    /// Whether `id` is in the set.
    #[must_use]
    pub fn contains(&self, id: u32) -> bool {
        let index = (id / WORD_BITS) as usize;
        self.words()
            .get(index)
            .is_some_and(|w| w & (1u64 << (id % WORD_BITS)) != 0)
    }

    /// Number of CPUs in the set.
    #[must_use]
    pub fn len(&self) -> usize {
        self.words().iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The smallest id, if any.
    #[must_use]
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// The largest id, if any.
    #[must_use]
    pub fn last(&self) -> Option<u32> {
        let words = self.words();
        let top = *words.last()?;
        let index = u32::try_from(words.len() - 1).ok()?;
        Some(index * WORD_BITS + (WORD_BITS - 1 - top.leading_zeros()))
    }

    /// Ids in ascending order.
    #[must_use]
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            words: self.words(),
            index: 0,
            current: self.words().first().copied().unwrap_or(0),
        }
    }

    fn zip_words(&self, other: &Self, op: impl Fn(u64, u64) -> u64) -> Self {
        let (a, b) = (self.words(), other.words());
        let n = a.len().max(b.len());
        let mut out = [0u64; INLINE_WORDS];
        if n <= INLINE_WORDS {
            for (i, slot) in out.iter_mut().enumerate().take(n) {
                *slot = op(
                    a.get(i).copied().unwrap_or(0),
                    b.get(i).copied().unwrap_or(0),
                );
            }
            Self::from_words(&out[..n])
        } else {
            let words: Vec<u64> = (0..n)
                .map(|i| {
                    op(
                        a.get(i).copied().unwrap_or(0),
                        b.get(i).copied().unwrap_or(0),
                    )
                })
                .collect();
            Self::from_words(&words)
        }
    }

    /// `self ∪ other`.
    #[must_use]
    pub fn union(&self, other: &Self) -> Self {
        self.zip_words(other, |a, b| a | b)
    }

    /// `self ∩ other`.
    #[must_use]
    pub fn intersection(&self, other: &Self) -> Self {
        self.zip_words(other, |a, b| a & b)
    }

    /// `self − other`.
    #[must_use]
    pub fn difference(&self, other: &Self) -> Self {
        self.zip_words(other, |a, b| a & !b)
    }

    /// Whether every id of `self` is in `other`.
    #[must_use]
    pub fn is_subset(&self, other: &Self) -> bool {
        let b = other.words();
        self.words()
            .iter()
            .enumerate()
            .all(|(i, w)| w & !b.get(i).copied().unwrap_or(0) == 0)
    }

    /// Whether the sets share no id.
    #[must_use]
    pub fn is_disjoint(&self, other: &Self) -> bool {
        self.words()
            .iter()
            .zip(other.words())
            .all(|(a, b)| a & b == 0)
    }

    /// Number of ids in `self ∩ other`, without building the intersection.
    #[must_use]
    pub fn intersection_len(&self, other: &Self) -> usize {
        self.words()
            .iter()
            .zip(other.words())
            .map(|(a, b)| (a & b).count_ones() as usize)
            .sum()
    }

    /// Adds every id of `other` to `self`.
    pub fn union_with(&mut self, other: &Self) {
        *self = self.union(other);
    }

    /// Removes every id of `other` from `self`.
    pub fn difference_with(&mut self, other: &Self) {
        *self = self.difference(other);
    }

    /// Parses a Linux cpulist (`0-3,8,10-11`). Strict: no spaces, no empty
    /// items, no reversed ranges, ids up to [`MAX_CPU_ID`]. The empty string
    /// is the empty set.
    pub fn parse_list(text: &str) -> Result<Self, CpuSetError> {
        let err = |reason: String| CpuSetError::List {
            text: text.to_string(),
            reason,
        };
        let mut set = Self::new();
        if text.is_empty() {
            return Ok(set);
        }
        for item in text.split(',') {
            let (lo, hi) = match item.split_once('-') {
                None => {
                    let id = parse_id(item).map_err(err)?;
                    (id, id)
                }
                Some((lo, hi)) => {
                    let lo = parse_id(lo).map_err(err)?;
                    let hi = parse_id(hi).map_err(err)?;
                    if lo > hi {
                        return Err(err(format!("range {item:?} runs backwards")));
                    }
                    (lo, hi)
                }
            };
            set.insert_range(lo, hi);
        }
        Ok(set)
    }

    /// Parses a Linux hex CPU mask as in sysfs `cpumap` (`00000000,0000ff0f`):
    /// comma-separated groups of 1–8 hex digits, most significant group first.
    /// A trailing newline is not accepted here (trim file contents first).
    pub fn parse_mask(text: &str) -> Result<Self, CpuSetError> {
        let err = |reason: String| CpuSetError::Mask {
            text: text.to_string(),
            reason,
        };
        if text.is_empty() {
            return Err(err("empty mask".to_string()));
        }
        let groups: Vec<&str> = text.split(',').collect();
        let mut set = Self::new();
        for (position, group) in groups.iter().rev().enumerate() {
            if group.is_empty() || group.len() > 8 {
                return Err(err(format!("group {group:?} must have 1 to 8 hex digits")));
            }
            if !group.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err(format!("group {group:?} is not hexadecimal")));
            }
            let value =
                u32::from_str_radix(group, 16).map_err(|e| err(format!("group {group:?}: {e}")))?;
            for bit in 0..32u32 {
                if value & (1 << bit) != 0 {
                    let id = u64::try_from(position).unwrap_or(u64::MAX) * 32 + u64::from(bit);
                    let id = u32::try_from(id)
                        .ok()
                        .filter(|id| *id <= MAX_CPU_ID)
                        .ok_or_else(|| {
                            err(format!("cpu {id} is beyond the maximum {MAX_CPU_ID}"))
                        })?;
                    set.insert(id);
                }
            }
        }
        Ok(set)
    }

    /// The hex mask form: 32-bit groups, most significant first, at least
    /// `min_groups` groups (sysfs pads to the kernel's `nr_cpu_ids`).
    #[must_use]
    pub fn to_mask(&self, min_groups: usize) -> String {
        let top = self.last().map_or(0, |id| id as usize / 32 + 1);
        let groups = top.max(min_groups).max(1);
        let mut parts = Vec::with_capacity(groups);
        for g in (0..groups).rev() {
            let word = self.words().get(g / 2).copied().unwrap_or(0);
            let half = if g % 2 == 0 {
                word & 0xffff_ffff
            } else {
                word >> 32
            };
            parts.push(format!("{half:08x}"));
        }
        parts.join(",")
    }
}

fn parse_id(text: &str) -> Result<u32, String> {
    if text.is_empty() {
        return Err("empty item".to_string());
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a cpu id"));
    }
    match text.parse::<u64>() {
        Ok(id) if id <= u64::from(MAX_CPU_ID) => Ok(u32::try_from(id).unwrap_or(MAX_CPU_ID)),
        _ => Err(format!("cpu id {text} is beyond the maximum {MAX_CPU_ID}")),
    }
}

/// Ascending iterator over the ids of a [`CpuSet`].
pub struct Iter<'a> {
    words: &'a [u64],
    index: usize,
    current: u64,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        loop {
            if self.current != 0 {
                let bit = self.current.trailing_zeros();
                self.current &= self.current - 1;
                let base = u32::try_from(self.index).ok()? * WORD_BITS;
                return Some(base + bit);
            }
            self.index += 1;
            self.current = *self.words.get(self.index)?;
        }
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = u32;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl PartialEq for CpuSet {
    fn eq(&self, other: &Self) -> bool {
        self.words() == other.words()
    }
}

impl Eq for CpuSet {}

impl Hash for CpuSet {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.words().hash(state);
    }
}

impl PartialOrd for CpuSet {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Orders sets by their ascending id sequences (lexicographic).
impl Ord for CpuSet {
    fn cmp(&self, other: &Self) -> Ordering {
        self.iter().cmp(other.iter())
    }
}

/// The Linux cpulist form (`0-3,8-11`; empty set = empty string).
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::new();
        self.write_list(&mut text);
        f.write_str(&text)
    }
}

impl CpuSet {
    /// Appends the set's cpulist (`0-3,8`, as [`fmt::Display`] shows it)
    /// to `out`, digits written directly: the journal, the plugins' state
    /// entries and their answers write many of these, and the formatting
    /// machinery (one call per number, and for serde one escaping pass
    /// per piece) was most of their cost.
    pub fn write_list(&self, out: &mut String) {
        let mut ids = self.iter().peekable();
        let mut first = true;
        while let Some(lo) = ids.next() {
            let mut hi = lo;
            while ids.peek() == Some(&(hi + 1)) {
                hi += 1;
                ids.next();
            }
            if !first {
                out.push(',');
            }
            first = false;
            push_decimal(out, lo);
            if lo != hi {
                out.push('-');
                push_decimal(out, hi);
            }
        }
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut String, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b"0123456789"[usize::try_from(n % 10).unwrap_or(0)];
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl std::str::FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, CpuSetError> {
        Self::parse_list(s)
    }
}

impl FromIterator<u32> for CpuSet {
    /// # Panics
    /// On an id beyond [`MAX_CPU_ID`]; use [`CpuSet::from_ids`] for input.
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut set = Self::new();
        for id in iter {
            set.insert(id);
        }
        set
    }
}

impl BitOr for &CpuSet {
    type Output = CpuSet;
    fn bitor(self, rhs: &CpuSet) -> CpuSet {
        self.union(rhs)
    }
}

impl BitAnd for &CpuSet {
    type Output = CpuSet;
    fn bitand(self, rhs: &CpuSet) -> CpuSet {
        self.intersection(rhs)
    }
}

impl Sub for &CpuSet {
    type Output = CpuSet;
    fn sub(self, rhs: &CpuSet) -> CpuSet {
        self.difference(rhs)
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(16);
        self.write_list(&mut text);
        serializer.serialize_str(&text)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse_list(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
