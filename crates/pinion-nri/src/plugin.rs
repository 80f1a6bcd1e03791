//! The plugin stub: connects to the runtime (external socket or the socket
//! inherited as fd 3), serves the Plugin service, registers, delivers queued
//! container updates ([`crate::outbox`]: in event replies, or unsolicited once
//! the runtime is quiet), and reconnects with back-off after the runtime went
//! away (the runtime re-sends its full state in `Synchronize`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio::net::UnixStream;
use tokio::sync::watch;

use crate::conn::{CallError, Connection, HandlersIdle, Roles};
use crate::handler::NriHandler;
use crate::model::{updates_to_proto, ContainerUpdate};
use crate::outbox::{Batch, Outbox, Timing, Urgency};
use crate::proto::nri as pb;
use crate::service::{event_mask, PluginService, SessionState, RUNTIME_SERVICE, SUBSCRIBED};
use crate::wire::{MAX_IN_FRAME, MAX_OUT_FRAME, PLUGIN_CONN, RUNTIME_CONN};

mod fd;

/// The runtime's default socket for external plugins.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// The name nri-plugins and Pinion use by default.
pub const DEFAULT_NAME: &str = "pinion";
/// Default plugin index (two digits; plugins run in index order).
pub const DEFAULT_INDEX: &str = "90";
/// How long Pinion waits at least for the runtime's answer to an unsolicited
/// `UpdateContainers`. The request itself carries no ttrpc deadline (the
/// reference Go stub sends it with a background context): with one, a runtime
/// slower than the deadline (containerd runs `runc update` per container)
/// cancels the update half-way and the container keeps its old cpuset.
pub const UPDATE_REPLY_WAIT: Duration = Duration::from_secs(30);

/// Errors of the plugin stub.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error("invalid plugin name {0:?}: use only letters, digits, '_', '.', '+' and '-'")]
    BadName(String),
    #[error("invalid plugin index {0:?}: must be exactly two decimal digits")]
    BadIndex(String),
    #[error("invalid NRI_PLUGIN_SOCKET {0:?}: not a file descriptor number")]
    BadSocketVar(String),
    #[error("runtime-launched plugin: {0} is set but NRI_PLUGIN_SOCKET is not")]
    IncompleteEnv(&'static str),
    #[error("inherited NRI socket fd {fd}: {reason}")]
    InheritedFd { fd: i32, reason: String },
    #[error("connecting to the NRI socket {path}: {reason}")]
    Connect { path: String, reason: String },
    #[error("registering with the runtime failed: {0}")]
    Register(CallError),
    #[error("the runtime closed the inherited connection: {0}")]
    Disconnected(String),
    #[error("the plugin is not running")]
    NotRunning,
}

/// Where the runtime is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// External plugin: dial this socket (and re-dial after it closes).
    Socket(PathBuf),
    /// Runtime-launched plugin: the connected socket inherited as this fd.
    /// It cannot be re-dialled: when it closes, [`Plugin::run`] returns.
    InheritedFd(i32),
}

/// How the plugin registers and reconnects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginOptions {
    pub name: String,
    pub index: String,
    pub endpoint: Endpoint,
    /// Events to subscribe to (NRI event numbers).
    pub events: Vec<u32>,
    pub registration_timeout: Duration,
    /// Budget for unsolicited `UpdateContainers` (replaced by the runtime's
    /// request timeout from `Configure`).
    pub request_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// When updates that no event reply carried leave unsolicited.
    pub unsolicited: Timing,
}

/// Checks a plugin name: non-empty, only `[A-Za-z0-9_.+-]`.
pub fn validate_name(name: &str) -> Result<(), PluginError> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'+' | b'-'));
    ok.then_some(())
        .ok_or_else(|| PluginError::BadName(name.to_string()))
}

/// Checks a plugin index: exactly two decimal digits.
pub fn validate_index(index: &str) -> Result<(), PluginError> {
    let ok = index.len() == 2 && index.bytes().all(|b| b.is_ascii_digit());
    ok.then_some(())
        .ok_or_else(|| PluginError::BadIndex(index.to_string()))
}

impl PluginOptions {
    /// An external plugin dialling `socket`.
    pub fn external(
        name: &str,
        index: &str,
        socket: impl Into<PathBuf>,
    ) -> Result<Self, PluginError> {
        validate_name(name)?;
        validate_index(index)?;
        Ok(Self {
            name: name.to_string(),
            index: index.to_string(),
            endpoint: Endpoint::Socket(socket.into()),
            events: SUBSCRIBED.to_vec(),
            registration_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            unsolicited: Timing::default(),
        })
    }

