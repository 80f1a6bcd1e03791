//! What resource plugins allocate to a container (the manager side of
//! kubewharf's QoS Resource Manager, spec `qrm.md` §2.3 and §4.7) and how it
//! becomes part of the container's [`Placement`]: a pure merge, the same
//! for both front-ends.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::placement::{Placement, Pool};

/// A topology hint as plugins send it: NUMA node ids and whether preferred.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginHint {
    pub nodes: Vec<u64>,
    pub preferred: bool,
}

/// One resource's allocation for one container (`ResourceAllocationInfo`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PluginAllocation {
    /// The CRI `LinuxContainerResources` field it sets (`""`: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub oci_property_name: String,
    #[serde(default)]
    pub is_node_resource: bool,
    #[serde(default)]
    pub is_scalar_resource: bool,
    #[serde(default)]
    pub allocated_quantity: f64,
    /// The value of the OCI property (a cpulist, a number…).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub allocation_result: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The hints the plugin answered at `Allocate` time (kept across
    /// reconciles, which do not repeat them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_hints: Option<Vec<PluginHint>>,
    /// NUMA node → amount.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology_assignments: BTreeMap<u64, u64>,
}

/// A container's allocations: resource name → allocation.
pub type PluginAllocations = BTreeMap<String, PluginAllocation>;

/// Why an allocation cannot be applied (kubelet fork's texts, §4.7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciError {
    #[error("OCI resource config doesn't support oci property name: {property} for resource: {resource}")]
    UnknownProperty { property: String, resource: String },
    #[error("parse: {value} to int failed with error: {reason}")]
    NotAnInteger { value: String, reason: String },
    #[error("resource {resource}: Unified {value:?} {reason}")]
    BadUnified {
        resource: String,
        value: String,
        reason: String,
    },
    #[error("resource {resource}: {property} {value:?} is not a valid list: {reason}")]
    BadList {
        resource: String,
        property: String,
        value: String,
        reason: String,
    },
}

/// What the merge noticed but did not refuse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeNotes {
    /// Environment variables or annotations set by two resources (the first,
    /// in resource-name order, wins): (key, resource that lost).
    pub conflicts: Vec<(String, String)>,
}

/// `base` (the engine's placement) with the plugins' allocations applied:
/// OCI properties set the cpuset and resource settings, environment
/// variables and annotations are merged (first resource in name order wins a
/// key). CPUs chosen by a plugin run in [`Pool::Plugin`]; memory nodes are
/// set only by a plugin's `CpusetMems` (katalyst's manager sends what the
/// plugins answer and nothing else).
pub fn apply(
    base: Placement,
    allocations: &PluginAllocations,
) -> Result<(Placement, MergeNotes), OciError> {
    let mut placement = base;
    let mut notes = MergeNotes::default();
    let mut cpus_from_plugin = false;
    for (resource, allocation) in allocations {
        match setting(resource, allocation)? {
            Setting::None => {}
            Setting::Cpus(cpus) => {
                placement.cpus = cpus;
                cpus_from_plugin = true;
            }
            Setting::Mems(mems) => placement.mems = mems,
            Setting::Shares(v) => placement.resources.cpu_shares = Some(v),
            Setting::Quota(v) => placement.resources.cpu_quota = Some(v),
            Setting::Period(v) => placement.resources.cpu_period = Some(v),
            Setting::Memory(v) => placement.resources.memory_limit = Some(v),
            Setting::Swap(v) => placement.resources.memory_swap_limit = Some(v),
            Setting::Oom(v) => placement.resources.oom_score_adj = Some(v),
            Setting::Unified(files) => {
                merge_keys(
                    &mut placement.resources.unified,
                    &files,
                    resource,
                    &mut notes,
                );
            }
        }
        merge_keys(&mut placement.env, &allocation.envs, resource, &mut notes);
        merge_keys(
            &mut placement.annotations,
            &allocation.annotations,
            resource,
            &mut notes,
        );
    }
    if cpus_from_plugin {
        placement.pool = Pool::Plugin;
        if placement.resources.cpu_quota == Some(crate::placement::UNLIMITED_QUOTA) {
            // The quota removal belongs to Pinion's own exclusive CPUs.
            placement.resources.cpu_quota = None;
        }
    }
    Ok((placement, notes))
}

/// Whether every allocation can be applied (known OCI property, a value
/// it can take), with the error [`apply`] would give: the manager checks a
/// plugin's answer as it arrives, to count and show it as the plugin's.
pub fn check(allocations: &PluginAllocations) -> Result<(), OciError> {
    for (resource, allocation) in allocations {
        setting(resource, allocation)?;
    }
    Ok(())
}

