//! What the NRI front-end remembers between events: the pod sandboxes and
//! containers the runtime has shown (the runtime's data, needed to build a
//! pod's spec from its containers and to map a runtime id to a controller
//! key) — not Pinion's decisions, which the controller alone holds. Also
//! the pure helpers: Kubernetes identity from NRI data and kubelet's
//! admission text.

use std::collections::{BTreeMap, BTreeSet};

use pinion_core::policy::PolicyError;
use pinion_core::{pod::Pod, CpuSet};
use pinion_host::cgroup::ContainerCgroup;
use pinion_nri::kube::{self, KubeError};
use pinion_nri::{Container, ErrorKind, HandlerError, PodSandbox};

use crate::controller::{ControlError, Key, Observed};

/// One container the runtime has shown.
#[derive(Debug, Clone)]
pub struct Entry {
    pub container: Container,
    /// The controller key: (pod UID, container name) for a Kubernetes
    /// container; (sandbox id, container name) for one of a pod outside
    /// Kubernetes, which follows the shared pool without an admission.
    pub key: Key,
}

/// Pods and containers by runtime id.
#[derive(Debug, Default)]
pub struct Tracked {
    pub pods: BTreeMap<String, PodSandbox>,
    pub containers: BTreeMap<String, Entry>,
    /// Kubernetes containers that stopped while their pod still runs, by
    /// key, with their pod's sandbox id: the controller holds their
    /// placement for the container the runtime creates next under the same
    /// name, until the pod stops (an entry may outlive a hold that the
    /// reconcile pass ended; releasing it again is no error).
    pub stopped: BTreeMap<Key, String>,
    /// Sandboxes first seen by a `CreateContainer` since the last
    /// `Synchronize`: the runtime created them while Pinion was connected,
    /// so it relays their stop. containerd 1.7 keeps pod states in memory
    /// only and, after its own restart, never relays `StopPodSandbox` or
    /// `RemovePodSandbox` for the pods it recovered (`nri.go`
    /// `needsStopping`), and a `Synchronize` does not say which pods those
    /// are: a container of a pod known from a `Synchronize` is held only
    /// with its pod's sandbox cgroup, whose removal ends the hold.
    pub live_pods: BTreeSet<String>,
    /// The container each key's placement follows, by key: the one created
    /// last, or at a `Synchronize` the one that runs. Any other container
    /// of the key is an attempt it superseded (kubelet creates the next
    /// attempt under the same name while one that never ran — its start
    /// failed — is still there): its stop or removal changes nothing.
    pub current: BTreeMap<Key, String>,
}

impl Tracked {
    /// Remembers `entry`, the container its key follows from now on.
    pub fn track(&mut self, entry: Entry) {
        self.current
            .insert(entry.key.clone(), entry.container.id.clone());
        self.containers.insert(entry.container.id.clone(), entry);
    }

    /// Forgets container `id` and answers its entry when its key follows
    /// it; `None` for an attempt superseded by a newer one (the newer one
    /// keeps the placement), or whose key's container went already. Until
    /// the forty-seventh session any other container of the key made this
    /// one superseded, older or newer: the stop of the running container
    /// was not held while a leftover attempt was listed, and that
    /// attempt's removal then released the key the container's restart
    /// needed.
    pub fn take_current(&mut self, id: &str) -> Option<Entry> {
        let current = self.is_current(id);
        let entry = self.forget(id)?;
        if !current {
            tracing::debug!(pod = %entry.key.0, container = %entry.key.1, id, "a superseded container went; its successor keeps the placement");
            return None;
        }
        Some(entry)
    }

    /// Forgets container `id` whatever its key follows (its pod ended).
    pub fn forget(&mut self, id: &str) -> Option<Entry> {
        if self.is_current(id) {
            let key = &self.containers[id].key;
            self.current.remove(key);
        }
        self.containers.remove(id)
    }

    /// Whether container `id` is the one its key follows.
    #[must_use]
    pub fn is_current(&self, id: &str) -> bool {
        self.containers
            .get(id)
            .and_then(|entry| self.current.get(&entry.key))
            .is_some_and(|current| current == id)
    }

