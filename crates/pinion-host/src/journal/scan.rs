//! Reading a journal back (pure: bytes in, findings out): which frames
//! count, what is torn or damaged, and which records replay on which
//! checkpoint. The rules are in `docs/checkpoint-format.md` ("Recovery").

use pinion_core::record::Record;

use super::format::{decode_frame, is_zero_header, Entry, Frame, Header, DATA_START, FRAME_MAGIC};

/// What the end of the log looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// The log ends after a complete batch (zeros or the end of the file follow).
    Clean,
    /// The last batch never completed (no commit frame, or a frame of it is
    /// cut or garbled): it was never acknowledged, and none of its frames
    /// is used. `dropped` are its frames that were still readable.
    Torn {
        offset: u64,
        reason: String,
        dropped: Vec<Frame>,
    },
    /// Bytes inside a batch that later batches followed are damaged: that
    /// batch was flushed, so acknowledged decisions are in or after the
    /// damage. The log is used up to the last complete batch before it;
    /// `after` are the readable frames from that point on, not used.
    Damaged {
        offset: u64,
        reason: String,
        after: Vec<Frame>,
    },
}

/// A journal file read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub header: Header,
    /// The frames of complete batches, in order: what recovery uses.
    pub frames: Vec<Frame>,
    /// Where the next frame goes: right after the last used frame.
    pub end: u64,
    /// Just past the last non-zero byte of the file (at least `end`): the
    /// bytes between `end` and here must be erased before the log grows.
    pub dirty_end: u64,
    pub tail: Tail,
}

impl Scan {
    /// The sequence number of the last used frame (the base when none).
    #[must_use]
    pub fn last_seq(&self) -> u64 {
        self.frames.last().map_or(self.header.base_seq, |f| f.seq)
    }
}

/// Reads a journal file's bytes. `Err` says why the header is unreadable
/// (then nothing of the file can be trusted).
pub fn scan(bytes: &[u8]) -> Result<Scan, String> {
    let header = Header::decode(bytes)?;
    let generation = header.generation;
    let mut frames: Vec<Frame> = Vec::new();
    let mut pos = usize::try_from(DATA_START).unwrap_or(usize::MAX);
    let mut expected = header.base_seq + 1;
    let mut stop_reason = None;
    while pos < bytes.len() {
        if is_zero_header(bytes, pos) {
            break;
        }
        match decode_frame(bytes, pos, generation, Some(expected), 0) {
            Ok(frame) => {
                pos += usize::try_from(frame.size).unwrap_or(usize::MAX);
                expected += 1;
                frames.push(frame);
            }
            Err(reason) => {
                stop_reason = Some(reason);
                break;
            }
        }
    }
    let committed = frames.iter().rposition(|f| f.commit).map_or(0, |i| i + 1);
    let mut unfinished = frames.split_off(committed);
    let later = resync(bytes, pos + 8, generation, expected - 1);
    let end = frames.last().map_or(DATA_START, |f| f.offset + f.size);
    let dirty_end = nonzero_end(bytes).max(end);
    let offset_of = |unfinished: &[Frame]| unfinished.first().map_or(pos as u64, |f| f.offset);
    let tail = if later.is_empty() && unfinished.is_empty() && stop_reason.is_none() {
        Tail::Clean
    } else if later_batch_follows(&later) {
        let offset = offset_of(&unfinished);
        unfinished.extend(later);
        Tail::Damaged {
            offset,
            reason: stop_reason.unwrap_or_else(|| format!("zeroed bytes at offset {pos}")),
            after: unfinished,
        }
    } else {
        let offset = offset_of(&unfinished);
        let reason =
            stop_reason.unwrap_or_else(|| "the last batch has no commit frame".to_string());
        unfinished.extend(later);
        Tail::Torn {
            offset,
            reason,
            dropped: unfinished,
        }
    };
    Ok(Scan {
        header,
        frames,
        end,
        dirty_end,
        tail,
    })
}

