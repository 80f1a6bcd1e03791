//! The one harness of the CLI's tests: the runner of the `pinion` binary,
//! the locator of `../shared` (the workspace's one, shared with the other
//! crates' tests: `pinion-core/tests/common/shared.rs`) and the
//! `pinion-agent` binary for tests that start the agent.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The `pinion` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_pinion");

#[path = "../../../pinion-core/tests/common/shared.rs"]
mod locator;

#[allow(unused_imports)]
pub use locator::{shared, workspace};

/// The golden-output harness (`src/golden.rs`, shared with the unit tests).
#[path = "../../src/golden.rs"]
pub mod golden;

/// Runs `pinion ARGS…` with an empty standard input.
pub fn pinion(args: &[&str]) -> Output {
    pinion_with_stdin(args, "")
}

/// Runs `pinion ARGS…` with `stdin` as its standard input.
pub fn pinion_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pinion starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    // A command that does not read its input may close it early.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child.wait_with_output().expect("pinion finishes")
}

/// Whether `tool` is on PATH; prints why a test skips when it is not.
pub fn have(tool: &str, test: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        eprintln!("skipped: {test}: {tool} is not installed here (CI installs it: .ci/run)");
    }
    found
}

/// Standard output as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `pinion-agent` binary beside `pinion` (where `pinion agent` looks
/// for it). `cargo test --workspace` builds it; a run of this package alone
/// may not have, so it is built here (once per test binary) when absent or
/// older than the sources it is built from.
pub fn agent_bin() -> PathBuf {
    static AGENT: OnceLock<PathBuf> = OnceLock::new();
    AGENT
        .get_or_init(|| {
            let dir = Path::new(BIN).parent().expect("the binary's directory");
            let agent = dir.join("pinion-agent");
            let built = std::fs::metadata(&agent).and_then(|m| m.modified()).ok();
            if built.is_none_or(|built| newest_source().is_some_and(|source| source > built)) {
                build_agent(dir);
            }
            assert!(
                agent.is_file(),
                "{} is missing after building it",
                agent.display()
            );
            agent
        })
        .clone()
}

/// The newest modification time among the agent's workspace sources.
fn newest_source() -> Option<std::time::SystemTime> {
    fn walk(path: &Path, newest: &mut Option<std::time::SystemTime>) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                walk(&entry.path(), newest);
            }
        } else if let Ok(modified) = meta.modified() {
            *newest = (*newest).max(Some(modified));
        }
    }
    let mut newest = None;
    for krate in [
        "pinion-agent",
        "pinion-api",
        "pinion-core",
        "pinion-host",
        "pinion-nri",
    ] {
        let dir = workspace().join("crates").join(krate);
        for part in ["src", "proto", "build.rs", "Cargo.toml"] {
            walk(&dir.join(part), &mut newest);
        }
    }
    newest
}

fn build_agent(dir: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    build.args(["build", "-p", "pinion-agent", "--bin", "pinion-agent"]);
    if dir.file_name().is_some_and(|name| name == "release") {
        build.arg("--release");
    }
    let status = build
        .current_dir(workspace())
        .status()
        .expect("cargo build -p pinion-agent starts");
    assert!(status.success(), "cargo build -p pinion-agent: {status}");
}

#[path = "../../../pinion-agent/tests/common/sysroot.rs"]
mod sysroot;
pub use sysroot::fake_cgroup_v2_sysroot;

/// `pinion agent` on `machine`'s sysfs tree (from `../shared`) with its
/// cgroups in a plain directory declared as cgroup v2
/// ([`fake_cgroup_v2_sysroot`]), the agent's `config.yaml` being `config`;
/// waits until its local API and podresources sockets answer. Killed on
/// drop.
pub struct SysrootAgent {
    pub dir: tempfile::TempDir,
    agent: std::process::Child,
}

impl SysrootAgent {
    /// Upper bound for waiting on the agent (not a timing assertion).
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

    pub fn start(machine: &Path, config: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("sysroot");
        fake_cgroup_v2_sysroot(machine, &root);
        std::fs::write(dir.path().join("config.yaml"), config).expect("config");
        agent_bin();
        let log = std::fs::File::create(dir.path().join("agent.log")).expect("log");
        let agent = Command::new(BIN)
            .arg("agent")
            .arg("--config")
            .arg(dir.path().join("config.yaml"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--socket")
            .arg(dir.path().join("pinion.sock"))
            .arg("--podresources-socket")
            .arg(dir.path().join("podresources.sock"))
            .arg("--sysroot")
            .arg(&root)
            .arg("--cgroup-root")
            .arg(root.join("cgroup/pinion"))
            .args(["--metrics-addr", "127.0.0.1:0", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start agent");
        let mut node = Self { dir, agent };
        let started = std::time::Instant::now();
        while pinion_api::Client::new(&node.socket()).health().is_err()
            || std::os::unix::net::UnixStream::connect(node.podresources()).is_err()
        {
            if let Ok(Some(status)) = node.agent.try_wait() {
                panic!("agent exited with {status}: {}", node.log());
            }
            assert!(
                started.elapsed() < Self::PATIENCE,
                "agent did not come up: {}",
                node.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        node
    }

    /// The local API socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("pinion.sock")
    }

    /// The podresources socket.
    pub fn podresources(&self) -> PathBuf {
        self.dir.path().join("podresources.sock")
    }

    /// Pinion's cgroup root in the fake hierarchy.
    pub fn cgroup_root(&self) -> PathBuf {
        self.dir.path().join("sysroot/cgroup/pinion")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }
}

impl Drop for SysrootAgent {
    fn drop(&mut self) {
        let _ = self.agent.kill();
        let _ = self.agent.wait();
    }
}
