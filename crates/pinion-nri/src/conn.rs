//! One multiplexed NRI socket: a ttrpc server on one logical connection and a
//! ttrpc client on the other. Used by the plugin (serves 1, calls 2) and by the
//! fake runtime (serves 2, calls 1).
//!
//! Served calls run one at a time, in arrival order, while holding the
//! *handler gate*; [`Connection::call_after_handlers`] takes the same gate
//! before writing, so an unsolicited request never leaves while a handler runs
//! or before its reply is written (containerd waits for our reply holding the
//! lock its `UpdateContainers` handler needs).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch, Mutex};
use tokio::task::JoinHandle;

use crate::proto::ttrpc;
use crate::status::{Code, Status};
use crate::wire::{
    decode_frame_header, encode_frames, encode_message, Assembler, Message, WireError,
    FRAME_HEADER_LEN, TYPE_REQUEST, TYPE_RESPONSE,
};

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

/// A running multiplexed connection. Dropping it closes the socket.
pub struct Connection {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    server: JoinHandle<()>,
}

struct Shared {
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
        let (requests_tx, requests_rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_loop(Arc::clone(&shared), read, requests_tx));
        let server = tokio::spawn(serve_loop(Arc::clone(&shared), service, requests_rx));
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
            timeout_nano: if options.no_deadline {
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
        let written = {
            let _gate = if options.after_handlers {
                Some(self.shared.gate.lock().await)
            } else {
                None
            };
            self.shared
                .write_message(self.shared.roles.client, &message)
                .await
        };
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

enum WriteError {
    Closed,
    Wire(WireError),
}

impl Shared {
    fn pending_map(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u32, oneshot::Sender<ttrpc::Response>>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn write_message(&self, conn: u32, message: &Message) -> Result<(), WriteError> {
        let encoded = encode_message(message).map_err(WriteError::Wire)?;
        let frames = encode_frames(conn, &encoded, self.roles.max_out_frame);
        self.write_raw(&frames).await
    }

    async fn write_raw(&self, bytes: &[u8]) -> Result<(), WriteError> {
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

    async fn close(&self, reason: String) {
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

    fn deliver(&self, message: &Message) {
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

async fn read_loop(
    shared: Arc<Shared>,
    mut read: OwnedReadHalf,
    requests: mpsc::UnboundedSender<Message>,
) {
    let reason = match read_frames(&shared, &mut read, &requests).await {
        Ok(()) => "peer closed the connection".to_string(),
        Err(reason) => reason,
    };
    tracing::debug!(%reason, "nri connection closed");
    shared.close(reason).await;
}

async fn read_frames(
    shared: &Shared,
    read: &mut OwnedReadHalf,
    requests: &mpsc::UnboundedSender<Message>,
) -> Result<(), String> {
    let roles = shared.roles;
    let mut served = Assembler::default();
    let mut replies = Assembler::default();
    loop {
        let mut header = [0u8; FRAME_HEADER_LEN];
        match read.read_exact(&mut header).await {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(err) => return Err(format!("reading a frame header failed: {err}")),
        }
        let (conn, len) = decode_frame_header(header).map_err(|e| e.to_string())?;
        if len > roles.max_in_frame {
            return Err(format!(
                "frame for connection {conn} has {len} bytes, more than the accepted {}",
                roles.max_in_frame
            ));
        }
        shared.largest_in_frame.fetch_max(len, Ordering::Relaxed);
        let mut payload = vec![0u8; len];
        read.read_exact(&mut payload)
            .await
            .map_err(|err| format!("reading a {len}-byte frame failed: {err}"))?;
        if conn == roles.serve {
            served.push(&payload);
            while let Some(message) = served.next_message().map_err(|e| e.to_string())? {
                if message.kind == TYPE_REQUEST {
                    let _ = requests.send(message);
                } else {
                    tracing::debug!(
                        kind = message.kind,
                        "non-request message on the served connection dropped"
                    );
                }
            }
        } else if conn == roles.client {
            replies.push(&payload);
            while let Some(message) = replies.next_message().map_err(|e| e.to_string())? {
                if message.kind == TYPE_RESPONSE {
                    shared.deliver(&message);
                }
            }
        } else {
            tracing::debug!(conn, len, "frame for an unopened connection dropped");
        }
    }
}

async fn serve_loop(
    shared: Arc<Shared>,
    service: Arc<dyn Service>,
    mut requests: mpsc::UnboundedReceiver<Message>,
) {
    while let Some(message) = requests.recv().await {
        let _gate = shared.gate.lock().await;
        let response = serve_one(service.as_ref(), &message.payload).await;
        let reply = Message {
            stream_id: message.stream_id,
            kind: TYPE_RESPONSE,
            flags: 0,
            payload: response.encode_to_vec(),
        };
        if shared
            .write_message(shared.roles.serve, &reply)
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn serve_one(service: &dyn Service, payload: &[u8]) -> ttrpc::Response {
    let request = match ttrpc::Request::decode(payload) {
        Ok(request) => request,
        Err(err) => {
            return status_response(&Status::new(
                Code::InvalidArgument,
                format!("undecodable ttrpc request: {err}"),
            ))
        }
    };
    let timeout = u64::try_from(request.timeout_nano)
        .ok()
        .filter(|nanos| *nanos > 0)
        .map(Duration::from_nanos);
    let method = request.method.clone();
    let future = service.call(Call {
        service: request.service,
        method: request.method,
        payload: request.payload,
        timeout,
    });
    let result = match timeout.map(answer_budget) {
        Some(budget) => tokio::time::timeout(budget, future)
            .await
            .unwrap_or_else(|_| {
                Err(Status::new(
                    Code::DeadlineExceeded,
                    format!("{method} did not finish within the caller's {budget:?}"),
                ))
            }),
        None => future.await,
    };
    match result {
        Ok(payload) => ttrpc::Response {
            status: Some(ttrpc::Status {
                code: 0,
                message: String::new(),
            }),
            payload,
        },
        Err(status) => status_response(&status),
    }
}

/// The part of the caller's budget a handler may use: a tenth (at most
/// 100 ms) is kept for the reply to travel back, so a slow handler is
/// answered with DEADLINE_EXCEEDED before the caller gives up on us (which
/// containerd answers by disconnecting the plugin and creating the
/// container without Pinion's adjustment).
#[must_use]
pub fn answer_budget(caller: Duration) -> Duration {
    caller.saturating_sub((caller / 10).min(Duration::from_millis(100)))
}

fn status_response(status: &Status) -> ttrpc::Response {
    ttrpc::Response {
        status: Some(ttrpc::Status {
            code: status.code.number(),
            message: status.message.clone(),
        }),
        payload: Vec::new(),
    }
}
