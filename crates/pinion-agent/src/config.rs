//! The agent's configuration: a YAML file with kubelet's key names where
//! kubelet has them, plus Pinion's own keys, overridden by command-line
//! flags. [`Config::load`] validates everything it can without looking at
//! the machine and names the offending field; the policy itself is built
//! against the discovered topology when the agent starts.
//!
//! A key absent from the file takes Pinion's default, the same as without a
//! file (`pinion_core::policy::defaults`: `static` policy, one CPU reserved
//! when no reservation is set); `pinion-agent --help` prints the table.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pinion_core::policy::{defaults, FeatureGates, Features, PolicyConfig, StaticPolicyOptions};
use pinion_core::{CpuSet, Quantity};
use serde::Deserialize;

pub use pinion_api::paths::DefaultPaths;

mod duration;
mod exclusive_cpus;
mod housekeeping;
mod nrt;
mod podresources;
mod qrm;
mod system_partition;

pub use duration::parse_go_duration;
pub use exclusive_cpus::{ExclusiveCpusConfig, ExclusiveCpusFileConfig};
pub use housekeeping::{contains as cgroup_contains, HousekeepingConfig, HousekeepingFileConfig};
pub use nrt::{check_node_name, NrtConfig, NrtFileConfig};
pub use podresources::{PodResourcesConfig, PodResourcesFileConfig};
pub use qrm::{BuiltinPlugin, QrmConfig, QrmFileConfig};
pub use system_partition::{SystemPartition, SystemPartitionFileConfig};

/// Default `cpuManagerReconcilePeriod` (kubelet's).
pub const DEFAULT_RECONCILE_PERIOD: Duration = Duration::from_secs(10);
/// Default metrics listen address.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9590";

/// kubelet's feature gate names for the policy option maturity levels.
const ALPHA_GATE: &str = "CPUManagerPolicyAlphaOptions";
const BETA_GATE: &str = "CPUManagerPolicyBetaOptions";
/// kubelet's gate for in-place resize of exclusive CPUs (KEP-5554).
const RESIZE_GATE: &str = "InPlacePodVerticalScalingExclusiveCPUs";
/// kubelet's gate for pod-level CPU sets (KEP-5526).
const POD_LEVEL_GATE: &str = "PodLevelResourceManagers";
/// kubelet's gate of the policy options themselves: GA and locked to true.
const OPTIONS_GATE: &str = "CPUManagerPolicyOptions";
/// The QoS Resource Manager proposal's switch (the same as
/// `qosResourceManager.enabled`).
const QRM_GATE: &str = "QoSResourceManager";

/// An invalid configuration; every variant names the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The YAML is malformed or a key or value does not fit; `message`
    /// names the field (`nri: unknown field \`enable\``).
    #[error("config file {}{}: {message}", .path.display(), position(*.line, *.column))]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    #[error("invalid {field} {value:?}: {reason}")]
    Field {
        field: &'static str,
        value: String,
        reason: String,
    },
    /// kubelet's message for a static policy without reserved CPUs.
    #[error("[cpumanager] unable to determine reserved CPU resources for static policy")]
    NoReservation,
}

impl ConfigError {
    /// The config field at fault, when there is one.
    #[must_use]
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Field { field, .. } => Some(field),
            Self::NoReservation => Some("kubeReserved.cpu/systemReserved.cpu/reservedSystemCPUs"),
            _ => None,
        }
    }
}

fn position(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(", line {line} column {column}"),
        _ => String::new(),
    }
}

