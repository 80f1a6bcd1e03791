use super::*;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

#[test]
fn write_then_read_returns_the_bytes() {
    let dir = dir();
    write_atomic(dir.path(), "state", b"old").expect("write");
    write_atomic(dir.path(), "state", b"new contents").expect("overwrite");
    let read = read_optional(dir.path(), "state").expect("read");
    assert_eq!(read.as_deref(), Some(&b"new contents"[..]));
    assert!(
        !dir.path().join(temp_name("state")).exists(),
        "temp file renamed away"
    );
}

#[test]
fn missing_file_reads_as_none_and_unreadable_as_error() {
    let dir = dir();
    assert_eq!(
        read_optional(dir.path(), "state").expect("missing is fine"),
        None
    );
    std::fs::create_dir(dir.path().join("state")).expect("a directory in the way");
    let err = read_optional(dir.path(), "state").expect_err("a directory is unreadable");
    assert!(matches!(err, DurableError::Io { op: Op::Read, .. }));
    assert!(err
        .to_string()
        .contains(&dir.path().join("state").display().to_string()));
}

#[test]
fn hook_sees_every_step_in_order() {
    let dir = dir();
    let mut seen = Vec::new();
    write_atomic_with(dir.path(), "state", b"abc", &mut |step| seen.push(step)).expect("write");
    assert_eq!(seen, WriteStep::ALL);
    for step in WriteStep::ALL {
        assert_eq!(WriteStep::from_name(step.name()), Some(step));
    }
}

#[test]
fn names_that_could_escape_the_directory_are_refused() {
    let dir = dir();
    for name in ["", ".", "..", "a/b", "../x", "nul\0"] {
        let err = write_atomic(dir.path(), name, b"x").expect_err(name);
        assert!(matches!(err, DurableError::InvalidName { .. }), "{name}");
        assert!(read_optional(dir.path(), name).is_err(), "{name}");
    }
}

#[test]
fn stale_temp_file_is_replaced_by_the_next_write_and_removable() {
    let dir = dir();
    let stale = dir.path().join(temp_name("state"));
    std::fs::write(
        &stale,
        b"half a checkpoint from a crash, much longer than the new one",
    )
    .expect("stale temp");
    write_atomic(dir.path(), "state", b"new").expect("write over stale temp");
    assert_eq!(
        std::fs::read(dir.path().join("state")).expect("read"),
        b"new"
    );
    std::fs::write(&stale, b"stale again").expect("stale temp");
    assert!(remove_stale_temp(dir.path(), "state").expect("remove"));
    assert!(!remove_stale_temp(dir.path(), "state").expect("nothing left"));
}

#[test]
fn write_into_a_missing_directory_names_the_operation_and_path() {
    let dir = dir();
    let missing = dir.path().join("nope");
    let err = write_atomic(&missing, "state", b"x").expect_err("no directory");
    assert!(matches!(
        err,
        DurableError::Io {
            op: Op::CreateTemp,
            ..
        }
    ));
    let text = err.to_string();
    assert!(text.starts_with("create temp file "), "{text}");
    assert!(text.contains(&missing.display().to_string()), "{text}");
}

#[test]
fn move_aside_never_replaces_an_earlier_copy() {
    let dir = dir();
    std::fs::write(dir.path().join("state"), b"bad 1").expect("write");
    let first = move_aside(dir.path(), "state").expect("move");
    assert_eq!(first, dir.path().join("state.corrupt-1"));
    std::fs::write(dir.path().join("state"), b"bad 2").expect("write");
    let second = move_aside(dir.path(), "state").expect("move");
    assert_eq!(second, dir.path().join("state.corrupt-2"));
    assert_eq!(std::fs::read(&first).expect("first kept"), b"bad 1");
    assert_eq!(std::fs::read(&second).expect("second kept"), b"bad 2");
    assert!(!dir.path().join("state").exists());
    assert!(move_aside(dir.path(), "state").is_err(), "nothing to move");
}

#[test]
fn keep_copy_never_replaces_an_earlier_copy_and_keeps_the_original() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_atomic(dir.path(), "state", b"one").expect("write");
    let first = keep_copy(dir.path(), "state", "pre-migrate").expect("copy");
    write_atomic(dir.path(), "state", b"two").expect("write");
    let second = keep_copy(dir.path(), "state", "pre-migrate").expect("copy");
    assert_eq!(first, dir.path().join("state.pre-migrate-1"));
    assert_eq!(second, dir.path().join("state.pre-migrate-2"));
    assert_eq!(std::fs::read(&first).expect("read"), b"one");
    assert_eq!(std::fs::read(&second).expect("read"), b"two");
    assert_eq!(
        std::fs::read(dir.path().join("state")).expect("read"),
        b"two"
    );
}

/// Issue 10: the checkpoint's temporary file was opened without
/// `O_NOFOLLOW`/`O_EXCL`, so a symlink planted at `.<name>.pinion-tmp` made
/// the (root) writer overwrite the symlink's target.
#[test]
fn issue_10_planted_temp_symlink_never_redirects_the_write() {
    let dir = dir();
    let victim_dir = tempfile::tempdir().expect("tempdir");
    let victim = victim_dir.path().join("shadow");
    std::fs::write(&victim, b"precious").expect("victim");
    let temp = dir.path().join(temp_name("state"));
    std::os::unix::fs::symlink(&victim, &temp).expect("plant symlink");

    write_atomic(dir.path(), "state", b"checkpoint").expect("write");

    assert_eq!(std::fs::read(&victim).expect("victim"), b"precious");
    assert_eq!(
        std::fs::read(dir.path().join("state")).expect("state"),
        b"checkpoint"
    );
    let meta = std::fs::symlink_metadata(dir.path().join("state")).expect("meta");
    assert!(meta.file_type().is_file(), "a regular file, not the link");
    assert!(!temp.exists() && std::fs::symlink_metadata(&temp).is_err());
}

