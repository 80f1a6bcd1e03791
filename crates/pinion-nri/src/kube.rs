//! Kubernetes semantics from NRI data (pure functions): pod UID, container
//! name, init / sidecar / app container, QoS class from the pod's cgroup
//! parent, CPU request from cpu.shares, CPU limit from the CFS quota, memory
//! limit, pod-level resources. The result is a [`pinion_core::pod::Pod`] the
//! engine admits. What NRI does not carry, and how Pinion decides then, is
//! described in `docs/nri.md`.

use std::collections::BTreeMap;

use pinion_core::pod::{self, QosClass, RestartPolicy};
use pinion_core::policy::static_policy::ContainerKind;
use pinion_core::Quantity;

use crate::model::{Container, PodSandbox, Resources};

/// Pod annotation listing the pod's init containers in spec order,
/// comma-separated; `name=sidecar` marks a restartable init container.
pub const INIT_CONTAINERS_ANNOTATION: &str = "pinion.dev/init-containers";
/// Pod annotation with the requests of resources NRI does not show (extended
/// resources served by resource plugins), as JSON:
/// `{"<container>": {"<resource>": "<quantity>", …}, …}`.
// difference-from-kubelet: qrm-annotations-over-nri
pub const REQUESTS_ANNOTATION: &str = "pinion.dev/requests";
/// Pod annotation `"true"` when the pod spec sets pod-level resources
/// (`spec.resources`, KEP-2837). NRI sends the pod cgroup's resources for
/// every pod (the containers' totals when the spec sets none), so only this
/// annotation tells the two apart; absent or `"false"` = none.
pub const POD_LEVEL_RESOURCES_ANNOTATION: &str = "pinion.dev/pod-level-resources";
/// Labels kubelet puts on every sandbox / container.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// kubelet's default CFS period (100 ms, in µs).
pub const DEFAULT_CFS_PERIOD: u64 = 100_000;
/// kubelet's cpu.shares for "no request".
pub const MIN_SHARES: u64 = 2;

/// Errors deriving Kubernetes semantics; each names the pod or container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    #[error(
        "pod sandbox {sandbox:?} has no uid (neither the uid field nor the {POD_UID_LABEL} label)"
    )]
    MissingUid { sandbox: String },
    #[error("container {container:?} has no name (neither the name field nor the {CONTAINER_NAME_LABEL} label)")]
    MissingName { container: String },
    #[error("{what} {shown:?}… of {owner:?} is not a Kubernetes name: {reason}")]
    BadName {
        what: &'static str,
        /// The name's first characters.
        shown: String,
        owner: String,
        reason: String,
    },
    #[error("pod {pod:?} has no cgroup parent, so its QoS class is unknown")]
    MissingCgroupParent { pod: String },
    #[error("pod {pod:?} has cgroup parent {parent:?}, which is not under kubepods")]
    NotKubernetes { pod: String, parent: String },
    #[error("pod {pod:?} annotation {key}={value:?} is malformed: {reason}")]
    Annotation {
        pod: String,
        key: &'static str,
        value: String,
        reason: String,
    },
    #[error("container {container:?} of Guaranteed pod {pod:?} has no {what}")]
    IncompleteGuaranteed {
        pod: String,
        container: String,
        what: &'static str,
    },
    #[error("Guaranteed pod {pod:?} with pod-level resources has no pod-level {what}")]
    IncompletePodLevel { pod: String, what: &'static str },
    #[error("container {container:?} of pod {pod:?} belongs to pod sandbox {sandbox:?}")]
    WrongPod {
        pod: String,
        container: String,
        sandbox: String,
    },
}

/// The pod's UID: the uid field, else kubelet's label.
pub fn pod_uid(pod: &PodSandbox) -> Result<String, KubeError> {
    let uid = non_empty(&pod.uid)
        .or_else(|| pod.labels.get(POD_UID_LABEL).and_then(|v| non_empty(v)))
        .ok_or_else(|| KubeError::MissingUid {
            sandbox: pod.id.clone(),
        })?;
    check_name("pod uid", uid, &pod.id)
}

/// The longest pod UID or container name taken (bytes): a Kubernetes UID
/// has 36, a container name at most 63 (a DNS label); a longer one is
/// refused before it becomes a key in the state file and the journal.
pub const MAX_NAME_BYTES: usize = 253;

