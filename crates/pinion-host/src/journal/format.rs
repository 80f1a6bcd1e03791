//! The journal's bytes: the file header, the frames, their checksum
//! (CRC-32C) and the checkpoint identity (FNV-1a 64 of the checkpoint's
//! bytes). Layout in `docs/checkpoint-format.md` ("The journal").

use pinion_core::record::Record;

/// The first 8 bytes of a journal file.
pub const MAGIC: [u8; 8] = *b"PINIONJL";
/// The journal format version this code writes and reads.
pub const VERSION: u32 = 1;
/// Frames start here; the header lives in the block before.
pub const DATA_START: u64 = 4096;
/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 24;
/// The last 4 bytes of a frame header.
pub const FRAME_MAGIC: [u8; 4] = *b"PJRF";
/// Largest payload accepted (a record is about 100 bytes).
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Longest policy name kept in the header.
pub const MAX_POLICY: usize = 64;
const HEADER_FIXED: usize = 42;

/// Frame kinds.
pub const KIND_RECORD: u8 = 1;
pub const KIND_COMPACTION: u8 = 2;
/// Frame flag: the last frame of a flush (a batch).
pub const FLAG_COMMIT: u8 = 1;

/// The journal file's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Bumped at every reset; bound into every frame's checksum.
    pub generation: u64,
    /// The sequence number of the last record the base checkpoint holds;
    /// the first frame of this file has `base_seq + 1`.
    pub base_seq: u64,
    /// [`checkpoint_id`] of the checkpoint this journal extends.
    pub base_id: u64,
    /// The policy name of the state (used when there is no checkpoint).
    pub policy: String,
}

impl Header {
    /// The header's bytes (not padded to [`DATA_START`]).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let policy = &self.policy.as_bytes()[..self.policy.len().min(MAX_POLICY)];
        let mut out = Vec::with_capacity(HEADER_FIXED + policy.len() + 4);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let len = u32::try_from(HEADER_FIXED + policy.len() + 4).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.base_seq.to_le_bytes());
        out.extend_from_slice(&self.base_id.to_le_bytes());
        out.extend_from_slice(&u16::try_from(policy.len()).unwrap_or(0).to_le_bytes());
        out.extend_from_slice(policy);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a header, or says why the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        if bytes.len() < HEADER_FIXED + 4 {
            return Err(format!(
                "file of {} bytes is too short for a header",
                bytes.len()
            ));
        }
        if bytes[..8] != MAGIC {
            return Err(format!(
                "no journal magic (starts with {:02x?})",
                &bytes[..8]
            ));
        }
        let version = le_u32(&bytes[8..12]);
        if version != VERSION {
            return Err(format!(
                "journal format version {version}, this pinion reads {VERSION}"
            ));
        }
        let policy_len = usize::from(u16::from_le_bytes([bytes[40], bytes[41]]));
        let end = HEADER_FIXED + policy_len;
        if policy_len > MAX_POLICY || bytes.len() < end + 4 {
            return Err(format!(
                "header policy name of {policy_len} bytes does not fit"
            ));
        }
        let stored = le_u32(&bytes[end..end + 4]);
        let computed = crc32c::crc32c(&bytes[..end]);
        if stored != computed {
            return Err(format!(
                "header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        Ok(Header {
            generation: le_u64(&bytes[16..24]),
            base_seq: le_u64(&bytes[24..32]),
            base_id: le_u64(&bytes[32..40]),
            policy: String::from_utf8_lossy(&bytes[HEADER_FIXED..end]).into_owned(),
        })
    }
}

/// What a frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A decision.
    Record(Record),
    /// Written before a compaction rewrites the checkpoint: the checkpoint
    /// with id `checkpoint_id` holds every record up to seq `through`.
    Compaction { checkpoint_id: u64, through: u64 },
}

impl Entry {
    fn decode(kind: u8, payload: &[u8]) -> Result<Entry, String> {
        match kind {
            KIND_RECORD => Record::from_bytes(payload)
                .map(Entry::Record)
                .map_err(|err| err.to_string()),
            KIND_COMPACTION if payload.len() == 16 => Ok(Entry::Compaction {
                checkpoint_id: le_u64(&payload[..8]),
                through: le_u64(&payload[8..]),
            }),
            KIND_COMPACTION => Err(format!("compaction marker of {} bytes", payload.len())),
            other => Err(format!("unknown frame kind {other}")),
        }
    }
}

