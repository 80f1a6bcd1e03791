//! The `qosResourceManager` section: resource plugins (kubewharf's QoS
//! Resource Manager) hosted by the agent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use pinion_plugins::builtin::{self, Kind};

use super::{field_error, parse_go_duration, ConfigError};

/// The file form.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QrmFileConfig {
    pub enabled: Option<bool>,
    pub plugin_registration_dir: Option<PathBuf>,
    pub registration_socket: Option<PathBuf>,
    pub reconcile_period: Option<String>,
    pub rpc_timeout: Option<String>,
    pub resource_names_map: Option<BTreeMap<String, String>>,
    /// Pinion's plugins the agent runs itself: `cpu`, `memory`, `nic`.
    pub builtin_plugins: Option<Vec<String>>,
    /// Their configuration, by plugin name (the keys of `pinion plugin
    /// serve --config`).
    pub plugins: Option<BTreeMap<String, serde_yaml_ng::Value>>,
}

/// One of Pinion's plugins run by the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinPlugin {
    pub config: builtin::Config,
    /// The CPU plugin's configuration names no reserved CPUs: it takes the
    /// agent's (so both keep the same CPUs for the system).
    pub reservation_from_agent: bool,
}

/// The validated section.
#[derive(Debug, Clone, PartialEq)]
pub struct QrmConfig {
    pub enabled: bool,
    /// Watched for plugin sockets (katalyst plugins: `--qrm-socket-dirs`).
    pub plugin_registration_dir: PathBuf,
    /// Pinion's `Registration.Register` socket (device-plugin-style
    /// registration).
    pub registration_socket: PathBuf,
    /// How often plugins with `need_reconcile` are asked for their
    /// allocations.
    pub reconcile_period: Duration,
    /// The deadline of every plugin call (hints, allocation, removal…).
    pub rpc_timeout: Duration,
    /// Requested resource name → the plugin resource serving it.
    pub resource_names_map: BTreeMap<String, String>,
    /// Pinion's plugins the agent serves in its own process, in the
    /// watched directory, through the same registration as any plugin.
    pub builtin: Vec<BuiltinPlugin>,
}

/// Defaults: plugins register in `<stateDir>/plugins_registry`, the
/// registration socket is `<stateDir>/resource-plugins/kubelet.sock`,
/// reconcile every 3 s (the QoS Resource Manager proposal's period), 10 s
/// per call.
pub const DEFAULT_RECONCILE_PERIOD: Duration = Duration::from_secs(3);
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

impl QrmConfig {
    /// The section for an agent whose state lives in `state_dir`; `gate`
    /// is the feature gate `QoSResourceManager` when `featureGates` sets it
    /// (the proposal's switch, the same as `enabled`).
    pub fn resolve(
        file: Option<QrmFileConfig>,
        state_dir: &Path,
        gate: Option<bool>,
    ) -> Result<Self, ConfigError> {
        let mut file = file.unwrap_or_default();
        if let Some(on) = gate {
            if file.enabled.is_some_and(|enabled| enabled != on) {
                return Err(field_error(
                    "featureGates.QoSResourceManager",
                    &on.to_string(),
                    &format!(
                        "contradicts qosResourceManager.enabled: {}; set one of them",
                        !on
                    ),
                ));
            }
            file.enabled = Some(on);
        }
        let period = |field, text: Option<&str>, default| -> Result<Duration, ConfigError> {
            let Some(text) = text else { return Ok(default) };
            let value =
                parse_go_duration(text).map_err(|reason| field_error(field, text, &reason))?;
            if value.is_zero() {
                return Err(field_error(field, text, &"must be greater than zero"));
            }
            Ok(value)
        };
        let reconcile_period = period(
            "qosResourceManager.reconcilePeriod",
            file.reconcile_period.as_deref(),
            DEFAULT_RECONCILE_PERIOD,
        )?;
        let rpc_timeout = period(
            "qosResourceManager.rpcTimeout",
            file.rpc_timeout.as_deref(),
            DEFAULT_RPC_TIMEOUT,
        )?;
        let resource_names_map = file.resource_names_map.unwrap_or_default();
        for (from, to) in &resource_names_map {
            if from.is_empty() || to.is_empty() || from == to {
                return Err(field_error(
                    "qosResourceManager.resourceNamesMap",
                    &format!("{from}={to}"),
                    &"names must be non-empty and differ",
                ));
            }
        }
        let builtin = builtin_plugins(file.builtin_plugins.as_deref(), file.plugins.as_ref())?;
        if file.enabled == Some(false) && !builtin.is_empty() {
            return Err(field_error(
                "qosResourceManager.enabled",
                "false",
                &"builtinPlugins needs the manager: remove enabled: false or the plugins",
            ));
        }
        let config = Self {
            enabled: file.enabled.unwrap_or(!builtin.is_empty()),
            plugin_registration_dir: file
                .plugin_registration_dir
                .unwrap_or_else(|| state_dir.join("plugins_registry")),
            registration_socket: file
                .registration_socket
                .unwrap_or_else(|| state_dir.join("resource-plugins").join("kubelet.sock")),
            reconcile_period,
            rpc_timeout,
            resource_names_map,
            builtin,
        };
        if config
            .registration_socket
            .starts_with(&config.plugin_registration_dir)
        {
            return Err(field_error(
                "qosResourceManager.registrationSocket",
                &config.registration_socket.display().to_string(),
                &"must not lie in pluginRegistrationDir (the watcher would take it for a plugin)",
            ));
        }
        Ok(config)
    }
}

