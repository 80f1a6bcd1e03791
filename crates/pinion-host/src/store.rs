//! The checkpoint store: kubelet's `cpu_manager_state` file kept durably.
//!
//! The only way to get a [`CheckpointStore`] (and so to write) is
//! [`CheckpointStore::open`], which reads the existing file first:
//! * missing file → a store and no checkpoint (start fresh);
//! * valid file (checksum verified, or 0 as kubelet accepts) → a store and
//!   the checkpoint;
//! * truncated, garbage or tampered file → [`StoreError::Corrupt`] and no
//!   store: the file is never overwritten silently. To start over the caller
//!   must say so with [`CheckpointStore::move_corrupt_aside`], which renames
//!   the file to `<name>.corrupt-<n>` (kept for inspection), and open again.
//!
//! Opening also removes a temp file a crashed write left behind.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use pinion_core::checkpoint::{self, Checkpoint, CheckpointError, PodEntries};

use crate::durable::{self, DurableError, WriteStep};

/// kubelet's file name for the CPU manager checkpoint.
pub const CPU_MANAGER_STATE: &str = "cpu_manager_state";

/// Errors of the checkpoint store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Io(#[from] DurableError),
    #[error(
        "checkpoint {} is unusable and was left untouched: {source}",
        .path.display()
    )]
    Corrupt {
        path: PathBuf,
        source: CheckpointError,
    },
}

/// The bytes of checkpoint file `dir/name`: `None` when there is none, an
/// error when it is larger than any checkpoint
/// ([`checkpoint::MAX_CHECKPOINT_BYTES`]; it is not read).
pub fn read_checkpoint_bytes(
    dir: &Path,
    name: &str,
) -> Result<Option<Result<Vec<u8>, CheckpointError>>, DurableError> {
    let max = checkpoint::MAX_CHECKPOINT_BYTES;
    Ok(
        durable::read_optional_at_most(dir, name, max)?.map(|contents| match contents {
            durable::Contents::Bytes(bytes) => Ok(bytes),
            durable::Contents::TooLarge { size } => Err(CheckpointError::TooLarge { size, max }),
        }),
    )
}

/// A checkpoint file in a directory, opened after its content was checked.
#[derive(Debug)]
pub struct CheckpointStore {
    dir: PathBuf,
    name: String,
}

impl CheckpointStore {
    /// Opens `dir/name`: returns the store and the checkpoint it holds
    /// (`None` when there is no file). A file that does not decode or verify
    /// is an error and no store is returned; see the module documentation.
    pub fn open(
        dir: &Path,
        name: &str,
    ) -> Result<(CheckpointStore, Option<Checkpoint>), StoreError> {
        durable::remove_stale_temp(dir, name)?;
        let store = CheckpointStore {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        };
        let Some(bytes) = read_checkpoint_bytes(dir, name)? else {
            return Ok((store, None));
        };
        match bytes.and_then(|bytes| checkpoint::decode_verified(&bytes)) {
            Ok(checkpoint) => Ok((store, Some(checkpoint))),
            Err(source) => Err(StoreError::Corrupt {
                path: store.path(),
                source,
            }),
        }
    }

    /// Renames an unusable `dir/name` to `dir/<name>.corrupt-<n>` (smallest
    /// free `n`, never replacing an earlier copy) and returns the new path.
    /// The explicit step that lets [`CheckpointStore::open`] start fresh.
    pub fn move_corrupt_aside(dir: &Path, name: &str) -> Result<PathBuf, StoreError> {
        Ok(durable::move_aside(dir, name)?)
    }

    /// The checkpoint file's path.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Writes a v2 checkpoint exactly as kubelet would, durably and atomically.
    pub fn save(
        &self,
        policy_name: &str,
        default_cpu_set: &str,
        entries: &PodEntries,
    ) -> Result<(), StoreError> {
        self.save_with(policy_name, default_cpu_set, entries, &mut |_| {})
    }

    /// [`CheckpointStore::save`] with a hook run after each write step (tests).
    pub fn save_with(
        &self,
        policy_name: &str,
        default_cpu_set: &str,
        entries: &PodEntries,
        hook: &mut impl FnMut(WriteStep),
    ) -> Result<(), StoreError> {
        let bytes = checkpoint::encode(policy_name, default_cpu_set, entries);
        durable::write_atomic_with(&self.dir, &self.name, &bytes, hook)?;
        Ok(())
    }
}

/// What recovers a checkpoint whose CPU sets cannot be read (`migrate`
/// cannot): the rebuild from the running workloads, offline; the agent
/// itself rebuilds at start (unless `migrateOnStart` is false) but then
/// runs degraded until it restarts on the rebuilt checkpoint.
#[must_use]
pub fn rebuild_advice(path: &Path) -> String {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let which = if path.file_name() == Some(OsStr::new(CPU_MANAGER_STATE)) {
        "this file is kept as cpu_manager_state.pre-rebuild-N".to_string()
    } else {
        format!(
            "it writes {}, the agent's checkpoint; this file is left as it is",
            dir.join(CPU_MANAGER_STATE).display()
        )
    };
    format!(
        "to recover without draining, rebuild the state from the running workloads: run \
         `pinion state rebuild --state-dir {} --config <the agent's config file>` \
         (a dry run; with the agent stopped, add --write to apply: {which}) — the agent \
         does the same by itself at start unless `migrateOnStart` is false, but then refuses \
         new exclusive admissions (degraded) until it restarts on the rebuilt checkpoint",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pod: &str, container: &str, cpus: &str) -> PodEntries {
        let mut out = PodEntries::new();
        out.entry(pod.to_string())
            .or_default()
            .insert(container.to_string(), cpus.to_string());
        out
    }

    #[test]
    fn missing_file_opens_empty_and_saved_state_reopens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, loaded) = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect("open");
        assert!(loaded.is_none());
        store
            .save("static", "0,3", &entries("pod", "app", "1-2"))
            .expect("save");
        let (_, loaded) = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect("reopen");
        let loaded = loaded.expect("a checkpoint");
        assert_eq!(loaded.policy_name(), "static");
        assert_eq!(loaded.default_cpu_set(), "0,3");
        assert_eq!(
            loaded.to_state().expect("parses").assignments["pod"]["app"].len(),
            2
        );
    }

    #[test]
    fn corrupt_file_is_refused_until_moved_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(CPU_MANAGER_STATE);
        let bad = br#"{"policyName":"static","defaultCpuSet":"0-3","checksum":12345}"#;
        std::fs::write(&path, bad).expect("write tampered");
        let err = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect_err("refused");
        assert!(matches!(
            err,
            StoreError::Corrupt {
                source: CheckpointError::Corrupted { .. },
                ..
            }
        ));
        assert!(
            err.to_string().ends_with("checkpoint is corrupted"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).expect("untouched"), bad);

        let aside =
            CheckpointStore::move_corrupt_aside(dir.path(), CPU_MANAGER_STATE).expect("move aside");
        assert_eq!(aside, dir.path().join("cpu_manager_state.corrupt-1"));
        assert_eq!(std::fs::read(&aside).expect("kept"), bad);
        let (_, loaded) = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect("fresh");
        assert!(loaded.is_none());
    }

    #[test]
    fn truncated_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(CPU_MANAGER_STATE), b"{\"policyName\":\"st")
            .expect("write truncated");
        let err = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect_err("refused");
        assert!(matches!(
            err,
            StoreError::Corrupt {
                source: CheckpointError::Truncated { .. },
                ..
            }
        ));
    }
}
