//! One gRPC connection of the agent's own unix sockets (podresources, and
//! the QoS Resource Manager's `Registration.Register` socket): HTTP/2 on
//! hyper with tonic's routes, under the same connection cap and eviction
//! as the local API (`server::accept_loop` hands each connection its
//! [`Slot`]).
//!
//! * A connection with no call in flight may be evicted
//!   ([`Slot::allow_eviction`]): at the cap a newcomer closes the oldest
//!   such one (GOAWAY, then closed), so idle clients — a leaked channel, a
//!   client that sent only the HTTP/2 preface or a single byte — cannot
//!   lock new clients out. gRPC clients reconnect on their next call.
//! * A client that sends nothing within `first_byte` after connecting is
//!   disconnected, a call must complete within `call_timeout`, and the
//!   connection is asked to close after `max_age`.
//! * Clients' `:authority` is repaired (`pinion_api::authority`).

use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use pinion_api::authority::AuthorityFix;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio::time::Sleep;
use tonic::codegen::Service as _;
use tonic::service::Routes;
use tonic::Status;

use crate::server::{self, Slot};

/// Bounds of one socket's gRPC connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcLimits {
    /// A client must send its first bytes within this after connecting.
    pub first_byte: Duration,
    /// Each call must complete within this.
    pub call_timeout: Duration,
    /// Connections are asked to close after this long (clients reconnect).
    pub max_age: Duration,
    /// HTTP/2 pings this often on a connection (`None`: no pings).
    pub keepalive_interval: Option<Duration>,
    /// A ping unanswered this long closes the connection.
    pub keepalive_timeout: Duration,
}

/// Serves `routes` over HTTP/2 on the accepted connection `io` with
/// `limits`, holding `slot` (and `live`, which tells the server the
/// connection still runs) until it ends. The connection is closed the way
/// [`server::drive`] closes it — when the accept loop evicts it, at
/// `max_age`, or when `stop` turns true; a call in flight gets
/// `call_timeout` to be answered first.
pub async fn serve(
    io: UnixStream,
    slot: Slot,
    routes: Routes,
    limits: GrpcLimits,
    mut stop: watch::Receiver<bool>,
    live: mpsc::Sender<()>,
) {
    let slot = Arc::new(slot);
    let service = hyper::service::service_fn({
        let slot = Arc::clone(&slot);
        move |request: hyper::Request<Incoming>| {
            let in_flight = slot.request();
            let mut routes = routes.clone();
            async move {
                let call = async {
                    std::future::poll_fn(|cx| {
                        tonic::codegen::Service::<hyper::Request<Incoming>>::poll_ready(
                            &mut routes,
                            cx,
                        )
                    })
                    .await?;
                    routes.call(request).await
                };
                let answer = match tokio::time::timeout(limits.call_timeout, call).await {
                    Ok(Ok(answer)) => answer,
                    Ok(Err(never)) => match never {},
                    // tonic's own text for a server-side timeout.
                    Err(_) => Status::cancelled("Timeout expired").into_http(),
                };
                drop(in_flight);
                Ok::<_, Infallible>(answer)
            }
        }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.keepalive_interval)
        .keep_alive_timeout(limits.keepalive_timeout);
    let io = FirstByte::new(io, limits.first_byte);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    let stopped = async move {
        // A dropped sender stops the connection as well.
        let _ = stop.wait_for(|s| *s).await;
    };
    let outcome = server::drive(
        connection,
        &slot,
        limits.max_age,
        stopped,
        limits.call_timeout,
    )
    .await;
    if let Err(err) = outcome {
        tracing::debug!("grpc connection: {err}");
    }
    drop(live);
}

/// An accepted connection that fails its reads when the client sent
/// nothing within a deadline after connecting.
struct FirstByte {
    io: AuthorityFix<UnixStream>,
    /// Pending until the client sent its first bytes.
    first_read: Option<Pin<Box<Sleep>>>,
}

impl FirstByte {
    fn new(io: UnixStream, first_byte: Duration) -> Self {
        Self {
            io: AuthorityFix::new(io),
            first_read: Some(Box::pin(tokio::time::sleep(first_byte))),
        }
    }
}

impl AsyncRead for FirstByte {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.first_read = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => {
                let expired = this
                    .first_read
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client sent nothing after connecting",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl AsyncWrite for FirstByte {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
