use std::path::Path;

use pinion_core::record::diff;
use pinion_core::CpuSet;
use serde_json::json;

use super::format::{frame_size, DATA_START, FRAME_HEADER};
use super::*;
use crate::fileops::{Effect, Faults, FileOp};
use crate::store::CheckpointStore;

fn list(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn initial() -> State {
    State {
        default: list("0-15"),
        ..State::default()
    }
}

/// Admits `pod/main` on `cpus` (taken from the shared pool): new state and
/// its records.
fn admit(state: &State, pod: &str, cpus: &str) -> (State, Vec<Record>) {
    let mut next = state.clone();
    next.assign(pod, "main", list(cpus));
    next.default = next.default.difference(&list(cpus));
    let records = diff(state, &next);
    (next, records)
}

fn release(state: &State, pod: &str) -> (State, Vec<Record>) {
    let mut next = state.clone();
    if let Some(cpus) = next.unassign(pod, "main") {
        next.default.union_with(&cpus);
    }
    let records = diff(state, &next);
    (next, records)
}

fn open(dir: &Path) -> Opened {
    StateStore::open(dir, "static").expect("open")
}

fn faulty(dir: &Path) -> (Opened, crate::fileops::FaultPlan) {
    let (ops, plan) = Faults::new();
    let opened = StateStore::open_with(dir, "static", Box::new(ops), JournalOptions::default())
        .expect("open");
    (opened, plan)
}

/// The state a restart starts from.
fn restored(opened: &Opened) -> State {
    let parsed = opened
        .checkpoint
        .as_ref()
        .expect("a checkpoint")
        .to_state()
        .expect("parses");
    State {
        default: parsed.default_cpu_set,
        assignments: parsed.assignments,
    }
}

fn commit(store: &mut StateStore, records: &[Record]) -> Flushed {
    for record in records {
        store.record(record).expect("record");
    }
    store.flush().expect("flush")
}

/// A store with the initial state compacted and `batches` admissions
/// flushed one batch each; returns the states after each batch.
fn with_batches(dir: &Path, pods: &[(&str, &str)]) -> Vec<State> {
    let mut opened = open(dir);
    opened
        .store
        .compact(&initial(), &SideData::new())
        .expect("initial checkpoint");
    let mut states = vec![initial()];
    for (pod, cpus) in pods {
        let (next, records) = admit(states.last().expect("state"), pod, cpus);
        commit(&mut opened.store, &records);
        states.push(next);
    }
    states
}

fn journal_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(JOURNAL)).expect("journal")
}

/// Cuts the journal's last record in half (zeros from four bytes into its
/// payload), as a crash in the middle of its write; returns the bytes.
fn tear_last_record(dir: &Path) -> Vec<u8> {
    let last = frames(dir).last().expect("frame").clone();
    let mut bytes = journal_bytes(dir);
    let cut = usize::try_from(last.offset).expect("offset") + FRAME_HEADER + 4;
    let end = usize::try_from(last.offset + last.size).expect("end");
    bytes[cut..end].fill(0);
    std::fs::write(dir.join(JOURNAL), &bytes).expect("tear");
    bytes
}

fn frames(dir: &Path) -> Vec<format::Frame> {
    scan::scan(&journal_bytes(dir)).expect("readable").frames
}

#[test]
fn first_open_creates_a_preallocated_journal_and_no_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opened = open(dir.path());
    assert!(opened.recovery.created);
    assert!(opened.checkpoint.is_none());
    assert!(opened.recovery.warnings().is_empty());
    let len = std::fs::metadata(dir.path().join(JOURNAL))
        .expect("journal")
        .len();
    assert_eq!(len, JournalOptions::default().capacity);
}

#[test]
fn flushed_records_replay_and_unflushed_ones_do_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let mut opened = open(dir.path());
    assert_eq!(restored(&opened), states[2]);
    assert_eq!(opened.recovery.replayed, 4, "two records per admission");
    assert!(opened.recovery.warnings().is_empty());

    let (_, records) = admit(&states[2], "c", "5");
    for record in &records {
        opened.store.record(record).expect("record");
    }
    assert_eq!(opened.store.pending(), 2);
    drop(opened); // a crash before the flush
    let opened = open(dir.path());
    assert_eq!(restored(&opened), states[2]);
    assert!(opened.recovery.torn.is_none(), "nothing reached the file");
}

#[test]
fn without_a_checkpoint_records_start_from_an_empty_state_under_the_journals_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opened = open(dir.path());
    let (next, records) = admit(&initial(), "a", "1");
    let mut all = diff(&State::default(), &initial());
    all.extend(records);
    commit(&mut opened.store, &all);
    let opened = open(dir.path());
    assert_eq!(restored(&opened), next);
    assert_eq!(opened.checkpoint.expect("some").policy_name(), "static");
}

