//! KEP-5894's `systemPartition` (kubelet's `NodeSystemPartition` gate,
//! alpha in v1.37): pods of the named namespaces run on the partition's
//! CPUs; see docs/housekeeping.md and, for what a node agent cannot do as
//! kubelet does, docs/differences-from-kubelet.md.

use std::collections::BTreeSet;

use pinion_core::{CpuSet, Quantity};
use pinion_host::cgroup::ContainerCgroup;
use serde::Deserialize;

use super::housekeeping::parse_cgroup_path;
use super::{field_error, scalar_text, ConfigError};

/// kubelet's gate.
pub const GATE: &str = "NodeSystemPartition";

/// Where kubelet puts the partition's pods (KEP-5894's `kubepods/system`),
/// with its systemd cgroup driver and with its cgroupfs one: the cgroups
/// `memoryLimit` is written to when `systemPartition.cgroup` names none
/// (the first that exists).
pub const DEFAULT_CGROUPS: [&str; 2] =
    ["/kubepods.slice/kubepods-system.slice", "/kubepods/system"];

/// The file form (kubelet's field names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SystemPartitionFileConfig {
    pub memory_limit: Option<serde_yaml_ng::Value>,
    pub cpuset: Option<String>,
    pub namespaces: Option<Vec<String>>,
    /// Pinion's addition: the partition's parent cgroup, whose memory
    /// `memoryLimit` limits (default [`DEFAULT_CGROUPS`]).
    pub cgroup: Option<String>,
}

/// The validated partition (present only with the gate on and at least one
/// namespace, as kubelet enables it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPartition {
    /// The CPUs of the partition's containers (`None`: the shared pool, as
    /// without the partition).
    pub cpuset: Option<CpuSet>,
    /// `memoryLimit` in bytes, written to the partition's cgroup.
    pub memory_limit: Option<u64>,
    /// The partition's parent cgroup candidates, relative to the hierarchy
    /// mount: `memoryLimit` goes to the first that exists.
    pub cgroups: Vec<ContainerCgroup>,
    pub namespaces: BTreeSet<String>,
}

impl SystemPartition {
    /// Validates the section: refused without the gate; `cpuset` a
    /// non-empty cpu list within `reservedSystemCPUs` when that is set (the
    /// machine's check comes at start); `memoryLimit` a positive quantity;
    /// namespaces valid Kubernetes namespace names.
    pub fn resolve(
        file: Option<SystemPartitionFileConfig>,
        gate: bool,
        reserved: Option<&CpuSet>,
    ) -> Result<Option<Self>, ConfigError> {
        let Some(file) = file else { return Ok(None) };
        if !gate {
            return Err(field_error(
                "systemPartition",
                "(set)",
                &format!("needs feature gate {GATE} (featureGates: {{{GATE}: true}})"),
            ));
        }
        let cpuset = match file.cpuset.as_deref() {
            None => None,
            Some(text) => {
                let set = CpuSet::parse_list(text)
                    .map_err(|err| field_error("systemPartition.cpuset", text, &err))?;
                if set.is_empty() {
                    return Err(field_error(
                        "systemPartition.cpuset",
                        text,
                        &"must name at least one cpu",
                    ));
                }
                if let Some(reserved) = reserved.filter(|r| !set.is_subset(r)) {
                    return Err(field_error(
                        "systemPartition.cpuset",
                        text,
                        &format!("must be within reservedSystemCPUs {reserved}"),
                    ));
                }
                Some(set)
            }
        };
        let memory_limit = match &file.memory_limit {
            None => None,
            Some(value) => {
                let text = scalar_text(value).ok_or_else(|| {
                    field_error(
                        "systemPartition.memoryLimit",
                        &format!("{value:?}"),
                        &"must be a quantity",
                    )
                })?;
                let quantity = Quantity::parse(&text)
                    .map_err(|err| field_error("systemPartition.memoryLimit", &text, &err))?;
                if quantity.is_zero() {
                    return Err(field_error(
                        "systemPartition.memoryLimit",
                        &text,
                        &"must be greater than zero",
                    ));
                }
                Some(quantity.value())
            }
        };
        let cgroups = match file.cgroup.as_deref() {
            Some(text) => vec![parse_cgroup_path("systemPartition.cgroup", text)?],
            None => DEFAULT_CGROUPS
                .iter()
                .map(|text| parse_cgroup_path("systemPartition.cgroup", text))
                .collect::<Result<_, _>>()?,
        };
        let mut namespaces = BTreeSet::new();
        for name in file.namespaces.unwrap_or_default() {
            // A namespace name is a DNS-1123 label.
            if let Some(reason) = pinion_core::k8s_names::dns1123_label_defect(&name) {
                return Err(field_error("systemPartition.namespaces", &name, &reason));
            }
            namespaces.insert(name);
        }
        if namespaces.is_empty() {
            // kubelet's rule: no namespace, no partition.
            return Ok(None);
        }
        Ok(Some(Self {
            cpuset,
            memory_limit,
            cgroups,
            namespaces,
        }))
    }

