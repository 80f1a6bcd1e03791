//! One multiplexed NRI socket: a ttrpc server on one logical connection and a
//! ttrpc client on the other. Used by the plugin (serves 1, calls 2) and by the
//! fake runtime (serves 2, calls 1).
//!
//! Served calls run one at a time, in arrival order, while holding the
//! *handler gate*; [`Connection::call_after_handlers`] takes the same gate
//! before writing, so an unsolicited request never leaves while a handler runs
//! or before its reply is written (containerd waits for our reply holding the
//! lock its `UpdateContainers` handler needs). [`Connection::handlers_idle`]
//! holds the gate for a caller that decides what to send only then.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use prost::Message as _;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch, Mutex};
use tokio::task::JoinHandle;

use crate::proto::ttrpc;
use crate::status::{Code, Status};
use crate::wire::{encode_frames, encode_message, Message, WireError, TYPE_REQUEST};

mod tasks;

pub use tasks::answer_budget;

/// What a served method returns: the encoded reply or a status.
pub type ServiceFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, Status>> + Send>>;

/// One incoming call.
#[derive(Debug, Clone)]
pub struct Call {
    pub service: String,
    pub method: String,
    pub payload: Vec<u8>,
    /// The caller's remaining budget (`timeout_nano`), if it sent one.
    pub timeout: Option<Duration>,
}

/// A ttrpc service: dispatches calls by service and method name.
pub trait Service: Send + Sync + 'static {
    fn call(&self, call: Call) -> ServiceFuture;
}

/// Which logical connection is served and which is called, and frame limits.
#[derive(Debug, Clone, Copy)]
pub struct Roles {
    pub serve: u32,
    pub client: u32,
    /// Largest frame payload written.
    pub max_out_frame: usize,
    /// Largest frame payload accepted; a larger one closes the connection.
    pub max_in_frame: usize,
}

/// Errors of an outgoing call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("connection closed before the {method} reply arrived")]
    Closed { method: String },
    #[error("{method} got no reply within {timeout:?}")]
    Timeout { method: String, timeout: Duration },
    #[error("{method} failed: {status}")]
    Status { method: String, status: Status },
    #[error("{method} reply is not valid protobuf: {reason}")]
    Decode { method: String, reason: String },
    #[error("{method} could not be encoded: {source}")]
    Encode { method: String, source: WireError },
}

/// How an outgoing call is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// Write only while no served call runs (see the module docs).
    pub after_handlers: bool,
    /// Leave `timeout_nano` at 0 (old ttrpc clients send no deadline).
    pub no_deadline: bool,
}

/// The handler gate, held: no served call runs meanwhile
/// ([`Connection::handlers_idle`]).
#[must_use = "the gate is released when dropped"]
pub struct HandlersIdle<'a> {
    _gate: tokio::sync::MutexGuard<'a, ()>,
}

/// A running multiplexed connection. Dropping it closes the socket.
pub struct Connection {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    server: JoinHandle<()>,
}

pub(crate) struct Shared {
    roles: Roles,
    writer: Mutex<Option<OwnedWriteHalf>>,
    pending: StdMutex<HashMap<u32, oneshot::Sender<ttrpc::Response>>>,
    next_stream: AtomicU32,
    gate: Mutex<()>,
    closed: watch::Sender<Option<String>>,
    largest_in_frame: AtomicUsize,
}