#[test]
fn compaction_writes_kubelets_checkpoint_and_resets_the_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let mut opened = open(dir.path());
    let mut side = SideData::new();
    side.entry("qrm".into())
        .or_default()
        .insert("a/main".into(), json!({"numa": [0]}).into());
    let side_record = Record::Side {
        kind: "qrm".into(),
        key: "a/main".into(),
        value: Some(json!({"numa": [0]}).into()),
    };
    commit(&mut opened.store, &[side_record]);
    let before = opened.store.last_seq();
    opened.store.compact(&states[2], &side).expect("compact");
    assert_eq!(opened.store.records_since_compaction(), 0);
    assert!(
        opened.store.last_seq() > before,
        "sequence numbers keep rising"
    );

    let (_, kubelet) =
        CheckpointStore::open(dir.path(), CPU_MANAGER_STATE).expect("kubelet's view");
    let kubelet = kubelet.expect("a checkpoint");
    assert_eq!(kubelet.default_cpu_set(), "0-1,5-15");
    let reopened = open(dir.path());
    assert_eq!(restored(&reopened), states[2]);
    assert_eq!(reopened.side, side, "side data survives the reset");
    assert_eq!(reopened.recovery.replayed, 1, "only the side data");
    assert!(reopened.recovery.warnings().is_empty());
}

/// The writer keeps its batch buffer from one flush to the next, unless a
/// batch made it larger than it keeps: batches of every size in a row,
/// small after large and large after small, replay whole and in order.
#[test]
fn batches_of_any_size_in_a_row_replay_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opened = open(dir.path());
    let mut side = SideData::new();
    // A small value, one past the kept buffer's size, a small one again,
    // one of a few kilobytes.
    for (n, len) in [10usize, 70 * 1024, 10, 3000].into_iter().enumerate() {
        let key = format!("pod-{n}/main");
        let value = serde_json::Value::String("x".repeat(len));
        commit(
            &mut opened.store,
            &[Record::Side {
                kind: "qrm".into(),
                key: key.clone(),
                value: Some(value.clone().into()),
            }],
        );
        side.entry("qrm".into())
            .or_default()
            .insert(key, value.into());
    }
    drop(opened);
    let reopened = open(dir.path());
    assert_eq!(reopened.side, side);
    assert_eq!(reopened.recovery.replayed, 4);
    assert!(reopened.recovery.warnings().is_empty());
}

#[test]
fn compaction_refuses_pending_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opened = open(dir.path());
    opened
        .store
        .record(&Record::SetDefault { cpus: list("0") })
        .expect("record");
    let err = opened
        .store
        .compact(&initial(), &SideData::new())
        .expect_err("pending");
    assert!(matches!(err, JournalError::Pending { pending: 1 }));
    assert_eq!(opened.store.discard_pending(), 1);
    opened
        .store
        .compact(&initial(), &SideData::new())
        .expect("now");
}

#[test]
fn torn_last_record_is_dropped_and_erased() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let bytes = tear_last_record(dir.path());

    let opened = open(dir.path());
    assert_eq!(
        restored(&opened),
        states[1],
        "the whole unfinished batch is dropped"
    );
    let torn = opened.recovery.torn.clone().expect("torn tail");
    assert_eq!(torn.dropped, 1, "the readable first record of that batch");
    assert!(opened.recovery.damage.is_none());
    assert_eq!(opened.recovery.warnings().len(), 1);
    // Issue 27, item 1 (case B): the file cannot tell a crash from a cut,
    // so the bytes are kept and the caller told to rebuild from the node.
    let aside = torn.aside.clone().expect("kept");
    assert_eq!(std::fs::read(&aside).expect("kept copy"), bytes);
    assert!(opened.recovery.incomplete().is_some());
    assert!(
        !opened.recovery.warnings()[0].contains("never acknowledged"),
        "{:?}",
        opened.recovery.warnings()
    );
    drop(opened);
    let again = open(dir.path());
    assert!(again.recovery.torn.is_none(), "the torn bytes were erased");
    assert_eq!(restored(&again), states[1]);
}

#[test]
fn a_batch_without_its_commit_frame_is_dropped_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let last = frames(dir.path()).last().expect("frame").clone();
    let mut bytes = journal_bytes(dir.path());
    let start = usize::try_from(last.offset).expect("offset");
    bytes[start..start + usize::try_from(last.size).expect("size")].fill(0);
    std::fs::write(dir.path().join(JOURNAL), &bytes).expect("lose the commit frame");
    let opened = open(dir.path());
    assert_eq!(restored(&opened), states[1]);
    assert_eq!(opened.recovery.torn.expect("torn").dropped, 1);
}