    /// The runtime-launched form, read from `NRI_PLUGIN_NAME`,
    /// `NRI_PLUGIN_IDX` and `NRI_PLUGIN_SOCKET` through `var` (e.g.
    /// `|k| std::env::var(k).ok()`); `Ok(None)` when none is set.
    pub fn from_launch_env(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, PluginError> {
        let socket = var("NRI_PLUGIN_SOCKET");
        let name = var("NRI_PLUGIN_NAME");
        let index = var("NRI_PLUGIN_IDX");
        let Some(socket) = socket else {
            return match (name, index) {
                (None, None) => Ok(None),
                (Some(_), _) => Err(PluginError::IncompleteEnv("NRI_PLUGIN_NAME")),
                (None, Some(_)) => Err(PluginError::IncompleteEnv("NRI_PLUGIN_IDX")),
            };
        };
        let fd: i32 = socket
            .parse()
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or_else(|| PluginError::BadSocketVar(socket.clone()))?;
        let name = name.unwrap_or_else(|| DEFAULT_NAME.to_string());
        let index = index.unwrap_or_else(|| DEFAULT_INDEX.to_string());
        let mut options = Self::external(&name, &index, DEFAULT_SOCKET)?;
        options.endpoint = Endpoint::InheritedFd(fd);
        Ok(Some(options))
    }
}

/// A handle to queue container updates ([`crate::outbox`]). Queued while a
/// handler of `CreateContainer`, `UpdateContainer` or `StopContainer` runs,
/// they go in its reply; otherwise in the next such reply, or unsolicited
/// once the runtime has been quiet, after the current handler (if any)
/// returned and its reply was written, and only once the runtime has
/// synchronized this connection. Updates still queued when the connection
/// drops are discarded: the next `Synchronize` re-sends the full state and
/// the handler answers it with the full truth.
#[derive(Debug, Clone)]
pub struct UpdateSender {
    outbox: std::sync::Weak<Outbox>,
}

impl UpdateSender {
    /// Queues `updates`, which may take something from a container: they
    /// leave with the next reply that carries updates, or unsolicited once
    /// the runtime has been quiet ([`Urgency::Prompt`]).
    pub fn send(&self, updates: Vec<ContainerUpdate>) -> Result<(), PluginError> {
        self.send_as(updates, Urgency::Prompt)
    }

    /// Queues `updates` with their [`Urgency`]: a batch in which every
    /// update only gives its container more is a [`Urgency::Growth`].
    pub fn send_as(
        &self,
        updates: Vec<ContainerUpdate>,
        urgency: Urgency,
    ) -> Result<(), PluginError> {
        let outbox = self.outbox.upgrade().ok_or(PluginError::NotRunning)?;
        outbox.push(updates, urgency);
        Ok(())
    }
}

/// The plugin stub.
pub struct Plugin<H> {
    options: PluginOptions,
    handler: Arc<H>,
    outbox: Arc<Outbox>,
    sessions: watch::Sender<u64>,
}

impl<H: NriHandler> Plugin<H> {
    /// A plugin and the handle to queue unsolicited updates.
    #[must_use]
    pub fn new(options: PluginOptions, handler: Arc<H>) -> (Self, UpdateSender) {
        let outbox = Arc::new(Outbox::new());
        let (sessions, _) = watch::channel(0);
        let sender = UpdateSender {
            outbox: Arc::downgrade(&outbox),
        };
        let plugin = Self {
            options,
            handler,
            outbox,
            sessions,
        };
        (plugin, sender)
    }

    /// Counts synchronized sessions (for observers such as health checks).
    #[must_use]
    pub fn sessions(&self) -> watch::Receiver<u64> {
        self.sessions.subscribe()
    }

    /// Runs until `shutdown` resolves; an external plugin reconnects after
    /// every disconnect, a runtime-launched one returns when its socket closes.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), PluginError> {
        tokio::pin!(shutdown);
        let mut backoff = self.options.backoff_initial;
        loop {
            let outcome = tokio::select! {
                () = &mut shutdown => return Ok(()),
                outcome = self.connect_and_serve() => outcome,
            };
            let inherited = matches!(self.options.endpoint, Endpoint::InheritedFd(_));
            match outcome {
                Ok(reason) if inherited => return Err(PluginError::Disconnected(reason)),
                Ok(reason) => {
                    tracing::warn!(%reason, "nri connection lost; reconnecting");
                    backoff = self.options.backoff_initial;
                }
                Err(err) if inherited => return Err(err),
                Err(err) => {
                    tracing::warn!(error = %err, retry_in = ?backoff, "nri connection failed");
                }
            }
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(self.options.backoff_max);
        }
    }