/// One allocation's OCI property, parsed (§4.7's table).
enum Setting {
    None,
    Cpus(CpuSet),
    Mems(CpuSet),
    Shares(u64),
    Quota(i64),
    Period(u64),
    Memory(i64),
    Swap(i64),
    Oom(i64),
    Unified(BTreeMap<String, String>),
}

/// The cgroup v2 files a plugin may set through the `Unified` OCI property
/// (CRI's `LinuxContainerResources.unified`): memory protection and
/// throttling, I/O weight and limits, CPU idle and utilisation clamps, the
/// pid limit. Not the files Pinion or kubelet own — `cpuset.*` (the
/// placement), `cpu.max` and `cpu.weight` (`CpuQuota`/`CpuPeriod`,
/// `CpuShares`), `memory.max` and `memory.swap.max` (the memory limits) —
/// nor anything else a plugin could use to escape its container's limits.
pub const UNIFIED_FILES: &[&str] = &[
    "cpu.idle",
    "cpu.uclamp.max",
    "cpu.uclamp.min",
    "io.latency",
    "io.max",
    "io.weight",
    "memory.high",
    "memory.low",
    "memory.min",
    "memory.oom.group",
    "memory.swap.high",
    "pids.max",
];

/// The text that gives `file` (one of [`UNIFIED_FILES`]) back its default
/// in place of `old`, the value a plugin had set there: no limit, no
/// protection, the default weight. The per-device files reset the devices
/// `old` named (`8:0 rbps=1048576` → `8:0 rbps=max wbps=max riops=max
/// wiops=max`; an `io.weight` of `8:0 200` → `8:0 default`); `None` for a
/// file that is not one of [`UNIFIED_FILES`].
#[must_use]
pub fn unified_default(file: &str, old: &str) -> Option<String> {
    let per_device = |reset: &str| {
        let device = old.split_whitespace().next().unwrap_or_default();
        format!("{device} {reset}")
    };
    Some(match file {
        "cpu.idle" | "memory.low" | "memory.min" | "memory.oom.group" | "cpu.uclamp.min" => {
            "0".to_string()
        }
        "cpu.uclamp.max" | "memory.high" | "memory.swap.high" | "pids.max" => "max".to_string(),
        "io.max" => per_device("rbps=max wbps=max riops=max wiops=max"),
        "io.latency" => per_device("target=max"),
        "io.weight" if old.split_whitespace().next() == Some("default") => {
            "default 100".to_string()
        }
        "io.weight" => per_device("default"),
        _ => return None,
    })
}

/// The longest value of one `Unified` file.
pub const MAX_UNIFIED_VALUE: usize = 1024;

fn setting(resource: &str, allocation: &PluginAllocation) -> Result<Setting, OciError> {
    let property = allocation.oci_property_name.as_str();
    let value = allocation.allocation_result.trim();
    Ok(match property {
        "" => Setting::None,
        "CpusetCpus" => Setting::Cpus(list(resource, property, value)?),
        "CpusetMems" => Setting::Mems(list(resource, property, value)?),
        "CpuShares" => Setting::Shares(unsigned(value)?),
        "CpuQuota" => Setting::Quota(integer(value)?),
        "CpuPeriod" => Setting::Period(unsigned(value)?),
        "MemoryLimitInBytes" => Setting::Memory(integer(value)?),
        "MemorySwapLimitInBytes" => Setting::Swap(integer(value)?),
        "OomScoreAdj" => Setting::Oom(integer(value)?),
        "Unified" => Setting::Unified(unified(resource, value)?),
        other => {
            return Err(OciError::UnknownProperty {
                property: other.to_string(),
                resource: resource.to_string(),
            })
        }
    })
}