/// Power loss may persist the pages of an unfinished batch out of order:
/// its commit frame readable, a frame before it not. Still the last batch:
/// never acknowledged, dropped whole, not called damage.
#[test]
fn a_damaged_frame_inside_the_last_batch_is_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let all = frames(dir.path());
    let first_of_last = &all[all.len() - 2];
    let mut bytes = journal_bytes(dir.path());
    bytes[usize::try_from(first_of_last.offset).expect("offset") + FRAME_HEADER] ^= 0xff;
    std::fs::write(dir.path().join(JOURNAL), &bytes).expect("damage");
    let opened = open(dir.path());
    assert_eq!(restored(&opened), states[1]);
    assert!(opened.recovery.damage.is_none());
    assert_eq!(opened.recovery.torn.expect("torn").dropped, 1);
}

#[test]
fn a_bad_checksum_in_the_middle_keeps_the_prefix_reports_the_rest_and_keeps_a_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4"), ("c", "5-6")]);
    let all = frames(dir.path());
    // The first record of the second admission (b).
    let victim = &all[all.len() - 4];
    let mut bytes = journal_bytes(dir.path());
    bytes[usize::try_from(victim.offset).expect("offset") + FRAME_HEADER + 2] ^= 0x01;
    std::fs::write(dir.path().join(JOURNAL), &bytes).expect("damage");

    let opened = open(dir.path());
    assert_eq!(restored(&opened), states[1], "the consistent prefix");
    let damage = opened.recovery.damage.clone().expect("damage reported");
    assert_eq!(damage.offset, victim.offset);
    assert!(damage.reason.contains("checksum"), "{}", damage.reason);
    assert_eq!(damage.last_good_seq, victim.seq - 1);
    let dropped: Vec<u64> = damage.dropped.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(
        dropped,
        vec![victim.seq + 1, victim.seq + 2, victim.seq + 3]
    );
    assert_eq!(damage.aside, dir.path().join("pinion_journal.damaged-1"));
    assert_eq!(std::fs::read(&damage.aside).expect("kept"), bytes);
    let warning = opened.recovery.warnings().join("\n");
    assert!(warning.contains("pinion_journal.damaged-1"), "{warning}");
    assert!(
        warning.contains(r#""pod":"c""#),
        "names the dropped decisions: {warning}"
    );
    drop(opened);

    let again = open(dir.path());
    assert!(again.recovery.damage.is_none(), "handled once");
    assert_eq!(restored(&again), states[1]);
    assert!(!dir.path().join("pinion_journal.damaged-2").exists());
}

#[test]
fn an_unreadable_journal_header_is_moved_aside_and_the_checkpoint_used() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[]);
    std::fs::write(dir.path().join(JOURNAL), b"garbage, not a journal").expect("garbage");
    let opened = open(dir.path());
    assert_eq!(restored(&opened), states[0]);
    let damage = opened.recovery.damage.expect("reported");
    assert!(damage.reason.contains("too short"), "{}", damage.reason);
    assert_eq!(
        std::fs::read(&damage.aside).expect("kept"),
        b"garbage, not a journal"
    );
}

#[test]
fn a_checkpoint_replaced_outside_pinion_wins_and_the_journal_is_kept_aside() {
    let dir = tempfile::tempdir().expect("tempdir");
    with_batches(dir.path(), &[("a", "2-3")]);
    let mut opened = open(dir.path());
    let side_record = Record::Side {
        kind: "qrm".into(),
        key: "k".into(),
        value: Some(json!(1).into()),
    };
    commit(&mut opened.store, &[side_record]);
    drop(opened);
    // Content is the checkpoint's identity: the operator's file differs
    // from every checkpoint this journal knows.
    let (migrated, _) = admit(&initial(), "z", "14-15");
    CheckpointStore::open(dir.path(), CPU_MANAGER_STATE)
        .expect("open")
        .0
        .save("static", "0-13", &checkpoint_entries(&migrated))
        .expect("an operator's checkpoint");
    let opened = open(dir.path());
    assert_eq!(restored(&opened), migrated);
    let superseded = opened.recovery.superseded.clone().expect("reported");
    assert_eq!(superseded.dropped.len(), 2, "the admission's two records");
    assert!(superseded.aside.ends_with("pinion_journal.superseded-1"));
    assert_eq!(
        opened.side["qrm"]["k"],
        json!(1).into(),
        "side data is the journal's own"
    );
    drop(opened);
    let again = open(dir.path());
    assert!(again.recovery.superseded.is_none());
    assert_eq!(again.side["qrm"]["k"], json!(1).into());
}

#[test]
fn a_corrupt_checkpoint_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(CPU_MANAGER_STATE);
    std::fs::write(&path, b"{\"policyName\":").expect("truncated");
    let err = StateStore::open(dir.path(), "static").expect_err("refused");
    assert!(
        matches!(err, JournalError::CorruptCheckpoint { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&path.display().to_string()));
    assert_eq!(std::fs::read(&path).expect("kept"), b"{\"policyName\":");
}

