//! The client→server HTTP/2 byte stream, rewritten without I/O: the
//! connection preface and every frame pass through unchanged except header
//! blocks (HEADERS + CONTINUATION), which are decoded with the client's
//! HPACK state, get a valid `:authority` when theirs is not one, and are
//! re-encoded as literals without indexing (so the server's HPACK table
//! stays empty and in step whatever the client indexed).

use std::borrow::Cow;

use loona_hpack::decoder::DecoderError;
use loona_hpack::encoder::encode_integer_into;
use loona_hpack::Decoder;

/// What a client with prior knowledge sends first (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The `:authority` that replaces one that is not a URI authority.
pub const REPLACEMENT: &[u8] = b"localhost";
/// The largest header block (compressed, all its frames) a client may send:
/// the server accepts header lists of 16 KiB (hyper's default; RFC 7541
/// sizes), and no field compresses to more than its size, so no block the
/// server would accept is larger. It also bounds the decoding work, which
/// with `loona-hpack`'s Huffman decoder is large per coded string (ADR 005).
pub const MAX_BLOCK: usize = 16 * 1024;
/// The largest header list a block may decode to (RFC 7541 §4.1 sizes:
/// name + value + 32 per field). The server applies its own, smaller limit
/// (hyper's 16 KiB) to what passes.
pub const MAX_HEADER_LIST: usize = 64 * 1024;
/// The HPACK table size the server advertises (h2's default: hyper and
/// tonic never change `SETTINGS_HEADER_TABLE_SIZE`); the client may not
/// exceed it.
pub const TABLE_SIZE: usize = 4096;
/// Frames we emit carry at most this much payload: the smallest
/// `SETTINGS_MAX_FRAME_SIZE` a server may advertise, always accepted.
pub const MAX_FRAME_PAYLOAD: usize = 16_384;

const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const PRIORITY_FIELDS: usize = 5;

/// Why a client's byte stream cannot be passed on (a connection error).
#[derive(Debug, thiserror::Error)]
pub enum FramesError {
    #[error("header frame of stream {stream} has {length} bytes, more than the {limit} allowed")]
    FrameTooLarge {
        stream: u32,
        length: usize,
        limit: usize,
    },
    #[error("header block of stream {stream} has {length} bytes, more than the {limit} allowed")]
    BlockTooLarge {
        stream: u32,
        length: usize,
        limit: usize,
    },
    #[error("header list of stream {stream} decodes to more than {limit} bytes")]
    HeaderListTooLarge { stream: u32, limit: usize },
    #[error("frame of type {frame_type} on stream {got} where the CONTINUATION of stream {stream} belongs")]
    ContinuationExpected {
        stream: u32,
        frame_type: u8,
        got: u32,
    },
    #[error("CONTINUATION on stream {stream} without a HEADERS frame before it")]
    UnexpectedContinuation { stream: u32 },
    #[error("HEADERS of stream {stream}: padding or priority ({needed} bytes) longer than the frame ({length} bytes)")]
    BadPadding {
        stream: u32,
        needed: usize,
        length: usize,
    },
    #[error("header block of stream {stream}: {source}")]
    Hpack {
        stream: u32,
        #[source]
        source: DecoderError,
    },
}

/// Where the parser is in the client's byte stream.
#[derive(Debug)]
enum State {
    /// Matching the preface; this many bytes of it seen.
    Preface(usize),
    /// Not HTTP/2 with prior knowledge: everything passes unchanged (the
    /// server answers it as before).
    Opaque,
    /// Collecting a 9-byte frame header in `pending`.
    FrameHeader,
    /// Passing on this many payload bytes of a frame that is no header frame.
    Payload(usize),
    /// Collecting the payload of a header frame in `pending`.
    HeaderPayload(FrameHeader),
}

#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    length: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

impl FrameHeader {
    fn parse(bytes: &[u8]) -> Self {
        Self {
            length: usize::from(bytes[0]) << 16
                | usize::from(bytes[1]) << 8
                | usize::from(bytes[2]),
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }
}

/// A header block being collected across HEADERS and CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; PRIORITY_FIELDS]>,
    fragment: Vec<u8>,
}