fn field_error(field: &'static str, value: &str, reason: &dyn std::fmt::Display) -> ConfigError {
    ConfigError::Field {
        field,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// The file form (all keys optional).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    pub cpu_manager_policy: Option<String>,
    pub cpu_manager_policy_options: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    #[serde(rename = "reservedSystemCPUs")]
    pub reserved_system_cpus: Option<String>,
    pub kube_reserved: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    pub system_reserved: Option<BTreeMap<String, serde_yaml_ng::Value>>,
    pub cpu_manager_reconcile_period: Option<String>,
    pub topology_manager_policy: Option<String>,
    pub topology_manager_scope: Option<String>,
    pub topology_manager_policy_options: Option<BTreeMap<String, String>>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
    pub state_dir: Option<PathBuf>,
    pub sysroot: Option<PathBuf>,
    pub cgroup_root: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub metrics_addr: Option<String>,
    pub nri: Option<NriFileConfig>,
    pub qos_resource_manager: Option<QrmFileConfig>,
    pub pod_resources: Option<PodResourcesFileConfig>,
    /// Migrate a checkpoint that does not fit the configuration at start:
    /// absent, only when no running workload loses its exclusive CPUs;
    /// `true` always; `false` never (`docs/state-recovery.md`).
    pub migrate_on_start: Option<bool>,
    pub exclusive_cpus: Option<ExclusiveCpusFileConfig>,
    /// Cgroups whose cpus follow the shared pool (docs/housekeeping.md).
    pub housekeeping: Option<HousekeepingFileConfig>,
    /// `repair` (default) or `report` cpusets someone else changed.
    pub other_writers: Option<String>,
    /// KEP-5894's node system partition (gate `NodeSystemPartition`).
    pub system_partition: Option<SystemPartitionFileConfig>,
    /// Publishing the NodeResourceTopology object (docs/nrt.md).
    pub node_resource_topology: Option<NrtFileConfig>,
}

/// The `nri` section of the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NriFileConfig {
    pub enabled: Option<bool>,
    pub socket: Option<PathBuf>,
    pub plugin_name: Option<String>,
    pub plugin_index: Option<String>,
}

/// How the agent runs as an NRI plugin (external mode; a runtime-launched
/// agent is detected from `NRI_PLUGIN_*` when it starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NriConfig {
    pub enabled: bool,
    pub socket: PathBuf,
    pub plugin_name: String,
    pub plugin_index: String,
}

impl NriConfig {
    fn resolve(file: Option<NriFileConfig>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let file = file.unwrap_or_default();
        let socket = overrides
            .nri_socket
            .clone()
            .or(file.socket)
            .unwrap_or_else(|| PathBuf::from(pinion_nri::plugin::DEFAULT_SOCKET));
        let plugin_name = file
            .plugin_name
            .unwrap_or_else(|| pinion_nri::plugin::DEFAULT_NAME.to_string());
        let plugin_index = file
            .plugin_index
            .unwrap_or_else(|| pinion_nri::plugin::DEFAULT_INDEX.to_string());
        pinion_nri::plugin::validate_name(&plugin_name)
            .map_err(|err| field_error("nri.pluginName", &plugin_name, &err))?;
        pinion_nri::plugin::validate_index(&plugin_index)
            .map_err(|err| field_error("nri.pluginIndex", &plugin_index, &err))?;
        if socket.as_os_str().is_empty() {
            return Err(field_error("nri.socket", "", &"must not be empty"));
        }
        Ok(Self {
            enabled: overrides.nri || overrides.nri_socket.is_some() || file.enabled == Some(true),
            socket,
            plugin_name,
            plugin_index,
        })
    }
}

impl FileConfig {
    /// No config file given: every key at its default, as in a file that
    /// sets none.
    #[must_use]
    pub fn embedded() -> Self {
        Self::default()
    }

    /// Parses YAML text (`path` only names the source in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_yaml_ng::from_str(text).map_err(|err| syntax_error(&err, path))
    }
}

/// The position comes first (the YAML library appends it to some messages
/// and not to others, e.g. not at line 1 column 1).
fn syntax_error(err: &serde_yaml_ng::Error, path: &Path) -> ConfigError {
    let location = err.location();
    let (line, column) = (
        location.as_ref().map(serde_yaml_ng::Location::line),
        location.as_ref().map(serde_yaml_ng::Location::column),
    );
    let mut message = err.to_string();
    if let (Some(line), Some(column)) = (line, column) {
        let suffix = format!(" at line {line} column {column}");
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    ConfigError::Syntax {
        path: path.to_path_buf(),
        line,
        column,
        message,
    }
}

/// Command-line flags that override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub cgroup_root: Option<PathBuf>,
    pub sysroot: Option<PathBuf>,
    pub metrics_addr: Option<String>,
    /// `--nri`: run as an NRI plugin.
    pub nri: bool,
    /// `--nri-socket`: the runtime's NRI socket (implies `--nri`).
    pub nri_socket: Option<PathBuf>,
    /// `--podresources-socket`: where the podresources API is served.
    pub podresources_socket: Option<PathBuf>,
    /// kubelet's own flags, for operators who copy kubelet's command line.
    pub kubelet: KubeletFlags,
}

