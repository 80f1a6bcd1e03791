//! The `ResourceRequest` the QoS Resource Manager sends a plugin, built
//! once for both managers: the agent's (which puts it on the wire with
//! [`crate::grpc::wire_request`]) and the simulator's (which hands it to
//! the plugin in-process). What goes into it is decided in
//! `pinion_core::qrm_rules`: the container's plugin requests, its type and
//! index, and the Topology Manager's affinity.

use std::collections::BTreeMap;

use pinion_core::pod::Pod;
use pinion_core::qrm_rules::{self, PluginRequest};
use pinion_core::topomgr::TopologyHint;

use crate::api::{Hint, Request};

// difference-from-kubelet: qrm-request-limits-extension
/// The `ResourceRequest` for `request` of `container` (spec `qrm.md` §4.2).
/// `hint` is the Topology Manager's affinity, sent only to topology-aligned
/// plugins ([`allocate_hint`]); `GetTopologyHints` carries none. The limit
/// goes in Pinion's `resource_limits` (field 1000 on the wire), which
/// katalyst's decoders skip.
#[must_use]
pub fn request(pod: &Pod, container: &str, request: &PluginRequest, hint: Option<Hint>) -> Request {
    let (container_type, container_index) = qrm_rules::container_type(pod, container);
    Request {
        pod_uid: pod.uid.clone(),
        pod_namespace: pod.namespace.clone(),
        pod_name: pod.name.clone(),
        container_name: container.to_string(),
        container_type,
        container_index,
        pod_role: request.identity.pod_role.clone(),
        pod_type: request.identity.pod_type.clone(),
        resource_name: request.resource.clone(),
        hint,
        resource_requests: BTreeMap::from([(request.resource.clone(), request.quantity)]),
        labels: pod.labels.clone(),
        annotations: pod.annotations.clone(),
        native_qos_class: pod.qos().to_string(),
        resource_limits: request
            .limit
            .map(|limit| (request.resource.clone(), limit))
            .into_iter()
            .collect(),
    }
}

/// The hint an `Allocate` carries (§4.5): none for a plugin that is not
/// topology-aligned; else the merged affinity, or "any node, preferred"
/// when the Topology Manager merged none (policy `none`).
#[must_use]
pub fn allocate_hint(topology_aligned: bool, affinity: Option<TopologyHint>) -> Option<Hint> {
    topology_aligned.then(|| hint(&affinity.unwrap_or_else(TopologyHint::dont_care)))
}

/// The Topology Manager's affinity as a plugin's hint.
#[must_use]
pub fn hint(affinity: &TopologyHint) -> Hint {
    Hint {
        nodes: qrm_rules::hint_nodes(affinity),
        preferred: affinity.preferred,
    }
}

/// A plugin's hint as the Topology Manager's (`None` when it names a node
/// no mask can hold).
#[must_use]
pub fn topology_hint(hint: &Hint) -> Option<TopologyHint> {
    qrm_rules::topology_hint(&hint.nodes, hint.preferred)
}

#[cfg(test)]
mod tests {
    use pinion_core::pod::Container;
    use pinion_core::qos::vocabulary;
    use pinion_core::qos::{POD_ROLE_LABEL, POD_TYPE_KEY};
    use pinion_core::topomgr::NumaMask;
    use pinion_core::Quantity;

    use super::*;
    use crate::api::ContainerType;

    fn pod() -> Pod {
        let q = |text: &str| Quantity::parse(text).expect("quantity");
        Pod {
            uid: "uid-1".into(),
            name: "web".into(),
            namespace: "prod".into(),
            labels: [(POD_ROLE_LABEL.to_string(), "frontend".to_string())].into(),
            annotations: [(POD_TYPE_KEY.to_string(), "online".to_string())].into(),
            containers: vec![
                Container {
                    name: "app".into(),
                    cpu_request: Some(q("2")),
                    ..Container::default()
                },
                Container {
                    name: "log".into(),
                    ..Container::default()
                },
            ],
            ..Pod::default()
        }
    }

    #[test]
    fn the_request_carries_identity_type_and_metadata() {
        let pod = pod();
        let asked = PluginRequest {
            resource: "cpu".into(),
            requested: "cpu".into(),
            quantity: 2.0,
            limit: Some(3.0),
            identity: vocabulary::identity(&pod.labels, &pod.annotations).expect("identity"),
        };
        let hint = Hint {
            nodes: vec![1],
            preferred: true,
        };
        let r = request(&pod, "app", &asked, Some(hint.clone()));
        assert_eq!(
            (
                r.pod_uid.as_str(),
                r.pod_name.as_str(),
                r.pod_namespace.as_str()
            ),
            ("uid-1", "web", "prod")
        );
        assert_eq!(
            (r.container_type, r.container_index),
            (ContainerType::Main, 0)
        );
        assert_eq!(
            (r.pod_role.as_str(), r.pod_type.as_str()),
            ("frontend", "online")
        );
        assert_eq!(r.resource_name, "cpu");
        assert_eq!(
            r.resource_requests,
            BTreeMap::from([("cpu".to_string(), 2.0)])
        );
        assert_eq!(r.hint, Some(hint));
        assert_eq!(r.native_qos_class, "Burstable");
        assert_eq!(
            (r.labels, r.annotations),
            (pod.labels.clone(), pod.annotations.clone())
        );
        assert_eq!(
            r.resource_limits,
            BTreeMap::from([("cpu".to_string(), 3.0)])
        );
        let unlimited = PluginRequest {
            limit: None,
            ..asked.clone()
        };
        assert!(request(&pod, "app", &unlimited, None)
            .resource_limits
            .is_empty());
        let sidecar = request(&pod, "log", &asked, None);
        assert_eq!(
            (sidecar.container_type, sidecar.container_index),
            (ContainerType::Sidecar, 1)
        );
    }

    #[test]
    fn only_aligned_plugins_get_a_hint_and_none_merged_is_any_node() {
        let two = TopologyHint::new(NumaMask::from_ids([0, 1]).expect("mask"), false);
        assert_eq!(allocate_hint(false, Some(two)), None);
        assert_eq!(
            allocate_hint(true, Some(two)),
            Some(Hint {
                nodes: vec![0, 1],
                preferred: false
            })
        );
        assert_eq!(
            allocate_hint(true, None),
            Some(Hint {
                nodes: Vec::new(),
                preferred: true
            })
        );
        assert_eq!(topology_hint(&hint(&two)), Some(two));
    }
}