/// The rewriter of one connection's client→server bytes.
pub struct Rewriter {
    state: State,
    pending: Vec<u8>,
    block: Option<Block>,
    decoder: Decoder<'static>,
    /// Header blocks whose `:authority` was replaced.
    replaced: u64,
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter")
            .field("state", &self.state)
            .field("pending", &self.pending.len())
            .field("block", &self.block)
            .field("replaced", &self.replaced)
            .finish_non_exhaustive()
    }
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Rewriter {
    #[must_use]
    pub fn new() -> Self {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(TABLE_SIZE);
        Self {
            state: State::Preface(0),
            pending: Vec::new(),
            block: None,
            decoder,
            replaced: 0,
        }
    }

    /// How many header blocks had their `:authority` replaced so far.
    #[must_use]
    pub fn replaced(&self) -> u64 {
        self.replaced
    }

    /// Takes the next bytes the client sent and appends what the server
    /// should read to `out`. Bytes of an incomplete frame header or header
    /// frame wait for the next call.
    ///
    /// # Errors
    /// A header block that is too large, malformed HPACK, or frames out of
    /// order around a CONTINUATION: the connection must end.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), FramesError> {
        while !input.is_empty() {
            match self.state {
                State::Opaque => {
                    out.extend_from_slice(input);
                    return Ok(());
                }
                State::Preface(seen) => {
                    let want = &PREFACE[seen..];
                    let n = want.len().min(input.len());
                    if input[..n] != want[..n] {
                        out.extend_from_slice(&PREFACE[..seen]);
                        self.state = State::Opaque;
                        continue;
                    }
                    input = &input[n..];
                    if seen + n == PREFACE.len() {
                        out.extend_from_slice(PREFACE);
                        self.state = State::FrameHeader;
                    } else {
                        self.state = State::Preface(seen + n);
                    }
                }
                State::FrameHeader => {
                    input = self.collect(input, FRAME_HEADER);
                    if self.pending.len() == FRAME_HEADER {
                        let header = FrameHeader::parse(&self.pending);
                        self.pending.clear();
                        self.begin_frame(header, out)?;
                    }
                }
                State::Payload(remaining) => {
                    let n = remaining.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if n == remaining {
                        State::FrameHeader
                    } else {
                        State::Payload(remaining - n)
                    };
                }
                State::HeaderPayload(header) => {
                    input = self.collect(input, header.length);
                    if self.pending.len() == header.length {
                        self.state = State::FrameHeader;
                        let payload = std::mem::take(&mut self.pending);
                        self.header_frame(header, &payload, out)?;
                        self.pending = payload;
                        self.pending.clear();
                    }
                }
            }
        }
        Ok(())
    }

    /// Moves bytes from `input` into `pending` until it holds `want`;
    /// returns the rest of `input`.
    fn collect<'a>(&mut self, input: &'a [u8], want: usize) -> &'a [u8] {
        let n = want.saturating_sub(self.pending.len()).min(input.len());
        self.pending.extend_from_slice(&input[..n]);
        &input[n..]
    }

    fn begin_frame(&mut self, header: FrameHeader, out: &mut Vec<u8>) -> Result<(), FramesError> {
        if let Some(block) = &self.block {
            if header.kind != CONTINUATION || header.stream != block.stream {
                return Err(FramesError::ContinuationExpected {
                    stream: block.stream,
                    frame_type: header.kind,
                    got: header.stream,
                });
            }
        }
        match header.kind {
            HEADERS | CONTINUATION => {
                if header.length > MAX_BLOCK {
                    return Err(FramesError::FrameTooLarge {
                        stream: header.stream,
                        length: header.length,
                        limit: MAX_BLOCK,
                    });
                }
                if header.kind == CONTINUATION && self.block.is_none() {
                    return Err(FramesError::UnexpectedContinuation {
                        stream: header.stream,
                    });
                }
                self.state = State::HeaderPayload(header);
                if header.length == 0 {
                    // An empty payload completes at once.
                    self.state = State::FrameHeader;
                    self.header_frame(header, &[], out)?;
                }
            }
            _ => {
                out.extend_from_slice(&frame_header(header));
                self.state = if header.length == 0 {
                    State::FrameHeader
                } else {
                    State::Payload(header.length)
                };
            }
        }
        Ok(())
    }

    fn header_frame(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), FramesError> {
        let fragment = if header.kind == HEADERS {
            let (priority, fragment) = split_headers_payload(header, payload)?;
            self.block = Some(Block {
                stream: header.stream,
                end_stream: header.flags & END_STREAM != 0,
                priority,
                fragment: Vec::with_capacity(fragment.len()),
            });
            fragment
        } else {
            payload
        };
        let Some(block) = self.block.as_mut() else {
            return Err(FramesError::UnexpectedContinuation {
                stream: header.stream,
            });
        };
        let length = block.fragment.len() + fragment.len();
        if length > MAX_BLOCK {
            return Err(FramesError::BlockTooLarge {
                stream: block.stream,
                length,
                limit: MAX_BLOCK,
            });
        }
        block.fragment.extend_from_slice(fragment);
        if header.flags & END_HEADERS != 0 {
            if let Some(block) = self.block.take() {
                self.finish_block(&block, out)?;
            }
        }
        Ok(())
    }

    /// Decodes `block`, repairs its `:authority`, and emits it re-encoded.
    fn finish_block(&mut self, block: &Block, out: &mut Vec<u8>) -> Result<(), FramesError> {
        let mut encoded = Vec::with_capacity(block.fragment.len() + 64);
        let mut size = 0usize;
        let mut replaced = false;
        self.decoder
            .decode_with_cb(&block.fragment, |name: Cow<[u8]>, value: Cow<[u8]>| {
                size = size.saturating_add(name.len() + value.len() + 32);
                if size > MAX_HEADER_LIST {
                    return;
                }
                let value: &[u8] = if &*name == b":authority" && !is_authority(&value) {
                    replaced = true;
                    REPLACEMENT
                } else {
                    &value
                };
                encode_literal(&name, value, &mut encoded);
            })
            .map_err(|source| FramesError::Hpack {
                stream: block.stream,
                source,
            })?;
        if size > MAX_HEADER_LIST {
            return Err(FramesError::HeaderListTooLarge {
                stream: block.stream,
                limit: MAX_HEADER_LIST,
            });
        }
        if replaced {
            self.replaced += 1;
        }
        emit_block(block, &encoded, out);
        Ok(())
    }
}