#[test]
fn a_failed_fdatasync_fails_the_batch_names_it_and_the_next_flush_works() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3")]);
    let (mut opened, plan) = faulty(dir.path());
    let (_, records) = admit(&states[1], "b", "4");
    for record in &records {
        opened.store.record(record).expect("record");
    }
    plan.inject(FileOp::SyncData, Some(JOURNAL), Effect::Fail(libc::EIO));
    let err = opened.store.flush().expect_err("EIO");
    let seq = opened.store.last_seq();
    assert!(matches!(
        err,
        JournalError::Io {
            op: JournalOp::SyncData { .. },
            ..
        }
    ));
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "fdatasync records {}-{} of journal ",
            seq + 1,
            seq + 2
        )),
        "{text}"
    );
    assert!(
        text.contains(&dir.path().join(JOURNAL).display().to_string()),
        "{text}"
    );
    assert_eq!(opened.store.pending(), 0, "the failed batch is dropped");

    // The caller rolled back to states[1]; the next decision flushes fine.
    let (next, records) = admit(&states[1], "c", "5");
    let flushed = commit(&mut opened.store, &records);
    assert_eq!(
        flushed.last_seq,
        seq + 2,
        "sequence numbers reused after the failure"
    );
    drop(opened);
    let reopened = open(dir.path());
    assert_eq!(restored(&reopened), next, "the failed decision is nowhere");
    assert!(reopened.recovery.warnings().is_empty());
}

#[test]
fn stale_bytes_of_a_failed_flush_are_erased_by_the_next_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3")]);
    let (mut opened, plan) = faulty(dir.path());
    // A big batch reaches the file, its fdatasync fails, and so does the
    // attempt to erase it right away.
    let mut big = states[1].clone();
    for pod in 0..6 {
        big.assign(&format!("big-{pod}"), "main", list(&format!("{}", 8 + pod)));
    }
    for record in diff(&states[1], &big) {
        opened.store.record(&record).expect("record");
    }
    plan.inject(FileOp::SyncData, Some(JOURNAL), Effect::Fail(libc::EIO));
    plan.inject(FileOp::Write, Some(JOURNAL), Effect::Fail(libc::EIO));
    opened.store.flush().expect_err("failed");
    assert_eq!(plan.pending(), 0);
    // A smaller batch with the same sequence numbers lands on that region.
    let (next, records) = admit(&states[1], "c", "5");
    commit(&mut opened.store, &records);
    drop(opened);
    let reopened = open(dir.path());
    assert_eq!(restored(&reopened), next);
    assert!(
        reopened.recovery.warnings().is_empty(),
        "{:?}",
        reopened.recovery
    );
}

#[test]
fn enospc_and_short_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[]);
    let (mut opened, plan) = faulty(dir.path());
    let (a, records) = admit(&states[0], "a", "1");
    for record in &records {
        opened.store.record(record).expect("record");
    }
    // Short writes are continued: the batch lands whole.
    plan.inject(FileOp::Write, Some(JOURNAL), Effect::Short(5));
    plan.inject(FileOp::Write, Some(JOURNAL), Effect::Short(17));
    opened.store.flush().expect("short writes are fine");
    // A short write then ENOSPC fails the batch.
    let (_, records) = admit(&a, "b", "2");
    for record in &records {
        opened.store.record(record).expect("record");
    }
    plan.inject(FileOp::Write, Some(JOURNAL), Effect::Short(10));
    plan.inject(FileOp::Write, Some(JOURNAL), Effect::Fail(libc::ENOSPC));
    let err = opened.store.flush().expect_err("no space");
    let JournalError::Io { op, source, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(matches!(op, JournalOp::Write { bytes, .. } if *bytes > 10));
    assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
    assert!(err.to_string().contains("bytes at offset"), "{err}");
    drop(opened);
    let reopened = open(dir.path());
    assert_eq!(restored(&reopened), a);
    assert!(
        reopened.recovery.warnings().is_empty(),
        "{:?}",
        reopened.recovery
    );
}

