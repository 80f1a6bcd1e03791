//! `pinion state inspect` on kubelet checkpoint files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SPEC_POD: &str = r#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}"#;

fn pinion(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pinion"))
        .args(args)
        .output()
        .expect("run pinion")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write checkpoint");
    path
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("utf8 stdout")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("utf8 stderr")
}

/// The checksum corpus: (name, file text, checksum), or None when absent.
fn corpus() -> Option<Vec<(String, String, u64)>> {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("../shared/conformance/kubelet/checkpoint_checksum.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("skipped: ../shared not found\n"),
        );
        return None;
    };
    let cases: Vec<serde_json::Value> = serde_json::from_str(&text).expect("corpus json");
    let cases = cases
        .iter()
        .map(|case| {
            (
                case["name"].as_str().expect("name").to_string(),
                case["file"].as_str().expect("file").to_string(),
                case["fnv1a32"].as_u64().expect("checksum"),
            )
        })
        .collect();
    Some(cases)
}

#[test]
fn corpus_files_report_a_valid_checksum() {
    let Some(cases) = corpus() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, file, sum) in cases {
        let path = write(dir.path(), "cpu_manager_state", &file);
        let output = pinion(&["state", "inspect", path.to_str().expect("path")]);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
        let text = stdout(&output);
        assert!(text.contains("format    v2\n"), "{name}: {text}");
        assert!(
            text.contains(&format!("checksum  valid (stored {sum} = computed)\n")),
            "{name}: {text}"
        );
    }
}

#[test]
fn tampered_corpus_file_reports_an_invalid_checksum() {
    let Some(cases) = corpus() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, file, sum) in cases {
        let tampered = file.replace("none", "nonf");
        assert_ne!(tampered, file);
        let path = write(dir.path(), "cpu_manager_state", &tampered);
        let output = pinion(&["state", "inspect", path.to_str().expect("path")]);
        assert!(!output.status.success(), "{name}: tampered file must fail");
        let text = stdout(&output);
        assert!(
            text.contains(&format!("INVALID: stored {sum}, computed ")),
            "{name}: {text}"
        );
        assert!(
            stderr(&output).contains("checkpoint is corrupted"),
            "{name}"
        );
    }
}

#[test]
fn text_view_is_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "state", SPEC_POD);
    let output = pinion(&["state", "inspect", path.to_str().expect("path")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let expected = format!(
        "file      {}\n\
         format    v2\n\
         policy    none\n\
         default   1-3 (3 CPUs)\n\
         entries   1 pod (2 containers)\n\
         \x20 pod pod\n\
         \x20   container1  4-6 (3 CPUs)\n\
         \x20   container2  1-3 (3 CPUs)\n\
         checksum  valid (stored 3610638499 = computed)\n",
        path.display()
    );
    assert_eq!(stdout(&output), expected);
}

#[test]
fn json_view_has_stored_and_computed_checksums() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "state", &SPEC_POD.replace("4-6", "4-7"));
    let output = pinion(&[
        "state",
        "inspect",
        "--format",
        "json",
        path.to_str().expect("path"),
    ]);
    assert!(!output.status.success());
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("json report");
    assert_eq!(report["version"], "v2");
    assert_eq!(report["checksum"]["status"], "invalid");
    assert_eq!(report["checksum"]["stored"], 3_610_638_499_u64);
    assert_ne!(report["checksum"]["computed"], report["checksum"]["stored"]);
    assert_eq!(report["entries"]["pod"]["container1"]["count"], 4);
    assert_eq!(report["problems"][0], "checkpoint is corrupted");
}

#[test]
fn legacy_zero_checksum_and_v1_entries_are_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 =
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"cid-1":"1-2"},"checksum":0}"#;
    let path = write(dir.path(), "state", v1);
    let output = pinion(&["state", "inspect", path.to_str().expect("path")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("format    v1\n"), "{text}");
    assert!(text.contains("  cid-1  1-2 (2 CPUs)\n"), "{text}");
    assert!(
        text.contains("checksum  not checked: a stored 0 is accepted as legacy"),
        "{text}"
    );
}

#[test]
fn unreadable_or_truncated_files_fail_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let truncated = write(dir.path(), "cut", &SPEC_POD[..40]);
    let output = pinion(&["state", "inspect", truncated.to_str().expect("path")]);
    assert!(!output.status.success());
    assert!(stdout(&output).is_empty());
    assert!(
        stderr(&output).contains("checkpoint is truncated"),
        "{}",
        stderr(&output)
    );

    let missing = dir.path().join("missing");
    let output = pinion(&["state", "inspect", missing.to_str().expect("path")]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("cannot read"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn unparsable_cpuset_is_reported_with_kubelets_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file =
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"p":{"c":"3-1"}},"checksum":0}"#;
    let path = write(dir.path(), "state", file);
    let output = pinion(&["state", "inspect", path.to_str().expect("path")]);
    assert!(!output.status.success());
    assert!(
        stdout(&output).contains("3-1 (INVALID: "),
        "{}",
        stdout(&output)
    );
    assert!(
        stderr(&output).contains(r#"could not parse cpuset "3-1" for container "c" in pod "p""#),
        "{}",
        stderr(&output)
    );
}
