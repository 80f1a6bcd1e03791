//! Keeping the node's NodeResourceTopology object up to date on the API
//! server, with `kube` (server-side apply, field manager `pinion`).
//!
//! One task: it wakes when the controller publishes a snapshot or the
//! plugins' node resources change, waits `updateDelay` so that a burst of
//! admissions and releases goes in one update, builds the object from the
//! latest snapshot and sends it when it differs from the last one the API
//! server accepted — or every `resyncPeriod` regardless. A failed update is
//! retried with a backoff (1 s doubling to 60 s), always with the latest
//! snapshot; admissions never wait for any of it.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::Api;
use pinion_api::local::NrtPublishing;
use tokio::sync::watch;
use tokio::time::Instant;

use super::NrtSource;
use crate::config::NrtConfig;

/// The field manager of Pinion's server-side applies.
pub const FIELD_MANAGER: &str = "pinion";
/// The resource's plural.
pub const PLURAL: &str = "noderesourcetopologies";
/// First wait after a failed update.
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Errors of setting up the publisher; each names what was tried.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("nodeResourceTopology.publish is true, but there are no api server credentials: set nodeResourceTopology.kubeconfig, or run in a pod (KUBERNETES_SERVICE_HOST is not set)")]
    NoCredentials,
    #[error("cannot read kubeconfig {}: {source}", .path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("nodeResourceTopology.nodeStatus is true, but there are no api server credentials: set nodeResourceTopology.kubeconfig, or run in a pod (KUBERNETES_SERVICE_HOST is not set)")]
    NodeStatusWithoutCredentials,
    #[error("nodeResourceTopology.nodeStatus is true, but the QoS resource manager is off (qosResourceManager): no resource plugin can declare node resources")]
    NodeStatusWithoutPlugins,
    #[error("nodeResourceTopology.podRequests is true, but there are no api server credentials: set nodeResourceTopology.kubeconfig, or run in a pod (KUBERNETES_SERVICE_HOST is not set)")]
    PodRequestsWithoutCredentials,
    #[error("nodeResourceTopology.podRequests is true, but the agent runs no QoS resource manager as an NRI plugin (qosResourceManager, nri): nothing would read the pods' requests")]
    PodRequestsWithoutNriPlugins,
    #[error("in-cluster credentials: {0}")]
    InCluster(#[from] kube::config::InClusterError),
    #[error("api server client: {0}")]
    Client(#[from] kube::Error),
}

/// Where the credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Kubeconfig(PathBuf),
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, its token and CA).
    InCluster,
}

