//! Crash test of the journal: a child (this test binary, re-executed) runs
//! a scenario — open, initial compaction, three batches of admissions, a
//! compaction, a release — through a file layer that aborts the process
//! before, in the middle of (writes), or after its n-th file operation. The
//! child notes in a side file each batch it starts and each one it
//! acknowledged (after `flush` returned). The parent restarts the store and
//! requires: no refusal to start, the state after exactly the acknowledged
//! batches — or after the one in flight too, whose bytes may have reached
//! the file before the crash (never acknowledged, never applied to anything)
//! — no damage reported, and a second restart that finds the same state
//! with nothing left to repair.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use pinion_core::record::{diff, Record, SideData};
use pinion_core::state::State;
use pinion_core::CpuSet;
use pinion_host::fileops::{FileOps, OsFiles};
use pinion_host::journal::{JournalOptions, Opened, StateStore, JOURNAL};

const AT_VAR: &str = "PINION_JOURNAL_CRASH_AT";
const DIR_VAR: &str = "PINION_JOURNAL_CRASH_DIR";
const SIGABRT: i32 = 6;
const COMPLETED: i32 = 4;
const PROGRESS: &str = "progress";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    Before,
    Middle,
    After,
}

impl When {
    const ALL: [When; 3] = [When::Before, When::Middle, When::After];

    fn name(self) -> &'static str {
        match self {
            When::Before => "before",
            When::Middle => "middle",
            When::After => "after",
        }
    }

    fn from_name(name: &str) -> When {
        When::ALL
            .into_iter()
            .find(|w| w.name() == name)
            .expect("a known crash point")
    }
}

/// Aborts at file operation number `target` (from 0), at `when`.
struct Crasher {
    count: usize,
    target: usize,
    when: When,
}

impl Crasher {
    /// Counts an operation; aborts now when it is the target and the crash
    /// comes before it; says whether to abort after it.
    fn step(&mut self) -> Option<When> {
        let now = self.count;
        self.count += 1;
        if now != self.target {
            return None;
        }
        if self.when == When::Before {
            std::process::abort();
        }
        Some(self.when)
    }
}

fn abort_if<T>(crash: Option<When>, result: io::Result<T>) -> io::Result<T> {
    if crash.is_some() {
        std::process::abort();
    }
    result
}

impl FileOps for Crasher {
    fn write_at(&mut self, file: &File, path: &Path, buf: &[u8], offset: u64) -> io::Result<usize> {
        match self.step() {
            Some(When::Middle) => {
                let _ = OsFiles.write_at(file, path, &buf[..buf.len() / 2], offset);
                std::process::abort();
            }
            crash => abort_if(crash, OsFiles.write_at(file, path, buf, offset)),
        }
    }

    fn sync_data(&mut self, file: &File, path: &Path) -> io::Result<()> {
        let crash = self.step();
        abort_if(crash, OsFiles.sync_data(file, path))
    }

    fn sync_all(&mut self, file: &File, path: &Path) -> io::Result<()> {
        let crash = self.step();
        abort_if(crash, OsFiles.sync_all(file, path))
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let crash = self.step();
        abort_if(crash, OsFiles.rename(from, to))
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        let crash = self.step();
        abort_if(crash, OsFiles.sync_dir(dir))
    }
}

