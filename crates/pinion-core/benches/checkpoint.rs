//! Checkpoint codec cost: decode + verify and encode of a checkpoint the
//! size of a busy node (256 pods × 4 containers).

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_core::checkpoint::{self, PodEntries};

fn busy_node() -> PodEntries {
    let mut entries = PodEntries::new();
    for pod in 0..256u32 {
        let containers = entries
            .entry(format!("6f0c2a4e-{pod:04x}-4c1e-9d6b-0242ac120002"))
            .or_default();
        for container in 0..4u32 {
            let first = 2 + (pod * 4 + container) % 500;
            containers.insert(
                format!("container-{container}"),
                format!("{first}-{}", first + 1),
            );
        }
    }
    entries
}

fn codec(c: &mut Criterion) {
    let entries = busy_node();
    let bytes = checkpoint::encode("static", "0-1,1000-1023", &entries);
    c.bench_function("checkpoint/encode 1024 containers", |b| {
        b.iter(|| checkpoint::encode("static", "0-1,1000-1023", &entries));
    });
    c.bench_function("checkpoint/decode_verified 1024 containers", |b| {
        b.iter(|| checkpoint::decode_verified(&bytes).expect("valid"));
    });
}

criterion_group!(benches, codec);
criterion_main!(benches);
