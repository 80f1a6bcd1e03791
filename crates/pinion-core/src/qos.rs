//! katalyst's QoS annotations (spec `qrm.md` §7) read into a typed request.
//!
//! A pod says how it wants to run with the annotation
//! `katalyst.kubewharf.io/qos_level` (absent → `shared_cores`; any value
//! other than the four levels is an error naming it) and three JSON objects
//! of string → string: `cpu_enhancement`, `memory_enhancement` and
//! `network_enhancement`. A malformed object counts as empty and is reported
//! as a [`QosWarning`] (katalyst logs it and carries on). On top of those:
//! `numa_ids` (a NUMA id list in cpulist syntax, which wins over
//! `numa_number`), `numa_number`, the pod role label, the pod type
//! annotation and `kubernetes.io/main-container-name`. The QRM proposal's
//! own annotations (`kubernetes.io/pod-role`, `kubernetes.io/resource-type`)
//! are read through the one role table of [`vocabulary`].
//!
//! [`parse`] is pure and total: every input gives a request or a
//! [`QosError`], never a panic.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

pub mod vocabulary;

pub use vocabulary::VocabularyError;

/// The prefix of katalyst's annotation and label keys.
pub const KATALYST_KEY_PREFIX: &str = "katalyst.kubewharf.io/";
/// The QoS level annotation (also a label in katalyst).
pub const QOS_LEVEL_KEY: &str = "katalyst.kubewharf.io/qos_level";
/// CPU enhancements (JSON object).
pub const CPU_ENHANCEMENT_KEY: &str = "katalyst.kubewharf.io/cpu_enhancement";
/// Memory enhancements (JSON object).
pub const MEMORY_ENHANCEMENT_KEY: &str = "katalyst.kubewharf.io/memory_enhancement";
/// Network enhancements (JSON object).
pub const NETWORK_ENHANCEMENT_KEY: &str = "katalyst.kubewharf.io/network_enhancement";
/// The NUMA ids a pod may use (`0-1,3`); wins over [`NUMA_NUMBER_KEY`].
pub const NUMA_IDS_KEY: &str = "katalyst.kubewharf.io/numa_ids";
/// How many NUMA nodes a pod's hints must span.
pub const NUMA_NUMBER_KEY: &str = "katalyst.kubewharf.io/numa_number";
/// The older top-level form of `numa_binding` (constants.go).
pub const NUMA_BINDING_KEY: &str = "katalyst.kubewharf.io/numa_binding";
/// The pod role (a pod **label**).
pub const POD_ROLE_LABEL: &str = "katalyst.kubewharf.io/pod_role";
/// The pod type (an annotation).
pub const POD_TYPE_KEY: &str = "katalyst.kubewharf.io/pod_type";
/// Whether `key` is one of katalyst's annotation or label keys.
#[must_use]
pub fn is_katalyst_key(key: &str) -> bool {
    key.starts_with(KATALYST_KEY_PREFIX)
}

/// The main container of a pod (others are sidecars).
pub const MAIN_CONTAINER_KEY: &str = "kubernetes.io/main-container-name";

/// Keys inside the enhancement objects.
pub mod keys {
    /// `memory_enhancement`: bind to the hinted NUMA node(s).
    pub const NUMA_BINDING: &str = "numa_binding";
    /// `memory_enhancement`: the bound NUMA node(s) hold this pod alone.
    pub const NUMA_EXCLUSIVE: &str = "numa_exclusive";
    /// `cpu_enhancement`: the named shared pool.
    pub const CPUSET_POOL: &str = "cpuset_pool";
    /// `network_enhancement`: `host_ns`, `anti_host_ns`, … (see [`super::NamespaceType`]).
    pub const NAMESPACE_TYPE: &str = "namespace_type";
}

/// The shared pool a `shared_cores` pod runs in without `cpuset_pool`.
pub const DEFAULT_SHARED_POOL: &str = "share";

/// katalyst's four QoS levels.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum QosLevel {
    /// Exclusive CPUs.
    DedicatedCores,
    /// A named shared pool.
    #[default]
    SharedCores,
    /// What the shared pools leave (best effort, overselling).
    ReclaimedCores,
    /// The reserved (system) CPUs.
    SystemCores,
}

impl QosLevel {
    /// The four levels, in katalyst's order.
    pub const ALL: [Self; 4] = [
        Self::DedicatedCores,
        Self::SharedCores,
        Self::ReclaimedCores,
        Self::SystemCores,
    ];

    /// The four annotation values, comma-separated (for messages).
    #[must_use]
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|level| level.as_str()).collect();
        names.join(", ")
    }

    /// The annotation value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DedicatedCores => "dedicated_cores",
            Self::SharedCores => "shared_cores",
            Self::ReclaimedCores => "reclaimed_cores",
            Self::SystemCores => "system_cores",
        }
    }
}