fn merge_keys(
    into: &mut BTreeMap<String, String>,
    from: &BTreeMap<String, String>,
    resource: &str,
    notes: &mut MergeNotes,
) {
    for (key, value) in from {
        match into.get(key) {
            Some(existing) if existing != value => {
                notes.conflicts.push((key.clone(), resource.to_string()));
            }
            Some(_) => {}
            None => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

fn list(resource: &str, property: &str, value: &str) -> Result<CpuSet, OciError> {
    CpuSet::parse_list(value).map_err(|err| OciError::BadList {
        resource: resource.to_string(),
        property: property.to_string(),
        value: value.to_string(),
        reason: err.to_string(),
    })
}

/// A `Unified` value: a JSON object of file name → value (CRI's map as
/// text), every file one of [`UNIFIED_FILES`], every value one line of at
/// most [`MAX_UNIFIED_VALUE`] bytes.
fn unified(resource: &str, value: &str) -> Result<BTreeMap<String, String>, OciError> {
    let bad = |reason: String| OciError::BadUnified {
        resource: resource.to_string(),
        value: value.to_string(),
        reason,
    };
    let files: BTreeMap<String, String> = serde_json::from_str(value).map_err(|err| {
        bad(format!(
            "is not a JSON object of cgroup file names and values: {err}"
        ))
    })?;
    for (file, text) in &files {
        if !UNIFIED_FILES.contains(&file.as_str()) {
            return Err(bad(format!(
                "sets {file:?}, which a resource plugin may not set (allowed: {})",
                UNIFIED_FILES.join(", ")
            )));
        }
        if text.is_empty() || text.len() > MAX_UNIFIED_VALUE || text.contains(['\n', '\0']) {
            return Err(bad(format!(
                "gives {file} the value {text:?}: not one line of 1 to {MAX_UNIFIED_VALUE} bytes"
            )));
        }
    }
    Ok(files)
}

fn integer(value: &str) -> Result<i64, OciError> {
    value
        .parse()
        .map_err(|err: std::num::ParseIntError| OciError::NotAnInteger {
            value: value.to_string(),
            reason: err.to_string(),
        })
}

fn unsigned(value: &str) -> Result<u64, OciError> {
    value
        .parse()
        .map_err(|err: std::num::ParseIntError| OciError::NotAnInteger {
            value: value.to_string(),
            reason: err.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    fn set(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    fn oci(property: &str, value: &str) -> PluginAllocation {
        PluginAllocation {
            oci_property_name: property.into(),
            allocation_result: value.into(),
            ..PluginAllocation::default()
        }
    }

    #[test]
    fn every_unified_file_has_a_default_that_lifts_what_a_plugin_set() {
        for file in UNIFIED_FILES {
            assert!(unified_default(file, "8:0 1").is_some(), "{file}");
        }
        let cases = [
            ("memory.high", "1073741824", "max"),
            ("memory.min", "1G", "0"),
            ("cpu.uclamp.max", "50.00", "max"),
            ("cpu.idle", "1", "0"),
            ("pids.max", "64", "max"),
            (
                "io.max",
                "8:16 rbps=1048576",
                "8:16 rbps=max wbps=max riops=max wiops=max",
            ),
            ("io.latency", "259:0 target=75", "259:0 target=max"),
            ("io.weight", "8:0 200", "8:0 default"),
            ("io.weight", "default 300", "default 100"),
        ];
        for (file, old, want) in cases {
            assert_eq!(
                unified_default(file, old).as_deref(),
                Some(want),
                "{file} {old}"
            );
        }
        assert_eq!(unified_default("cpuset.cpus", "0-3"), None);
    }

    #[test]
    fn oci_properties_set_the_cpuset_and_every_resource_setting() {
        let base = Placement::shared(set("0-7"));
        let allocations = PluginAllocations::from([
            ("cpu".to_string(), oci("CpusetCpus", "2-3")),
            ("example.com/quota".to_string(), oci("CpuQuota", "50000")),
            ("example.com/period".to_string(), oci("CpuPeriod", "100000")),
            ("example.com/shares".to_string(), oci("CpuShares", "512")),
            (
                "memory".to_string(),
                oci("MemoryLimitInBytes", "1073741824"),
            ),
            (
                "swap".to_string(),
                oci("MemorySwapLimitInBytes", "2147483648"),
            ),
            ("oom".to_string(), oci("OomScoreAdj", "-997")),
        ]);
        let (placement, notes) = apply(base, &allocations).expect("applies");
        assert_eq!(placement.cpus, set("2-3"));
        assert!(
            placement.mems.is_empty(),
            "a plugin's cpus leave the memory nodes: {}",
            placement.mems
        );
        assert_eq!(placement.pool, Pool::Plugin);
        let r = &placement.resources;
        assert_eq!(r.cpu_quota, Some(50_000));
        assert_eq!(r.cpu_period, Some(100_000));
        assert_eq!(r.cpu_shares, Some(512));
        assert_eq!(r.memory_limit, Some(1 << 30));
        assert_eq!(r.memory_swap_limit, Some(2 << 30));
        assert_eq!(r.oom_score_adj, Some(-997));
        assert!(notes.conflicts.is_empty());
    }

    #[test]
    fn mems_from_a_plugin_win_and_envs_merge_first_come() {
        let base = Placement::exclusive(set("1,5"));
        let mut nic = oci("", "");
        nic.envs.insert("AFFINITY_NIC_NAME".into(), "eth1".into());
        nic.annotations.insert("k".into(), "nic".into());
        let mut memory = oci("CpusetMems", "1");
        memory.annotations.insert("k".into(), "memory".into());
        let allocations = PluginAllocations::from([
            ("example.com/nic".to_string(), nic),
            ("memory".to_string(), memory),
        ]);
        let (placement, notes) = apply(base, &allocations).expect("applies");
        assert_eq!(placement.cpus, set("1,5"), "cpus stay Pinion's");
        assert_eq!(placement.pool, Pool::Exclusive);
        assert_eq!(placement.mems, set("1"));
        assert_eq!(placement.env["AFFINITY_NIC_NAME"], "eth1");
        assert_eq!(placement.annotations["k"], "nic");
        assert_eq!(
            notes.conflicts,
            vec![("k".to_string(), "memory".to_string())]
        );
    }

    #[test]
    fn unknown_properties_and_bad_values_are_refused_with_the_forks_texts() {
        let base = Placement::shared(set("0-7"));
        let unknown = PluginAllocations::from([("gpu".to_string(), oci("HugepageLimits", "1"))]);
        let err = apply(base.clone(), &unknown).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "OCI resource config doesn't support oci property name: HugepageLimits for resource: gpu"
        );
        let bad = PluginAllocations::from([("q".to_string(), oci("CpuQuota", "lots"))]);
        let err = apply(base.clone(), &bad).expect_err("bad int");
        assert!(
            err.to_string()
                .starts_with("parse: lots to int failed with error: "),
            "{err}"
        );
        let bad = PluginAllocations::from([("cpu".to_string(), oci("CpusetCpus", "3-1"))]);
        let err = apply(base, &bad).expect_err("bad list");
        assert!(matches!(err, OciError::BadList { .. }), "{err}");
    }

    #[test]
    fn check_refuses_exactly_what_apply_refuses() {
        let base = Placement::shared(set("0-7"));
        let cases = [
            ("", "anything"),
            ("CpusetCpus", "0-1"),
            ("CpusetCpus", "3-1"),
            ("CpusetMems", "x"),
            ("CpuShares", "-2"),
            ("CpuQuota", "-1"),
            ("CpuPeriod", "100000"),
            ("MemoryLimitInBytes", "1e9"),
            ("MemorySwapLimitInBytes", "1024"),
            ("OomScoreAdj", "-999"),
            ("Unified", "{}"),
        ];
        for (property, value) in cases {
            let allocations = PluginAllocations::from([("r".to_string(), oci(property, value))]);
            let applied = apply(base.clone(), &allocations).err();
            assert_eq!(check(&allocations).err(), applied, "{property}={value}");
        }
    }

    /// Issue 28 item 4: the `Unified` OCI property (cgroup v2 files) is
    /// applied for the files of the list, and refused naming the file
    /// otherwise.
    #[test]
    fn unified_sets_listed_cgroup_v2_files_and_refuses_others() {
        let base = Placement::shared(set("0-7"));
        let allocations = PluginAllocations::from([
            (
                "example.com/io".to_string(),
                oci(
                    "Unified",
                    r#"{"io.weight":"default 200","memory.high":"1073741824"}"#,
                ),
            ),
            (
                "example.com/later".to_string(),
                oci("Unified", r#"{"memory.high":"max","pids.max":"64"}"#),
            ),
        ]);
        let (placement, notes) = apply(base, &allocations).expect("applied");
        let files: Vec<(&str, &str)> = placement
            .resources
            .unified
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            files,
            [
                ("io.weight", "default 200"),
                ("memory.high", "1073741824"),
                ("pids.max", "64")
            ]
        );
        assert_eq!(
            notes.conflicts,
            [("memory.high".to_string(), "example.com/later".to_string())]
        );
        let refused = |value: &str| {
            check(&PluginAllocations::from([(
                "example.com/io".to_string(),
                oci("Unified", value),
            )]))
            .expect_err("refused")
            .to_string()
        };
        let owned = refused(r#"{"cpuset.cpus":"0-3"}"#);
        assert!(
            owned.starts_with("resource example.com/io: Unified")
                && owned.contains("sets \"cpuset.cpus\", which a resource plugin may not set"),
            "{owned}"
        );
        assert!(refused(r#"{"memory.max":"1"}"#).contains("\"memory.max\""));
        assert!(refused("memory.high=1").contains("not a JSON object"));
        assert!(refused(r#"{"memory.high":"1\n2"}"#).contains("not one line"));
        assert!(refused(r#"{"memory.high":""}"#).contains("not one line"));
    }
}
