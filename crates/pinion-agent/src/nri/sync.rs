//! Building the front-end's memory from a `Synchronize`.

use pinion_nri::kube::{self, KubeError};
use pinion_nri::{Container, ContainerState, PodSandbox};

use super::state::{Entry, Tracked};

/// Every pod, and every container that has not stopped, with its key;
/// containers whose data cannot be mapped run in the shared pool.
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
        tracked.containers.insert(
            container.id.clone(),
            Entry {
                container,
                key,
                exclusive: false,
            },
        );
    }
    tracked
}

/// (pod UID, container name) of a Kubernetes container; `None` for a
/// pod outside kubepods or data that names neither (logged).
fn key_of(tracked: &Tracked, container: &Container) -> Option<(String, String)> {
    let Some(pod) = tracked.pods.get(&container.pod_sandbox_id) else {
        tracing::warn!(container = %container.id, pod = %container.pod_sandbox_id, "container of an unknown pod: shared pool");
        return None;
    };
    let key = kube::qos_class(pod)
        .and_then(|_| Ok((kube::pod_uid(pod)?, kube::container_name(container)?)));
    match key {
        Ok(key) => Some(key),
        Err(KubeError::NotKubernetes { .. } | KubeError::MissingCgroupParent { .. }) => None,
        Err(err) => {
            tracing::warn!(container = %container.id, "{err}; shared pool");
            None
        }
    }
}
