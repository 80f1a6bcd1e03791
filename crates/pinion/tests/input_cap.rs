//! The file arguments of `simulate`, `hints` and `alloc` (and `-`, their
//! standard input) are read up to a cap: a larger input is refused naming
//! the file and the cap, never read until memory runs out.

mod common;

use std::process::{Command, Stdio};

/// The cap (`crate::input::MAX_INPUT_BYTES`): 16 MiB.
const CAP: usize = 16 << 20;

/// The commands that read a case or scenario file, with FILE for the file.
const COMMANDS: [&[&str]; 4] = [
    &["simulate", "FILE"],
    &["hints", "FILE"],
    &["alloc", "FILE"],
    &["alloc", "--topology", "FILE", "--request", "1"],
];

fn with_file(command: &[&str], file: &str) -> Vec<String> {
    command
        .iter()
        .map(|word| if *word == "FILE" { file } else { word }.to_string())
        .collect()
}

/// Each command read the whole of its file argument: a scenario of a few
/// GiB (or `/dev/zero`, or an endless pipe) grew the process until it ran
/// out of memory.
#[test]
fn regression_file_arguments_were_read_without_a_size_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("big.yaml");
    // Valid JSON/YAML whitespace: without a cap it is read and parsed.
    std::fs::write(&big, " ".repeat(CAP + 1)).expect("write");
    let big = big.to_str().expect("utf-8");
    for command in COMMANDS {
        let args = with_file(command, big);
        let out = Command::new(common::BIN)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("pinion runs");
        let stderr = common::stderr(&out);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains(big) && stderr.contains("larger than the 16 MiB"),
            "{args:?}: {stderr}"
        );
    }
    // The endless file is refused the same way.
    for command in COMMANDS {
        let args = with_file(command, "/dev/zero");
        let out = common::pinion(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = common::stderr(&out);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("/dev/zero") && stderr.contains("larger than the 16 MiB"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn standard_input_is_capped_too_and_an_input_at_the_cap_is_read() {
    let over = " ".repeat(CAP + 1);
    for command in [["simulate", "-"], ["hints", "-"], ["alloc", "-"]] {
        let out = common::pinion_with_stdin(&command, &over);
        let stderr = common::stderr(&out);
        assert!(!out.status.success(), "{command:?}: {stderr}");
        assert!(
            stderr.contains("standard input") && stderr.contains("larger than the 16 MiB"),
            "{command:?}: {stderr}"
        );
    }
    // At the cap: read, then refused for what it says (nothing).
    let at = " ".repeat(CAP);
    let out = common::pinion_with_stdin(&["simulate", "-"], &at);
    let stderr = common::stderr(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains("larger than"), "{stderr}");
}
