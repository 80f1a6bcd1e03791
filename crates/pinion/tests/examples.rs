//! Every file under `examples/` runs from a fresh clone (no `../shared`),
//! through the command it is an example of, and `--example` prints the
//! files the docs name.

mod common;

use std::path::{Path, PathBuf};

use common::{pinion, stderr, stdout, workspace};

/// Every file under `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).expect("examples dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all.extend(files(&path));
        } else {
            all.push(path);
        }
    }
    all.sort();
    all
}

/// The command that runs an example, by its folder.
fn command(path: &Path) -> &'static str {
    let folder = path
        .parent()
        .and_then(Path::file_name)
        .and_then(|f| f.to_str())
        .unwrap_or_default();
    match folder {
        "scenarios" => "simulate",
        "alloc" => "alloc",
        "hints" => "hints",
        other => panic!(
            "{}: no runner for examples/{other}/ (add one to tests/examples.rs)",
            path.display()
        ),
    }
}

#[test]
fn every_example_runs_without_shared() {
    let examples = files(&workspace().join("examples"));
    assert!(examples.len() >= 9, "{examples:?}");
    for path in examples {
        let text = std::fs::read_to_string(&path).expect("example text");
        assert!(
            !text.contains("../shared") && !text.contains("sysroot:"),
            "{} needs files a fresh clone lacks",
            path.display()
        );
        let file = path.to_str().expect("utf-8 path");
        for output in ["table", "json"] {
            let out = pinion(&[command(&path), "-o", output, file]);
            assert!(
                out.status.success(),
                "pinion {} -o {output} {file}: {}",
                command(&path),
                stderr(&out)
            );
            assert!(!stdout(&out).is_empty(), "{file} printed nothing");
            assert_eq!(stderr(&out), "", "{file}");
        }
    }
}

#[test]
fn example_flags_print_the_example_files() {
    for (command, file) in [
        ("alloc", "examples/alloc/two-sockets-smt.json"),
        ("hints", "examples/hints/merge-and-cpu-hints.yaml"),
    ] {
        let out = pinion(&[command, "--example"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let want = std::fs::read_to_string(workspace().join(file)).expect("example");
        assert_eq!(stdout(&out), want, "pinion {command} --example");
    }
}

/// The golden outputs of the commands that read files: the examples'.
#[test]
fn golden_outputs_of_the_examples() {
    let cases: [(&str, &[&str]); 12] = [
        (
            "hints.table",
            &["hints", "examples/hints/merge-and-cpu-hints.yaml"],
        ),
        (
            "hints.json",
            &[
                "hints",
                "-o",
                "json",
                "examples/hints/merge-and-cpu-hints.yaml",
            ],
        ),
        (
            "hints.yaml",
            &[
                "hints",
                "-o",
                "yaml",
                "examples/hints/merge-and-cpu-hints.yaml",
            ],
        ),
        (
            "alloc.table",
            &[
                "alloc",
                "-o",
                "table",
                "examples/alloc/two-sockets-smt.json",
            ],
        ),
        (
            "alloc.json",
            &["alloc", "examples/alloc/two-sockets-smt.json"],
        ),
        (
            "simulate.table",
            &["simulate", "examples/scenarios/dual-socket-smt.yaml"],
        ),
        (
            "simulate.json",
            &[
                "simulate",
                "-o",
                "json",
                "examples/scenarios/dual-socket-smt.yaml",
            ],
        ),
        (
            "simulate-kep-4800-partial-uncore.table",
            &[
                "simulate",
                "examples/scenarios/kep-4800-partial-uncore.yaml",
            ],
        ),
        (
            "simulate-kep-4800-full-uncore.table",
            &["simulate", "examples/scenarios/kep-4800-full-uncore.yaml"],
        ),
        (
            "simulate-isolcpus-and-whole-uncore.table",
            &[
                "simulate",
                "examples/scenarios/isolcpus-and-whole-uncore.yaml",
            ],
        ),
        (
            "simulate-isolcpus-and-whole-uncore.json",
            &[
                "simulate",
                "-o",
                "json",
                "examples/scenarios/isolcpus-and-whole-uncore.yaml",
            ],
        ),
        (
            "simulate-numa-allocation-strategy.table",
            &[
                "simulate",
                "examples/scenarios/numa-allocation-strategy.yaml",
            ],
        ),
    ];
    let root = workspace();
    for (golden, args) in cases {
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if a.starts_with("examples/") {
                    root.join(a).to_string_lossy().into_owned()
                } else {
                    (*a).to_string()
                }
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = pinion(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        common::golden::check(golden, &stdout(&out));
    }
}
