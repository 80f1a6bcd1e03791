//! The state store with a journal: kubelet's `cpu_manager_state` plus
//! `pinion_journal`, a preallocated log of decision records beside it.
//!
//! * [`StateStore::record`] encodes a decision record into memory (no I/O);
//!   [`StateStore::flush`] writes every record since the last flush with one
//!   `write` and one `fdatasync` — the only I/O on the admission path. A
//!   caller acknowledges a decision only after the flush that holds it
//!   returned `Ok`; a failed flush drops its batch (the caller rolls back).
//! * [`StateStore::compact`], off the admission path, rewrites the checkpoint
//!   atomically from the caller's state and starts a fresh journal.
//! * [`StateStore::open`] = the checkpoint + the journal's complete batches
//!   replayed ([`Opened`]); an incomplete last batch is not replayed and
//!   damage in the middle keeps the consistent prefix — in both cases a copy
//!   of the file is kept and [`Recovery::incomplete`] tells the caller to
//!   rebuild from the node; a checkpoint replaced by someone else wins — all
//!   reported in [`Recovery`], never a refusal.
//! * Before an open cuts or sets aside a journal it could not replay to its
//!   end, it writes [`INCOMPLETE_MARK`]: until the caller has made the state
//!   rebuilt from the node durable ([`StateStore::rebuild_recorded`]),
//!   every open reports the journal incomplete again, so a start that fails
//!   after the cut (a refused configuration, an I/O error, a kill) does not
//!   leave the next one a clean journal without the lost decisions.
//!
//! File format, compaction order and recovery rules: `docs/checkpoint-format.md`
//! ("The journal"); the reasoning: `docs/design.md` ("The journal").

pub mod format;
mod inspect;
mod recovery;
pub mod scan;
mod unreadable;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use pinion_core::checkpoint::{self, Checkpoint, CheckpointError};
use pinion_core::record::{self, checkpoint_entries, Record, SideData};
use pinion_core::state::State;

use crate::durable::{self, DurableError};
use crate::fileops::{FileOps, OsFiles};
use crate::store::CPU_MANAGER_STATE;
use format::{checkpoint_id, Entry, EntryRef, Header};
use scan::{plan_replay, Basis, Scan, Tail};

pub use inspect::{
    inspect, inspect_paths, is_journal, read_state_file, read_state_stream, Inspection,
    JournalView, MAX_STATE_FILE_BYTES,
};
pub use recovery::{Damage, Recovery, Superseded, TornTail, Unreplayable};
pub use unreadable::{set_aside_unreadable, SetAside};
pub use writer::Flushed;

/// The journal's file name in the state directory.
pub const JOURNAL: &str = "pinion_journal";

/// The file that says an open found the journal incomplete (its text: why)
/// and the state rebuilt from the node is not durable yet; see the module
/// documentation.
pub const INCOMPLETE_MARK: &str = "pinion_journal.rebuild-due";

/// The most of [`INCOMPLETE_MARK`] that is read (a longer one is cut).
const MAX_MARK_BYTES: u64 = 4096;

/// Errors of the journaled store. Each names the file and the operation;
/// writes name the records (sequence numbers) and bytes.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(transparent)]
    Durable(#[from] DurableError),
    #[error("{op} journal {}: {source}", .path.display())]
    Io {
        op: JournalOp,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("checkpoint {} is unusable and was left untouched: {source}", .path.display())]
    CorruptCheckpoint {
        path: PathBuf,
        source: CheckpointError,
    },
    #[error("a record of {bytes} bytes is larger than the journal's limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    #[error("compaction needs every record flushed or discarded first ({pending} pending)")]
    Pending { pending: usize },
}

/// The operation a [`JournalError::Io`] failed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalOp {
    Open,
    /// Writing a new journal file of this many bytes.
    Create {
        bytes: usize,
    },
    /// Writing a batch: records `first_seq..=last_seq`, `bytes` bytes at `offset`.
    Write {
        offset: u64,
        bytes: usize,
        first_seq: u64,
        last_seq: u64,
    },
    /// `fdatasync` of a batch's records.
    SyncData {
        first_seq: u64,
        last_seq: u64,
    },
    SyncAll,
    Rename,
    SyncDir,
    /// Removing [`INCOMPLETE_MARK`].
    RemoveMark,
}