/// Compaction fails at each of its writes; nothing is lost and the store
/// goes on.
#[test]
fn a_failed_compaction_loses_nothing_at_any_step() {
    let steps: [(FileOp, &str); 6] = [
        (FileOp::SyncData, JOURNAL),        // the marker's flush
        (FileOp::Write, CPU_MANAGER_STATE), // the checkpoint's temp file
        (FileOp::Rename, CPU_MANAGER_STATE),
        (FileOp::SyncDir, ""), // after the checkpoint's rename
        (FileOp::Write, JOURNAL),
        (FileOp::Rename, JOURNAL), // the new journal's rename
    ];
    for (op, name) in steps {
        let dir = tempfile::tempdir().expect("tempdir");
        let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
        let (mut opened, plan) = faulty(dir.path());
        let name = (!name.is_empty()).then_some(name);
        plan.inject(op, name, Effect::Fail(libc::EIO));
        let result = opened.store.compact(&states[2], &SideData::new());
        assert!(result.is_err(), "{op:?} {name:?} must fail the compaction");
        let (next, records) = release(&states[2], "a");
        commit(&mut opened.store, &records);
        drop(opened);
        let reopened = open(dir.path());
        assert_eq!(restored(&reopened), next, "{op:?} {name:?}");
        assert!(
            reopened.recovery.warnings().is_empty(),
            "{op:?}: {:?}",
            reopened.recovery
        );
    }
}

#[test]
fn a_crash_between_the_checkpoint_rewrite_and_the_journal_reset_applies_nothing_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let (mut opened, plan) = faulty(dir.path());
    plan.inject(FileOp::Rename, Some(JOURNAL), Effect::Fail(libc::EIO));
    opened
        .store
        .compact(&states[2], &SideData::new())
        .expect_err("reset fails");
    drop(opened);
    let reopened = open(dir.path());
    assert_eq!(restored(&reopened), states[2]);
    assert_eq!(reopened.recovery.replayed, 0);
    assert_eq!(reopened.recovery.skipped, 4, "in the checkpoint already");
}

#[test]
fn should_compact_follows_the_thresholds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = JournalOptions {
        compact_after_records: 3,
        ..JournalOptions::default()
    };
    let mut opened =
        StateStore::open_with(dir.path(), "static", Box::new(OsFiles), options).expect("open");
    let (a, records) = admit(&initial(), "a", "1");
    commit(&mut opened.store, &records);
    assert!(!opened.store.should_compact());
    let (_, records) = admit(&a, "b", "2");
    commit(&mut opened.store, &records);
    assert!(opened.store.should_compact());
}

#[test]
fn the_journal_grows_past_its_preallocation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = JournalOptions {
        capacity: DATA_START + 64,
        ..JournalOptions::default()
    };
    let mut opened =
        StateStore::open_with(dir.path(), "static", Box::new(OsFiles), options).expect("open");
    let mut state = initial();
    let mut all = diff(&State::default(), &state);
    for cpu in 1..12 {
        let (next, records) = admit(&state, &format!("p{cpu}"), &cpu.to_string());
        all.extend(records);
        state = next;
    }
    commit(&mut opened.store, &all);
    drop(opened);
    assert!(
        std::fs::metadata(dir.path().join(JOURNAL))
            .expect("meta")
            .len()
            > DATA_START + 64
    );
    assert_eq!(restored(&open(dir.path())), state);
    assert!(frame_size(1) > FRAME_HEADER);
}

#[test]
fn inspect_reads_without_changing_anything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3")]);
    let before = journal_bytes(dir.path());
    let inspection = inspect(dir.path()).expect("inspect");
    assert!(matches!(inspection.checkpoint, Some(Ok(_))));
    let view = inspection.journal.expect("journal").expect("readable");
    assert_eq!(view.replay.basis, scan::Basis::Checkpoint);
    assert_eq!(view.replay.records.len(), 2);
    let effective = view.effective.expect("replays").expect("some");
    assert_eq!(effective.default_cpu_set(), states[1].default.to_string());
    assert_eq!(journal_bytes(dir.path()), before);
}

mod mutations {
    use proptest::prelude::*;

    use super::*;

    /// A journal of three flushed batches, its bytes and the sequence
    /// numbers of its frames.
    fn valid_journal() -> (Vec<u8>, Vec<u64>) {
        static JOURNAL_BYTES: std::sync::OnceLock<(Vec<u8>, Vec<u64>)> = std::sync::OnceLock::new();
        JOURNAL_BYTES
            .get_or_init(|| {
                let dir = tempfile::tempdir().expect("tempdir");
                with_batches(dir.path(), &[("a", "2-3"), ("b", "4"), ("c", "5-6")]);
                let bytes = journal_bytes(dir.path());
                let seqs = frames(dir.path()).iter().map(|f| f.seq).collect();
                (bytes, seqs)
            })
            .clone()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever happens to the bytes (flipped bits, zeroed or cut
        /// ranges), the scanner never panics, only returns frames that were
        /// written, in order, and ends the used log on a commit frame.
        #[test]
        fn scanning_damaged_bytes_never_invents_frames(
            flips in prop::collection::vec((0usize..8192, any::<u8>()), 0..6),
            zero in prop::option::of((4096usize..8192, 1usize..200)),
            cut in prop::option::of(0usize..8192),
        ) {
            let (mut bytes, written) = valid_journal();
            for (at, mask) in flips {
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= mask;
                }
            }
            if let Some((from, len)) = zero {
                let end = (from + len).min(bytes.len());
                bytes[from.min(end)..end].fill(0);
            }
            if let Some(len) = cut {
                bytes.truncate(len);
            }
            if let Ok(scan) = scan::scan(&bytes) {
                let seqs: Vec<u64> = scan.frames.iter().map(|f| f.seq).collect();
                prop_assert!(written.starts_with(&seqs), "{seqs:?} not a prefix of {written:?}");
                prop_assert!(scan.frames.last().is_none_or(|f| f.commit));
                prop_assert!(scan.end <= scan.dirty_end.max(scan.end));
                let _ = plan_replay(&scan, 0);
            }
        }
    }
}