/// `builtinPlugins` and `plugins`, validated: known names, no duplicate,
/// no configuration of a plugin that does not run, each configuration of
/// its plugin's type.
fn builtin_plugins(
    names: Option<&[String]>,
    configs: Option<&BTreeMap<String, serde_yaml_ng::Value>>,
) -> Result<Vec<BuiltinPlugin>, ConfigError> {
    const LIST: &str = "qosResourceManager.builtinPlugins";
    let mut kinds: Vec<Kind> = Vec::new();
    for name in names.unwrap_or_default() {
        let kind = Kind::parse(name).map_err(|err| field_error(LIST, name, &err))?;
        if kinds.contains(&kind) {
            return Err(field_error(LIST, name, &"listed twice"));
        }
        kinds.push(kind);
    }
    let empty = BTreeMap::new();
    let configs = configs.unwrap_or(&empty);
    for name in configs.keys() {
        let kind = Kind::parse(name)
            .map_err(|err| field_error("qosResourceManager.plugins", name, &err))?;
        if !kinds.contains(&kind) {
            return Err(field_error(
                "qosResourceManager.plugins",
                name,
                &"configured but not in builtinPlugins",
            ));
        }
    }
    kinds
        .into_iter()
        .map(|kind| {
            let value = configs.get(kind.name());
            let field = match kind {
                Kind::Cpu => "qosResourceManager.plugins.cpu",
                Kind::Memory => "qosResourceManager.plugins.memory",
                Kind::Nic => "qosResourceManager.plugins.nic",
            };
            let config = match value {
                None | Some(serde_yaml_ng::Value::Null) => builtin::Config::default_for(kind),
                Some(value) => {
                    let bad = |err: serde_yaml_ng::Error| {
                        let shown = serde_yaml_ng::to_string(value).unwrap_or_default();
                        field_error(field, shown.trim(), &err)
                    };
                    match kind {
                        Kind::Cpu => builtin::Config::Cpu(
                            serde_yaml_ng::from_value(value.clone()).map_err(bad)?,
                        ),
                        Kind::Memory => builtin::Config::Memory(
                            serde_yaml_ng::from_value(value.clone()).map_err(bad)?,
                        ),
                        Kind::Nic => builtin::Config::Nic(
                            serde_yaml_ng::from_value(value.clone()).map_err(bad)?,
                        ),
                    }
                }
            };
            let names_reservation = value
                .and_then(serde_yaml_ng::Value::as_mapping)
                .is_some_and(|map| {
                    map.contains_key("reservedCpus") || map.contains_key("reservedCpuList")
                });
            Ok(BuiltinPlugin {
                config,
                reservation_from_agent: kind == Kind::Cpu && !names_reservation,
            })
        })
        .collect()
}