/// Which credentials publishing uses, if it is on: `publish: false` never;
/// a kubeconfig when one is configured; the service account in a pod; else
/// off — or an error when `publish: true` asked for it.
pub fn credentials(
    config: &NrtConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Credentials>, PublishError> {
    if config.publish == Some(false) {
        return Ok(None);
    }
    match found_credentials(config, env) {
        None if config.publish == Some(true) => Err(PublishError::NoCredentials),
        found => Ok(found),
    }
}

/// The credentials there are, whatever `publish` says: the configured
/// kubeconfig, else the pod's service account when the agent runs in a pod.
pub fn found_credentials(
    config: &NrtConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Option<Credentials> {
    if let Some(path) = &config.kubeconfig {
        return Some(Credentials::Kubeconfig(path.clone()));
    }
    let set = |key: &str| env(key).is_some_and(|v| !v.is_empty());
    (set("KUBERNETES_SERVICE_HOST") && set("KUBERNETES_SERVICE_PORT"))
        .then_some(Credentials::InCluster)
}

/// Whether publishing may be given up when `credentials` cannot be used:
/// only for the service account found on its own (`publish` unset) — every
/// pod has `KUBERNETES_SERVICE_HOST`, also one without a token (Pinion's
/// DaemonSet mounts none) — never when publishing was asked for.
#[must_use]
pub fn optional(config: &NrtConfig, credentials: &Credentials) -> bool {
    config.publish.is_none() && *credentials == Credentials::InCluster
}

/// The API-server client of a task beside the publisher that a switch of
/// `nodeResourceTopology` turns on (`key`: `nodeStatus`, `podRequests`),
/// once the caller found what the task needs: `None` without credentials
/// (an error, `without_credentials`, when the switch `asked` for the task),
/// or with the pod's service account unusable and the task not asked for
/// (then a warning says `what` is off and which key makes it an error).
pub async fn task_client(
    config: &NrtConfig,
    key: &str,
    asked: bool,
    without_credentials: PublishError,
    what: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<kube::Client>, PublishError> {
    let Some(credentials) = found_credentials(config, env) else {
        return if asked {
            Err(without_credentials)
        } else {
            Ok(None)
        };
    };
    let client_config = match client_config(&credentials).await {
        Ok(client_config) => client_config,
        Err(err) if !asked && credentials == Credentials::InCluster => {
            tracing::warn!(error = %err, "{what} (in a pod without a service account token?); nodeResourceTopology.{key}: true makes this an error");
            return Ok(None);
        }
        Err(err) => return Err(err),
    };
    Ok(Some(kube::Client::try_from(client_config)?))
}

/// The client configuration for `credentials`.
pub async fn client_config(credentials: &Credentials) -> Result<kube::Config, PublishError> {
    match credentials {
        Credentials::InCluster => Ok(kube::Config::incluster()?),
        Credentials::Kubeconfig(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
                PublishError::Kubeconfig {
                    path: path.clone(),
                    source,
                }
            })?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(|source| PublishError::Kubeconfig {
                path: path.clone(),
                source,
            })
        }
    }
}

/// The resource as the dynamic API sees it.
#[must_use]
pub fn resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("topology.node.k8s.io", "v1alpha2", pinion_core::nrt::KIND);
    ApiResource::from_gvk_with_plural(&gvk, PLURAL)
}

/// The publisher task's parts.
pub struct Publisher {
    source: NrtSource,
    client: kube::Client,
    resync: Duration,
    delay: Duration,
    /// Each API request's deadline (`requestTimeout`).
    timeout: Duration,
    status: watch::Sender<NrtPublishing>,
}

impl Publisher {
    /// A publisher of `source`'s object through `client`; the source
    /// reports its status from now on.
    #[must_use]
    pub fn new(
        source: &mut NrtSource,
        client: kube::Client,
        config: &NrtConfig,
        server: String,
    ) -> Self {
        let (status, status_rx) = watch::channel(NrtPublishing {
            server: Some(server),
            ..NrtPublishing::default()
        });
        *source = source.clone().with_status(status_rx);
        Self {
            source: source.clone(),
            client,
            resync: config.resync_period,
            delay: config.update_delay,
            timeout: config.request_timeout,
            status,
        }
    }