/// kubelet's CPU and Topology Manager flags; each overrides its key in the
/// file, as kubelet's flags override its config file.
#[derive(Debug, Clone, Default)]
pub struct KubeletFlags {
    /// `--cpu-manager-policy` (`cpuManagerPolicy`).
    pub cpu_manager_policy: Option<String>,
    /// `--cpu-manager-policy-options` as given: `name=value,name=value`
    /// (`cpuManagerPolicyOptions`).
    pub cpu_manager_policy_options: Option<String>,
    /// `--reserved-cpus` (`reservedSystemCPUs`).
    pub reserved_cpus: Option<String>,
    /// `--topology-manager-policy` (`topologyManagerPolicy`).
    pub topology_manager_policy: Option<String>,
    /// `--topology-manager-scope` (`topologyManagerScope`).
    pub topology_manager_scope: Option<String>,
}

impl KubeletFlags {
    /// `file` with the flags that are set in place of its keys.
    fn apply(&self, mut file: FileConfig) -> Result<FileConfig, ConfigError> {
        if let Some(policy) = &self.cpu_manager_policy {
            file.cpu_manager_policy = Some(policy.clone());
        }
        if let Some(text) = &self.cpu_manager_policy_options {
            let mut options = BTreeMap::new();
            for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
                let Some((name, value)) = pair.split_once('=') else {
                    return Err(field_error(
                        "--cpu-manager-policy-options",
                        pair,
                        &"expected NAME=VALUE (pairs separated by commas)",
                    ));
                };
                options.insert(
                    name.trim().to_string(),
                    serde_yaml_ng::Value::from(value.trim()),
                );
            }
            file.cpu_manager_policy_options = Some(options);
        }
        if let Some(cpus) = &self.reserved_cpus {
            file.reserved_system_cpus = Some(cpus.clone());
        }
        if let Some(policy) = &self.topology_manager_policy {
            file.topology_manager_policy = Some(policy.clone());
        }
        if let Some(scope) = &self.topology_manager_scope {
            file.topology_manager_scope = Some(scope.clone());
        }
        Ok(file)
    }
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub policy: PolicyConfig,
    /// The newest kubelet features, from `featureGates` (off by default):
    /// pass to `PolicyConfig::build_with`.
    pub features: Features,
    pub reconcile_period: Duration,
    pub state_dir: PathBuf,
    pub sysroot: PathBuf,
    /// Pinion's cgroup root; `None` = `<cpuset mount>/pinion`.
    pub cgroup_root: Option<PathBuf>,
    pub socket: PathBuf,
    pub metrics_addr: SocketAddr,
    pub nri: NriConfig,
    pub qrm: QrmConfig,
    pub pod_resources: PodResourcesConfig,
    /// `migrateOnStart`.
    pub migrate_on_start: crate::controller::MigrateOnStart,
    /// `exclusiveCpus`.
    pub exclusive_cpus: ExclusiveCpusConfig,
    /// `housekeeping` and `otherWriters`.
    pub housekeeping: HousekeepingConfig,
    /// `systemPartition` (with its gate on and namespaces named).
    pub system_partition: Option<SystemPartition>,
    /// `nodeResourceTopology`.
    pub nrt: NrtConfig,
}