/// `name` when it is at most [`MAX_NAME_BYTES`] long and holds no control
/// character (it is written to the state file and to logs).
fn check_name(what: &'static str, name: String, owner: &str) -> Result<String, KubeError> {
    let reason = if name.len() > MAX_NAME_BYTES {
        format!("{} bytes, more than {MAX_NAME_BYTES}", name.len())
    } else if name.chars().any(char::is_control) {
        "it holds a control character".to_string()
    } else {
        return Ok(name);
    };
    Err(KubeError::BadName {
        what,
        shown: name.chars().take(40).collect(),
        owner: owner.chars().take(80).collect(),
        reason,
    })
}

/// The container's Kubernetes name: the name field, else kubelet's label.
pub fn container_name(container: &Container) -> Result<String, KubeError> {
    let name = non_empty(&container.name)
        .or_else(|| {
            container
                .labels
                .get(CONTAINER_NAME_LABEL)
                .and_then(|v| non_empty(v))
        })
        .ok_or_else(|| KubeError::MissingName {
            container: container.id.clone(),
        })?;
    check_name("container name", name, &container.id)
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

/// QoS class from the pod's cgroup parent, for both cgroup drivers:
/// cgroupfs `/kubepods/burstable/pod<uid>`, systemd
/// `kubepods-burstable-pod<uid>.slice` (or its full path). A parent without a
/// `besteffort` / `burstable` level is Guaranteed.
pub fn qos_class(pod: &PodSandbox) -> Result<QosClass, KubeError> {
    let parent = pod.cgroup_parent.as_str();
    if parent.is_empty() {
        return Err(KubeError::MissingCgroupParent {
            pod: pod.id.clone(),
        });
    }
    let tokens: Vec<&str> = parent
        .split('/')
        .map(|segment| segment.strip_suffix(".slice").unwrap_or(segment))
        .flat_map(|segment| segment.split('-'))
        .collect();
    if !tokens.contains(&"kubepods") {
        return Err(KubeError::NotKubernetes {
            pod: pod.id.clone(),
            parent: parent.to_string(),
        });
    }
    Ok(if tokens.contains(&"besteffort") {
        QosClass::BestEffort
    } else if tokens.contains(&"burstable") {
        QosClass::Burstable
    } else {
        QosClass::Guaranteed
    })
}

/// CPU request in millicores from cpu.shares: the exact inverse of kubelet's
/// `milliCPU * 1024 / 1000` (integer division), i.e. rounding up. Shares of
/// 2 or less mean "no request".
#[must_use]
pub fn milli_cpu_from_shares(shares: u64) -> Option<u64> {
    (shares > MIN_SHARES)
        .then(|| (u128::from(shares) * 1000).div_ceil(1024))
        .map(|milli| u64::try_from(milli).unwrap_or(u64::MAX))
}

/// CPU limit in millicores from the CFS quota and period (kubelet's
/// `milliCPU * period / 1000`, rounded up); no positive quota = no limit.
#[must_use]
pub fn milli_cpu_from_quota(quota: Option<i64>, period: Option<u64>) -> Option<u64> {
    let quota = u64::try_from(quota?).ok().filter(|q| *q > 0)?;
    let period = period.filter(|p| *p > 0).unwrap_or(DEFAULT_CFS_PERIOD);
    let milli = (u128::from(quota) * 1000).div_ceil(u128::from(period));
    Some(u64::try_from(milli).unwrap_or(u64::MAX))
}

/// Memory limit in bytes (none when absent or not positive).
#[must_use]
pub fn memory_limit(resources: &Resources) -> Option<u64> {
    resources
        .memory_limit
        .and_then(|limit| u64::try_from(limit).ok())
        .filter(|limit| *limit > 0)
}

/// The kind of container `name` in `pod`, from the
/// [`INIT_CONTAINERS_ANNOTATION`] (absent = no init containers).
pub fn container_kind(pod: &PodSandbox, name: &str) -> Result<ContainerKind, KubeError> {
    let kind = init_containers(pod)?
        .into_iter()
        .find(|(init, _)| init == name)
        .map_or(ContainerKind::App, |(_, sidecar)| {
            if sidecar {
                ContainerKind::Sidecar
            } else {
                ContainerKind::Init
            }
        });
    Ok(kind)
}

/// The pod's init containers in spec order: (name, is sidecar).
pub fn init_containers(pod: &PodSandbox) -> Result<Vec<(String, bool)>, KubeError> {
    declared_init_containers(&pod.id, &pod.annotations)
}

/// The init containers a pod's `annotations` declare
/// ([`INIT_CONTAINERS_ANNOTATION`]) in spec order: (name, is sidecar);
/// `pod` names the pod in errors.
pub fn declared_init_containers(
    pod: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<(String, bool)>, KubeError> {
    let Some(value) = annotations.get(INIT_CONTAINERS_ANNOTATION) else {
        return Ok(Vec::new());
    };
    let bad = |reason: String| KubeError::Annotation {
        pod: pod.to_string(),
        key: INIT_CONTAINERS_ANNOTATION,
        value: value.clone(),
        reason,
    };
    let mut out: Vec<(String, bool)> = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let (name, sidecar) = match entry.split_once('=') {
            None => (entry, false),
            Some((name, "sidecar")) => (name, true),
            Some((_, other)) => {
                return Err(bad(format!("unknown kind {other:?} (only \"sidecar\")")))
            }
        };
        if pinion_core::k8s_names::dns1123_label_defect(name).is_some() {
            return Err(bad(format!("{name:?} is not a container name")));
        }
        if out.iter().any(|(seen, _)| seen == name) {
            return Err(bad(format!("{name:?} is listed twice")));
        }
        out.push((name.to_string(), sidecar));
    }
    Ok(out)
}

fn milli(value: u64) -> Quantity {
    if value.is_multiple_of(1000) {
        return Quantity::from_units(value / 1000);
    }
    Quantity::parse(&format!("{value}m")).unwrap_or_else(|_| Quantity::from_units(value / 1000))
}

/// One container's Kubernetes resources, consistent with the pod's QoS class
/// (taken from the cgroup parent, which is authoritative):
/// * Guaranteed: request = limit = the CPU from cpu.shares (the quota may be
///   gone: Pinion removes it for exclusive CPUs), memory request = limit.
/// * Guaranteed with pod-level resources ([`POD_LEVEL_RESOURCES_ANNOTATION`]):
///   the container's own values, each optional — CPU request from shares,
///   CPU limit from the quota, memory limit, and memory request = limit
///   (NRI does not carry the memory request). Only a container whose CPU
///   request equals its limit gets exclusive CPUs then, so a container whose
///   quota Pinion removed must be re-admitted from the recorded spec.
/// * Burstable: CPU request from shares, limit from the quota, memory limit;
///   the memory request is not sent by the runtime and is recorded as 0.
/// * BestEffort: nothing set.
pub fn kube_container(
    pod: &PodSandbox,
    container: &Container,
) -> Result<pod::Container, KubeError> {
    let name = container_name(container)?;
    let r = &container.resources;
    let request = r.cpu_shares.and_then(milli_cpu_from_shares);
    let memory = memory_limit(r);
    let mut out = pod::Container {
        name: name.clone(),
        ..pod::Container::default()
    };
    match qos_class(pod)? {
        QosClass::Guaranteed if has_pod_level_resources(pod)? => {
            // The pod's class comes from its pod-level resources: a
            // container may set any of its own, or none.
            out.cpu_request = request.map(milli);
            out.cpu_limit = milli_cpu_from_quota(r.cpu_quota, r.cpu_period).map(milli);
            out.memory_limit = memory.map(bytes);
            out.memory_request = memory.map(bytes);
        }
        QosClass::Guaranteed => {
            let incomplete = |what| KubeError::IncompleteGuaranteed {
                pod: pod.id.clone(),
                container: name.clone(),
                what,
            };
            let cpu = milli(request.ok_or_else(|| incomplete("cpu request (cpu.shares)"))?);
            let memory = bytes(memory.ok_or_else(|| incomplete("memory limit"))?);
            out.cpu_request = Some(cpu.clone());
            out.cpu_limit = Some(cpu);
            out.memory_request = Some(memory.clone());
            out.memory_limit = Some(memory);
        }
        QosClass::Burstable => {
            out.cpu_request = request.map(milli);
            out.cpu_limit = milli_cpu_from_quota(r.cpu_quota, r.cpu_period).map(milli);
            out.memory_limit = memory.map(bytes);
            out.memory_request = memory.map(|_| Quantity::from_units(0));
        }
        QosClass::BestEffort => {}
    }
    if container_kind(pod, &out.name)? == ContainerKind::Sidecar {
        out.restart_policy = Some(RestartPolicy::Always);
    }
    out.extended_requests = extended_requests(pod)?
        .remove(&out.name)
        .unwrap_or_default();
    Ok(out)
}

/// The extended-resource requests of every container, from
/// [`REQUESTS_ANNOTATION`] (empty without it). `cpu` and `memory` come
/// from the container's Linux resources and are refused here.
pub fn extended_requests(
    pod: &PodSandbox,
) -> Result<BTreeMap<String, BTreeMap<String, Quantity>>, KubeError> {
    let Some(value) = pod.annotations.get(REQUESTS_ANNOTATION) else {
        return Ok(BTreeMap::new());
    };
    let bad = |reason: String| KubeError::Annotation {
        pod: pod.id.clone(),
        key: REQUESTS_ANNOTATION,
        value: value.clone(),
        reason,
    };
    let parsed: BTreeMap<String, BTreeMap<String, String>> =
        serde_json::from_str(value).map_err(|err| {
            bad(format!(
                "{err} (expected {{\"<container>\": {{\"<resource>\": \"<quantity>\"}}}})"
            ))
        })?;
    let mut out = BTreeMap::new();
    for (container, requests) in parsed {
        let mut quantities = BTreeMap::new();
        for (resource, text) in requests {
            if resource == "cpu" || resource == "memory" {
                return Err(bad(format!(
                    "{resource:?} of container {container:?} comes from its linux resources, not this annotation"
                )));
            }
            let quantity = Quantity::parse(&text)
                .map_err(|err| bad(format!("{resource} of container {container:?}: {err}")))?;
            quantities.insert(resource, quantity);
        }
        out.insert(container, quantities);
    }
    Ok(out)
}

fn bytes(value: u64) -> Quantity {
    Quantity::from_units(value)
}

/// Whether `container` is an ephemeral container (`kubectl debug`) of a
/// Guaranteed pod without pod-level resources. The API gives ephemeral
/// containers no resources, and every other container of a Guaranteed pod
/// sets its CPU and memory, so a container of such a pod that sets none of
/// them (kubelet sends the minimum `cpu.shares`, no quota, no memory limit)
/// is one. It is not part of the pod's spec: kubelet's CPU manager never
/// admits an ephemeral container, which runs on the shared pool.
pub fn is_ephemeral(pod: &PodSandbox, container: &Container) -> Result<bool, KubeError> {
    Ok(may_have_ephemeral(pod)? && sets_no_resources(container))
}

/// Whether an ephemeral container of `pod` is told apart by its resources
/// ([`is_ephemeral`]): a Guaranteed pod without pod-level resources.
fn may_have_ephemeral(pod: &PodSandbox) -> Result<bool, KubeError> {
    Ok(qos_class(pod)? == QosClass::Guaranteed && !has_pod_level_resources(pod)?)
}

/// No CPU request, no CPU limit and no memory limit.
fn sets_no_resources(container: &Container) -> bool {
    let r = &container.resources;
    r.cpu_shares.and_then(milli_cpu_from_shares).is_none()
        && milli_cpu_from_quota(r.cpu_quota, r.cpu_period).is_none()
        && memory_limit(r).is_none()
}

/// The pod spec Pinion can know: `containers` (those the runtime has shown,
/// in any order, its ephemeral ones left out: [`is_ephemeral`]) placed as
/// init containers (annotation order) or app containers. Its
/// [`pod::Pod::qos`] equals the cgroup parent's class.
pub fn kube_pod(pod: &PodSandbox, containers: &[&Container]) -> Result<pod::Pod, KubeError> {
    let uid = pod_uid(pod)?;
    let inits = init_containers(pod)?;
    // Read once for the pod, not per container (and not for a pod
    // without containers, whose spec is empty whatever its class).
    let ephemeral_possible = !containers.is_empty() && may_have_ephemeral(pod)?;
    let mut init_slots: Vec<Option<pod::Container>> = vec![None; inits.len()];
    let mut apps = Vec::new();
    for container in containers {
        if container.pod_sandbox_id != pod.id {
            return Err(KubeError::WrongPod {
                pod: pod.id.clone(),
                container: container.id.clone(),
                sandbox: container.pod_sandbox_id.clone(),
            });
        }
        if ephemeral_possible && sets_no_resources(container) {
            continue;
        }
        let spec = kube_container(pod, container)?;
        match inits.iter().position(|(name, _)| *name == spec.name) {
            Some(slot) => init_slots[slot] = Some(spec),
            None => apps.push(spec),
        }
    }
    Ok(pod::Pod {
        uid,
        name: pod.name.clone(),
        namespace: pod.namespace.clone(),
        labels: pod.labels.clone(),
        annotations: pod.annotations.clone(),
        init_containers: init_slots.into_iter().flatten().collect(),
        containers: apps,
    })
}

/// Bounds `[low, high)` in bytes of a Burstable container's memory request,
/// estimated from the OOM score adjustment kubelet gave it
/// (`1000 - 1000 * request / capacity`, integer division, clamped to 3..=999)
/// and the node's memory `capacity`. `None` for values kubelet never gives a
/// Burstable container (Guaranteed -997, BestEffort 1000, outside 3..=999).
/// The estimate is only as fine as `capacity / 1000`; Pinion does not use it
/// for CPU decisions (see docs/nri.md).
#[must_use]
pub fn memory_request_bounds(oom_score_adj: i64, capacity: u64) -> Option<(u64, u64)> {
    if !(3..=999).contains(&oom_score_adj) || capacity == 0 {
        return None;
    }
    let per_mille =
        |k: u64| u64::try_from(u128::from(capacity) * u128::from(k) / 1000).unwrap_or(u64::MAX);
    let k = u64::try_from(1000 - oom_score_adj).unwrap_or(0);
    Some(match oom_score_adj {
        // clamped up from anything at or above 997/1000 of the capacity
        3 => (per_mille(997), u64::MAX),
        // 1000 - 0 = 1000 is lowered to 999: k is 0 or 1
        999 => (0, per_mille(2)),
        _ => (per_mille(k), per_mille(k + 1)),
    })
}

/// Whether the pod declares pod-level resources
/// ([`POD_LEVEL_RESOURCES_ANNOTATION`]).
pub fn has_pod_level_resources(pod: &PodSandbox) -> Result<bool, KubeError> {
    match pod
        .annotations
        .get(POD_LEVEL_RESOURCES_ANNOTATION)
        .map(String::as_str)
    {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(KubeError::Annotation {
            pod: pod.id.clone(),
            key: POD_LEVEL_RESOURCES_ANNOTATION,
            value: other.to_string(),
            reason: "expected \"true\" or \"false\"".to_string(),
        }),
    }
}

/// The pod-level resources of the engine's pod model
/// ([`pinion_core::pod::PodResources`], for `Engine::set_pod_resources`):
/// `None` unless the pod declares them ([`POD_LEVEL_RESOURCES_ANNOTATION`]);
/// then from the pod cgroup's resources NRI sent, consistent with the QoS
/// class of the cgroup parent as for containers: Guaranteed → CPU request =
/// limit from cpu.shares, memory request = limit (both required);
/// Burstable → CPU request from shares, limit from the quota, memory limit
/// (memory request recorded as 0); BestEffort → `None`.
pub fn kube_pod_resources(pod: &PodSandbox) -> Result<Option<pod::PodResources>, KubeError> {
    if !has_pod_level_resources(pod)? {
        return Ok(None);
    }
    let Some(r) = pod.pod_resources.as_ref() else {
        return Err(KubeError::Annotation {
            pod: pod.id.clone(),
            key: POD_LEVEL_RESOURCES_ANNOTATION,
            value: "true".to_string(),
            reason: "the runtime sent no pod-level resources".to_string(),
        });
    };
    let request = r.cpu_shares.and_then(milli_cpu_from_shares);
    let memory = memory_limit(r);
    let mut out = pod::PodResources::default();
    match qos_class(pod)? {
        QosClass::Guaranteed => {
            let incomplete = |what| KubeError::IncompletePodLevel {
                pod: pod.id.clone(),
                what,
            };
            let cpu = milli(request.ok_or_else(|| incomplete("cpu request (cpu.shares)"))?);
            let memory = bytes(memory.ok_or_else(|| incomplete("memory limit"))?);
            out.cpu_request = Some(cpu.clone());
            out.cpu_limit = Some(cpu);
            out.memory_request = Some(memory.clone());
            out.memory_limit = Some(memory);
        }
        QosClass::Burstable => {
            out.cpu_request = request.map(milli);
            out.cpu_limit = milli_cpu_from_quota(r.cpu_quota, r.cpu_period).map(milli);
            out.memory_limit = memory.map(bytes);
            out.memory_request = memory.map(|_| Quantity::from_units(0));
        }
        QosClass::BestEffort => return Ok(None),
    }
    Ok(Some(out))
}

/// Pod-level resources kubelet sends with the sandbox (the pod's totals).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResources {
    pub cpu_request: Option<Quantity>,
    pub cpu_limit: Option<Quantity>,
    pub memory_limit: Option<Quantity>,
}

/// The pod-level resources, when the runtime sent them.
#[must_use]
pub fn pod_resources(pod: &PodSandbox) -> Option<PodResources> {
    let r = pod.pod_resources.as_ref()?;
    Some(PodResources {
        cpu_request: r.cpu_shares.and_then(milli_cpu_from_shares).map(milli),
        cpu_limit: milli_cpu_from_quota(r.cpu_quota, r.cpu_period).map(milli),
        memory_limit: memory_limit(r).map(bytes),
    })
}

#[cfg(test)]
mod tests;
