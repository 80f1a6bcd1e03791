//! Run records: how many exclusive CPUs each standalone run holds (0:
//! shared), one small file per run in `<state dir>/runs/<cgroup name>`,
//! written when the run is admitted, resized or released with processes
//! left (then 0), checked at the agent's start, and removed with its
//! cgroup. The checkpoint says the same; these files exist
//! for the day it cannot be read: together with each cgroup's `cpuset.cpus`
//! they let the agent rebuild the state from what runs
//! (`pinion_core::rebuild`). A record is a hint, not a decision: it is
//! written with an atomic rename but without `fsync` (never on the
//! admission path's critical flush), and a missing one means "shared".
//!
//! The file holds one line, `exclusive-cpus N`.

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use pinion_core::rebuild::Claim;

use crate::cgroup::{CgroupError, CgroupName, CpusetHost};

/// Creates `path` for writing; fails when anything (a file or a symbolic
/// link, which is not followed) is there already.
fn create_new_nofollow(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The directory of the records inside the state directory.
pub const RUNS_DIR: &str = "runs";
/// The largest record accepted (bytes) and the largest count.
const MAX_BYTES: u64 = 64;
const MAX_CPUS: usize = 1 << 16;

/// Errors of run records; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum RunRecordError {
    #[error("{op} run record {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("run record {} is not `exclusive-cpus N` (N at most {MAX_CPUS}): {text:?}", .path.display())]
    Invalid { path: PathBuf, text: String },
}

/// The records of one state directory.
#[derive(Debug, Clone)]
pub struct RunRecords {
    dir: PathBuf,
}

impl RunRecords {
    /// The records under `state_dir/runs`.
    #[must_use]
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join(RUNS_DIR),
        }
    }

    /// The record file of run `name`.
    #[must_use]
    pub fn path_of(&self, name: &CgroupName) -> PathBuf {
        self.dir.join(name.as_str())
    }

    /// Records that run `name` asked for `exclusive` CPUs (0: shared).
    pub fn write(&self, name: &CgroupName, exclusive: usize) -> Result<(), RunRecordError> {
        let io = |op, path: &Path| {
            let path = path.to_path_buf();
            move |source| RunRecordError::Io { op, path, source }
        };
        fs::create_dir_all(&self.dir).map_err(io("create directory for", &self.dir))?;
        let path = self.path_of(name);
        let temp = self.dir.join(format!(".{}.pinion-tmp", name.as_str()));
        let mut file = match create_new_nofollow(&temp) {
            // A stale temp file of a crashed write — or a link planted
            // there: removed (the link itself, never its target), then
            // created anew.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(&temp).map_err(io("remove stale", &temp))?;
                create_new_nofollow(&temp)
            }
            other => other,
        }
        .map_err(io("create", &temp))?;
        file.write_all(format!("exclusive-cpus {exclusive}\n").as_bytes())
            .map_err(io("write", &temp))?;
        drop(file);
        fs::rename(&temp, &path).map_err(io("rename into", &path))
    }

    /// What run `name` asked for (`None`: no record).
    pub fn read(&self, name: &CgroupName) -> Result<Option<usize>, RunRecordError> {
        let path = self.path_of(name);
        let io = |op| {
            let path = path.clone();
            move |source| RunRecordError::Io { op, path, source }
        };
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(io("read")(err)),
        };
        let invalid = |text: String| RunRecordError::Invalid {
            path: path.clone(),
            text,
        };
        if !meta.is_file() || meta.len() > MAX_BYTES {
            return Err(invalid(format!(
                "(not a regular file of at most {MAX_BYTES} bytes)"
            )));
        }
        let text = fs::read_to_string(&path).map_err(io("read"))?;
        let count = text
            .trim_end()
            .strip_prefix("exclusive-cpus ")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= MAX_CPUS);
        count.map(Some).ok_or_else(|| invalid(text))
    }

    /// Removes the record of run `name` (a missing one is not an error).
    pub fn remove(&self, name: &CgroupName) -> Result<(), RunRecordError> {
        let path = self.path_of(name);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(RunRecordError::Io {
                op: "remove",
                path,
                source,
            }),
        }
    }
}

