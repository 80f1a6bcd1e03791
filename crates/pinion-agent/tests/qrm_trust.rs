//! Who may be a resource plugin (issue 27, item 5), through the agent's
//! manager: a registration directory others can write to stops the start,
//! and a socket served by another user is refused before a word is
//! exchanged with it. The registration from another user runs a helper
//! process as `nobody` (uid 65534): this very test binary, re-run with
//! [`HELPER_ENV`] set, so it needs root and is skipped (with a printed
//! reason) otherwise.
#![allow(clippy::unwrap_used)]

mod qrm_common;

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use pinion_agent::qrm::registry::RegisterError;
use pinion_agent::testing::qrm_node::{QrmNode, QrmNodeOptions};
use pinion_agent::testing::{machine, SyntheticNode};
use qrm_common::{wait_until, PATIENCE};

const NOBODY: u32 = 65534;
/// Set in the helper process: the socket it listens on.
const HELPER_ENV: &str = "PINION_TEST_LISTEN_AS_NOBODY";

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn try_start(state: &Path) -> Result<QrmNode, pinion_agent::qrm::QrmError> {
    let node = SyntheticNode::new(machine(2, 4, 2));
    QrmNode::try_start(
        &node,
        state,
        &QrmNodeOptions::new(Duration::from_millis(100)),
    )
}

/// Regression (issue 27, item 5): a `pluginRegistrationDir` writable by
/// another user was accepted without a word; now the manager refuses to
/// start, naming the path, its owner and its mode — for the directory and
/// for a parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_registration_directory_writable_by_others_stops_the_start() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("plugins_registry");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o777);
    let err = try_start(state.path())
        .err()
        .expect("a 0777 directory is refused");
    let uid = pinion_host::trust::agent_uid();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot start the qos resource manager: {} (the plugin registration directory) is writable by others (owner uid {uid}, mode 0777): a registration directory must not be group- or other-writable, sticky or not",
            dir.display()
        )
    );

    // A parent writable by others without the sticky bit: anyone could
    // swap the directory for their own.
    let state = tempfile::tempdir().unwrap();
    chmod(state.path(), 0o777);
    let err = try_start(state.path())
        .err()
        .expect("a 0777 parent is refused");
    assert!(
        err.to_string().contains(&format!(
            "{} (a parent of the plugin registration directory) is writable by others (owner uid {uid}, mode 0777)",
            state.path().display()
        )),
        "{err}"
    );
    let state = tempfile::tempdir().unwrap();
    let node = try_start(state.path()).unwrap_or_else(|err| panic!("a private directory: {err}"));
    node.stop().await;
}

/// Regression (issue 27, item 5): a directory owned by another user
/// (needs root to chown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_registration_directory_owned_by_another_user_stops_the_start() {
    if pinion_host::trust::agent_uid() != 0 {
        println!("skipped: chown needs root");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("plugins_registry");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o700);
    std::os::unix::fs::chown(&dir, Some(NOBODY), None).unwrap();
    let err = try_start(state.path())
        .err()
        .expect("nobody's directory is refused");
    assert!(
        err.to_string().contains(&format!(
            "{} (the plugin registration directory) is owned by uid {NOBODY} (mode 0700): only root or the agent's uid 0 may own it",
            dir.display()
        )),
        "{err}"
    );
}

/// The helper: when [`HELPER_ENV`] names a socket, listens on it (as the
/// uid it was started with) and accepts until killed; otherwise a no-op.
#[test]
fn helper_listen_as_nobody() {
    let Some(socket) = std::env::var_os(HELPER_ENV) else {
        return;
    };
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("helper binds");
    let mut held = Vec::new();
    for stream in listener.incoming() {
        held.push(stream);
    }
}

/// This test binary re-run as `nobody`, listening on `socket`.
struct Helper(Child);

impl Helper {
    /// `dir`: a directory nobody may enter; the test binary is copied there,
    /// since the checkout it was built in may not be (a clone under a 0700
    /// `mktemp -d`, as CI makes).
    fn start(dir: &Path, socket: &Path) -> Helper {
        let exe = dir.join("qrm-trust-helper");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).expect("copy the test binary");
        chmod(&exe, 0o755);
        let child = Command::new(&exe)
            .args([
                "--exact",
                "helper_listen_as_nobody",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_ENV, socket)
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("helper starts");
        Helper(child)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Regression (issue 27, item 5): a user `nobody` registered as the `cpu`
/// plugin and decided where root's runs went. A socket whose file or
/// server belongs to another user is now refused, naming the socket and
/// the uid; the watcher never registers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_plugin_served_by_another_user_is_refused() {
    if pinion_host::trust::agent_uid() != 0 {
        println!("skipped: running a helper as nobody needs root");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    // The test binary must be reachable by nobody.
    chmod(state.path(), 0o755);
    let node = try_start(state.path()).unwrap();
    // A sub-directory (watched too) nobody may write: root made it so.
    let theirs: PathBuf = node.registry_dir().join("nobody");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    chmod(node.registry_dir(), 0o755);
    let socket = theirs.join("cpu.sock");
    let _helper = Helper::start(state.path(), &socket);
    // Not `socket.exists()`: the file appears at bind(), before listen(),
    // and a connect in between is refused (a CI run failed on that race).
    wait_until("the helper listens", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    })
    .await;

    let err = node
        .qrm
        .registry()
        .register_socket(&socket)
        .await
        .expect_err("nobody's socket is refused");
    assert!(matches!(err, RegisterError::Refused(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "plugin socket {} is owned by uid {NOBODY}: only root or the agent's uid 0 may register a resource plugin",
            socket.display()
        )
    );
    // The file handed to root, the server still nobody's: its credentials
    // decide.
    std::os::unix::fs::chown(&socket, Some(0), Some(0)).unwrap();
    let err = node
        .qrm
        .registry()
        .register_socket(&socket)
        .await
        .expect_err("a socket served by nobody is refused");
    assert_eq!(
        err.to_string(),
        format!(
            "plugin socket {} is served by a process of uid {NOBODY}: only root or the agent's uid 0 may register a resource plugin",
            socket.display()
        )
    );
    // The watcher saw the socket appear and refused it too.
    let settle = Instant::now() + Duration::from_millis(500).min(PATIENCE);
    while Instant::now() < settle {
        assert!(
            node.handle.plugins().is_empty(),
            "{:?}",
            node.handle.plugins()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.stop().await;
}
