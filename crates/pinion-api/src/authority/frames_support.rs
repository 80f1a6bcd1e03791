//! Test helpers: frames, real clients' header blocks, and a reader of what
//! the server would see.

use loona_hpack::Decoder;

use super::{FrameHeader, CONTINUATION, END_HEADERS, HEADERS, PREFACE};

/// The HEADERS block Python `grpcio` 1.85.3 (grpc-c 58.0.0) sent for
/// `List` on `unix:///tmp/wtgrpc-py/cap.sock` with default options,
/// captured from the socket: `:authority` is `tmp%2Fwtgrpc-py%2Fcap.sock`.
pub fn grpcio_block() -> Vec<u8> {
    let mut block = Vec::new();
    block.extend_from_slice(b"@\x05:path\x1b/v1.PodResourcesLister/List");
    block.extend_from_slice(b"@\n:authority\x1atmp%2Fwtgrpc-py%2Fcap.sock");
    block.extend_from_slice(b"\x83\x86");
    block.extend_from_slice(b"@\x0ccontent-type\x10application/grpc");
    block.extend_from_slice(b"@\x02te\x08trailers");
    block.extend_from_slice(b"@\x14grpc-accept-encoding\x17identity, deflate, gzip");
    block.extend_from_slice(b"@\x0cgrpc-timeout\x051500m");
    block.extend_from_slice(b"@\nuser-agent0grpc-python/1.85.3 grpc-c/58.0.0 (linux; chttp2)");
    block
}

/// One frame.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = super::frame_header(FrameHeader {
        length: payload.len(),
        kind,
        flags,
        stream,
    })
    .to_vec();
    out.extend_from_slice(payload);
    out
}

/// A parsed frame of the server's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// The frames after the preface of a complete rewritten stream.
pub fn frames(stream: &[u8]) -> Vec<Frame> {
    let mut rest = stream.strip_prefix(PREFACE).expect("preface first");
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let header = FrameHeader::parse(&rest[..9]);
        frames.push(Frame {
            kind: header.kind,
            flags: header.flags,
            stream: header.stream,
            payload: rest[9..9 + header.length].to_vec(),
        });
        rest = &rest[9 + header.length..];
    }
    frames
}

/// Every header field of every block of a rewritten stream, decoded as
/// the server would (one decoder for the connection). Asserts that the
/// blocks only hold literals without indexing and that header frames
/// respect the smallest frame size.
pub fn decode_stream(stream: &[u8]) -> Vec<(String, String)> {
    let mut decoder = Decoder::new();
    let mut fields = Vec::new();
    let mut block = Vec::new();
    for frame in frames(stream) {
        if frame.kind != HEADERS && frame.kind != CONTINUATION {
            continue;
        }
        assert!(frame.payload.len() <= super::MAX_FRAME_PAYLOAD);
        let fragment = if frame.kind == HEADERS && frame.flags & super::PRIORITY != 0 {
            &frame.payload[5..]
        } else {
            &frame.payload[..]
        };
        block.extend_from_slice(fragment);
        if frame.flags & END_HEADERS != 0 {
            for (name, value) in decoder.decode(&block).expect("server decodes the block") {
                fields.push((
                    String::from_utf8(name).expect("name"),
                    String::from_utf8(value).expect("value"),
                ));
            }
            block.clear();
        }
    }
    fields
}
