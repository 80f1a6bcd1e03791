//! A checkpoint that cannot be read is never the end of the agent: it is
//! set aside (renamed, never overwritten, never deleted) together with the
//! journal that extends it, so the store opens as on a first start and the
//! agent rebuilds the state from what runs.

use std::path::{Path, PathBuf};

use pinion_core::checkpoint::{self, CheckpointError};

use super::{JournalError, JOURNAL};
use crate::durable;
use crate::store::{read_checkpoint_bytes, CPU_MANAGER_STATE};

/// What [`set_aside_unreadable`] did.
#[derive(Debug)]
pub struct SetAside {
    /// Why the checkpoint could not be read.
    pub reason: CheckpointError,
    /// Where the checkpoint now is.
    pub checkpoint: PathBuf,
    /// Where its journal now is, when there was one.
    pub journal: Option<PathBuf>,
}

/// When `dir/cpu_manager_state` exists and does not decode or fails its
/// checksum, renames it to `cpu_manager_state.unreadable-<stamp>-<n>` (the
/// smallest free `n`) and the journal beside it likewise; `None` when the
/// checkpoint is missing or readable (nothing is touched).
pub fn set_aside_unreadable(dir: &Path, stamp: &str) -> Result<Option<SetAside>, JournalError> {
    let Some(bytes) = read_checkpoint_bytes(dir, CPU_MANAGER_STATE)? else {
        return Ok(None);
    };
    let Err(reason) = bytes.and_then(|bytes| checkpoint::decode_verified(&bytes)) else {
        return Ok(None);
    };
    let label = format!("unreadable-{stamp}");
    let checkpoint = durable::move_aside_as(dir, CPU_MANAGER_STATE, &label)?;
    let journal = if dir.join(JOURNAL).exists() {
        Some(durable::move_aside_as(dir, JOURNAL, &label)?)
    } else {
        None
    };
    Ok(Some(SetAside {
        reason,
        checkpoint,
        journal,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_checkpoint_and_its_journal_are_kept_under_new_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(set_aside_unreadable(dir.path(), "1")
            .expect("none")
            .is_none());
        let good = br#"{"policyName":"static","defaultCpuSet":"0-3","checksum":0}"#;
        std::fs::write(dir.path().join(CPU_MANAGER_STATE), good).expect("write");
        assert!(set_aside_unreadable(dir.path(), "1").expect("ok").is_none());
        let torn = &good[..20];
        for round in 1..=2 {
            std::fs::write(dir.path().join(CPU_MANAGER_STATE), torn).expect("write");
            std::fs::write(dir.path().join(JOURNAL), b"journal").expect("write");
            let aside = set_aside_unreadable(dir.path(), "7")
                .expect("ok")
                .expect("set aside");
            let expected = dir
                .path()
                .join(format!("{CPU_MANAGER_STATE}.unreadable-7-{round}"));
            assert_eq!(aside.checkpoint, expected);
            assert_eq!(std::fs::read(&expected).expect("kept"), torn);
            assert!(aside.journal.is_some());
            assert!(!dir.path().join(CPU_MANAGER_STATE).exists());
        }
    }
}
