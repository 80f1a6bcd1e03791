//! What a resource plugin may answer (issue 27): the checks the manager
//! runs on every `Allocate` and `GetResourcesAllocation` answer before it
//! is stored or applied, beside [`crate::plugin_allocation::check`] (the
//! OCI property and its value). Pure: the caller passes what the answer is
//! checked against.
//!
//! * Only the `cpu` resource plugin sets `CpusetCpus` (it owns the CPU
//!   placement of the pods it serves); any other plugin answering it is
//!   refused — a plugin for an unrelated resource would otherwise decide
//!   where containers run.
//! * Its cpuset must not take CPUs other workloads hold exclusively
//!   ([`check_cpus`], in the controller, which knows them).
//! * Environment variable names are not empty and contain neither `=` nor
//!   NUL; annotation names are not empty and contain neither a newline nor
//!   NUL; values contain neither a newline nor NUL (a runtime writes them as
//!   `NAME=value` lines or C strings, where either splits or truncates
//!   them).
//! * `allocated_quantity` is a finite, non-negative number.
//! * OCI values the kernel would refuse at the cgroup or `/proc` write
//!   ([`check`]; zero is CRI's "not set" and passes): `CpuPeriod` within
//!   [`CFS_PERIOD_US`] (`cpu.cfs_period_us`, `cpu.max`: 1 ms to 1 s),
//!   `CpuQuota` negative (unlimited) or within [`CFS_QUOTA_US`] (1 ms to
//!   the kernel's `max_cfs_runtime`, 2^44 − 1 µs), `OomScoreAdj` within
//!   [`OOM_SCORE_ADJ`] (`/proc/PID/oom_score_adj`), a positive
//!   `MemorySwapLimitInBytes` not below the memory limit
//!   ([`check_swap`]: cgroup v1 refuses `memory.memsw.limit_in_bytes` below
//!   `memory.limit_in_bytes`, and v2's `memory.swap.max` is memory+swap
//!   minus memory, as runc converts it).
//! * Its cpuset's CPUs must be online and its `CpusetMems` online NUMA
//!   nodes of the machine ([`check_online`]; an empty `CpusetCpus` is
//!   refused, an empty `CpusetMems` is CRI's "not set").
//! * `GetTopologyAwareAllocatableResources` ([`check_node_resources`]): at
//!   most [`MAX_NODE_RESOURCES`] resources with names a Node's status can
//!   carry (a qualified resource name: 1–253 bytes of letters, digits, `-`,
//!   `_`, `.`, one `/`), finite non-negative amounts, at most
//!   [`MAX_NUMA_ENTRIES`] per-NUMA amounts each.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use crate::cpuset::CpuSet;
use crate::plugin_allocation::{PluginAllocation, PluginAllocations};
use crate::podresources::AllocatableResource;

/// Resources one plugin may report in `GetTopologyAwareAllocatableResources`.
pub const MAX_NODE_RESOURCES: usize = 64;
/// Per-NUMA amounts one reported resource may list.
pub const MAX_NUMA_ENTRIES: usize = 1024;
/// The longest resource name (a Kubernetes qualified name's bound).
pub const MAX_RESOURCE_NAME: usize = 253;

/// The CFS periods (µs) the kernel accepts: `min_cfs_quota_period` (1 ms)
/// to `max_cfs_quota_period` (1 s), for `cpu.cfs_period_us` (v1) and the
/// period of `cpu.max` (v2) alike (`tg_set_cfs_bandwidth`); kubelet's
/// `cpuCFSQuotaPeriod` has the same bounds.
pub const CFS_PERIOD_US: RangeInclusive<u64> = 1_000..=1_000_000;
/// The CFS quotas (µs) the kernel accepts besides "unlimited" (a negative
/// quota): at least 1 ms (`min_cfs_quota_period`; kubelet's `MinQuotaPeriod`
/// too), at most `max_cfs_runtime` = 2^44 − 1 µs (`MAX_BW`).
pub const CFS_QUOTA_US: RangeInclusive<i64> = 1_000..=(1 << 44) - 1;
/// The OOM score adjustments the kernel accepts (`OOM_SCORE_ADJ_MIN` to
/// `OOM_SCORE_ADJ_MAX`; `/proc/PID/oom_score_adj` refuses others).
pub const OOM_SCORE_ADJ: RangeInclusive<i64> = -1000..=1000;

/// The resource whose plugin owns CPU placement: the only one that may set
/// `CpusetCpus`.
pub const CPU_RESOURCE: &str = "cpu";