/// Whether `value` parses as a URI authority the way the server's h2 does.
#[must_use]
pub fn is_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// The priority fields and the header block fragment of a HEADERS payload
/// (padding dropped).
fn split_headers_payload(
    header: FrameHeader,
    payload: &[u8],
) -> Result<(Option<[u8; PRIORITY_FIELDS]>, &[u8]), FramesError> {
    let mut rest = payload;
    let mut padding = 0;
    if header.flags & PADDED != 0 {
        let Some((&pad, after)) = rest.split_first() else {
            return Err(bad_padding(header, 1));
        };
        padding = usize::from(pad);
        rest = after;
    }
    let mut priority = None;
    if header.flags & PRIORITY != 0 {
        let Some((fields, after)) = rest.split_first_chunk::<PRIORITY_FIELDS>() else {
            return Err(bad_padding(
                header,
                payload.len() - rest.len() + PRIORITY_FIELDS,
            ));
        };
        priority = Some(*fields);
        rest = after;
    }
    if padding > rest.len() {
        return Err(bad_padding(header, payload.len() - rest.len() + padding));
    }
    Ok((priority, &rest[..rest.len() - padding]))
}

fn bad_padding(header: FrameHeader, needed: usize) -> FramesError {
    FramesError::BadPadding {
        stream: header.stream,
        needed,
        length: header.length,
    }
}

/// One field as a literal without indexing, new name, no Huffman coding
/// (RFC 7541 §6.2.2): the server's decoder table is never touched.
fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    for string in [name, value] {
        // Writing into a Vec cannot fail.
        let _ = encode_integer_into(string.len(), 7, 0, out);
        out.extend_from_slice(string);
    }
}

/// `encoded` as a HEADERS frame (with the block's priority and END_STREAM)
/// followed by CONTINUATION frames, none above [`MAX_FRAME_PAYLOAD`].
fn emit_block(block: &Block, encoded: &[u8], out: &mut Vec<u8>) {
    let first_room = MAX_FRAME_PAYLOAD - block.priority.map_or(0, |p| p.len());
    let (first, mut rest) = encoded.split_at(first_room.min(encoded.len()));
    let mut flags = if block.end_stream { END_STREAM } else { 0 };
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    let mut header = FrameHeader {
        length: first.len(),
        kind: HEADERS,
        flags,
        stream: block.stream,
    };
    if let Some(priority) = block.priority {
        header.flags |= PRIORITY;
        header.length += priority.len();
        out.extend_from_slice(&frame_header(header));
        out.extend_from_slice(&priority);
    } else {
        out.extend_from_slice(&frame_header(header));
    }
    out.extend_from_slice(first);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(MAX_FRAME_PAYLOAD.min(rest.len()));
        rest = after;
        let header = FrameHeader {
            length: chunk.len(),
            kind: CONTINUATION,
            flags: if rest.is_empty() { END_HEADERS } else { 0 },
            stream: block.stream,
        };
        out.extend_from_slice(&frame_header(header));
        out.extend_from_slice(chunk);
    }
}

fn frame_header(header: FrameHeader) -> [u8; FRAME_HEADER] {
    let length = u32::try_from(header.length)
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    let stream = header.stream.to_be_bytes();
    [
        length[1],
        length[2],
        length[3],
        header.kind,
        header.flags,
        stream[0],
        stream[1],
        stream[2],
        stream[3],
    ]
}

#[cfg(test)]
#[path = "frames_support.rs"]
pub(crate) mod tests_support;

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
