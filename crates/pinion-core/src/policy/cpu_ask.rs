//! What a container asks of its exclusive CPUs beyond kubelet's count
//! (Pinion's own, issue 31): CPUs the kernel isolates at boot (`isolcpus=`)
//! and whole uncore (L3) caches that no other container shares.
//!
//! Both come from pod annotations (every exclusive container of the pod):
//!
//! | annotation | values |
//! |---|---|
//! | [`ISOLATED_CPUS`] `pinion.io/isolated-cpus` | `require` (only isolated CPUs; refused when too few are free), `prefer` (isolated CPUs first, the rest ordinary) |
//! | [`UNCORE`] `pinion.io/uncore` | `exclusive` (whole uncore caches) |
//! | [`UNCORE_ROUND_UP`] `pinion.io/uncore-round-up` | `"true"`: round an unaligned request up to whole caches (`"false"`, the default: refuse it) |
//!
//! A pod without them asks nothing more than kubelet's count; its
//! exclusive CPUs never include boot-isolated CPUs.

use std::collections::BTreeMap;
use std::fmt;

use crate::cpuset::CpuSet;

/// `pinion.io/isolated-cpus`: `require` | `prefer`.
pub const ISOLATED_CPUS: &str = "pinion.io/isolated-cpus";
/// `pinion.io/uncore`: `exclusive`.
pub const UNCORE: &str = "pinion.io/uncore";
/// `pinion.io/uncore-round-up`: `"true"` | `"false"`.
pub const UNCORE_ROUND_UP: &str = "pinion.io/uncore-round-up";

/// Whether the container asks for boot-isolated CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum IsolatedAsk {
    /// Ordinary CPUs only (never a boot-isolated one).
    #[default]
    No,
    /// Isolated CPUs first; ordinary CPUs for what they cannot cover.
    Prefer,
    /// Isolated CPUs only; refused when too few are free.
    Require,
}

impl IsolatedAsk {
    /// The CPUs of `free` a container with this ask may get exclusively,
    /// given the boot-isolated CPUs `isolated`: only isolated ones
    /// (`require`), all of them (`prefer`), or only ordinary ones (no ask).
    #[must_use]
    pub fn candidates(self, free: &CpuSet, isolated: &CpuSet) -> CpuSet {
        match self {
            Self::Require => free.intersection(isolated),
            Self::Prefer => free.clone(),
            Self::No => free.difference(isolated),
        }
    }

    /// The annotation / flag value (`require`, `prefer`; `no` for none).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::No => "no",
            Self::Prefer => "prefer",
            Self::Require => "require",
        }
    }
}

/// Whether the container asks for whole uncore caches of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum UncoreAsk {
    /// Any CPUs (kubelet's rules).
    #[default]
    Any,
    /// Whole uncore caches; with `round_up` an unaligned count is rounded
    /// up to whole caches (the container then gets more CPUs than asked),
    /// without it such a request is refused.
    Exclusive { round_up: bool },
}

/// A container's ask beyond its CPU count. `Default` asks nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CpuAsk {
    pub isolated: IsolatedAsk,
    pub uncore: UncoreAsk,
}

/// A bad value of one of the annotations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: value {value:?} is not one of {expected}")]
pub struct CpuAskError {
    pub annotation: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl CpuAsk {
    /// True when the container asks nothing beyond kubelet's count.
    #[must_use]
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }

    /// The ask the pod's annotations carry; an unknown value is an error
    /// naming the annotation and the value. `pinion.io/uncore-round-up`
    /// without `pinion.io/uncore: exclusive` is accepted and means nothing.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Result<Self, CpuAskError> {
        let isolated = match annotations.get(ISOLATED_CPUS).map(|v| v.trim()) {
            None => IsolatedAsk::No,
            Some("require") => IsolatedAsk::Require,
            Some("prefer") => IsolatedAsk::Prefer,
            Some(other) => return Err(bad(ISOLATED_CPUS, other, "require, prefer")),
        };
        let round_up = match annotations.get(UNCORE_ROUND_UP).map(|v| v.trim()) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(bad(UNCORE_ROUND_UP, other, "\"true\", \"false\"")),
        };
        let uncore = match annotations.get(UNCORE).map(|v| v.trim()) {
            None => UncoreAsk::Any,
            Some("exclusive") => UncoreAsk::Exclusive { round_up },
            Some(other) => return Err(bad(UNCORE, other, "exclusive")),
        };
        Ok(Self { isolated, uncore })
    }
}

fn bad(annotation: &'static str, value: &str, expected: &'static str) -> CpuAskError {
    CpuAskError {
        annotation,
        value: value.to_owned(),
        expected,
    }
}

impl fmt::Display for CpuAsk {
    /// `isolated=require, uncore=exclusive(round-up)`; `-` for a plain ask.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.isolated != IsolatedAsk::No {
            parts.push(format!("isolated={}", self.isolated.name()));
        }
        match self.uncore {
            UncoreAsk::Any => {}
            UncoreAsk::Exclusive { round_up: false } => parts.push("uncore=exclusive".to_owned()),
            UncoreAsk::Exclusive { round_up: true } => {
                parts.push("uncore=exclusive(round-up)".to_owned());
            }
        }
        if parts.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(pairs: &[(&str, &str)]) -> Result<CpuAsk, CpuAskError> {
        let map = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        CpuAsk::from_annotations(&map)
    }

    #[test]
    fn no_annotation_asks_nothing() {
        assert!(ask(&[]).unwrap().is_plain());
        assert!(ask(&[("other.io/x", "require")]).unwrap().is_plain());
        assert!(ask(&[(UNCORE_ROUND_UP, "true")]).unwrap().is_plain());
    }

    #[test]
    fn values_parse() {
        let cases = [
            (
                vec![(ISOLATED_CPUS, "require")],
                IsolatedAsk::Require,
                UncoreAsk::Any,
            ),
            (
                vec![(ISOLATED_CPUS, "prefer")],
                IsolatedAsk::Prefer,
                UncoreAsk::Any,
            ),
            (
                vec![(UNCORE, "exclusive")],
                IsolatedAsk::No,
                UncoreAsk::Exclusive { round_up: false },
            ),
            (
                vec![(UNCORE, "exclusive"), (UNCORE_ROUND_UP, "true")],
                IsolatedAsk::No,
                UncoreAsk::Exclusive { round_up: true },
            ),
        ];
        for (pairs, isolated, uncore) in cases {
            assert_eq!(ask(&pairs), Ok(CpuAsk { isolated, uncore }), "{pairs:?}");
        }
    }

    #[test]
    fn bad_values_name_the_annotation_and_the_value() {
        let err = ask(&[(ISOLATED_CPUS, "always")]).unwrap_err();
        assert_eq!(err.annotation, ISOLATED_CPUS);
        assert_eq!(err.value, "always");
        assert!(err.to_string().contains("\"always\""), "{err}");
        assert_eq!(ask(&[(UNCORE, "shared")]).unwrap_err().annotation, UNCORE);
        assert_eq!(
            ask(&[(UNCORE, "exclusive"), (UNCORE_ROUND_UP, "yes")])
                .unwrap_err()
                .annotation,
            UNCORE_ROUND_UP
        );
    }

    #[test]
    fn display_names_what_is_asked() {
        assert_eq!(CpuAsk::default().to_string(), "-");
        let both = ask(&[
            (ISOLATED_CPUS, "prefer"),
            (UNCORE, "exclusive"),
            (UNCORE_ROUND_UP, "true"),
        ])
        .unwrap();
        assert_eq!(
            both.to_string(),
            "isolated=prefer, uncore=exclusive(round-up)"
        );
    }
}
