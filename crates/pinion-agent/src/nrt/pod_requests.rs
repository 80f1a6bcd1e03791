//! Owns what the API server says this node's pods request beyond cpu and memory: a reflector of the node's pods, read by NRI admissions.
//!
//! NRI tells a plugin a container's cpu and memory (its Linux resources) but
//! not the rest of `resources.requests` — the extended resources a resource
//! plugin serves (`example.com/widget`, a NIC's bandwidth). kubelet builds
//! the QoS Resource Manager's request from the pod spec; with API-server
//! credentials Pinion does the same: a watch of the pods bound to this node
//! (`spec.nodeName`) keeps a cache, and [`PodRequests::fill`] puts a pod's
//! extended requests into the spec the admission decides on. The pod
//! annotation `pinion.dev/requests`, when present, still wins (an explicit
//! request, and the only way without credentials).
//!
//! An admission never waits on the API server: it reads the cache. Only a
//! pod the API server sent to this node (`kubernetes.io/config.source:
//! api`) that the cache has not seen yet is waited for — the watch's first
//! list, then the pod — at most [`MISSING_POD_WAIT`] in all, and named in a
//! warning when it is not there by then. A static pod is matched through
//! its mirror pod (same namespace and name, `kubernetes.io/config.mirror` =
//! the static pod's UID).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod as KubePod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::Api;
use pinion_core::pod::Pod;
use pinion_core::quantity::Quantity;
use tokio::sync::watch;
use tokio_stream::StreamExt as _;

use super::publish::{task_client, PublishError};
use super::NrtStartError;
use crate::config::NrtConfig;

/// How long an admission waits for an API pod the cache has not seen yet.
pub const MISSING_POD_WAIT: Duration = Duration::from_millis(500);
/// How often the cache is looked at again while waiting.
const MISSING_POD_POLL: Duration = Duration::from_millis(10);
/// The pod annotation kubelet sets on the pods it hands the runtime: where
/// the pod came from (`api`, `file`, `http`).
const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
/// A mirror pod's annotation: the UID of the static pod it mirrors.
const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
/// kubelet's ephemeral-storage and the huge-page sizes are kubelet's own
/// (with cpu and memory): never a plugin's, never asked of one.
const KUBELET_RESOURCES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// The extended-resource requests of one pod, by container name (app, init
/// and sidecar containers alike).
pub type ContainerRequests = BTreeMap<String, BTreeMap<String, Quantity>>;

/// A reader of the cache (cheap to clone).
#[derive(Clone)]
pub struct PodRequests {
    store: Store<KubePod>,
}

impl PodRequests {
    /// Fills `spec`'s containers' extended requests from the API server's
    /// pod, unless the pod says them itself (`pinion.dev/requests`, already
    /// parsed into the spec) or the cache has no such pod (then the spec
    /// is left as it is: a pod not from the API server, or a cache that has
    /// not synced).
    pub async fn fill(&self, spec: &mut Pod) {
        if spec
            .annotations
            .contains_key(pinion_nri::kube::REQUESTS_ANNOTATION)
        {
            return;
        }
        let Some(requests) = self.wait_for(spec).await else {
            return;
        };
        for container in spec.init_containers.iter_mut().chain(&mut spec.containers) {
            if let Some(found) = requests.get(&container.name) {
                container.extended_requests.clone_from(found);
            }
        }
    }

    /// The pod's requests; an API pod not seen yet is waited for, at most
    /// [`MISSING_POD_WAIT`] in all: the watch's first list (an agent that
    /// has just started), then the pod. Until the forty-seventh session an
    /// admission before the first list went on at once, without a word,
    /// and the pod's extended resources were never asked of the plugins.
    async fn wait_for(&self, spec: &Pod) -> Option<ContainerRequests> {
        if let Some(found) = self.lookup(spec) {
            return Some(found);
        }
        let from_api = spec.annotations.get(CONFIG_SOURCE).map(String::as_str) == Some("api");
        if !from_api {
            return None;
        }
        let pod = format!("{}/{}", spec.namespace, spec.name);
        let deadline = tokio::time::Instant::now() + MISSING_POD_WAIT;
        let listed = tokio::time::timeout_at(deadline, self.store.wait_until_ready()).await;
        if !matches!(listed, Ok(Ok(()))) {
            tracing::warn!(%pod, uid = %spec.uid, "this node's pods are not listed from the api server yet (after {MISSING_POD_WAIT:?}): the pod's extended resources are not asked of the resource plugins (pinion.dev/requests names them)");
            return None;
        }
        loop {
            if let Some(found) = self.lookup(spec) {
                return Some(found);
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(MISSING_POD_POLL).await;
        }
        tracing::warn!(%pod, uid = %spec.uid, "the api server's pod is not in the cache after {MISSING_POD_WAIT:?}: its extended resources are not asked of the resource plugins (pinion.dev/requests names them)");
        None
    }

    fn lookup(&self, spec: &Pod) -> Option<ContainerRequests> {
        let key = ObjectRef::new(&spec.name).within(&spec.namespace);
        let pod = self.store.get(&key)?;
        if !same_pod(&pod, &spec.uid) {
            return None;
        }
        match extended_requests(&pod) {
            Ok(requests) => Some(requests),
            Err(err) => {
                tracing::warn!(pod = %format!("{}/{}", spec.namespace, spec.name), "{err}");
                None
            }
        }
    }
}

/// Whether the API server's `pod` is the runtime's pod of UID `uid`: the
/// same UID, or the mirror pod of that static pod.
fn same_pod(pod: &KubePod, uid: &str) -> bool {
    pod.metadata.uid.as_deref() == Some(uid)
        || pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIG_MIRROR))
            .is_some_and(|mirror| mirror == uid)
}

