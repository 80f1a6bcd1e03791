//! One reconcile pass of the QoS Resource Manager on a dense node: 500
//! runtime containers, each holding an allocation of three resource plugins
//! served over real unix sockets (the `cpu` plugin answering `CpusetCpus`, a
//! memory plugin answering `CpusetMems`, a NIC plugin answering an
//! environment variable and an annotation only). A pass is what the
//! reconcile loop does: `GetResourcesAllocation` of each plugin (1500
//! answers), the §4.9 merge in the controller, the durable record of what
//! changed, the desired/applied diff and the executor's batch of runtime
//! updates.
//!
//! Two cases: 1 % of the answers changed before each pass (15 of 1500: five
//! containers per plugin, a different fifteen every pass), and none (a
//! no-op pass must send nothing). Besides criterion's estimate, each case
//! prints p50/p99 of single passes, the share of the gRPC polls in them, and
//! what the pass sends to the runtime: the containers in the batch and the
//! encoded size of the NRI `UpdateContainersRequest` the NRI front-end
//! builds from it (protobuf bytes, without ttrpc framing).

#[macro_use]
#[path = "../../pinion-host/benches/support/report.rs"]
mod report;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_agent::controller::{RuntimeUpdate, Snapshot};
use pinion_agent::testing::qrm_node::{QrmNode, QrmNodeOptions, ServedPlugin};
use pinion_agent::testing::table_plugin::TablePlugin;
use pinion_agent::testing::{self, machine, runtime_request, SyntheticNode};
use pinion_core::Quantity;
use pinion_nri::proto::nri as pb;
use pinion_nri::ContainerUpdate;
use prost::Message;
use tokio::runtime::Runtime;

const CONTAINERS: usize = 500;
/// Answers changed per pass in the 1 % case (of 3 × 500).
const CHANGED: usize = 15;
const PLUGINS: [(&str, &str); 3] = [
    // The cpu plugin: only it may set the cpuset (a container asks it by
    // its CPU request).
    ("cpu", "CpusetCpus"),
    ("example.com/mems", "CpusetMems"),
    ("example.com/nic", ""),
];

/// Version `version` of plugin `plugin`'s answer for container `n`.
fn answer(plugin: usize, n: usize, version: usize) -> String {
    match plugin {
        0 => {
            let first = (n * 4 + version * 2) % 124;
            format!("{first}-{}", first + 3)
        }
        1 => ["0", "1"][(n + version) % 2].to_string(),
        _ => format!("nic-{n}-v{version}"),
    }
}

struct Bench {
    _dir: tempfile::TempDir,
    node: QrmNode,
    plugins: Vec<TablePlugin>,
    _served: Vec<ServedPlugin>,
    pods: Vec<String>,
    /// Current answer version per (plugin, container).
    versions: Vec<[usize; 3]>,
    /// Passes so far (which containers change next).
    passes: usize,
}

fn uid(n: usize) -> String {
    format!("00000000-0000-0000-0000-{n:012}")
}

/// A node of 128 CPUs with its state under `base` and 500 containers
/// admitted through the three plugins.
fn setup(runtime: &Runtime, base: &Path) -> Bench {
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    runtime.block_on(async {
        let options = QrmNodeOptions {
            runtime: true,
            // The bench drives the passes itself.
            ..QrmNodeOptions::new(Duration::from_secs(3600))
        };
        let node = QrmNode::start(&SyntheticNode::new(machine(2, 32, 2)), dir.path(), &options);
        let plugins: Vec<TablePlugin> = PLUGINS
            .iter()
            .map(|(resource, property)| TablePlugin::new(resource, property, ""))
            .collect();
        let served = plugins.iter().map(|p| node.serve(p.clone())).collect();
        for (resource, _) in PLUGINS {
            node.wait_for_plugin(resource, "active", Duration::from_secs(20))
                .await;
        }
        let mut pods = Vec::new();
        for n in 0..CONTAINERS {
            for (p, plugin) in plugins.iter().enumerate() {
                plugin.set_default(&answer(p, n, 0));
            }
            let uid = uid(n);
            let mut request = runtime_request(&uid, Some("500m"), &format!("container-{n}"));
            let name = request.container.clone();
            let container = request
                .pod
                .containers
                .iter_mut()
                .find(|c| c.name == name)
                .expect("container");
            for (resource, _) in PLUGINS.iter().filter(|(r, _)| *r != "cpu") {
                container
                    .extended_requests
                    .insert(resource.to_string(), Quantity::parse("1").expect("1"));
            }
            node.handle.admit(request).await.expect("admitted");
            pods.push(uid);
        }
        let mut bench = Bench {
            _dir: dir,
            node,
            plugins,
            _served: served,
            pods,
            versions: vec![[0; 3]; CONTAINERS],
            passes: 0,
        };
        // Each admission asked the reconcile loop for a pass of its own
        // (its plugins may have moved other containers). The bench's passes
        // must not overlap those: a pass of the loop merging a change before
        // the bench's pass, and its updates drained by a later one, made a
        // pass send what it did not change (a flake under load).
        wait_until_the_loop_is_idle(&bench.node).await;
        let snapshot = bench.node.handle.snapshot();
        bench.drain(&snapshot);
        bench
    })
}

/// Waits until the reconcile loop's polls and merges stopped for a second.
async fn wait_until_the_loop_is_idle(node: &QrmNode) {
    let activity = || -> (u64, u64) {
        node.handle
            .plugins()
            .iter()
            .fold((0, 0), |(calls, changes), plugin| {
                let polls = plugin
                    .stats
                    .calls
                    .get("GetResourcesAllocation")
                    .map_or(0, |m| m.calls);
                (calls + polls, changes + plugin.stats.reconcile_changes)
            })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = activity();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = activity();
        if now == last || Instant::now() > deadline {
            return;
        }
        last = now;
    }
}

