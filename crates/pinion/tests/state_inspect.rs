//! `pinion state inspect` on kubelet checkpoint files.

mod common;

use std::path::{Path, PathBuf};

use common::{pinion, stderr, stdout};

const SPEC_POD: &str = r#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write checkpoint");
    path
}

/// The checksum corpus: (name, file text, checksum), or None when absent.
fn corpus() -> Option<Vec<(String, String, u64)>> {
    let path = common::shared("conformance/kubelet/checkpoint_checksum.json")?;
    let text = std::fs::read_to_string(&path).expect("corpus file is readable");
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
        "-o",
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
    assert!(
        stdout(&output).contains("DAMAGED   checkpoint is truncated"),
        "{}",
        stdout(&output)
    );
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

mod journal {
    use std::path::Path;

    use pinion_core::record::{diff, SideData};
    use pinion_core::state::State;
    use pinion_core::CpuSet;
    use pinion_host::journal::{StateStore, JOURNAL};
    use pinion_host::store::CPU_MANAGER_STATE;

    use super::{pinion, stderr, stdout};

    fn list(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    /// A state directory: checkpoint 0-7 compacted, then two flushed
    /// admissions (a: 2-3, b: 4).
    fn state_dir(dir: &Path) {
        let mut store = StateStore::open(dir, "static").expect("open").store;
        let initial = State {
            default: list("0-7"),
            ..State::default()
        };
        store.compact(&initial, &SideData::new()).expect("compact");
        let mut state = initial;
        for (pod, cpus) in [("a", "2-3"), ("b", "4")] {
            let mut next = state.clone();
            next.assign(pod, "main", list(cpus));
            next.default = next.default.difference(&list(cpus));
            for record in diff(&state, &next) {
                store.record(&record).expect("record");
            }
            store.flush().expect("flush");
            state = next;
        }
    }

    fn inspect(path: &Path, json: bool) -> std::process::Output {
        let mut args = vec!["state", "inspect", path.to_str().expect("path")];
        if json {
            args.extend(["-o", "json"]);
        }
        pinion(&args)
    }

    #[test]
    fn checkpoint_and_journal_are_shown_together() {
        let dir = tempfile::tempdir().expect("tempdir");
        state_dir(dir.path());
        let output = inspect(&dir.path().join(CPU_MANAGER_STATE), false);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = stdout(&output);
        let journal = dir.path().join(JOURNAL);
        let expected = format!(
            "journal   {}\n\
             \x20 generation 2, policy static, base sequence 1\n\
             \x20 extends   the checkpoint beside it (every record replays)\n\
             \x20 records   4 (sequence 2-5; * ends a flush)\n\
             \x20        2   {{\"op\":\"assign\",\"pod\":\"a\",\"container\":\"main\",\"cpus\":\"2-3\"}}\n\
             \x20        3 * {{\"op\":\"set-default\",\"cpus\":\"0-1,4-7\"}}\n\
             \x20        4   {{\"op\":\"assign\",\"pod\":\"b\",\"container\":\"main\",\"cpus\":\"4\"}}\n\
             \x20        5 * {{\"op\":\"set-default\",\"cpus\":\"0-1,5-7\"}}\n\
             \x20 tail      clean\n\
             \x20 restart   default 0-1,5-7 (5 CPUs), 2 pods (2 containers); records: 4 replayed, 0 already in the checkpoint, 0 not applied\n",
            journal.display()
        );
        assert!(
            text.contains("default   0-7 (8 CPUs)\n"),
            "the checkpoint first: {text}"
        );
        assert!(text.ends_with(&expected), "{text}");
    }

    #[test]
    fn json_report_has_the_journal() {
        let dir = tempfile::tempdir().expect("tempdir");
        state_dir(dir.path());
        let output = inspect(&dir.path().join(CPU_MANAGER_STATE), true);
        assert!(output.status.success(), "{}", stderr(&output));
        let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("json");
        let journal = &report["journal"];
        assert_eq!(journal["basis"], "checkpoint");
        assert_eq!(journal["last_seq"], 5);
        assert_eq!(journal["frames"][1]["entry"]["op"], "set-default");
        assert_eq!(journal["frames"][1]["commit"], true);
        assert_eq!(journal["tail"]["status"], "clean");
        assert_eq!(journal["restart"]["containers"], 2);
    }

    /// The e2e scripts and other tools read the durable state between
    /// compactions with `--effective`: kubelet's file, journal replayed.
    #[test]
    fn effective_format_prints_the_checkpoint_a_restart_would_start_from() {
        let dir = tempfile::tempdir().expect("tempdir");
        state_dir(dir.path());
        for file in [dir.path().join(CPU_MANAGER_STATE), dir.path().join(JOURNAL)] {
            let output = pinion(&[
                "state",
                "inspect",
                file.to_str().expect("path"),
                "--effective",
            ]);
            assert!(output.status.success(), "{}", stderr(&output));
            let checkpoint =
                pinion_core::checkpoint::decode_verified(stdout(&output).trim_end().as_bytes())
                    .expect("kubelet's format with a valid checksum");
            let state = checkpoint.to_state().expect("state");
            assert_eq!(state.default_cpu_set, list("0-1,5-7"), "{}", file.display());
            assert_eq!(state.assignments["a"]["main"], list("2-3"));
            assert_eq!(state.assignments["b"]["main"], list("4"));
            // The file on disk is still the compacted one.
            let on_disk = std::fs::read(dir.path().join(CPU_MANAGER_STATE)).expect("read");
            assert!(String::from_utf8_lossy(&on_disk).contains("\"defaultCpuSet\":\"0-7\""));
        }
    }

    #[test]
    fn effective_format_refuses_a_journal_damaged_in_the_middle() {
        let dir = tempfile::tempdir().expect("tempdir");
        state_dir(dir.path());
        let path = dir.path().join(JOURNAL);
        let mut bytes = std::fs::read(&path).expect("journal");
        let scan = pinion_host::journal::scan::scan(&bytes).expect("scan");
        let first = scan.frames.first().expect("frame");
        bytes[usize::try_from(first.offset).expect("offset") + 30] ^= 0x10;
        std::fs::write(&path, &bytes).expect("damage");
        let output = pinion(&[
            "state",
            "inspect",
            dir.path().join(CPU_MANAGER_STATE).to_str().expect("path"),
            "--effective",
        ]);
        assert!(!output.status.success());
        assert!(stdout(&output).is_empty(), "{}", stdout(&output));
        assert!(
            stderr(&output).contains(&format!(
                "journal {} is damaged at offset 4096",
                path.display()
            )),
            "{}",
            stderr(&output)
        );
    }

    #[test]
    fn a_torn_tail_is_shown_but_not_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        state_dir(dir.path());
        let path = dir.path().join(JOURNAL);
        let mut bytes = std::fs::read(&path).expect("journal");
        let scan = pinion_host::journal::scan::scan(&bytes).expect("scan");
        let last = scan.frames.last().expect("frame");
        let at = usize::try_from(last.offset).expect("offset") + 30;
        bytes[at] ^= 0x10;
        std::fs::write(&path, &bytes).expect("tear");
        let output = inspect(&dir.path().join(CPU_MANAGER_STATE), false);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = stdout(&output);
        assert!(text.contains("  tail      torn at offset "), "{text}");
        assert!(
            text.contains("an incomplete last batch, not replayed (1 readable records: 4)"),
            "{text}"
        );
        assert!(
            text.contains("restart   default 0-1,4-7 (6 CPUs), 1 pod (1 container)"),
            "{text}"
        );
    }

    #[test]
    fn damage_in_the_middle_fails_and_names_what_would_not_be_applied() {
        let dir = tempfile::tempdir().expect("tempdir");
        state_dir(dir.path());
        let path = dir.path().join(JOURNAL);
        let mut bytes = std::fs::read(&path).expect("journal");
        let scan = pinion_host::journal::scan::scan(&bytes).expect("scan");
        let first = scan.frames.first().expect("frame");
        bytes[usize::try_from(first.offset).expect("offset") + 30] ^= 0x10;
        std::fs::write(&path, &bytes).expect("damage");
        let output = inspect(&dir.path().join(CPU_MANAGER_STATE), false);
        assert!(!output.status.success());
        let text = stdout(&output);
        assert!(
            text.contains("DAMAGED at offset 4096 (frame checksum mismatch"),
            "{text}"
        );
        assert!(
            text.contains("acknowledged records 3, 4, 5 would not be applied"),
            "{text}"
        );
        assert!(
            stderr(&output).contains("journal damaged at offset 4096"),
            "{}",
            stderr(&output)
        );
        // The journal file alone, too.
        let output = inspect(&path, false);
        assert!(!output.status.success());
        assert!(stdout(&output).starts_with(&format!("journal   {}\n", path.display())));
    }

    #[test]
    fn a_superseded_journal_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        state_dir(dir.path());
        let checkpoint = dir.path().join(CPU_MANAGER_STATE);
        let other = pinion_core::checkpoint::encode("static", "0-6", &Default::default());
        std::fs::write(&checkpoint, other).expect("replaced by an operator");
        let output = inspect(&checkpoint, false);
        assert!(!output.status.success());
        assert!(
            stdout(&output).contains("extends   NOT the checkpoint beside it"),
            "{}",
            stdout(&output)
        );
        assert!(
            stderr(&output).contains("replaced outside pinion"),
            "{}",
            stderr(&output)
        );
    }
}

