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
