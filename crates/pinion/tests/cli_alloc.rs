//! `pinion alloc` end to end: a corpus file (read in place), the human form,
//! and bad input.

mod common;

use std::path::{Path, PathBuf};

use common::{pinion, shared};

use pinion_core::topology::{synthetic, Shape};
use serde_json::Value;

fn corpus_file(name: &str) -> Option<PathBuf> {
    shared(&format!("conformance/kubelet/{name}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn corpus_file_gives_kubelets_answers_line_by_line() {
    let Some(path) = corpus_file("TestTakeByTopologyNUMAPacked.json") else {
        return;
    };
    let out = pinion(&[
        "alloc",
        "-o",
        "json",
        path.to_str().expect("utf-8 path"),
        "--repeat",
        "3",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    let stdout = text(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), cases.len());
    for (case, line) in cases.iter().zip(&lines) {
        assert_eq!(line["name"], case["name"]);
        let expect = &case["expect"];
        if let Some(cpus) = expect.get("cpus") {
            assert_eq!(&line["cpus"], cpus, "{}", case["name"]);
        } else {
            assert_eq!(&line["error"], &expect["error"], "{}", case["name"]);
        }
        assert!(line["ns_per_call"].as_u64().is_some());
    }
}

#[test]
fn non_take_cases_are_skipped_with_a_reason() {
    let Some(path) = corpus_file("TestStaticPolicyRemove.json") else {
        return;
    };
    // No `-o`: the case form prints JSON lines, as the corpus tools and
    // kubelet's conformance tables read them (regression: a table by default
    // broke every one of them).
    let out = pinion(&["alloc", path.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let first: Value = serde_json::from_str(stdout.lines().next().expect("a line")).expect("json");
    assert!(first["skipped"]
        .as_str()
        .expect("skipped")
        .contains("\"policy\""));
}

fn topology_file(dir: &Path) -> PathBuf {
    let topo = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    let path = dir.join("topology.json");
    std::fs::write(&path, serde_json::to_string(&topo).expect("serialise")).expect("write");
    path
}

#[test]
fn human_form_prints_the_chosen_cpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topo = topology_file(dir.path());
    let topo = topo.to_str().expect("utf-8 path");
    let out = pinion(&[
        "alloc",
        "--topology",
        topo,
        "--request",
        "4",
        "--available",
        "1-15",
        "--repeat",
        "5",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(" ns per call (median of 5)"), "{stdout}");
    // CPU 0 is busy: NUMA node 0 has the fewest free CPUs so it comes first,
    // and its first whole free cores are 1 (CPUs 1, 9) and 2 (CPUs 2, 10).
    assert!(
        text(&out.stdout).contains("cpus:      1-2,9-10 (4 cpus)"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn human_form_reads_a_sysfs_tree() {
    let Some(sysroot) = shared("topologies/x86-2s-amd-epyc-7451-ht-16ccx-8numa") else {
        return;
    };
    let sysroot = sysroot.to_str().expect("utf-8 path");
    // 8 NUMA nodes of 6 cores (12 CPUs): 12 CPUs fill exactly one NUMA node.
    let out = pinion(&["alloc", "--sysroot", sysroot, "--request", "12"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("(12 cpus)"), "{stdout}");
    assert!(stdout.contains("numa:      0: 12\n"), "{stdout}");
    assert!(stdout.contains("cores:     6 whole, 0 partial"), "{stdout}");
    let out = pinion(&[
        "alloc",
        "--sysroot",
        "/nonexistent-sysroot",
        "--request",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--sysroot"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bad_input_names_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topo = topology_file(dir.path());
    let topo = topo.to_str().expect("utf-8 path");
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "alloc",
                "--topology",
                topo,
                "--request",
                "2",
                "--option",
                "bogus=1",
            ],
            "unknown option \"bogus\"",
        ),
        (
            &[
                "alloc",
                "--topology",
                topo,
                "--request",
                "2",
                "--available",
                "3-x",
            ],
            "--available",
        ),
        (
            &[
                "alloc",
                "--topology",
                topo,
                "--request",
                "2",
                "--option",
                "full-pcpus-only=yes",
            ],
            "full-pcpus-only",
        ),
    ];
    for (args, needle) in cases {
        let out = pinion(args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            text(&out.stderr).contains(needle),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let bad_case = dir.path().join("case.json");
    std::fs::write(&bad_case, r#"{"name":"b","topology":{"cpus":[{"id":0,"core":0,"socket":0,"numa":0,"uncore":0}]},"available":"0","request":1,"algorithm":"weird"}"#).expect("write");
    let out = pinion(&[
        "alloc",
        "-o",
        "json",
        bad_case.to_str().expect("utf-8 path"),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("field `algorithm`"),
        "{}",
        text(&out.stdout)
    );
    let malformed = dir.path().join("bad.json");
    std::fs::write(&malformed, "[1,").expect("write");
    let out = pinion(&[
        "alloc",
        "-o",
        "json",
        malformed.to_str().expect("utf-8 path"),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("malformed JSON"),
        "{}",
        text(&out.stderr)
    );
}
