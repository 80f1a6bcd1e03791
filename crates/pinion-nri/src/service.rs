//! The Plugin ttrpc service Pinion serves on connection 1: decodes each
//! request, calls the [`NriHandler`], encodes the reply. Every Plugin method
//! of NRI up to v0.12 is implemented (dedicated RPCs and `StateChange`);
//! unknown methods answer UNIMPLEMENTED. The replies to `CreateContainer`,
//! `UpdateContainer` and `StopContainer` carry the updates waiting in the
//! [`Outbox`] (see there why).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use tokio::sync::watch;

use crate::conn::{Call, Service, ServiceFuture};
use crate::handler::{to_status, HandlerError, NriHandler, RuntimeInfo};
use crate::model::{updates_to_proto, Container, ContainerUpdate, PodSandbox, Resources};
use crate::outbox::Outbox;
use crate::proto::nri as pb;
use crate::status::{Code, Status};

/// The Plugin service name on the wire.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The Runtime service name on the wire.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// The Plugin service's methods [`PluginService`] answers; a request of
/// one of them is timed ([`NriHandler::request_served`]), anything else
/// the runtime sends is not (its name is not trusted as a metric label).
pub const PLUGIN_METHODS: [&str; 18] = [
    "Configure",
    "Synchronize",
    "Shutdown",
    "StateChange",
    "CreateContainer",
    "UpdateContainer",
    "StopContainer",
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PostUpdatePodSandbox",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "PostUpdateContainer",
    "RemoveContainer",
    "UpdatePodSandbox",
    "ValidateContainerAdjustment",
];

/// NRI event numbers (the `Event` enum).
pub mod event {
    pub const RUN_POD_SANDBOX: u32 = 1;
    pub const STOP_POD_SANDBOX: u32 = 2;
    pub const REMOVE_POD_SANDBOX: u32 = 3;
    pub const CREATE_CONTAINER: u32 = 4;
    pub const START_CONTAINER: u32 = 6;
    pub const UPDATE_CONTAINER: u32 = 8;
    pub const STOP_CONTAINER: u32 = 10;
    pub const REMOVE_CONTAINER: u32 = 11;
}

/// The `ConfigureResponse.events` mask for a set of events (bit `E-1`).
#[must_use]
pub fn event_mask(events: &[u32]) -> i32 {
    let mask = events
        .iter()
        .filter(|e| (1..=31).contains(*e))
        .fold(0u32, |mask, e| mask | (1 << (e - 1)));
    i32::try_from(mask).unwrap_or(i32::MAX)
}

/// The events Pinion subscribes to (`StartContainer`: the container's
/// cgroup exists, its cpuset partition can be made).
pub const SUBSCRIBED: [u32; 7] = [
    event::STOP_POD_SANDBOX,
    event::REMOVE_POD_SANDBOX,
    event::CREATE_CONTAINER,
    event::START_CONTAINER,
    event::UPDATE_CONTAINER,
    event::STOP_CONTAINER,
    event::REMOVE_CONTAINER,
];

/// Progress of one connection's handshake, observed by the runner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionState {
    pub runtime: Option<RuntimeInfo>,
    pub synchronized: bool,
}

/// The Plugin service for one connection.
pub struct PluginService<H> {
    handler: Arc<H>,
    events: i32,
    pending_sync: Mutex<(Vec<pb::PodSandbox>, Vec<pb::Container>)>,
    state: watch::Sender<SessionState>,
    outbox: Arc<Outbox>,
}

impl<H: NriHandler> PluginService<H> {
    /// A service whose replies carry nothing but the handler's updates.
    #[must_use]
    pub fn new(handler: Arc<H>, events: i32, state: watch::Sender<SessionState>) -> Self {
        Self::with_outbox(handler, events, state, Arc::new(Outbox::new()))
    }

    /// A service whose replies also carry what waits in `outbox`.
    #[must_use]
    pub(crate) fn with_outbox(
        handler: Arc<H>,
        events: i32,
        state: watch::Sender<SessionState>,
        outbox: Arc<Outbox>,
    ) -> Self {
        Self {
            handler,
            events,
            pending_sync: Mutex::new((Vec::new(), Vec::new())),
            state,
            outbox,
        }
    }

    /// The waiting updates (except those of `creating`, which the runtime
    /// does not list yet) followed by the handler's own, the newest: the
    /// runtime applies a reply's updates in order. The carried ones count
    /// as applied once the runtime's next request arrives
    /// ([`Outbox::take_applied`]): the runtime reports no failure of a
    /// reply's updates (it logs them), and the plugin's reconcile pass finds
    /// a cpuset that differs.
    ///
    /// A container appears once: a waiting update of a container the
    /// handler's own updates name counts as carried, and is sent in the
    /// own update's place only when it is newer ([`ContainerUpdate::order`]):
    /// the handler read its placement before the front-end's latest
    /// decision reached the queue.
    fn carry(&self, creating: Option<&str>, own: Vec<ContainerUpdate>) -> Vec<pb::ContainerUpdate> {
        let batch = self.outbox.take_except(creating);
        if !batch.is_empty() {
            tracing::debug!(
                containers = batch.updates.len(),
                "waiting container updates carried in an event reply"
            );
        }
        self.outbox.carried(batch.answered);
        let mut own = own;
        let mut updates = Vec::with_capacity(batch.updates.len() + own.len());
        for waiting in batch.updates {
            match own
                .iter_mut()
                .find(|o| o.container_id == waiting.container_id)
            {
                Some(o) if waiting.order > o.order => *o = waiting,
                Some(_) => {}
                None => updates.push(waiting),
            }
        }
        updates.extend(own);
        updates_to_proto(&updates)
    }
}

