//! cgroup v2 cpuset partitions for exclusive CPUs: which files to write,
//! in which order, to make a container's cgroup a *remote* partition (one
//! whose parent need not be a partition root, Linux 6.7) and to take it
//! apart again; and how to read the kernel's answer back.
//!
//! A remote partition needs its CPUs listed in `cpuset.cpus.exclusive` of
//! every ancestor between the cgroup root and the container's cgroup, the
//! ancestors' before the child's; the child's `cpuset.cpus` is set before
//! its `exclusive`, and the partition file last. Taking it apart goes the
//! other way: `member` first, then the `exclusive` files emptied child
//! first. A partition write succeeds even when the kernel cannot make the
//! partition: the file then reads `isolated invalid (<reason>)`, so the
//! answer is read back ([`read_back`]). Facts and sources:
//! `../shared/spec/isolation.md` §1.
//!
//! An ancestor's `cpuset.cpus.exclusive` is not Pinion's alone: an
//! administrator (or another tool) may list CPUs there before Pinion comes,
//! so that partitions below can use them. Taking a partition apart removes
//! only the CPUs Pinion added, which it records beside the claim, on the
//! same directory ([`Claim::added`], the extended attribute
//! [`PartitionFile::Record`]): the record lives and dies with the cgroup,
//! survives the agent's restart, and needs no journal.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

/// What an exclusive container's cgroup becomes (config
/// `exclusiveCpus.partition`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionMode {
    /// An ordinary cpuset (what every peer does).
    #[default]
    Member,
    /// A partition root: its own scheduling domain.
    Root,
    /// An isolated partition: no scheduling domain, no load balancing.
    Isolated,
}

impl PartitionMode {
    /// The value written to `cpuset.cpus.partition`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Member => "member",
            Self::Root => "root",
            Self::Isolated => "isolated",
        }
    }
}

impl fmt::Display for PartitionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A partition mode that is not one of `member`, `root`, `isolated`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown partition mode {0:?}: expected member, root or isolated")]
pub struct PartitionModeError(pub String);

impl FromStr for PartitionMode {
    type Err = PartitionModeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "member" => Ok(Self::Member),
            "root" => Ok(Self::Root),
            "isolated" => Ok(Self::Isolated),
            other => Err(PartitionModeError(other.to_string())),
        }
    }
}

/// A cpuset file a partition plan writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionFile {
    Cpus,
    Exclusive,
    Partition,
    /// Not a file: Pinion's record, on an ancestor, of the CPUs it added to
    /// that ancestor's `cpuset.cpus.exclusive` (an extended attribute of
    /// the directory, a CPU list; cgroup v2 keeps `user.` attributes since
    /// Linux 5.7).
    Record,
}

impl PartitionFile {
    /// The file's name in a cgroup directory (the attribute's name for
    /// [`PartitionFile::Record`]).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpus => "cpuset.cpus",
            Self::Exclusive => "cpuset.cpus.exclusive",
            Self::Partition => "cpuset.cpus.partition",
            Self::Record => "user.pinion.exclusive",
        }
    }
}

/// An ancestor's claim, as read before a plan: what its
/// `cpuset.cpus.exclusive` lists, and what of that Pinion added (its
/// record; what else is listed is someone else's and stays).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claim {
    pub listed: CpuSet,
    pub added: CpuSet,
}

/// One write of a plan: `value` into `file` of level `level` of the
/// cgroup path (0 = the topmost directory below the cgroup root; the last
/// level is the container's cgroup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionWrite {
    pub level: usize,
    pub file: PartitionFile,
    pub value: String,
}

/// What an emptied `cpuset.cpus.exclusive` is written as: a bare empty
/// write does not reach the kernel's handler (CRI-O writes a newline too).
pub const EMPTY: &str = "\n";

fn cpus_value(cpus: &CpuSet) -> String {
    if cpus.is_empty() {
        EMPTY.to_string()
    } else {
        cpus.to_string()
    }
}

/// The writes that make the last level of a path a `mode` partition of
/// `cpus`, given each ancestor's claim (`ancestors[0]` the topmost; the
/// container's cgroup is level `ancestors.len()`). An ancestor that does
/// not list all the CPUs gets them, its record first: a crash between the
/// two leaves a record of CPUs not listed, which the take-down passes over,
/// never a claim Pinion cannot tell its own. Ancestors already listing the
/// CPUs are not written. `Member` needs no writes.
#[must_use]
pub fn make_plan(ancestors: &[Claim], cpus: &CpuSet, mode: PartitionMode) -> Vec<PartitionWrite> {
    if mode == PartitionMode::Member || cpus.is_empty() {
        return Vec::new();
    }
    let mut plan = Vec::new();
    for (level, claim) in ancestors.iter().enumerate() {
        if cpus.is_subset(&claim.listed) {
            continue;
        }
        plan.push(PartitionWrite {
            level,
            file: PartitionFile::Record,
            value: claim
                .added
                .union(&cpus.difference(&claim.listed))
                .to_string(),
        });
        plan.push(PartitionWrite {
            level,
            file: PartitionFile::Exclusive,
            value: claim.listed.union(cpus).to_string(),
        });
    }
    let leaf = ancestors.len();
    for (file, value) in [
        (PartitionFile::Cpus, cpus.to_string()),
        (PartitionFile::Exclusive, cpus.to_string()),
        (PartitionFile::Partition, mode.as_str().to_string()),
    ] {
        plan.push(PartitionWrite {
            level: leaf,
            file,
            value,
        });
    }
    plan
}

