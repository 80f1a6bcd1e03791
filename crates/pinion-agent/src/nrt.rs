//! The node's NodeResourceTopology object (`docs/nrt.md`): built from the
//! controller's latest snapshot by the pure `pinion_core::nrt::content`,
//! shown by the local API (`GET /v1/nrt`, `pinion nrt`) and, with
//! API-server credentials, kept up to date by [`publish`] on its own task.
//! The controller never waits for it: it reads snapshots from a `watch`
//! channel (the latest one only) and a slow or absent API server delays
//! nothing but the object.

pub mod node_status;
pub mod pod_requests;
pub mod publish;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

use pinion_api::local::{NrtAnswer, NrtPublishing};
use pinion_core::nrt::{self as model, HugePages, Node, Now, Nrt};
use pinion_core::pod::Pod;
use pinion_core::podresources::{self as podres, AllocatableResource};
use pinion_core::Topology;
use tokio::sync::watch;

use crate::config::NrtConfig;
use crate::controller::Snapshot;
use crate::podresources::holdings;

/// Where the object's inputs come from.
#[derive(Debug, Clone)]
pub struct NrtSource {
    topology: Arc<Topology>,
    node: Node,
    node_name: String,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    plugin_resources: watch::Receiver<Arc<Vec<AllocatableResource>>>,
    status: watch::Receiver<NrtPublishing>,
}

impl NrtSource {
    #[must_use]
    pub fn new(
        topology: Arc<Topology>,
        node: Node,
        node_name: String,
        snapshots: watch::Receiver<Arc<Snapshot>>,
    ) -> Self {
        Self {
            topology,
            node,
            node_name,
            snapshots,
            plugin_resources: watch::channel(Arc::default()).1,
            status: watch::channel(NrtPublishing {
                off: Some("no api server credentials (docs/nrt.md)".to_string()),
                ..NrtPublishing::default()
            })
            .1,
        }
    }

    /// The same source, with the resource plugins' node resources.
    #[must_use]
    pub fn with_plugin_resources(
        mut self,
        plugin_resources: watch::Receiver<Arc<Vec<AllocatableResource>>>,
    ) -> Self {
        self.plugin_resources = plugin_resources;
        self
    }

    /// The same source, reporting the publisher's `status`.
    #[must_use]
    pub fn with_status(mut self, status: watch::Receiver<NrtPublishing>) -> Self {
        self.status = status;
        self
    }

    /// The same source, saying why it is not published.
    #[must_use]
    pub fn with_off(self, reason: String) -> Self {
        self.with_status(
            watch::channel(NrtPublishing {
                off: Some(reason),
                ..NrtPublishing::default()
            })
            .1,
        )
    }

    /// The object's name: the node's.
    #[must_use]
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The content for the latest snapshot.
    #[must_use]
    pub fn content(&self) -> Nrt {
        let snapshot = self.snapshots.borrow().clone();
        let plugins = self.plugin_resources.borrow().clone();
        // The machine now (CPU hot-plug), else the one at start.
        let topology = snapshot.machine.as_deref().unwrap_or(&self.topology);
        content_of(&snapshot, topology, &self.node, &plugins)
    }

    /// The object for the latest snapshot, owned by the Node of `owner_uid`
    /// when known.
    #[must_use]
    pub fn object(&self, owner_uid: Option<&str>) -> serde_json::Value {
        object(&self.node_name, &self.content(), owner_uid)
    }

    /// What `GET /v1/nrt` answers.
    #[must_use]
    pub fn answer(&self) -> NrtAnswer {
        NrtAnswer {
            object: self.object(None),
            publishing: self.status.borrow().clone(),
        }
    }

    /// Receivers that change when the content may have changed.
    fn changes(
        &self,
    ) -> (
        watch::Receiver<Arc<Snapshot>>,
        watch::Receiver<Arc<Vec<AllocatableResource>>>,
    ) {
        (self.snapshots.clone(), self.plugin_resources.clone())
    }
}

/// The content of `snapshot`: podresources' view of its holdings (standalone
/// runs' CPUs are as taken as a pod's), the Kubernetes pods among its pods
/// for the fingerprint (standalone runs are not pods of the cluster: the
/// scheduler does not count them), and the static policy's default set.
#[must_use]
pub fn content_of(
    snapshot: &Snapshot,
    topology: &Topology,
    node: &Node,
    plugin_resources: &[AllocatableResource],
) -> Nrt {
    let held = holdings(snapshot);
    let mut listed: Vec<podres::PodResources> = podres::list(&snapshot.pods, &held)
        .into_iter()
        .map(|pod| podres::with_pod_cpus(pod, &snapshot.pod_cpus))
        .collect();
    // Containers the agent holds CPUs for but knows no pod spec of yet (the
    // runtime's containers after a restart, until its first `Synchronize`
    // names them): their CPUs and pod-level sets are taken all the same,
    // though no pod of the fingerprint stands for them.
    listed.extend(
        podres::list(&unnamed_pods(snapshot), &held)
            .into_iter()
            .map(|pod| podres::with_pod_cpus(pod, &snapshot.pod_cpus)),
    );
    let pods: Vec<&Pod> = snapshot
        .pods
        .iter()
        .filter(|(uid, _)| runs_in_kubernetes(snapshot, uid))
        .map(|(_, pod)| pod.as_ref())
        .collect();
    model::content(
        topology,
        node,
        &Now {
            default: &snapshot.shared_pool,
            plugin_resources,
            holdings: &listed,
            pods: &pods,
        },
    )
}