impl Connection {
    /// Starts reading `stream` and serving `service` on `roles.serve`.
    #[must_use]
    pub fn start(stream: UnixStream, roles: Roles, service: Arc<dyn Service>) -> Self {
        let (read, write) = stream.into_split();
        let (closed, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            roles,
            writer: Mutex::new(Some(write)),
            pending: StdMutex::new(HashMap::new()),
            next_stream: AtomicU32::new(1),
            gate: Mutex::new(()),
            closed,
            largest_in_frame: AtomicUsize::new(0),
        });
        let (requests_tx, requests_rx) = mpsc::channel(tasks::MAX_QUEUED_REQUESTS);
        let reader = tokio::spawn(tasks::read_loop(Arc::clone(&shared), read, requests_tx));
        let server = tokio::spawn(tasks::serve_loop(Arc::clone(&shared), service, requests_rx));
        Self {
            shared,
            reader,
            server,
        }
    }

    /// Calls `service.method` on the peer and returns the encoded reply.
    pub async fn call(
        &self,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        self.call_with(service, method, payload, timeout, CallOptions::default())
            .await
    }

    /// Like [`Connection::call`], but written only while no served call is
    /// running (see the module docs).
    pub async fn call_after_handlers(
        &self,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let options = CallOptions {
            after_handlers: true,
            no_deadline: false,
        };
        self.call_with(service, method, payload, timeout, options)
            .await
    }

    /// Calls with explicit [`CallOptions`].
    pub async fn call_with(
        &self,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Duration,
        options: CallOptions,
    ) -> Result<Vec<u8>, CallError> {
        let idle = if options.after_handlers {
            Some(self.handlers_idle().await)
        } else {
            None
        };
        self.call_holding(idle, service, method, payload, timeout, options.no_deadline)
            .await
    }

    /// Waits until no served call runs and holds the handler gate: no
    /// request is served until the guard is given to
    /// [`Connection::call_while_idle`] or dropped. A caller decides what
    /// to send once no handler can change it any more.
    pub async fn handlers_idle(&self) -> HandlersIdle<'_> {
        HandlersIdle {
            _gate: self.shared.gate.lock().await,
        }
    }

    /// Like [`Connection::call_with`] with `after_handlers`, with the gate
    /// already held (`idle`); it is released once the request is written.
    pub async fn call_while_idle(
        &self,
        idle: HandlersIdle<'_>,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Duration,
        no_deadline: bool,
    ) -> Result<Vec<u8>, CallError> {
        self.call_holding(Some(idle), service, method, payload, timeout, no_deadline)
            .await
    }

    async fn call_holding(
        &self,
        idle: Option<HandlersIdle<'_>>,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Duration,
        no_deadline: bool,
    ) -> Result<Vec<u8>, CallError> {
        let closed = || CallError::Closed {
            method: method.to_string(),
        };
        let stream_id = self.shared.next_stream.fetch_add(2, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.shared.pending_map().insert(stream_id, tx);
        let request = ttrpc::Request {
            service: service.to_string(),
            method: method.to_string(),
            payload,
            timeout_nano: if no_deadline {
                0
            } else {
                i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX)
            },
            metadata: Vec::new(),
        };
        let message = Message {
            stream_id,
            kind: TYPE_REQUEST,
            flags: 0,
            payload: request.encode_to_vec(),
        };
        let written = self
            .shared
            .write_message(self.shared.roles.client, &message)
            .await;
        drop(idle);
        if let Err(err) = written {
            self.shared.pending_map().remove(&stream_id);
            return Err(match err {
                WriteError::Wire(source) => CallError::Encode {
                    method: method.to_string(),
                    source,
                },
                WriteError::Closed => closed(),
            });
        }
        let response = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                self.shared.pending_map().remove(&stream_id);
                return Err(CallError::Timeout {
                    method: method.to_string(),
                    timeout,
                });
            }
            Ok(Err(_)) => return Err(closed()),
            Ok(Ok(response)) => response,
        };
        match response.status {
            Some(status) if status.code != 0 => Err(CallError::Status {
                method: method.to_string(),
                status: Status::new(Code::from_number(status.code), status.message),
            }),
            _ => Ok(response.payload),
        }
    }

    /// Writes raw bytes to the socket (tests: garbage and hand-made frames).
    pub async fn send_raw(&self, bytes: &[u8]) -> Result<(), CallError> {
        self.shared
            .write_raw(bytes)
            .await
            .map_err(|_| CallError::Closed {
                method: "raw write".to_string(),
            })
    }

    /// Resolves when the connection has closed, with the reason.
    pub async fn closed(&self) -> String {
        let mut rx = self.shared.closed.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                return "connection dropped".to_string();
            }
        }
    }

    /// True once the connection has closed.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared.closed.borrow().is_some()
    }

    /// The largest frame payload received so far.
    #[must_use]
    pub fn largest_in_frame(&self) -> usize {
        self.shared.largest_in_frame.load(Ordering::Relaxed)
    }

    /// Closes the socket now.
    pub async fn close(&self, reason: &str) {
        self.reader.abort();
        self.server.abort();
        self.shared.close(reason.to_string()).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.server.abort();
    }
}

pub(crate) enum WriteError {
    Closed,
    Wire(WireError),
}

impl Shared {
    pub(crate) fn pending_map(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u32, oneshot::Sender<ttrpc::Response>>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) async fn write_message(
        &self,
        conn: u32,
        message: &Message,
    ) -> Result<(), WriteError> {
        let encoded = encode_message(message).map_err(WriteError::Wire)?;
        let frames = encode_frames(conn, &encoded, self.roles.max_out_frame);
        self.write_raw(&frames).await
    }

    pub(crate) async fn write_raw(&self, bytes: &[u8]) -> Result<(), WriteError> {
        let mut writer = self.writer.lock().await;
        let Some(stream) = writer.as_mut() else {
            return Err(WriteError::Closed);
        };
        if let Err(err) = stream.write_all(bytes).await {
            tracing::debug!(error = %err, "nri socket write failed");
            *writer = None;
            return Err(WriteError::Closed);
        }
        Ok(())
    }

    pub(crate) async fn close(&self, reason: String) {
        if let Some(mut stream) = self.writer.lock().await.take() {
            let _ = stream.shutdown().await;
        }
        self.pending_map().clear();
        self.closed.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(reason);
                true
            } else {
                false
            }
        });
    }

    pub(crate) fn deliver(&self, message: &Message) {
        let Some(tx) = self.pending_map().remove(&message.stream_id) else {
            tracing::debug!(
                stream = message.stream_id,
                "reply for an unknown stream dropped"
            );
            return;
        };
        match ttrpc::Response::decode(message.payload.as_slice()) {
            Ok(response) => {
                let _ = tx.send(response);
            }
            Err(err) => {
                let _ = tx.send(ttrpc::Response {
                    status: Some(ttrpc::Status {
                        code: Code::Internal.number(),
                        message: format!("undecodable ttrpc response: {err}"),
                    }),
                    payload: Vec::new(),
                });
            }
        }
    }
}