/// The writes that take apart a partition of `cpus` at the last level of a
/// path: `member`, then the container's `exclusive` emptied, then, bottom-up,
/// each ancestor's `exclusive` without the CPUs Pinion added there, and its
/// record without them after (`ancestors` as in [`make_plan`]). CPUs an
/// ancestor listed before Pinion stay listed; an ancestor Pinion added none
/// of them to is not written.
#[must_use]
pub fn unmake_plan(ancestors: &[Claim], cpus: &CpuSet) -> Vec<PartitionWrite> {
    let leaf = ancestors.len();
    let mut plan = vec![
        PartitionWrite {
            level: leaf,
            file: PartitionFile::Partition,
            value: PartitionMode::Member.as_str().to_string(),
        },
        PartitionWrite {
            level: leaf,
            file: PartitionFile::Exclusive,
            value: EMPTY.to_string(),
        },
    ];
    for (level, claim) in ancestors.iter().enumerate().rev() {
        let ours = claim.added.intersection(cpus);
        if ours.is_empty() {
            continue;
        }
        if claim.listed.intersection_len(&ours) > 0 {
            plan.push(PartitionWrite {
                level,
                file: PartitionFile::Exclusive,
                value: cpus_value(&claim.listed.difference(&ours)),
            });
        }
        plan.push(PartitionWrite {
            level,
            file: PartitionFile::Record,
            value: claim.added.difference(&ours).to_string(),
        });
    }
    plan
}