/// Frames after the damage come from a later batch when a commit frame
/// (the end of the damaged batch) is followed by more frames: that later
/// batch was only written after the damaged one was flushed.
fn later_batch_follows(later: &[Frame]) -> bool {
    later
        .iter()
        .position(|f| f.commit)
        .is_some_and(|k| k + 1 < later.len())
}

/// Valid frames of this generation after `from`, with rising sequence
/// numbers above `min_seq`, found on 8-byte boundaries.
fn resync(bytes: &[u8], from: usize, generation: u64, mut min_seq: u64) -> Vec<Frame> {
    let mut found = Vec::new();
    let mut pos = from;
    while pos + 24 <= bytes.len() {
        if bytes[pos + 20..pos + 24] == FRAME_MAGIC {
            if let Ok(frame) = decode_frame(bytes, pos, generation, None, min_seq) {
                min_seq = frame.seq;
                pos += usize::try_from(frame.size).unwrap_or(usize::MAX);
                found.push(frame);
                continue;
            }
        }
        pos += 8;
    }
    found
}

fn nonzero_end(bytes: &[u8]) -> u64 {
    let start = usize::try_from(DATA_START).unwrap_or(usize::MAX);
    let end = bytes
        .iter()
        .rposition(|&b| b != 0)
        .filter(|&i| i >= start)
        .map_or(start, |i| (i + 1).div_ceil(8) * 8);
    end as u64
}

/// How the journal relates to the checkpoint beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Basis {
    /// The journal extends this checkpoint: every record replays.
    Checkpoint,
    /// A compaction rewrote the checkpoint (it holds every record up to
    /// `through`) but did not reset the journal yet: later records replay.
    Compaction { through: u64 },
    /// The checkpoint is not one this journal knows (replaced or removed by
    /// kubelet, an operator or `pinion state migrate`): it wins, and the
    /// journal's CPU records are not replayed. Side data still is.
    Superseded { journal_base: u64, checkpoint: u64 },
}

/// What recovery does with a scanned journal and a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub basis: Basis,
    /// The records to apply on the checkpoint, in order.
    pub records: Vec<Record>,
    /// CPU records the checkpoint already holds (not applied again).
    pub skipped: usize,
    /// CPU records not applied because the checkpoint superseded them.
    pub superseded: Vec<(u64, Record)>,
}

/// The records to replay on the checkpoint whose id is `checkpoint_id`:
/// all of them when the journal's base is that checkpoint; those after the
/// last compaction marker naming it otherwise; none (but the side data)
/// when no marker names it. See [`Basis`].
#[must_use]
pub fn plan_replay(scan: &Scan, checkpoint_id: u64) -> Replay {
    let basis = if scan.header.base_id == checkpoint_id {
        Basis::Checkpoint
    } else {
        let marker = scan
            .frames
            .iter()
            .rev()
            .find_map(|frame| match frame.entry {
                Entry::Compaction {
                    checkpoint_id: id,
                    through,
                } if id == checkpoint_id => Some(through),
                _ => None,
            });
        match marker {
            Some(through) => Basis::Compaction { through },
            None => Basis::Superseded {
                journal_base: scan.header.base_id,
                checkpoint: checkpoint_id,
            },
        }
    };
    let mut replay = Replay {
        basis,
        records: Vec::new(),
        skipped: 0,
        superseded: Vec::new(),
    };
    for frame in &scan.frames {
        let Entry::Record(record) = &frame.entry else {
            continue;
        };
        let applies = !record.touches_state()
            || match replay.basis {
                Basis::Checkpoint => true,
                Basis::Compaction { through } => frame.seq > through,
                Basis::Superseded { .. } => false,
            };
        if applies {
            replay.records.push(record.clone());
        } else if matches!(replay.basis, Basis::Superseded { .. }) {
            replay.superseded.push((frame.seq, record.clone()));
        } else {
            replay.skipped += 1;
        }
    }
    replay
}
