//! `pinion simulate`: the example scenario, batch files, construction
//! errors, bad input, and corpus policy cases through the binary.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn pinion(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pinion"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pinion runs");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("write stdin");
    drop(input);
    child.wait_with_output().expect("pinion finishes")
}

fn example() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scenarios/dual-socket-smt.yaml");
    root.to_string_lossy().into_owned()
}

fn stdout_json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[test]
fn example_scenario_json_reports_every_step() {
    let lines = stdout_json_lines(&pinion(&["simulate", "--format", "json", &example()], None));
    assert_eq!(lines.len(), 1);
    let out = &lines[0];
    assert!(out.get("name").is_none(), "single scenarios carry no name");
    assert_eq!(out["reserved"], "0,16");
    let steps = out["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 7);
    assert_eq!(
        steps[1]["cpus"],
        Value::Null,
        "burstable pod runs in the shared pool"
    );
    assert_eq!(
        steps[3]["cpus"], "1-2,17-18",
        "postgres reuses the init container's core and takes one more"
    );
    assert_eq!(
        steps[4]["error"],
        "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    );
    assert_eq!(out["assignments"]["db/postgres"], "1-2,17-18");
    assert!(
        out["assignments"].get("db/migrate").is_none(),
        "removed init container is gone"
    );
}

#[test]
fn example_scenario_text_shows_a_cpu_map() {
    let out = pinion(&["simulate", &example()], None);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[0 R 16 R]"), "{text}");
    assert!(text.contains("[1 B 17 B]"), "{text}");
    assert!(text.contains("FAILED: SMT Alignment Error"), "{text}");
    assert!(
        text.contains("B  db/postgres (1-2,17-18, 4 cpus)"),
        "{text}"
    );
}

#[test]
fn batch_prints_one_named_line_per_scenario_including_construction_errors() {
    let batch = r#"[
      {"name": "bad option", "machine": {"sockets": 1, "numa_per_socket": 1, "cores_per_socket": 2, "threads_per_core": 1},
       "num_reserved": 1, "options": {"full-pcpus-only": "maybe"}},
      {"name": "too many reserved", "machine": {"sockets": 1, "numa_per_socket": 1, "cores_per_socket": 2, "threads_per_core": 1},
       "num_reserved": 3},
      {"name": "ok", "machine": {"sockets": 1, "numa_per_socket": 1, "cores_per_socket": 2, "threads_per_core": 1},
       "num_reserved": 1, "steps": [{"op": "start"}]}
    ]"#;
    let lines = stdout_json_lines(&pinion(&["simulate", "--format", "json", "-"], Some(batch)));
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["name"], "bad option");
    assert_eq!(
        lines[0]["error"],
        "bad value for option \"full-pcpus-only\": strconv.ParseBool: parsing \"maybe\": invalid syntax"
    );
    assert_eq!(
        lines[1]["error"],
        "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 3)"
    );
    assert_eq!(lines[2]["default"], "0-1");
}

#[test]
fn malformed_scenarios_fail_with_a_clear_message() {
    let out = pinion(&["simulate", "-"], Some("steps: [ {op: jump} ]"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("scenario 0") && err.contains("jump"), "{err}");

    let out = pinion(&["simulate", "-"], Some("{\"steps\": []}"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no topology"));

    let out = pinion(&["simulate", "/nonexistent/scenario.yaml"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/scenario.yaml"));
}

#[test]
fn corpus_policy_file_runs_through_the_binary() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/kubelet/TestStaticPolicyAdd.json");
    if !file.is_file() {
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!("skipped: ../shared not found\n"),
        );
        return;
    }
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    let lines = stdout_json_lines(&pinion(
        &["simulate", "--format", "json", &file.to_string_lossy()],
        None,
    ));
    assert_eq!(lines.len(), cases.len());
    for (case, line) in cases.iter().zip(&lines) {
        assert_eq!(case["name"], line["name"]);
        if let Some(want) = case.get("expect_default").and_then(Value::as_str) {
            assert_eq!(line["default"], want, "{}", case["name"]);
        }
    }
}
