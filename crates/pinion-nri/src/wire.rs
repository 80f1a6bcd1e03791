//! The bytes on the NRI socket: the multiplexer's frames and the ttrpc
//! messages inside each logical connection. Pure encode/decode, no I/O.
//!
//! Frame: big-endian `u32` connection id, big-endian `u32` payload length,
//! payload. ttrpc message: big-endian `u32` length, big-endian `u32` stream
//! id, `u8` type, `u8` flags, then the protobuf payload.

/// The logical connection carrying the Plugin service (plugin = server).
pub const PLUGIN_CONN: u32 = 1;
/// The logical connection carrying the Runtime service (runtime = server).
pub const RUNTIME_CONN: u32 = 2;
/// Bytes in a frame header.
pub const FRAME_HEADER_LEN: usize = 8;
/// Largest frame payload we send: the Go side reads through a 4096-byte
/// buffer and loses larger coalesced frames (see docs/nri.md).
pub const MAX_OUT_FRAME: usize = 4096;
/// Bytes in a ttrpc message header.
pub const TTRPC_HEADER_LEN: usize = 10;
/// Largest ttrpc message payload (ttrpc's limit, 4 MiB).
pub const MAX_MESSAGE: usize = 4 << 20;
/// Largest frame payload we accept (the Go side's limit).
pub const MAX_IN_FRAME: usize = MAX_MESSAGE + TTRPC_HEADER_LEN;

/// ttrpc message type of a request.
pub const TYPE_REQUEST: u8 = 1;
/// ttrpc message type of a response.
pub const TYPE_RESPONSE: u8 = 2;

/// Errors from decoding or encoding the wire format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame for connection {conn} announces {len} bytes, more than the maximum {max}")]
    FrameTooLarge { conn: u32, len: usize, max: usize },
    #[error("ttrpc message announces {len} bytes, more than the maximum {max}")]
    MessageTooLarge { len: usize, max: usize },
}

/// Splits `data` into frames of at most `max` payload bytes for `conn`, all
/// concatenated into one buffer (written with one call).
#[must_use]
pub fn encode_frames(conn: u32, data: &[u8], max: usize) -> Vec<u8> {
    let max = max.max(1);
    let mut out = Vec::with_capacity(data.len() + FRAME_HEADER_LEN * (data.len() / max + 1));
    for chunk in data.chunks(max) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&len_u32(chunk.len()).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Reads a frame header: (connection id, payload length). Lengths above
/// [`MAX_IN_FRAME`] are an error.
pub fn decode_frame_header(header: [u8; FRAME_HEADER_LEN]) -> Result<(u32, usize), WireError> {
    let conn = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_IN_FRAME {
        return Err(WireError::FrameTooLarge {
            conn,
            len,
            max: MAX_IN_FRAME,
        });
    }
    Ok((conn, len))
}

/// One ttrpc message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub stream_id: u32,
    pub kind: u8,
    pub flags: u8,
    pub payload: Vec<u8>,
}

