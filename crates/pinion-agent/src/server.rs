//! The agent's one network stack: listeners with a cap on concurrent
//! connections and back-off when `accept` fails, and HTTP/1.1 on hyper with
//! a header-read timeout, bounded request heads and bodies and a bounded
//! connection lifetime. The local API (`api.rs`) and the metrics endpoint
//! ([`metrics`], which serves what `crate::metrics` encodes) are routes on
//! top of it.
//!
//! At the cap an HTTP listener keeps accepting while one of its connections
//! has no request in flight (idle, or not done sending its request head),
//! and evicts the oldest such connection for each newcomer: idle or
//! slowloris connections cannot crowd out probes and scrapes. Without such a
//! connection the accept loop stops accepting, so newcomers wait in the
//! kernel's listen backlog until earlier ones end (or time out). The agent's
//! descriptors stay bounded (below twice the sum of the caps, see
//! `server/slots.rs`), and one listener's crowd never takes another
//! listener's connections.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;

/// The answer type of every route.
pub type Answer = Response<Full<Bytes>>;

/// Bounds of one listener's connections and requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; beyond it a newcomer evicts the oldest
    /// connection without a request in flight, or waits in the listen
    /// backlog when there is none.
    pub max_connections: usize,
    /// Time a client has to send a complete request head (also the idle
    /// time allowed between requests of a kept-alive connection).
    pub header_read_timeout: Duration,
    /// Time a client has to send the request body.
    pub body_read_timeout: Duration,
    /// Largest request head (request line and headers), in bytes.
    pub max_head: usize,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// Whether a connection may carry more than one request.
    pub keep_alive: bool,
    /// After this long a connection is asked to close (the request in
    /// flight is answered first, within `body_read_timeout` more).
    pub max_connection_lifetime: Duration,
}

/// Request heads above this get `431`; the local API's documented limit.
pub const MAX_HEAD: usize = pinion_api::local::MAX_REQUEST_HEAD;
/// Request bodies above this get `413`.
pub const MAX_BODY: usize = pinion_api::local::MAX_REQUEST_BODY;

impl Limits {
    /// The local API: one request per connection (the CLI's calls). The
    /// controller handles one command at a time, so more connections at once
    /// would only hold buffers; a burst of `pinion run` launchers queues.
    pub const LOCAL_API: Self = Self {
        max_connections: 32,
        header_read_timeout: Duration::from_secs(10),
        body_read_timeout: Duration::from_secs(10),
        max_head: MAX_HEAD,
        max_body: MAX_BODY,
        keep_alive: false,
        max_connection_lifetime: Duration::from_secs(120),
    };

    /// `/metrics`, `/healthz`, `/readyz`: scrapers and probes, kept alive.
    pub const METRICS: Self = Self {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(10),
        body_read_timeout: Duration::from_secs(10),
        max_head: MAX_HEAD,
        max_body: 0,
        keep_alive: true,
        max_connection_lifetime: Duration::from_secs(300),
    };
}

/// A listening socket the accept loop can take connections from.
pub trait Listener: Send + 'static {
    /// One accepted connection.
    type Io: AsyncRead + AsyncWrite + Send + Unpin + 'static;
    /// Accepts the next connection.
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept_one(&self) -> std::io::Result<Self::Io> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept_one(&self) -> std::io::Result<Self::Io> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// First pause after a failed `accept`; it doubles up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// Longest pause between `accept` attempts while they fail.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// At most one warning per listener per this period while `accept` fails.
pub const ACCEPT_WARN_PERIOD: Duration = Duration::from_secs(60);

/// Back-off and rate-limited logging of `accept` failures (descriptor or
/// memory exhaustion: `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`).
#[derive(Debug)]
struct AcceptErrors {
    listener: &'static str,
    delay: Duration,
    last_warning: Option<Instant>,
    suppressed: u64,
}

impl AcceptErrors {
    fn new(listener: &'static str) -> Self {
        Self {
            listener,
            delay: Duration::ZERO,
            last_warning: None,
            suppressed: 0,
        }
    }

    /// How long to pause after `err`.
    fn failed(&mut self, err: &std::io::Error) -> Duration {
        use std::io::ErrorKind;
        if matches!(
            err.kind(),
            ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted
        ) {
            // The peer gave up before we accepted; nothing is exhausted.
            tracing::debug!(listener = self.listener, "accept: {err}");
            return Duration::ZERO;
        }
        self.delay = (self.delay * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
        let now = Instant::now();
        if self
            .last_warning
            .is_none_or(|at| now.duration_since(at) >= ACCEPT_WARN_PERIOD)
        {
            tracing::warn!(
                listener = self.listener,
                suppressed = self.suppressed,
                "accept failed: {err}; retrying with back-off up to {}s (at most one warning a minute)",
                MAX_BACKOFF.as_secs()
            );
            self.last_warning = Some(now);
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
        self.delay
    }

    fn succeeded(&mut self) {
        if self.delay > Duration::ZERO {
            tracing::info!(listener = self.listener, "accepting connections again");
        }
        self.delay = Duration::ZERO;
    }
}

/// Accepts connections until `stop` turns true (or its sender is gone) and
/// runs `serve` on each in its own task with its [`Slot`]. At most
/// `max_connections` are served at once, except that a connection whose
/// server allowed eviction ([`Slot::allow_eviction`]) and has no request in
/// flight makes room for a newcomer (see `slots.rs`); without such a
/// connection the loop stops accepting until one ends.
pub async fn accept_loop<L, F, Fut>(
    name: &'static str,
    listener: L,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
    mut serve: F,
) where
    L: Listener,
    F: FnMut(L::Io, Slot) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Slots::new(max_connections);
    let mut errors = AcceptErrors::new(name);
    'accepting: loop {
        if *stop.borrow() {
            break;
        }
        loop {
            let changed = slots.changed();
            let recheck = match slots.room() {
                Room::Free | Room::ByEviction => break,
                Room::Full(recheck) => recheck,
            };
            let aged = async {
                match recheck {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = changed => {}
                () = aged => {}
                _ = stop.changed() => break 'accepting,
            }
        }
        // A listener that is always ready must not starve the runtime.
        tokio::task::consume_budget().await;
        let accepted = tokio::select! {
            accepted = listener.accept_one() => accepted,
            _ = stop.changed() => break,
        };
        match accepted {
            Ok(io) => {
                errors.succeeded();
                let connection = serve(io, slots.admit());
                tokio::spawn(connection);
            }
            Err(err) => {
                let pause = errors.failed(&err);
                if !pause.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        _ = stop.changed() => break,
                    }
                }
            }
        }
    }
}

