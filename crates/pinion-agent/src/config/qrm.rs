//! The `qosResourceManager` section: resource plugins (kubewharf's QoS
//! Resource Manager) hosted by the agent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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
}

/// The validated section.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// Defaults: plugins register in `<stateDir>/plugins_registry`, the
/// registration socket is `<stateDir>/resource-plugins/kubelet.sock`,
/// reconcile every 5 s, 10 s per call.
pub const DEFAULT_RECONCILE_PERIOD: Duration = Duration::from_secs(5);
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

impl QrmConfig {
    /// The section for an agent whose state lives in `state_dir`.
    pub fn resolve(file: Option<QrmFileConfig>, state_dir: &Path) -> Result<Self, ConfigError> {
        let file = file.unwrap_or_default();
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
        let config = Self {
            enabled: file.enabled.unwrap_or(false),
            plugin_registration_dir: file
                .plugin_registration_dir
                .unwrap_or_else(|| state_dir.join("plugins_registry")),
            registration_socket: file
                .registration_socket
                .unwrap_or_else(|| state_dir.join("resource-plugins").join("kubelet.sock")),
            reconcile_period,
            rpc_timeout,
            resource_names_map,
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
