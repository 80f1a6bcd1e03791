//! Helpers for tests: this crate's own, and other crates' with the
//! `testing` feature (`pinion-core = { …, features = ["testing"] }` under
//! `[dev-dependencies]`), so tests build sets one way instead of each file
//! writing its own.

use crate::CpuSet;

/// The set of a cpulist literal (`"0-3,8"`, `""` for none). Panics, naming
/// the text and the calling test, when the literal is malformed.
#[track_caller]
#[must_use]
pub fn cpus(list: &str) -> CpuSet {
    match CpuSet::parse_list(list) {
        Ok(set) => set,
        Err(err) => panic!("test cpulist {list:?}: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_become_sets() {
        assert_eq!(cpus("0-2,8"), CpuSet::from_iter([0, 1, 2, 8]));
        assert!(cpus("").is_empty());
    }

    #[test]
    #[should_panic(expected = "test cpulist \"0-\"")]
    fn malformed_literals_name_themselves() {
        let _ = cpus("0-");
    }
}
