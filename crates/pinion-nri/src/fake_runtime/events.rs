//! The fake runtime's lifecycle operations: each relays its NRI event to the
//! plugin (holding the NRI lock, like containerd) and applies the answer.

use prost::Message;

use super::{
    apply_adjustment, apply_resources, status_of, ContainerSpec, FakeRuntime, Inner, PodSpec,
};
use crate::conn::CallError;
use crate::model::Resources;
use crate::proto::nri as pb;
use crate::service::event;
use crate::status::{Code, Status};

/// Errors of a fake-runtime operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FakeError {
    #[error("unknown pod {0:?}")]
    UnknownPod(String),
    #[error("unknown container {0:?}")]
    UnknownContainer(String),
    #[error("plugin rejected {method}: {status}")]
    Rejected { method: String, status: Status },
    #[error("plugin sent an undecodable {method} reply: {reason}")]
    BadReply { method: String, reason: String },
    /// A reply containerd refuses, failing the event (NRI's result
    /// collection: one setting of a container set twice, or an update of
    /// the container being created).
    #[error("{method} failed: {reason}")]
    Refused { method: String, reason: String },
}

fn rejected(method: &str) -> impl Fn(Status) -> FakeError + '_ {
    move |status| FakeError::Rejected {
        method: method.to_string(),
        status,
    }
}

fn decode<M: Message + Default>(method: &str, bytes: &[u8]) -> Result<M, FakeError> {
    M::decode(bytes).map_err(|e| FakeError::BadReply {
        method: method.to_string(),
        reason: e.to_string(),
    })
}

/// The settings of `resources` containerd's result collection claims for
/// one plugin, named as in its error.
fn claimed_settings(resources: &pb::LinuxResources) -> Vec<&'static str> {
    let mut claimed = Vec::new();
    if let Some(cpu) = &resources.cpu {
        if !cpu.cpus.is_empty() {
            claimed.push("CPU pinning");
        }
        if !cpu.mems.is_empty() {
            claimed.push("memory pinning");
        }
        if cpu.shares.is_some() {
            claimed.push("CPU shares");
        }
        if cpu.quota.is_some() {
            claimed.push("CPU quota");
        }
        if cpu.period.is_some() {
            claimed.push("CPU period");
        }
    }
    if resources.memory.as_ref().is_some_and(|m| m.limit.is_some()) {
        claimed.push("memory limit");
    }
    claimed
}