impl std::fmt::Display for JournalOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            JournalOp::Open => f.write_str("open"),
            JournalOp::Create { bytes } => write!(f, "write {bytes} bytes of a new"),
            JournalOp::Write {
                offset,
                bytes,
                first_seq,
                last_seq,
            } => write!(
                f,
                "write records {first_seq}-{last_seq} ({bytes} bytes at offset {offset}) to"
            ),
            JournalOp::SyncData {
                first_seq,
                last_seq,
            } => write!(f, "fdatasync records {first_seq}-{last_seq} of"),
            JournalOp::SyncAll => f.write_str("fsync new"),
            JournalOp::Rename => f.write_str("rename new"),
            JournalOp::SyncDir => f.write_str("fsync the directory of new"),
            JournalOp::RemoveMark => f.write_str("remove"),
        }
    }
}

/// Sizes and thresholds of the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalOptions {
    /// Bytes written (zeros) when a journal is created, so that appends
    /// overwrite allocated blocks and `fdatasync` has no metadata to write.
    /// The file grows past it if needed.
    pub capacity: u64,
    /// [`StateStore::should_compact`] after this many records…
    pub compact_after_records: usize,
    /// …or once the log reaches this many bytes.
    pub compact_after_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            capacity: 1 << 20,
            compact_after_records: 1024,
            compact_after_bytes: 3 << 18,
        }
    }
}

/// After a failed compaction, when the next one is due: the journal must
/// first grow by another threshold's worth ([`JournalOptions`]), so that a
/// lasting failure (a full disk) costs one attempt — a compaction marker
/// flushed, a checkpoint write failing — per threshold, not one per batch.
/// The caller's timer backs off from [`CompactionBackoff::since`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionBackoff {
    /// When the compaction failed.
    pub since: std::time::Instant,
    /// Failed compactions in a row.
    pub failures: u64,
    /// [`StateStore::should_compact`] is due again once the journal holds
    /// this many records…
    pub due_records: usize,
    /// …or this many bytes.
    pub due_bytes: u64,
}

/// The result of [`StateStore::open`].
#[derive(Debug)]
pub struct Opened {
    pub store: StateStore,
    /// The state to start from: the checkpoint with the journal's records
    /// replayed (`None`: no state anywhere, a first start). Give it to
    /// `pinion_core::restore::restore` as before.
    pub checkpoint: Option<Checkpoint>,
    /// Side data replayed from the journal.
    pub side: SideData,
    pub recovery: Recovery,
}

/// kubelet's checkpoint plus Pinion's journal; see the module documentation.
pub struct StateStore {
    dir: PathBuf,
    policy: String,
    ops: Box<dyn FileOps>,
    options: JournalOptions,
    writer: writer::Writer,
    /// [`checkpoint_id`] of the checkpoint file on disk.
    checkpoint_id: u64,
    /// Set by a failed compaction, cleared by a successful one.
    backoff: Option<CompactionBackoff>,
    /// [`INCOMPLETE_MARK`] is on disk.
    marked: bool,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("dir", &self.dir)
            .field("policy", &self.policy)
            .field("last_seq", &self.writer.durable_seq)
            .finish_non_exhaustive()
    }
}

/// A checkpoint file read with its raw bytes.
struct CheckpointFile {
    bytes: Option<Vec<u8>>,
    checkpoint: Option<Checkpoint>,
}