/// A lasting compaction failure (a full disk: the checkpoint's temp file
/// cannot be written) was retried after every batch once the journal had
/// reached its threshold, each retry flushing a compaction marker: now a
/// failure backs off until the journal grew by another threshold's worth.
/// Nothing is lost meanwhile, and the first compaction after the disk has
/// room again clears the backoff.
#[test]
fn regression_a_failing_compaction_is_not_retried_after_every_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ops, plan) = Faults::new();
    let options = JournalOptions {
        compact_after_records: 20,
        ..JournalOptions::default()
    };
    let mut store = StateStore::open_with(dir.path(), "static", Box::new(ops), options)
        .expect("open")
        .store;
    let mut state = initial();
    commit(&mut store, &diff(&State::default(), &state));
    // One batch: an admission of `pod` on cpu 1, or its release.
    let batch = |store: &mut StateStore, state: &State, n: usize| {
        let (next, records) = if n.is_multiple_of(2) {
            admit(state, &format!("p{n}"), "1")
        } else {
            release(state, &format!("p{}", n - 1))
        };
        commit(store, &records);
        next
    };
    let mut n = 0;
    while !store.should_compact() {
        state = batch(&mut store, &state, n);
        n += 1;
    }
    // The disk is full: every attempt fails writing the checkpoint.
    let (mut batches, mut attempts) = (0, 0);
    while batches < 60 {
        if store.should_compact() {
            attempts += 1;
            plan.inject(
                FileOp::Write,
                Some(CPU_MANAGER_STATE),
                Effect::Fail(libc::ENOSPC),
            );
            store
                .compact(&state, &SideData::new())
                .expect_err("no space for the checkpoint");
            let backoff = store.compaction_backoff().expect("backing off");
            assert_eq!(backoff.failures, attempts);
            assert!(!store.should_compact(), "not due right after a failure");
        }
        state = batch(&mut store, &state, n);
        n += 1;
        batches += 1;
    }
    let markers = frames(dir.path())
        .iter()
        .filter(|f| matches!(f.entry, Entry::Compaction { .. }))
        .count();
    assert_eq!(markers as u64, attempts, "one marker per attempt");
    assert!(
        (2..=8).contains(&attempts),
        "{attempts} attempts in {batches} batches: about one per 20 records"
    );
    // Room again: the next due compaction succeeds and ends the backoff.
    while !store.should_compact() {
        state = batch(&mut store, &state, n);
        n += 1;
    }
    store.compact(&state, &SideData::new()).expect("compacts");
    assert!(store.compaction_backoff().is_none());
    assert!(!store.should_compact());
    drop(store);
    assert_eq!(restored(&open(dir.path())), state, "nothing lost");
}

/// Found from outside (session 45): an agent that started degraded on a
/// checkpoint that does not parse as a state (`"9999999999"`) journals its
/// rebuilt state on top of it; stopped before its start's compaction, it
/// could never open the store again ("cannot take the journal's N
/// records"). The journal is now kept aside and reported as incomplete, so
/// the agent rebuilds from the node, with the side data kept.
#[test]
fn regression_a_journal_the_checkpoint_cannot_take_does_not_stop_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    CheckpointStore::open(dir.path(), CPU_MANAGER_STATE)
        .expect("open")
        .0
        .save("static", "9999999999", &std::collections::BTreeMap::new())
        .expect("a checkpoint whose cpu set does not parse");
    let mut opened = open(dir.path());
    let side_record = Record::Side {
        kind: "qrm".into(),
        key: "k".into(),
        value: Some(json!(1).into()),
    };
    let (_, mut records) = admit(&initial(), "a", "2-3");
    records.push(side_record);
    commit(&mut opened.store, &records);
    let journal = journal_bytes(dir.path());
    drop(opened);

    let mut opened = StateStore::open(dir.path(), "static").expect("opens");
    let unreplayable = opened.recovery.unreplayable.clone().expect("reported");
    assert_eq!(unreplayable.records, records.len());
    assert!(
        unreplayable.reason.contains("9999999999"),
        "{}",
        unreplayable.reason
    );
    assert_eq!(std::fs::read(&unreplayable.aside).expect("kept"), journal);
    let why = opened.recovery.incomplete().expect("the caller rebuilds");
    assert!(why.contains("cannot take"), "{why}");
    assert_eq!(
        opened
            .checkpoint
            .as_ref()
            .map(|c| c.default_cpu_set().to_string()),
        Some("9999999999".to_string()),
        "the checkpoint is left as it is"
    );
    assert_eq!(opened.side["qrm"]["k"], json!(1).into());
    // The caller's rebuilt state, compacted as the agent does at start,
    // opens cleanly.
    opened
        .store
        .compact(&initial(), &opened.side)
        .expect("compacts");
    drop(opened);
    let again = open(dir.path());
    assert!(again.recovery.unreplayable.is_none());
    assert_eq!(restored(&again), initial());
    assert_eq!(again.side["qrm"]["k"], json!(1).into());
}

