//! Connections of the podresources socket: at most a fixed number at once
//! (more wait in the listen backlog, see `server::accept_loop`), a client
//! that sends nothing within a deadline after connecting is disconnected,
//! and clients' `:authority` is repaired (`pinion_api::authority`).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pinion_api::authority::AuthorityFix;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::time::Sleep;

/// One accepted connection; dropping it frees its slot.
pub struct Conn {
    io: AuthorityFix<UnixStream>,
    /// Pending until the client sent its first bytes.
    first_read: Option<Pin<Box<Sleep>>>,
    _slot: oneshot::Sender<()>,
}

impl Conn {
    /// `io`, holding `slot` while it lives; the client must send within
    /// `first_byte`.
    #[must_use]
    pub fn new(io: UnixStream, slot: oneshot::Sender<()>, first_byte: Duration) -> Self {
        Self {
            io: AuthorityFix::new(io),
            first_read: Some(Box::pin(tokio::time::sleep(first_byte))),
            _slot: slot,
        }
    }
}

impl AsyncRead for Conn {
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

impl AsyncWrite for Conn {
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

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}
