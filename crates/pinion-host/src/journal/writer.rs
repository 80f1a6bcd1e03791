//! Appending to a journal file: frames are encoded into memory by `append`
//! and written with one `write` + one `fdatasync` by `flush`; a fresh,
//! preallocated journal is made by `create`.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use pinion_core::record::{Record, SideData};

use super::format::{encode_frame, mark_commit, EntryRef, Header, DATA_START, MAX_PAYLOAD};
use super::{JournalError, JournalOp};
use crate::durable::{self, temp_name};
use crate::fileops::{write_all_at, FileOps};

/// The largest batch buffer kept for the next batch: an admission's batch
/// is about a kilobyte; a batch of large plugin answers is not kept.
const KEPT_BATCH_CAPACITY: usize = 64 * 1024;

/// What a successful flush made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Frames written by this flush (0: there was nothing to flush).
    pub records: usize,
    /// The last durable sequence number.
    pub last_seq: u64,
}

/// An open journal being appended to.
#[derive(Debug)]
pub(crate) struct Writer {
    pub(crate) path: PathBuf,
    file: File,
    pub(crate) generation: u64,
    /// Where the next batch goes.
    pub(crate) write_pos: u64,
    /// Bytes from `write_pos` up to here may hold stale frames (a torn
    /// tail, a failed flush); the next flush overwrites them with zeros.
    pub(crate) dirty_end: u64,
    /// The last durable sequence number.
    pub(crate) durable_seq: u64,
    /// Decision records in the file (since its base).
    pub(crate) records: usize,
    /// The batch being encoded. Its buffer is kept from one flush to the
    /// next (up to [`KEPT_BATCH_CAPACITY`]), so a batch is encoded without
    /// growing a fresh buffer frame by frame.
    pending: Vec<u8>,
    pending_frames: usize,
    pending_records: usize,
    last_frame: usize,
    /// The directory whose `fsync` failed after this file was renamed into
    /// it ([`Writer::create`]): the next flush syncs it before it calls its
    /// batch durable.
    dir_unsynced: Option<PathBuf>,
}

