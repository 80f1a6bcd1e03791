//! A deliberately small HTTP/1.1: one request per connection, bodies sized
//! by `Content-Length`, the server closes after answering. Enough for the
//! local API and `/metrics`, with limits on every size.

use std::io::Read as _;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Largest request/response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Largest body accepted.
pub const MAX_BODY: usize = 1024 * 1024;

/// Errors of reading or writing HTTP messages.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed http message: {0}")]
    Malformed(String),
    #[error("http {what} larger than {limit} bytes")]
    TooLarge { what: &'static str, limit: usize },
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// A response to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    /// A JSON response.
    #[must_use]
    pub fn json(status: u16, value: &impl serde::Serialize) -> Self {
        let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
        Self {
            status,
            content_type: "application/json",
            body,
        }
    }

    /// A plain-text response.
    #[must_use]
    pub fn text(status: u16, content_type: &'static str, body: String) -> Self {
        Self {
            status,
            content_type,
            body: body.into_bytes(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

fn head_end(buffer: &[u8]) -> Option<usize> {
    buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
}

/// (first line, content length) of a message head.
fn parse_head(head: &[u8]) -> Result<(String, usize), HttpError> {
    let text =
        std::str::from_utf8(head).map_err(|_| HttpError::Malformed("head is not utf-8".into()))?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default().to_string();
    let mut length = 0;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value
                    .trim()
                    .parse()
                    .map_err(|_| HttpError::Malformed(format!("bad content-length {value:?}")))?;
            }
        }
    }
    if length > MAX_BODY {
        return Err(HttpError::TooLarge {
            what: "body",
            limit: MAX_BODY,
        });
    }
    Ok((first, length))
}

/// Reads one request.
pub async fn read_request<R: AsyncRead + Unpin>(stream: &mut R) -> Result<Request, HttpError> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = head_end(&buffer) {
            break end;
        }
        if buffer.len() > MAX_HEAD {
            return Err(HttpError::TooLarge {
                what: "head",
                limit: MAX_HEAD,
            });
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(HttpError::Malformed(
                "connection closed before the end of the head".into(),
            ));
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let (first, length) = parse_head(&buffer[..end])?;
    let mut parts = first.split(' ');
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed(format!("bad request line {first:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed(format!(
            "unsupported version {version:?}"
        )));
    }
    let mut body = buffer[end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(HttpError::Malformed(
                "connection closed inside the body".into(),
            ));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        body,
    })
}

/// Writes a response (the connection closes afterwards).
pub async fn write_response<W: AsyncWrite + Unpin>(
    stream: &mut W,
    response: &Response,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&response.body).await?;
    stream.flush().await
}

/// Blocking client: sends one request and returns (status, body).
pub fn call<S: std::io::Read + std::io::Write>(
    stream: &mut S,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), HttpError> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: pinion\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut reply = Vec::new();
    stream
        .take(u64::try_from(MAX_BODY + MAX_HEAD).unwrap_or(u64::MAX))
        .read_to_end(&mut reply)?;
    let end = head_end(&reply)
        .ok_or_else(|| HttpError::Malformed("response without a complete head".into()))?;
    let (first, length) = parse_head(&reply[..end])?;
    let status = first
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| HttpError::Malformed(format!("bad status line {first:?}")))?;
    let mut body = reply[end..].to_vec();
    body.truncate(length);
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn request_round_trip_and_limits() {
        let raw = b"POST /v1/run HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcdEXTRA";
        let request = read_request(&mut &raw[..]).await.expect("parses");
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/v1/run");
        assert_eq!(request.body, b"abcd");

        let huge = format!("GET / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_BODY + 1);
        let err = read_request(&mut huge.as_bytes())
            .await
            .expect_err("too large");
        assert!(matches!(err, HttpError::TooLarge { what: "body", .. }));
        let err = read_request(&mut &b"GARBAGE\r\n\r\n"[..])
            .await
            .expect_err("bad line");
        assert!(matches!(err, HttpError::Malformed(_)));
        let err = read_request(&mut &b"GET / HTTP/1.1\r\n"[..])
            .await
            .expect_err("cut");
        assert!(matches!(err, HttpError::Malformed(_)));
    }

    #[tokio::test]
    async fn response_is_parsed_by_the_client() {
        let mut written = Vec::new();
        write_response(
            &mut written,
            &Response::text(404, "text/plain", "nope".into()),
        )
        .await
        .expect("write");
        let mut duplex = Duplex {
            input: &written[..],
            output: Vec::new(),
        };
        let (status, body) = call(&mut duplex, "GET", "/x", b"").expect("call");
        assert_eq!((status, body.as_slice()), (404, &b"nope"[..]));
        assert!(duplex.output.starts_with(b"GET /x HTTP/1.1\r\n"));
    }

    struct Duplex<'a> {
        input: &'a [u8],
        output: Vec<u8>,
    }

    impl std::io::Read for Duplex<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::io::Read::read(&mut self.input, buf)
        }
    }

    impl std::io::Write for Duplex<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            std::io::Write::write(&mut self.output, buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
