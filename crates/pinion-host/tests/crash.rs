//! Crash test of the checkpoint store: for every step of a write, a child
//! process (this test binary, re-executed) writes a new checkpoint over an
//! old one and aborts right after that step. The parent then restores: the
//! file must be exactly the old or exactly the new checkpoint, never torn.
//! The journal's crash tests (every file operation of appends, flushes and
//! compactions) are in `crash/journal_crash.rs`.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use pinion_core::checkpoint::{Checkpoint, CheckpointError, PodEntries};
use pinion_host::durable::{temp_name, WriteStep};
use pinion_host::store::{CheckpointStore, StoreError, CPU_MANAGER_STATE};

const STEP_VAR: &str = "PINION_CRASH_STEP";
const DIR_VAR: &str = "PINION_CRASH_DIR";
const SIGABRT: i32 = 6;
/// The child exits with this when the step it should die at never came.
const NOT_REACHED: i32 = 3;

fn old_state() -> (String, String, PodEntries) {
    let mut entries = PodEntries::new();
    entries
        .entry("old-pod".to_string())
        .or_default()
        .insert("app".to_string(), "2-3".to_string());
    ("static".to_string(), "0-1,4-63".to_string(), entries)
}

/// Large enough that half a write is a visibly partial file.
fn new_state() -> (String, String, PodEntries) {
    let mut entries = PodEntries::new();
    for pod in 0..40 {
        let containers = entries.entry(format!("pod-{pod:04}-uid")).or_default();
        containers.insert("main".to_string(), format!("{}", 2 + pod));
        containers.insert(
            "sidecar".to_string(),
            format!("{}-{}", 42 + pod % 10, 43 + pod % 10),
        );
    }
    ("static".to_string(), "0-1".to_string(), entries)
}

fn checkpoint_of((policy, default, entries): (String, String, PodEntries)) -> Checkpoint {
    Checkpoint::new(&policy, &default, entries)
}

/// Not a test of its own: the body of the child process. In a normal test
/// run the variables are unset and it returns at once.
#[test]
fn child_process_for_crash_test() {
    let (Ok(step), Ok(dir)) = (std::env::var(STEP_VAR), std::env::var(DIR_VAR)) else {
        return;
    };
    let crash_at = WriteStep::from_name(&step).expect("a known step name");
    let (store, _) = CheckpointStore::open(Path::new(&dir), CPU_MANAGER_STATE).expect("open");
    let (policy, default, entries) = new_state();
    store
        .save_with(&policy, &default, &entries, &mut |step| {
            if step == crash_at {
                std::process::abort();
            }
        })
        .expect("save");
    std::process::exit(NOT_REACHED);
}

fn crash_child_at(dir: &Path, step: WriteStep) {
    let exe = std::env::current_exe().expect("own test binary");
    let status = Command::new(exe)
        .args([
            "--exact",
            "child_process_for_crash_test",
            "--test-threads=1",
        ])
        .env(STEP_VAR, step.name())
        .env(DIR_VAR, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn child");
    assert_eq!(
        status.signal(),
        Some(SIGABRT),
        "child must die at {}: {status:?}",
        step.name()
    );
}

fn restore(dir: &Path) -> Option<Checkpoint> {
    let (_, loaded) = CheckpointStore::open(dir, CPU_MANAGER_STATE)
        .unwrap_or_else(|err| panic!("restore must never see a torn file: {err}"));
    loaded
}

fn renamed_by(step: WriteStep) -> bool {
    matches!(step, WriteStep::Renamed | WriteStep::DirSynced)
}

#[test]
fn crash_at_every_write_step_leaves_the_old_or_the_new_state() {
    for step in WriteStep::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, _) = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect("open");
        let (policy, default, entries) = old_state();
        store.save(&policy, &default, &entries).expect("old state");

        crash_child_at(dir.path(), step);

        let temp = dir.path().join(temp_name(CPU_MANAGER_STATE));
        assert_eq!(
            temp.exists(),
            !renamed_by(step),
            "temp file after a crash at {}",
            step.name()
        );
        let expected = if renamed_by(step) {
            new_state()
        } else {
            old_state()
        };
        assert_eq!(
            restore(dir.path()),
            Some(checkpoint_of(expected)),
            "crash at {}",
            step.name()
        );
        assert!(!temp.exists(), "restore removes the stale temp file");
    }
}

#[test]
fn crash_during_the_first_write_leaves_no_file_or_the_new_state() {
    for step in WriteStep::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        crash_child_at(dir.path(), step);
        let expected = renamed_by(step).then(|| checkpoint_of(new_state()));
        assert_eq!(restore(dir.path()), expected, "crash at {}", step.name());
    }
}

#[test]
fn after_a_crash_the_next_write_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    crash_child_at(dir.path(), WriteStep::TempHalfWritten);
    let (store, loaded) = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect("open");
    assert!(loaded.is_none());
    let (policy, default, entries) = new_state();
    store.save(&policy, &default, &entries).expect("save");
    assert_eq!(restore(dir.path()), Some(checkpoint_of(new_state())));
}

#[test]
fn truncated_or_tampered_file_is_an_error_and_never_overwritten() {
    let (policy, default, entries) = new_state();
    let good = pinion_core::checkpoint::encode(&policy, &default, &entries);
    let mut bad_files: Vec<Vec<u8>> = [0, 1, good.len() / 2, good.len() - 1]
        .into_iter()
        .map(|len| good[..len].to_vec())
        .collect();
    bad_files.push(
        String::from_utf8(good.clone())
            .expect("utf8")
            .replace("\"0-1\"", "\"0-2\"")
            .into_bytes(),
    );
    assert!(
        bad_files.iter().all(|bad| *bad != good),
        "every case differs from the good file"
    );
    for bad in bad_files {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(CPU_MANAGER_STATE);
        std::fs::write(&path, &bad).expect("write bad file");
        let err = CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect_err("refused");
        assert!(
            matches!(
                err,
                StoreError::Corrupt {
                    source: CheckpointError::Truncated { .. }
                        | CheckpointError::Syntax { .. }
                        | CheckpointError::Corrupted { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert_eq!(
            std::fs::read(&path).expect("still there"),
            bad,
            "left untouched"
        );
    }
}

#[path = "crash/journal_crash.rs"]
mod journal_crash;