/// A pod's requests beyond kubelet's own resources (cpu, memory,
/// ephemeral storage, huge pages), by container. A quantity that does not
/// parse is an error naming it (the API server validated it, so this is a
/// format Pinion does not read).
pub fn extended_requests(pod: &KubePod) -> Result<ContainerRequests, String> {
    let mut out = ContainerRequests::new();
    let Some(spec) = &pod.spec else {
        return Ok(out);
    };
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for container in containers {
        let Some(requests) = container
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
        else {
            continue;
        };
        let mut quantities = BTreeMap::new();
        for (name, quantity) in requests {
            if KUBELET_RESOURCES.contains(&name.as_str()) || name.starts_with("hugepages-") {
                continue;
            }
            let parsed = Quantity::parse(&quantity.0).map_err(|err| {
                format!(
                    "request {name}={:?} of container {:?}: {err}",
                    quantity.0, container.name
                )
            })?;
            quantities.insert(name.clone(), parsed);
        }
        if !quantities.is_empty() {
            out.insert(container.name.clone(), quantities);
        }
    }
    Ok(out)
}

/// The cache and its watch task, when wanted: `nodeResourceTopology.podRequests`
/// `false` never; `true` needs credentials and the QoS Resource Manager
/// under NRI (the start fails naming what is missing); absent: when all of
/// them are there. `wanted` says whether the agent runs the manager as an
/// NRI plugin.
pub async fn start(
    config: &NrtConfig,
    node_name: Result<String, crate::config::ConfigError>,
    wanted: bool,
    env: impl Fn(&str) -> Option<String>,
    stop: &watch::Receiver<bool>,
) -> Result<Option<(PodRequests, tokio::task::JoinHandle<()>)>, NrtStartError> {
    let asked = config.pod_requests == Some(true);
    if config.pod_requests == Some(false) {
        return Ok(None);
    }
    if !wanted {
        return if asked {
            Err(PublishError::PodRequestsWithoutNriPlugins.into())
        } else {
            Ok(None)
        };
    }
    let Some(client) = task_client(
        config,
        "podRequests",
        asked,
        PublishError::PodRequestsWithoutCredentials,
        "pods' extended resources read from their annotation only",
        env,
    )
    .await?
    else {
        return Ok(None);
    };
    let node_name = node_name?;
    tracing::info!(node = %node_name, "reading this node's pods' extended resources from the api server");
    Ok(Some(PodRequests::watch(client, &node_name, stop)))
}

