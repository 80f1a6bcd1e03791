//! podresources `List` on a dense node: 500 pods × 3 containers (one with
//! 2 exclusive CPUs and NUMA-bound memory, two in the shared pool; labels
//! and annotations on every pod). Two figures: the answer built from a
//! snapshot (mapping + wire types), and a whole `List` call over the unix
//! socket through tonic (encode, HTTP/2, decode in the client). Besides
//! criterion's estimate, each prints p50/p99 of single calls measured with
//! `iter_custom`.

#[macro_use]
#[path = "../../pinion-host/benches/support/report.rs"]
mod report;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_agent::controller::{Snapshot, WorkloadView};
use pinion_agent::podresources::{self, PodResourcesService};
use pinion_agent::testing::machine;
use pinion_api::podresources::v1;
use pinion_core::placement::Pool;
use pinion_core::pod::{Container, Pod};
use pinion_core::{CpuSet, Placement, Quantity};
use tokio::sync::watch;

const PODS: u32 = 500;
const CONTAINERS: [&str; 3] = ["app", "sidecar", "log"];

fn snapshot() -> Snapshot {
    let mut snapshot = Snapshot {
        policy: "static".into(),
        all_cpus: CpuSet::range(0, 127),
        reserved: CpuSet::range(0, 1),
        ..Snapshot::default()
    };
    for n in 0..PODS {
        let uid = format!("00000000-0000-0000-0000-{n:012}");
        let pod = Pod {
            uid: uid.clone(),
            name: format!("web-{n}"),
            namespace: format!("team-{}", n % 20),
            labels: BTreeMap::from([
                ("app".into(), format!("web-{}", n % 50)),
                ("pod-template-hash".into(), "5d8f7c9b6".into()),
            ]),
            annotations: BTreeMap::from([("kubernetes.io/config.source".into(), "api".into())]),
            containers: CONTAINERS
                .iter()
                .map(|name| Container {
                    name: (*name).to_string(),
                    memory_request: Some(Quantity::parse("256Mi").expect("quantity")),
                    ..Container::default()
                })
                .collect(),
            ..Pod::default()
        };
        snapshot.pods.insert(uid.clone(), Arc::new(pod));
        for (i, name) in CONTAINERS.iter().enumerate() {
            let placement = if i == 0 {
                let cpu = 2 + (n % 63) * 2;
                Placement {
                    cpus: CpuSet::range(cpu, cpu + 1),
                    mems: CpuSet::range(0, 0),
                    pool: Pool::Exclusive,
                    ..Placement::default()
                }
            } else {
                Placement {
                    cpus: CpuSet::range(2, 127),
                    mems: CpuSet::range(0, 1),
                    pool: Pool::Shared,
                    ..Placement::default()
                }
            };
            snapshot.workloads.push(WorkloadView {
                pod: uid.clone(),
                container: (*name).to_string(),
                frontend: "runtime".into(),
                placement,
                applied: true,
                cgroup: None,
                pid: None,
                container_id: Some(format!("c-{n}-{i}")),
                plugins: BTreeMap::new(),
                apply_error: None,
                partition: None,
                foreign_write: None,
                admitted: 0,
            });
        }
    }
    snapshot
}

fn percentiles(name: &str, samples: &mut [Duration]) {
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

fn build(c: &mut Criterion) {
    let snapshot = snapshot();
    let mut samples = Vec::new();
    c.bench_function("podresources_list/build_500x3", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let started = Instant::now();
                let answer = podresources::list(&snapshot);
                let took = started.elapsed();
                assert_eq!(answer.pod_resources.len(), 500);
                samples.push(took);
                total += took;
            }
            total
        });
    });
    percentiles("podresources_list/build_500x3", &mut samples);
}

fn over_the_socket(c: &mut Criterion) {
    let runtime = pinion_agent::testing::two_worker_runtime();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("pod-resources/pinion.sock");
    let (_snapshots_tx, snapshots) = watch::channel(Arc::new(snapshot()));
    let service =
        PodResourcesService::new(snapshots, Arc::new(machine(2, 32, 2)), u32::MAX, u32::MAX);
    let (stop_tx, stop) = watch::channel(false);
    let config = pinion_agent::config::PodResourcesConfig {
        socket: socket.clone(),
        qps: u32::MAX,
        burst: u32::MAX,
    };
    let listener = runtime.block_on(async { podresources::bind(&config).expect("bind") });
    let server = runtime.spawn(podresources::serve(listener, socket.clone(), service, stop));
    let mut client = runtime.block_on(async {
        let channel = pinion_api::uds::connect(&socket, Duration::from_secs(10))
            .await
            .expect("connect");
        v1::pod_resources_lister_client::PodResourcesListerClient::new(channel)
            .max_decoding_message_size(64 << 20)
    });
    let mut samples = Vec::new();
    c.bench_function("podresources_list/grpc_500x3", |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let started = Instant::now();
                    let answer = client
                        .list(v1::ListPodResourcesRequest {})
                        .await
                        .expect("list")
                        .into_inner();
                    let took = started.elapsed();
                    assert_eq!(answer.pod_resources.len(), 500);
                    samples.push(took);
                    total += took;
                }
                total
            })
        });
    });
    percentiles("podresources_list/grpc_500x3", &mut samples);
    let _ = stop_tx.send(true);
    let _ = runtime.block_on(server);
}

criterion_group!(benches, build, over_the_socket);
criterion_main!(benches);