/// An [`Entry`] to write, borrowed: a record is encoded without a copy.
#[derive(Debug, Clone, Copy)]
pub enum EntryRef<'a> {
    Record(&'a Record),
    Compaction { checkpoint_id: u64, through: u64 },
}

impl EntryRef<'_> {
    fn kind(self) -> u8 {
        match self {
            EntryRef::Record(_) => KIND_RECORD,
            EntryRef::Compaction { .. } => KIND_COMPACTION,
        }
    }

    /// Appends the payload to `out`.
    fn write_payload(self, out: &mut Vec<u8>) {
        match self {
            EntryRef::Record(record) => record.write_bytes(out),
            EntryRef::Compaction {
                checkpoint_id,
                through,
            } => {
                out.extend_from_slice(&checkpoint_id.to_le_bytes());
                out.extend_from_slice(&through.to_le_bytes());
            }
        }
    }
}

/// A frame read back from a journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Byte offset of the frame in the file.
    pub offset: u64,
    pub seq: u64,
    /// The last frame of its flush.
    pub commit: bool,
    pub entry: Entry,
    /// Bytes the frame takes in the file (header, payload, padding).
    pub size: u64,
}

/// Bytes a frame with a payload of `len` bytes takes.
#[must_use]
pub fn frame_size(len: usize) -> usize {
    FRAME_HEADER + len.div_ceil(8) * 8
}

/// Appends the frame of `entry` to `out`; returns its payload length. The
/// payload is encoded in place, its length filled in after.
pub fn encode_frame(out: &mut Vec<u8>, generation: u64, seq: u64, entry: EntryRef<'_>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&[entry.kind(), 0, 0, 0]);
    out.extend_from_slice(&FRAME_MAGIC);
    debug_assert_eq!(out.len() - start, FRAME_HEADER);
    entry.write_payload(out);
    let len = out.len() - start - FRAME_HEADER;
    out[start..start + 4].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    out.resize(start + frame_size(len), 0);
    seal_frame(&mut out[start..], generation);
    len
}

/// Sets the commit flag of the frame at the start of `frame` and refreshes
/// its checksum.
pub fn mark_commit(frame: &mut [u8], generation: u64) {
    frame[17] |= FLAG_COMMIT;
    seal_frame(frame, generation);
}

