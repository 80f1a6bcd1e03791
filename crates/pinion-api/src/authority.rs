//! gRPC clients' `:authority` on unix sockets, accepted as kubelet accepts it.
//!
//! Over a unix socket the HTTP/2 `:authority` means nothing, and clients
//! send what they like: gRPC C-core (Python's `grpcio`, C++, Ruby) and
//! recent grpc-go the percent-encoded socket path (`tmp%2Fx.sock`),
//! grpc-java's domain sockets and older grpc-go the raw path
//! (`/run/x.sock`). Go's `net/http2` (kubelet) takes anything; Rust's `h2`,
//! under tonic, parses the value as a URI authority and resets the stream
//! with `PROTOCOL_ERROR` when it is not one (hyperium/h2 PR 487, open).
//!
//! [`AuthorityFix`] wraps an accepted connection and rewrites the bytes the
//! server reads ([`frames::Rewriter`]): a header block whose `:authority`
//! is not a URI authority gets `localhost` instead; everything else passes
//! unchanged. Writes are untouched. Why, and when it can go:
//! `docs/decisions/005-grpc-authority-on-unix-sockets.md`.

pub mod frames;

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub use frames::{FramesError, Rewriter};

/// Bytes read from the connection at a time.
const READ_CHUNK: usize = 16 * 1024;

/// A server-side connection whose clients' `:authority` is made acceptable
/// to `h2`.
#[derive(Debug)]
pub struct AuthorityFix<S> {
    io: S,
    rewriter: Rewriter,
    /// Rewritten bytes not yet handed to the reader.
    out: Vec<u8>,
    /// How much of `out` was handed over.
    taken: usize,
    scratch: Box<[u8]>,
    /// The first rewrite error: every later read repeats it.
    failed: Option<(io::ErrorKind, String)>,
}

impl<S> AuthorityFix<S> {
    /// Wraps the accepted connection `io`.
    pub fn new(io: S) -> Self {
        Self {
            io,
            rewriter: Rewriter::new(),
            out: Vec::new(),
            taken: 0,
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            failed: None,
        }
    }

    /// The connection inside.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// How many header blocks had their `:authority` replaced.
    pub fn replaced(&self) -> u64 {
        self.rewriter.replaced()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.taken < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.taken);
                buf.put_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.out.len() {
                    this.out.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if let Some((kind, message)) = &this.failed {
                return Poll::Ready(Err(io::Error::new(*kind, message.clone())));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            let input = read.filled();
            if input.is_empty() {
                return Poll::Ready(Ok(()));
            }
            if let Err(err) = this.rewriter.feed(input, &mut this.out) {
                tracing::debug!("grpc connection: {err}");
                this.failed = Some((io::ErrorKind::InvalidData, err.to_string()));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityFix<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// Bytes written by the client arrive rewritten, and the server's
    /// answers reach the client unchanged.
    #[tokio::test]
    async fn the_server_reads_rewritten_bytes_and_writes_unchanged() {
        let (client, server) = tokio::io::duplex(64);
        let mut server = AuthorityFix::new(server);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let block = frames::tests_support::grpcio_block();
        let mut sent = frames::PREFACE.to_vec();
        sent.extend(frames::tests_support::frame(0x1, 0x5, 1, &block));
        let writer = tokio::spawn(async move {
            client_write.write_all(&sent).await.expect("write");
            client_write.shutdown().await.expect("shutdown");
        });
        let mut read = Vec::new();
        server.read_to_end(&mut read).await.expect("read");
        writer.await.expect("writer");
        assert_eq!(server.replaced(), 1);
        let fields = frames::tests_support::decode_stream(&read);
        assert!(fields.contains(&(":authority".into(), "localhost".into())));

        server.write_all(b"answer").await.expect("answer");
        let mut answer = [0; 6];
        client_read
            .read_exact(&mut answer)
            .await
            .expect("read answer");
        assert_eq!(&answer, b"answer");
    }

    /// A broken header block ends the connection with an error, and every
    /// later read repeats it.
    #[tokio::test]
    async fn garbage_after_the_preface_is_a_read_error() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut server = AuthorityFix::new(server);
        let mut sent = frames::PREFACE.to_vec();
        sent.extend(frames::tests_support::frame(0x1, 0x4, 1, &[0xff; 8]));
        client.write_all(&sent).await.expect("write");
        let mut read = vec![0; 1024];
        let mut got = 0;
        let err = loop {
            match server.read(&mut read[got..]).await {
                Ok(n) => got += n,
                Err(err) => break err,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(&read[..got], frames::PREFACE);
        let again = server.read(&mut read).await.expect_err("still failed");
        assert_eq!(again.kind(), io::ErrorKind::InvalidData);
    }
}