impl fmt::Display for QosLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for QosLevel {
    type Err = QosError;
    fn from_str(value: &str) -> Result<Self, QosError> {
        Self::ALL
            .into_iter()
            .find(|level| level.as_str() == value)
            .ok_or_else(|| QosError::InvalidLevel {
                value: value.to_string(),
            })
    }
}

/// `network_enhancement` → `namespace_type`: which NICs a pod may get.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceType {
    /// No constraint.
    #[default]
    Any,
    /// Only NICs of the host network namespace.
    HostNs,
    /// Prefer the host namespace.
    HostNsPreferred,
    /// Only NICs in other namespaces.
    AntiHostNs,
    /// Prefer other namespaces.
    AntiHostNsPreferred,
}

impl NamespaceType {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "host_ns" => Some(Self::HostNs),
            "host_ns_preferred" => Some(Self::HostNsPreferred),
            "anti_host_ns" => Some(Self::AntiHostNs),
            "anti_host_ns_preferred" => Some(Self::AntiHostNsPreferred),
            _ => None,
        }
    }
}

/// A request that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    #[error("invalid qos level {value:?} in annotation {QOS_LEVEL_KEY} (expected dedicated_cores, shared_cores, reclaimed_cores or system_cores)")]
    InvalidLevel { value: String },
    #[error("invalid numa ids {value:?} in annotation {NUMA_IDS_KEY}: {reason}")]
    InvalidNumaIds { value: String, reason: String },
    #[error("invalid numa number {value:?} in annotation {NUMA_NUMBER_KEY}: expected a non-negative integer")]
    InvalidNumaNumber { value: String },
    #[error("invalid cpuset pool name {value:?}: {reason}")]
    InvalidPoolName { value: String, reason: &'static str },
    /// The proposal's annotations contradict themselves or katalyst's.
    #[error(transparent)]
    Vocabulary(#[from] VocabularyError),
}

/// Something odd but harmless in the annotations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosWarning {
    #[error("annotation {key} is not a json object of strings ({reason}); treated as empty")]
    MalformedEnhancement { key: String, reason: String },
    #[error("numa_exclusive needs numa_binding and dedicated_cores (level {level}); ignored")]
    ExclusiveIgnored { level: QosLevel },
    #[error("unknown namespace_type {value:?}; ignored")]
    UnknownNamespaceType { value: String },
    #[error("both {NUMA_IDS_KEY} and {NUMA_NUMBER_KEY} are set; numa_number {value} ignored")]
    NumaNumberIgnored { value: u32 },
    #[error("role {value:?} in annotation {} is not in the role table; sent to plugins as it is, no qos level derived from it", vocabulary::POD_ROLE_ANNOTATION)]
    UnknownRole { value: String },
}

/// What a pod asks for, as katalyst's annotations say it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosRequest {
    pub level: QosLevel,
    /// True when the level annotation is present (absent means the
    /// `shared_cores` default, which a Guaranteed pod with integer CPUs
    /// overrides in Pinion: see `docs/qrm.md`).
    pub level_explicit: bool,
    pub cpu_enhancement: BTreeMap<String, String>,
    pub memory_enhancement: BTreeMap<String, String>,
    pub network_enhancement: BTreeMap<String, String>,
    pub numa_binding: bool,
    /// Only ever true together with `numa_binding` and `dedicated_cores`.
    pub numa_exclusive: bool,
    /// The shared pool (`share` when not given); for other levels the
    /// value as given (empty when absent).
    pub cpuset_pool: String,
    /// NUMA nodes the hints are restricted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_ids: Option<CpuSet>,
    /// How many NUMA nodes the hints must span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_number: Option<u32>,
    pub namespace_type: NamespaceType,
    /// `kubernetes.io/main-container-name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_container: Option<String>,
    #[serde(skip)]
    pub warnings: Vec<QosWarning>,
}

/// Longest pool name accepted (it appears in pool listings and state).
pub const MAX_POOL_NAME: usize = 63;

