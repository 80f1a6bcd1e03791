//! Building the front-end's memory from a `Synchronize`.

use pinion_nri::kube::{self, KubeError};
use pinion_nri::{Container, ContainerState, PodSandbox};

use super::state::{follower_key, Entry, Tracked};
use crate::controller::Key;

/// Every pod, and every container that has not stopped, with its key;
/// containers whose data cannot be mapped follow the shared pool.
pub fn track_all(pods: Vec<PodSandbox>, containers: Vec<Container>) -> Tracked {
    let mut tracked = Tracked::default();
    for pod in pods {
        tracked.pods.insert(pod.id.clone(), pod);
    }
    let live = containers
        .into_iter()
        .filter(|c| c.state != ContainerState::Stopped);
    for container in live {
        let key = key_of(&tracked, &container);
        tracked
            .containers
            .insert(container.id.clone(), Entry { container, key });
    }
    tracked
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