impl<H: NriHandler> Service for Arc<PluginService<H>> {
    fn call(&self, call: Call) -> ServiceFuture {
        let this = Arc::clone(self);
        Box::pin(async move {
            let method = (call.service == PLUGIN_SERVICE)
                .then(|| PLUGIN_METHODS.iter().copied().find(|m| *m == call.method))
                .flatten();
            let started = Instant::now();
            this.outbox.request_seen();
            let applied = this.outbox.take_applied();
            if !applied.is_empty() {
                this.handler.updates_applied(applied).await;
            }
            let answer = this.dispatch(call).await;
            this.outbox.request_seen();
            if let Some(method) = method {
                this.handler.request_served(method, started.elapsed());
            }
            answer
        })
    }
}

fn decode<M: Message + Default>(method: &str, payload: &[u8]) -> Result<M, Status> {
    M::decode(payload).map_err(|err| {
        Status::new(
            Code::InvalidArgument,
            format!("malformed {method} request: {err}"),
        )
    })
}

fn ok<M: Message>(reply: &M) -> Result<Vec<u8>, Status> {
    Ok(reply.encode_to_vec())
}

fn handled<T>(result: Result<T, HandlerError>) -> Result<T, Status> {
    result.map_err(|err| to_status(&err))
}

fn require<T>(method: &str, what: &str, value: Option<T>) -> Result<T, Status> {
    value.ok_or_else(|| {
        Status::new(
            Code::InvalidArgument,
            format!("{method} request without a {what}"),
        )
    })
}