    async fn connect(&self) -> Result<UnixStream, PluginError> {
        match &self.options.endpoint {
            Endpoint::Socket(path) => {
                UnixStream::connect(path)
                    .await
                    .map_err(|err| PluginError::Connect {
                        path: path.display().to_string(),
                        reason: err.to_string(),
                    })
            }
            Endpoint::InheritedFd(fd) => fd::take_inherited_socket(*fd),
        }
    }

    /// One session; returns the close reason once it had synchronized.
    async fn connect_and_serve(&mut self) -> Result<String, PluginError> {
        let stream = self.connect().await?;
        self.outbox.clear();
        let (state_tx, mut state) = watch::channel(SessionState::default());
        let service = Arc::new(PluginService::with_outbox(
            Arc::clone(&self.handler),
            event_mask(&self.options.events),
            state_tx,
            Arc::clone(&self.outbox),
        ));
        let roles = Roles {
            serve: PLUGIN_CONN,
            client: RUNTIME_CONN,
            max_out_frame: MAX_OUT_FRAME,
            max_in_frame: MAX_IN_FRAME,
        };
        let conn = Connection::start(stream, roles, Arc::new(service));
        self.register(&conn).await?;
        tokio::select! {
            reason = conn.closed() => return Ok(reason),
            _ = state.wait_for(|s| s.synchronized) => {}
        }
        self.sessions.send_modify(|n| *n += 1);
        tracing::info!(name = %self.options.name, index = %self.options.index, "nri plugin synchronized");
        let timeout = state
            .borrow()
            .runtime
            .as_ref()
            .and_then(|r| r.request_timeout)
            .unwrap_or(self.options.request_timeout);
        let outbox = Arc::clone(&self.outbox);
        loop {
            tokio::select! {
                reason = conn.closed() => return Ok(reason),
                () = outbox.unsolicited_due(self.options.unsolicited) => {
                    // Taken with the gate held: a handler's reply carries
                    // what it finds queued, and nothing taken here can
                    // reach the runtime after a newer reply.
                    let idle = conn.handlers_idle().await;
                    let batch = outbox.take_if_due(self.options.unsolicited);
                    if !batch.is_empty() {
                        self.send_updates(&conn, idle, batch, timeout).await;
                    }
                }
                applied = outbox.settled(self.options.unsolicited) => self.handler.updates_applied(applied).await,
            }
        }
    }

    async fn register(&self, conn: &Connection) -> Result<(), PluginError> {
        let request = pb::RegisterPluginRequest {
            plugin_name: self.options.name.clone(),
            plugin_idx: self.options.index.clone(),
            nri_version: String::new(),
        };
        conn.call(
            RUNTIME_SERVICE,
            "RegisterPlugin",
            request.encode_to_vec(),
            self.options.registration_timeout,
        )
        .await
        .map(|_| ())
        .map_err(PluginError::Register)
    }

    async fn send_updates(
        &self,
        conn: &Connection,
        idle: HandlersIdle<'_>,
        batch: Batch,
        timeout: Duration,
    ) {
        let request = pb::UpdateContainersRequest {
            update: updates_to_proto(&batch.updates),
            evict: Vec::new(),
        };
        let reply = conn
            .call_while_idle(
                idle,
                RUNTIME_SERVICE,
                "UpdateContainers",
                request.encode_to_vec(),
                timeout.max(UPDATE_REPLY_WAIT),
                true,
            )
            .await;
        let sent = batch.answered;
        let refused: std::collections::BTreeSet<String> = match reply
            .map(|bytes| pb::UpdateContainersResponse::decode(bytes.as_slice()))
        {
            Ok(Ok(response)) => response
                .failed
                .into_iter()
                .map(|u| u.container_id)
                .collect(),
            // Whether it applied them is unknown: sent again.
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "undecodable UpdateContainers reply");
                sent.iter().cloned().collect()
            }
            Err(err @ CallError::Timeout { .. }) => {
                tracing::error!(error = %err, "the runtime did not answer an unsolicited UpdateContainers: a containerd whose NRI predates the fix of containerd/containerd#13733 (1.7 included) deadlocks when one meets a pod event, and then relays no event and starts no container until it restarts");
                sent.iter().cloned().collect()
            }
            Err(err) => {
                tracing::warn!(error = %err, "UpdateContainers failed");
                sent.iter().cloned().collect()
            }
        };
        let (failed, applied): (Vec<String>, Vec<String>) =
            sent.into_iter().partition(|id| refused.contains(id));
        if !failed.is_empty() {
            self.handler.updates_failed(failed).await;
        }
        if !applied.is_empty() {
            self.handler.updates_applied(applied).await;
        }
    }
}

#[cfg(test)]
mod tests;