/// Why a plugin's answer is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("resource {resource}: only the {CPU_RESOURCE} resource plugin may set CpusetCpus, not the {plugin} plugin (it answered {value:?})")]
    CpusNotOwned {
        plugin: String,
        resource: String,
        value: String,
    },
    #[error("resource {resource}: CpusetCpus is empty (a container needs at least one cpu)")]
    CpusEmpty { resource: String },
    #[error("resource {resource}: CpusetCpus {cpus} has cpus {outside} that are offline or not on this machine (online: {online})")]
    CpusNotOnline {
        resource: String,
        cpus: Box<CpuSet>,
        outside: Box<CpuSet>,
        online: Box<CpuSet>,
    },
    #[error("resource {resource}: CpusetMems {mems} has NUMA nodes {outside} that are offline or not on this machine (online: {online})")]
    MemsNotOnline {
        resource: String,
        mems: Box<CpuSet>,
        outside: Box<CpuSet>,
        online: Box<CpuSet>,
    },
    #[error("resource {resource}: {property} {value} {reason}")]
    OciValue {
        resource: String,
        property: &'static str,
        value: i64,
        reason: String,
    },
    #[error("resource {resource}: CpusetCpus {cpus} takes cpus {taken} that other workloads hold exclusively")]
    CpusTaken {
        resource: String,
        cpus: Box<CpuSet>,
        taken: Box<CpuSet>,
    },
    #[error("resource {resource}: {what} name {name:?} {defect}")]
    Name {
        resource: String,
        what: &'static str,
        name: String,
        defect: &'static str,
    },
    #[error("resource {resource}: the value of {what} {name:?} {defect}")]
    Value {
        resource: String,
        what: &'static str,
        name: String,
        defect: &'static str,
    },
    #[error("resource {resource}: allocated quantity {value} is not a finite non-negative number")]
    Quantity { resource: String, value: String },
    #[error("the {plugin} plugin reported {count} node resources; at most {MAX_NODE_RESOURCES} are kept")]
    TooManyResources { plugin: String, count: usize },
    #[error("the {plugin} plugin reported the node resource name {name:?}, which {defect}")]
    ResourceName {
        plugin: String,
        name: String,
        defect: &'static str,
    },
    #[error("the {plugin} plugin reported node resource {name} with {what} {value}, not a finite non-negative number")]
    ResourceAmount {
        plugin: String,
        name: String,
        what: &'static str,
        value: String,
    },
    #[error("the {plugin} plugin reported node resource {name} with {count} per-NUMA amounts; at most {MAX_NUMA_ENTRIES} are kept")]
    TooManyNumaEntries {
        plugin: String,
        name: String,
        count: usize,
    },
    #[error("the answer is for pod {answered:?}, not for pod {asked:?} that was asked")]
    OtherPod { asked: String, answered: String },
    #[error("the allocation record of pod {pod} container {container} (the answers of resource plugins {resources}) would be {size} bytes, more than the journal's limit of {limit} bytes")]
    TooLarge {
        pod: String,
        container: String,
        /// The resources whose answers make the record, comma-separated.
        resources: String,
        size: usize,
        limit: usize,
    },
}

/// Checks `plugin`'s answer `allocations` (resource name → allocation; a
/// plugin may answer accompanying resources beside its own): who may set
/// the cpuset, names and values of environment variables and annotations,
/// quantities. The cpuset's CPUs are [`check_cpus`]'s.
pub fn check(plugin: &str, allocations: &PluginAllocations) -> Result<(), AnswerError> {
    for (resource, allocation) in allocations {
        if allocation.oci_property_name == "CpusetCpus" && plugin != CPU_RESOURCE {
            return Err(AnswerError::CpusNotOwned {
                plugin: plugin.to_string(),
                resource: resource.clone(),
                value: allocation.allocation_result.clone(),
            });
        }
        if allocation.oci_property_name == "CpusetCpus"
            && CpuSet::parse_list(allocation.allocation_result.trim()).is_ok_and(|c| c.is_empty())
        {
            return Err(AnswerError::CpusEmpty {
                resource: resource.clone(),
            });
        }
        let quantity = allocation.allocated_quantity;
        if !quantity.is_finite() || quantity < 0.0 {
            return Err(AnswerError::Quantity {
                resource: resource.clone(),
                value: quantity.to_string(),
            });
        }
        check_keys(resource, "environment variable", &allocation.envs, env_name)?;
        check_keys(
            resource,
            "annotation",
            &allocation.annotations,
            annotation_name,
        )?;
        check_value(resource, allocation)?;
    }
    check_swap(allocations, None)
}