    /// Keeps the object up to date until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let objects: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource());
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = self.source.node_name().to_string();
        let (mut snapshots, mut plugins) = self.source.changes();
        let mut owner: Option<String> = None;
        // A resync reads the Node again (it may have been re-created).
        let mut owner_stale = false;
        let mut node_error: Option<String> = None;
        // While the Node cannot be read, when it is asked again.
        let mut node_retry = NodeRetry::default();
        let mut last_sent: Option<serde_json::Value> = None;
        let mut backoff = MIN_BACKOFF;
        let mut next_resync: Option<Instant> = None;
        // The first update goes at once.
        let mut wait = Some(Duration::ZERO);
        loop {
            let woke = match wait {
                Some(delay) => sleep_or_stop(delay, &mut stop).await,
                None => {
                    tokio::select! {
                        () = changed(&mut snapshots) => true,
                        () = changed(&mut plugins) => true,
                        () = resync_at(next_resync) => {
                            // The Node may have been re-created since (a
                            // new UID): an owner reference to the old one
                            // has the garbage collector delete the object.
                            // Kept until the Node answers: a read that
                            // fails (a timeout) must not drop the owner
                            // reference of the object it is applied to.
                            last_sent = None;
                            owner_stale = true;
                            node_retry = NodeRetry::default();
                            true
                        }
                        () = stopped(&mut stop) => false,
                    }
                }
            };
            if !woke {
                return;
            }
            if wait.is_none() {
                // A change: let the burst it belongs to arrive first.
                wait = Some(self.delay);
                continue;
            }
            snapshots.borrow_and_update();
            plugins.borrow_and_update();
            // A hung API server must not hold the agent's stop up.
            if (owner.is_none() || owner_stale) && node_retry.due(Instant::now()) {
                let read = tokio::select! {
                    read = node_uid(&nodes, &name, self.timeout, &mut node_error) => read,
                    () = stopped(&mut stop) => return,
                };
                match read {
                    NodeRead::Found(uid) => {
                        owner = Some(uid);
                        owner_stale = false;
                        node_retry = NodeRetry::default();
                    }
                    NodeRead::Missing => {
                        owner = None;
                        owner_stale = false;
                        node_retry = node_retry.missed(Instant::now());
                    }
                    NodeRead::Unreadable => node_retry = node_retry.missed(Instant::now()),
                }
            }
            // The fit attributes ask the allocator many times: off the
            // runtime's thread, which also serves NRI and the local API.
            let source = self.source.clone();
            let uid = owner.clone();
            let object = match off_thread(move || source.object(uid.as_deref())).await {
                Ok(object) => object,
                Err(why) => {
                    // Before the forty-fifth session the publisher ended
                    // here without a word: the object went stale for good.
                    let text = format!("building noderesourcetopology {name}: {why}");
                    tracing::error!(node = %name, retry_in = ?backoff, "{text}");
                    self.status.send_modify(|s| s.last_error = Some(text));
                    wait = Some(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            if last_sent.as_ref() == Some(&object) {
                wait = None;
                continue;
            }
            let params = PatchParams::apply(FIELD_MANAGER).force();
            let patch = Patch::Apply(&object);
            let sent = tokio::select! {
                sent = bounded(self.timeout, objects.patch(&name, &params, &patch)) => sent,
                () = stopped(&mut stop) => return,
            };
            match sent {
                Ok(_) => {
                    tracing::debug!(node = %name, "node resource topology updated");
                    last_sent = Some(object);
                    backoff = MIN_BACKOFF;
                    next_resync = (!self.resync.is_zero()).then(|| Instant::now() + self.resync);
                    wait = None;
                    self.status.send_modify(|s| {
                        s.updates += 1;
                        s.last_update = Some(epoch_seconds());
                        s.last_error = None;
                    });
                }
                Err(err) => {
                    let text = format!("update of noderesourcetopology {name}: {err}");
                    if self.status.borrow().last_error.as_deref() != Some(text.as_str()) {
                        tracing::warn!(node = %name, error = %err, retry_in = ?backoff, "node resource topology not updated");
                    }
                    self.status.send_modify(|s| s.last_error = Some(text));
                    wait = Some(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

/// When the Node is asked for again while it cannot be read: not at every
/// update (a standalone machine has no Node, and would send a `GET` beside
/// each `PATCH` for ever), but after a wait doubling from [`MIN_BACKOFF`] to
/// [`MAX_BACKOFF`], and at every resync.
#[derive(Debug, Clone, Copy, Default)]
struct NodeRetry {
    /// The last miss: when it may be asked again, and the wait that led there.
    after: Option<(Instant, Duration)>,
}

impl NodeRetry {
    fn due(self, now: Instant) -> bool {
        self.after.is_none_or(|(at, _)| now >= at)
    }

    fn missed(self, now: Instant) -> Self {
        let wait = self
            .after
            .map_or(MIN_BACKOFF, |(_, wait)| (wait * 2).min(MAX_BACKOFF));
        Self {
            after: Some((now + wait, wait)),
        }
    }
}

/// The UID of Node `name` (the object's owner), or `None` when it cannot be
/// read now (a standalone machine has no Node; asked again later,
/// [`NodeRetry`]).
/// Why it cannot be read is logged when it changes (`last`): a warning,
/// except for a Node that does not exist.
/// What reading the Node said of its UID.
enum NodeRead {
    Found(String),
    /// It does not exist (or has no UID): no owner reference.
    Missing,
    /// No answer or another error: the owner known before (if any) stays.
    Unreadable,
}

async fn node_uid(
    nodes: &Api<Node>,
    name: &str,
    timeout: Duration,
    last: &mut Option<String>,
) -> NodeRead {
    match bounded(timeout, nodes.get(name)).await {
        Ok(node) => {
            *last = None;
            node.metadata.uid.map_or(NodeRead::Missing, NodeRead::Found)
        }
        Err(err) => {
            let missing = err.contains("NotFound") || err.contains("not found");
            if last.as_deref() != Some(err.as_str()) {
                if missing {
                    tracing::info!(node = %name, error = %err, "node not found: the object goes without an owner reference until it is");
                } else {
                    tracing::warn!(node = %name, error = %err, "node not readable: the object keeps the owner reference it had, or goes without one (the garbage collector will not remove it with its node)");
                }
                *last = Some(err);
            }
            if missing {
                NodeRead::Missing
            } else {
                NodeRead::Unreadable
            }
        }
    }
}

/// One request to the API server, abandoned after `timeout`. kube's client
/// sets no read timeout: a server that accepts the connection and never
/// answers (a hung API server, a half-open connection) would hold the task
/// for ever, and the object would never be updated again even after the
/// server recovers (found by scripts/e2e-cluster.sh). The error names what
/// happened.
pub(super) async fn bounded<T>(
    timeout: Duration,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, request).await {
        Ok(answer) => answer.map_err(|err| describe(&err)),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// `err` with its causes (kube's own text of a failed connection is only
/// "client error (Connect)": the refused port or the untrusted certificate
/// is in its sources), and what a 404 without a Kubernetes error body
/// means: the API server does not serve the resource at all.
pub(super) fn describe(err: &kube::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    if let kube::Error::Api(response) = err {
        if response.code == 404 && response.reason == "Failed to parse error data" {
            text.push_str(
                " (the API server does not serve this resource: is its CustomResourceDefinition installed? docs/nrt.md)",
            );
        }
    }
    text
}

/// Returns when `rx` has a value not seen yet; never when its sender is
/// gone (an agent without resource plugins has no sender of theirs).
pub(super) async fn changed<T>(rx: &mut watch::Receiver<T>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

pub(super) async fn sleep_or_stop(delay: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stopped(stop) => false,
    }
}

pub(super) async fn resync_at(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Returns once `stop` is true (or its sender is gone).
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

fn epoch_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs `work` on the blocking pool; a panic in it is an error that says
/// so, not the end of the caller.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|err| {
        if err.is_panic() {
            format!("it panicked: {err}")
        } else {
            err.to_string()
        }
    })
}

#[cfg(test)]
mod off_thread_tests {
    use super::off_thread;

    /// Found from outside (session 44, fixed in 45): a panic while the
    /// object was built ended the NRT publisher without a word (the
    /// `JoinError` was taken for a stop). It is an error now: logged,
    /// shown in the publisher's status, and retried with back-off.
    #[tokio::test]
    async fn regression_a_panic_off_thread_is_an_error_not_the_publishers_end() {
        let err = off_thread(|| -> u32 { panic!("no topology") })
            .await
            .expect_err("a panic");
        assert!(err.contains("panicked"), "{err}");
        assert_eq!(off_thread(|| 7).await, Ok(7));
    }
}
