//! Issue 13 end to end: the real agent binary on a real machine's sysfs
//! tree from `../shared/topologies` (read in place through a sysroot of
//! symlinks) and a cgroup v2 hierarchy that is a plain directory (the
//! harness of `crash_burst.rs`). Three pinned runs are placed, the
//! checkpoint is deleted, truncated or damaged, the agent restarts — and
//! nothing moves, the damaged file is kept, the metric counts the rebuild
//! and `pinion ps` says what happened. Then the configuration changes under
//! a running exclusive workload, and the agent migrates instead of exiting.
//!
//! Issue 27 from outside, with the released binaries: a damaged journal
//! (items 1A and 1B), a partial config file (item 2) and the rebuild on
//! 2-, 3- and 4-CPU machines (item 3) keep every acknowledged run on its
//! CPUs.

mod common;

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;
use pinion_api::local::RunRequest;
use pinion_api::Client;
use pinion_core::checkpoint;

/// 2 sockets × 20 cores × 2 threads.
const MACHINE: &str = "topologies/x86-2s-intel-xeon-gold-6230-ht-snc2";
/// Upper bound for waiting on the agent (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);
const STATIC: &str = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n";

struct Node {
    dir: tempfile::TempDir,
    agent: Option<Child>,
}

impl Node {
    fn new(machine: &Path) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("sysroot");
        common::fake_cgroup_v2_sysroot(machine, &root);
        let node = Self { dir, agent: None };
        node.configure(STATIC);
        node
    }

    fn configure(&self, yaml: &str) {
        std::fs::write(self.config(), yaml).expect("config");
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("pinion.sock")
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn checkpoint(&self) -> PathBuf {
        self.state_dir().join("cpu_manager_state")
    }

    fn cgroup_root(&self) -> PathBuf {
        self.dir.path().join("sysroot/cgroup/pinion")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    fn start(&mut self) {
        common::agent_bin();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .expect("log file");
        let _ = std::fs::remove_file(self.socket());
        let agent = Command::new(BIN)
            .arg("agent")
            .arg("--config")
            .arg(self.config())
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--socket")
            .arg(self.socket())
            .arg("--sysroot")
            .arg(self.dir.path().join("sysroot"))
            .arg("--cgroup-root")
            .arg(self.cgroup_root())
            .args(["--metrics-addr", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start agent");
        self.agent = Some(agent);
        let started = Instant::now();
        while Client::new(&self.socket()).health().is_err() {
            if let Some(Ok(Some(status))) = self.agent.as_mut().map(Child::try_wait) {
                panic!("agent exited with {status}: {}", self.log());
            }
            assert!(
                started.elapsed() < PATIENCE,
                "agent did not come up: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Runs the agent expecting it to stop (a refused start): its output.
    fn start_to_failure(&self) -> std::process::Output {
        Command::new(BIN)
            .arg("agent")
            .arg("--config")
            .arg(self.config())
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--socket")
            .arg(self.socket())
            .arg("--sysroot")
            .arg(self.dir.path().join("sysroot"))
            .arg("--cgroup-root")
            .arg(self.cgroup_root())
            .args(["--metrics-addr", "127.0.0.1:0"])
            .output()
            .expect("agent runs")
    }

    fn kill(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.kill().expect("SIGKILL agent");
            agent.wait().expect("reap agent");
        }
    }

    fn run(&self, id: &str, cpus: &str) {
        assert!(self.try_run(id, cpus), "{id} got no exclusive cpus");
    }

    /// Whether the run was admitted with exclusive CPUs (`false`: refused).
    fn try_run(&self, id: &str, cpus: &str) -> bool {
        let mut request = RunRequest::new(id);
        request.cpus = Some(cpus.to_string());
        match Client::new(&self.socket()).run(&request) {
            Ok(admitted) => {
                assert!(admitted.exclusive, "{id}: {admitted:?}");
                true
            }
            Err(_) => false,
        }
    }

    fn journal(&self) -> PathBuf {
        self.state_dir().join("pinion_journal")
    }

    /// pod → CPUs, as `pinion ps` reports them.
    fn placements(&self) -> BTreeMap<String, String> {
        let snapshot = Client::new(&self.socket()).ps().expect("ps");
        snapshot
            .workloads
            .into_iter()
            .map(|w| (w.pod, w.cpus))
            .collect()
    }

    /// pod → what its cgroup's `cpuset.cpus` holds.
    fn cgroups(&self) -> BTreeMap<String, String> {
        std::fs::read_dir(self.cgroup_root())
            .expect("cgroup root")
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| {
                let cpus = std::fs::read_to_string(e.path().join("cpuset.cpus")).expect("cpus");
                (
                    e.file_name().to_string_lossy().into_owned(),
                    cpus.trim().to_string(),
                )
            })
            .collect()
    }

    fn ps_table(&self) -> String {
        let out = Command::new(BIN)
            .arg("ps")
            .arg("--socket")
            .arg(self.socket())
            .output()
            .expect("pinion ps");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The value of a counter sample on `/metrics`.
    fn metric(&self, name: &str) -> u64 {
        let log = self.log();
        let address: std::net::SocketAddr = log
            .lines()
            .rev()
            .filter(|line| line.contains("pinion agent ready"))
            .find_map(|line| line.split(' ').find_map(|w| w.strip_prefix("metrics=")))
            .and_then(|text| text.parse().ok())
            .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"));
        let mut stream = std::net::TcpStream::connect(address).expect("connect metrics");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .expect("request");
        let mut body = String::new();
        stream.read_to_string(&mut body).expect("answer");
        body.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{body}"))
    }

    /// Files of the state directory whose name starts with `prefix`.
    fn kept(&self, prefix: &str) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(self.state_dir())
            .expect("state dir")
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .collect();
        found.sort();
        found
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A node with three pinned runs placed by the agent, then killed.
fn three_pinned_runs(machine: &Path) -> (Node, BTreeMap<String, String>) {
    let mut node = Node::new(machine);
    node.start();
    node.run("pinion-run-a", "1");
    node.run("pinion-run-b", "2");
    node.run("pinion-run-c", "4");
    let before = node.placements();
    assert_eq!(before.len(), 3);
    assert_eq!(node.cgroups(), before, "cgroups hold what ps says");
    node.kill();
    (node, before)
}

/// After the restart: nothing moved, a valid checkpoint was written, the
/// rebuild was counted and `pinion ps` names it.
fn assert_rebuilt_in_place(node: &Node, before: &BTreeMap<String, String>) {
    assert_eq!(&node.placements(), before, "{}", node.log());
    assert_eq!(&node.cgroups(), before, "no cgroup was rewritten");
    let bytes = std::fs::read(node.checkpoint()).expect("a fresh checkpoint");
    let fresh = checkpoint::decode_verified(&bytes).expect("it verifies");
    let state = fresh.to_state().expect("parses");
    for (pod, cpus) in before {
        assert_eq!(
            state.assignments[pod.as_str()]["main"].to_string(),
            *cpus,
            "{pod} in the checkpoint"
        );
    }
    assert_eq!(node.metric("pinion_state_rebuilds_total"), 1);
    assert_eq!(node.metric("pinion_state_rebuild_conflicts_total"), 0);
    let table = node.ps_table();
    assert!(
        table.contains("at start: state rebuilt from 3 running workloads (3 with exclusive cpus)"),
        "{table}"
    );
}

#[test]
fn regression_deleting_the_checkpoint_no_longer_widens_pinned_runs() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    std::fs::remove_file(node.checkpoint()).expect("delete the checkpoint");
    node.start();
    assert_rebuilt_in_place(&node, &before);
    assert!(
        node.ps_table().contains("is missing"),
        "{}",
        node.ps_table()
    );
}

#[test]
fn regression_a_truncated_checkpoint_is_kept_and_rebuilt_from_the_node() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    let bytes = std::fs::read(node.checkpoint()).expect("checkpoint");
    let truncated = &bytes[..bytes.len() / 2];
    std::fs::write(node.checkpoint(), truncated).expect("truncate");
    node.start();
    assert_rebuilt_in_place(&node, &before);
    let kept = node.kept("cpu_manager_state.unreadable-");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read(&kept[0]).expect("kept"), truncated);
    // A second damage later never overwrites the first copy.
    node.kill();
    std::fs::write(node.checkpoint(), b"{").expect("damage again");
    node.start();
    assert_eq!(node.placements(), before);
    let kept = node.kept("cpu_manager_state.unreadable-");
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(std::fs::read(&kept[0]).expect("first copy"), truncated);
}

#[test]
fn a_checkpoint_failing_its_checksum_is_kept_and_rebuilt_from_the_node() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    let text = std::fs::read_to_string(node.checkpoint()).expect("checkpoint");
    let tampered = text.replace("\"checksum\":", "\"checksum\":1");
    assert_ne!(tampered, text);
    std::fs::write(node.checkpoint(), &tampered).expect("tamper");
    node.start();
    assert_rebuilt_in_place(&node, &before);
    let kept = node.kept("cpu_manager_state.unreadable-");
    assert_eq!(std::fs::read_to_string(&kept[0]).expect("kept"), tampered);
    assert!(
        node.ps_table().contains("checkpoint is corrupted"),
        "{}",
        node.ps_table()
    );
}

/// Issue 13: adding the CPU of a running exclusive workload to
/// `reservedSystemCPUs` kept the agent down until someone ran `pinion state
/// migrate` by hand. Now, with `migrateOnStart: true`, it migrates at
/// start: only that workload moves (issue 27, item 2: without the key the
/// start is refused, `regression_a_migration_that_moves_a_run_needs_migrate_on_start`).
#[test]
fn regression_reserving_a_held_cpu_migrates_at_start_and_moves_only_that_workload() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    let held = before["pinion-run-b"].clone();
    node.configure(&format!(
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0,{held}\"\nmigrateOnStart: true\n"
    ));
    node.start();
    let after = node.placements();
    assert_eq!(after["pinion-run-a"], before["pinion-run-a"]);
    assert_eq!(after["pinion-run-c"], before["pinion-run-c"]);
    let snapshot = Client::new(&node.socket()).ps().expect("ps");
    let b = snapshot
        .workloads
        .iter()
        .find(|w| w.pod == "pinion-run-b")
        .expect("b still runs");
    assert!(!b.exclusive, "{b:?}");
    assert_eq!(b.cpus, snapshot.shared_pool);
    assert_eq!(node.metric("pinion_state_migrations_total"), 1);
    assert_eq!(node.metric("pinion_state_migration_dropped_total"), 1);
    let table = node.ps_table();
    assert!(
        table.contains(&format!("moved: pinion-run-b/main from cpus {held}")),
        "{table}"
    );
    assert_eq!(node.kept("cpu_manager_state.pre-migrate-").len(), 1);
}

/// With `migrateOnStart: false` the agent refuses, says so and names the
/// command that repairs it; nothing is changed.
#[test]
fn without_migrate_on_start_the_refusal_names_the_command() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    let bytes = std::fs::read(node.checkpoint()).expect("checkpoint");
    node.configure(&format!(
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0,{}\"\nmigrateOnStart: false\n",
        before["pinion-run-b"]
    ));
    let status = node.start_to_failure();
    assert!(!status.status.success());
    let text = String::from_utf8_lossy(&status.stderr);
    assert!(text.contains("pinion state migrate"), "{text}");
    assert!(text.contains("migrateOnStart"), "{text}");
    assert_eq!(std::fs::read(node.checkpoint()).expect("untouched"), bytes);
    node.agent = None;
}