/// Reads katalyst's annotations and the proposal's (`kubernetes.io/pod-role`,
/// `kubernetes.io/resource-type`, through the role table of
/// [`vocabulary`]). Only `qos_level`, `numa_ids`, `numa_number`, an unusable
/// `cpuset_pool` and contradictory values are errors; everything else
/// degrades to the default with a warning.
pub fn parse(annotations: &BTreeMap<String, String>) -> Result<QosRequest, QosError> {
    let mut warnings = Vec::new();
    let proposal = vocabulary::read(annotations)?;
    let (level, level_explicit) = match (annotations.get(QOS_LEVEL_KEY), proposal.level()) {
        (Some(value), _) => (value.parse::<QosLevel>()?, true),
        (None, Some(level)) => (level, true),
        (None, None) => (QosLevel::SharedCores, false),
    };
    let cpu_enhancement = enhancement(annotations, CPU_ENHANCEMENT_KEY, &mut warnings);
    let memory_enhancement = enhancement(annotations, MEMORY_ENHANCEMENT_KEY, &mut warnings);
    let network_enhancement = enhancement(annotations, NETWORK_ENHANCEMENT_KEY, &mut warnings);
    vocabulary::check_katalyst(&proposal, annotations, &memory_enhancement)?;
    if let Some(value) = &proposal.unknown_role {
        warnings.push(QosWarning::UnknownRole {
            value: value.clone(),
        });
    }
    let numa = proposal.numa();
    let numa_binding = is_true(memory_enhancement.get(keys::NUMA_BINDING))
        || is_true(annotations.get(NUMA_BINDING_KEY))
        || numa.is_some();
    let mut numa_exclusive = is_true(memory_enhancement.get(keys::NUMA_EXCLUSIVE))
        || numa == Some(vocabulary::NumaHolding::Exclusive);
    if numa_exclusive && !(numa_binding && level == QosLevel::DedicatedCores) {
        warnings.push(QosWarning::ExclusiveIgnored { level });
        numa_exclusive = false;
    }
    let cpuset_pool = cpuset_pool(level, cpu_enhancement.get(keys::CPUSET_POOL))?;
    let numa_ids = annotations
        .get(NUMA_IDS_KEY)
        .map(|value| parse_numa_ids(value))
        .transpose()?;
    let mut numa_number = annotations
        .get(NUMA_NUMBER_KEY)
        .map(|value| {
            value
                .trim()
                .parse::<u32>()
                .map_err(|_| QosError::InvalidNumaNumber {
                    value: value.clone(),
                })
        })
        .transpose()?;
    if let (Some(_), Some(value)) = (&numa_ids, numa_number) {
        warnings.push(QosWarning::NumaNumberIgnored { value });
        numa_number = None;
    }
    let namespace_type = match network_enhancement.get(keys::NAMESPACE_TYPE) {
        None => NamespaceType::Any,
        Some(value) => NamespaceType::parse(value).unwrap_or_else(|| {
            warnings.push(QosWarning::UnknownNamespaceType {
                value: value.clone(),
            });
            NamespaceType::Any
        }),
    };
    Ok(QosRequest {
        level,
        level_explicit,
        cpu_enhancement,
        memory_enhancement,
        network_enhancement,
        numa_binding,
        numa_exclusive,
        cpuset_pool,
        numa_ids,
        numa_number,
        namespace_type,
        main_container: annotations.get(MAIN_CONTAINER_KEY).cloned(),
        warnings,
    })
}

/// katalyst compares enhancement flags with `"true"` exactly.
fn is_true(value: Option<&String>) -> bool {
    value.is_some_and(|v| v == "true")
}

/// One enhancement object; malformed → empty plus a warning.
fn enhancement(
    annotations: &BTreeMap<String, String>,
    key: &str,
    warnings: &mut Vec<QosWarning>,
) -> BTreeMap<String, String> {
    let Some(text) = annotations.get(key) else {
        return BTreeMap::new();
    };
    match serde_json::from_str::<BTreeMap<String, String>>(text) {
        Ok(map) => map,
        Err(err) => {
            warnings.push(QosWarning::MalformedEnhancement {
                key: key.to_string(),
                reason: err.to_string(),
            });
            BTreeMap::new()
        }
    }
}

fn cpuset_pool(level: QosLevel, given: Option<&String>) -> Result<String, QosError> {
    let name = match (level, given) {
        (_, Some(name)) if !name.is_empty() => name.clone(),
        (QosLevel::SharedCores, _) => return Ok(DEFAULT_SHARED_POOL.to_string()),
        _ => return Ok(String::new()),
    };
    check_pool_name(&name)?;
    Ok(name)
}

/// A pool name: 1–63 characters of `[A-Za-z0-9_.-]` (it appears in state
/// files, `pinion pools` and `set NAME=SIZE`, so no `=`, `@` or spaces).
pub fn check_pool_name(name: &str) -> Result<(), QosError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_POOL_NAME {
        Some("longer than 63 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Some("only letters, digits, '_', '-' and '.' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(QosError::InvalidPoolName {
            value: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn parse_numa_ids(value: &str) -> Result<CpuSet, QosError> {
    let ids = CpuSet::parse_list(value.trim()).map_err(|err| QosError::InvalidNumaIds {
        value: value.to_string(),
        reason: err.to_string(),
    })?;
    if ids.is_empty() {
        return Err(QosError::InvalidNumaIds {
            value: value.to_string(),
            reason: "no numa id".to_string(),
        });
    }
    Ok(ids)
}

#[cfg(test)]
mod tests;