fn millis(value: i64) -> Option<Duration> {
    u64::try_from(value)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

impl<H: NriHandler> PluginService<H> {
    async fn dispatch(&self, call: Call) -> Result<Vec<u8>, Status> {
        if call.service != PLUGIN_SERVICE {
            return Err(Status::new(
                Code::Unimplemented,
                format!("unknown service {:?}", call.service),
            ));
        }
        let (method, payload) = (call.method.as_str(), call.payload.as_slice());
        match method {
            "Configure" => self.configure(decode(method, payload)?).await,
            "Synchronize" => self.synchronize(decode(method, payload)?).await,
            "Shutdown" => ok(&pb::Empty {}),
            "StateChange" => {
                let ev: pb::StateChangeEvent = decode(method, payload)?;
                let event = u32::try_from(ev.event).unwrap_or(0);
                self.container_event(method, event, ev.pod, ev.container)
                    .await
            }
            "CreateContainer" => self.create(decode(method, payload)?).await,
            "UpdateContainer" => self.update(decode(method, payload)?).await,
            "StopContainer" => self.stop(decode(method, payload)?).await,
            "RunPodSandbox" | "StopPodSandbox" | "RemovePodSandbox" | "PostUpdatePodSandbox" => {
                let req: pb::PodSandboxRequest = decode(method, payload)?;
                let event = match method {
                    "RunPodSandbox" => event::RUN_POD_SANDBOX,
                    "StopPodSandbox" => event::STOP_POD_SANDBOX,
                    "RemovePodSandbox" => event::REMOVE_POD_SANDBOX,
                    _ => 0,
                };
                self.container_event(method, event, req.pod, None).await
            }
            "PostCreateContainer"
            | "StartContainer"
            | "PostStartContainer"
            | "PostUpdateContainer"
            | "RemoveContainer" => {
                let req: pb::ContainerRequest = decode(method, payload)?;
                let event = match method {
                    "StartContainer" => event::START_CONTAINER,
                    "RemoveContainer" => event::REMOVE_CONTAINER,
                    _ => 0,
                };
                self.container_event(method, event, req.pod, req.container)
                    .await
            }
            "UpdatePodSandbox" => {
                let req: pb::UpdatePodSandboxRequest = decode(method, payload)?;
                let pod = require(method, "pod", req.pod)?.into();
                let resources = req.linux_resources.map(Resources::from).unwrap_or_default();
                handled(self.handler.update_pod_sandbox(pod, resources).await)?;
                ok(&pb::Empty {})
            }
            "ValidateContainerAdjustment" => ok(&pb::ValidateContainerAdjustmentResponse {
                reject: false,
                reason: String::new(),
            }),
            other => Err(Status::new(
                Code::Unimplemented,
                format!("unknown method {PLUGIN_SERVICE}/{other}"),
            )),
        }
    }

    async fn configure(&self, req: pb::ConfigureRequest) -> Result<Vec<u8>, Status> {
        let info = RuntimeInfo {
            runtime_name: req.runtime_name,
            runtime_version: req.runtime_version,
            config: req.config,
            registration_timeout: millis(req.registration_timeout),
            request_timeout: millis(req.request_timeout),
        };
        tracing::info!(runtime = %info.runtime_name, version = %info.runtime_version, "nri configured");
        handled(self.handler.configure(info.clone()).await)?;
        self.state.send_modify(|s| s.runtime = Some(info));
        ok(&pb::ConfigureResponse {
            events: self.events,
        })
    }

    async fn synchronize(&self, req: pb::SynchronizeRequest) -> Result<Vec<u8>, Status> {
        let (pods, containers) = {
            let mut pending = self
                .pending_sync
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pending.0.extend(req.pods);
            pending.1.extend(req.containers);
            if req.more {
                return ok(&pb::SynchronizeResponse {
                    update: Vec::new(),
                    more: true,
                });
            }
            std::mem::take(&mut *pending)
        };
        let pods = pods.into_iter().map(PodSandbox::from).collect();
        let containers = containers.into_iter().map(Container::from).collect();
        let updates = handled(self.handler.synchronize(pods, containers).await)?;
        // Applied by the runtime after it read the reply, like a reply's
        // carried updates: reported to the handler at the next request (or
        // after the settle time), and nothing leaves unsolicited before.
        self.outbox
            .carried(updates.iter().map(|u| u.container_id.clone()).collect());
        self.state.send_modify(|s| s.synchronized = true);
        ok(&pb::SynchronizeResponse {
            update: updates_to_proto(&updates),
            more: false,
        })
    }

    async fn create(&self, req: pb::ContainerRequest) -> Result<Vec<u8>, Status> {
        let pod = require("CreateContainer", "pod", req.pod)?.into();
        let container: Container = require("CreateContainer", "container", req.container)?.into();
        let id = container.id.clone();
        let created = handled(self.handler.create_container(pod, container).await)?;
        ok(&pb::CreateContainerResponse {
            adjust: created.adjust.as_ref().map(pb::ContainerAdjustment::from),
            update: self.carry(Some(&id), created.updates),
            evict: Vec::new(),
        })
    }

    async fn update(&self, req: pb::UpdateContainerRequest) -> Result<Vec<u8>, Status> {
        let pod = require("UpdateContainer", "pod", req.pod)?.into();
        let container: Container = require("UpdateContainer", "container", req.container)?.into();
        let resources = req.linux_resources.map(Resources::from).unwrap_or_default();
        let id = container.id.clone();
        let updates = handled(
            self.handler
                .update_container(pod, container, resources)
                .await,
        )?;
        // containerd takes the reply's last update as the updated
        // container's own resources, whatever its id: carry only before it.
        let update = if updates.last().is_some_and(|u| u.container_id == id) {
            self.carry(None, updates)
        } else {
            updates_to_proto(&updates)
        };
        ok(&pb::UpdateContainerResponse {
            update,
            evict: Vec::new(),
        })
    }

    async fn stop(&self, req: pb::ContainerRequest) -> Result<Vec<u8>, Status> {
        let pod = require("StopContainer", "pod", req.pod)?.into();
        let container = require("StopContainer", "container", req.container)?.into();
        let updates = handled(self.handler.stop_container(pod, container).await)?;
        ok(&pb::StopContainerResponse {
            update: self.carry(None, updates),
        })
    }

    /// Events whose reply is empty (StateChange and the v0.12 dedicated RPCs).
    async fn container_event(
        &self,
        method: &str,
        event: u32,
        pod: Option<pb::PodSandbox>,
        container: Option<pb::Container>,
    ) -> Result<Vec<u8>, Status> {
        let pod: PodSandbox = require(method, "pod", pod)?.into();
        let h = &self.handler;
        let result = match event {
            event::RUN_POD_SANDBOX => h.run_pod_sandbox(pod).await,
            event::STOP_POD_SANDBOX => h.stop_pod_sandbox(pod).await,
            event::REMOVE_POD_SANDBOX => h.remove_pod_sandbox(pod).await,
            event::START_CONTAINER => {
                let c = require(method, "container", container)?.into();
                h.start_container(pod, c).await
            }
            event::REMOVE_CONTAINER => {
                let c = require(method, "container", container)?.into();
                h.remove_container(pod, c).await
            }
            _ => Ok(()),
        };
        handled(result)?;
        ok(&pb::Empty {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_mask_sets_bit_e_minus_one() {
        assert_eq!(event_mask(&[1]), 0x1);
        assert_eq!(event_mask(&[4]), 0x8);
        assert_eq!(event_mask(&[1, 2, 3, 4, 6, 8, 10, 11]), 0x6af);
        assert_eq!(event_mask(&SUBSCRIBED), 0x6ae);
        assert_eq!(event_mask(&[0, 40]), 0);
    }
}
