//! `pinion state verify` and `pinion state migrate` on a small hand-built
//! sysfs tree (4 cores × 2 threads; core n = CPUs n and n+4).

mod common;

use std::fs;
use std::path::Path;
use std::process::Output;

use common::pinion;

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

fn sysfs(root: &Path) {
    let cpu = "sys/devices/system/cpu";
    for file in ["online", "present", "possible"] {
        write(root, &format!("{cpu}/{file}"), "0-7\n");
    }
    for id in 0..8 {
        let core = id % 4;
        let t = format!("{cpu}/cpu{id}/topology");
        write(root, &format!("{t}/core_id"), &format!("{core}\n"));
        write(root, &format!("{t}/physical_package_id"), "0\n");
        write(
            root,
            &format!("{t}/thread_siblings_list"),
            &format!("{core},{}\n", core + 4),
        );
        write(root, &format!("{t}/core_siblings_list"), "0-7\n");
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const STATE: &str = r#"{"policyName":"static","defaultCpuSet":"0,3-4,7","entries":{"pod-a":{"app":"1,5"},"pod-b":{"db":"2,6"}},"checksum":0}"#;

/// A temp directory with the small sysfs tree and a checkpoint holding `state`.
struct Node {
    dir: tempfile::TempDir,
    file: std::path::PathBuf,
    root: String,
    path: String,
}

impl Node {
    fn new(state: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        sysfs(dir.path());
        let file = dir.path().join("cpu_manager_state");
        fs::write(&file, state).expect("write");
        let root = dir.path().to_str().expect("utf8").to_string();
        let path = file.to_str().expect("utf8").to_string();
        Self {
            dir,
            file,
            root,
            path,
        }
    }
}

/// kubelet's two texts for a static policy without reserved CPUs, each
/// where kubelet prints it: a reservation of zero handed in directly
/// (`--num-reserved 0`, as a zero `cpu` entry reaching the CPU manager's
/// `NewManager`) is "greater than zero"; a config file reserving zero CPUs
/// (which kubelet's container manager turns into no entry at all) is
/// "unable to determine".
#[test]
fn zero_reservations_get_kubelets_text_for_where_they_come_from() {
    let node = Node::new(STATE);
    let (root, file) = (node.root.as_str(), node.path.as_str());
    let zero = pinion(&[
        "state",
        "verify",
        file,
        "--sysroot",
        root,
        "--num-reserved",
        "0",
    ]);
    assert!(!zero.status.success());
    assert!(
        text(&zero).contains(
            "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
        ),
        "{}",
        text(&zero)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    fs::write(
        &config,
        "cpuManagerPolicy: static\nsystemReserved: {cpu: \"0\"}\n",
    )
    .expect("config");
    let file_zero = pinion(&[
        "state",
        "verify",
        file,
        "--sysroot",
        root,
        "--config",
        config.to_str().expect("utf-8"),
    ]);
    assert!(!file_zero.status.success());
    assert!(
        text(&file_zero)
            .contains("[cpumanager] unable to determine reserved CPU resources for static policy"),
        "{}",
        text(&file_zero)
    );
}

#[test]
fn verify_accepts_a_valid_state_and_names_kubelets_refusal() {
    let node = Node::new(STATE);
    let (root, file) = (node.root.as_str(), node.path.as_str());

    let ok = pinion(&[
        "state",
        "verify",
        file,
        "--sysroot",
        root,
        "--num-reserved",
        "2",
    ]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(text(&ok).contains("state: valid"), "{}", text(&ok));

    let changed = pinion(&[
        "state",
        "verify",
        file,
        "--sysroot",
        root,
        "--reserved-cpus",
        "0-1",
    ]);
    assert!(!changed.status.success());
    assert!(
        text(&changed)
            .contains("not all reserved cpus: \"0-1\" are present in defaultCpuSet: \"0,3-4,7\""),
        "{}",
        text(&changed)
    );

    let policy = pinion(&[
        "state",
        "verify",
        file,
        "--sysroot",
        root,
        "--policy",
        "none",
    ]);
    assert!(!policy.status.success());
    assert!(text(&policy)
        .contains("configured policy \"none\" differs from state checkpoint policy \"static\""));
}

#[test]
fn migrate_keeps_valid_assignments_and_the_old_file() {
    let node = Node::new(STATE);
    let (dir, file) = (&node.dir, &node.file);
    let (root, path) = (node.root.as_str(), node.path.as_str());

    let dry = pinion(&[
        "state",
        "migrate",
        path,
        "--sysroot",
        root,
        "--reserved-cpus",
        "0-1",
        "--dry-run",
    ]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert_eq!(
        fs::read_to_string(file).expect("read"),
        STATE,
        "dry run writes nothing"
    );

    let out = pinion(&[
        "state",
        "migrate",
        path,
        "--sysroot",
        root,
        "--reserved-cpus",
        "0-1",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let report = text(&out);
    assert!(
        report.contains("DROPPED  pod-a/app") && report.contains("cpus 1 are reserved now"),
        "{report}"
    );
    assert!(report.contains("kept     pod-b/db"), "{report}");
    let kept = dir.path().join("cpu_manager_state.pre-migrate-1");
    assert_eq!(fs::read_to_string(kept).expect("old file kept"), STATE);

    let verify = pinion(&[
        "state",
        "verify",
        path,
        "--sysroot",
        root,
        "--reserved-cpus",
        "0-1",
    ]);
    assert!(verify.status.success(), "{}", text(&verify));
    let inspect = pinion(&["state", "inspect", path, "-o", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).expect("json");
    assert_eq!(json["checksum"]["status"], "valid", "{json}");
}

#[test]
fn migrate_refuses_a_corrupted_checkpoint() {
    let tampered = STATE.replace("\"checksum\":0", "\"checksum\":12345");
    let node = Node::new(&tampered);
    let file = &node.file;
    let (root, path) = (node.root.as_str(), node.path.as_str());
    let out = pinion(&[
        "state",
        "migrate",
        path,
        "--sysroot",
        root,
        "--num-reserved",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("checkpoint is corrupted"),
        "{}",
        text(&out)
    );
    assert_eq!(
        fs::read_to_string(file).expect("read"),
        tampered,
        "a corrupted file is never overwritten"
    );
}

/// Found from outside (thirty-third session): `pinion state migrate` wrote
/// a running agent's checkpoint without its lock; the agent's next
/// compaction overwrote the migration, or its next start took it. It is now
/// refused while the agent holds the state directory, as `state rebuild
/// --write` and `state import-qrm` are; a dry run still reads beside it.
#[test]
fn regression_migrate_refuses_while_an_agent_holds_the_state_directory() {
    let node = Node::new(STATE);
    let (root, path) = (node.root.as_str(), node.path.as_str());
    let _agent = pinion_host::lock::lock_exclusive(
        &node.dir.path().join(pinion_host::lock::STATE_LOCK_FILE),
        true,
        std::path::Path::new("/proc"),
    )
    .expect("lock");
    let args = [
        "state",
        "migrate",
        path,
        "--sysroot",
        root,
        "--reserved-cpus",
        "0-1",
    ];
    let out = pinion(&args);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("the agent is running on") && text(&out).contains("stop it first"),
        "{}",
        text(&out)
    );
    assert_eq!(
        fs::read_to_string(&node.file).expect("read"),
        STATE,
        "nothing written"
    );
    let dry = pinion(&[&args[..], &["--dry-run"]].concat());
    assert!(dry.status.success(), "{}", text(&dry));
}

/// After a crash the checkpoint lags behind Pinion's journal; `verify` and
/// `migrate` work on the state the agent starts from (checkpoint + journal).
#[test]
fn verify_and_migrate_replay_the_journal_beside_the_checkpoint() {
    use pinion_core::record::Record;
    use pinion_host::journal::StateStore;

    let node = Node::new(STATE);
    let (root, path) = (node.root.as_str(), node.path.as_str());
    let mut store = StateStore::open(node.dir.path(), "static")
        .expect("open")
        .store;
    // pod-b released after the last checkpoint.
    for record in [
        Record::Unassign {
            pod: "pod-b".into(),
            container: "db".into(),
        },
        Record::SetDefault {
            cpus: pinion_core::CpuSet::parse_list("0,2-4,6-7").expect("cpulist"),
        },
    ] {
        store.record(&record).expect("record");
    }
    store.flush().expect("flush");
    drop(store);

    let verify = pinion(&[
        "state",
        "verify",
        path,
        "--sysroot",
        root,
        "--num-reserved",
        "2",
    ]);
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(
        text(&verify).contains("journal: 2 records of "),
        "{}",
        text(&verify)
    );
    assert!(
        text(&verify).contains("shared pool 0,2-4,6-7 (6 cpus), 1 exclusive assignments"),
        "{}",
        text(&verify)
    );

    let migrate = pinion(&[
        "state",
        "migrate",
        path,
        "--sysroot",
        root,
        "--reserved-cpus",
        "0-1",
    ]);
    assert!(migrate.status.success(), "{}", text(&migrate));
    assert!(!text(&migrate).contains("pod-b"), "{}", text(&migrate));
    assert!(
        text(&migrate).contains("its journal, replayed into the migration, is kept as"),
        "{}",
        text(&migrate)
    );
    assert!(!node.dir.path().join("pinion_journal").exists());
    assert!(node
        .dir
        .path()
        .join("pinion_journal.pre-migrate-1")
        .exists());
}

/// Found from outside (session 45): `migrate` left the journal beside the
/// file it wrote. When every record of the journal was dropped by the
/// migration, the new file was byte-identical to the journal's base, so the
/// agent replayed the records on it again at its next start: the start was
/// refused as before, and `migrate` said the same thing each time. The
/// journal now goes aside with the old file.
#[test]
fn regression_migrate_does_not_leave_a_journal_that_replays_on_its_result() {
    use pinion_core::record::Record;
    use pinion_host::journal::StateStore;

    let base = r#"{"policyName":"static","defaultCpuSet":"0-7","checksum":0}"#;
    let node = Node::new(base);
    let bytes = pinion_core::checkpoint::encode("static", "0-7", &Default::default());
    fs::write(&node.file, &bytes).expect("a checkpoint with kubelet's checksum");
    let mut store = StateStore::open(node.dir.path(), "static")
        .expect("open")
        .store;
    // pod-b admitted on cpus 2,6 after the last checkpoint.
    for record in [
        Record::Assign {
            pod: "pod-b".into(),
            container: "db".into(),
            cpus: pinion_core::CpuSet::parse_list("2,6").expect("cpulist"),
        },
        Record::SetDefault {
            cpus: pinion_core::CpuSet::parse_list("0-1,3-5,7").expect("cpulist"),
        },
    ] {
        store.record(&record).expect("record");
    }
    store.flush().expect("flush");
    drop(store);
    // Reserving pod-b's CPUs drops it: the migration is the base again.
    let migrate = pinion(&[
        "state",
        "migrate",
        &node.path,
        "--sysroot",
        &node.root,
        "--reserved-cpus",
        "2,6",
    ]);
    assert!(migrate.status.success(), "{}", text(&migrate));
    let opened = StateStore::open(node.dir.path(), "static").expect("opens");
    let state = opened
        .checkpoint
        .expect("a checkpoint")
        .to_state()
        .expect("parses");
    assert!(
        state.assignments.is_empty(),
        "pod-b is not replayed again: {:?}",
        state.assignments
    );
}

/// Found from outside (session 45): with a journal cut in its last batch,
/// `verify` said "valid" (and `migrate` migrated) the checkpoint with the
/// journal's readable part, a state the agent does not start from: it sets
/// such a journal aside and rebuilds from the node. Both now say so and
/// fail, naming the rebuild.
#[test]
fn regression_verify_and_migrate_refuse_a_journal_the_agent_would_not_replay() {
    use pinion_core::record::Record;
    use pinion_host::journal::StateStore;

    let node = Node::new(STATE);
    let bytes = pinion_core::checkpoint::encode(
        "static",
        "0,3-4,7",
        &[
            (
                "pod-a".to_string(),
                [("app".to_string(), "1,5".to_string())].into(),
            ),
            (
                "pod-b".to_string(),
                [("db".to_string(), "2,6".to_string())].into(),
            ),
        ]
        .into(),
    );
    fs::write(&node.file, &bytes).expect("checkpoint");
    let mut store = StateStore::open(node.dir.path(), "static")
        .expect("open")
        .store;
    store
        .record(&Record::Unassign {
            pod: "pod-b".into(),
            container: "db".into(),
        })
        .expect("record");
    store.flush().expect("flush");
    drop(store);
    let journal = node.dir.path().join("pinion_journal");
    let frames = pinion_host::journal::scan::scan(&fs::read(&journal).expect("journal"))
        .expect("readable")
        .frames;
    let last = frames.last().expect("a frame");
    let mut cut = fs::read(&journal).expect("journal");
    cut.truncate(usize::try_from(last.offset + last.size - 1).expect("offset"));
    fs::write(&journal, cut).expect("cut");

    // Refused as the agent would not replay it; and still after an agent
    // start opened it (the tail cut, the journal marked incomplete: session
    // 49) and failed before it recorded its rebuild — the journal reads
    // cleanly then, but the agent still rebuilds, and the refusal names the
    // mark.
    for marked in [false, true] {
        if marked {
            drop(StateStore::open(node.dir.path(), "static").expect("an agent's open"));
        }
        for command in ["verify", "migrate"] {
            let out = pinion(&[
                "state",
                command,
                &node.path,
                "--sysroot",
                &node.root,
                "--num-reserved",
                "2",
            ]);
            let said = text(&out);
            assert!(!out.status.success(), "{command}: {said}");
            assert!(
                said.contains("ends in an incomplete batch")
                    && said.contains("pinion state rebuild")
                    && (!marked || said.contains("pinion_journal.rebuild-due")),
                "{command} (marked {marked}): {said}"
            );
        }
    }
}

/// Appends side-data records (kind, key, JSON value) to the journal beside
/// the node's checkpoint.
fn journal_side(node: &Node, entries: &[(&str, &str, serde_json::Value)]) {
    use pinion_core::record::{Record, SideValue};
    use pinion_host::journal::StateStore;

    let mut store = StateStore::open(node.dir.path(), "static")
        .expect("open")
        .store;
    for (kind, key, value) in entries {
        let record = Record::Side {
            kind: (*kind).to_string(),
            key: (*key).to_string(),
            value: Some(SideValue::from(value.clone())),
        };
        store.record(&record).expect("record");
    }
    store.flush().expect("flush");
}

/// Regression (issue 27, item 10e): `verify` ignored the journal's side
/// data, so pod-level CPUs overlapping another pod's exclusive CPUs and
/// promises for containers without an assignment passed as a valid state.
#[test]
fn regression_verify_checks_the_journals_side_data_against_the_state() {
    let node = Node::new(STATE);
    let (root, path) = (node.root.as_str(), node.path.as_str());
    journal_side(
        &node,
        &[
            ("pod-cpus", "pod-a", serde_json::json!("1-2,5")),
            ("promised-cpus", "pod-c", serde_json::json!({"web": "3"})),
            ("plugin-state/cpu", "pod-left", serde_json::json!({})),
        ],
    );
    let verify = pinion(&[
        "state",
        "verify",
        path,
        "--sysroot",
        root,
        "--num-reserved",
        "2",
    ]);
    let out = text(&verify);
    assert!(!verify.status.success(), "{out}");
    assert!(
        out.contains("side data: plugin-state/cpu: 1 pod, pod-cpus: 1 pod, promised-cpus: 1 pod"),
        "{out}"
    );
    assert!(
        out.contains("pod pod-a's cpus 1-2,5 overlap the exclusive cpus 2,6 of pod-b/db (cpus 2)"),
        "{out}"
    );
    assert!(
        out.contains("pod-c/web was promised cpus 3 but has no assignment"),
        "{out}"
    );
    assert!(
        out.contains("warning: plugin-state/cpu: pod pod-left"),
        "{out}"
    );
    assert!(
        out.contains("side data disagrees with the state (2 problems)"),
        "{out}"
    );
}

#[test]
fn verify_accepts_side_data_that_agrees_with_the_state() {
    let node = Node::new(STATE);
    let (root, path) = (node.root.as_str(), node.path.as_str());
    journal_side(
        &node,
        &[
            ("pod-cpus", "pod-a", serde_json::json!("1,5")),
            ("promised-cpus", "pod-b", serde_json::json!({"db": "2"})),
        ],
    );
    let verify = pinion(&[
        "state",
        "verify",
        path,
        "--sysroot",
        root,
        "--num-reserved",
        "2",
    ]);
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(
        text(&verify).contains("side data: pod-cpus: 1 pod, promised-cpus: 1 pod"),
        "{}",
        text(&verify)
    );
}

/// Issue 27, item 10e: `migrate` supersedes the journal, and now says which
/// side data the agent will start without.
#[test]
fn migrate_names_the_side_data_it_does_not_carry_over() {
    let node = Node::new(STATE);
    let (root, path) = (node.root.as_str(), node.path.as_str());
    journal_side(
        &node,
        &[
            ("pod-cpus", "pod-a", serde_json::json!("1,5")),
            ("plugin-state/cpu", "pod-a", serde_json::json!({})),
            ("plugin-state/cpu", "rest", serde_json::json!({})),
        ],
    );
    let migrate = pinion(&[
        "state",
        "migrate",
        path,
        "--sysroot",
        root,
        "--reserved-cpus",
        "0-1",
        "--dry-run",
    ]);
    let out = text(&migrate);
    assert!(migrate.status.success(), "{out}");
    assert!(
        out.contains(
            "not carried over: the journal's side data (plugin-state/cpu: 1 pod, pod-cpus: 1 pod)"
        ),
        "{out}"
    );
}