/// What the node says about the live standalone runs: for each child of
/// Pinion's cgroup root with processes, its `cpuset.cpus` and its run
/// record, as a [`Claim`] of container `container`. A run without a record,
/// or with an unreadable one, claims the shared pool; each such case is in
/// the returned warnings.
pub fn claims(
    host: &dyn CpusetHost,
    runs: &RunRecords,
    container: &str,
) -> Result<(Vec<Claim>, Vec<String>), CgroupError> {
    let mut claims = Vec::new();
    let mut warnings = Vec::new();
    for cgroup in host.list()? {
        match host.pids(&cgroup) {
            Ok(pids) if pids.is_empty() => continue,
            Ok(_) => {}
            // Processes that cannot be listed may be running: it claims.
            Err(err) => warnings.push(format!(
                "{cgroup}: its processes cannot be listed ({err}); taken as running"
            )),
        }
        let cpus = host.cpus(&cgroup)?;
        let exclusive = match runs.read(&cgroup) {
            Ok(Some(n)) => n,
            Ok(None) => {
                warnings.push(format!(
                    "{cgroup} (cpus {cpus}) has no run record: it is taken as a member of the shared pool"
                ));
                0
            }
            Err(err) => {
                warnings.push(format!(
                    "{err}: {cgroup} (cpus {cpus}) is taken as a member of the shared pool"
                ));
                0
            }
        };
        claims.push(Claim {
            pod: cgroup.to_string(),
            container: container.to_string(),
            cpus,
            exclusive,
        });
    }
    Ok((claims, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> CgroupName {
        CgroupName::new(text).expect("name")
    }

    /// Issue 27, item 7: the record was written with `fs::write` at a
    /// predictable temp path, following a symbolic link planted there.
    #[test]
    fn regression_a_link_at_the_temp_path_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        fs::write(&outside, "keep me").expect("write");
        let runs = RunRecords::new(dir.path());
        fs::create_dir_all(dir.path().join(RUNS_DIR)).expect("runs dir");
        let temp = dir.path().join(RUNS_DIR).join(".run-a.pinion-tmp");
        std::os::unix::fs::symlink(&outside, &temp).expect("plant a link");
        runs.write(&name("run-a"), 2).expect("write");
        assert_eq!(fs::read_to_string(&outside).expect("read"), "keep me");
        assert_eq!(runs.read(&name("run-a")).expect("read"), Some(2));
        assert!(fs::symlink_metadata(&temp).is_err(), "no temp file left");
    }

    #[test]
    fn a_record_round_trips_and_goes_away() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runs = RunRecords::new(dir.path());
        assert_eq!(runs.read(&name("run-a")).expect("read"), None);
        runs.write(&name("run-a"), 3).expect("write");
        assert_eq!(runs.read(&name("run-a")).expect("read"), Some(3));
        runs.write(&name("run-a"), 0).expect("rewrite");
        assert_eq!(runs.read(&name("run-a")).expect("read"), Some(0));
        runs.remove(&name("run-a")).expect("remove");
        runs.remove(&name("run-a")).expect("remove again");
        assert_eq!(runs.read(&name("run-a")).expect("read"), None);
    }

    #[test]
    fn a_bad_record_is_an_error_naming_its_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runs = RunRecords::new(dir.path());
        for text in [
            "exclusive-cpus x\n",
            "cpus 2\n",
            "exclusive-cpus 99999999\n",
        ] {
            fs::create_dir_all(dir.path().join(RUNS_DIR)).expect("mkdir");
            fs::write(runs.path_of(&name("bad")), text).expect("write");
            let err = runs.read(&name("bad")).expect_err(text);
            assert!(matches!(err, RunRecordError::Invalid { .. }), "{err}");
        }
        fs::write(runs.path_of(&name("big")), "x".repeat(100)).expect("write");
        assert!(runs.read(&name("big")).is_err());
    }
}
