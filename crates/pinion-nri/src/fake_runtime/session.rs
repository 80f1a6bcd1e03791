//! The fake runtime's side of one plugin connection: the Runtime service
//! (RegisterPlugin, UpdateContainers) and the handshake (Configure, then
//! Synchronize in chunks), like containerd's NRI adaptation.

use std::sync::Arc;

use prost::Message;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::{apply_resources, Inner, Link};
use crate::conn::{Call, CallError, CallOptions, Connection, Roles, Service, ServiceFuture};
use crate::plugin::{validate_index, validate_name};
use crate::proto::nri as pb;
use crate::service::{PLUGIN_SERVICE, RUNTIME_SERVICE};
use crate::status::{Code, Status};
use crate::wire::{MAX_OUT_FRAME, PLUGIN_CONN, RUNTIME_CONN};

/// Frames the fake runtime writes: large, like the Go side (one frame per
/// ttrpc write).
const RUNTIME_OUT_FRAME: usize = 1 << 20;

struct RuntimeService {
    inner: Arc<Inner>,
    registrations: mpsc::UnboundedSender<pb::RegisterPluginRequest>,
}

impl Service for Arc<RuntimeService> {
    fn call(&self, call: Call) -> ServiceFuture {
        let this = Arc::clone(self);
        Box::pin(async move { this.dispatch(call).await })
    }
}

fn decode<M: Message + Default>(method: &str, payload: &[u8]) -> Result<M, Status> {
    M::decode(payload)
        .map_err(|e| Status::new(Code::InvalidArgument, format!("malformed {method}: {e}")))
}

impl RuntimeService {
    async fn dispatch(&self, call: Call) -> Result<Vec<u8>, Status> {
        if call.service != RUNTIME_SERVICE {
            return Err(Status::new(
                Code::Unimplemented,
                format!("unknown service {}", call.service),
            ));
        }
        match call.method.as_str() {
            "RegisterPlugin" => {
                let req: pb::RegisterPluginRequest = decode("RegisterPlugin", &call.payload)?;
                validate_name(&req.plugin_name)
                    .and_then(|()| validate_index(&req.plugin_idx))
                    .map_err(|e| Status::new(Code::InvalidArgument, e.to_string()))?;
                let _ = self.registrations.send(req);
                Ok(pb::Empty {}.encode_to_vec())
            }
            "UpdateContainers" => {
                let req: pb::UpdateContainersRequest = decode("UpdateContainers", &call.payload)?;
                // containerd takes its NRI lock here too: a plugin calling this
                // from inside an event handler deadlocks until the timeout.
                let _adaptation = match self.inner.options.two_locks {
                    Some(window) => {
                        let held = self.inner.adaptation_lock.lock().await;
                        tokio::time::sleep(window).await;
                        Some(held)
                    }
                    None => None,
                };
                let _lock = self.inner.nri_lock.lock().await;
                let failed = self.inner.apply_updates(&req.update, "UpdateContainers");
                Ok(pb::UpdateContainersResponse { failed }.encode_to_vec())
            }
            other => Err(Status::new(
                Code::Unimplemented,
                format!("unknown method {other}"),
            )),
        }
    }
}

