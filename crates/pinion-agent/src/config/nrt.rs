//! The `nodeResourceTopology` section: publishing the node's
//! NodeResourceTopology object to the API server (docs/nrt.md).

use std::path::PathBuf;
use std::time::Duration;

use pinion_core::nrt::Method;
use serde::Deserialize;

use super::{field_error, parse_go_duration, ConfigError};

/// Default `resyncPeriod`: the exporter's `--sleep-interval`.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(60);
/// Default `updateDelay`: changes within it go in one update.
pub const DEFAULT_UPDATE_DELAY: Duration = Duration::from_millis(200);
/// Default `nodeStatusCheckPeriod`: kubelet's `nodeStatusUpdateFrequency`.
pub const DEFAULT_NODE_STATUS_CHECK: Duration = Duration::from_secs(10);
/// Default `requestTimeout`: how long one API request may go unanswered.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The file form.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NrtFileConfig {
    /// `true`: publish (start fails without credentials); `false`: never;
    /// absent: publish when credentials are found.
    pub publish: Option<bool>,
    /// A kubeconfig file (standalone agents); absent: the in-cluster
    /// service account when the agent runs in a pod.
    pub kubeconfig: Option<PathBuf>,
    /// The object's (and the Node's) name; absent: `NODE_NAME`, else the
    /// host name.
    pub node_name: Option<String>,
    /// `with-exclusive-resources` (default) or `all`.
    pub pods_fingerprint_method: Option<String>,
    /// A full update at least this often (Go duration; `0` = only on changes).
    pub resync_period: Option<String>,
    /// How long an update waits for more changes after the first one.
    pub update_delay: Option<String>,
    /// The resource plugins' extended resources in the Node's status:
    /// `true` (start fails without credentials or plugins), `false`, or
    /// absent: when credentials are found and the QoS Resource Manager is on.
    pub node_status: Option<bool>,
    /// How often the Node's status is read back and corrected (Go
    /// duration; `0` = never).
    pub node_status_check_period: Option<String>,
    /// How long one request to the API server may go unanswered before it
    /// is abandoned and retried (Go duration, more than 0).
    pub request_timeout: Option<String>,
    /// The node's pods' extended-resource requests read from the API server
    /// for NRI admissions: `true` (start fails without credentials or
    /// without the QoS Resource Manager as an NRI plugin), `false`, or
    /// absent: when all of them are there.
    pub pod_requests: Option<bool>,
}

/// The validated section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NrtConfig {
    pub publish: Option<bool>,
    pub kubeconfig: Option<PathBuf>,
    pub node_name: Option<String>,
    pub method: Method,
    pub resync_period: Duration,
    pub update_delay: Duration,
    pub node_status: Option<bool>,
    pub node_status_check_period: Duration,
    pub request_timeout: Duration,
    pub pod_requests: Option<bool>,
}

impl Default for NrtConfig {
    fn default() -> Self {
        Self {
            publish: None,
            kubeconfig: None,
            node_name: None,
            method: Method::default(),
            resync_period: DEFAULT_RESYNC,
            update_delay: DEFAULT_UPDATE_DELAY,
            node_status: None,
            node_status_check_period: DEFAULT_NODE_STATUS_CHECK,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            pod_requests: None,
        }
    }
}

impl NrtConfig {
    pub fn resolve(file: Option<NrtFileConfig>) -> Result<Self, ConfigError> {
        let file = file.unwrap_or_default();
        let defaults = Self::default();
        let method = match &file.pods_fingerprint_method {
            Some(text) => Method::parse(text).map_err(|err| {
                field_error("nodeResourceTopology.podsFingerprintMethod", text, &err)
            })?,
            None => defaults.method,
        };
        let duration = |field: &'static str, text: Option<&String>, default: Duration| match text {
            Some(text) => parse_go_duration(text).map_err(|err| field_error(field, text, &err)),
            None => Ok(default),
        };
        if let Some(name) = &file.node_name {
            check_node_name(name, "nodeResourceTopology.nodeName")?;
        }
        if file
            .kubeconfig
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(field_error(
                "nodeResourceTopology.kubeconfig",
                "",
                &"must not be empty",
            ));
        }
        let request_timeout = duration(
            "nodeResourceTopology.requestTimeout",
            file.request_timeout.as_ref(),
            defaults.request_timeout,
        )?;
        if request_timeout.is_zero() {
            return Err(field_error(
                "nodeResourceTopology.requestTimeout",
                file.request_timeout.as_deref().unwrap_or_default(),
                &"must be more than 0 (a request without a deadline can wait for ever)",
            ));
        }
        Ok(Self {
            publish: file.publish,
            kubeconfig: file.kubeconfig,
            node_name: file.node_name,
            method,
            resync_period: duration(
                "nodeResourceTopology.resyncPeriod",
                file.resync_period.as_ref(),
                defaults.resync_period,
            )?,
            update_delay: duration(
                "nodeResourceTopology.updateDelay",
                file.update_delay.as_ref(),
                defaults.update_delay,
            )?,
            node_status: file.node_status,
            node_status_check_period: duration(
                "nodeResourceTopology.nodeStatusCheckPeriod",
                file.node_status_check_period.as_ref(),
                defaults.node_status_check_period,
            )?,
            request_timeout,
            pod_requests: file.pod_requests,
        })
    }
}

/// A Kubernetes object name (RFC 1123 subdomain: lowercase letters,
/// digits, `-` and `.`, each dot-separated part starting and ending with a
/// letter or digit, at most 253), as the API server checks a Node's and
/// the object's name; `field` names where the value came from.
pub fn check_node_name(name: &str, field: &'static str) -> Result<(), ConfigError> {
    match pinion_core::k8s_names::dns1123_subdomain_defect(name) {
        None => Ok(()),
        Some(defect) => Err(field_error(
            field,
            name,
            &format!("not a valid node name: {defect}"),
        )),
    }
}
