//! cgroup v2 cpuset partitions on a cgroup path: the writes of
//! [`pinion_core::partition`]'s plans, the kernel's answer read back, and
//! the root's `cpuset.cpus.isolated`.
//!
//! The files are reached through [`PartitionFiles`], so the real cgroupfs
//! ([`super::Cgroups`]) and the agent tests' fake ([`super::fake`]) run the
//! same sequence. A partition the kernel cannot make is never an error of
//! the admission: [`make`] takes back what it wrote and answers
//! [`PartitionOutcome::Fallback`] with the kernel's reason, and the
//! container stays an ordinary cpuset (`member`).

use std::path::{Path, PathBuf};

use pinion_core::partition::{self, PartitionFile, PartitionMode};
use pinion_core::CpuSet;

use super::{CgroupError, CgroupName, ContainerCgroup};

/// The root's list of CPUs in isolated partitions (Linux 6.8).
pub const ISOLATED_FILE: &str = "cpuset.cpus.isolated";
const EXCLUSIVE_EFFECTIVE: &str = "cpuset.cpus.exclusive.effective";

/// Whose cgroup becomes a partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PartitionTarget {
    /// A standalone run's cgroup under Pinion's root.
    Run(CgroupName),
    /// A runtime container's cgroup.
    Container(ContainerCgroup),
}

impl std::fmt::Display for PartitionTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Run(name) => write!(f, "run cgroup {name}"),
            Self::Container(cgroup) => {
                write!(f, "container cgroup {}", cgroup.relative().display())
            }
        }
    }
}

/// What [`make`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionOutcome {
    /// The kernel made the partition: `cpuset.cpus.partition` and
    /// `cpuset.cpus.exclusive.effective` as read back.
    Made {
        partition: String,
        exclusive_effective: CpuSet,
    },
    /// It stays a member; why (the kernel's reason, a refused write, a
    /// missing file, cgroup v1).
    Fallback { reason: String },
}

/// Reads and writes cpuset files of the directories on a partition's path,
/// and Pinion's record on them ([`PartitionFile::Record`]).
pub trait PartitionFiles {
    /// The file's text; `None` when it does not exist (a kernel without it).
    fn read(&self, dir: &Path, file: &str) -> Result<Option<String>, CgroupError>;
    fn write(&mut self, dir: &Path, file: &str, value: &str) -> Result<(), CgroupError>;
    /// The record's text; `None` when the directory has none.
    fn read_record(&self, dir: &Path) -> Result<Option<String>, CgroupError>;
    fn write_record(&mut self, dir: &Path, value: &str) -> Result<(), CgroupError>;
}

/// One write of a plan, to a file or to the record.
fn apply(
    files: &mut dyn PartitionFiles,
    chain: &[PathBuf],
    write: &partition::PartitionWrite,
) -> Result<(), CgroupError> {
    let dir = &chain[write.level];
    match write.file {
        PartitionFile::Record => files.write_record(dir, &write.value),
        file => files.write(dir, file.name(), &write.value),
    }
}

/// Makes the last directory of `chain` (the directories from below the
/// cgroup root down to the container's cgroup, top first) a `mode`
/// partition of `cpus` ([`partition::make_plan`]), and reads the kernel's
/// answer back. Whatever went wrong is taken back and answered as a
/// fallback.
pub fn make(
    files: &mut dyn PartitionFiles,
    chain: &[PathBuf],
    cpus: &CpuSet,
    mode: PartitionMode,
) -> PartitionOutcome {
    let fallback = |reason: String| PartitionOutcome::Fallback { reason };
    if mode == PartitionMode::Member {
        return fallback("the configured mode is member".to_string());
    }
    let Some((leaf, ancestors)) = chain.split_last() else {
        return fallback("the cgroup is the root of the hierarchy".to_string());
    };
    let claims = match exclusive_claims(files, chain) {
        Ok(claims) => claims,
        Err(err) => return fallback(err.to_string()),
    };
    if claims.len() < chain.len() {
        let missing = chain[claims.len()].join(PartitionFile::Exclusive.name());
        return fallback(if claims.is_empty() {
            // The topmost directory: the same reason for every cgroup
            // below it, so it is logged once.
            format!(
                "{} is missing: remote partitions need Linux 6.7 or later",
                missing.display()
            )
        } else {
            format!("{} is missing: the cgroup is gone", missing.display())
        });
    }
    for write in partition::make_plan(&claims[..ancestors.len()], cpus, mode) {
        if let Err(err) = apply(files, chain, &write) {
            return undo(files, chain, cpus, err.to_string());
        }
    }
    let read = files
        .read(leaf, PartitionFile::Partition.name())
        .map(Option::unwrap_or_default);
    let answer = match read {
        Ok(text) => partition::read_back(&text, mode).map(|()| text.trim().to_string()),
        Err(err) => Err(err.to_string()),
    };
    match answer {
        Ok(partition) => {
            let exclusive_effective = files
                .read(leaf, EXCLUSIVE_EFFECTIVE)
                .ok()
                .flatten()
                .and_then(|text| CpuSet::parse_list(text.trim()).ok())
                .unwrap_or_default();
            PartitionOutcome::Made {
                partition,
                exclusive_effective,
            }
        }
        Err(reason) => undo(files, chain, cpus, reason),
    }
}

