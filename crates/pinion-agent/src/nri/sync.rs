//! Building the front-end's memory from a `Synchronize`.

use std::collections::BTreeMap;
use std::sync::Arc;

use pinion_core::pod::Pod;
use pinion_host::cgroup::ContainerCgroup;
use pinion_nri::kube::{self, KubeError};
use pinion_nri::{Container, ContainerState, PodSandbox};

use super::state::{follower_key, sandbox_cgroup, Entry, Tracked};
use crate::controller::Key;

/// Every pod, and every container that has not stopped, with its key;
/// containers whose data cannot be mapped follow the shared pool. Where
/// the runtime lists more than one container of a key (an attempt that
/// never started, left beside the one that runs), the key follows the one
/// that runs ([`Tracked::current`]).
pub fn track_all(pods: Vec<PodSandbox>, containers: Vec<Container>) -> Tracked {
    let mut tracked = Tracked::default();
    for pod in pods {
        tracked.pods.insert(pod.id.clone(), pod);
    }
    let live = containers
        .into_iter()
        .filter(|c| c.state != ContainerState::Stopped);
    let mut current: BTreeMap<Key, (u8, String)> = BTreeMap::new();
    for container in live {
        let key = key_of(&tracked, &container);
        let rank = liveness(container.state);
        let first = current.get(&key).is_none_or(|(best, _)| rank > *best);
        if first {
            current.insert(key.clone(), (rank, container.id.clone()));
        }
        tracked
            .containers
            .insert(container.id.clone(), Entry { container, key });
    }
    tracked.current = current
        .into_iter()
        .map(|(key, (_, id))| (key, id))
        .collect();
    tracked
}

/// How surely a listed container is the one its key follows: running (or
/// paused) over created but never started, over a state the runtime does
/// not know.
fn liveness(state: ContainerState) -> u8 {
    match state {
        ContainerState::Running | ContainerState::Paused => 2,
        ContainerState::Created => 1,
        _ => 0,
    }
}

/// The Kubernetes pods of `tracked` with a sandbox cgroup: (pod UID,
/// sandbox id, the sandbox's cgroup). Their containers that do not run are
/// held for a restart while that cgroup is there.
#[must_use]
pub fn kube_sandboxes(tracked: &Tracked) -> Vec<(String, String, ContainerCgroup)> {
    let mut out = Vec::new();
    for (id, pod) in &tracked.pods {
        if kube::qos_class(pod).is_err() {
            continue;
        }
        let (Ok(uid), Some(cgroup)) = (kube::pod_uid(pod), sandbox_cgroup(pod)) else {
            continue;
        };
        out.push((uid, id.clone(), cgroup));
    }
    out
}

/// (pod UID, container name) of a Kubernetes container; the follower key
/// for a pod outside kubepods or data that names neither (logged).
fn key_of(tracked: &Tracked, container: &Container) -> Key {
    let sandbox = &container.pod_sandbox_id;
    let Some(pod) = tracked.pods.get(sandbox) else {
        tracing::warn!(container = %container.id, pod = %sandbox, "container of an unknown pod: shared pool");
        return follower_key(sandbox, container);
    };
    let key = kube::qos_class(pod)
        .and_then(|_| Ok((kube::pod_uid(pod)?, kube::container_name(container)?)));
    match key {
        Ok(_) if kube::is_ephemeral(pod, container).unwrap_or(false) => {
            follower_key(sandbox, container)
        }
        Ok(key) => key,
        Err(KubeError::NotKubernetes { .. } | KubeError::MissingCgroupParent { .. }) => {
            follower_key(sandbox, container)
        }
        Err(err) => {
            tracing::warn!(container = %container.id, "{err}; shared pool");
            follower_key(sandbox, container)
        }
    }
}

/// The spec of every Kubernetes pod of `tracked` (by sandbox id), built from
/// its live containers: what the controller needs to know a recovered
/// container's pod by name again. Pods whose data does not map are left out.
#[must_use]
pub fn pod_specs(tracked: &Tracked) -> BTreeMap<String, Arc<Pod>> {
    let mut specs = BTreeMap::new();
    for (id, pod) in &tracked.pods {
        if kube::qos_class(pod).is_err() {
            continue;
        }
        let containers: Vec<&Container> = tracked
            .containers
            .values()
            .map(|e| &e.container)
            .filter(|c| c.pod_sandbox_id == *id)
            .collect();
        match kube::kube_pod(pod, &containers) {
            Ok(spec) => {
                specs.insert(id.clone(), Arc::new(spec));
            }
            Err(err) => tracing::debug!(pod = %id, "no pod spec: {err}"),
        }
    }
    specs
}