/// What `cpuset.cpus.partition` read back after a `mode` write means:
/// `Ok` when the kernel made it, the kernel's reason otherwise
/// (`isolated invalid (Parent is not a partition root)` →
/// `Parent is not a partition root`).
pub fn read_back(text: &str, mode: PartitionMode) -> Result<(), String> {
    let text = text.trim();
    if text == mode.as_str() {
        return Ok(());
    }
    if let Some(rest) = text.strip_prefix(mode.as_str()) {
        let rest = rest.trim();
        if let Some(reason) = rest
            .strip_prefix("invalid")
            .map(str::trim)
            .and_then(|r| r.strip_prefix('('))
            .and_then(|r| r.strip_suffix(')'))
        {
            return Err(reason.to_string());
        }
        if rest == "invalid" {
            return Err("the kernel gave no reason".to_string());
        }
    }
    Err(format!(
        "cpuset.cpus.partition reads {text:?} after writing {:?}",
        mode.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> CpuSet {
        CpuSet::parse_list(text).unwrap()
    }

    fn writes(plan: &[PartitionWrite]) -> Vec<(usize, &'static str, &str)> {
        plan.iter()
            .map(|w| (w.level, w.file.name(), w.value.as_str()))
            .collect()
    }

    #[test]
    fn mode_parses_its_three_values_and_names_a_bad_one() {
        for mode in [
            PartitionMode::Member,
            PartitionMode::Root,
            PartitionMode::Isolated,
        ] {
            assert_eq!(mode.as_str().parse::<PartitionMode>(), Ok(mode));
        }
        let err = "isolate".parse::<PartitionMode>().unwrap_err();
        assert_eq!(err, PartitionModeError("isolate".to_string()));
        assert!(err.to_string().contains("\"isolate\""));
    }

    /// An ancestor listing `listed`, of which Pinion added `added`.
    fn claim(listed: &str, added: &str) -> Claim {
        Claim {
            listed: set(listed),
            added: set(added),
        }
    }

    #[test]
    fn make_claims_ancestors_top_down_record_first_then_cpus_exclusive_partition_of_the_child() {
        let plan = make_plan(
            &[claim("", ""), claim("6", "6")],
            &set("2-3"),
            PartitionMode::Isolated,
        );
        assert_eq!(
            writes(&plan),
            vec![
                (0, "user.pinion.exclusive", "2-3"),
                (0, "cpuset.cpus.exclusive", "2-3"),
                (1, "user.pinion.exclusive", "2-3,6"),
                (1, "cpuset.cpus.exclusive", "2-3,6"),
                (2, "cpuset.cpus", "2-3"),
                (2, "cpuset.cpus.exclusive", "2-3"),
                (2, "cpuset.cpus.partition", "isolated"),
            ]
        );
    }

    #[test]
    fn make_skips_ancestors_that_list_the_cpus_already_and_records_only_what_it_adds() {
        let plan = make_plan(
            &[claim("0-7", ""), claim("1-2", "")],
            &set("2-3"),
            PartitionMode::Root,
        );
        assert_eq!(
            writes(&plan),
            vec![
                (1, "user.pinion.exclusive", "3"),
                (1, "cpuset.cpus.exclusive", "1-3"),
                (2, "cpuset.cpus", "2-3"),
                (2, "cpuset.cpus.exclusive", "2-3"),
                (2, "cpuset.cpus.partition", "root"),
            ]
        );
    }

    #[test]
    fn member_and_empty_sets_need_no_writes() {
        assert!(make_plan(&[claim("", "")], &set("2"), PartitionMode::Member).is_empty());
        assert!(make_plan(&[claim("", "")], &set(""), PartitionMode::Isolated).is_empty());
    }

    #[test]
    fn unmake_writes_member_first_then_empties_exclusive_child_first_then_the_records() {
        let plan = unmake_plan(&[claim("2-3", "2-3"), claim("2-3,6", "2-3,6")], &set("2-3"));
        assert_eq!(
            writes(&plan),
            vec![
                (2, "cpuset.cpus.partition", "member"),
                (2, "cpuset.cpus.exclusive", "\n"),
                (1, "cpuset.cpus.exclusive", "6"),
                (1, "user.pinion.exclusive", "6"),
                (0, "cpuset.cpus.exclusive", "\n"),
                (0, "user.pinion.exclusive", ""),
            ]
        );
    }

    #[test]
    fn unmake_leaves_ancestors_without_the_cpus_alone() {
        let plan = unmake_plan(&[claim("4-5", "4-5")], &set("2-3"));
        assert_eq!(
            writes(&plan),
            vec![
                (1, "cpuset.cpus.partition", "member"),
                (1, "cpuset.cpus.exclusive", "\n"),
            ]
        );
    }

    /// Found from outside (sessions 47–49's notes): the take-down removed
    /// the partition's CPUs from every ancestor's `cpuset.cpus.exclusive`,
    /// also where an administrator had listed them before Pinion came
    /// (Pinion's make had skipped that ancestor). Now an ancestor loses
    /// only what Pinion's record says it added.
    #[test]
    fn regression_take_down_keeps_the_cpus_an_ancestor_listed_before_pinion() {
        let before = [claim("1-7", ""), claim("6", "")];
        let cpus = set("2-3");
        let mut after = before.to_vec();
        let apply = |after: &mut Vec<Claim>, plan: Vec<PartitionWrite>| {
            for w in plan {
                let Some(claim) = after.get_mut(w.level) else {
                    continue;
                };
                match w.file {
                    PartitionFile::Exclusive => claim.listed = set(w.value.trim()),
                    PartitionFile::Record => claim.added = set(&w.value),
                    _ => {}
                }
            }
        };
        apply(
            &mut after,
            make_plan(&before, &cpus, PartitionMode::Isolated),
        );
        assert_eq!(after, [claim("1-7", ""), claim("2-3,6", "2-3")]);
        let plan = unmake_plan(&after, &cpus);
        apply(&mut after, plan);
        assert_eq!(after, before);
    }

    /// A record of CPUs the ancestor no longer lists (the exclusive write
    /// of a make never happened, or someone removed them since): the
    /// record is cleared, the `exclusive` file not written.
    #[test]
    fn unmake_clears_a_record_of_cpus_no_longer_listed_without_writing_the_claim() {
        let plan = unmake_plan(&[claim("6", "2-3,6")], &set("2-3"));
        assert_eq!(
            writes(&plan),
            vec![
                (1, "cpuset.cpus.partition", "member"),
                (1, "cpuset.cpus.exclusive", "\n"),
                (0, "user.pinion.exclusive", "6"),
            ]
        );
    }

    #[test]
    fn read_back_takes_the_mode_and_returns_the_kernels_reason() {
        assert_eq!(read_back("isolated\n", PartitionMode::Isolated), Ok(()));
        assert_eq!(read_back("root", PartitionMode::Root), Ok(()));
        assert_eq!(
            read_back(
                "isolated invalid (Parent is not a partition root)\n",
                PartitionMode::Isolated
            ),
            Err("Parent is not a partition root".to_string())
        );
        assert_eq!(
            read_back("root invalid", PartitionMode::Root),
            Err("the kernel gave no reason".to_string())
        );
        let err = read_back("member", PartitionMode::Isolated).unwrap_err();
        assert!(err.contains("\"member\""), "{err}");
    }
}