impl Inner {
    /// Checks a plugin's updates in an event reply as containerd does
    /// before it applies any: an update of `creating` (the container the
    /// event creates), or two updates of one container that both set one
    /// setting, fail the event with containerd's error.
    async fn check_reply_updates(
        &self,
        method: &str,
        creating: Option<&str>,
        updates: &[pb::ContainerUpdate],
    ) -> Result<(), FakeError> {
        let plugin = self
            .link
            .lock()
            .await
            .as_ref()
            .map(|l| format!("{}-{}", l.index, l.name))
            .unwrap_or_default();
        let refused = |reason: String| FakeError::Refused {
            method: method.to_string(),
            reason,
        };
        let mut claimed = std::collections::HashSet::new();
        for update in updates {
            let id = update.container_id.as_str();
            if Some(id) == creating {
                return Err(refused(format!(
                    "plugin {plugin:?} asked update of {id:?} during creation"
                )));
            }
            let Some(resources) = update.linux.as_ref().and_then(|l| l.resources.as_ref()) else {
                continue;
            };
            for setting in claimed_settings(resources) {
                if !claimed.insert((id, setting)) {
                    return Err(refused(format!(
                        "plugins {plugin:?} and {plugin:?} both tried to set {setting}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Sends one event if the plugin subscribed to it. `Ok(None)`: not sent,
    /// or the plugin timed out / went away (then it is disconnected and the
    /// operation goes on without it: fail-open, like containerd).
    async fn relay(
        &self,
        ev: u32,
        method: &str,
        payload: Vec<u8>,
        state_change: Option<pb::StateChangeEvent>,
    ) -> Result<Option<Vec<u8>>, Status> {
        let Some(link) = self.link.lock().await.clone() else {
            return Ok(None);
        };
        let mask = *link
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ev == 0 || mask & (1 << (ev - 1)) == 0 {
            return Ok(None);
        }
        let _adaptation = match self.options.two_locks {
            Some(window) => {
                tokio::time::sleep(window).await;
                Some(self.adaptation_lock.lock().await)
            }
            None => None,
        };
        let dedicated = state_change.is_none() || self.options.dedicated_rpcs;
        let result = if dedicated {
            self.note(format!("{method} sent"));
            link.call(self, method, payload).await
        } else {
            Err(CallError::Status {
                method: method.to_string(),
                status: Status::new(Code::Unimplemented, "v0.8 runtime: use StateChange"),
            })
        };
        let result = match (result, state_change) {
            (Err(err), Some(sc))
                if status_of(&err).is_some_and(|s| s.code == Code::Unimplemented) =>
            {
                self.note(format!("StateChange {ev} sent"));
                link.call(self, "StateChange", sc.encode_to_vec()).await
            }
            (result, _) => result,
        };
        match result {
            Ok(bytes) => Ok(Some(bytes)),
            Err(CallError::Status { status, .. }) => Err(status),
            Err(err) => {
                self.note(format!("closing plugin: {err}"));
                link.conn.close("request failed").await;
                Ok(None)
            }
        }
    }

    fn pod(&self, id: &str) -> Result<pb::PodSandbox, FakeError> {
        self.model()
            .pods
            .get(id)
            .cloned()
            .ok_or_else(|| FakeError::UnknownPod(id.to_string()))
    }

    fn pod_and_container(&self, id: &str) -> Result<(pb::PodSandbox, pb::Container), FakeError> {
        let model = self.model();
        let container = model
            .containers
            .get(id)
            .cloned()
            .ok_or_else(|| FakeError::UnknownContainer(id.to_string()))?;
        let pod = model
            .pods
            .get(&container.pod_sandbox_id)
            .cloned()
            .ok_or_else(|| FakeError::UnknownPod(container.pod_sandbox_id.clone()))?;
        Ok((pod, container))
    }

    fn set_state(&self, id: &str, state: pb::ContainerState) {
        if let Some(c) = self.model().containers.get_mut(id) {
            c.set_state(state);
        }
    }

    async fn simple_event(
        &self,
        ev: u32,
        method: &str,
        pod: pb::PodSandbox,
        container: Option<pb::Container>,
    ) -> Result<(), FakeError> {
        let payload = match &container {
            Some(c) => pb::ContainerRequest {
                pod: Some(pod.clone()),
                container: Some(c.clone()),
            }
            .encode_to_vec(),
            None => pb::PodSandboxRequest {
                pod: Some(pod.clone()),
            }
            .encode_to_vec(),
        };
        let sc = pb::StateChangeEvent {
            event: i32::try_from(ev).unwrap_or(0),
            pod: Some(pod),
            container,
        };
        self.relay(ev, method, payload, Some(sc))
            .await
            .map_err(rejected(method))?;
        Ok(())
    }
}

impl Inner {
    /// What containerd does when its create of a container fails after
    /// NRI was asked (`UndoCreateContainer`: the plugins' adjustment runs
    /// inside the create): `StopContainer`, then `RemoveContainer`, to the
    /// plugins, errors only logged.
    async fn undo_create(&self, request: pb::ContainerRequest) {
        let (Some(pod), Some(container)) = (request.pod.clone(), request.container.clone()) else {
            return;
        };
        let id = container.id.clone();
        if let Err(err) = self.stop_event(&request).await {
            self.note(format!("undo of create {id}: stop failed: {err}"));
        }
        if let Err(err) = self
            .simple_event(
                event::REMOVE_CONTAINER,
                "RemoveContainer",
                pod,
                Some(container),
            )
            .await
        {
            self.note(format!("undo of create {id}: remove failed: {err}"));
        }
        self.note(format!("undid create {id}"));
    }

    /// `StopContainer` for `request` to the plugins, their reply's updates
    /// applied.
    async fn stop_event(&self, request: &pb::ContainerRequest) -> Result<(), FakeError> {
        let method = "StopContainer";
        let reply = self
            .relay(event::STOP_CONTAINER, method, request.encode_to_vec(), None)
            .await
            .map_err(rejected(method))?;
        if let Some(bytes) = reply {
            let reply: pb::StopContainerResponse = decode(method, &bytes)?;
            self.check_reply_updates(method, None, &reply.update)
                .await?;
            self.apply_updates(&reply.update, method);
        }
        Ok(())
    }
}

impl FakeRuntime {
    /// Starts a pod sandbox; returns its id.
    pub async fn run_pod(&self, spec: PodSpec) -> Result<String, FakeError> {
        let inner = &self.inner;
        let _lock = inner.nri_lock.lock().await;
        let pod = {
            let mut model = inner.model();
            model.next_id += 1;
            let id = format!("pod-{}", model.next_id);
            // containerd with the cgroupfs driver: `<parent>/<sandbox id>`.
            let cgroups_path = if spec.cgroup_parent.is_empty() {
                String::new()
            } else {
                format!("{}/{id}", spec.cgroup_parent.trim_end_matches('/'))
            };
            let pod = pb::PodSandbox {
                id,
                name: spec.name,
                uid: spec.uid,
                namespace: spec.namespace,
                annotations: spec.annotations.into_iter().collect(),
                linux: Some(pb::LinuxPodSandbox {
                    cgroup_parent: spec.cgroup_parent,
                    cgroups_path,
                    pod_resources: spec.pod_resources.as_ref().map(Into::into),
                    ..pb::LinuxPodSandbox::default()
                }),
                ..pb::PodSandbox::default()
            };
            model.pods.insert(pod.id.clone(), pod.clone());
            pod
        };
        let id = pod.id.clone();
        inner
            .simple_event(event::RUN_POD_SANDBOX, "RunPodSandbox", pod, None)
            .await?;
        Ok(id)
    }

    /// Creates a container; a plugin error fails the creation.
    pub async fn create_container(
        &self,
        pod_id: &str,
        spec: ContainerSpec,
    ) -> Result<String, FakeError> {
        let inner = &self.inner;
        let _lock = inner.nri_lock.lock().await;
        let pod = inner.pod(pod_id)?;
        let mut container = {
            let mut model = inner.model();
            model.next_id += 1;
            let id = format!("ctr-{}", model.next_id);
            // containerd with the cgroupfs driver: `<parent>/<id>`.
            let parent = pod.linux.as_ref().map_or("", |l| l.cgroup_parent.as_str());
            let cgroups_path = if parent.is_empty() {
                String::new()
            } else {
                format!("{}/{id}", parent.trim_end_matches('/'))
            };
            pb::Container {
                id,
                pod_sandbox_id: pod_id.to_string(),
                name: spec.name,
                state: pb::ContainerState::ContainerCreated.into(),
                annotations: spec.annotations.into_iter().collect(),
                linux: Some(pb::LinuxContainer {
                    resources: Some((&spec.resources).into()),
                    cgroups_path,
                    ..pb::LinuxContainer::default()
                }),
                ..pb::Container::default()
            }
        };
        let request = pb::ContainerRequest {
            pod: Some(pod),
            container: Some(container.clone()),
        };
        let method = "CreateContainer";
        let reply = match inner
            .relay(
                event::CREATE_CONTAINER,
                method,
                request.encode_to_vec(),
                None,
            )
            .await
        {
            Ok(reply) => reply,
            Err(status) => {
                inner.undo_create(request).await;
                return Err(rejected(method)(status));
            }
        };
        let reply: pb::CreateContainerResponse = match reply {
            Some(bytes) => decode(method, &bytes)?,
            None => pb::CreateContainerResponse::default(),
        };
        inner
            .check_reply_updates(method, Some(&container.id), &reply.update)
            .await?;
        if let Some(adjust) = reply.adjust {
            apply_adjustment(&mut container, adjust);
        }
        let id = container.id.clone();
        inner.model().containers.insert(id.clone(), container);
        inner.apply_updates(&reply.update, method);
        inner.note(format!("created {id}"));
        Ok(id)
    }

    /// Starts a created container.
    pub async fn start_container(&self, id: &str) -> Result<(), FakeError> {
        let _lock = self.inner.nri_lock.lock().await;
        self.inner
            .set_state(id, pb::ContainerState::ContainerRunning);
        let (pod, container) = self.inner.pod_and_container(id)?;
        self.inner
            .simple_event(
                event::START_CONTAINER,
                "StartContainer",
                pod,
                Some(container),
            )
            .await
    }

    /// Changes a container's resources (like `crictl update`).
    pub async fn update_container(&self, id: &str, resources: &Resources) -> Result<(), FakeError> {
        let inner = &self.inner;
        let _lock = inner.nri_lock.lock().await;
        let (pod, container) = inner.pod_and_container(id)?;
        let new: pb::LinuxResources = resources.into();
        let request = pb::UpdateContainerRequest {
            pod: Some(pod),
            container: Some(container),
            linux_resources: Some(new.clone()),
        };
        let method = "UpdateContainer";
        let reply = inner
            .relay(
                event::UPDATE_CONTAINER,
                method,
                request.encode_to_vec(),
                None,
            )
            .await
            .map_err(rejected(method))?;
        let reply: pb::UpdateContainerResponse = match reply {
            Some(bytes) => decode(method, &bytes)?,
            None => pb::UpdateContainerResponse::default(),
        };
        inner
            .check_reply_updates(method, None, &reply.update)
            .await?;
        if let Some(c) = inner.model().containers.get_mut(id) {
            apply_resources(c, &new);
        }
        inner.apply_updates(&reply.update, method);
        Ok(())
    }

    /// Stops a container.
    pub async fn stop_container(&self, id: &str) -> Result<(), FakeError> {
        let inner = &self.inner;
        let _lock = inner.nri_lock.lock().await;
        inner.set_state(id, pb::ContainerState::ContainerStopped);
        let (pod, container) = inner.pod_and_container(id)?;
        let request = pb::ContainerRequest {
            pod: Some(pod),
            container: Some(container),
        };
        inner.stop_event(&request).await
    }

    /// Removes a container (the runtime removes it even if the plugin errs).
    pub async fn remove_container(&self, id: &str) -> Result<(), FakeError> {
        let _lock = self.inner.nri_lock.lock().await;
        let (pod, container) = self.inner.pod_and_container(id)?;
        self.inner.model().containers.remove(id);
        self.inner
            .simple_event(
                event::REMOVE_CONTAINER,
                "RemoveContainer",
                pod,
                Some(container),
            )
            .await
    }

    /// Stops a pod sandbox.
    pub async fn stop_pod(&self, id: &str) -> Result<(), FakeError> {
        let _lock = self.inner.nri_lock.lock().await;
        let pod = self.inner.pod(id)?;
        self.inner
            .simple_event(event::STOP_POD_SANDBOX, "StopPodSandbox", pod, None)
            .await
    }

    /// Removes a pod sandbox and whatever containers it still has.
    pub async fn remove_pod(&self, id: &str) -> Result<(), FakeError> {
        let _lock = self.inner.nri_lock.lock().await;
        let pod = self.inner.pod(id)?;
        {
            let mut model = self.inner.model();
            model.pods.remove(id);
            model.containers.retain(|_, c| c.pod_sandbox_id != id);
        }
        self.inner
            .simple_event(event::REMOVE_POD_SANDBOX, "RemovePodSandbox", pod, None)
            .await
    }
}