fn pinion_out(args: &[&str]) -> (bool, String) {
    let out = common::pinion(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Issue 13: `pinion state verify` failed on the agent's own state with
/// "static policy needs --num-reserved"; it now reads the agent's config
/// (`--config`) and defaults to the agent's defaults.
#[test]
fn regression_state_verify_accepts_the_agents_own_state_with_its_config() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (node, _) = three_pinned_runs(&machine);
    let (file, config) = (node.checkpoint(), node.config());
    let sysroot = node.dir.path().join("sysroot");
    let (file, config, sysroot) = (
        file.to_str().expect("utf8"),
        config.to_str().expect("utf8"),
        sysroot.to_str().expect("utf8"),
    );
    let (ok, text) = pinion_out(&[
        "state",
        "verify",
        file,
        "--config",
        config,
        "--sysroot",
        sysroot,
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("3 exclusive assignments"), "{text}");
    // Without --config: the agent's defaults (static, one cpu reserved).
    let (ok, text) = pinion_out(&["state", "verify", file, "--sysroot", sysroot]);
    assert!(ok, "{text}");
    // `migrate --config` sees the configuration change the agent would.
    let held = Client::new(&node.socket()).ps().err();
    assert!(held.is_some(), "the agent is down");
    let (ok, text) = pinion_out(&[
        "state",
        "migrate",
        file,
        "--config",
        config,
        "--sysroot",
        sysroot,
        "--dry-run",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("3 kept, 0 dropped"), "{text}");
}

/// `pinion state rebuild`: a dry run by default that names what each
/// workload keeps; `--write` writes the checkpoint the agent would, keeping
/// the unreadable one; decode errors name the repair command.
#[test]
fn state_rebuild_is_a_dry_run_until_write_and_keeps_the_damaged_file() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (node, before) = three_pinned_runs(&machine);
    std::fs::write(node.checkpoint(), b"{\"policyName\":\"sta").expect("truncate");
    let paths = [
        node.checkpoint(),
        node.config(),
        node.dir.path().join("sysroot"),
        node.state_dir(),
        node.cgroup_root(),
    ];
    let [file, config, sysroot, state, cgroups] =
        paths.each_ref().map(|p| p.to_str().expect("utf8"));

    let (ok, text) = pinion_out(&[
        "state",
        "verify",
        file,
        "--config",
        config,
        "--sysroot",
        sysroot,
    ]);
    assert!(!ok);
    assert!(text.contains("pinion state rebuild --state-dir"), "{text}");
    let (ok, text) = pinion_out(&["state", "inspect", file]);
    assert!(!ok);
    assert!(text.contains("pinion state rebuild"), "{text}");

    let common_args = [
        "state",
        "rebuild",
        "--config",
        config,
        "--sysroot",
        sysroot,
        "--state-dir",
        state,
        "--cgroup-root",
        cgroups,
    ];
    let (ok, text) = pinion_out(&common_args);
    assert!(ok, "{text}");
    for (pod, cpus) in &before {
        assert!(text.contains(&format!("kept     {pod}/main")), "{text}");
        assert!(text.contains(cpus.as_str()), "{text}");
    }
    assert!(text.contains("dry run: nothing written"), "{text}");
    assert_eq!(
        std::fs::read(node.checkpoint()).expect("untouched"),
        b"{\"policyName\":\"sta"
    );

    // An agent start that found its journal incomplete and failed left
    // its mark (session 49): the offline rebuild answers it.
    let mark = Path::new(state).join(pinion_host::journal::INCOMPLETE_MARK);
    std::fs::write(&mark, "journal … ends in an incomplete batch").expect("mark");
    let mut write = common_args.to_vec();
    write.push("--write");
    let (ok, text) = pinion_out(&write);
    assert!(ok, "{text}");
    assert!(
        !mark.exists(),
        "the rebuild written removes the mark: {text}"
    );
    let kept = node.kept("cpu_manager_state.unreadable-");
    assert_eq!(kept.len(), 1, "{text}");
    // Found from outside (session 45): the runtime's containers, in no
    // cgroup of Pinion's, are still to be rebuilt by the agent at the
    // runtime's first Synchronize; the written state says so.
    let opened = pinion_host::journal::StateStore::open(Path::new(state), "static").expect("opens");
    let pending = opened
        .side
        .get(pinion_core::record::kinds::RUNTIME_REBUILD)
        .and_then(|entries| entries.get(pinion_core::record::kinds::RUNTIME_REBUILD_PENDING));
    assert!(pending.is_some(), "{:?} / {text}", opened.side);
    drop(opened);
    let (ok, text) = pinion_out(&[
        "state",
        "verify",
        file,
        "--config",
        config,
        "--sysroot",
        sysroot,
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("3 exclusive assignments"), "{text}");
}

/// Switching `full-pcpus-only` on under running single-CPU workloads: the
/// checkpoint still passes kubelet's start checks, so the agent starts as
/// it is and nothing moves (the option applies to new admissions).
#[test]
fn switching_full_pcpus_only_on_moves_nothing() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    node.configure(&format!(
        "{STATIC}cpuManagerPolicyOptions:\n  full-pcpus-only: \"true\"\n"
    ));
    node.start();
    assert_eq!(node.placements(), before);
    assert_eq!(node.cgroups(), before);
    assert_eq!(node.metric("pinion_state_migrations_total"), 0);
    assert_eq!(node.metric("pinion_state_rebuilds_total"), 0);
    // New admissions follow the option: whole cores.
    node.run("pinion-run-d", "2");
    let d = &node.placements()["pinion-run-d"];
    let cpus = pinion_core::CpuSet::parse_list(d).expect("cpulist");
    let topology = pinion_host::discover(&machine).expect("topology");
    let cores: std::collections::BTreeSet<_> = cpus
        .iter()
        .map(|cpu| topology.cpu(cpu).map(|c| c.core))
        .collect();
    assert_eq!(cores.len(), 1, "one whole core: {d}");
}

/// The sysroot's `sys` as a tree of symlinks to the machine's, except
/// `sys/devices/system/cpu/online`: a file of its own that the test
/// rewrites to take CPUs offline and back (the rest of the machine's tree
/// is never written).
fn writable_online(machine: &Path, root: &Path) -> PathBuf {
    let sys = root.join("sys");
    std::fs::remove_file(&sys).expect("unlink the sys symlink");
    let mut from = machine.join("sys");
    let mut to = sys;
    for step in ["devices", "system", "cpu", ""] {
        std::fs::create_dir_all(&to).expect("mirror dir");
        for entry in std::fs::read_dir(&from).expect("machine dir").flatten() {
            let name = entry.file_name();
            if name == step || (step.is_empty() && name == "online") {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), to.join(&name)).expect("link");
        }
        if step.is_empty() {
            break;
        }
        from = from.join(step);
        to = to.join(step);
    }
    let online = to.join("online");
    std::fs::copy(from.join("online"), &online).expect("copy online");
    online
}

/// Issue 13: a CPU of a pinned run goes offline while the agent runs. The
/// reconcile loop notices: the run gets a replacement CPU (it keeps its
/// other one, no other run moves), the metrics count it and `pinion ps`
/// says what happened; when the CPU comes back, it joins the shared pool.
#[test]
fn a_pinned_cpu_going_offline_is_replaced_and_comes_back_to_the_shared_pool() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let mut node = Node::new(&machine);
    let online_file = writable_online(&machine, &node.dir.path().join("sysroot"));
    let all = std::fs::read_to_string(&online_file).expect("online");
    let all = pinion_core::CpuSet::parse_list(all.trim()).expect("cpulist");
    node.configure(&format!("{STATIC}cpuManagerReconcilePeriod: 50ms\n"));
    node.start();
    node.run("pinion-run-a", "2");
    node.run("pinion-run-b", "2");
    let before = node.placements();
    let list = |text: &str| pinion_core::CpuSet::parse_list(text).expect("cpulist");
    let a = list(&before["pinion-run-a"]);
    let victim = a.last().expect("a has cpus");
    let victim_set: pinion_core::CpuSet = [victim].into_iter().collect();
    std::fs::write(&online_file, all.difference(&victim_set).to_string()).expect("offline");
    let wait_for = |what: &str, done: &dyn Fn(&BTreeMap<String, String>, &str) -> bool| {
        let started = Instant::now();
        loop {
            let shared = Client::new(&node.socket()).ps().expect("ps").shared_pool;
            if done(&node.placements(), &shared) {
                return;
            }
            assert!(started.elapsed() < PATIENCE, "{what}: {}", node.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for("run a re-placed", &|p, _| {
        !list(&p["pinion-run-a"]).contains(victim)
    });
    let after = node.placements();
    let now = list(&after["pinion-run-a"]);
    assert_eq!(now.len(), 2, "as many online cpus as it asked for: {now}");
    assert!(
        a.difference(&victim_set).is_subset(&now),
        "keeps {a} minus {victim}: {now}"
    );
    assert_eq!(
        after["pinion-run-b"], before["pinion-run-b"],
        "b does not move"
    );
    assert_eq!(node.cgroups(), after, "the cgroups hold it");
    let shared = Client::new(&node.socket()).ps().expect("ps").shared_pool;
    assert!(!list(&shared).contains(victim), "{shared}");
    assert_eq!(node.metric("pinion_cpu_online_changes_total"), 1);
    assert_eq!(node.metric("pinion_cpu_offline_replaced_total"), 1);
    assert_eq!(node.metric("pinion_cpu_offline_short_total"), 0);
    let table = node.ps_table();
    assert!(
        table.contains(&format!("cpu hot-plug: cpus {victim} went offline")),
        "{table}"
    );
    assert!(
        table.contains(&format!(
            "cpu hot-plug: pinion-run-a/main had cpus {a}, now cpus {now}"
        )),
        "{table}"
    );
    let state = checkpoint::decode_verified(&std::fs::read(node.checkpoint()).expect("read"))
        .expect("verifies")
        .to_state()
        .expect("parses");
    assert_eq!(state.assignments["pinion-run-a"]["main"], now, "checkpoint");

    std::fs::write(&online_file, all.to_string()).expect("online again");
    wait_for("the cpu back in the shared pool", &|_, shared| {
        list(shared).contains(victim)
    });
    assert_eq!(node.placements(), after, "nobody moves");
    assert_eq!(node.metric("pinion_cpu_online_changes_total"), 2);
}

/// The journal's frames (offset, size) as the agent left them.
fn journal_frames(node: &Node) -> Vec<(usize, usize)> {
    let bytes = std::fs::read(node.journal()).expect("journal");
    let scan = pinion_host::journal::scan::scan(&bytes).expect("readable journal");
    scan.frames
        .iter()
        .map(|f| {
            (
                usize::try_from(f.offset).expect("offset"),
                usize::try_from(f.size).expect("size"),
            )
        })
        .collect()
}

/// Issue 27, item 1, case A: four bytes flipped in an earlier journal
/// record; the restart said "5 later records not applied" and the runs
/// became shared. The node is the truth now: nothing moves, the damaged
/// file is kept and `pinion ps` says so.
#[test]
fn regression_a_flipped_earlier_journal_record_loses_no_acknowledged_run() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    let frames = journal_frames(&node);
    assert!(frames.len() >= 3, "{frames:?}");
    let mut bytes = std::fs::read(node.journal()).expect("journal");
    let (offset, _) = frames[0];
    for byte in &mut bytes[offset + 24..offset + 28] {
        *byte ^= 0xff;
    }
    std::fs::write(node.journal(), &bytes).expect("flip");
    node.start();
    assert_eq!(node.placements(), before, "{}", node.log());
    assert_eq!(node.cgroups(), before, "no cgroup was rewritten");
    assert_eq!(node.metric("pinion_state_rebuilds_total"), 1);
    assert_eq!(node.kept("pinion_journal.damaged-").len(), 1);
    let table = node.ps_table();
    assert!(table.contains("is damaged at offset"), "{table}");
}

/// Issue 27, item 1, case B: the journal cut in the middle of the last
/// acknowledged `assign` record was called "an unfinished last batch …
/// never acknowledged", the run lost its CPUs and no copy was kept.
#[test]
fn regression_a_journal_cut_inside_an_acknowledged_record_loses_no_run() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    let frames = journal_frames(&node);
    let &(offset, size) = frames.last().expect("a frame");
    let bytes = std::fs::read(node.journal()).expect("journal");
    let cut = &bytes[..offset + size / 2];
    std::fs::write(node.journal(), cut).expect("truncate");
    node.start();
    assert_eq!(node.placements(), before, "{}", node.log());
    assert_eq!(node.cgroups(), before);
    let kept = node.kept("pinion_journal.incomplete-");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read(&kept[0]).expect("kept"), cut);
    assert!(!node.log().contains("never acknowledged"), "{}", node.log());
    let table = node.ps_table();
    assert!(table.contains("incomplete batch"), "{table}");
}

