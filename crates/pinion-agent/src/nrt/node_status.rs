//! The resource plugins' extended resources in the Node's `status.capacity`
//! and `status.allocatable` (the QRM proposal's `IsNodeResource`;
//! `docs/nrt.md`, "The Node's extended resources"). What is written is
//! decided by `pinion_core::node_status`; this task only talks to the API
//! server.
//!
//! One task, fed by the registry's node resources (a `watch` channel: the
//! controller and admissions never wait for it). A change is applied after
//! `updateDelay`; every `nodeStatusCheckPeriod` (once after the start, then
//! while Pinion has resources in it) the Node is read back and the
//! configuration applied again when the status no longer says what Pinion
//! wants (kubelet zeroes extended resources when it registers a
//! recreated node) or still holds a key Pinion owned before and no longer
//! wants. A failed update is retried after 1 s, doubling to 60 s.
//!
//! How: server-side apply on the `status` subresource, field manager
//! `pinion`, forced. The configuration holds only Pinion's keys, so
//! kubelet's (`cpu`, `memory`, `hugepages-*`, `pods`, …) are never in a
//! request; the API server records which keys Pinion owns, and removes a
//! key once Pinion's configuration no longer holds it — also one set
//! before an agent restart, which a merge patch could only remove if the
//! agent remembered it. Forced, because kubelet's reset takes the keys
//! over and the re-assertion must win.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{GetParams, Patch, PatchParams};
use kube::Api;
use pinion_core::node_status::{self as model, NodeStatusError, Observed};
use pinion_core::podresources::AllocatableResource;
use tokio::sync::watch;
use tokio::time::Instant;

use super::publish::{
    bounded, changed, resync_at, sleep_or_stop, stopped, task_client, PublishError, FIELD_MANAGER,
    MAX_BACKOFF, MIN_BACKOFF,
};
use super::NrtStartError;
use crate::config::NrtConfig;

/// The plugins' node resources, as the registry publishes them.
pub type NodeResources = watch::Receiver<Arc<Vec<AllocatableResource>>>;

/// The task's parts.
pub struct NodeStatusUpdater {
    node_name: String,
    client: kube::Client,
    resources: NodeResources,
    delay: Duration,
    check: Duration,
    /// Each API request's deadline (`requestTimeout`).
    timeout: Duration,
}

/// What woke the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Change,
    Check,
    Retry,
}

impl NodeStatusUpdater {
    /// An updater of Node `node_name`'s status from `resources`.
    #[must_use]
    pub fn new(
        node_name: String,
        client: kube::Client,
        resources: NodeResources,
        config: &NrtConfig,
    ) -> Self {
        Self {
            node_name,
            client,
            resources,
            delay: config.update_delay,
            check: config.node_status_check_period,
            timeout: config.request_timeout,
        }
    }