/// Issue 13: `state inspect` printed only the decode error of a damaged
/// file. It now shows what can be read — the fields and the entries
/// complete before the cut — and the checksum the readable content would
/// have, and still fails.
#[test]
fn regression_a_truncated_checkpoint_shows_its_readable_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cut = SPEC_POD.find(r#""container2""#).expect("container2") + 5;
    let path = write(dir.path(), "cpu_manager_state", &SPEC_POD[..cut]);
    let output = pinion(&["state", "inspect", path.to_str().expect("path")]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("pinion state rebuild"),
        "{}",
        stderr(&output)
    );
    let readable = pinion_core::checkpoint::Checkpoint::new(
        "none",
        "1-3",
        [(
            "pod".to_string(),
            [("container1".to_string(), "4-6".to_string())]
                .into_iter()
                .collect(),
        )]
        .into_iter()
        .collect(),
    );
    let text = stdout(&output);
    let (first, rest) = text.split_once('\n').expect("lines");
    assert_eq!(first, format!("file      {}", path.display()));
    assert!(
        rest.starts_with("DAMAGED   checkpoint is truncated: "),
        "{text}"
    );
    let after = &rest[rest.find("\nreadable").expect("readable") + 1..];
    let expected = format!(
        "readable  what is complete before that point:\n\
         policy    none\n\
         default   1-3 (3 CPUs)\n\
         entries   1 pod (1 container), cut inside pod pod\n\
         \x20 pod pod\n\
         \x20   container1  4-6 (3 CPUs)\n\
         checksum  none stored (not reached); the readable content's would be {}\n",
        readable.stored_checksum()
    );
    assert_eq!(after, expected);
}