/// Issue 10, same defect: a dangling symlink would have made `O_CREAT`
/// create the file it points to.
#[test]
fn issue_10_dangling_temp_symlink_creates_nothing_outside_the_directory() {
    let dir = dir();
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let target = elsewhere.path().join("created-by-root");
    std::os::unix::fs::symlink(&target, dir.path().join(temp_name("state"))).expect("plant");
    write_atomic(dir.path(), "state", b"x").expect("write");
    assert!(!target.exists(), "nothing created through the link");
}

#[test]
fn create_exclusive_removes_a_leftover_and_is_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"leftover").expect("leftover");
    let file = create_exclusive(&path).expect("create");
    assert_eq!(file.metadata().expect("meta").len(), 0, "a new, empty file");
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_directory_planted_at_the_temp_name_is_an_error_naming_it() {
    let dir = dir();
    let temp = dir.path().join(temp_name("state"));
    std::fs::create_dir(&temp).expect("plant a directory");
    std::fs::write(temp.join("inside"), b"x").expect("content");
    let err = write_atomic(dir.path(), "state", b"x").expect_err("cannot replace a directory");
    assert!(
        matches!(err, DurableError::Io { op: Op::Remove, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&temp.display().to_string()),
        "{err}"
    );
    assert!(!dir.path().join("state").exists());
}

#[test]
fn failed_steps_leave_the_target_untouched_and_name_the_operation() {
    use crate::fileops::{Effect, Faults, FileOp};
    let cases = [
        (
            FileOp::Write,
            Effect::Fail(libc::ENOSPC),
            "write 10 bytes to",
        ),
        (FileOp::Write, Effect::Short(0), "write 10 bytes to"),
        (FileOp::SyncAll, Effect::Fail(libc::EIO), "fsync file"),
        (FileOp::Rename, Effect::Fail(libc::EIO), "rename"),
    ];
    for (op, effect, text) in cases {
        let dir = dir();
        write_atomic(dir.path(), "state", b"old").expect("old");
        let (mut faults, plan) = Faults::new();
        plan.inject(op, None, effect);
        let err = write_atomic_using(&mut faults, dir.path(), "state", b"0123456789", &mut |_| {})
            .expect_err("fault");
        assert!(err.to_string().starts_with(text), "{op:?}: {err}");
        assert_eq!(
            std::fs::read(dir.path().join("state")).expect("old"),
            b"old"
        );
        assert!(
            !dir.path().join(temp_name("state")).exists(),
            "{op:?}: temp removed"
        );
    }
}

#[test]
fn a_read_at_most_a_limit_reads_nothing_of_a_larger_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        read_optional_at_most(dir.path(), "state", 4).expect("missing is fine"),
        None
    );
    std::fs::write(dir.path().join("state"), b"four").expect("write");
    assert_eq!(
        read_optional_at_most(dir.path(), "state", 4).expect("read"),
        Some(Contents::Bytes(b"four".to_vec()))
    );
    assert_eq!(
        read_optional_at_most(dir.path(), "state", 3).expect("read"),
        Some(Contents::TooLarge { size: 4 })
    );
    assert!(read_optional_at_most(dir.path(), "../state", 3).is_err());
}

/// Found from outside (session 45): a FIFO where the checkpoint or the
/// journal lies blocked the agent's start and every `pinion state` command
/// in `open(2)` (no writer ever comes). The state files are now opened
/// without blocking and anything but a regular file is refused, naming
/// what stood there.
#[test]
fn regression_a_fifo_in_place_of_a_state_file_is_refused_not_waited_on() {
    use crate::bounded_read::testing::{mkfifo, without_hanging};
    let dir = dir();
    let path = dir.path().to_path_buf();
    mkfifo(&path.join("cpu_manager_state"));
    mkfifo(&path.join("pinion_journal"));
    let (whole, capped, tool) = without_hanging("reading the state files", move || {
        (
            read_optional(&path, "pinion_journal").map(|_| ()),
            read_optional_at_most(&path, "cpu_manager_state", 1 << 20).map(|_| ()),
            crate::journal::read_state_file(&path.join("cpu_manager_state")).map(|_| ()),
        )
    });
    for text in [
        whole.expect_err("journal").to_string(),
        capped.expect_err("checkpoint").to_string(),
        tool.expect_err("state tool").to_string(),
    ] {
        assert!(text.contains("not a regular file (a fifo)"), "{text}");
    }
}

/// The whole file, however long (the tests' files are small).
fn read_optional(dir: &Path, name: &str) -> Result<Option<Vec<u8>>, DurableError> {
    Ok(
        read_optional_at_most(dir, name, u64::MAX)?.map(|contents| match contents {
            Contents::Bytes(bytes) => bytes,
            Contents::TooLarge { size } => panic!("{size} bytes over u64::MAX"),
        }),
    )
}