fn seal_frame(frame: &mut [u8], generation: u64) {
    let len = le_u32(&frame[..4]) as usize;
    let crc = frame_crc(
        generation,
        &frame[8..FRAME_HEADER],
        &frame[FRAME_HEADER..FRAME_HEADER + len],
    );
    frame[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32C (the `crc32c` crate: the CPU's CRC instruction where there is
/// one) of the generation, the fields and the payload, in that order.
fn frame_crc(generation: u64, fields: &[u8], payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&generation.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, fields);
    crc32c::crc32c_append(crc, payload)
}

/// Whether the 24 bytes at `offset` are all zero (the end of the log in a
/// preallocated file).
#[must_use]
pub fn is_zero_header(bytes: &[u8], offset: usize) -> bool {
    bytes
        .get(offset..offset + FRAME_HEADER)
        .is_some_and(|h| h.iter().all(|&b| b == 0))
}

/// Reads the frame at `offset`: `Err` says why the bytes are not a valid
/// frame of this generation with sequence number `expected_seq` (any seq
/// greater than `min_seq` when `expected_seq` is `None`).
pub fn decode_frame(
    bytes: &[u8],
    offset: usize,
    generation: u64,
    expected_seq: Option<u64>,
    min_seq: u64,
) -> Result<Frame, String> {
    let Some(head) = bytes.get(offset..offset + FRAME_HEADER) else {
        return Err(format!(
            "frame header cut at the end of the file ({} bytes)",
            bytes.len()
        ));
    };
    if head[20..24] != FRAME_MAGIC {
        return Err("no frame magic".to_string());
    }
    let len = le_u32(&head[..4]) as usize;
    if len == 0 || len > MAX_PAYLOAD {
        return Err(format!("frame length {len} out of range"));
    }
    let end = offset + frame_size(len);
    if end > bytes.len() {
        return Err(format!("frame of {len} bytes cut at the end of the file"));
    }
    let payload = &bytes[offset + FRAME_HEADER..offset + FRAME_HEADER + len];
    let stored = le_u32(&head[4..8]);
    let computed = frame_crc(generation, &head[8..], payload);
    if stored != computed {
        return Err(format!(
            "frame checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    let seq = le_u64(&head[8..16]);
    match expected_seq {
        Some(want) if seq != want => return Err(format!("sequence {seq}, expected {want}")),
        None if seq <= min_seq => return Err(format!("sequence {seq} is not after {min_seq}")),
        _ => {}
    }
    let entry = Entry::decode(head[16], payload)?;
    Ok(Frame {
        offset: offset as u64,
        seq,
        commit: head[17] & FLAG_COMMIT != 0,
        entry,
        size: (end - offset) as u64,
    })
}

/// The identity of a checkpoint file's content: FNV-1a 64 of its bytes;
/// 0 stands for "no checkpoint" (a content hashing to 0 gets 1).
#[must_use]
pub fn checkpoint_id(bytes: Option<&[u8]>) -> u64 {
    let Some(bytes) = bytes else { return 0 };
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash.max(1)
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut out = [0; 4];
    out.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(out)
}

fn le_u64(bytes: &[u8]) -> u64 {
    let mut out = [0; 8];
    out.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crc32c::crc32c_append as crc32c;
    use pinion_core::CpuSet;

    #[test]
    fn crc32c_check_value() {
        // The standard check value of CRC-32C over "123456789".
        assert_eq!(crc32c(0, b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(crc32c(0, b"1234"), b"56789"), 0xE306_9283);
    }

    /// CRC-32C bit by bit, as `docs/checkpoint-format.md` defines it
    /// (Castagnoli, reflected polynomial `0x82F63B78`).
    fn crc32c_by_bits(crc: u32, bytes: &[u8]) -> u32 {
        let mut crc = !crc;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0x82F6_3B78 & 0u32.wrapping_sub(crc & 1));
            }
        }
        !crc
    }

    proptest::proptest! {
        /// Journals written before the `crc32c` crate computed the
        /// checksums (a table of our own did) read back: same values, in
        /// one piece or continued, at every length and alignment.
        #[test]
        fn crc32c_is_the_format_s_checksum(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            cut in 0usize..300,
            seed: u32,
        ) {
            let cut = cut.min(bytes.len());
            proptest::prop_assert_eq!(crc32c(0, &bytes), crc32c_by_bits(0, &bytes));
            proptest::prop_assert_eq!(crc32c(seed, &bytes), crc32c_by_bits(seed, &bytes));
            let (head, tail) = bytes.split_at(cut);
            proptest::prop_assert_eq!(crc32c(crc32c(0, head), tail), crc32c(0, &bytes));
        }
    }

    #[test]
    fn header_round_trips_and_damage_is_named() {
        let header = Header {
            generation: 7,
            base_seq: 41,
            base_id: 0xdead_beef,
            policy: "static".to_string(),
        };
        let bytes = header.encode();
        assert_eq!(Header::decode(&bytes), Ok(header));
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert!(Header::decode(&bad).expect_err("crc").contains("checksum"));
        assert!(Header::decode(b"short")
            .expect_err("short")
            .contains("too short"));
        let mut other = bytes;
        other[..8].copy_from_slice(b"NOTMAGIC");
        assert!(Header::decode(&other).expect_err("magic").contains("magic"));
    }

    #[test]
    fn frames_round_trip_and_are_bound_to_their_generation() {
        let record = Record::SetDefault {
            cpus: CpuSet::from_iter([0, 1]),
        };
        let mut out = vec![0; 8];
        let len = encode_frame(&mut out, 3, 10, EntryRef::Record(&record));
        let entry = Entry::Record(record);
        assert_eq!(out.len() % 8, 0);
        assert_eq!(out.len(), 8 + frame_size(len));
        let frame = decode_frame(&out, 8, 3, Some(10), 0).expect("valid");
        assert_eq!((frame.seq, frame.commit, &frame.entry), (10, false, &entry));
        mark_commit(&mut out[8..], 3);
        assert!(decode_frame(&out, 8, 3, Some(10), 0).expect("valid").commit);
        assert!(
            decode_frame(&out, 8, 4, Some(10), 0).is_err(),
            "other generation"
        );
        assert!(
            decode_frame(&out, 8, 3, Some(11), 0).is_err(),
            "other sequence"
        );
        assert!(decode_frame(&out, 8, 3, None, 10).is_err(), "not after 10");
        assert!(decode_frame(&out, 8, 3, None, 9).is_ok());
    }

    #[test]
    fn checkpoint_identity_is_the_content() {
        assert_eq!(checkpoint_id(None), 0);
        assert_ne!(checkpoint_id(Some(b"a")), checkpoint_id(Some(b"b")));
        assert_eq!(checkpoint_id(Some(b"a")), checkpoint_id(Some(b"a")));
        assert_ne!(checkpoint_id(Some(b"")), 0);
    }
}
