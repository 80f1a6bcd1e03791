//! Defects of the `pinion state` tools found from outside (crash and API
//! hunts): advice that led nowhere, a panic on a closed pipe, a read
//! without a bound. Each test runs the `pinion` binary.

mod common;

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{pinion, stderr, stdout, BIN};

/// 2 sockets × 20 cores × 2 threads.
const MACHINE: &str = "topologies/x86-2s-intel-xeon-gold-6230-ht-snc2";

/// A checkpoint kubelet and the agent decode, whose one container's cpu
/// set does not parse (the crash hunt's `odd/bigcpu`).
const BIG_CPU: &str = r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"p":{"c":"9999999999"}},"checksum":0}"#;

/// Standard output and error together.
fn text(out: &Output) -> String {
    format!("{}{}", stdout(out), stderr(out))
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A node's files: a sysroot on `MACHINE` with an empty cgroup v2
/// hierarchy, the agent's config naming them, and its state directory.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new(machine: &Path) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("sysroot");
        common::fake_cgroup_v2_sysroot(machine, &root);
        std::fs::create_dir_all(dir.path().join("state")).expect("state dir");
        let node = Self { dir };
        std::fs::write(
            node.config(),
            format!(
                "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nstateDir: {}\nsysroot: {}\ncgroupRoot: {}\n",
                node.state_dir().display(),
                root.display(),
                root.join("cgroup/pinion").display()
            ),
        )
        .expect("config");
        node
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn checkpoint(&self) -> PathBuf {
        self.state_dir().join("cpu_manager_state")
    }
}

/// Crash hunt D5: on a checkpoint with an unparsable cpu set, `verify`
/// said "see `pinion state migrate` to recover without draining" and
/// `migrate` then only said "cannot read the assignments". Both now name
/// the rebuild, and the command as advised recovers the file.
#[test]
fn regression_verify_advice_on_an_unparsable_cpuset_names_a_command_that_recovers() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let node = Node::new(&machine);
    std::fs::write(node.checkpoint(), BIG_CPU).expect("checkpoint");
    let (file, config, state) = (node.checkpoint(), node.config(), node.state_dir());
    let advice = format!(
        "`pinion state rebuild --state-dir {} --config <the agent's config file>`",
        node.state_dir().display()
    );

    let out = pinion(&["state", "verify", utf8(&file), "--config", utf8(&config)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = stderr(&out);
    assert!(said.contains(&advice), "{said}");
    assert!(said.contains("9999999999"), "the reason: {said}");
    assert!(
        !said.contains("see `pinion state migrate`"),
        "migrate cannot read it: {said}"
    );

    let out = pinion(&["state", "migrate", utf8(&file), "--config", utf8(&config)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains(&advice), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&file).expect("untouched"),
        BIG_CPU,
        "a refused migration writes nothing"
    );

    // The advice, as given: a dry run, then --write.
    let rebuild = [
        "state",
        "rebuild",
        "--state-dir",
        utf8(&state),
        "--config",
        utf8(&config),
    ];
    let out = pinion(&rebuild);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout(&out).contains("dry run: nothing written"),
        "{}",
        text(&out)
    );
    let mut write = rebuild.to_vec();
    write.push("--write");
    let out = pinion(&write);
    assert!(out.status.success(), "{}", text(&out));
    let kept = node.state_dir().join("cpu_manager_state.pre-rebuild-1");
    assert_eq!(
        std::fs::read_to_string(&kept).expect("the old file is kept"),
        BIG_CPU
    );
    let out = pinion(&["state", "verify", utf8(&file), "--config", utf8(&config)]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout(&out).contains("state: valid"), "{}", text(&out));
}

/// Runs `pinion ARGS…` with standard output (and, with `both`, standard
/// error) on a pipe whose reader is already closed; standard error is
/// captured otherwise.
fn to_closed_pipe(args: &[&str], both: bool) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let error = if both {
        Stdio::from(writer.try_clone().expect("clone the pipe"))
    } else {
        Stdio::piped()
    };
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(error)
        .output()
        .expect("pinion runs")
}

/// Crash hunt D5: `pinion state inspect FILE 2>&1 | head -1` sometimes
/// exited 101, a panic printing to a pipe `head` had closed. Every
/// subcommand now ends quietly with 141 (128 + SIGPIPE) there.
#[test]
fn regression_a_closed_pipe_ends_pinion_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bigcpu");
    std::fs::write(&bad, BIG_CPU).expect("checkpoint");
    let mut runs = vec![
        vec!["state", "inspect", utf8(&bad)],
        vec!["completions", "bash"],
    ];
    let machine = common::shared(MACHINE);
    if let Some(machine) = &machine {
        runs.push(vec!["topology", "--sysroot", utf8(machine)]);
    }
    for args in &runs {
        let out = to_closed_pipe(args, false);
        assert_eq!(
            out.status.code(),
            Some(141),
            "{args:?}: {:?}: {}",
            out.status,
            stderr(&out)
        );
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
        // Standard error on the closed pipe too (`2>&1 | head`).
        let out = to_closed_pipe(args, true);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {:?}", out.status);
        assert_eq!(out.status.signal(), None, "{args:?}");
    }
}

/// API hunt: `pinion state inspect /dev/zero` read until memory ran out.
/// The state tools read at most 64 MiB of a checkpoint or journal (a
/// journal is compacted at 768 KiB) and say so, naming the file.
#[test]
fn regression_state_inspect_reads_a_checkpoint_or_journal_up_to_a_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Sparse: 64 MiB and a byte of nothing.
    let big = dir.path().join("cpu_manager_state");
    let file = std::fs::File::create(&big).expect("create");
    file.set_len((64 << 20) + 1).expect("sparse file");
    drop(file);
    let journal = dir.path().join("pinion_journal");
    let mut file = std::fs::File::create(&journal).expect("create");
    file.write_all(b"PINIONJ").expect("some bytes");
    file.set_len((64 << 20) + 1).expect("sparse file");
    drop(file);
    for path in [&big, &journal] {
        for command in ["inspect", "verify", "migrate"] {
            let out = pinion(&["state", command, utf8(path)]);
            assert_eq!(out.status.code(), Some(1), "{command}: {}", text(&out));
            let said = stderr(&out);
            assert!(
                said.contains(&format!(
                    "cannot read {}: larger than the 64 MiB cap (67108864 bytes)",
                    path.display()
                )),
                "{command}: {said}"
            );
        }
    }
    // A device is no state file: refused at once, not read up to the cap
    // (state files are opened as regular files only, without blocking).
    if Path::new("/dev/zero").exists() {
        let out = pinion(&["state", "inspect", "/dev/zero"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            stderr(&out).contains("cannot read /dev/zero: not a regular file (a character device)"),
            "{}",
            stderr(&out)
        );
    }
}