/// Found from outside (session 45): when the directory's `fsync` failed
/// after the new journal's rename, the compaction failed but the old
/// journal, now unlinked, stayed the store's file: every later batch was
/// acknowledged into it and gone at the next start. The renamed file is
/// now the journal; its first flush syncs the directory.
#[test]
fn regression_a_failed_directory_sync_after_the_journals_rename_loses_no_later_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let (mut opened, plan) = faulty(dir.path());
    plan.inject(FileOp::SyncDir, None, Effect::Pass); // the checkpoint's
    plan.inject(FileOp::SyncDir, None, Effect::Fail(libc::EIO)); // the journal's
                                                                 // Done or not, what matters is that no later batch is lost.
    let _compacted = opened.store.compact(&states[2], &SideData::new());
    assert_eq!(plan.pending(), 0);
    let (next, records) = release(&states[2], "a");
    commit(&mut opened.store, &records);
    let log = plan.log();
    assert_eq!(
        log.last().map(|(op, _)| *op),
        Some(FileOp::SyncDir),
        "the flush syncs the directory: {log:?}"
    );
    // Synced once: the next batch does not sync it again.
    let (after, records) = release(&next, "b");
    commit(&mut opened.store, &records);
    assert_eq!(plan.log().last().map(|(op, _)| *op), Some(FileOp::SyncData));
    drop(opened);
    assert_eq!(restored(&open(dir.path())), after);
}

/// A batch whose directory sync fails is not acknowledged (as a failed
/// `fdatasync`), and the next flush tries the sync again.
#[test]
fn a_batch_is_not_durable_before_the_journals_directory_is_synced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3")]);
    let (mut opened, plan) = faulty(dir.path());
    plan.inject(FileOp::SyncDir, None, Effect::Pass);
    plan.inject(FileOp::SyncDir, None, Effect::Fail(libc::EIO));
    plan.inject(FileOp::SyncDir, None, Effect::Fail(libc::EIO));
    opened
        .store
        .compact(&states[1], &SideData::new())
        .expect("compacts");
    let (next, records) = release(&states[1], "a");
    for record in &records {
        opened.store.record(record).expect("record");
    }
    let err = opened
        .store
        .flush()
        .expect_err("the directory is not synced");
    assert!(err.to_string().contains("sync"), "{err}");
    commit(&mut opened.store, &records);
    drop(opened);
    assert_eq!(restored(&open(dir.path())), next);
}

/// Found from outside (session 45): when the directory's `fsync` failed
/// after the checkpoint's rename, the store still took the old checkpoint
/// for the one on disk. A later compaction back to that old state then
/// wrote no checkpoint and started a journal on the old one, and the next
/// start took the file on disk for one replaced from outside: the
/// journal's later records were dropped.
#[test]
fn regression_a_failed_directory_sync_after_the_checkpoints_rename_is_no_replaced_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let (mut opened, plan) = faulty(dir.path());
    plan.inject(FileOp::SyncDir, None, Effect::Fail(libc::EIO));
    opened
        .store
        .compact(&states[2], &SideData::new())
        .expect_err("the checkpoint's directory sync fails");
    let (next, records) = release(&states[2], "a");
    commit(&mut opened.store, &records);
    let (back, records) = release(&next, "b");
    commit(&mut opened.store, &records);
    assert_eq!(back, initial(), "the first checkpoint's state again");
    opened
        .store
        .compact(&back, &SideData::new())
        .expect("compacts");
    let (last, records) = admit(&back, "c", "6-7");
    commit(&mut opened.store, &records);
    drop(opened);
    let reopened = open(dir.path());
    assert!(
        reopened.recovery.superseded.is_none(),
        "{:?}",
        reopened.recovery
    );
    assert_eq!(restored(&reopened), last);
}