/// Issue 27, item 2: a config file that set only
/// `qosResourceManager.builtinPlugins` made the policy kubelet's `none`,
/// and the start moved running exclusive runs to the shared pool.
#[test]
fn regression_a_partial_config_file_keeps_running_runs_pinned() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, before) = three_pinned_runs(&machine);
    node.configure("reservedSystemCPUs: \"0\"\ncpuManagerReconcilePeriod: 5s\n");
    node.start();
    assert_eq!(node.placements(), before, "{}", node.log());
    assert_eq!(node.cgroups(), before);
    node.kill();
    node.configure("qosResourceManager:\n  builtinPlugins: [cpu]\n");
    node.start();
    assert_eq!(node.placements(), before, "{}", node.log());
    assert_eq!(node.cgroups(), before);
}

/// Issue 27, item 2: a migration that takes exclusive CPUs from running
/// workloads needs `migrateOnStart: true`; without it the start is refused
/// with kubelet's advice and the reason, and nothing changes.
#[test]
fn regression_a_migration_that_moves_a_run_needs_migrate_on_start() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let (mut node, _) = three_pinned_runs(&machine);
    let bytes = std::fs::read(node.checkpoint()).expect("checkpoint");
    node.configure("cpuManagerPolicy: none\n");
    let out = node.start_to_failure();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    for part in [
        "pinion-run-a/main",
        "migrateOnStart: true",
        "drain this node",
    ] {
        assert!(text.contains(part), "{part:?} missing: {text}");
    }
    assert_eq!(std::fs::read(node.checkpoint()).expect("untouched"), bytes);
    node.configure("cpuManagerPolicy: none\nmigrateOnStart: true\n");
    node.start();
    let snapshot = Client::new(&node.socket()).ps().expect("ps");
    assert_eq!(snapshot.workloads.len(), 3, "{snapshot:?}");
    assert!(
        snapshot.workloads.iter().all(|w| !w.exclusive),
        "all shared under none: {snapshot:?}"
    );
}