    /// The containers of sandbox `pod_id` Pinion has seen, except `skip`.
    #[must_use]
    pub fn siblings(&self, pod_id: &str, skip: &str) -> Vec<Container> {
        self.containers
            .values()
            .filter(|e| e.container.pod_sandbox_id == pod_id && e.container.id != skip)
            .map(|e| e.container.clone())
            .collect()
    }

    /// The held keys of stopped containers of sandbox `pod_id`, forgotten.
    pub fn take_stopped(&mut self, pod_id: &str) -> Vec<Key> {
        let keys: Vec<Key> = self
            .stopped
            .iter()
            .filter(|(_, sandbox)| *sandbox == pod_id)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &keys {
            self.stopped.remove(key);
        }
        keys
    }
}

/// The pod's sandbox cgroup from NRI's `linux.cgroups_path` (`None` when
/// the runtime sent none or one that does not resolve).
#[must_use]
pub fn sandbox_cgroup(pod: &PodSandbox) -> Option<ContainerCgroup> {
    if pod.cgroups_path.is_empty() {
        return None;
    }
    ContainerCgroup::resolve(&pod.cgroups_path).ok()
}

/// The key of a container of a pod outside Kubernetes (never a pod UID:
/// sandbox ids are the runtime's).
#[must_use]
pub fn follower_key(pod_sandbox_id: &str, container: &Container) -> Key {
    (pod_sandbox_id.to_string(), container.name.clone())
}

/// The controller key and the pod spec of `container`, or `None` when the
/// pod is not a Kubernetes pod (no kubepods cgroup parent) or the container
/// is an ephemeral one of a Guaranteed pod ([`kube::is_ephemeral`]): such a
/// container runs in the shared pool without an admission.
pub fn identify(
    pod: &PodSandbox,
    container: &Container,
    siblings: &[Container],
) -> Result<Option<(Key, Pod)>, KubeError> {
    match kube::qos_class(pod) {
        Err(KubeError::NotKubernetes { .. } | KubeError::MissingCgroupParent { .. }) => {
            return Ok(None)
        }
        Err(err) => return Err(err),
        Ok(_) => {}
    }
    if kube::is_ephemeral(pod, container)? {
        return Ok(None);
    }
    let mut all: Vec<&Container> = siblings.iter().collect();
    all.push(container);
    let spec = kube::kube_pod(pod, &all)?;
    let name = kube::container_name(container)?;
    Ok(Some(((spec.uid.clone(), name), spec)))
}

/// What the runtime reports a container has now.
#[must_use]
pub fn observed(container: &Container) -> Observed {
    let parse = |text: &str| {
        (!text.is_empty())
            .then(|| CpuSet::parse_list(text).ok())
            .flatten()
    };
    Observed {
        cpus: parse(&container.resources.cpus),
        mems: parse(&container.resources.mems),
        cpu_quota: container.resources.cpu_quota,
    }
}

/// kubelet's text for an admission failure: `<reason>: <message>`, the
/// message being the error itself for SMT alignment and topology affinity
/// failures and `Allocate failed due to <error>, which is unexpected` for
/// the rest (kubelet's `UnexpectedAdmissionError`).
#[must_use]
pub fn kubelet_admission_text(err: &PolicyError) -> String {
    let reason = err.reason();
    if reason == "UnexpectedAdmissionError" {
        format!("{reason}: Allocate failed due to {err}, which is unexpected")
    } else {
        format!("{reason}: {err}")
    }
}

/// A controller error as the runtime (and kubelet's events) will show it.
#[must_use]
pub fn handler_error(err: ControlError) -> HandlerError {
    match err {
        ControlError::Admission {
            pod,
            container,
            source,
        } => HandlerError::new(
            ErrorKind::ResourceExhausted,
            format!(
                "pod {pod} container {container}: {}",
                kubelet_admission_text(&source)
            ),
        ),
        // An infeasible in-place resize: the policy's (kubelet's) text.
        ControlError::Resize { .. } => {
            HandlerError::new(ErrorKind::ResourceExhausted, err.to_string())
        }
        ControlError::NotFound { .. } => HandlerError::new(ErrorKind::NotFound, err.to_string()),
        ControlError::Conflict { .. } => {
            HandlerError::new(ErrorKind::InvalidInput, err.to_string())
        }
        other => HandlerError::new(ErrorKind::Internal, format!("pinion: {other}")),
    }
}