fn list(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn initial() -> State {
    State {
        default: list("0-31"),
        ..State::default()
    }
}

/// The scenario's batches of decisions, as (state after, records); the
/// step index is what the child notes.
fn batches() -> Vec<(State, Vec<Record>)> {
    let admissions: [&[(&str, &str)]; 3] = [
        &[("a", "2-3")],
        &[("b", "4-5"), ("c", "6"), ("d", "7-9")],
        &[("e", "10"), ("f", "11-12")],
    ];
    let mut state = initial();
    let mut out = Vec::new();
    for batch in admissions {
        let mut records = Vec::new();
        for (pod, cpus) in batch {
            let mut next = state.clone();
            next.assign(pod, "main", list(cpus));
            next.default = next.default.difference(&list(cpus));
            records.extend(diff(&state, &next));
            state = next;
        }
        out.push((state.clone(), records));
    }
    let mut released = state.clone();
    let cpus = released.unassign("b", "main").expect("b admitted");
    released.default.union_with(&cpus);
    let records = diff(&state, &released);
    out.push((released, records));
    out
}

/// The state after `step` noted steps: 0 nothing, 1 the initial
/// compaction, 2.. the batches (the compaction between the third batch and
/// the release changes no state).
fn state_after(step: usize) -> Option<State> {
    match step {
        0 => None,
        1 => Some(initial()),
        n => Some(batches()[n - 2].0.clone()),
    }
}

fn note(dir: &Path, line: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(PROGRESS))
        .expect("progress file");
    writeln!(file, "{line}").expect("note");
}

fn run_scenario(dir: &Path, ops: Box<dyn FileOps>) {
    let options = JournalOptions {
        capacity: 16 << 10,
        ..JournalOptions::default()
    };
    let mut store = StateStore::open_with(dir, "static", ops, options)
        .expect("open")
        .store;
    note(dir, "begin 1");
    store
        .compact(&initial(), &SideData::new())
        .expect("initial compaction");
    note(dir, "ack 1");
    for (index, (_, records)) in batches().into_iter().enumerate() {
        let step = index + 2;
        if step == 5 {
            // Between the third batch and the release: a compaction.
            store
                .compact(&batches()[2].0, &SideData::new())
                .expect("compaction");
        }
        note(dir, &format!("begin {step}"));
        for record in &records {
            store.record(record).expect("record");
        }
        store.flush().expect("flush");
        note(dir, &format!("ack {step}"));
    }
}

/// Not a test of its own: the body of the child process.
#[test]
fn child_process_for_journal_crash_test() {
    let (Ok(at), Ok(dir)) = (std::env::var(AT_VAR), std::env::var(DIR_VAR)) else {
        return;
    };
    let (target, when) = at.split_once(':').expect("n:when");
    let crasher = Crasher {
        count: 0,
        target: target.parse().expect("a number"),
        when: When::from_name(when),
    };
    run_scenario(Path::new(&dir), Box::new(crasher));
    std::process::exit(COMPLETED);
}

