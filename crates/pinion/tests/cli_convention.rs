//! Issue 33: one output flag for every command that prints data, the old
//! spelling with a deprecation note, the same hint from every command when
//! the agent is not running, and helpful answers to an operator's first
//! mistakes.

mod common;

use common::{pinion, pinion_with_stdin, stderr, stdout};

/// Every command that reads the agent, with its own socket option.
fn agent_commands(socket: &str, podresources: &str) -> Vec<Vec<String>> {
    let words = |w: &[&str]| w.iter().map(ToString::to_string).collect::<Vec<_>>();
    vec![
        words(&["ps", "--socket", socket]),
        words(&["pools", "--socket", socket]),
        words(&["pools", "set", "share=2", "--socket", socket]),
        words(&["plugins", "--socket", socket]),
        words(&["resize", "pinion-run-1", "--cpus", "2", "--socket", socket]),
        words(&["podresources", "--socket", podresources]),
        words(&["podresources", "allocatable", "--socket", podresources]),
    ]
}

#[test]
fn a_missing_agent_gets_the_same_hint_from_every_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("pinion.sock");
    let podresources = dir.path().join("podresources.sock");
    for args in agent_commands(
        socket.to_str().expect("utf-8"),
        podresources.to_str().expect("utf-8"),
    ) {
        for output in ["table", "wide", "json", "yaml"] {
            let mut args = args.clone();
            args.extend(["-o".to_string(), output.to_string()]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = pinion(&args);
            assert!(!out.status.success(), "{args:?}");
            let err = stderr(&out);
            assert!(
                err.starts_with("pinion: cannot reach the pinion agent at ")
                    && err.contains("No such file or directory")
                    && err.contains("(is `pinion-agent` running, and is this its socket?"),
                "{args:?}: {err}"
            );
        }
    }
}

#[test]
fn the_old_format_flag_still_works_with_a_deprecation_note() {
    let case = r#"{"kind": "merge", "name": "a", "numa_nodes": [0], "policy": "restricted",
                   "providers": [{"cpu": [{"mask": [0], "preferred": true}]}]}"#;
    let new = pinion_with_stdin(&["hints", "-o", "json", "-"], case);
    let old = pinion_with_stdin(&["hints", "--format", "json", "-"], case);
    assert!(old.status.success(), "{}", stderr(&old));
    assert_eq!(stdout(&old), stdout(&new));
    assert_eq!(stderr(&new), "");
    assert!(
        stderr(&old).contains("--format json is deprecated") && stderr(&old).contains("-o json"),
        "{}",
        stderr(&old)
    );
    // `text` was the people's format of topology, simulate and hints.
    let text = pinion_with_stdin(&["hints", "--format", "text", "-"], case);
    let table = pinion_with_stdin(&["hints", "-"], case);
    assert_eq!(stdout(&text), stdout(&table));
}

#[test]
fn every_data_command_takes_the_same_output_values() {
    for command in [
        "topology",
        "alloc",
        "simulate",
        "hints",
        "ps",
        "resize",
        "podresources",
        "plugins",
        "pools",
    ] {
        let out = pinion(&[command, "--help"]);
        let help = stdout(&out);
        assert!(
            help.contains("-o, --output <OUTPUT>")
                && ["- table:", "- wide:", "- json:", "- yaml:"]
                    .iter()
                    .all(|value| help.contains(value)),
            "pinion {command} --help:\n{help}"
        );
    }
}

#[test]
fn alloc_without_input_says_what_to_give() {
    let out = pinion(&["alloc"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("give --request N") && err.contains("pinion alloc --example"),
        "{err}"
    );
}

#[test]
fn hints_without_input_names_the_example() {
    let out = pinion(&["hints"]);
    assert!(!out.status.success());
    let help = stdout(&pinion(&["hints", "--help"]));
    assert!(help.contains("--example"), "{help}");
}

#[test]
fn qos_annotations_without_cpus_are_refused_before_the_agent_is_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("none.sock");
    let out = pinion(&[
        "run",
        "--socket",
        socket.to_str().expect("utf-8"),
        "--annotation",
        "katalyst.kubewharf.io/qos_level=reclaimed_cores",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("add --cpus 500m"), "{}", stderr(&out));
}