impl Writer {
    /// Opens an existing journal to append at `write_pos`.
    pub(crate) fn open(
        path: &Path,
        generation: u64,
        write_pos: u64,
        dirty_end: u64,
        durable_seq: u64,
        records: usize,
    ) -> Result<Writer, JournalError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| JournalError::Io {
                op: JournalOp::Open,
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Writer {
            path: path.to_path_buf(),
            file,
            generation,
            write_pos,
            dirty_end: dirty_end.max(write_pos),
            durable_seq,
            records,
            pending: Vec::new(),
            pending_frames: 0,
            pending_records: 0,
            last_frame: 0,
            dir_unsynced: None,
        })
    }

    /// Creates a fresh journal at `dir/name` atomically: header, one frame
    /// per side-data entry (so side data survives the reset), zeros up to
    /// `capacity` — written to a temp file, fsynced, renamed over the old
    /// journal, directory fsynced. Returns the writer of the new file.
    pub(crate) fn create(
        ops: &mut dyn FileOps,
        dir: &Path,
        name: &str,
        header: &Header,
        side: &SideData,
        capacity: u64,
    ) -> Result<Writer, JournalError> {
        let temp = dir.join(temp_name(name));
        let path = dir.join(name);
        let mut bytes = header.encode();
        bytes.resize(usize::try_from(DATA_START).unwrap_or(usize::MAX), 0);
        let mut seq = header.base_seq;
        let mut last_frame = None;
        for (kind, entries) in side {
            for (key, value) in entries {
                seq += 1;
                last_frame = Some(bytes.len());
                let record = Record::Side {
                    kind: kind.clone(),
                    key: key.clone(),
                    value: Some(value.clone()),
                };
                encode_frame(
                    &mut bytes,
                    header.generation,
                    seq,
                    EntryRef::Record(&record),
                );
            }
        }
        if let Some(at) = last_frame {
            mark_commit(&mut bytes[at..], header.generation);
        }
        let write_pos = bytes.len() as u64;
        bytes.resize(
            bytes
                .len()
                .max(usize::try_from(capacity).unwrap_or(usize::MAX)),
            0,
        );
        let file = durable::create_exclusive(&temp)?;
        let io = |op: JournalOp, at: &Path| {
            let at = at.to_path_buf();
            move |source| JournalError::Io {
                op,
                path: at,
                source,
            }
        };
        let written = write_all_at(ops, &file, &temp, &bytes, 0)
            .map_err(io(JournalOp::Create { bytes: bytes.len() }, &temp))
            .and_then(|()| {
                ops.sync_all(&file, &temp)
                    .map_err(io(JournalOp::SyncAll, &temp))
            })
            .and_then(|()| {
                ops.rename(&temp, &path)
                    .map_err(io(JournalOp::Rename, &temp))
            });
        if let Err(err) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(err);
        }
        // Renamed: this file is the journal now, whatever the directory's
        // sync says. Failing here would leave the caller appending to the
        // file it replaced, unlinked (every later batch lost at the next
        // start); the first flush syncs the directory instead.
        let dir_unsynced = ops.sync_dir(dir).err().map(|_| dir.to_path_buf());
        Ok(Writer {
            path,
            file,
            generation: header.generation,
            write_pos,
            dirty_end: write_pos,
            durable_seq: seq,
            records: 0,
            pending: Vec::new(),
            pending_frames: 0,
            pending_records: 0,
            last_frame: 0,
            dir_unsynced,
        })
    }

    /// Frames appended but not flushed.
    pub(crate) fn pending(&self) -> usize {
        self.pending_frames
    }

    /// Encodes `entry` into the pending batch; returns its sequence number.
    pub(crate) fn append(&mut self, entry: EntryRef<'_>) -> Result<u64, JournalError> {
        let seq = self.durable_seq + self.pending_frames as u64 + 1;
        let at = self.pending.len();
        let len = encode_frame(&mut self.pending, self.generation, seq, entry);
        if len > MAX_PAYLOAD {
            self.pending.truncate(at);
            return Err(JournalError::TooLarge {
                bytes: len,
                limit: MAX_PAYLOAD,
            });
        }
        self.last_frame = at;
        self.pending_frames += 1;
        if matches!(entry, EntryRef::Record(_)) {
            self.pending_records += 1;
        }
        Ok(seq)
    }

    /// Drops the pending batch; returns how many frames it had.
    pub(crate) fn discard(&mut self) -> usize {
        let dropped = self.pending_frames;
        self.pending.clear();
        self.pending_frames = 0;
        self.pending_records = 0;
        dropped
    }

    /// Writes the pending batch (its last frame marked as the commit) and
    /// zeros over any stale bytes after it, then one `fdatasync`. On failure
    /// the batch is dropped, the stale range remembered (and erased now if
    /// the file lets us), and the error names the batch.
    pub(crate) fn flush(&mut self, ops: &mut dyn FileOps) -> Result<Flushed, JournalError> {
        if self.pending_frames == 0 {
            return Ok(Flushed {
                records: 0,
                last_seq: self.durable_seq,
            });
        }
        mark_commit(&mut self.pending[self.last_frame..], self.generation);
        let batch_len = self.pending.len() as u64;
        let stale = self.dirty_end.saturating_sub(self.write_pos + batch_len);
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.resize(bytes.len() + usize::try_from(stale).unwrap_or(0), 0);
        let first = self.durable_seq + 1;
        let last = self.durable_seq + self.pending_frames as u64;
        let op = JournalOp::Write {
            offset: self.write_pos,
            bytes: bytes.len(),
            first_seq: first,
            last_seq: last,
        };
        let result = write_all_at(ops, &self.file, &self.path, &bytes, self.write_pos)
            .map_err(|source| (op, source))
            .and_then(|()| {
                ops.sync_data(&self.file, &self.path).map_err(|source| {
                    (
                        JournalOp::SyncData {
                            first_seq: first,
                            last_seq: last,
                        },
                        source,
                    )
                })
            })
            .and_then(|()| match &self.dir_unsynced {
                Some(dir) => ops
                    .sync_dir(dir)
                    .map_err(|source| (JournalOp::SyncDir, source)),
                None => Ok(()),
            });
        let frames = self.pending_frames;
        let records = self.pending_records;
        self.pending_frames = 0;
        self.pending_records = 0;
        let written = bytes.len() as u64;
        bytes.clear();
        if bytes.capacity() <= KEPT_BATCH_CAPACITY {
            self.pending = bytes;
        }
        match result {
            Ok(()) => {
                self.dir_unsynced = None;
                self.records += records;
                self.write_pos += batch_len;
                self.dirty_end = self.write_pos;
                self.durable_seq = last;
                Ok(Flushed {
                    records: frames,
                    last_seq: last,
                })
            }
            Err((op, source)) => {
                self.dirty_end = self.dirty_end.max(self.write_pos + written);
                self.erase_stale(ops);
                Err(JournalError::Io {
                    op,
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }

    /// Overwrites `write_pos..dirty_end` with zeros and syncs; on success
    /// nothing stale is left. Best effort: on failure the next flush tries.
    pub(crate) fn erase_stale(&mut self, ops: &mut dyn FileOps) -> bool {
        if self.dirty_end <= self.write_pos {
            return true;
        }
        let zeros = vec![0u8; usize::try_from(self.dirty_end - self.write_pos).unwrap_or(0)];
        let erased = write_all_at(ops, &self.file, &self.path, &zeros, self.write_pos)
            .and_then(|()| ops.sync_data(&self.file, &self.path))
            .is_ok();
        if erased {
            self.dirty_end = self.write_pos;
        }
        erased
    }
}
