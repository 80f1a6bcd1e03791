//! `pinion simulate`: the example scenario, batch files, construction
//! errors, bad input, and corpus policy cases through the binary.

mod common;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

fn pinion(args: &[&str], stdin: Option<&str>) -> Output {
    common::pinion_with_stdin(args, stdin.unwrap_or(""))
}

fn example() -> String {
    scenario("dual-socket-smt.yaml")
}

fn scenario(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/scenarios")
        .join(name);
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
    let lines = stdout_json_lines(&pinion(&["simulate", "-o", "json", &example()], None));
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

/// The hybrid example (docs/simulate.md): kubelet's rule since
/// kubernetes/kubernetes#140498 — the reserved CPU is never handed out and a
/// half-used P-core is never taken whole (kubelet before the fix gave `pair`
/// CPUs 4-5, CPU 4 twice).
#[test]
fn hybrid_example_keeps_half_used_p_cores_and_the_reserved_cpu() {
    let path = scenario("hybrid-p-e-cores.yaml");
    let lines = stdout_json_lines(&pinion(&["simulate", "-o", "json", &path], None));
    let steps = lines[0]["steps"].as_array().expect("steps");
    let cpus: Vec<&str> = steps[1..]
        .iter()
        .map(|s| s["cpus"].as_str().expect("exclusive cpus"))
        .collect();
    assert_eq!(cpus, ["16-17", "18-23", "1", "2-4", "6-7"]);
    let text = String::from_utf8_lossy(&pinion(&["simulate", &path], None).stdout).into_owned();
    assert!(
        text.contains("[0 R 1 C] [2 E 3 E] [4 E 5 .] [6 B 7 B]"),
        "{text}"
    );
}

/// The resize example: grows only on the container's NUMA node, keeps every
/// CPU it had, shrinks back to the promised CPUs, refuses pool moves.
#[test]
fn resize_example_grows_in_place_and_keeps_the_promised_cpus() {
    let path = scenario("resize-exclusive-cpus.yaml");
    let lines = stdout_json_lines(&pinion(&["simulate", "-o", "json", &path], None));
    let steps = lines[0]["steps"].as_array().expect("steps");
    let cpus = |i: usize| steps[i]["cpus"].as_str().unwrap_or("");
    let reason = |i: usize| steps[i]["reason"].as_str().unwrap_or("");
    assert_eq!(cpus(1), "1,9");
    assert_eq!(reason(4), "TopologyAffinityError", "node 0 is full");
    assert_eq!(cpus(6), "1-2,9-10");
    assert_eq!(cpus(7), "1-3,9-11");
    assert_eq!(
        reason(8),
        "TopologyAffinityError",
        "8 CPUs do not fit node 0"
    );
    assert_eq!(cpus(9), "1,9");
    assert_eq!(reason(10), "prohibitedCPUAllocationError");
    assert_eq!(reason(11), "inconsistentCPUAllocationError");
    assert_eq!(reason(12), "inconsistentCPUAllocationError");
    let text = String::from_utf8_lossy(&pinion(&["simulate", &path], None).stdout).into_owned();
    assert!(
        text.contains("features: InPlacePodVerticalScalingExclusiveCPUs"),
        "{text}"
    );
    assert!(text.contains("step  7  resize db/postgres"), "{text}");
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
    let lines = stdout_json_lines(&pinion(&["simulate", "-o", "json", "-"], Some(batch)));
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
    let Some(file) = common::shared("conformance/kubelet/TestStaticPolicyAdd.json") else {
        return;
    };
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    let lines = stdout_json_lines(&pinion(
        &["simulate", "-o", "json", &file.to_string_lossy()],
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

/// A scenario whose later step names a container its pod does not have.
const UNKNOWN_CONTAINER: &str = r#"
machine: { sockets: 1, numa_per_socket: 1, cores_per_socket: 4, threads_per_core: 2 }
num_reserved: 1
pods:
  a:
    containers:
      - { name: c, cpu_request: "2", cpu_limit: "2", memory_request: 1Gi, memory_limit: 1Gi }
steps:
  - op: start
  - { op: add, pod: a, container: c }
  - { op: add, pod: a, container: zzz }
  - { op: remove, pod: a, container: c }
"#;

/// A step naming an unknown container was printed as "the policy cannot
/// be constructed: step 1: …" (a 0-based step number, where the text
/// numbers steps from 1), the earlier steps' outcomes were not shown, and
/// the exit status was 0.
#[test]
fn regression_a_step_naming_an_unknown_container_was_a_construction_error_with_exit_0() {
    let out = pinion(&["simulate", "-"], Some(UNKNOWN_CONTAINER));
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(!text.contains("cannot be constructed"), "{text}");
    assert!(text.contains("step  1  start"), "{text}");
    assert!(text.contains("step  2  add    a/c"), "{text}");
    assert!(!text.contains("step  3"), "{text}");
    assert!(
        stderr.contains("step 3 (add a/zzz): pod a has no container \"zzz\""),
        "{stderr}"
    );

    let out = pinion(&["simulate", "-o", "json", "-"], Some(UNKNOWN_CONTAINER));
    assert!(!out.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["steps"].as_array().expect("steps").len(), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("step 3 (add a/zzz)"));

    let resize = UNKNOWN_CONTAINER
        .replace(
            "{ op: add, pod: a, container: zzz }",
            "{ op: resize, pod: a, container: nope, cpu_request: \"3\" }",
        )
        .replace(
            "num_reserved: 1",
            "num_reserved: 1\nfeatures: { InPlacePodVerticalScalingExclusiveCPUs: true }",
        );
    let out = pinion(&["simulate", "-"], Some(&resize));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("step 3 (resize a/nope): pod a has no container \"nope\""),
        "{stderr}"
    );
}

/// In a batch the scenarios before the faulty one are printed in full, and
/// the error names the faulty one.
#[test]
fn a_faulty_step_in_a_batch_names_the_scenario_and_stops_the_run() {
    let single: Value = serde_yaml_ng::from_str(UNKNOWN_CONTAINER).expect("yaml");
    let mut ok = single.clone();
    ok["name"] = "fine".into();
    ok["steps"] = serde_json::json!([{"op": "start"}]);
    let mut bad = single;
    bad["name"] = "typo".into();
    let batch = serde_json::to_string(&[ok, bad]).expect("json");
    let out = pinion(&["simulate", "-o", "json", "-"], Some(&batch));
    assert!(!out.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "the first scenario, then the faulty one's steps"
    );
    assert_eq!(lines[0]["name"], "fine");
    assert_eq!(lines[1]["name"], "typo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("scenario 1 (typo), step 3 (add a/zzz)"),
        "{stderr}"
    );
}
