//! CreateContainer round trip through the fake runtime's real protocol
//! bytes into the agent: the NRI front-end, the controller's decision and
//! the durable checkpoint write (two fsyncs) before the answer. Guaranteed
//! 2-CPU containers with the checkpoint on disk (the figure) and on tmpfs
//! (`/dev/shm`, what the rest costs), and a Burstable container (shared
//! pool: no checkpoint write). Each iteration's container is stopped and
//! removed outside the timed part. Besides criterion's estimate, each
//! benchmark prints p50/p99 of single CreateContainer calls. `nri_start/*`:
//! the StartContainer round trip of a created container, the same way.
#![allow(clippy::unwrap_used)]

#[macro_use]
#[path = "../../pinion-host/benches/support/report.rs"]
mod report;

#[path = "../tests/nri_common/mod.rs"]
mod nri_common;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use nri_common::{burstable, burstable_pod, container, guaranteed_pod, Node};

fn percentiles(name: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        // Filtered out on the command line: nothing ran.
        return;
    }
    samples.sort();
    // Nearest-rank percentile: the sample at `percent`% of the sorted list.
    let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
    report!(
        "{name}: calls={} p50={:?} p99={:?} max={:?}",
        samples.len(),
        at(50),
        at(99),
        at(100)
    );
}

/// The call a benchmark times.
#[derive(Clone, Copy)]
enum Timed {
    /// CreateContainer of a new container.
    Create,
    /// StartContainer of a created container (creation untimed).
    Start,
}

fn bench_node(
    c: &mut Criterion,
    name: &str,
    state: tempfile::TempDir,
    guaranteed: bool,
    timed: Timed,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let node = Node::with_state(state);
    let agent = rt.block_on(node.agent(1));
    let spec = if guaranteed {
        guaranteed_pod("bench")
    } else {
        burstable_pod("bench")
    };
    let pod = rt.block_on(node.runtime.run_pod(spec)).unwrap();
    let mut samples = Vec::new();
    c.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let spec = if guaranteed {
                    container("app", 2000)
                } else {
                    burstable("app", 500)
                };
                rt.block_on(async {
                    let started = Instant::now();
                    let id = node.runtime.create_container(&pod, spec).await.unwrap();
                    let started = match timed {
                        Timed::Create => started,
                        Timed::Start => {
                            let started = Instant::now();
                            node.runtime.start_container(&id).await.unwrap();
                            started
                        }
                    };
                    let took = started.elapsed();
                    samples.push(took);
                    total += took;
                    node.runtime.stop_container(&id).await.unwrap();
                    node.runtime.remove_container(&id).await.unwrap();
                });
            }
            total
        });
    });
    percentiles(name, &mut samples);
    rt.block_on(agent.stop());
}

fn nri_create(c: &mut Criterion) {
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    bench_node(
        c,
        "nri_create/guaranteed_checkpoint_on_disk",
        disk,
        true,
        Timed::Create,
    );
    match tempfile::tempdir_in("/dev/shm") {
        Ok(shm) => bench_node(
            c,
            "nri_create/guaranteed_checkpoint_on_tmpfs",
            shm,
            true,
            Timed::Create,
        ),
        Err(err) => report!("skipped nri_create/guaranteed_checkpoint_on_tmpfs: /dev/shm: {err}"),
    }
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    bench_node(
        c,
        "nri_create/burstable_shared_pool",
        disk,
        false,
        Timed::Create,
    );
    for (name, guaranteed) in [
        ("nri_start/burstable_shared_pool", false),
        ("nri_start/guaranteed", true),
    ] {
        let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        bench_node(c, name, disk, guaranteed, Timed::Start);
    }
}

criterion_group!(benches, nri_create);
criterion_main!(benches);