/// Takes apart a partition of `cpus` at the last directory of `chain`
/// ([`partition::unmake_plan`]): every write is tried; the first error is
/// returned. A kernel without `cpuset.cpus.exclusive` has nothing to undo.
/// When the cgroup (or an ancestor) is gone already — the runtime removed a
/// stopped container's cgroup, which the kernel resets to a member —, the
/// directories still there lose the CPUs Pinion added to their `exclusive`.
/// An ancestor whose `exclusive` write failed keeps its record, so the
/// next try removes the same CPUs.
pub fn unmake(
    files: &mut dyn PartitionFiles,
    chain: &[PathBuf],
    cpus: &CpuSet,
) -> Result<(), CgroupError> {
    let claims = exclusive_claims(files, chain)?;
    if claims.is_empty() {
        return Ok(());
    }
    let there = claims.len();
    let ancestors = &claims[..there.min(chain.len() - 1)];
    let mut first = None;
    let mut refused = Vec::new();
    for write in partition::unmake_plan(ancestors, cpus) {
        if write.level >= there
            || (write.file == PartitionFile::Record && refused.contains(&write.level))
        {
            continue;
        }
        if let Err(err) = apply(files, chain, &write) {
            refused.push(write.level);
            first.get_or_insert(err);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The partition the last directory of `chain` is now, as the kernel reads
/// it: its `cpuset.cpus.partition` (`root`, `isolated`, or either with
/// `invalid (…)`) and the CPUs it claims (`cpuset.cpus.exclusive`, or its
/// `cpuset.cpus` when that is empty). `None` for a member, a cgroup that is
/// gone, or a kernel without partitions. What an agent made before its
/// restart is found this way.
#[must_use]
pub fn current(files: &dyn PartitionFiles, chain: &[PathBuf]) -> Option<(String, CpuSet)> {
    let leaf = chain.last()?;
    let partition = files
        .read(leaf, PartitionFile::Partition.name())
        .ok()??
        .trim()
        .to_string();
    if partition.is_empty() || partition == "member" {
        return None;
    }
    let read_set = |file: &str| {
        files
            .read(leaf, file)
            .ok()
            .flatten()
            .and_then(|text| CpuSet::parse_list(text.trim()).ok())
            .filter(|cpus| !cpus.is_empty())
    };
    let cpus = read_set(PartitionFile::Exclusive.name()).or_else(|| read_set("cpuset.cpus"))?;
    Some((partition, cpus))
}

/// The root's `cpuset.cpus.isolated` (`None`: a kernel before 6.8, or
/// cgroup v1).
#[must_use]
pub fn isolated(files: &dyn PartitionFiles, root: &Path) -> Option<CpuSet> {
    let text = files.read(root, ISOLATED_FILE).ok()??;
    CpuSet::parse_list(text.trim()).ok()
}

/// The root's `cpuset.cpus.isolated` of the cgroup v2 hierarchy at
/// `<sysroot>/sys/fs/cgroup` (what `pinion topology` shows; `None` where
/// the file is missing: cgroup v1, or Linux before 6.8; and where it is no
/// regular file of at most 1 MiB: a FIFO in a captured tree is no hang).
#[must_use]
pub fn root_isolated(sysroot: &Path) -> Option<CpuSet> {
    let path = sysroot.join("sys/fs/cgroup").join(ISOLATED_FILE);
    let text = crate::bounded_read::read_text(&path, crate::bounded_read::MAX_ATTRIBUTE).ok()?;
    CpuSet::parse_list(text.trim()).ok()
}

/// Takes back what a failed [`make`] wrote; `reason` gains what that
/// failed of it.
fn undo(
    files: &mut dyn PartitionFiles,
    chain: &[PathBuf],
    cpus: &CpuSet,
    reason: String,
) -> PartitionOutcome {
    let reason = match unmake(files, chain, cpus) {
        Ok(()) => reason,
        Err(err) => format!("{reason}; taking it back: {err}"),
    };
    PartitionOutcome::Fallback { reason }
}

/// Each directory's claim (its `cpuset.cpus.exclusive`, and Pinion's
/// record of what it added there), top first, down to the first directory
/// without the file (shorter than `chain`: at the top, a kernel before 6.7;
/// further down, a directory that is gone). A record that is no CPU list
/// (damaged by hand) counts as empty: Pinion then removes nothing it cannot
/// tell its own, and the next make writes the record whole again.
fn exclusive_claims(
    files: &dyn PartitionFiles,
    chain: &[PathBuf],
) -> Result<Vec<partition::Claim>, CgroupError> {
    let mut claims = Vec::with_capacity(chain.len());
    for dir in chain {
        let file = PartitionFile::Exclusive.name();
        let Some(text) = files.read(dir, file)? else {
            break;
        };
        let listed = CpuSet::parse_list(text.trim()).map_err(|err| CgroupError::Malformed {
            path: dir.join(file),
            text: text.trim().to_string(),
            reason: err.to_string(),
        })?;
        let added = files
            .read_record(dir)?
            .and_then(|text| CpuSet::parse_list(text.trim()).ok())
            .unwrap_or_default();
        claims.push(partition::Claim { listed, added });
    }
    Ok(claims)
}

#[cfg(test)]
mod tests;
