//! A read-only view of a state directory's checkpoint and journal, for
//! `pinion state inspect` and the `verify`/`migrate` commands.

use std::io::Read as _;
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

impl Inspection {
    /// Why the agent would not replay the journal to its end (its header
    /// unreadable, its last batch incomplete, damage inside it), or `None`
    /// when it would (or there is none). The agent then sets it aside and
    /// rebuilds the state from the node ([`super::Recovery::incomplete`]).
    #[must_use]
    pub fn not_replayable(&self) -> Option<String> {
        match self.journal.as_ref()? {
            Err(why) => Some(format!("cannot be read ({why})")),
            Ok(view) => match &view.scan.tail {
                scan::Tail::Clean => None,
                scan::Tail::Torn { offset, reason, .. } => Some(format!(
                    "ends in an incomplete batch at offset {offset} ({reason})"
                )),
                scan::Tail::Damaged { offset, reason, .. } => {
                    Some(format!("is damaged at offset {offset} ({reason})"))
                }
            },
        }
    }
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

/// The most the state tools (`pinion state inspect|verify|migrate`) read of
/// a checkpoint or journal: 64 MiB. A journal is preallocated to 1 MiB and
/// compacted at 768 KiB or 1024 records ([`super::JournalOptions`]); only a
/// compaction failing again and again lets it grow, by a threshold's worth
/// per failure ([`super::CompactionBackoff`]) — 64 MiB is some eighty of
/// them. A checkpoint of thousands of containers is a few hundred KiB. The
/// cap bounds what an endless stream given on standard input by mistake
/// takes; a path that is not a regular file (a device, a FIFO) is refused
/// before anything is read.
pub const MAX_STATE_FILE_BYTES: u64 = 64 << 20;

/// The bytes of `path`, at most [`MAX_STATE_FILE_BYTES`]: a longer file is
/// an error of kind `FileTooLarge` naming the cap (the caller names the
/// file); reads one byte past the cap to tell "exactly" from "more".
pub fn read_state_file(path: &Path) -> std::io::Result<Vec<u8>> {
    read_capped(
        crate::bounded_read::open_regular(path)?,
        MAX_STATE_FILE_BYTES,
    )
}

/// The bytes of `reader` (standard input), at most [`MAX_STATE_FILE_BYTES`],
/// as [`read_state_file`] reads a file.
pub fn read_state_stream(reader: impl std::io::Read) -> std::io::Result<Vec<u8>> {
    read_capped(reader, MAX_STATE_FILE_BYTES)
}

fn read_capped(reader: impl std::io::Read, cap: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).map_or(true, |len| len > cap) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("larger than the {} MiB cap ({cap} bytes)", cap >> 20),
        ));
    }
    Ok(bytes)
}

fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, JournalError> {
    match read_state_file(path) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regression_state_files_were_read_without_a_cap() {
        assert_eq!(read_capped(&b"0123"[..], 4).expect("at the cap"), b"0123");
        let over = read_capped(&b"01234"[..], 4).expect_err("over the cap");
        assert_eq!(over.kind(), std::io::ErrorKind::FileTooLarge);
        let endless = read_capped(std::io::repeat(0), MAX_STATE_FILE_BYTES).expect_err("endless");
        assert_eq!(
            endless.to_string(),
            "larger than the 64 MiB cap (67108864 bytes)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = dir.path().join(JOURNAL);
        std::fs::write(&journal, b"x").expect("write");
        std::fs::File::options()
            .write(true)
            .open(&journal)
            .and_then(|f| f.set_len(MAX_STATE_FILE_BYTES + 1))
            .expect("a sparse journal past the cap");
        let err = inspect(dir.path()).expect_err("too large");
        let text = err.to_string();
        assert!(text.contains(&journal.display().to_string()), "{text}");
        assert!(text.contains("64 MiB cap"), "{text}");
    }
}