/// Session 49: an open that cuts a journal it could not replay to its end
/// first marks it incomplete, and every open says so until the caller has
/// recorded the state it rebuilt ([`StateStore::rebuild_recorded`]); before,
/// the second open read a clean journal and the caller rebuilt nothing.
#[test]
fn regression_an_incomplete_journal_stays_incomplete_until_the_rebuild_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    tear_last_record(dir.path());

    let first = open(dir.path());
    let why = first.recovery.incomplete().expect("incomplete");
    assert!(first.recovery.earlier.is_none(), "no earlier start's mark");
    let mark = std::fs::read_to_string(dir.path().join(INCOMPLETE_MARK)).expect("marked");
    assert!(mark.contains("incomplete batch"), "{mark}");
    assert!(why.contains("incomplete batch"), "{why}");
    // The caller's start fails here: nothing recorded.
    drop(first);

    let second = open(dir.path());
    assert!(second.recovery.torn.is_none(), "the tail was erased");
    assert_eq!(second.recovery.earlier.as_deref(), Some(mark.as_str()));
    let again = second.recovery.incomplete().expect("still incomplete");
    assert!(
        again.contains("an earlier start found that journal"),
        "{again}"
    );
    assert!(
        second
            .recovery
            .warnings()
            .iter()
            .any(|w| w.contains("rebuilt from the node again")),
        "{:?}",
        second.recovery.warnings()
    );
    let mut store = second.store;
    store.rebuild_recorded().expect("recorded");
    assert!(!dir.path().join(INCOMPLETE_MARK).exists());
    drop(store);

    let third = open(dir.path());
    assert_eq!(third.recovery.incomplete(), None);
    assert!(third.recovery.warnings().is_empty());
}

/// A journal whose header cannot be read is marked before it is moved
/// aside, and one the checkpoint cannot take likewise; a clean journal and
/// one a replaced checkpoint supersedes are not marked.
#[test]
fn only_journals_cut_short_are_marked_incomplete() {
    let dir = tempfile::tempdir().expect("tempdir");
    with_batches(dir.path(), &[("a", "2-3")]);
    drop(open(dir.path()));
    assert!(!dir.path().join(INCOMPLETE_MARK).exists(), "clean");
    std::fs::write(dir.path().join(JOURNAL), b"garbage, not a journal").expect("garbage");
    let mut opened = open(dir.path());
    assert!(
        dir.path().join(INCOMPLETE_MARK).exists(),
        "unreadable header"
    );
    // A store without a mark has nothing to remove; one with it removes it once.
    opened.store.rebuild_recorded().expect("recorded");
    opened.store.rebuild_recorded().expect("nothing left to do");
    assert!(!dir.path().join(INCOMPLETE_MARK).exists());
}

/// A mark that cannot be written stops the open before anything is cut:
/// the journal is as it was, and the error names the mark.
#[test]
fn a_mark_that_cannot_be_written_fails_the_open_and_cuts_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    with_batches(dir.path(), &[("a", "2-3"), ("b", "4")]);
    let bytes = tear_last_record(dir.path());
    let (faults, plan) = crate::fileops::Faults::new();
    plan.inject(
        crate::fileops::FileOp::Write,
        Some(INCOMPLETE_MARK),
        crate::fileops::Effect::Fail(libc::ENOSPC),
    );
    let err = StateStore::open_with(
        dir.path(),
        "static",
        Box::new(faults),
        JournalOptions::default(),
    )
    .expect_err("the mark is refused");
    assert!(err.to_string().contains(INCOMPLETE_MARK), "{err}");
    assert_eq!(journal_bytes(dir.path()), bytes, "nothing cut");
}

/// Found from outside (session 49): the journal was read whole at start,
/// whatever its size, so a damaged size (a sparse file of terabytes) made
/// the agent allocate it all and die at every start. One larger than any
/// journal (64 MiB) is not read: it is set aside as an unreadable one, and
/// the caller rebuilds from the node.
#[test]
fn regression_a_journal_larger_than_any_is_set_aside_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let states = with_batches(dir.path(), &[]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(JOURNAL))
        .expect("journal");
    file.set_len(MAX_STATE_FILE_BYTES + 1).expect("sparse");
    drop(file);
    let opened = open(dir.path());
    assert_eq!(restored(&opened), states[0], "the checkpoint is used");
    let damage = opened.recovery.damage.clone().expect("reported");
    assert!(damage.reason.contains("not read"), "{}", damage.reason);
    assert_eq!(
        std::fs::metadata(&damage.aside).expect("kept").len(),
        MAX_STATE_FILE_BYTES + 1
    );
    assert!(opened.recovery.incomplete().is_some());
    assert!(dir.path().join(INCOMPLETE_MARK).exists());
}
