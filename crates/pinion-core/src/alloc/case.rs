//! The allocation-case format of the conformance corpus
//! (`../shared/conformance/kubelet/*.json`, `"kind": "take"`), as read by
//! `pinion alloc` and the conformance tests: `topology`, `available`,
//! `request`, `options` (name → string) and an optional `algorithm` /
//! `cpu_group_size` that pin the algorithm.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Algorithm, AllocOptions, CpuSortingStrategy};
use crate::cpuset::{CpuSet, CpuSetError};
use crate::topology::{Topology, TopologySpec};

/// Errors in an allocation case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaseError {
    #[error("field `available`: {0}")]
    Available(#[from] CpuSetError),
    #[error("field `options`: unknown option {name:?} (known: {known})")]
    UnknownOption { name: String, known: String },
    #[error("field `options`: option {name:?} has value {value:?}, expected a boolean (true/false/1/0/t/f)")]
    BadOptionValue { name: String, value: String },
    #[error("field `algorithm`: unknown algorithm {0:?} (expected packed, uncore, distribute-cores or distribute-numa)")]
    UnknownAlgorithm(String),
    #[error("field `cpu_group_size`: must be at least 1")]
    ZeroGroupSize,
    #[error("field `kind`: {0:?} is not an allocation case (expected \"take\")")]
    NotTake(String),
}

/// One allocation case. Unknown keys (`expect`, `source`, …) are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct TakeCase {
    #[serde(default)]
    pub name: String,
    /// `"take"` for allocation cases; other kinds are refused by [`TakeCase::check_kind`].
    #[serde(default)]
    pub kind: Option<String>,
    pub topology: TopologySpec,
    /// Linux cpulist of the free CPUs.
    pub available: String,
    pub request: usize,
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    #[serde(default)]
    pub algorithm: Option<String>,
    #[serde(default)]
    pub cpu_group_size: Option<usize>,
}

/// Option names `pinion alloc` accepts; the ones that do not change the
/// allocation (`strict-cpu-reservation`) are accepted and ignored.
pub const OPTION_NAMES: [&str; 6] = [
    "full-pcpus-only",
    "distribute-cpus-across-numa",
    "distribute-cpus-across-cores",
    "prefer-align-cpus-by-uncorecache",
    "align-by-socket",
    "strict-cpu-reservation",
];

/// Go's `strconv.ParseBool` literals (what kubelet accepts).
fn parse_bool(name: &str, value: &str) -> Result<bool, CaseError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(CaseError::BadOptionValue {
            name: name.to_owned(),
            value: value.to_owned(),
        }),
    }
}

impl AllocOptions {
    /// Reads the allocation options from kubelet-style `name → value` pairs.
    pub fn from_named<'a, I>(pairs: I) -> Result<AllocOptions, CaseError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut options = AllocOptions::default();
        for (name, value) in pairs {
            let on = if OPTION_NAMES.contains(&name) {
                parse_bool(name, value)?
            } else {
                return Err(CaseError::UnknownOption {
                    name: name.to_owned(),
                    known: OPTION_NAMES.join(", "),
                });
            };
            match name {
                "full-pcpus-only" => options.full_pcpus_only = on,
                "distribute-cpus-across-numa" => options.distribute_cpus_across_numa = on,
                "distribute-cpus-across-cores" => options.distribute_cpus_across_cores = on,
                "prefer-align-cpus-by-uncorecache" => options.prefer_align_cpus_by_uncorecache = on,
                "align-by-socket" => options.align_by_socket = on,
                _ => {}
            }
        }
        Ok(options)
    }
}

impl TakeCase {
    /// Refuses cases whose `kind` is present and not `take`.
    pub fn check_kind(&self) -> Result<(), CaseError> {
        match self.kind.as_deref() {
            None | Some("take") => Ok(()),
            Some(other) => Err(CaseError::NotTake(other.to_owned())),
        }
    }

    /// The free CPUs.
    pub fn available(&self) -> Result<CpuSet, CaseError> {
        Ok(CpuSet::parse_list(&self.available)?)
    }

    /// The options of the case.
    pub fn alloc_options(&self) -> Result<AllocOptions, CaseError> {
        AllocOptions::from_named(self.options.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// The algorithm: pinned by `algorithm` (and `cpu_group_size`) as the
    /// corpus does, else [`Algorithm::select`] from the options.
    pub fn algorithm(&self, topology: &Topology) -> Result<Algorithm, CaseError> {
        let options = self.alloc_options()?;
        let Some(name) = self.algorithm.as_deref() else {
            return Ok(Algorithm::select(&options, topology));
        };
        let packed = |strategy, prefer_uncore| Algorithm::Packed {
            strategy,
            prefer_uncore,
        };
        match name {
            "packed" => Ok(packed(CpuSortingStrategy::Packed, false)),
            "uncore" => Ok(packed(CpuSortingStrategy::Packed, true)),
            "distribute-cores" => Ok(packed(CpuSortingStrategy::Spread, false)),
            "distribute-numa" => {
                let group_size = match self.cpu_group_size {
                    Some(0) => return Err(CaseError::ZeroGroupSize),
                    Some(g) => g,
                    None if options.full_pcpus_only => topology.cpus_per_core().max(1),
                    None => 1,
                };
                let strategy = if options.distribute_cpus_across_cores {
                    CpuSortingStrategy::Spread
                } else {
                    CpuSortingStrategy::Packed
                };
                Ok(Algorithm::Distributed {
                    group_size,
                    strategy,
                    align_by_socket: options.align_by_socket,
                })
            }
            other => Err(CaseError::UnknownAlgorithm(other.to_owned())),
        }
    }
}
