//! The cost of making decisions durable: append + flush of 1, 10 and 100
//! journal records (one `fdatasync` each flush) against today's full
//! checkpoint write (temp file, fsync, rename, directory fsync) and a bare
//! 4 KiB `pwrite` + `fdatasync`. The directory is `PINION_BENCH_DIR` (e.g.
//! `/dev/shm` for tmpfs), else a temporary directory under `target/` (the
//! disk). Besides criterion's estimate, each benchmark prints p50/p99 of
//! single operations. Figures and commands: `docs/performance.md`.

#[macro_use]
#[path = "support/report.rs"]
mod report;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_core::record::{checkpoint_entries, Record, SideData};
use pinion_core::state::State;
use pinion_core::CpuSet;
use pinion_host::journal::StateStore;
use pinion_host::store::{CheckpointStore, CPU_MANAGER_STATE};

fn bench_dir() -> (tempfile::TempDir, PathBuf) {
    // Cargo's scratch directory for benches, on the target's disk (the
    // workspace's target/ is not there when CARGO_TARGET_DIR points
    // elsewhere: the bench panicked on such a clone).
    let base = std::env::var_os("PINION_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    let dir = tempfile::tempdir_in(&base).expect("a temporary directory in the bench dir");
    let path = dir.path().to_path_buf();
    (dir, path)
}

/// A node with 64 exclusive containers on 128 CPUs: the checkpoint a
/// decision rewrites today.
fn node_state() -> State {
    let mut state = State {
        default: (0..128).collect(),
        ..State::default()
    };
    for pod in 0..64u32 {
        let cpus: CpuSet = [2 + pod].into_iter().collect();
        state.assign(
            &format!("pod-{pod:04}-0000-0000-0000-000000000000"),
            "main",
            cpus.clone(),
        );
        state.default = state.default.difference(&cpus);
    }
    state
}

/// The `n`th record of an admission stream (assign, then the new pool).
fn record(n: u64) -> Record {
    let cpu = u32::try_from(66 + n % 60).unwrap_or(66);
    if n & 1 == 0 {
        Record::Assign {
            pod: format!("bench-{n:08}-0000-0000-0000-000000000000"),
            container: "main".into(),
            cpus: [cpu].into_iter().collect(),
        }
    } else {
        Record::SetDefault {
            cpus: (0..128).filter(|c| *c != cpu).collect(),
        }
    }
}

fn percentiles(name: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        return;
    }
    samples.sort();
    let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
    report!(
        "{name}: n={} p50={:?} p99={:?}",
        samples.len(),
        at(50),
        at(99)
    );
}

fn fdatasync_4k(c: &mut Criterion, dir: &Path) {
    let path = dir.join("bare");
    let file = File::create(&path).expect("create");
    let block = vec![0x5a_u8; 4096];
    file.write_all_at(&block, 0).expect("preallocate");
    file.sync_all().expect("sync");
    let mut samples = Vec::new();
    c.bench_function("durable/fdatasync_4k", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            for _ in 0..iters {
                let one = Instant::now();
                file.write_all_at(&block, 0).expect("write");
                file.sync_data().expect("fdatasync");
                samples.push(one.elapsed());
            }
            started.elapsed()
        });
    });
    percentiles("fdatasync_4k", &mut samples);
}

fn checkpoint_write(c: &mut Criterion, dir: &Path) {
    let (store, _) = CheckpointStore::open(dir, CPU_MANAGER_STATE).expect("open");
    let state = node_state();
    let entries = checkpoint_entries(&state);
    let default = state.default.to_string();
    let mut samples = Vec::new();
    c.bench_function("durable/checkpoint_write_64_containers", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            for _ in 0..iters {
                let one = Instant::now();
                store.save("static", &default, &entries).expect("save");
                samples.push(one.elapsed());
            }
            started.elapsed()
        });
    });
    percentiles("checkpoint_write", &mut samples);
}

fn journal_flush(c: &mut Criterion, dir: &Path) {
    let mut opened = StateStore::open(dir, "static").expect("open");
    let mut state = node_state();
    let side = SideData::new();
    opened
        .store
        .compact(&state, &side)
        .expect("initial checkpoint");
    let mut store = opened.store;
    let mut group = c.benchmark_group("durable/journal_append_flush");
    let mut n = 0u64;
    for records in [1u64, 10, 100] {
        let mut samples = Vec::new();
        group.bench_function(format!("{records}_records"), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    if store.should_compact() {
                        // Off the admission path: not timed.
                        store.compact(&state, &side).expect("compact");
                    }
                    let batch: Vec<Record> = (0..records).map(|i| record(n + i)).collect();
                    n += records;
                    let one = Instant::now();
                    for record in &batch {
                        store.record(record).expect("record");
                    }
                    store.flush().expect("flush");
                    let elapsed = one.elapsed();
                    timed += elapsed;
                    samples.push(elapsed);
                    pinion_core::record::replay(&batch, &mut state, &mut SideData::new());
                }
                timed
            });
        });
        percentiles(&format!("journal_append_flush_{records}"), &mut samples);
    }
    group.finish();
}

fn durable(c: &mut Criterion) {
    let (_keep, dir) = bench_dir();
    report!("bench directory: {}", dir.display());
    fdatasync_4k(c, &dir);
    checkpoint_write(c, &dir);
    journal_flush(c, &dir);
}

criterion_group!(benches, durable);
criterion_main!(benches);
