//! Admission latency of the controller: admit a `pinion run --cpus 1` pod
//! and release it, each step saved durably in the checkpoint (fsync) before
//! it returns. Two hosts: fake cgroups (the decision + durable write), and
//! the real cpuset hierarchy when running as root with a writable one
//! (mkdir, cpuset writes, rmdir on top). Besides criterion's estimate, each
//! benchmark prints p50/p99 of single admissions measured with
//! `iter_custom`.

#[macro_use]
#[path = "../../pinion-host/benches/support/report.rs"]
mod report;

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_agent::controller::{AdmitRequest, Controller};
use pinion_agent::hints::GatheredHints;
use pinion_agent::testing::{machine, run_request, SyntheticNode};
use pinion_core::Topology;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::{Cgroups, CpusetHost};

fn controller(dir: &Path, host: Box<dyn CpusetHost>, topology: Topology) -> Controller {
    let parts = SyntheticNode::new(topology).parts_on(dir, host);
    Controller::start(parts).expect("start")
}

fn request(n: u64) -> AdmitRequest {
    run_request(&format!("pinion-run-bench-{n}"), Some("1"), None)
}

fn percentiles(name: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        // Skipped by a filter.
        return;
    }
    samples.sort();
    // Nearest-rank percentile: the sample at `percent`% of the sorted list.
    let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
    report!(
        "{name}: admissions={} p50={:?} p99={:?} max={:?}",
        samples.len(),
        at(50),
        at(99),
        at(100)
    );
}

fn bench_host(c: &mut Criterion, name: &str, host: Box<dyn CpusetHost>, topology: Topology) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut controller = controller(dir.path(), host, topology);
    let mut admissions = Vec::new();
    let mut n = 0u64;
    c.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                n += 1;
                let request = request(n);
                let started = Instant::now();
                controller
                    .admit(&request, &GatheredHints::default())
                    .expect("admit");
                let admitted = started.elapsed();
                admissions.push(admitted);
                controller.release(&request.pod.uid, None).expect("release");
                total += started.elapsed();
            }
            total
        });
    });
    percentiles(name, &mut admissions);
}

fn admission(c: &mut Criterion) {
    let synthetic_machine = machine(2, 16, 2);
    let fake = Box::new(FakeCgroups::default());
    bench_host(c, "admit_release/fake_cgroups", fake, synthetic_machine);
    match real_cgroups() {
        Some(cgroups) => {
            let root = cgroups.clone();
            let this_machine = pinion_host::discover(Path::new("/")).expect("topology");
            bench_host(
                c,
                "admit_release/real_cgroups",
                Box::new(cgroups),
                this_machine,
            );
            let _ = root.remove_root();
        }
        None => report!(
            "skipped admit_release/real_cgroups: needs root and a writable cpuset hierarchy"
        ),
    }
}

fn real_cgroups() -> Option<Cgroups> {
    let probe = Cgroups::detect(Path::new("/proc/self/mountinfo"), Path::new("/"), None).ok()?;
    let mount = probe.root().parent()?.to_path_buf();
    let root = mount.join(format!("pinion-bench-{}", std::process::id()));
    std::fs::create_dir(&root).ok()?;
    std::fs::remove_dir(&root).ok()?;
    // As the daemon finds it (on v1, with the cpu and memory hierarchies
    // its runs are mirrored in).
    Cgroups::detect(
        Path::new("/proc/self/mountinfo"),
        Path::new("/"),
        Some(&root),
    )
    .ok()
}

criterion_group!(benches, admission);
criterion_main!(benches);