/// Encodes a ttrpc message (header + payload).
pub fn encode_message(message: &Message) -> Result<Vec<u8>, WireError> {
    let len = message.payload.len();
    if len > MAX_MESSAGE {
        return Err(WireError::MessageTooLarge {
            len,
            max: MAX_MESSAGE,
        });
    }
    let mut out = Vec::with_capacity(TTRPC_HEADER_LEN + len);
    out.extend_from_slice(&len_u32(len).to_be_bytes());
    out.extend_from_slice(&message.stream_id.to_be_bytes());
    out.push(message.kind);
    out.push(message.flags);
    out.extend_from_slice(&message.payload);
    Ok(out)
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Reassembles ttrpc messages from the payloads of one logical connection's
/// frames (a message may span frames, a frame may hold several messages).
/// Taking a message moves a read offset; the bytes before it are dropped
/// once per pushed frame, so a frame of many small messages costs time in
/// proportion to its size (dropping them per message was quadratic: 23 s
/// for a 4 MiB frame of empty messages).
#[derive(Debug, Default)]
pub struct Assembler {
    buf: Vec<u8>,
    /// Where the next message starts in `buf`.
    start: usize,
}

impl Assembler {
    /// Appends a frame payload.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.drain(..self.start);
        self.start = 0;
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, if one is buffered.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        let b = &self.buf[self.start..];
        if b.len() < TTRPC_HEADER_LEN {
            return Ok(None);
        }
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len > MAX_MESSAGE {
            return Err(WireError::MessageTooLarge {
                len,
                max: MAX_MESSAGE,
            });
        }
        if b.len() < TTRPC_HEADER_LEN + len {
            return Ok(None);
        }
        let message = Message {
            stream_id: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            kind: b[8],
            flags: b[9],
            payload: b[TTRPC_HEADER_LEN..TTRPC_HEADER_LEN + len].to_vec(),
        };
        self.start += TTRPC_HEADER_LEN + len;
        Ok(Some(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_capped_and_golden() {
        let data: Vec<u8> = (0..10u8).collect();
        let out = encode_frames(2, &data, 4);
        assert_eq!(
            out,
            vec![
                0, 0, 0, 2, 0, 0, 0, 4, 0, 1, 2, 3, //
                0, 0, 0, 2, 0, 0, 0, 4, 4, 5, 6, 7, //
                0, 0, 0, 2, 0, 0, 0, 2, 8, 9,
            ]
        );
    }

    #[test]
    fn large_payload_splits_into_4096_byte_frames() {
        let data = vec![7u8; 9000];
        let out = encode_frames(1, &data, MAX_OUT_FRAME);
        let mut sizes = Vec::new();
        let mut rest = out.as_slice();
        while !rest.is_empty() {
            let header: [u8; 8] = rest[..8].try_into().unwrap();
            let (conn, len) = decode_frame_header(header).unwrap();
            assert_eq!(conn, 1);
            sizes.push(len);
            rest = &rest[8 + len..];
        }
        assert_eq!(sizes, vec![4096, 4096, 808]);
    }

    #[test]
    fn oversized_frame_header_is_rejected() {
        let mut header = [0u8; 8];
        header[3] = 1;
        header[4..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            decode_frame_header(header),
            Err(WireError::FrameTooLarge {
                conn: 1,
                len: u32::MAX as usize,
                max: MAX_IN_FRAME
            })
        );
    }

    /// Session 43: messages are taken by moving an offset (no shift of the
    /// buffer per message); a frame of many messages and a message split
    /// across frames after some were taken both come out whole and in order.
    #[test]
    fn many_messages_in_one_push_and_one_split_after_them_come_out_in_order() {
        let message = |stream_id: u32, payload: &[u8]| Message {
            stream_id,
            kind: TYPE_REQUEST,
            flags: 0,
            payload: payload.to_vec(),
        };
        let mut bytes = Vec::new();
        for id in 0..1000u32 {
            bytes.extend(encode_message(&message(id, &id.to_be_bytes())).unwrap());
        }
        let last = encode_message(&message(1000, b"split")).unwrap();
        bytes.extend_from_slice(&last[..6]);
        let mut asm = Assembler::default();
        asm.push(&bytes);
        for id in 0..1000u32 {
            assert_eq!(
                asm.next_message().unwrap(),
                Some(message(id, &id.to_be_bytes()))
            );
        }
        assert_eq!(asm.next_message().unwrap(), None, "half a header");
        asm.push(&last[6..]);
        assert_eq!(asm.next_message().unwrap(), Some(message(1000, b"split")));
        assert_eq!(asm.next_message().unwrap(), None);
        assert!(asm.buf.len() <= last.len(), "taken bytes are dropped");
    }

    #[test]
    fn message_round_trip_across_split_pushes() {
        let message = Message {
            stream_id: 3,
            kind: TYPE_REQUEST,
            flags: 0,
            payload: b"hello".to_vec(),
        };
        let bytes = encode_message(&message).unwrap();
        assert_eq!(&bytes[..10], &[0, 0, 0, 5, 0, 0, 0, 3, 1, 0]);
        let mut asm = Assembler::default();
        asm.push(&bytes[..7]);
        assert_eq!(asm.next_message().unwrap(), None);
        asm.push(&bytes[7..]);
        asm.push(&bytes);
        assert_eq!(asm.next_message().unwrap(), Some(message.clone()));
        assert_eq!(asm.next_message().unwrap(), Some(message));
        assert_eq!(asm.next_message().unwrap(), None);
    }

    #[test]
    fn oversized_message_is_rejected() {
        let mut asm = Assembler::default();
        asm.push(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1, 0]);
        assert!(matches!(
            asm.next_message(),
            Err(WireError::MessageTooLarge { .. })
        ));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_bytes_never_panic_the_assembler(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)) {
            let mut asm = Assembler::default();
            for chunk in &chunks {
                asm.push(chunk);
                while let Ok(Some(_)) = asm.next_message() {}
            }
        }

        #[test]
        fn messages_survive_any_framing(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8), max in 1usize..600) {
            let messages: Vec<Message> = payloads.into_iter().enumerate().map(|(i, payload)| Message {
                stream_id: u32::try_from(i).unwrap() * 2 + 1,
                kind: TYPE_RESPONSE,
                flags: 0,
                payload,
            }).collect();
            let bytes: Vec<u8> = messages.iter().flat_map(|m| encode_message(m).unwrap()).collect();
            let framed = encode_frames(RUNTIME_CONN, &bytes, max);
            let mut asm = Assembler::default();
            let mut rest = framed.as_slice();
            let mut got = Vec::new();
            while !rest.is_empty() {
                let (conn, len) = decode_frame_header(rest[..8].try_into().unwrap()).unwrap();
                prop_assert_eq!(conn, RUNTIME_CONN);
                prop_assert!(len <= max);
                asm.push(&rest[8..8 + len]);
                rest = &rest[8 + len..];
                while let Some(m) = asm.next_message().unwrap() {
                    got.push(m);
                }
            }
            prop_assert_eq!(got, messages);
        }
    }
}