/// Runs the child; returns whether it crashed (false: it completed).
fn crash_child_at(dir: &Path, target: usize, when: When) -> bool {
    let exe = std::env::current_exe().expect("own test binary");
    let status = Command::new(exe)
        .args([
            "--exact",
            "journal_crash::child_process_for_journal_crash_test",
            "--test-threads=1",
        ])
        .env(AT_VAR, format!("{target}:{}", when.name()))
        .env(DIR_VAR, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("spawn child");
    match (status.signal(), status.code()) {
        (Some(SIGABRT), _) => true,
        (_, Some(COMPLETED)) => false,
        _ => panic!("child at {target}:{}: {status:?}", when.name()),
    }
}

/// (last step begun, last step acknowledged).
fn progress(dir: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(dir.join(PROGRESS)).unwrap_or_default();
    let last = |word: &str| {
        text.lines()
            .filter_map(|line| line.strip_prefix(word))
            .filter_map(|n| n.trim().parse().ok())
            .max()
            .unwrap_or(0)
    };
    (last("begin "), last("ack "))
}

fn restart(dir: &Path) -> (Option<State>, Opened) {
    let opened = StateStore::open(dir, "static")
        .unwrap_or_else(|err| panic!("a restart must never be refused: {err}"));
    let state = opened.checkpoint.as_ref().map(|checkpoint| {
        let parsed = checkpoint.to_state().expect("parses");
        State {
            default: parsed.default_cpu_set,
            assignments: parsed.assignments,
        }
    });
    (state, opened)
}

#[test]
fn crash_at_every_journal_step_loses_no_acknowledged_batch_and_applies_no_other() {
    let mut crashes = 0;
    'ops: for target in 0.. {
        for when in When::ALL {
            let dir = tempfile::tempdir().expect("tempdir");
            if !crash_child_at(dir.path(), target, when) {
                assert!(target > 10, "the scenario has more than 10 file operations");
                break 'ops;
            }
            crashes += 1;
            let at = format!("op {target} {}", when.name());
            let (begun, acked) = progress(dir.path());
            let (state, opened) = restart(dir.path());
            assert!(
                opened.recovery.damage.is_none(),
                "{at}: {:?}",
                opened.recovery
            );
            assert!(
                opened.recovery.superseded.is_none(),
                "{at}: {:?}",
                opened.recovery
            );
            let acknowledged = state_after(acked);
            let in_flight = state_after(begun);
            assert!(
                state == acknowledged || state == in_flight,
                "{at}: begun {begun}, acknowledged {acked}, restored {state:?}"
            );
            let incomplete = opened.recovery.incomplete().is_some();
            drop(opened);
            // A caller that stops before it recorded its rebuild (session
            // 49): the next open still says the journal was cut short.
            let (again, mut reopened) = restart(dir.path());
            assert_eq!(again, state, "{at}: a second restart");
            assert_eq!(
                reopened.recovery.incomplete().is_some(),
                incomplete,
                "{at}: {:?}",
                reopened.recovery
            );
            // Once it recorded it (the agent: after its start's flush), the
            // journal opens clean.
            reopened.store.rebuild_recorded().expect("recorded");
            drop(reopened);
            let (third, clean) = restart(dir.path());
            assert_eq!(third, state, "{at}: a third restart");
            assert!(
                clean.recovery.warnings().is_empty(),
                "{at}: {:?}",
                clean.recovery
            );
        }
    }
    assert!(crashes >= 90, "crashed at {crashes} points");
}

#[test]
fn journal_scenario_without_a_crash_ends_in_the_last_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    run_scenario(dir.path(), Box::new(OsFiles));
    let (state, opened) = restart(dir.path());
    assert_eq!(state, state_after(5));
    assert!(opened.recovery.warnings().is_empty());
    assert!(dir.path().join(JOURNAL).exists());
}

/// A record with a bad checksum in the middle, batches after it: the
/// restart is not refused, restores the last consistent prefix, names the
/// records it could not apply and keeps the damaged file.
#[test]
fn a_bad_checksum_in_the_middle_never_refuses_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    run_scenario(dir.path(), Box::new(OsFiles));
    let path = dir.path().join(JOURNAL);
    let bytes = std::fs::read(&path).expect("journal");
    let scan = pinion_host::journal::scan::scan(&bytes).expect("readable");
    assert!(scan.frames.len() >= 2, "{:?}", scan.frames);
    // Since the last compaction the journal holds the release only: damage
    // its first record and add a later batch after it.
    let mut opened = restart(dir.path()).1;
    let mut after = batches()[3].0.clone();
    let before = after.clone();
    after.assign("g", "main", list("20"));
    after.default = after.default.difference(&list("20"));
    for record in diff(&before, &after) {
        opened.store.record(&record).expect("record");
    }
    opened.store.flush().expect("flush");
    drop(opened);
    let scan = pinion_host::journal::scan::scan(&std::fs::read(&path).expect("read")).expect("ok");
    let victim = scan
        .frames
        .iter()
        .find(|f| matches!(f.entry, pinion_host::journal::format::Entry::Record(_)))
        .expect("a record");
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[usize::try_from(victim.offset).expect("offset") + 30] ^= 0x40;
    std::fs::write(&path, &bytes).expect("damage");

    let (state, opened) = restart(dir.path());
    assert_eq!(state, state_after(4), "the prefix before the damaged batch");
    let damage = opened.recovery.damage.clone().expect("reported");
    assert!(!damage.dropped.is_empty());
    assert_eq!(std::fs::read(&damage.aside).expect("kept"), bytes);
}