impl Config {
    /// Reads the file named by `--config` (or takes the embedded defaults),
    /// applies the flags and validates.
    pub fn load(overrides: &Overrides, defaults: &DefaultPaths) -> Result<Self, ConfigError> {
        let file = match &overrides.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                FileConfig::parse(&text, path)?
            }
            None => FileConfig::embedded(),
        };
        Self::resolve(file, overrides, defaults)
    }

    /// Applies the flags to a parsed file and validates the result.
    pub fn resolve(
        file: FileConfig,
        overrides: &Overrides,
        defaults: &DefaultPaths,
    ) -> Result<Self, ConfigError> {
        let file = overrides.kubelet.apply(file)?;
        let (policy, features) = policy_config(&file)?;
        let reconcile_period = reconcile_period(file.cpu_manager_reconcile_period.as_deref())?;
        let metrics_text = overrides
            .metrics_addr
            .clone()
            .or(file.metrics_addr)
            .unwrap_or_else(|| DEFAULT_METRICS_ADDR.to_string());
        let metrics_addr = metrics_text
            .parse()
            .map_err(|err| field_error("metricsAddr", &metrics_text, &err))?;
        let nri = NriConfig::resolve(file.nri, overrides)?;
        let pick = |flag: &Option<PathBuf>, file: Option<PathBuf>| flag.clone().or(file);
        let state_dir = pick(&overrides.state_dir, file.state_dir)
            .unwrap_or_else(|| defaults.state_dir.clone());
        let qrm_gate = file
            .feature_gates
            .as_ref()
            .and_then(|gates| gates.get(QRM_GATE).copied());
        let qrm = QrmConfig::resolve(file.qos_resource_manager, &state_dir, qrm_gate)?;
        let pod_resources = PodResourcesConfig::resolve(
            file.pod_resources,
            overrides.podresources_socket.as_deref(),
            &state_dir,
        )?;
        let housekeeping =
            HousekeepingConfig::resolve(file.housekeeping, file.other_writers.as_deref())?;
        let partition_gate = file
            .feature_gates
            .as_ref()
            .and_then(|gates| gates.get(system_partition::GATE).copied())
            .unwrap_or(false);
        let system_partition = SystemPartition::resolve(
            file.system_partition,
            partition_gate,
            policy.reserved.as_ref(),
        )?;
        let config = Self {
            policy,
            features,
            reconcile_period,
            state_dir,
            sysroot: pick(&overrides.sysroot, file.sysroot).unwrap_or_else(|| "/".into()),
            cgroup_root: pick(&overrides.cgroup_root, file.cgroup_root),
            socket: pick(&overrides.socket, file.socket).unwrap_or_else(|| defaults.socket.clone()),
            metrics_addr,
            nri,
            qrm,
            pod_resources,
            migrate_on_start: crate::controller::MigrateOnStart::from_key(file.migrate_on_start),
            exclusive_cpus: ExclusiveCpusConfig::resolve(file.exclusive_cpus)?,
            housekeeping,
            system_partition,
            nrt: NrtConfig::resolve(file.node_resource_topology)?,
        };
        config.check_paths()?;
        Ok(config)
    }

    fn check_paths(&self) -> Result<(), ConfigError> {
        let checks: [(&'static str, Option<&PathBuf>); 4] = [
            ("stateDir", Some(&self.state_dir)),
            ("sysroot", Some(&self.sysroot)),
            ("cgroupRoot", self.cgroup_root.as_ref()),
            ("socket", Some(&self.socket)),
        ];
        for (field, path) in checks {
            let Some(path) = path else { continue };
            if path.as_os_str().is_empty() {
                return Err(field_error(field, "", &"must not be empty"));
            }
            if field == "cgroupRoot" && !path.is_absolute() {
                return Err(field_error(
                    field,
                    &path.display().to_string(),
                    &"must be an absolute path",
                ));
            }
        }
        Ok(())
    }
}

fn policy_config(file: &FileConfig) -> Result<(PolicyConfig, Features), ConfigError> {
    let name = file
        .cpu_manager_policy
        .clone()
        .unwrap_or_else(|| defaults::CPU_MANAGER_POLICY.to_string());
    if name != "none" && name != "static" {
        return Err(field_error(
            "cpuManagerPolicy",
            &name,
            &"expected \"none\" or \"static\"",
        ));
    }
    // kubelet's configuration check, whatever the Topology Manager policy
    // (which, under `none`, never reads the scope).
    if let Some(scope) = file.topology_manager_scope.as_deref() {
        if scope != "container" && scope != "pod" {
            return Err(field_error(
                "topologyManagerScope",
                scope,
                &"invalid configuration: topologyManagerScope (--topology-manager-scope) must be one of: \"container\", or \"pod\"",
            ));
        }
    }
    let (gates, features) = feature_gates(file.feature_gates.as_ref())?;
    let options = policy_options(file.cpu_manager_policy_options.as_ref())?;
    StaticPolicyOptions::parse(&options, gates)
        .map_err(|err| field_error("cpuManagerPolicyOptions", &format!("{options:?}"), &err))?;
    let reserved = match file.reserved_system_cpus.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            CpuSet::parse_list(text)
                .map_err(|err| field_error("reservedSystemCPUs", text, &err))?,
        ),
    };
    let kube = reserved_cpu(file.kube_reserved.as_ref(), "kubeReserved.cpu")?;
    let system = reserved_cpu(file.system_reserved.as_ref(), "systemReserved.cpu")?;
    // kubelet's path: the container manager's reservation entry (zero
    // left out), then the CPU manager's `getNumReservedCPUs`. The entry is
    // never zero here, so a static policy without one gets kubelet's
    // "unable to determine" (`defaults::reservation_entry`).
    let entry = defaults::reservation_entry(reserved.as_ref().map(CpuSet::len), kube, system);
    let num_reserved = match defaults::num_reserved_cpus(entry) {
        Ok(count) => count,
        Err(_) if name != "static" => 0,
        Err(_) => return Err(ConfigError::NoReservation),
    };
    let config = PolicyConfig {
        policy: Some(name),
        options,
        feature_gates: Some(gates),
        topology_manager_policy: file.topology_manager_policy.clone(),
        topology_manager_scope: file.topology_manager_scope.clone(),
        topology_manager_policy_options: file
            .topology_manager_policy_options
            .clone()
            .unwrap_or_default(),
        num_reserved: Some(num_reserved),
        reserved,
    };
    Ok((config, features))
}