/// The text of `dir`'s [`INCOMPLETE_MARK`]: why an earlier open found the
/// journal incomplete (`None`: there is no mark). One that is too long is
/// not read, one that is no text is read lossily: its presence is what
/// counts.
pub fn rebuild_due(dir: &Path) -> Result<Option<String>, JournalError> {
    let text = match durable::read_optional_at_most(dir, INCOMPLETE_MARK, MAX_MARK_BYTES)? {
        None => return Ok(None),
        Some(durable::Contents::Bytes(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Some(durable::Contents::TooLarge { size }) => {
            format!("(its mark of {size} bytes is too long to read)")
        }
    };
    let text = text.trim();
    Ok(Some(if text.is_empty() {
        "(its mark gives no reason)".to_string()
    } else {
        text.to_string()
    }))
}

fn read_checkpoint(dir: &Path) -> Result<CheckpointFile, JournalError> {
    let corrupt = |source| JournalError::CorruptCheckpoint {
        path: dir.join(CPU_MANAGER_STATE),
        source,
    };
    let bytes = match crate::store::read_checkpoint_bytes(dir, CPU_MANAGER_STATE)? {
        None => None,
        Some(read) => Some(read.map_err(corrupt)?),
    };
    let checkpoint = match &bytes {
        None => None,
        Some(bytes) => Some(checkpoint::decode_verified(bytes).map_err(corrupt)?),
    };
    Ok(CheckpointFile { bytes, checkpoint })
}

impl StateStore {
    /// Opens the state in `dir` with the real file system and default
    /// options; `policy` is the configured policy name (written into new
    /// journals and compacted checkpoints). See [`StateStore::open_with`].
    pub fn open(dir: &Path, policy: &str) -> Result<Opened, JournalError> {
        StateStore::open_with(dir, policy, Box::new(OsFiles), JournalOptions::default())
    }

    /// Opens the state in `dir`: removes temp files of crashed writes, reads
    /// the checkpoint (a corrupt one is an error and left untouched, as
    /// with `CheckpointStore`), reads the journal and replays its complete
    /// batches (rules in `docs/checkpoint-format.md`). Journal problems are
    /// never an error: an incomplete tail is copied aside, not replayed and
    /// erased, a damaged journal is copied aside and cut at the damage, a superseded or unreadable one
    /// is moved aside and a new one started — all reported in
    /// [`Opened::recovery`].
    pub fn open_with(
        dir: &Path,
        policy: &str,
        ops: Box<dyn FileOps>,
        options: JournalOptions,
    ) -> Result<Opened, JournalError> {
        durable::remove_stale_temp(dir, CPU_MANAGER_STATE)?;
        durable::remove_stale_temp(dir, JOURNAL)?;
        durable::remove_stale_temp(dir, INCOMPLETE_MARK)?;
        let earlier = rebuild_due(dir)?;
        let file = read_checkpoint(dir)?;
        let id = checkpoint_id(file.bytes.as_deref());
        let mut recovery = Recovery {
            journal: dir.join(JOURNAL),
            created: false,
            replayed: 0,
            skipped: 0,
            last_seq: 0,
            torn: None,
            damage: None,
            superseded: None,
            unreplayable: None,
            earlier: earlier.clone(),
        };
        let mut opening = Opening {
            earlier,
            dir,
            policy,
            ops,
            options,
            checkpoint_id: id,
        };
        // Never more than any journal can be: a damaged size (a sparse file
        // of terabytes) is not read, and counts as an unreadable journal.
        let (journal, scanned) =
            match durable::read_optional_at_most(dir, JOURNAL, MAX_STATE_FILE_BYTES)? {
                None => (None, None),
                Some(durable::Contents::Bytes(bytes)) => {
                    let scanned = scan::scan(&bytes);
                    (Some(bytes), Some(scanned))
                }
                Some(durable::Contents::TooLarge { size }) => (
                    None,
                    Some(Err(format!(
                        "{size} bytes, more than the {MAX_STATE_FILE_BYTES} bytes a journal may have: not read"
                    ))),
                ),
            };
        let (writer, checkpoint, side) = match scanned {
            None => {
                recovery.created = true;
                let writer = opening.fresh(1, 0, &SideData::new())?;
                (writer, file.checkpoint, SideData::new())
            }
            Some(Err(reason)) => {
                opening.mark(&format!(
                    "journal {} is damaged at offset 0 ({reason})",
                    dir.join(JOURNAL).display()
                ))?;
                let aside = durable::move_aside_as(dir, JOURNAL, "damaged")?;
                recovery.damage = Some(Damage {
                    offset: 0,
                    reason,
                    last_good_seq: 0,
                    dropped: Vec::new(),
                    aside,
                });
                let writer = opening.fresh(1, 0, &SideData::new())?;
                (writer, file.checkpoint, SideData::new())
            }
            Some(Ok(scan)) => {
                let bytes = journal.as_deref().unwrap_or_default();
                opening.replay(&scan, bytes, file.checkpoint.as_ref(), &mut recovery)?
            }
        };
        recovery.last_seq = writer.durable_seq;
        let Opening {
            ops,
            options,
            checkpoint_id,
            earlier,
            ..
        } = opening;
        let store = StateStore {
            dir: dir.to_path_buf(),
            policy: policy.to_string(),
            ops,
            options,
            writer,
            checkpoint_id,
            backoff: None,
            marked: earlier.is_some(),
        };
        Ok(Opened {
            store,
            checkpoint,
            side,
            recovery,
        })
    }

    /// Appends a decision record to the pending batch (memory only) and
    /// returns its sequence number. Nothing is durable before [`flush`].
    ///
    /// [`flush`]: StateStore::flush
    pub fn record(&mut self, record: &Record) -> Result<u64, JournalError> {
        self.writer.append(EntryRef::Record(record))
    }

    /// Makes every pending record durable: one write, one `fdatasync`.
    /// `Ok` → the caller may acknowledge the batch's decisions. `Err` → the
    /// batch is dropped (not durable; any bytes of it that reached the file
    /// are erased, now or by the next flush): the caller rolls its state
    /// back to the last durable point and fails the batch's decisions.
    pub fn flush(&mut self) -> Result<Flushed, JournalError> {
        self.writer.flush(self.ops.as_mut())
    }

    /// Drops the pending records (a caller that rolls back before flushing).
    pub fn discard_pending(&mut self) -> usize {
        self.writer.discard()
    }

    /// Records appended but not flushed yet.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.writer.pending()
    }

    /// The last durable sequence number.
    #[must_use]
    pub fn last_seq(&self) -> u64 {
        self.writer.durable_seq
    }

    /// Records in the journal since its last reset.
    #[must_use]
    pub fn records_since_compaction(&self) -> usize {
        self.writer.records
    }

    /// Whether the journal has reached [`JournalOptions`]' thresholds (the
    /// caller adds its own timer: compact after T seconds with records).
    /// After a failed compaction, only once the journal grew by another
    /// threshold's worth ([`StateStore::compaction_backoff`]).
    #[must_use]
    pub fn should_compact(&self) -> bool {
        let (records, bytes) = match &self.backoff {
            Some(backoff) => (backoff.due_records, backoff.due_bytes),
            None => (
                self.options.compact_after_records,
                self.options.compact_after_bytes,
            ),
        };
        self.writer.records >= records || self.writer.write_pos >= bytes
    }

    /// The backoff after the last compaction failed (`None`: it did not).
    #[must_use]
    pub fn compaction_backoff(&self) -> Option<CompactionBackoff> {
        self.backoff
    }

    /// Rewrites the checkpoint from `state` (kubelet's bytes, the configured
    /// policy name) and starts a fresh journal holding `side`. `state` and
    /// `side` must be the caller's state after every flushed record (no
    /// pending records: [`JournalError::Pending`]). Crash-safe at every
    /// step: (1) a compaction marker naming the new checkpoint is flushed to
    /// the journal, (2) the checkpoint is replaced atomically, (3) a new
    /// journal based on it is renamed over the old one. A failure loses
    /// nothing (every record is still in the journal): log it and compact
    /// again later; appends continue meanwhile. A failure also backs
    /// [`StateStore::should_compact`] off ([`CompactionBackoff`]).
    pub fn compact(&mut self, state: &State, side: &SideData) -> Result<(), JournalError> {
        if self.writer.pending() > 0 {
            return Err(JournalError::Pending {
                pending: self.writer.pending(),
            });
        }
        let result = self.compact_now(state, side);
        self.backoff = match result {
            Ok(()) => None,
            Err(_) => Some(CompactionBackoff {
                since: std::time::Instant::now(),
                failures: self.backoff.map_or(1, |b| b.failures + 1),
                due_records: self
                    .writer
                    .records
                    .saturating_add(self.options.compact_after_records),
                due_bytes: self
                    .writer
                    .write_pos
                    .saturating_add(self.options.compact_after_bytes),
            }),
        };
        result
    }

    /// [`StateStore::compact`]'s steps.
    fn compact_now(&mut self, state: &State, side: &SideData) -> Result<(), JournalError> {
        let bytes = checkpoint::encode(
            &self.policy,
            &state.default.to_string(),
            &checkpoint_entries(state),
        );
        let id = checkpoint_id(Some(&bytes));
        if id != self.checkpoint_id {
            let through = self.writer.durable_seq;
            self.writer.append(EntryRef::Compaction {
                checkpoint_id: id,
                through,
            })?;
            self.writer.flush(self.ops.as_mut())?;
            let mut renamed = false;
            let written = durable::write_atomic_using(
                self.ops.as_mut(),
                &self.dir,
                CPU_MANAGER_STATE,
                &bytes,
                &mut |step| renamed |= step == durable::WriteStep::Renamed,
            );
            // Once renamed, the file is the new checkpoint even when the
            // directory's sync failed: a later compaction to the old
            // state must write it again, not take it for the one on disk.
            if renamed {
                self.checkpoint_id = id;
            }
            written?;
        }
        let header = Header {
            generation: self.writer.generation + 1,
            base_seq: self.writer.durable_seq,
            base_id: id,
            policy: self.policy.clone(),
        };
        self.writer = writer::Writer::create(
            self.ops.as_mut(),
            &self.dir,
            JOURNAL,
            &header,
            side,
            self.options.capacity,
        )?;
        Ok(())
    }

    /// The caller made the state it rebuilt from the node durable (after
    /// [`Recovery::incomplete`]): [`INCOMPLETE_MARK`] is removed, and the
    /// next open takes the journal as it reads. Nothing to do when there is
    /// no mark.
    pub fn rebuild_recorded(&mut self) -> Result<(), JournalError> {
        if !self.marked {
            return Ok(());
        }
        let path = self.dir.join(INCOMPLETE_MARK);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(JournalError::Io {
                    op: JournalOp::RemoveMark,
                    path,
                    source,
                })
            }
        }
        self.ops
            .sync_dir(&self.dir)
            .map_err(|source| JournalError::Io {
                op: JournalOp::SyncDir,
                path: self.dir.join(INCOMPLETE_MARK),
                source,
            })?;
        self.marked = false;
        Ok(())
    }

    /// The checkpoint file's path.
    #[must_use]
    pub fn checkpoint_path(&self) -> PathBuf {
        self.dir.join(CPU_MANAGER_STATE)
    }

    /// The journal file's path.
    #[must_use]
    pub fn journal_path(&self) -> PathBuf {
        self.dir.join(JOURNAL)
    }
}

