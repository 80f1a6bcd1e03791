//! Topology discovery on the largest corpus machines (read in place from
//! `../shared/topologies`; skipped with a notice when absent). Figures and
//! the command are in `docs/performance.md`.

use criterion::{criterion_group, criterion_main, Criterion};

/// The largest machines of the corpus: 144 CPUs (the largest), 128 CPUs on
/// arm64, and the 96-CPU EPYC with 16 L3 groups and 8 NUMA nodes.
#[path = "../../pinion-core/tests/common/shared.rs"]
mod shared;

const MACHINES: &[&str] = &[
    "x86-4s-intel-xeon-skylake-sp-18c-ht",
    "arm64-2s-hisilicon-kunpeng920-128c-4numa",
    "x86-2s-amd-epyc-7451-ht-16ccx-8numa",
];

fn discover(c: &mut Criterion) {
    let Some(dir) = shared::shared("topologies") else {
        return;
    };
    // Canonical path: `crates/pinion-host/../../..` would add six path
    // components to every one of the few hundred lookups measured.
    let dir = dir.canonicalize().expect("canonical ../shared/topologies");
    let mut group = c.benchmark_group("discover");
    for machine in MACHINES {
        let root = dir.join(machine);
        if let Err(err) = pinion_host::discover(&root) {
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!("skipped {machine}: {err}\n"),
            );
            continue;
        }
        group.bench_function(*machine, |b| b.iter(|| pinion_host::discover(&root)));
    }
    group.finish();
}

criterion_group!(benches, discover);
criterion_main!(benches);