    /// Keeps the Node's status up to date until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = self.node_name.clone();
        // What the API server accepted last in this run (`None`: nothing
        // yet — the node is left alone until a plugin declares a resource
        // or the first check finds a key owned from before).
        let mut applied: Option<BTreeMap<String, u64>> = None;
        let mut refused: Vec<NodeStatusError> = Vec::new();
        let mut last_error: Option<String> = None;
        let mut backoff = MIN_BACKOFF;
        let mut retry: Option<Instant> = None;
        // The first check waits a whole period: plugins register again
        // after an agent restart before keys they own are judged stale.
        // Later ones only while Pinion has resources in the Node.
        let mut check = self.next_check();
        let mut first_check_done = false;
        loop {
            if check.is_none() && applied.as_ref().is_some_and(|a| !a.is_empty()) {
                check = self.next_check();
            }
            let wake = tokio::select! {
                () = changed(&mut self.resources) => Wake::Change,
                () = resync_at(check) => Wake::Check,
                () = resync_at(retry) => Wake::Retry,
                () = stopped(&mut stop) => return,
            };
            if wake == Wake::Change && !sleep_or_stop(self.delay, &mut stop).await {
                return;
            }
            let desired = self.desired(&mut refused);
            let apply = match wake {
                Wake::Change => {
                    applied.as_ref() != Some(&desired) && (applied.is_some() || !desired.is_empty())
                }
                Wake::Retry => true,
                Wake::Check => {
                    let observed = tokio::select! {
                        observed = bounded(self.timeout, observe(&nodes, &name)) => observed,
                        () = stopped(&mut stop) => return,
                    };
                    first_check_done |= observed.is_ok();
                    check = (!first_check_done).then(|| self.next_check()).flatten();
                    match observed {
                        Ok(observed) => model::needs_apply(&observed, &desired),
                        Err(err) => {
                            note_error(&mut last_error, &name, &format!("read: {err}"), None);
                            false
                        }
                    }
                }
            };
            if !apply {
                continue;
            }
            retry = None;
            let body = model::apply_configuration(&name, &desired);
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let patch = Patch::Apply(&body);
            let sent = tokio::select! {
                sent = bounded(self.timeout, nodes.patch_status(&name, &params, &patch)) => sent,
                () = stopped(&mut stop) => return,
            };
            match sent {
                Ok(_) => {
                    if applied.as_ref() != Some(&desired) {
                        tracing::info!(node = %name, resources = ?desired, "node status: resource plugins' extended resources updated");
                    }
                    applied = Some(desired);
                    last_error = None;
                    backoff = MIN_BACKOFF;
                }
                Err(err) => {
                    note_error(
                        &mut last_error,
                        &name,
                        &format!("update: {err}"),
                        Some(backoff),
                    );
                    retry = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    fn next_check(&self) -> Option<Instant> {
        (!self.check.is_zero()).then(|| Instant::now() + self.check)
    }

    /// The latest quantities to write; each newly refused resource is
    /// logged once, naming it.
    fn desired(&mut self, refused: &mut Vec<NodeStatusError>) -> BTreeMap<String, u64> {
        let resources = self.resources.borrow_and_update().clone();
        let extended = model::extended(&resources);
        for error in &extended.refused {
            if !refused.contains(error) {
                tracing::warn!(node = %self.node_name, "{error}");
            }
        }
        *refused = extended.refused;
        extended.quantities
    }
}

/// Logs `error` when it differs from the last one (a down API server is
/// one warning, not one per attempt).
fn note_error(last: &mut Option<String>, node: &str, error: &str, retry_in: Option<Duration>) {
    if last.as_deref() != Some(error) {
        tracing::warn!(node = %node, error = %error, retry_in = ?retry_in, "node status not kept: api server");
        *last = Some(error.to_string());
    }
}

/// The Node's status as the API server's cache holds it, and the keys
/// Pinion's field manager owns there.
async fn observe(nodes: &Api<Node>, name: &str) -> Result<Observed, kube::Error> {
    let node = nodes.get_with(name, &GetParams::any()).await?;
    let quantities =
        |map: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            map.unwrap_or_default()
                .into_iter()
                .map(|(name, quantity)| (name, quantity.0))
                .collect()
        };
    let status = node.status.unwrap_or_default();
    let owned = node
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter(|entry| {
            entry.manager.as_deref() == Some(FIELD_MANAGER)
                && entry.subresource.as_deref() == Some("status")
        })
        .filter_map(|entry| entry.fields_v1.as_ref())
        .flat_map(|fields| model::owned_resources(&fields.0))
        .collect();
    Ok(Observed {
        capacity: quantities(status.capacity),
        allocatable: quantities(status.allocatable),
        owned,
    })
}

/// Whether the node-status task runs, and its API server client: with the
/// QoS Resource Manager on (`resources`) and credentials found, unless
/// `nodeStatus: false`; `nodeStatus: true` makes missing plugins or
/// credentials a start error.
pub async fn start(
    config: &NrtConfig,
    node_name: Result<String, crate::config::ConfigError>,
    resources: Option<NodeResources>,
    env: impl Fn(&str) -> Option<String>,
    stop: &watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, NrtStartError> {
    let asked = config.node_status == Some(true);
    if config.node_status == Some(false) {
        return Ok(None);
    }
    let Some(resources) = resources else {
        return if asked {
            Err(PublishError::NodeStatusWithoutPlugins.into())
        } else {
            Ok(None)
        };
    };
    let Some(client) = task_client(
        config,
        "nodeStatus",
        asked,
        PublishError::NodeStatusWithoutCredentials,
        "resource plugins' extended resources not kept in the node's status",
        env,
    )
    .await?
    else {
        return Ok(None);
    };
    let node_name = node_name?;
    tracing::info!(node = %node_name, "keeping the resource plugins' extended resources in the node's status");
    let updater = NodeStatusUpdater::new(node_name, client, resources, config);
    Ok(Some(tokio::spawn(updater.run(stop.clone()))))
}