impl AnswerError {
    /// The resource whose answer is refused, when one is.
    #[must_use]
    pub fn resource(&self) -> Option<&str> {
        match self {
            Self::CpusNotOwned { resource, .. }
            | Self::CpusEmpty { resource }
            | Self::CpusNotOnline { resource, .. }
            | Self::MemsNotOnline { resource, .. }
            | Self::OciValue { resource, .. }
            | Self::CpusTaken { resource, .. }
            | Self::Name { resource, .. }
            | Self::Value { resource, .. }
            | Self::Quantity { resource, .. } => Some(resource),
            _ => None,
        }
    }
}

/// The integer value of an OCI property, when it is one (a value that does
/// not parse is `plugin_allocation::check`'s error).
fn oci_integer(allocation: &PluginAllocation) -> Option<i64> {
    allocation.allocation_result.trim().parse().ok()
}

/// `allocation`'s OCI value within what the kernel accepts (zero: not
/// set). `CpuPeriod` is unsigned: a value above `i64::MAX` is out of range
/// as well.
fn check_value(resource: &str, allocation: &PluginAllocation) -> Result<(), AnswerError> {
    let property: &'static str = match allocation.oci_property_name.as_str() {
        "CpuPeriod" => "CpuPeriod",
        "CpuQuota" => "CpuQuota",
        "OomScoreAdj" => "OomScoreAdj",
        _ => return Ok(()),
    };
    let text = allocation.allocation_result.trim();
    let value = match (property, oci_integer(allocation)) {
        (_, Some(value)) => value,
        // Above i64::MAX (a u64 period): out of any range below.
        ("CpuPeriod", None) if text.parse::<u64>().is_ok() => i64::MAX,
        _ => return Ok(()),
    };
    let refuse = |reason: String| {
        Err(AnswerError::OciValue {
            resource: resource.to_string(),
            property,
            value,
            reason,
        })
    };
    match property {
        "CpuPeriod" if value != 0 && !CFS_PERIOD_US.contains(&value.unsigned_abs()) => {
            refuse(format!(
                "is outside the CFS periods the kernel accepts ({}..={} µs)",
                CFS_PERIOD_US.start(),
                CFS_PERIOD_US.end()
            ))
        }
        "CpuQuota" if value > 0 && !CFS_QUOTA_US.contains(&value) => refuse(format!(
            "is outside the CFS quotas the kernel accepts (negative for unlimited, or {}..={} µs)",
            CFS_QUOTA_US.start(),
            CFS_QUOTA_US.end()
        )),
        "OomScoreAdj" if !OOM_SCORE_ADJ.contains(&value) => refuse(format!(
            "is outside the OOM score adjustments the kernel accepts ({}..={})",
            OOM_SCORE_ADJ.start(),
            OOM_SCORE_ADJ.end()
        )),
        _ => Ok(()),
    }
}

/// Checks a positive `MemorySwapLimitInBytes` among `allocations` against
/// the memory limit: the one they set (the last in resource-name order, as
/// `plugin_allocation::apply` takes it), else `memory` when given (the
/// container's limit from elsewhere; `None`: unknown, only a limit the
/// answer sets is checked). Memory+swap below the memory limit, or without
/// a memory limit, is refused: cgroup v1 refuses `memory.memsw.limit_in_bytes`
/// below `memory.limit_in_bytes`, and cgroup v2 limits swap alone
/// (`memory.swap.max` = memory+swap − memory, runc's conversion), which
/// needs the memory limit. Negative: unlimited; zero: not set.
pub fn check_swap(
    allocations: &PluginAllocations,
    memory: Option<Option<i64>>,
) -> Result<(), AnswerError> {
    let last = |property: &str| {
        allocations
            .iter()
            .filter(|(_, a)| a.oci_property_name == property)
            .filter_map(|(resource, a)| Some((resource, oci_integer(a)?)))
            .next_back()
    };
    let Some((resource, swap)) = last("MemorySwapLimitInBytes").filter(|(_, s)| *s > 0) else {
        return Ok(());
    };
    let limit = match last("MemoryLimitInBytes") {
        Some((_, limit)) => Some(limit),
        None => match memory {
            Some(limit) => limit,
            None => return Ok(()),
        },
    };
    let reason = match limit.filter(|m| *m > 0) {
        Some(limit) if swap >= limit => return Ok(()),
        Some(limit) => format!(
            "is below the memory limit {limit} (memory+swap must be at least the memory limit)"
        ),
        None => "is set without a memory limit (memory+swap needs one)".to_string(),
    };
    Err(AnswerError::OciValue {
        resource: resource.clone(),
        property: "MemorySwapLimitInBytes",
        value: swap,
        reason,
    })
}