/// The parts of a store being opened.
struct Opening<'a> {
    dir: &'a Path,
    policy: &'a str,
    ops: Box<dyn FileOps>,
    options: JournalOptions,
    checkpoint_id: u64,
    /// The text of [`INCOMPLETE_MARK`] when it is on disk.
    earlier: Option<String>,
}

impl Opening<'_> {
    /// Writes [`INCOMPLETE_MARK`] (durably, before the journal is cut or
    /// set aside) unless an earlier open's is there: its reason is the
    /// first cause, and stays.
    fn mark(&mut self, why: &str) -> Result<(), JournalError> {
        if self.earlier.is_some() {
            return Ok(());
        }
        durable::write_atomic_using(
            self.ops.as_mut(),
            self.dir,
            INCOMPLETE_MARK,
            why.as_bytes(),
            &mut |_| {},
        )?;
        self.earlier = Some(why.to_string());
        Ok(())
    }

    fn fresh(
        &mut self,
        generation: u64,
        base_seq: u64,
        side: &SideData,
    ) -> Result<writer::Writer, JournalError> {
        let header = Header {
            generation,
            base_seq,
            base_id: self.checkpoint_id,
            policy: self.policy.to_string(),
        };
        writer::Writer::create(
            self.ops.as_mut(),
            self.dir,
            JOURNAL,
            &header,
            side,
            self.options.capacity,
        )
    }

    /// Replays a readable journal on the checkpoint and readies it for
    /// appending (see [`StateStore::open_with`]).
    fn replay(
        &mut self,
        scan: &Scan,
        bytes: &[u8],
        checkpoint: Option<&Checkpoint>,
        recovery: &mut Recovery,
    ) -> Result<(writer::Writer, Option<Checkpoint>, SideData), JournalError> {
        let plan = plan_replay(scan, self.checkpoint_id);
        let mut side = SideData::new();
        record::replay(&plan.records, &mut State::default(), &mut side);
        let effective =
            match record::replay_onto_checkpoint(checkpoint, &scan.header.policy, &plan.records) {
                Ok(effective) => effective,
                Err(source) => {
                    // Never a start refused for ever: the journal is kept,
                    // and the caller rebuilds from the node.
                    self.mark(&format!(
                        "the checkpoint cannot take journal {}'s {} records ({source})",
                        self.dir.join(JOURNAL).display(),
                        plan.records.len()
                    ))?;
                    let aside = durable::move_aside_as(self.dir, JOURNAL, "unreplayable")?;
                    recovery.unreplayable = Some(Unreplayable {
                        reason: source.to_string(),
                        records: plan.records.len(),
                        aside,
                    });
                    let writer = self.fresh(scan.header.generation + 1, scan.last_seq(), &side)?;
                    return Ok((writer, checkpoint.cloned(), side));
                }
            };
        recovery.replayed = plan.records.len();
        recovery.skipped = plan.skipped;
        match &scan.tail {
            Tail::Clean => {}
            Tail::Torn {
                offset,
                reason,
                dropped,
            } => {
                // Kept before `erase_stale` below wipes the tail: whether
                // it was acknowledged cannot be told from the file.
                self.mark(&format!(
                    "journal {} ends in an incomplete batch at offset {offset} ({reason})",
                    self.dir.join(JOURNAL).display()
                ))?;
                let kept = durable::keep_bytes(self.dir, JOURNAL, "incomplete", bytes);
                let (aside, aside_error) = match kept {
                    Ok(aside) => (Some(aside), None),
                    Err(err) => (None, Some(err.to_string())),
                };
                recovery.torn = Some(TornTail {
                    offset: *offset,
                    reason: reason.clone(),
                    dropped: dropped.len(),
                    aside,
                    aside_error,
                });
            }
            Tail::Damaged {
                offset,
                reason,
                after,
            } => {
                self.mark(&format!(
                    "journal {} is damaged at offset {offset} ({reason})",
                    self.dir.join(JOURNAL).display()
                ))?;
                let aside = durable::keep_bytes(self.dir, JOURNAL, "damaged", bytes)?;
                recovery.damage = Some(Damage {
                    offset: *offset,
                    reason: reason.clone(),
                    last_good_seq: scan.last_seq(),
                    dropped: records_of(after),
                    aside,
                });
            }
        }
        if let Basis::Superseded {
            journal_base,
            checkpoint: found,
        } = plan.basis
        {
            let aside = durable::move_aside_as(self.dir, JOURNAL, "superseded")?;
            recovery.superseded = Some(Superseded {
                journal_base,
                checkpoint: found,
                dropped: plan.superseded,
                aside,
            });
            let writer = self.fresh(scan.header.generation + 1, scan.last_seq(), &side)?;
            return Ok((writer, checkpoint.cloned(), side));
        }
        let records = scan
            .frames
            .iter()
            .filter(|f| matches!(f.entry, Entry::Record(_)))
            .count();
        let mut writer = writer::Writer::open(
            &self.dir.join(JOURNAL),
            scan.header.generation,
            scan.end,
            scan.dirty_end,
            scan.last_seq(),
            records,
        )?;
        // Erase what follows the last complete batch now, so that a later
        // flush can never be followed by stale frames. If it fails, the
        // first flush erases it.
        writer.erase_stale(self.ops.as_mut());
        Ok((writer, effective, side))
    }
}

fn records_of(frames: &[format::Frame]) -> Vec<(u64, Record)> {
    frames
        .iter()
        .filter_map(|f| match &f.entry {
            Entry::Record(record) => Some((f.seq, record.clone())),
            Entry::Compaction { .. } => None,
        })
        .collect()
}