/// Serves one accepted connection until it closes.
pub(super) async fn serve(inner: Arc<Inner>, stream: UnixStream) {
    let (registrations, mut registered) = mpsc::unbounded_channel();
    let service = Arc::new(RuntimeService {
        inner: Arc::clone(&inner),
        registrations,
    });
    let roles = Roles {
        serve: RUNTIME_CONN,
        client: PLUGIN_CONN,
        max_out_frame: RUNTIME_OUT_FRAME,
        max_in_frame: MAX_OUT_FRAME,
    };
    let conn = Arc::new(Connection::start(stream, roles, Arc::new(service)));
    let request = tokio::select! {
        req = registered.recv() => req,
        () = tokio::time::sleep(inner.options.registration_timeout) => None,
    };
    let Some(request) = request else {
        inner.note("registration timeout".to_string());
        conn.close("registration timeout").await;
        return;
    };
    let link = Arc::new(Link {
        conn: Arc::clone(&conn),
        name: request.plugin_name.clone(),
        index: request.plugin_idx.clone(),
        events: std::sync::Mutex::new(0),
    });
    inner.note(format!(
        "RegisterPlugin {}-{}",
        request.plugin_idx, request.plugin_name
    ));
    if let Err(err) = handshake(&inner, &link).await {
        inner.note(format!("handshake failed: {err}"));
        conn.close("handshake failed").await;
        return;
    }
    *inner.link.lock().await = Some(Arc::clone(&link));
    inner.synced.send_modify(|n| *n += 1);
    let reason = conn.closed().await;
    inner.largest_frame.fetch_max(
        conn.largest_in_frame(),
        std::sync::atomic::Ordering::Relaxed,
    );
    inner.note(format!("plugin disconnected: {reason}"));
    let mut slot = inner.link.lock().await;
    if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, &link)) {
        *slot = None;
    }
}

async fn handshake(inner: &Inner, link: &Link) -> Result<(), CallError> {
    let _lock = inner.nri_lock.lock().await;
    let o = &inner.options;
    let configure = pb::ConfigureRequest {
        config: o.config.clone(),
        runtime_name: "pinion-fake-runtime".to_string(),
        runtime_version: "v0".to_string(),
        registration_timeout: i64::try_from(o.registration_timeout.as_millis()).unwrap_or(i64::MAX),
        request_timeout: i64::try_from(o.request_timeout.as_millis()).unwrap_or(i64::MAX),
        nri_version: String::new(),
    };
    let reply = link
        .call(inner, "Configure", configure.encode_to_vec())
        .await?;
    let events = pb::ConfigureResponse::decode(reply.as_slice())
        .map_err(|e| CallError::Decode {
            method: "Configure".into(),
            reason: e.to_string(),
        })?
        .events;
    *link
        .events
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = events;
    let (pods, containers) = inner.snapshot();
    let chunk = o.sync_chunk.max(1);
    let mut chunks: Vec<&[pb::Container]> = containers.chunks(chunk).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    for (i, part) in chunks.into_iter().enumerate() {
        let request = pb::SynchronizeRequest {
            pods: if i == 0 { pods.clone() } else { Vec::new() },
            containers: part.to_vec(),
            more: i != last,
        };
        let reply = link
            .call(inner, "Synchronize", request.encode_to_vec())
            .await?;
        let reply =
            pb::SynchronizeResponse::decode(reply.as_slice()).map_err(|e| CallError::Decode {
                method: "Synchronize".into(),
                reason: e.to_string(),
            })?;
        if i != last && (!reply.more || !reply.update.is_empty()) {
            return Err(CallError::Decode {
                method: "Synchronize".into(),
                reason: "a partial sync must be answered with more=true and no updates".into(),
            });
        }
        inner.apply_updates(&reply.update, "Synchronize");
    }
    Ok(())
}

impl Link {
    /// Calls a Plugin method within the runtime's request timeout.
    pub(super) async fn call(
        &self,
        inner: &Inner,
        method: &str,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, CallError> {
        let options = CallOptions {
            after_handlers: false,
            no_deadline: !inner.options.send_deadline,
        };
        self.conn
            .call_with(
                PLUGIN_SERVICE,
                method,
                payload,
                inner.options.request_timeout,
                options,
            )
            .await
    }
}

/// Applies `resources` to the container `id` in `containers`.
pub(super) fn apply_to(
    containers: &mut std::collections::BTreeMap<String, pb::Container>,
    id: &str,
    resources: Option<&pb::LinuxResources>,
) -> bool {
    let Some(container) = containers.get_mut(id) else {
        return false;
    };
    if let Some(resources) = resources {
        apply_resources(container, resources);
    }
    true
}
