//! Durability figures (issue 14), all in one run on one file system (the
//! directory given, default a temporary directory under the target dir):
//!
//! * a bare 4 KiB `pwrite` + `fdatasync`, the physical limit;
//! * a standalone admission (controller, journal, fake cgroups) one at a
//!   time, and bursts of 10 and 100 concurrent admissions through the
//!   controller's handle (group commit: one flush per batch);
//! * NRI `CreateContainer` through the fake runtime, one at a time (the
//!   runtime sends NRI events one after the other, so there is no
//!   concurrent burst to measure there).
//!
//! The last line is `admission p99 X ms, fdatasync p99 Y ms, ratio Z,
//! burst-100 total T ms`. Run it with `scripts/durability-figures.sh`.
#![allow(clippy::unwrap_used, clippy::cast_precision_loss)]

#[path = "../tests/nri_common/mod.rs"]
mod nri_common;

use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use pinion_agent::controller;
use pinion_agent::testing::{machine, run_request, SyntheticNode};

const ROUNDS: usize = 200;

fn percentile(samples: &mut [Duration], percent: usize) -> Duration {
    samples.sort();
    samples[(samples.len() - 1) * percent / 100]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(name: &str, samples: &mut [Duration]) -> Duration {
    let p50 = percentile(samples, 50);
    let p99 = percentile(samples, 99);
    println!(
        "{name}: n={} p50 {:.3} ms, p99 {:.3} ms",
        samples.len(),
        ms(p50),
        ms(p99)
    );
    p99
}

/// A bare 4 KiB write + `fdatasync` of an existing, allocated file.
fn fdatasync(dir: &Path) -> Duration {
    let path = dir.join("fdatasync-probe");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(&[0u8; 4096]).unwrap();
    file.sync_all().unwrap();
    let block = [7u8; 4096];
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        file.write_all_at(&block, 0).unwrap();
        file.sync_data().unwrap();
        samples.push(started.elapsed());
    }
    std::fs::remove_file(&path).unwrap();
    report("bare 4 KiB fdatasync", &mut samples)
}

/// Standalone admissions: one at a time, then bursts.
fn standalone(rt: &tokio::runtime::Runtime, dir: &Path) -> (Duration, Duration) {
    // 2 sockets × 64 cores × 2 threads: room for 100 one-CPU runs at once.
    let node = SyntheticNode::new(machine(2, 64, 2));
    let state = tempfile::tempdir_in(dir).unwrap();
    let controller = node.start(state.path()).unwrap();
    let (handle, thread) = controller::spawn(controller).unwrap();
    let mut n = 0u64;
    let mut next_id = || {
        n += 1;
        format!("pinion-run-burst-{n}")
    };
    let mut single = Vec::with_capacity(ROUNDS);
    rt.block_on(async {
        for _ in 0..ROUNDS {
            let id = next_id();
            let started = Instant::now();
            handle
                .admit(run_request(&id, Some("1"), None))
                .await
                .unwrap();
            single.push(started.elapsed());
            handle.release(id, None).await.unwrap();
        }
    });
    let p99 = report("standalone admission, one at a time", &mut single);
    let mut burst_100 = Duration::ZERO;
    for size in [10usize, 100] {
        let mut totals = Vec::new();
        let mut each = Vec::new();
        for _ in 0..(if size == 10 { 20 } else { 5 }) {
            let ids: Vec<String> = (0..size).map(|_| next_id()).collect();
            let started = Instant::now();
            let latencies: Vec<Duration> = rt.block_on(async {
                let tasks: Vec<_> = ids
                    .iter()
                    .map(|id| {
                        let handle = handle.clone();
                        let request = run_request(id, Some("1"), None);
                        tokio::spawn(async move {
                            let begun = Instant::now();
                            handle.admit(request).await.unwrap();
                            begun.elapsed()
                        })
                    })
                    .collect();
                let mut out = Vec::new();
                for task in tasks {
                    out.push(task.await.unwrap());
                }
                out
            });
            totals.push(started.elapsed());
            each.extend(latencies);
            rt.block_on(async {
                for id in ids {
                    handle.release(id, None).await.unwrap();
                }
            });
        }
        report(
            &format!("standalone admission, bursts of {size} (each)"),
            &mut each,
        );
        let p50 = percentile(&mut totals, 50);
        let max = percentile(&mut totals, 100);
        println!(
            "standalone burst of {size}: total p50 {:.3} ms, max {:.3} ms",
            ms(p50),
            ms(max)
        );
        if size == 100 {
            burst_100 = max;
        }
    }
    let flushes = handle.snapshot().metrics.counters.journal_batches_total;
    println!("journal flushes over the whole run: {flushes}");
    rt.block_on(handle.shutdown());
    thread.join().unwrap();
    (p99, burst_100)
}

/// NRI `CreateContainer` of a Guaranteed 2-CPU container, one at a time.
fn nri(rt: &tokio::runtime::Runtime, dir: &Path) {
    let _guard = rt.enter();
    let state = tempfile::tempdir_in(dir).unwrap();
    let node = nri_common::Node::with_state(state);
    let agent = rt.block_on(node.agent(1));
    let pod = rt
        .block_on(node.runtime.run_pod(nri_common::guaranteed_pod("bench")))
        .unwrap();
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        rt.block_on(async {
            let started = Instant::now();
            let id = node
                .runtime
                .create_container(&pod, nri_common::container("app", 2000))
                .await
                .unwrap();
            samples.push(started.elapsed());
            node.runtime.stop_container(&id).await.unwrap();
            node.runtime.remove_container(&id).await.unwrap();
        });
    }
    report(
        "NRI CreateContainer (Guaranteed, 2 CPUs), one at a time",
        &mut samples,
    );
    rt.block_on(agent.stop());
}

fn main() {
    let dir = std::env::args().nth(1).map_or_else(
        || std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/tmp")),
        std::path::PathBuf::from,
    );
    std::fs::create_dir_all(&dir).unwrap();
    println!("file system of {}", dir.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fsync_p99 = fdatasync(&dir);
    let (admission_p99, burst_100) = standalone(&rt, &dir);
    nri(&rt, &dir);
    println!(
        "targets: one at a time p99 <= {:.3} ms (1.2 x fdatasync p99 + 0.3 ms); burst-100 total <= {:.3} ms (5 x fdatasync p99 + 10 ms)",
        1.2 * ms(fsync_p99) + 0.3,
        5.0 * ms(fsync_p99) + 10.0
    );
    println!(
        "admission p99 {:.3} ms, fdatasync p99 {:.3} ms, ratio {:.2}, burst-100 total {:.3} ms",
        ms(admission_p99),
        ms(fsync_p99),
        ms(admission_p99) / ms(fsync_p99),
        ms(burst_100)
    );
}