impl PodRequests {
    /// The cache of the pods bound to `node_name`, and the task that keeps
    /// it (a list, then a watch; retried with kube's default backoff; ends
    /// when `stop` turns true).
    pub fn watch(
        client: kube::Client,
        node_name: &str,
        stop: &watch::Receiver<bool>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (store, writer) = reflector::store();
        let pods: Api<KubePod> = Api::all(client);
        let selector = format!("spec.nodeName={node_name}");
        let stream = reflector::reflector(
            writer,
            watcher(pods, watcher::Config::default().fields(&selector)),
        )
        .default_backoff();
        let mut stop = stop.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    _ = stop.wait_for(|stopped| *stopped) => return,
                    event = stream.next() => match event {
                        Some(Ok(_)) => {}
                        Some(Err(err)) => tracing::warn!(error = %err, "watching this node's pods (retried)"),
                        None => return,
                    },
                }
            }
        });
        (Self { store }, task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> KubePod {
        serde_json::from_value(value).expect("pod")
    }

    #[test]
    fn extended_requests_are_every_containers_beyond_kubelets_own() {
        let pod = pod(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "initContainers": [{"name": "init", "resources": {"requests": {"example.com/nic": "2"}}}],
                "containers": [
                    {"name": "main", "resources": {"requests": {
                        "cpu": "2", "memory": "1Gi", "ephemeral-storage": "1Gi", "hugepages-2Mi": "4Mi",
                        "example.com/widget": "1", "example.com/bandwidth": "500m"}}},
                    {"name": "plain", "resources": {"requests": {"cpu": "1"}}},
                    {"name": "none"},
                ],
            },
        }));
        let requests = extended_requests(&pod).expect("parses");
        let names: Vec<(&str, Vec<&str>)> = requests
            .iter()
            .map(|(c, r)| (c.as_str(), r.keys().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            names,
            [
                ("init", vec!["example.com/nic"]),
                ("main", vec!["example.com/bandwidth", "example.com/widget"]),
            ]
        );
        assert_eq!(
            requests["main"]["example.com/bandwidth"],
            Quantity::parse("500m").expect("quantity")
        );
    }

    #[test]
    fn a_request_that_does_not_parse_is_named() {
        let pod = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"example.com/widget": "lots"}}}]},
        }));
        let err = extended_requests(&pod).expect_err("bad quantity");
        assert!(
            err.contains("example.com/widget") && err.contains("lots") && err.contains("main"),
            "{err}"
        );
    }

    #[test]
    fn a_mirror_pod_is_its_static_pod() {
        let mirror = pod(serde_json::json!({
            "metadata": {"name": "p", "uid": "mirror", "annotations": {CONFIG_MIRROR: "static"}},
        }));
        assert!(same_pod(&mirror, "static"));
        assert!(same_pod(&mirror, "mirror"));
        assert!(!same_pod(&mirror, "other"));
    }

    /// The runtime's spec of API pod `p` (UID `u`) with container `main`.
    fn api_spec() -> Pod {
        Pod {
            uid: "u".into(),
            name: "p".into(),
            namespace: "default".into(),
            annotations: BTreeMap::from([(CONFIG_SOURCE.to_string(), "api".to_string())]),
            containers: vec![pinion_core::pod::Container {
                name: "main".into(),
                ..pinion_core::pod::Container::default()
            }],
            ..Pod::default()
        }
    }

    fn widget_pod() -> KubePod {
        pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {"example.com/widget": "2"}}}]},
        }))
    }

    /// Found from outside (session 46): an admission before the watch's
    /// first list (an agent that had just started) went on at once, without
    /// a word, and the pod's extended resources were never asked of the
    /// plugins. It now waits for the list (within the same bound as for a
    /// pod not seen yet).
    #[tokio::test]
    async fn regression_an_admission_before_the_first_list_waits_for_it() {
        let (store, mut writer) = reflector::store::<KubePod>();
        let requests = PodRequests { store };
        let lister = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            writer.apply_watcher_event(&watcher::Event::Init);
            writer.apply_watcher_event(&watcher::Event::InitApply(widget_pod()));
            writer.apply_watcher_event(&watcher::Event::InitDone);
            writer
        });
        let mut spec = api_spec();
        requests.fill(&mut spec).await;
        assert_eq!(
            spec.containers[0].extended_requests,
            BTreeMap::from([(
                "example.com/widget".to_string(),
                Quantity::parse("2").expect("quantity")
            )])
        );
        drop(lister.await.expect("lister"));
    }

    /// A list that does not come within the bound: the admission goes on
    /// without the extended resources (and says so), it is not held.
    #[tokio::test]
    async fn an_admission_does_not_wait_past_the_bound_for_the_first_list() {
        let (store, _writer) = reflector::store::<KubePod>();
        let requests = PodRequests { store };
        let mut spec = api_spec();
        requests.fill(&mut spec).await;
        assert!(spec.containers[0].extended_requests.is_empty());
        // A pod not from the api server (a static pod's own spec) is not
        // waited for at all.
        let mut file_pod = api_spec();
        file_pod.annotations.clear();
        requests.fill(&mut file_pod).await;
        assert!(file_pod.containers[0].extended_requests.is_empty());
    }

    #[tokio::test]
    async fn asked_for_without_what_it_needs_the_start_fails_naming_it() {
        let (_stop, stop) = watch::channel(false);
        let asked = NrtConfig {
            pod_requests: Some(true),
            ..NrtConfig::default()
        };
        let no_env = |_: &str| None;
        let node = || Ok("worker-1".to_string());
        let err = start(&asked, node(), false, no_env, &stop)
            .await
            .err()
            .expect("refused");
        assert!(
            err.to_string().contains("podRequests is true") && err.to_string().contains("NRI"),
            "{err}"
        );
        let err = start(&asked, node(), true, no_env, &stop)
            .await
            .err()
            .expect("refused");
        assert!(
            err.to_string().contains("no api server credentials"),
            "{err}"
        );
        // Not asked: off without a word when something is missing.
        for wanted in [false, true] {
            let off = start(&NrtConfig::default(), node(), wanted, no_env, &stop).await;
            assert!(matches!(off, Ok(None)), "wanted {wanted}");
        }
        let never = NrtConfig {
            pod_requests: Some(false),
            kubeconfig: Some("/nonexistent".into()),
            ..NrtConfig::default()
        };
        assert!(matches!(
            start(&never, node(), true, no_env, &stop).await,
            Ok(None)
        ));
    }
}
