//! In-place resize latency of the controller (issue #15): a `pinion run
//! --cpus 2` pod grown to 4 exclusive CPUs and shrunk back, each resize
//! durable (one journal flush) and its cgroup written before it returns.
//! Fake cgroups on a 64-CPU synthetic machine; besides criterion's estimate
//! (grow + shrink), p50/p99 of single resizes measured with `iter_custom`.

#[macro_use]
#[path = "../../pinion-host/benches/support/report.rs"]
mod report;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_agent::controller::Controller;
use pinion_agent::hints::GatheredHints;
use pinion_agent::testing::{machine, run_request, SyntheticNode};
use pinion_core::policy::Features;
use pinion_core::Quantity;
use pinion_host::cgroup::fake::FakeCgroups;

fn resize(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = SyntheticNode::new(machine(2, 16, 2)).with_features(Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    });
    let parts = node.parts_on(dir.path(), Box::new(FakeCgroups::default()));
    let mut controller = Controller::start(parts).expect("start");
    let request = run_request("pinion-run-bench", Some("2"), None);
    controller
        .admit(&request, &GatheredHints::default())
        .expect("admit");
    let key = (request.pod.uid.clone(), request.container.clone());
    let (grown, shrunk) = (
        Quantity::parse("4").expect("4"),
        Quantity::parse("2").expect("2"),
    );
    let mut samples = Vec::new();
    c.bench_function("resize/grow_2_to_4_and_shrink_back/fake_cgroups", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                for cpus in [&grown, &shrunk] {
                    let started = Instant::now();
                    controller.resize(&key, cpus).expect("resize");
                    let took = started.elapsed();
                    samples.push(took);
                    total += took;
                }
            }
            total
        });
    });
    samples.sort();
    let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
    report!(
        "resize: resizes={} p50={:?} p99={:?} max={:?}",
        samples.len(),
        at(50),
        at(99),
        at(100)
    );
}

criterion_group!(benches, resize);
criterion_main!(benches);