/// A stand-in pod (its UID as its name, its held containers) for each pod
/// UID of `snapshot`'s workloads that has no pod spec in it.
fn unnamed_pods(snapshot: &Snapshot) -> std::collections::BTreeMap<String, Box<Pod>> {
    let mut pods: std::collections::BTreeMap<String, Box<Pod>> = std::collections::BTreeMap::new();
    for workload in &snapshot.workloads {
        if snapshot.pods.contains_key(&workload.pod) {
            continue;
        }
        let pod = pods.entry(workload.pod.clone()).or_insert_with(|| {
            Box::new(Pod {
                uid: workload.pod.clone(),
                name: workload.pod.clone(),
                ..Pod::default()
            })
        });
        pod.containers.push(pinion_core::pod::Container {
            name: workload.container.clone(),
            ..pinion_core::pod::Container::default()
        });
    }
    pods
}

/// Whether pod `uid` is a runtime's (Kubernetes) pod, not a standalone run.
fn runs_in_kubernetes(snapshot: &Snapshot, uid: &str) -> bool {
    snapshot
        .workloads
        .iter()
        .any(|w| w.pod == uid && w.frontend == "runtime")
}

pub use model::object;

/// The node's name: the configured one, else `NODE_NAME` (the DaemonSet
/// sets it from `spec.nodeName`), else the host name.
pub fn node_name(
    config: &NrtConfig,
    env: impl Fn(&str) -> Option<String>,
    hostname: impl FnOnce() -> Option<String>,
) -> Result<String, crate::config::ConfigError> {
    let (name, field) = if let Some(name) = config.node_name.clone() {
        (name, "nodeResourceTopology.nodeName")
    } else if let Some(name) = env("NODE_NAME").filter(|n| !n.is_empty()) {
        (name, "NODE_NAME")
    } else {
        (hostname().unwrap_or_default(), "the host name")
    };
    // Host names may carry capitals; Kubernetes node names are lowercase.
    let name = name.trim().to_ascii_lowercase();
    crate::config::check_node_name(&name, field)?;
    Ok(name)
}

/// The hugepage pools of every NUMA node under `sysroot` (none when the
/// files cannot be read: the object then lists no hugepages).
#[must_use]
pub fn hugepages(sysroot: &Path) -> Vec<HugePages> {
    match pinion_host::meminfo::read_node_memory(sysroot) {
        Ok(nodes) => pinion_host::meminfo::hugepage_pools(&nodes),
        Err(err) => {
            tracing::warn!(error = %err, "node resource topology: no hugepages listed");
            Vec::new()
        }
    }
}

/// Why the object cannot be built or published at start.
#[derive(Debug, thiserror::Error)]
pub enum NrtStartError {
    #[error(transparent)]
    NodeName(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
    #[error("cpu manager policy: {0}")]
    Policy(#[from] pinion_core::policy::PolicyError),
}

/// The agent's object source (for the local API) and, with credentials,
/// the publisher's task (`env` reads the environment).
pub async fn start(
    config: &crate::config::Config,
    handle: &crate::controller::ControllerHandle,
    plugin_resources: Option<watch::Receiver<Arc<Vec<AllocatableResource>>>>,
    topology: Arc<Topology>,
    env: impl Fn(&str) -> Option<String>,
    stop: &watch::Receiver<bool>,
) -> Result<(Arc<NrtSource>, Option<tokio::task::JoinHandle<()>>), NrtStartError> {
    let credentials = publish::credentials(&config.nrt, &env)?;
    let name = match node_name(&config.nrt, &env, || {
        pinion_host::hostname::hostname(Path::new("/"))
    }) {
        Ok(name) => name,
        Err(err) if credentials.is_some() => return Err(err.into()),
        // Shown by `pinion nrt` only: a name the API would refuse is shown as is.
        Err(_) => env("NODE_NAME")
            .or_else(|| pinion_host::hostname::hostname(Path::new("/")))
            .unwrap_or_default(),
    };
    let policy = config.policy.build_with(&topology, config.features)?;
    let node = Node::new(
        &policy,
        config.policy.topology_manager_policy.as_deref(),
        config.policy.topology_manager_scope.as_deref(),
        hugepages(&config.sysroot),
        config.nrt.method,
    );
    let mut source = NrtSource::new(topology, node, name, handle.snapshots());
    if let Some(resources) = plugin_resources {
        source = source.with_plugin_resources(resources);
    }
    let Some(credentials) = credentials else {
        return Ok((Arc::new(source), None));
    };
    let client_config = match publish::client_config(&credentials).await {
        Ok(client_config) => client_config,
        Err(err) if publish::optional(&config.nrt, &credentials) => {
            let reason = format!("in-cluster credentials unusable: {err}");
            tracing::warn!(error = %err, "node resource topology not published (in a pod without a service account token?); nodeResourceTopology.publish: true makes this an error");
            return Ok((Arc::new(source.with_off(reason)), None));
        }
        Err(err) => return Err(err.into()),
    };
    let server = client_config.cluster_url.to_string();
    let client = kube::Client::try_from(client_config).map_err(publish::PublishError::from)?;
    let publisher = publish::Publisher::new(&mut source, client, &config.nrt, server.clone());
    tracing::info!(node = %source.node_name(), server = %server, "publishing the node resource topology");
    let task = tokio::spawn(publisher.run(stop.clone()));
    Ok((Arc::new(source), Some(task)))
}