/// What a batch costs on the wire.
struct Sent {
    containers: usize,
    bytes: usize,
    /// Updates whose NRI form equals the container's previous one (a
    /// change of environment or annotations only, which a running container
    /// cannot take).
    same_on_wire: usize,
}

impl Bench {
    fn drain(&mut self, before: &Snapshot) -> Sent {
        let updates = self.node.runtime_updates.as_mut().expect("runtime");
        let mut batch: Vec<RuntimeUpdate> = Vec::new();
        while let Ok(more) = updates.try_recv() {
            batch.extend(more);
        }
        let nri: Vec<ContainerUpdate> = batch
            .into_iter()
            .map(|u| ContainerUpdate {
                container_id: u.container_id,
                placement: u.placement,
                order: 0,
            })
            .collect();
        let same_on_wire = nri
            .iter()
            .filter(|u| {
                let n: usize = u.container_id["container-".len()..].parse().expect("n");
                let old = before.placement_of(&uid(n), "main");
                let old = pb::ContainerUpdate::from(&ContainerUpdate {
                    container_id: u.container_id.clone(),
                    placement: old,
                    order: 0,
                });
                old == pb::ContainerUpdate::from(*u)
            })
            .count();
        let request = pb::UpdateContainersRequest {
            update: pinion_nri::model::updates_to_proto(&nri),
            evict: Vec::new(),
        };
        Sent {
            containers: nri.len(),
            bytes: request.encoded_len(),
            same_on_wire,
        }
    }

    /// Changes `count` answers, a different set of containers each time;
    /// returns the containers whose change reaches the runtime (the NIC
    /// plugin's answers are environment and annotations only, which an
    /// NRI update cannot carry: not sent).
    fn change(&mut self, count: usize) -> BTreeSet<String> {
        let mut changed = BTreeSet::new();
        for i in 0..count {
            let n = (self.passes * count + i) % CONTAINERS;
            let plugin = i % 3;
            self.versions[n][plugin] += 1;
            let value = answer(plugin, n, self.versions[n][plugin]);
            assert!(self.plugins[plugin].set(&self.pods[n], "main", &value));
            if !PLUGINS[plugin].1.is_empty() {
                changed.insert(format!("container-{n}"));
            }
        }
        self.passes += 1;
        changed
    }

    /// One pass as the reconcile loop runs it: (whole pass, the polls).
    fn pass(&mut self, runtime: &Runtime) -> (Duration, Duration, Sent) {
        let before = self.node.handle.snapshot();
        let started = Instant::now();
        let (polled, outcome) = runtime.block_on(async {
            let polls = self.node.qrm.poll().await;
            let polled = started.elapsed();
            let outcome = self
                .node
                .handle
                .plugin_reconcile(polls, started)
                .await
                .expect("reconcile");
            (polled, outcome)
        });
        let took = started.elapsed();
        let sent = self.drain(&before);
        assert!(outcome.reallocate.is_empty(), "no plugin forgot anything");
        (took, polled, sent)
    }
}

fn percentile(samples: &mut [Duration], percent: usize) -> Duration {
    samples.sort();
    samples[(samples.len() - 1) * percent / 100]
}

fn bench_case(c: &mut Criterion, runtime: &Runtime, bench: &mut Bench, name: &str, count: usize) {
    let mut passes = Vec::new();
    let mut polls = Vec::new();
    let mut sent = (0, 0, 0, 0);
    c.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let changed = bench.change(count);
                let (took, polled, batch) = bench.pass(runtime);
                assert_eq!(
                    batch.containers,
                    changed.len(),
                    "a pass sends exactly the changed containers"
                );
                passes.push(took);
                polls.push(polled);
                sent.0 += 1;
                sent.1 += batch.containers;
                sent.2 += batch.bytes;
                sent.3 += batch.same_on_wire;
                total += took;
            }
            total
        });
    });
    let p50 = percentile(&mut passes, 50);
    let p99 = percentile(&mut passes, 99);
    let poll50 = percentile(&mut polls, 50);
    report!(
        "{name}: passes={} p50={p50:?} p99={p99:?} polls p50={poll50:?} ({:.0} % of p50); per pass: {:.1} containers updated ({:.1} of them the same on the wire), {:.0} bytes of UpdateContainersRequest",
        passes.len(),
        poll50.as_secs_f64() * 100.0 / p50.as_secs_f64(),
        sent.1 as f64 / sent.0 as f64,
        sent.3 as f64 / sent.0 as f64,
        sent.2 as f64 / sent.0 as f64,
    );
}

fn qrm_reconcile(c: &mut Criterion) {
    let runtime = testing::two_worker_runtime();
    for (medium, base) in testing::state_media() {
        let base = base.as_path();
        let mut bench = setup(&runtime, base);
        bench_case(
            c,
            &runtime,
            &mut bench,
            &format!("qrm_reconcile_500x3/{medium}/1pct_changed"),
            CHANGED,
        );
        bench_case(
            c,
            &runtime,
            &mut bench,
            &format!("qrm_reconcile_500x3/{medium}/unchanged"),
            0,
        );
        let Bench { node, .. } = bench;
        runtime.block_on(node.stop());
    }
}

criterion_group!(benches, qrm_reconcile);
criterion_main!(benches);
