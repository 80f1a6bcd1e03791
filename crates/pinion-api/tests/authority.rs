//! tonic's server on a unix socket, spoken to in raw HTTP/2 the way gRPC
//! clients of other languages speak: a request whose `:authority` is the
//! socket path. Without `pinion_api::authority` h2 resets the stream; with
//! it (as every Pinion server is) the call is answered. The first test is a
//! canary: when it fails, h2 accepts such authorities and the adapter can go
//! (docs/decisions/005-grpc-authority-on-unix-sockets.md).

use std::path::Path;
use std::time::Duration;

use loona_hpack::Decoder;
use pinion_api::plugin::Identity;
use pinion_api::pluginregistration as pr;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio_stream::wrappers::UnixListenerStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const PATIENCE: Duration = Duration::from_secs(10);

/// What the server did with stream 1.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// `RST_STREAM` with this error code (1 = `PROTOCOL_ERROR`).
    Reset(u32),
    /// Answered: the `grpc-status` of the trailers and the message bytes.
    Answered {
        grpc_status: String,
        message: Vec<u8>,
    },
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("length").to_be_bytes();
    let mut out = vec![length[1], length[2], length[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A literal field without indexing, new name, no Huffman coding.
fn literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0);
    for s in [name, value] {
        loona_hpack::encoder::encode_integer_into(s.len(), 7, 0, out).expect("vec");
        out.extend_from_slice(s.as_bytes());
    }
}

/// Calls `GetInfo` over `socket` with `authority`, as a client of another
/// language would, and reads what the server does with the call.
async fn get_info(socket: &Path, authority: &str) -> Outcome {
    let mut io = UnixStream::connect(socket).await.expect("connect");
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/pluginregistration.Registration/GetInfo"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        literal(&mut block, name, value);
    }
    let mut sent = PREFACE.to_vec();
    sent.extend(frame(0x4, 0, 0, &[]));
    sent.extend(frame(0x1, 0x4, 1, &block));
    // An empty InfoRequest: uncompressed, zero length.
    sent.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0]));
    io.write_all(&sent).await.expect("send");
    tokio::time::timeout(PATIENCE, read_outcome(&mut io))
        .await
        .expect("the server answers within the patience")
}

async fn read_outcome(io: &mut UnixStream) -> Outcome {
    let mut decoder = Decoder::new();
    let mut fields = Vec::new();
    let mut message = Vec::new();
    loop {
        let mut header = [0u8; 9];
        io.read_exact(&mut header).await.expect("frame header");
        let length =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]);
        let mut payload = vec![0; length];
        io.read_exact(&mut payload).await.expect("payload");
        match (kind, stream) {
            (0x3, 1) => {
                let code = u32::from_be_bytes(payload[..4].try_into().expect("code"));
                return Outcome::Reset(code);
            }
            (0x1, 1) => {
                for (name, value) in decoder.decode(&payload).expect("hpack") {
                    fields.push((
                        String::from_utf8(name).expect("name"),
                        String::from_utf8(value).expect("value"),
                    ));
                }
                if flags & 0x1 != 0 {
                    let grpc_status = fields
                        .iter()
                        .find(|(n, _)| n == "grpc-status")
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default();
                    return Outcome::Answered {
                        grpc_status,
                        message,
                    };
                }
            }
            (0x0, 1) => message.extend_from_slice(&payload),
            (0x7, 0) => panic!("GOAWAY: {payload:?}"),
            _ => {}
        }
    }
}

/// Serves the plugin-registration service of `Identity` on `incoming`.
fn serve<S, IO>(incoming: S) -> tokio::task::JoinHandle<()>
where
    S: tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
{
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(pr::registration_server::RegistrationServer::new(
                Identity::new("widget"),
            ))
            .serve_with_incoming(incoming)
            .await
            .expect("serve");
    })
}

/// `widget`'s PluginInfo, as the server frames it (5-byte gRPC prefix).
fn widget_info() -> Vec<u8> {
    let info = pr::PluginInfo {
        r#type: "ResourcePlugin".into(),
        name: "widget".into(),
        endpoint: String::new(),
        supported_versions: vec!["v1alpha1".into()],
    };
    let body = prost::Message::encode_to_vec(&info);
    let mut framed = vec![0];
    framed.extend_from_slice(&u32::try_from(body.len()).expect("len").to_be_bytes());
    framed.extend(body);
    framed
}

#[tokio::test]
async fn canary_h2_alone_still_resets_a_socket_path_authority() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("plain.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    let server = serve(UnixListenerStream::new(listener));
    assert_eq!(get_info(&socket, "/run/x.sock").await, Outcome::Reset(1));
    assert_eq!(get_info(&socket, "tmp%2Fx.sock").await, Outcome::Reset(1));
    assert!(matches!(
        get_info(&socket, "localhost").await,
        Outcome::Answered { .. }
    ));
    server.abort();
}

#[tokio::test]
async fn socket_path_authorities_are_answered_through_grpc_incoming() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("fixed.sock");
    let server = serve(pinion_api::uds::bind_grpc(&socket, 0o600).expect("bind"));
    for authority in [
        "/run/x.sock",
        "tmp%2Fx.sock",
        "%2Frun%2Fx.sock",
        "",
        "localhost",
        "pinion.invalid:1",
    ] {
        assert_eq!(
            get_info(&socket, authority).await,
            Outcome::Answered {
                grpc_status: "0".into(),
                message: widget_info()
            },
            "{authority:?}"
        );
    }
    server.abort();
}