    /// Whether a pod of `namespace` belongs to the partition.
    #[must_use]
    pub fn selects(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinion_core::testing::cpus as set;

    fn file(
        cpuset: Option<&str>,
        memory: Option<&str>,
        namespaces: &[&str],
    ) -> Option<SystemPartitionFileConfig> {
        Some(SystemPartitionFileConfig {
            memory_limit: memory.map(serde_yaml_ng::Value::from),
            cpuset: cpuset.map(str::to_string),
            namespaces: Some(namespaces.iter().map(ToString::to_string).collect()),
            cgroup: None,
        })
    }

    fn field_of(err: ConfigError) -> (&'static str, String) {
        match err {
            ConfigError::Field { field, value, .. } => (field, value),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_valid_partition_keeps_its_cpus_bytes_and_namespaces() {
        let p = SystemPartition::resolve(
            file(Some("0-1"), Some("2Gi"), &["kube-system"]),
            true,
            Some(&set("0-1")),
        )
        .expect("valid")
        .expect("active");
        assert_eq!(p.cpuset, Some(set("0-1")));
        assert_eq!(p.memory_limit, Some(2 << 30));
        assert!(p.selects("kube-system") && !p.selects("default"));
    }

    #[test]
    fn the_section_needs_the_gate() {
        let err = SystemPartition::resolve(file(Some("0"), None, &["kube-system"]), false, None)
            .expect_err("refused");
        assert!(err.to_string().contains(GATE), "{err}");
        assert_eq!(
            SystemPartition::resolve(None, false, None).expect("fine"),
            None
        );
    }

    #[test]
    fn no_namespace_means_no_partition() {
        assert_eq!(
            SystemPartition::resolve(file(Some("0"), None, &[]), true, None).expect("fine"),
            None
        );
    }

    #[test]
    fn bad_values_are_refused_naming_field_and_value() {
        let cases = [
            (
                file(Some("0-x"), None, &["a"]),
                "systemPartition.cpuset",
                "0-x",
            ),
            (file(Some(""), None, &["a"]), "systemPartition.cpuset", ""),
            (
                file(Some("2-3"), None, &["a"]),
                "systemPartition.cpuset",
                "2-3",
            ),
            (
                file(None, Some("lots"), &["a"]),
                "systemPartition.memoryLimit",
                "lots",
            ),
            (
                file(None, Some("0"), &["a"]),
                "systemPartition.memoryLimit",
                "0",
            ),
            (
                file(None, None, &["Kube_System"]),
                "systemPartition.namespaces",
                "Kube_System",
            ),
            (
                file(None, None, &["-a"]),
                "systemPartition.namespaces",
                "-a",
            ),
        ];
        for (section, field, value) in cases {
            let err = SystemPartition::resolve(section, true, Some(&set("0-1"))).expect_err(value);
            assert_eq!(field_of(err), (field, value.to_string()));
        }
    }

    #[test]
    fn the_memory_limits_cgroup_defaults_to_kubelets_and_may_be_named() {
        let p = SystemPartition::resolve(file(None, Some("1Gi"), &["kube-system"]), true, None)
            .expect("valid")
            .expect("active");
        let paths: Vec<String> = p.cgroups.iter().map(ToString::to_string).collect();
        assert_eq!(paths, DEFAULT_CGROUPS);
        let mut named = file(None, Some("1Gi"), &["kube-system"]);
        if let Some(f) = named.as_mut() {
            f.cgroup = Some("/system-pods.slice".into());
        }
        let p = SystemPartition::resolve(named, true, None)
            .expect("valid")
            .expect("active");
        assert_eq!(p.cgroups.len(), 1);
        assert_eq!(p.cgroups[0].to_string(), "/system-pods.slice");
        for bad in ["relative", "/a/../b", "/a:b"] {
            let mut named = file(None, Some("1Gi"), &["kube-system"]);
            if let Some(f) = named.as_mut() {
                f.cgroup = Some(bad.into());
            }
            let err = SystemPartition::resolve(named, true, None).expect_err(bad);
            assert_eq!(field_of(err), ("systemPartition.cgroup", bad.to_string()));
        }
    }
}
