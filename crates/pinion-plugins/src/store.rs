//! Each plugin's own state file in a state directory, written atomically
//! (temp file, fsync, rename, fsync directory: `pinion_host::durable`)
//! after every change and read back at start.

use std::path::{Path, PathBuf};

use pinion_host::durable::{self, DurableError};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Errors of state files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Durable(#[from] DurableError),
    #[error("state file {} is not valid: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot encode the state for {}: {reason}", path.display())]
    Encode { path: PathBuf, reason: String },
    #[error("cannot create the state directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One plugin's state file, or none (state kept in memory only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    dir: Option<PathBuf>,
    name: &'static str,
}

impl StateFile {
    /// The file `name` in `dir` (`None` = in memory only).
    #[must_use]
    pub fn new(dir: Option<&Path>, name: &'static str) -> Self {
        Self {
            dir: dir.map(Path::to_path_buf),
            name,
        }
    }

    /// No file: nothing is saved.
    #[must_use]
    pub fn memory(name: &'static str) -> Self {
        Self { dir: None, name }
    }

    /// The file's path, when there is one.
    #[must_use]
    pub fn path(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|dir| dir.join(self.name))
    }

    /// The saved state, or `None` when there is no file (or no directory).
    pub fn load<T: DeserializeOwned>(&self) -> Result<Option<T>, StoreError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        let Some(bytes) = durable::read_optional(dir, self.name)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| StoreError::Corrupt {
                path: dir.join(self.name),
                reason: err.to_string(),
            })
    }

    /// Replaces the file with `state` (no-op without a directory); the
    /// directory is created on the first save.
    pub fn save<T: Serialize>(&self, state: &T) -> Result<(), StoreError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        let bytes = serde_json::to_vec_pretty(state).map_err(|err| StoreError::Encode {
            path: dir.join(self.name),
            reason: err.to_string(),
        })?;
        durable::write_atomic(dir, self.name, &bytes)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a plugin given a state directory that did not exist yet
    /// (`MemoryPlugin::open(.., Some(dir))` in the agent) failed its first
    /// `Allocate` with "create temp file …: No such file or directory".
    #[test]
    fn the_first_save_creates_a_missing_state_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("not/yet");
        let file = StateFile::new(Some(&dir), "state.json");
        assert_eq!(file.load::<Vec<u32>>().expect("no file yet"), None);
        file.save(&vec![1_u32, 2])
            .expect("save creates the directory");
        assert_eq!(file.load::<Vec<u32>>().expect("load"), Some(vec![1, 2]));
    }
}
