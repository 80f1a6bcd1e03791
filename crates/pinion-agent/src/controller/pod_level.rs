//! Owns the registration of pods' pod-level resources (`PodLevelResourceManagers`).
//!
//! Pod-level resources (issue #15, KEP-5526; `featureGates:
//! PodLevelResourceManagers`): the front-end registers a pod's pod-level
//! resources before its containers are admitted; the engine then follows
//! kubelet (with the switch on and the Topology Manager at pod scope, the
//! pod's first container allocates the pod's whole CPU set; with it off the
//! pod's containers stay in the shared pool). The registration is not
//! durable state: the runtime's `Synchronize` registers the pods again
//! after a restart, and the pod-level CPU sets themselves are journal side
//! data (`super::resize`).

use pinion_core::pod::PodResources;

use super::Controller;

impl Controller {
    /// Registers (`Some`) or forgets (`None`) pod `uid`'s pod-level
    /// resources.
    pub fn set_pod_resources(&mut self, uid: &str, resources: Option<PodResources>) {
        if resources.is_some() || self.engine.pod_resources(uid).is_some() {
            tracing::debug!(pod = %uid, ?resources, "pod-level resources");
        }
        self.engine.set_pod_resources(uid, resources);
    }
}
