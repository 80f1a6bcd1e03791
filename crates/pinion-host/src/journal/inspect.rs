//! A read-only view of a state directory's checkpoint and journal, for
//! `pinion state inspect` and the `verify`/`migrate` commands.

use std::path::{Path, PathBuf};

use pinion_core::checkpoint::{self, Checkpoint, CheckpointError};
use pinion_core::record;

use super::format::{self, checkpoint_id};
use super::scan::{self, plan_replay, Scan};
use super::{JournalError, JOURNAL};
use crate::durable::{self, DurableError};
use crate::store::CPU_MANAGER_STATE;

/// What `pinion state inspect` shows of a state directory (read-only).
#[derive(Debug)]
pub struct Inspection {
    pub checkpoint_path: PathBuf,
    /// `None`: no checkpoint file.
    pub checkpoint: Option<Result<Checkpoint, CheckpointError>>,
    pub checkpoint_id: u64,
    pub journal_path: PathBuf,
    /// `None`: no journal; `Err`: its header is unreadable.
    pub journal: Option<Result<JournalView, String>>,
}

/// A scanned journal and how it relates to the checkpoint.
#[derive(Debug)]
pub struct JournalView {
    pub scan: Scan,
    pub replay: scan::Replay,
    /// The checkpoint a restart would start from (replayed), or why the
    /// records cannot be replayed on it.
    pub effective: Result<Option<Checkpoint>, CheckpointError>,
}

/// Reads the checkpoint and journal of `dir` without changing anything.
pub fn inspect(dir: &Path) -> Result<Inspection, JournalError> {
    inspect_paths(&dir.join(CPU_MANAGER_STATE), &dir.join(JOURNAL))
}

/// [`inspect`] of any checkpoint and journal file (e.g. a journal kept
/// aside as `pinion_journal.damaged-1`); a missing file is `None`.
pub fn inspect_paths(
    checkpoint_path: &Path,
    journal_path: &Path,
) -> Result<Inspection, JournalError> {
    let bytes = read_if_present(checkpoint_path)?;
    let id = checkpoint_id(bytes.as_deref());
    let checkpoint = bytes.as_deref().map(checkpoint::decode_verified);
    let journal = read_if_present(journal_path)?.map(|bytes| {
        scan::scan(&bytes).map(|scan| {
            let replay = plan_replay(&scan, id);
            let effective = match &checkpoint {
                Some(Err(err)) => Err(err.clone()),
                Some(Ok(base)) => {
                    record::replay_onto_checkpoint(Some(base), &scan.header.policy, &replay.records)
                }
                None => record::replay_onto_checkpoint(None, &scan.header.policy, &replay.records),
            };
            JournalView {
                scan,
                replay,
                effective,
            }
        })
    });
    Ok(Inspection {
        checkpoint_path: checkpoint_path.to_path_buf(),
        checkpoint,
        checkpoint_id: id,
        journal_path: journal_path.to_path_buf(),
        journal,
    })
}

fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, JournalError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(JournalError::Durable(DurableError::Io {
            op: durable::Op::Read,
            path: path.to_path_buf(),
            source,
        })),
    }
}

/// Whether `bytes` start like a journal file.
#[must_use]
pub fn is_journal(bytes: &[u8]) -> bool {
    bytes.starts_with(&format::MAGIC)
}