/// Issue 27, item 3: on a 2-CPU machine with CPU 0 reserved, `--cpus 1`
/// gets CPU 1; after the checkpoint was lost the rebuild moved it to 0-1
/// ("the shared pool would be empty"). On 2-, 3- and 4-CPU machines, with
/// and without `strict-cpu-reservation`, whatever admission placed stays.
#[test]
fn regression_rebuild_on_small_machines_keeps_what_admission_placed() {
    // Each machine with the `--cpus 1` runs admission accepts with CPU 0
    // reserved: without and with `strict-cpu-reservation` (strict keeps
    // one unreserved CPU shared).
    let machines = [
        ("topologies/x86-vm-virtualbox-i5-3317u-2vcpu", [1, 0]),
        ("topologies/s390x-kvm-z196-3cpu", [2, 1]),
        ("topologies/x86-1s-intel-i5-m560-dell-e4310-2c-ht", [3, 2]),
    ];
    for (name, expected) in machines {
        let Some(machine) = common::shared(name) else {
            return;
        };
        for (strict, expected) in [false, true].into_iter().zip(expected) {
            let mut node = Node::new(&machine);
            let options = if strict {
                "cpuManagerPolicyOptions:\n  strict-cpu-reservation: \"true\"\n"
            } else {
                ""
            };
            node.configure(&format!("{STATIC}{options}"));
            node.start();
            let mut admitted = 0;
            while admitted < 8 && node.try_run(&format!("pinion-run-{admitted}"), "1") {
                admitted += 1;
            }
            assert_eq!(admitted, expected, "{name} strict {strict}: {}", node.log());
            let before = node.placements();
            node.kill();
            std::fs::remove_file(node.checkpoint()).expect("delete the checkpoint");
            node.start();
            assert_eq!(
                node.placements(),
                before,
                "{name} strict {strict}: {}",
                node.log()
            );
            assert_eq!(node.cgroups(), before, "{name} strict {strict}");
            assert_eq!(node.metric("pinion_state_rebuild_conflicts_total"), 0);
        }
    }
}
