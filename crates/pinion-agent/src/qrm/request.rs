//! What a container asks of resource plugins (spec `qrm.md` §4.1–4.3): the
//! resources it requests that a plugin serves, under their mapped names,
//! and the `ResourceRequest` sent for each. The pod's role and type come
//! from either vocabulary — katalyst's label and annotation or the QRM
//! proposal's `kubernetes.io/pod-role` and `kubernetes.io/resource-type` —
//! through `pinion_core::qos::vocabulary`, which refuses a pod whose values
//! contradict each other.

use std::collections::BTreeMap;

use pinion_api::resourceplugin as rp;
use pinion_core::pod::Pod;
use pinion_core::qos::vocabulary::{self, Identity, VocabularyError};
use pinion_core::Quantity;

/// Pod annotation naming the main container.
pub const MAIN_CONTAINER_ANNOTATION: &str = "kubernetes.io/main-container-name";

/// One resource of a container served by a plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginRequest {
    /// The plugin's resource name (after the names map).
    pub resource: String,
    /// The name the container requested.
    pub requested: String,
    /// The quantity as plugins receive it (the raw value: `2` CPUs, bytes).
    pub quantity: f64,
    /// The container's limit of the resource, likewise (`None`: no limit).
    pub limit: Option<f64>,
    /// The pod's role and type as every request of the pod carries them.
    pub identity: Identity,
}

/// Why a container's requests cannot go to plugins.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("both {requested} and mapped {mapped} are requested")]
    BothMapped { requested: String, mapped: String },
    #[error("pod {pod} has no container {container:?}")]
    UnknownContainer { pod: String, container: String },
    #[error("pod {pod}: {source}")]
    Vocabulary {
        pod: String,
        source: VocabularyError,
    },
}

/// The plugin resources `container` of `pod` requests, in name order:
/// every request whose (mapped) name `served` accepts. A pod whose role or
/// type metadata contradicts itself is refused here, before any plugin
/// hears of it.
pub fn plugin_requests(
    pod: &Pod,
    container: &str,
    names_map: &BTreeMap<String, String>,
    served: impl Fn(&str) -> bool,
) -> Result<Vec<PluginRequest>, RequestError> {
    let spec = pod
        .container(container)
        .ok_or_else(|| RequestError::UnknownContainer {
            pod: pod.uid.clone(),
            container: container.to_string(),
        })?;
    let identity = vocabulary::identity(&pod.labels, &pod.annotations).map_err(|source| {
        RequestError::Vocabulary {
            pod: format!("{}/{}", pod.namespace, pod.name),
            source,
        }
    })?;
    let requests = spec.requests();
    let limits = spec.limits();
    let mut out = Vec::new();
    for (name, quantity) in &requests {
        let mapped = names_map.get(name).cloned().unwrap_or_else(|| name.clone());
        if mapped != *name && requests.contains_key(&mapped) {
            return Err(RequestError::BothMapped {
                requested: name.clone(),
                mapped,
            });
        }
        if served(&mapped) {
            out.push(PluginRequest {
                resource: mapped,
                requested: name.clone(),
                quantity: as_float(quantity),
                limit: limits.get(name).map(as_float),
                identity: identity.clone(),
            });
        }
    }
    Ok(out)
}

/// A quantity as the `double` plugins receive.
#[allow(clippy::cast_precision_loss)]
fn as_float(quantity: &Quantity) -> f64 {
    quantity.milli_value() as f64 / 1000.0
}

/// The container's type and index (§4.1): init containers by their index
/// among init containers; the main container (annotation, else the first
/// app container) `MAIN`, other app containers `SIDECAR`.
#[must_use]
pub fn container_type(pod: &Pod, container: &str) -> (rp::ContainerType, u64) {
    if let Some(index) = pod.init_containers.iter().position(|c| c.name == container) {
        return (rp::ContainerType::Init, index as u64);
    }
    let index = pod
        .containers
        .iter()
        .position(|c| c.name == container)
        .unwrap_or_default();
    let main = pod
        .annotations
        .get(MAIN_CONTAINER_ANNOTATION)
        .cloned()
        .or_else(|| pod.containers.first().map(|c| c.name.clone()));
    let kind = if main.as_deref() == Some(container) {
        rp::ContainerType::Main
    } else {
        rp::ContainerType::Sidecar
    };
    (kind, index as u64)
}