/// How long an evicted connection may take to finish what it was writing
/// (or, with half a request head sent, before it is cut).
pub const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// Runs an accepted connection (HTTP/1.1 or HTTP/2) until it ends by
/// itself, or until it is evicted ([`Slot::allow_eviction`], allowed from
/// here on), reaches `max_age`, or `stop` completes. Then it is asked to
/// close gracefully: an idle connection closes at once; one that does not
/// finish within [`EVICTION_GRACE`] (half a request head, a client that
/// ignores the GOAWAY) is cut, unless a request is in flight, which gets
/// `busy_timeout` to be answered first.
pub async fn drive<C>(
    connection: C,
    slot: &Slot,
    max_age: Duration,
    stop: impl Future<Output = ()>,
    busy_timeout: Duration,
) -> Result<(), C::Error>
where
    C: GracefulConnection,
{
    tokio::pin!(connection);
    slot.allow_eviction();
    tokio::select! {
        outcome = connection.as_mut() => return outcome,
        () = tokio::time::sleep(max_age) => {}
        () = slot.evicted() => {}
        () = stop => {}
    }
    connection.as_mut().graceful_shutdown();
    match tokio::time::timeout(EVICTION_GRACE, connection.as_mut()).await {
        Ok(outcome) => outcome,
        Err(_) if slot.busy() => tokio::time::timeout(busy_timeout, connection)
            .await
            .unwrap_or(Ok(())),
        Err(_) => Ok(()),
    }
}

/// Serves HTTP/1.1 on one connection with `limits`. The connection may be
/// evicted ([`Slot::allow_eviction`]) while it has no request in flight:
/// then it is closed (after answering a request that raced the eviction).
pub async fn serve_http1<I, S, Fut>(io: I, limits: Limits, slot: Slot, service: S)
where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    S: Fn(Request<Incoming>) -> Fut + Send + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let slot = Arc::new(slot);
    let service = hyper::service::service_fn({
        let slot = Arc::clone(&slot);
        move |request| {
            let in_flight = slot.request();
            let answer = service(request);
            async move {
                let answer = answer.await;
                drop(in_flight);
                Ok::<_, Infallible>(answer)
            }
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_head)
        .max_buf_size((limits.max_head + 4096).max(64 * 1024))
        .keep_alive(limits.keep_alive);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    let outcome = drive(
        connection,
        &slot,
        limits.max_connection_lifetime,
        std::future::pending(),
        limits.body_read_timeout,
    )
    .await;
    if let Err(err) = outcome {
        tracing::debug!("http connection: {err}");
    }
}

/// Why a request body was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("request body larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("request body not received within {}s", .after.as_secs())]
    Timeout { after: Duration },
    #[error("cannot read the request body: {0}")]
    Read(String),
}

impl BodyError {
    /// The status to answer with.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Read(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// The body of `request`: at most `limits.max_body` bytes (a larger
/// `Content-Length` is refused before reading), read within
/// `limits.body_read_timeout`.
pub async fn read_body(request: Request<Incoming>, limits: &Limits) -> Result<Bytes, BodyError> {
    let too_large = BodyError::TooLarge {
        limit: limits.max_body,
    };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.max_body as u64) {
        return Err(too_large);
    }
    let body = Limited::new(request.into_body(), limits.max_body).collect();
    match tokio::time::timeout(limits.body_read_timeout, body).await {
        Err(_) => Err(BodyError::Timeout {
            after: limits.body_read_timeout,
        }),
        Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => Err(too_large),
        Ok(Err(err)) => Err(BodyError::Read(err.to_string())),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// A JSON answer.
#[must_use]
pub fn json(status: StatusCode, value: &impl serde::Serialize) -> Answer {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    with_type(status, "application/json", body)
}

/// A plain-text answer.
#[must_use]
pub fn text(status: StatusCode, body: String) -> Answer {
    with_type(status, "text/plain; charset=utf-8", body.into_bytes())
}

/// An answer with a content type.
#[must_use]
pub fn with_type(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Answer {
    let mut answer = Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = status;
    answer
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    answer
}

/// Adds the `Allow` header a `405` answer carries.
#[must_use]
pub fn allow(mut answer: Answer, methods: &'static str) -> Answer {
    answer
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(methods));
    answer
}

pub mod metrics;
mod slots;

pub use slots::{InFlight, Slot};
use slots::{Room, Slots};

#[cfg(test)]
mod tests;
