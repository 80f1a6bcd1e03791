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
        if name.starts_with("cgroup.") || name.starts_with("cpuset.") {
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

    #[test]
    fn longest_allowed_name_is_accepted() {
        let name = "b".repeat(MAX_NAME_LEN);
        assert!(CgroupName::new(&name).is_ok());
    }
}