/// Checks the cpusets among `allocations` against the machine: a
/// `CpusetCpus` of online CPUs (`cpus`) and not empty, a `CpusetMems` of
/// online NUMA nodes (`mems`; empty is CRI's "not set"). A fact passed as
/// `None` is not known to the caller and not checked; a list that does not
/// parse is `plugin_allocation::check`'s error.
pub fn check_online(
    allocations: &PluginAllocations,
    cpus: Option<&CpuSet>,
    mems: Option<&CpuSet>,
) -> Result<(), AnswerError> {
    for (resource, allocation) in allocations {
        let value = allocation.allocation_result.trim();
        match allocation.oci_property_name.as_str() {
            "CpusetCpus" => {
                let Some(online) = cpus else { continue };
                if let Ok(set) = CpuSet::parse_list(value) {
                    check_cpus(resource, &set, online, &CpuSet::new())?;
                }
            }
            "CpusetMems" => {
                let Some(online) = mems else { continue };
                let Ok(set) = CpuSet::parse_list(value) else {
                    continue;
                };
                let outside = set.difference(online);
                if !outside.is_empty() {
                    return Err(AnswerError::MemsNotOnline {
                        resource: resource.clone(),
                        mems: Box::new(set),
                        outside: Box::new(outside),
                        online: Box::new(online.clone()),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks `plugin`'s `GetTopologyAwareAllocatableResources` answer
/// (`resources`, by name) before the manager keeps it for podresources,
/// `pinion plugins` and the Node: bounded, named as a Node's status can
/// name a resource, every amount finite and non-negative.
pub fn check_node_resources(
    plugin: &str,
    resources: &[AllocatableResource],
) -> Result<(), AnswerError> {
    if resources.len() > MAX_NODE_RESOURCES {
        return Err(AnswerError::TooManyResources {
            plugin: plugin.to_string(),
            count: resources.len(),
        });
    }
    for resource in resources {
        let name = &resource.resource_name;
        if let Some(defect) = resource_name_defect(name) {
            return Err(AnswerError::ResourceName {
                plugin: plugin.to_string(),
                name: name.clone(),
                defect,
            });
        }
        for (what, list) in [
            ("allocatable", &resource.allocatable_per_numa),
            ("capacity", &resource.capacity_per_numa),
        ] {
            if list.len() > MAX_NUMA_ENTRIES {
                return Err(AnswerError::TooManyNumaEntries {
                    plugin: plugin.to_string(),
                    name: name.clone(),
                    count: list.len(),
                });
            }
            let amounts = list.iter().map(|q| q.value);
            let total = if what == "allocatable" {
                resource.allocatable
            } else {
                resource.capacity
            };
            if let Some(bad) = std::iter::once(total)
                .chain(amounts)
                .find(|v| !v.is_finite() || *v < 0.0)
            {
                return Err(AnswerError::ResourceAmount {
                    plugin: plugin.to_string(),
                    name: name.clone(),
                    what,
                    value: bad.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// What is wrong with `name` as a resource name (of a Node's status, or
/// a plugin's registration), if anything: an optional DNS-subdomain-like
/// prefix and `/`, then a name of letters, digits, `-`, `_`, `.`.
pub fn resource_name_defect(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name.len() > MAX_RESOURCE_NAME {
        return Some("is longer than 253 bytes");
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let (prefix, base) = name.split_once('/').unwrap_or(("", name));
    if base.is_empty() || name.matches('/').count() > 1 {
        return Some("is not a qualified name (at most one '/', a name after it)");
    }
    if !prefix.chars().chain(base.chars()).all(allowed) {
        return Some("has characters other than letters, digits, '-', '_', '.' and one '/'");
    }
    None
}

/// Checks that an `Allocate` answer for pod `answered` is for pod `asked`
/// (an empty answer UID, which some plugins leave unset, names no pod).
pub fn check_pod(asked: &str, answered: &str) -> Result<(), AnswerError> {
    if answered.is_empty() || answered == asked {
        Ok(())
    } else {
        Err(AnswerError::OtherPod {
            asked: asked.to_string(),
            answered: answered.to_string(),
        })
    }
}

/// Checks the cpuset `cpus` a plugin set for `resource`: online CPUs of
/// the machine only (`online`), none of `taken` (what other workloads hold
/// exclusively).
pub fn check_cpus(
    resource: &str,
    cpus: &CpuSet,
    online: &CpuSet,
    taken: &CpuSet,
) -> Result<(), AnswerError> {
    if cpus.is_empty() {
        return Err(AnswerError::CpusEmpty {
            resource: resource.to_string(),
        });
    }
    let outside = cpus.difference(online);
    if !outside.is_empty() {
        return Err(AnswerError::CpusNotOnline {
            resource: resource.to_string(),
            cpus: Box::new(cpus.clone()),
            outside: Box::new(outside),
            online: Box::new(online.clone()),
        });
    }
    let taken = cpus.intersection(taken);
    if !taken.is_empty() {
        return Err(AnswerError::CpusTaken {
            resource: resource.to_string(),
            cpus: Box::new(cpus.clone()),
            taken: Box::new(taken),
        });
    }
    Ok(())
}

/// Checks that a journal record of `size` bytes for the allocations of
/// `container` of `pod`, the answers of the plugins of `resources`, fits
/// the journal's `limit`.
pub fn check_size<'a>(
    pod: &str,
    container: &str,
    resources: impl IntoIterator<Item = &'a String>,
    size: usize,
    limit: usize,
) -> Result<(), AnswerError> {
    if size <= limit {
        Ok(())
    } else {
        let resources: Vec<&str> = resources.into_iter().map(String::as_str).collect();
        Err(AnswerError::TooLarge {
            pod: pod.to_string(),
            container: container.to_string(),
            resources: resources.join(", "),
            size,
            limit,
        })
    }
}

fn check_keys(
    resource: &str,
    what: &'static str,
    entries: &BTreeMap<String, String>,
    name_defect: fn(&str) -> Option<&'static str>,
) -> Result<(), AnswerError> {
    for (name, value) in entries {
        if let Some(defect) = name_defect(name) {
            return Err(AnswerError::Name {
                resource: resource.to_string(),
                what,
                name: name.clone(),
                defect,
            });
        }
        if let Some(defect) = line_defect(value) {
            return Err(AnswerError::Value {
                resource: resource.to_string(),
                what,
                name: name.clone(),
                defect,
            });
        }
    }
    Ok(())
}

fn env_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.contains('=') {
        Some("contains '='")
    } else {
        line_defect(name)
    }
}

fn annotation_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else {
        line_defect(name)
    }
}

fn line_defect(text: &str) -> Option<&'static str> {
    if text.contains('\0') {
        Some("contains a NUL byte")
    } else if text.contains('\n') {
        Some("contains a newline")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    fn answer(resource: &str, edit: impl FnOnce(&mut PluginAllocation)) -> PluginAllocations {
        let mut allocation = PluginAllocation {
            allocated_quantity: 1.0,
            ..PluginAllocation::default()
        };
        edit(&mut allocation);
        PluginAllocations::from([(resource.to_string(), allocation)])
    }

    /// Regression (issue 27, item 5): a plugin for an unrelated resource
    /// answered `CpusetCpus` and Pinion applied it.
    #[test]
    fn regression_only_the_cpu_plugin_may_set_the_cpuset() {
        let cpus = |a: &mut PluginAllocation| {
            a.oci_property_name = "CpusetCpus".into();
            a.allocation_result = "0-1".into();
        };
        let err = check("example.com/widget", &answer("example.com/widget", cpus))
            .expect_err("not the cpu plugin");
        assert!(matches!(err, AnswerError::CpusNotOwned { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "resource example.com/widget: only the cpu resource plugin may set CpusetCpus, not the example.com/widget plugin (it answered \"0-1\")"
        );
        // Not even under the name of the cpu resource.
        assert!(check("example.com/widget", &answer("cpu", cpus)).is_err());
        assert_eq!(check("cpu", &answer("cpu", cpus)), Ok(()));
        let mems = |a: &mut PluginAllocation| {
            a.oci_property_name = "CpusetMems".into();
            a.allocation_result = "0".into();
        };
        assert_eq!(check("memory", &answer("memory", mems)), Ok(()));
    }

    /// Found from outside (thirty-third session): an empty `CpusetCpus`
    /// from the cpu plugin reached the kernel, which refused the process
    /// ("No space left on device"), and the admission failed with a 500
    /// naming no plugin.
    #[test]
    fn regression_an_empty_cpuset_is_the_plugins_error() {
        let err =
            check_cpus("cpu", &CpuSet::new(), &set("0-7"), &CpuSet::new()).expect_err("empty");
        assert_eq!(
            err.to_string(),
            "resource cpu: CpusetCpus is empty (a container needs at least one cpu)"
        );
        // Without the machine's CPUs too.
        let empty = answer("cpu", |a| {
            a.oci_property_name = "CpusetCpus".into();
            a.allocation_result = " ".into();
        });
        assert!(matches!(
            check("cpu", &empty),
            Err(AnswerError::CpusEmpty { .. })
        ));
    }

    /// Regression (issue 27, item 5): a cpuset taking another workload's
    /// exclusive CPUs or CPUs that are not online reached the kernel write.
    #[test]
    fn regression_a_cpuset_off_the_machine_or_on_exclusive_cpus_is_refused() {
        let online = set("0-7");
        assert_eq!(check_cpus("cpu", &set("2-3"), &online, &set("4-5")), Ok(()));
        let err = check_cpus("cpu", &set("6-9"), &online, &CpuSet::new()).expect_err("off");
        assert_eq!(
            err.to_string(),
            "resource cpu: CpusetCpus 6-9 has cpus 8-9 that are offline or not on this machine (online: 0-7)"
        );
        let err = check_cpus("cpu", &set("3-5"), &online, &set("4-5")).expect_err("taken");
        assert_eq!(
            err,
            AnswerError::CpusTaken {
                resource: "cpu".into(),
                cpus: Box::new(set("3-5")),
                taken: Box::new(set("4-5")),
            }
        );
    }

    /// Regression (issue 27, item 5): names and values a runtime splits or
    /// truncates, and quantities that are not numbers, were stored and
    /// applied.
    #[test]
    fn regression_split_names_and_values_and_bad_quantities_are_refused() {
        let env = |name: &'static str, value: &'static str| {
            answer("r", move |a| {
                a.envs.insert(name.into(), value.into());
            })
        };
        let annotation = |name: &'static str, value: &'static str| {
            answer("r", move |a| {
                a.annotations.insert(name.into(), value.into());
            })
        };
        let quantity = |value: f64| answer("r", move |a| a.allocated_quantity = value);
        let refused = [
            ("env name with =", env("A=B", "1")),
            ("env name with NUL", env("A\0", "1")),
            ("empty env name", env("", "1")),
            ("env value with a newline", env("A", "1\nB=2")),
            ("env value with NUL", env("A", "1\0")),
            ("annotation value with a newline", annotation("k", "v\nw")),
            ("annotation value with NUL", annotation("k", "v\0")),
            ("annotation name with a newline", annotation("k\n", "v")),
            ("NaN quantity", quantity(f64::NAN)),
            ("infinite quantity", quantity(f64::INFINITY)),
            ("negative quantity", quantity(-1.0)),
        ];
        for (name, allocations) in refused {
            assert!(check("r", &allocations).is_err(), "{name}");
        }
        let err = check("r", &env("A", "1\nB=2")).expect_err("newline");
        assert_eq!(
            err.to_string(),
            "resource r: the value of environment variable \"A\" contains a newline"
        );
        let err = check("r", &quantity(f64::NAN)).expect_err("nan");
        assert_eq!(
            err.to_string(),
            "resource r: allocated quantity NaN is not a finite non-negative number"
        );
        let fine = [
            env("A_B", "x y=z\t"),
            annotation("example.com/k", "v=w"),
            quantity(0.0),
        ];
        for allocations in fine {
            assert_eq!(check("r", &allocations), Ok(()));
        }
    }

    /// Regression (issue 27, item 5): an `Allocate` answer for another pod
    /// was stored as this pod's.
    #[test]
    fn regression_an_answer_for_another_pod_is_refused() {
        assert_eq!(check_pod("uid-1", "uid-1"), Ok(()));
        assert_eq!(check_pod("uid-1", ""), Ok(()));
        assert_eq!(
            check_pod("uid-1", "uid-2").expect_err("other").to_string(),
            "the answer is for pod \"uid-2\", not for pod \"uid-1\" that was asked"
        );
    }

    /// Regression (issue 27, item 5): a record too large for the journal
    /// failed at the journal's write instead of at the answer.
    #[test]
    fn regression_a_record_too_large_for_the_journal_is_refused_naming_size_and_limit() {
        let resources = ["cpu".to_string(), "example.com/big".to_string()];
        assert_eq!(check_size("p", "c", &resources, 10, 10), Ok(()));
        assert_eq!(
            check_size("p", "c", &resources, 11, 10).expect_err("too large").to_string(),
            "the allocation record of pod p container c (the answers of resource plugins cpu, example.com/big) would be 11 bytes, more than the journal's limit of 10 bytes"
        );
    }

    /// Found from outside (D9): OCI values the kernel refuses passed the
    /// checks and failed at the cgroup or `/proc` write with a 500 naming no
    /// plugin (`OomScoreAdj -1001` was admitted and failed `pinion run`).
    #[test]
    fn regression_oci_values_the_kernel_refuses_are_the_plugins_error() {
        let oci = |property: &'static str, value: &'static str| {
            answer("example.com/knob", move |a| {
                a.oci_property_name = property.into();
                a.allocation_result = value.into();
            })
        };
        let refused = [
            ("CpuPeriod", "18446744073709551615", "CpuPeriod 9223372036854775807 is outside the CFS periods the kernel accepts (1000..=1000000 µs)"),
            ("CpuPeriod", "999", "CpuPeriod 999 is outside"),
            ("CpuPeriod", "1000001", "CpuPeriod 1000001 is outside"),
            ("CpuQuota", "9223372036854775807", "CpuQuota 9223372036854775807 is outside the CFS quotas the kernel accepts (negative for unlimited, or 1000..=17592186044415 µs)"),
            ("CpuQuota", "999", "CpuQuota 999 is outside"),
            ("OomScoreAdj", "-1001", "OomScoreAdj -1001 is outside the OOM score adjustments the kernel accepts (-1000..=1000)"),
            ("OomScoreAdj", "1001", "OomScoreAdj 1001 is outside"),
        ];
        for (property, value, text) in refused {
            let err = check("example.com/knob", &oci(property, value))
                .expect_err(&format!("{property} {value}"));
            assert!(
                err.to_string()
                    .starts_with(&format!("resource example.com/knob: {text}")),
                "{err}"
            );
            assert_eq!(err.resource(), Some("example.com/knob"));
        }
        let fine = [
            ("CpuPeriod", "0"),
            ("CpuPeriod", "1000"),
            ("CpuPeriod", "1000000"),
            ("CpuQuota", "-1"),
            ("CpuQuota", "0"),
            ("CpuQuota", "1000"),
            ("CpuQuota", "17592186044415"),
            ("OomScoreAdj", "-1000"),
            ("OomScoreAdj", "1000"),
        ];
        for (property, value) in fine {
            assert_eq!(
                check("example.com/knob", &oci(property, value)),
                Ok(()),
                "{property} {value}"
            );
        }
    }

    /// Found from outside (D9): `MemorySwapLimitInBytes "5"` reached the
    /// kernel, which refused memory+swap below the memory limit (EINVAL).
    #[test]
    fn regression_memory_and_swap_below_the_memory_limit_is_refused() {
        let limits = |memory: Option<&str>, swap: &str| {
            let mut allocations = PluginAllocations::new();
            if let Some(memory) = memory {
                allocations.insert(
                    "memory".into(),
                    PluginAllocation {
                        oci_property_name: "MemoryLimitInBytes".into(),
                        allocation_result: memory.into(),
                        ..PluginAllocation::default()
                    },
                );
            }
            allocations.insert(
                "swap".into(),
                PluginAllocation {
                    oci_property_name: "MemorySwapLimitInBytes".into(),
                    allocation_result: swap.into(),
                    ..PluginAllocation::default()
                },
            );
            allocations
        };
        let err = check("swap", &limits(Some("1073741824"), "5")).expect_err("below");
        assert_eq!(
            err.to_string(),
            "resource swap: MemorySwapLimitInBytes 5 is below the memory limit 1073741824 (memory+swap must be at least the memory limit)"
        );
        // The memory limit from elsewhere: known (the controller) or not
        // (one plugin's answer, the limit may be another plugin's).
        assert_eq!(check("swap", &limits(None, "5")), Ok(()));
        let err = check_swap(&limits(None, "5"), Some(None)).expect_err("no memory limit");
        assert!(err.to_string().contains("without a memory limit"), "{err}");
        assert!(check_swap(&limits(None, "5"), Some(Some(4096))).is_err());
        for (memory, swap) in [(Some("1024"), "1024"), (Some("1024"), "-1"), (None, "0")] {
            assert_eq!(
                check_swap(&limits(memory, swap), Some(None)),
                Ok(()),
                "{swap}"
            );
        }
    }

    /// Found from outside (D8, D9): a cpuset on offline CPUs was refused
    /// only in the controller (not counted as the plugin's error); a
    /// `CpusetMems` of NUMA nodes the machine does not have reached the
    /// kernel (EINVAL).
    #[test]
    fn regression_cpusets_must_be_online_cpus_and_numa_nodes() {
        let cpuset = |property: &'static str, value: &'static str| {
            answer("cpu", move |a| {
                a.oci_property_name = property.into();
                a.allocation_result = value.into();
            })
        };
        let (cpus, mems) = (set("0-1"), set("0"));
        let online = |answer: &PluginAllocations| check_online(answer, Some(&cpus), Some(&mems));
        assert_eq!(
            online(&cpuset("CpusetCpus", "0-9")).expect_err("offline").to_string(),
            "resource cpu: CpusetCpus 0-9 has cpus 2-9 that are offline or not on this machine (online: 0-1)"
        );
        assert!(matches!(
            online(&cpuset("CpusetCpus", "")),
            Err(AnswerError::CpusEmpty { .. })
        ));
        assert_eq!(
            online(&cpuset("CpusetMems", "7")).expect_err("no node 7").to_string(),
            "resource cpu: CpusetMems 7 has NUMA nodes 7 that are offline or not on this machine (online: 0)"
        );
        assert_eq!(online(&cpuset("CpusetCpus", "1")), Ok(()));
        assert_eq!(online(&cpuset("CpusetMems", "0")), Ok(()));
        assert_eq!(online(&cpuset("CpusetMems", "")), Ok(()), "not set");
        // What the caller does not know is not checked.
        assert_eq!(
            check_online(&cpuset("CpusetMems", "7"), Some(&cpus), None),
            Ok(())
        );
    }

    fn node_resource(name: &str, allocatable: f64, per_numa: &[f64]) -> AllocatableResource {
        let list = |values: &[f64]| {
            values
                .iter()
                .enumerate()
                .map(|(node, &value)| crate::podresources::NumaQuantity::new(node as u64, value))
                .collect::<Vec<_>>()
        };
        AllocatableResource {
            resource_name: name.to_string(),
            is_node_resource: true,
            is_scalar_resource: true,
            allocatable,
            allocatable_per_numa: list(per_numa),
            capacity: allocatable,
            capacity_per_numa: list(per_numa),
        }
    }

    #[test]
    fn node_resources_are_bounded_named_and_finite() {
        let fine = [
            node_resource("example.com/widget", 4.0, &[2.0, 2.0]),
            node_resource("cpu", 0.0, &[]),
            node_resource("resource.katalyst.kubewharf.io/net_bandwidth", 1e4, &[1e4]),
        ];
        assert_eq!(check_node_resources("widget", &fine), Ok(()));
        let refused = |resources: &[AllocatableResource]| {
            check_node_resources("widget", resources)
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            refused(&[node_resource("", 1.0, &[])]),
            "the widget plugin reported the node resource name \"\", which is empty"
        );
        assert!(refused(&[node_resource("a/b/c", 1.0, &[])]).contains("\"a/b/c\""));
        assert!(refused(&[node_resource("a b", 1.0, &[])]).contains("has characters"));
        assert!(refused(&[node_resource(&"x".repeat(254), 1.0, &[])]).contains("253"));
        assert_eq!(
            refused(&[node_resource("w", f64::NAN, &[])]),
            "the widget plugin reported node resource w with allocatable NaN, not a finite non-negative number"
        );
        assert!(refused(&[node_resource("w", 1.0, &[1.0, -1.0])]).contains("allocatable -1"));
        let mut infinite_capacity = node_resource("w", 1.0, &[]);
        infinite_capacity.capacity = f64::INFINITY;
        assert!(refused(&[infinite_capacity]).contains("capacity inf"));
        let many: Vec<AllocatableResource> = (0..=MAX_NODE_RESOURCES)
            .map(|i| node_resource(&format!("r{i}"), 1.0, &[]))
            .collect();
        assert!(refused(&many).contains("65 node resources"));
        let wide = node_resource("w", 1.0, &vec![0.0; MAX_NUMA_ENTRIES + 1]);
        assert!(refused(&[wide]).contains("1025 per-NUMA amounts"));
    }
}
