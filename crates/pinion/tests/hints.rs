//! `pinion hints`: golden output on small inline cases, error handling, and
//! the corpus merge / cpu_hints files run through the binary.

mod common;

use std::path::PathBuf;

/// (stdout, stderr, success) of `pinion ARGS…` fed `stdin`.
fn pinion(args: &[&str], stdin: &str) -> (String, String, bool) {
    let out = common::pinion_with_stdin(args, stdin);
    (
        common::stdout(&out),
        common::stderr(&out),
        out.status.success(),
    )
}

const TWO_CASES: &str = r#"[
 {"kind": "merge", "name": "aligned", "numa_nodes": [0, 1], "policy": "restricted",
  "providers": [{"cpu": [{"mask": [0], "preferred": true}, {"mask": [0, 1], "preferred": false}]},
                {"memory": [{"mask": [0], "preferred": true}]}]},
 {"kind": "merge", "name": "split", "numa_nodes": [0, 1], "policy": "single-numa-node",
  "providers": [{"cpu": [{"mask": [0], "preferred": true}]}, {"gpu": [{"mask": [1], "preferred": true}]}]}
]"#;

#[test]
fn merge_cases_print_one_json_line_each() {
    let (stdout, _, ok) = pinion(&["hints", "-o", "json", "-"], TWO_CASES);
    assert!(ok);
    assert_eq!(
        stdout,
        "{\"name\":\"aligned\",\"mask\":[0],\"preferred\":true,\"admit\":true}\n\
         {\"name\":\"split\",\"mask\":null,\"preferred\":false,\"admit\":false}\n"
    );
}

#[test]
fn text_format_shows_inputs_and_the_rejection_reason() {
    let (stdout, _, ok) = pinion(&["hints", "-o", "table", "-"], TWO_CASES);
    assert!(ok);
    let expected = "case \"aligned\"\n\
        \x20 policy restricted, NUMA nodes [0, 1]\n\
        \x20 provider 1: cpu: NUMA 0, preferred | NUMA 0-1, not preferred\n\
        \x20 provider 2: memory: NUMA 0, preferred\n\
        \x20 merged hint: NUMA 0, preferred\n\
        \x20 admitted\n\
        case \"split\"\n\
        \x20 policy single-numa-node, NUMA nodes [0, 1]\n\
        \x20 provider 1: cpu: NUMA 0, preferred\n\
        \x20 provider 2: gpu: NUMA 1, preferred\n\
        \x20 merged hint: any NUMA node, not preferred\n\
        \x20 rejected: TopologyAffinityError: Resources cannot be allocated with Topology locality\n";
    assert_eq!(stdout, expected);
}

#[test]
fn cpu_hints_cases_list_the_hints() {
    let case = r#"{"kind": "cpu_hints", "name": "two nodes", "request": 2, "available": "1-3",
        "topology": {"cpus": [{"id": 0, "core": 0, "socket": 0, "numa": 0, "uncore": 0},
                              {"id": 1, "core": 1, "socket": 0, "numa": 0, "uncore": 0},
                              {"id": 2, "core": 2, "socket": 1, "numa": 1, "uncore": 1},
                              {"id": 3, "core": 3, "socket": 1, "numa": 1, "uncore": 1}]}}"#;
    let (stdout, _, ok) = pinion(&["hints", "-o", "json", "-"], case);
    assert!(ok);
    assert_eq!(
        stdout,
        "{\"name\":\"two nodes\",\"hints\":[{\"mask\":[1],\"preferred\":true},{\"mask\":[0,1],\"preferred\":false}]}\n"
    );
}

#[test]
fn bad_cases_are_reported_and_fail_the_run() {
    let case =
        r#"{"kind": "merge", "name": "x", "numa_nodes": [0], "policy": "bogus", "providers": []}"#;
    let (stdout, stderr, ok) = pinion(&["hints", "-o", "json", "-"], case);
    assert!(!ok);
    assert_eq!(
        stdout,
        "{\"name\":\"x\",\"error\":\"unknown policy: \\\"bogus\\\"\"}\n"
    );
    assert!(stderr.contains("1 of 1 cases could not be run"), "{stderr}");
    let (_, stderr, ok) = pinion(&["hints", "-o", "json", "-"], "[1, 2");
    assert!(!ok);
    assert!(stderr.contains("reading cases from -"), "{stderr}");
    let (_, stderr, ok) = pinion(&["hints", "/nonexistent/cases.json"], "");
    assert!(!ok);
    assert!(stderr.contains("/nonexistent/cases.json"), "{stderr}");
}

fn corpus(file: &str) -> Option<PathBuf> {
    common::shared(&format!("conformance/kubelet/topomgr/{file}"))
}

#[test]
fn corpus_merge_files_through_the_cli() {
    for file in [
        "TestPolicyBestEffortMerge.json",
        "TestPolicyBestEffortMergeClosestNUMA.json",
        "TestPolicyRestrictedMerge.json",
        "TestPolicyRestrictedMergeClosestNUMA.json",
        "TestPolicySingleNumaNodeMerge.json",
        "TestPolicyNoneMerge.json",
        "TestAdmit.json",
    ] {
        let Some(path) = corpus(file) else { return };
        let text = std::fs::read_to_string(&path).expect("corpus file is readable");
        let cases: Vec<serde_json::Value> = serde_json::from_str(&text).expect("corpus is JSON");
        let (stdout, stderr, ok) = pinion(
            &["hints", "-o", "json", path.to_str().expect("utf-8 path")],
            "",
        );
        assert!(ok, "{file}: {stderr}");
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        assert_eq!(lines.len(), cases.len(), "{file}");
        for (case, line) in cases.iter().zip(&lines) {
            assert_eq!(line["name"], case["name"]);
            for field in ["mask", "preferred", "admit"] {
                if let Some(expected) = case["expect"].get(field) {
                    let got = &line[field];
                    // Masks compare as sets; the corpus lists ids ascending.
                    assert_eq!(got, expected, "{file}: {} field {field}", case["name"]);
                }
            }
        }
    }
}

#[test]
fn yaml_input_is_accepted() {
    let case = "kind: merge\nname: yaml\nnuma_nodes: [0, 1]\npolicy: best-effort\nproviders:\n  - cpu:\n      - mask: [1]\n        preferred: true\n";
    let (stdout, _, ok) = pinion(&["hints", "-o", "json", "-"], case);
    assert!(ok);
    assert_eq!(
        stdout,
        "{\"name\":\"yaml\",\"mask\":[1],\"preferred\":true,\"admit\":true}\n"
    );
}