/// The policy option gates and the feature switches of `featureGates`.
fn feature_gates(
    gates: Option<&BTreeMap<String, bool>>,
) -> Result<(FeatureGates, Features), ConfigError> {
    let mut out = FeatureGates::default();
    let mut features = Features::default();
    for (name, enabled) in gates.into_iter().flatten() {
        match name.as_str() {
            ALPHA_GATE => out.alpha = *enabled,
            BETA_GATE => out.beta = *enabled,
            RESIZE_GATE => features.in_place_resize_exclusive_cpus = *enabled,
            POD_LEVEL_GATE => features.pod_level_resource_managers = *enabled,
            // kubelet's text for a locked GA gate.
            OPTIONS_GATE if !*enabled => {
                return Err(field_error(
                    "featureGates",
                    name,
                    &format!("cannot set feature gate {OPTIONS_GATE} to false, feature is locked to true"),
                ))
            }
            OPTIONS_GATE => {}
            // Read by the `qosResourceManager` section.
            QRM_GATE => {}
            // Read by the `systemPartition` section.
            system_partition::GATE => {}
            _ => {
                return Err(field_error(
                    "featureGates",
                    name,
                    &format!(
                        "unknown feature gate (known: {ALPHA_GATE}, {BETA_GATE}, {OPTIONS_GATE}, {RESIZE_GATE}, {POD_LEVEL_GATE}, {QRM_GATE}, {})",
                        system_partition::GATE
                    ),
                ))
            }
        }
    }
    Ok((out, features))
}

/// Option values as text: YAML `true` and `"true"` both become `"true"`.
fn policy_options(
    options: Option<&BTreeMap<String, serde_yaml_ng::Value>>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, value) in options.into_iter().flatten() {
        let text = scalar_text(value).ok_or_else(|| {
            field_error(
                "cpuManagerPolicyOptions",
                name,
                &"the value must be a string or a boolean",
            )
        })?;
        out.insert(name.clone(), text);
    }
    Ok(out)
}

fn scalar_text(value: &serde_yaml_ng::Value) -> Option<String> {
    match value {
        serde_yaml_ng::Value::String(text) => Some(text.clone()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The `cpu` entry of a reservation map, in millicores (`None` when absent).
fn reserved_cpu(
    map: Option<&BTreeMap<String, serde_yaml_ng::Value>>,
    field: &'static str,
) -> Result<Option<u128>, ConfigError> {
    let Some(value) = map.and_then(|m| m.get("cpu")) else {
        return Ok(None);
    };
    let text = scalar_text(value)
        .ok_or_else(|| field_error(field, &format!("{value:?}"), &"must be a quantity"))?;
    let quantity = Quantity::parse(&text).map_err(|err| field_error(field, &text, &err))?;
    Ok(Some(quantity.milli_value()))
}

fn reconcile_period(text: Option<&str>) -> Result<Duration, ConfigError> {
    let Some(text) = text else {
        return Ok(DEFAULT_RECONCILE_PERIOD);
    };
    let field = "cpuManagerReconcilePeriod";
    let period = parse_go_duration(text).map_err(|reason| field_error(field, text, &reason))?;
    if period.is_zero() {
        return Err(field_error(field, text, &"must be greater than zero"));
    }
    Ok(period)
}

#[cfg(test)]
mod tests;
