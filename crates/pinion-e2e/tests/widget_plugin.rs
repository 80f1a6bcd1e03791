//! The example plugin's command line: a missing or unknown argument is a
//! usage error naming it, and nothing is served. (Its behaviour against the
//! agent is `crates/pinion/tests/e2e_run.rs`, which runs this binary: this
//! test also makes `cargo test` build it beside `pinion`.)

use std::process::Command;

const PLUGIN: &str = env!("CARGO_BIN_EXE_widget-plugin");

#[test]
fn bad_arguments_are_named_with_the_usage() {
    for (args, named) in [
        (&[][..], "--socket-dir is required"),
        (
            &["--socket-dir", "/tmp/x", "--colour", "red"][..],
            "unknown argument \"--colour\"",
        ),
        (&["--socket-dir"][..], "--socket-dir needs a value"),
    ] {
        let out = Command::new(PLUGIN)
            .args(args)
            .output()
            .expect("run widget-plugin");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(named) && err.contains("usage: widget-plugin"),
            "{args:?}: {err}"
        );
    }
}