#[test]
fn a_file_cut_before_its_checksum_says_which_checksum_it_should_have() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cut = SPEC_POD.find(r#", "checksum""#).expect("checksum");
    let path = write(dir.path(), "cpu_manager_state", &SPEC_POD[..cut]);
    let output = pinion(&[
        "state",
        "inspect",
        "-o",
        "json",
        path.to_str().expect("path"),
    ]);
    assert!(!output.status.success());
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("json report");
    assert_eq!(report["policy"], "none");
    assert_eq!(report["entries"]["pod"]["container2"]["cpus"], "1-3");
    assert_eq!(report["checksum"]["stored"], serde_json::Value::Null);
    // Everything but the checksum is there: it should have the original's.
    assert_eq!(report["checksum"]["computed"], 3_610_638_499_u64);
    assert!(
        report["damaged"]
            .as_str()
            .expect("reason")
            .starts_with("checkpoint is truncated"),
        "{report}"
    );

    // Whole but followed by garbage: both checksums are there.
    let path = write(dir.path(), "cpu_manager_state", &format!("{SPEC_POD} x"));
    let output = pinion(&["state", "inspect", path.to_str().expect("path")]);
    assert!(!output.status.success());
    let text = stdout(&output);
    assert!(
        text.contains("DAMAGED   checkpoint is not valid json"),
        "{text}"
    );
    assert!(
        text.contains("checksum  stored 3610638499; the readable content's would be 3610638499\n"),
        "{text}"
    );
}

/// Regression: `state inspect -` looked for a file named `-`. A checkpoint
/// piped in (e.g. `kubectl exec … cat /var/lib/kubelet/cpu_manager_state |
/// pinion state inspect -`) is read from standard input; what needs the
/// files beside it (the journal, `--effective`) is refused by name.
#[test]
fn regression_a_dash_reads_the_checkpoint_from_standard_input() {
    let output = common::pinion_with_stdin(&["state", "inspect", "-"], SPEC_POD);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("file      standard input\n"), "{text}");
    assert!(text.contains("    container1  4-6 (3 CPUs)\n"), "{text}");
    assert!(
        text.contains("checksum  valid (stored 3610638499 = computed)\n"),
        "{text}"
    );

    let tampered = SPEC_POD.replace("none", "nonf");
    let output = common::pinion_with_stdin(&["state", "inspect", "-"], &tampered);
    assert!(!output.status.success());
    assert!(stdout(&output).contains("INVALID: stored 3610638499"));

    let output = common::pinion_with_stdin(&["state", "inspect", "-"], "{\"policyName\": \"st");
    assert!(!output.status.success());
    assert!(stdout(&output).contains("DAMAGED"));
    assert!(
        stderr(&output).contains("cannot decode checkpoint standard input"),
        "{}",
        stderr(&output)
    );

    let output = common::pinion_with_stdin(&["state", "inspect", "-", "--effective"], SPEC_POD);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("give the checkpoint's path, not -"),
        "{}",
        stderr(&output)
    );
}
