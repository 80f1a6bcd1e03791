//! Cgroup names: untrusted text (pod UIDs, run ids) made safe to join under
//! Pinion's cgroup root. A valid name is one path component that cannot be
//! `.`/`..`, hidden, or collide with a cgroupfs control file.

use std::fmt;

use super::CgroupError;

/// The longest name accepted (well below `NAME_MAX`, 255 bytes).
pub const MAX_NAME_LEN: usize = 200;

/// A validated cgroup directory name: 1..=[`MAX_NAME_LEN`] bytes of ASCII
/// letters, digits, `-`, `_` and `.`, starting with a letter or digit, and
/// not containing a `.` right after another `.`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupName(String);

impl CgroupName {
    /// Validates `name`; the error says what was wrong.
    pub fn new(name: &str) -> Result<Self, CgroupError> {
        let invalid = |reason: &'static str| CgroupError::InvalidName {
            name: name.chars().take(64).collect(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(invalid("longer than 200 bytes"));
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if !name.chars().all(allowed) {
            return Err(invalid(
                "only ascii letters, digits, '-', '_' and '.' are allowed",
            ));
        }
        if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(invalid("must start with a letter or digit"));
        }
        if name.contains("..") {
            return Err(invalid("must not contain \"..\""));
        }
        if clashes_with_a_control_file(name) {
            return Err(invalid("clashes with a cgroupfs control file"));
        }
        Ok(Self(name.to_string()))
    }

    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Files every cgroup v1 directory holds besides its controllers' own.
const V1_CORE_FILES: [&str; 3] = ["tasks", "notify_on_release", "release_agent"];

/// Controllers whose files (`<controller>.<file>`) sit in a cgroup's
/// directory, on v1 and v2; Pinion writes under `cpuset`, `cpu` and
/// `memory`, and a run named like one of their files cannot be made there.
const CONTROLLERS: [&str; 17] = [
    "cgroup",
    "cpuset",
    "cpu",
    "cpuacct",
    "memory",
    "io",
    "blkio",
    "pids",
    "devices",
    "freezer",
    "net_cls",
    "net_prio",
    "hugetlb",
    "perf_event",
    "rdma",
    "misc",
    "irq",
];

/// Whether a directory named `name` would clash with a control file
/// (`tasks`, `cpu.shares`, `memory.stat`, `cgroup.procs` …).
fn clashes_with_a_control_file(name: &str) -> bool {
    if V1_CORE_FILES.contains(&name) {
        return true;
    }
    name.split_once('.')
        .is_some_and(|(prefix, _)| CONTROLLERS.contains(&prefix))
}

impl fmt::Display for CgroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_uids_and_run_ids() {
        for good in [
            "pinion-run-12-34",
            "0b7c3a9e-1d2f-4c5b-9a8e-7f6d5c4b3a21",
            "a",
            "x.y_z",
        ] {
            assert_eq!(CgroupName::new(good).expect(good).as_str(), good);
        }
    }

    #[test]
    fn refuses_names_that_could_escape_or_clash() {
        let long = "a".repeat(MAX_NAME_LEN + 1);
        let cases = [
            ("", "empty"),
            (".", "must start with a letter or digit"),
            ("..", "must start with a letter or digit"),
            ("a..b", "must not contain \"..\""),
            (
                "../etc",
                "only ascii letters, digits, '-', '_' and '.' are allowed",
            ),
            (
                "a/b",
                "only ascii letters, digits, '-', '_' and '.' are allowed",
            ),
            (
                "/abs",
                "only ascii letters, digits, '-', '_' and '.' are allowed",
            ),
            (
                "a\0b",
                "only ascii letters, digits, '-', '_' and '.' are allowed",
            ),
            (
                "a b",
                "only ascii letters, digits, '-', '_' and '.' are allowed",
            ),
            (
                "é",
                "only ascii letters, digits, '-', '_' and '.' are allowed",
            ),
            (".hidden", "must start with a letter or digit"),
            ("-flag", "must start with a letter or digit"),
            ("cgroup.procs", "clashes with a cgroupfs control file"),
            ("cpuset.cpus", "clashes with a cgroupfs control file"),
            (long.as_str(), "longer than 200 bytes"),
        ];
        for (name, want) in cases {
            match CgroupName::new(name) {
                Err(CgroupError::InvalidName { reason, .. }) => {
                    assert_eq!(reason, want, "name {name:?}");
                }
                other => panic!("name {name:?}: expected InvalidName, got {other:?}"),
            }
        }
    }

    /// Found from outside (thirty-third session): run ids named like a
    /// cgroup v1 file (`tasks`, `cpu.shares`, `memory.stat`) were accepted.
    /// An exclusive run got a 500 ("File exists") that blamed the agent; a
    /// shared one could never have its directory removed, and every
    /// reconcile pass logged the stray cgroup again.
    #[test]
    fn regression_names_of_every_controllers_files_are_refused() {
        for name in [
            "tasks",
            "notify_on_release",
            "release_agent",
            "cpu.shares",
            "cpu.idle",
            "cpuacct.usage",
            "memory.stat",
            "io.max",
            "pids.max",
        ] {
            assert!(
                matches!(
                    CgroupName::new(name),
                    Err(CgroupError::InvalidName {
                        reason: "clashes with a cgroupfs control file",
                        ..
                    })
                ),
                "{name}"
            );
        }
        for fine in ["tasks-1", "cpu-heavy.1", "cpux.y", "memo.ry"] {
            assert!(CgroupName::new(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn longest_allowed_name_is_accepted() {
        let name = "b".repeat(MAX_NAME_LEN);
        assert!(CgroupName::new(&name).is_ok());
    }
}
