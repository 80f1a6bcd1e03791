//! What the NRI front-end remembers between events: the pod sandboxes and
//! containers the runtime has shown, each container with its controller
//! key (pod UID, container name) when Pinion manages it. Also the pure
//! helpers: Kubernetes identity from NRI data and kubelet's admission text.

use std::collections::BTreeMap;

use pinion_core::policy::PolicyError;
use pinion_core::{pod::Pod, CpuSet};
use pinion_nri::kube::{self, KubeError};
use pinion_nri::{Container, ContainerUpdate, CpuAssignment, ErrorKind, HandlerError, PodSandbox};

use crate::controller::{Admitted, ControlError, Key, WorkloadView};

/// One container the runtime has shown.
#[derive(Debug, Clone)]
pub struct Entry {
    pub container: Container,
    /// The controller key; `None` for pods outside kubepods (shared pool,
    /// not admitted).
    pub key: Option<Key>,
    pub exclusive: bool,
}

/// Pods and containers by runtime id.
#[derive(Debug, Default)]
pub struct Tracked {
    pub pods: BTreeMap<String, PodSandbox>,
    pub containers: BTreeMap<String, Entry>,
}

impl Tracked {
    /// The containers of sandbox `pod_id` Pinion has seen, except `skip`.
    #[must_use]
    pub fn siblings(&self, pod_id: &str, skip: &str) -> Vec<Container> {
        self.containers
            .values()
            .filter(|e| e.container.pod_sandbox_id == pod_id && e.container.id != skip)
            .map(|e| e.container.clone())
            .collect()
    }

    /// Ids of the containers in the shared pool.
    #[must_use]
    pub fn shared_ids(&self) -> Vec<String> {
        self.containers
            .iter()
            .filter(|(_, e)| !e.exclusive)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// The controller key and the pod spec of `container`, or `None` when the
/// pod is not a Kubernetes pod (no kubepods cgroup parent): such a
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
    let mut all: Vec<&Container> = siblings.iter().collect();
    all.push(container);
    let spec = kube::kube_pod(pod, &all)?;
    let name = kube::container_name(container)?;
    Ok(Some(((spec.uid.clone(), name), spec)))
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
        ControlError::NotFound { .. } => HandlerError::new(ErrorKind::NotFound, err.to_string()),
        other => HandlerError::new(ErrorKind::Internal, format!("pinion: {other}")),
    }
}

/// The placement sent to the runtime for an admitted container.
#[must_use]
pub fn assignment_of(admitted: &Admitted) -> CpuAssignment {
    placement(admitted.exclusive, &admitted.cpus, &admitted.mems)
}

/// The placement sent to the runtime for a workload of the snapshot.
#[must_use]
pub fn assignment_of_view(view: &WorkloadView) -> CpuAssignment {
    placement(view.exclusive, &view.cpus, &view.mems)
}

/// Exclusive CPUs: cpus, their NUMA nodes as mems, no CFS quota; the
/// shared pool: cpus only.
fn placement(exclusive: bool, cpus: &CpuSet, mems: &CpuSet) -> CpuAssignment {
    if exclusive {
        CpuAssignment {
            cpus: cpus.clone(),
            mems: Some(mems.clone()),
            unlimited_quota: true,
        }
    } else {
        CpuAssignment::shared(cpus.clone())
    }
}

/// One update per id, all to `assignment`.
#[must_use]
pub fn updates_to(ids: Vec<String>, assignment: &CpuAssignment) -> Vec<ContainerUpdate> {
    ids.into_iter()
        .map(|container_id| ContainerUpdate {
            container_id,
            assignment: assignment.clone(),
        })
        .collect()
}