// difference-from-kubelet: qrm-request-limits-extension
/// The `ResourceRequest` for `request` of `container` (§4.2). `hint` is the
/// Topology Manager's affinity, sent only to topology-aligned plugins. The
/// limit goes in Pinion's `resource_limits` (field 1000), which katalyst's
/// decoders skip.
#[must_use]
pub fn resource_request(
    pod: &Pod,
    container: &str,
    request: &PluginRequest,
    hint: Option<rp::TopologyHint>,
) -> rp::ResourceRequest {
    let (kind, index) = container_type(pod, container);
    rp::ResourceRequest {
        pod_uid: pod.uid.clone(),
        pod_namespace: pod.namespace.clone(),
        pod_name: pod.name.clone(),
        container_name: container.to_string(),
        container_type: kind as i32,
        container_index: index,
        pod_role: request.identity.pod_role.clone(),
        pod_type: request.identity.pod_type.clone(),
        resource_name: request.resource.clone(),
        hint,
        resource_requests: [(request.resource.clone(), request.quantity)].into(),
        labels: pod.labels.clone(),
        annotations: pod.annotations.clone(),
        native_qos_class: pod.qos().to_string(),
        runtime_class: String::new(),
        resource_limits: request
            .limit
            .map(|limit| (request.resource.clone(), limit))
            .into_iter()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use pinion_core::pod::Container;
    use pinion_core::qos::{POD_ROLE_LABEL, POD_TYPE_KEY as POD_TYPE_ANNOTATION};

    use super::*;

    fn quantity(text: &str) -> Quantity {
        Quantity::parse(text).expect("quantity")
    }

    fn pod() -> Pod {
        let app = Container {
            name: "app".into(),
            cpu_request: Some(quantity("2")),
            cpu_limit: Some(quantity("3")),
            memory_request: Some(quantity("1Gi")),
            extended_requests: [
                ("example.com/nic".to_string(), quantity("1")),
                (
                    "resource.katalyst.kubewharf.io/reclaimed_millicpu".to_string(),
                    quantity("2k"),
                ),
            ]
            .into(),
            ..Container::default()
        };
        Pod {
            uid: "uid-1".into(),
            name: "web".into(),
            namespace: "prod".into(),
            labels: [(POD_ROLE_LABEL.to_string(), "frontend".to_string())].into(),
            annotations: [(POD_TYPE_ANNOTATION.to_string(), "online".to_string())].into(),
            init_containers: vec![Container {
                name: "setup".into(),
                ..Container::default()
            }],
            containers: vec![
                app,
                Container {
                    name: "log".into(),
                    ..Container::default()
                },
            ],
        }
    }

    #[test]
    fn requests_are_mapped_and_filtered_by_the_plugins_that_exist() {
        let map = BTreeMap::from([(
            "resource.katalyst.kubewharf.io/reclaimed_millicpu".to_string(),
            "reclaimed_cpu".to_string(),
        )]);
        let served = |name: &str| name != "memory";
        let requests = plugin_requests(&pod(), "app", &map, served).expect("requests");
        let names: Vec<(&str, &str, f64)> = requests
            .iter()
            .map(|r| (r.resource.as_str(), r.requested.as_str(), r.quantity))
            .collect();
        assert_eq!(
            names,
            [
                ("cpu", "cpu", 2.0),
                ("example.com/nic", "example.com/nic", 1.0),
                (
                    "reclaimed_cpu",
                    "resource.katalyst.kubewharf.io/reclaimed_millicpu",
                    2000.0
                ),
            ]
        );
        let both = BTreeMap::from([("example.com/nic".to_string(), "cpu".to_string())]);
        let err = plugin_requests(&pod(), "app", &both, |_| true).expect_err("both");
        assert_eq!(
            err.to_string(),
            "both example.com/nic and mapped cpu are requested"
        );
    }

    #[test]
    fn the_request_carries_identity_type_and_metadata() {
        let pod = pod();
        let request = PluginRequest {
            resource: "cpu".into(),
            requested: "cpu".into(),
            quantity: 2.0,
            limit: Some(3.0),
            identity: vocabulary::identity(&pod.labels, &pod.annotations).expect("identity"),
        };
        let hint = rp::TopologyHint {
            nodes: vec![1],
            preferred: true,
        };
        let r = resource_request(&pod, "app", &request, Some(hint.clone()));
        assert_eq!(
            (
                r.pod_uid.as_str(),
                r.pod_name.as_str(),
                r.pod_namespace.as_str()
            ),
            ("uid-1", "web", "prod")
        );
        assert_eq!(r.container_type, rp::ContainerType::Main as i32);
        assert_eq!(r.container_index, 0);
        assert_eq!(r.pod_role, "frontend");
        assert_eq!(r.pod_type, "online");
        assert_eq!(r.resource_requests.get("cpu"), Some(&2.0));
        assert_eq!(r.resource_limits, [("cpu".to_string(), 3.0)].into());
        assert_eq!(r.hint, Some(hint));
        assert_eq!(r.native_qos_class, "Burstable");
        assert_eq!(container_type(&pod, "log"), (rp::ContainerType::Sidecar, 1));
        assert_eq!(container_type(&pod, "setup"), (rp::ContainerType::Init, 0));
    }

    /// Issue 28 item 1: the proposal's request carries "request/limit
    /// quantities"; the limit of each plugin resource comes from the
    /// container (an extended resource's limit is its request), none when
    /// the container sets none.
    #[test]
    fn each_plugin_request_carries_the_containers_limit() {
        let pod = pod();
        let requests = plugin_requests(&pod, "app", &BTreeMap::new(), |_| true).expect("requests");
        let limits: BTreeMap<&str, Option<f64>> = requests
            .iter()
            .map(|r| (r.resource.as_str(), r.limit))
            .collect();
        assert_eq!(limits["cpu"], Some(3.0));
        assert_eq!(limits["memory"], None, "no memory limit set");
        assert_eq!(limits["example.com/nic"], Some(1.0));
        let memory = requests
            .iter()
            .find(|r| r.resource == "memory")
            .expect("memory");
        assert!(resource_request(&pod, "app", memory, None)
            .resource_limits
            .is_empty());
    }

    #[test]
    fn the_proposals_annotations_become_pod_role_and_pod_type() {
        let mut pod = pod();
        pod.labels.clear();
        pod.annotations = [
            (
                vocabulary::POD_ROLE_ANNOTATION.to_string(),
                "storage-service".to_string(),
            ),
            (
                vocabulary::RESOURCE_TYPE_ANNOTATION.to_string(),
                "numa-exclusive && cpu-exclusive".to_string(),
            ),
        ]
        .into();
        let requests =
            plugin_requests(&pod, "app", &BTreeMap::new(), |n| n == "cpu").expect("requests");
        let r = resource_request(&pod, "app", &requests[0], None);
        assert_eq!(r.pod_role, "storage-service");
        assert_eq!(r.pod_type, "numa-exclusive && cpu-exclusive");
        // The raw annotations and labels go along, as for katalyst's keys.
        assert_eq!(r.annotations, pod.annotations);
        assert_eq!(r.labels, pod.labels);
    }

    #[test]
    fn contradictory_vocabularies_refuse_the_pod_naming_both() {
        let mut pod = pod();
        pod.annotations.insert(
            vocabulary::POD_ROLE_ANNOTATION.to_string(),
            "reranker".to_string(),
        );
        let err = plugin_requests(&pod, "app", &BTreeMap::new(), |_| true)
            .expect_err("label frontend, annotation reranker");
        assert_eq!(
            err.to_string(),
            "pod prod/web: contradictory pod metadata: kubernetes.io/pod-role: \"reranker\" \
             contradicts katalyst.kubewharf.io/pod_role: \"frontend\""
        );
        assert!(matches!(
            err,
            RequestError::Vocabulary {
                source: VocabularyError::Contradiction { .. },
                ..
            }
        ));
    }
}
