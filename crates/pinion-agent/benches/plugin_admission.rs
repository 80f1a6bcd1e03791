//! Admission through resource plugins against admission by the static
//! policy alone, all through the controller handle as the local API and NRI
//! call it (hints gathered, decision, durable record, placement on fake
//! cgroups), then release:
//!
//! * `builtin_cpu_plugin`: Pinion's CPU plugin in the agent (called in the
//!   process through its gRPC service, its state in the agent's journal,
//!   flushed with the allocation record), under the Topology Manager's
//!   `none` policy, the agent's default: no hints, `Allocate` first, then
//!   the admission with its answer in one flush;
//! * `one_plugin` against `static_policy_widget`: the same pod asking one
//!   more resource (`example.com/widget=1`) of a minimal plugin in the
//!   watched directory that keeps no state (hints with a preference,
//!   `Allocate` answering an environment variable and an annotation) — the
//!   manager's own cost: `GetTopologyHints`, the merge (under the
//!   `best-effort` policy), the admission, `Allocate` with the merged hint
//!   and the durable allocation record. Without the manager the extra
//!   request is ignored, so the pods are the same;
//!
//! * `…_1000_pods`: the static policy and the built-in CPU plugin with 1000
//!   shared pods (50m each) already on the node — what grows with the node.
//!
//! The admissions run as one task of the agent's own runtime
//! ([`pinion_agent::daemon::runtime`]: one thread, shared with the manager's
//! loops and the built-in plugins), as the local API and NRI call the
//! handle; the external plugin serves on a thread of its own, as another
//! process would.
//!
//! Each case runs with the state on the disk (a temp dir) and on tmpfs
//! (`/dev/shm`), to tell the protocol's share from the flushes'. Besides
//! criterion's estimate, each prints p50/p99 of single admissions, what an
//! admit + release cost the journal (flushes, records, compactions) and, for
//! the external plugin, the mean of each RPC as the manager timed it.

#[macro_use]
#[path = "../../pinion-host/benches/support/report.rs"]
mod report;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_agent::config::{BuiltinPlugin, QrmConfig};
use pinion_agent::controller::counters::Histogram;
use pinion_agent::controller::{self, ControllerHandle};
use pinion_agent::daemon::qrm_loops;
use pinion_agent::hints::{HintGatherer, HintSource};
use pinion_agent::qrm::{builtin, Qrm, QrmHints};
use pinion_agent::testing::{self, machine, run_request, SyntheticNode};
use pinion_api::plugin::Identity;
use pinion_core::topomgr::Scope;
use pinion_core::Quantity;
use pinion_plugins::builtin::{Config, Kind};
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::{
    Allocation, AllocationInfo, Allocations, Hint, Options, PluginError, Request, ResourcePlugin,
};
use tokio::runtime::Runtime;
use tokio::sync::watch;

const WIDGET: &str = "example.com/widget";

/// How a node admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    StaticPolicy,
    BuiltinCpuPlugin,
    OnePlugin,
    /// [`Mode::OnePlugin`] under the Topology Manager's `none` policy (the
    /// default): no hints are gathered, `Allocate` is called first.
    OnePluginPolicyNone,
}

/// A plugin with no state of its own: hints for either NUMA node, an
/// environment variable and an annotation per container.
struct Stamp;

impl ResourcePlugin for Stamp {
    fn resource_name(&self) -> &str {
        WIDGET
    }

    fn options(&self) -> Options {
        Options {
            pre_start_required: false,
            with_topology_alignment: true,
            need_reconcile: false,
        }
    }

    fn topology_hints(&self, _: &Request) -> Result<Option<Vec<Hint>>, PluginError> {
        Ok(Some(
            (0..2)
                .map(|node| Hint {
                    nodes: vec![node],
                    preferred: true,
                })
                .collect(),
        ))
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        let info = AllocationInfo {
            is_scalar_resource: true,
            allocated_quantity: 1.0,
            envs: [("WIDGET_ID".to_string(), request.pod_uid.clone())].into(),
            annotations: [(WIDGET.to_string(), "1".to_string())].into(),
            ..AllocationInfo::default()
        };
        Ok(Some([(WIDGET.to_string(), info)].into()))
    }

    fn allocations(&self) -> Allocations {
        Allocations::new()
    }

    fn remove_pod(&mut self, _: &str) -> Result<(), PluginError> {
        Ok(())
    }
}

struct Node {
    _dir: tempfile::TempDir,
    handle: ControllerHandle,
    _stop: watch::Sender<bool>,
}

/// A controller on a 64-CPU synthetic machine with its state under `base`,
/// admitting as `mode` says.
fn node(runtime: &Runtime, base: &Path, mode: Mode) -> Node {
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let topology = machine(2, 16, 2);
    let mut synthetic = SyntheticNode::new(topology.clone());
    if mode == Mode::OnePlugin {
        synthetic.config.topology_manager_policy = Some("best-effort".into());
    }
    let controller = synthetic.start(dir.path()).expect("controller");
    let (stop, stop_rx) = watch::channel(false);
    if mode == Mode::StaticPolicy {
        let (handle, _) = runtime.block_on(async {
            controller::spawn_with(controller, HintGatherer::none(), None).expect("spawn")
        });
        return Node {
            _dir: dir,
            handle,
            _stop: stop,
        };
    }
    let qrm = Qrm::new(QrmConfig {
        enabled: true,
        plugin_registration_dir: dir.path().join("plugins_registry"),
        registration_socket: dir.path().join("resource-plugins/kubelet.sock"),
        reconcile_period: Duration::from_secs(3600),
        rpc_timeout: Duration::from_secs(10),
        resource_names_map: BTreeMap::new(),
        builtin: if mode == Mode::BuiltinCpuPlugin {
            vec![BuiltinPlugin {
                config: Config::default_for(Kind::Cpu),
                reservation_from_agent: true,
            }]
        } else {
            Vec::new()
        },
    });
    let handle = runtime.block_on(async {
        let sources: Vec<Arc<dyn HintSource>> = vec![Arc::new(QrmHints(Arc::clone(&qrm)))];
        // As the agent gathers them: not at all under the `none` policy.
        let scope = if mode == Mode::OnePlugin {
            Scope::Container
        } else {
            Scope::None
        };
        let hints = HintGatherer::new(sources, scope, Duration::from_secs(20));
        let (handle, _) =
            controller::spawn_with(controller, hints, Some(Arc::clone(&qrm))).expect("spawn");
        let _tasks = qrm_loops::start(&qrm, &handle, &stop_rx).expect("qrm");
        let reserved = handle.snapshot().reserved.clone();
        let machine = builtin::Machine {
            topology: &topology,
            reserved: &reserved,
            sysroot: dir.path(),
            state_dir: dir.path(),
            cgroups: None,
        };
        let _plugins = qrm
            .start_builtin(machine, &stop_rx)
            .await
            .expect("cpu plugin");
        if matches!(mode, Mode::OnePlugin | Mode::OnePluginPolicyNone) {
            let socket = dir.path().join("plugins_registry/widget.sock");
            let mut stopped = stop_rx.clone();
            // Its own thread and runtime: it stands in for another process.
            std::thread::spawn(move || {
                let served = async move {
                    let shutdown = async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    };
                    pinion_api::plugin::serve(
                        &socket,
                        Identity::new(WIDGET),
                        GrpcPlugin::new(Stamp),
                        shutdown,
                    )
                    .await
                };
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the plugin's runtime")
                    .block_on(served)
                    .expect("plugin serves");
            });
            while !handle
                .plugins()
                .iter()
                .any(|p| p.resource == WIDGET && p.state == "active")
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        handle
    });
    Node {
        _dir: dir,
        handle,
        _stop: stop,
    }
}

fn percentiles(name: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        // Skipped by a filter.
        return;
    }
    samples.sort();
    let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
    report!(
        "{name}: admissions={} p50={:?} p99={:?} max={:?}",
        samples.len(),
        at(50),
        at(99),
        at(100)
    );
}

/// `iterations` admit + release cycles of pods numbered from `first`, as one
/// task of the agent's runtime (as the local API and NRI call the
/// controller, beside the manager's loops): their total time and each
/// admission's.
async fn cycles(
    handle: &ControllerHandle,
    first: u64,
    iterations: u64,
    widget: bool,
) -> (Duration, Vec<Duration>) {
    let mut total = Duration::ZERO;
    let mut admissions = Vec::new();
    for n in first..first + iterations {
        let mut request = run_request(&format!("pinion-run-bench-{n}"), Some("2"), None);
        if widget {
            for container in &mut request.pod.containers {
                container
                    .extended_requests
                    .insert(WIDGET.to_string(), Quantity::parse("1").expect("1"));
            }
        }
        let uid = request.pod.uid.clone();
        let started = Instant::now();
        handle.admit(request).await.expect("admit");
        admissions.push(started.elapsed());
        handle.release(uid, None).await.expect("release");
        total += started.elapsed();
    }
    (total, admissions)
}

fn bench_case(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    base: &Path,
    mode: Mode,
    widget: bool,
    resident: usize,
) {
    // Made when the case runs (criterion skips the cases a filter leaves
    // out, and their nodes with them).
    let mut made: Option<Node> = None;
    // The journal's counters once the resident pods are in (what the
    // measured admissions add is told from them).
    let mut baseline = None;
    let mut admissions = Vec::new();
    let mut n = 0u64;
    c.bench_function(name, |b| {
        let node = made.get_or_insert_with(|| {
            let node = node(runtime, base, mode);
            // Pods already on the node (shared, 50m each): what an
            // admission costs that grows with them.
            for n in 0..resident {
                let request = run_request(&format!("pinion-run-resident-{n}"), Some("50m"), None);
                runtime
                    .block_on(node.handle.admit(request))
                    .expect("resident pod");
            }
            baseline = Some(node.handle.snapshot().metrics.counters.clone());
            node
        });
        b.iter_custom(|iterations| {
            let first = n + 1;
            n += iterations;
            let (total, measured) =
                runtime.block_on(cycles(&node.handle, first, iterations, widget));
            admissions.extend(measured);
            total
        });
    });
    let cycles = admissions.len();
    percentiles(name, &mut admissions);
    let Some(node) = made else {
        return;
    };
    // What each admit + release cost the journal: flushes (each one
    // `fdatasync`) and checkpoint rewrites (compactions), and their time.
    let now = node.handle.snapshot().metrics.counters.clone();
    let before = baseline.unwrap_or_default();
    let per_cycle = |n: u64, was: u64| n.saturating_sub(was) as f64 / cycles.max(1) as f64;
    // The mean of the observations made since `was`, in µs.
    let mean_us = |now: &Histogram, was: &Histogram| {
        (now.sum - was.sum) * 1e6 / now.count.saturating_sub(was.count).max(1) as f64
    };
    report!(
        "{name}: per admit+release: flushes={:.2} ({:.1}µs each) records={:.1} compactions={:.3} ({:.0}µs each)",
        per_cycle(now.journal_batches_total, before.journal_batches_total),
        mean_us(&now.journal_flush_seconds, &before.journal_flush_seconds),
        per_cycle(now.journal_records_total, before.journal_records_total),
        per_cycle(
            now.checkpoint_write_seconds.count,
            before.checkpoint_write_seconds.count
        ),
        mean_us(&now.checkpoint_write_seconds, &before.checkpoint_write_seconds),
    );
    if matches!(mode, Mode::OnePlugin | Mode::OnePluginPolicyNone) {
        for view in node.handle.plugins() {
            for (method, stats) in &view.stats.calls {
                let mean = if stats.calls == 0 {
                    0.0
                } else {
                    stats.seconds / stats.calls as f64
                };
                report!(
                    "{name}: {} {method}: calls={} mean={:.1}µs",
                    view.resource,
                    stats.calls,
                    mean * 1e6
                );
            }
        }
    }
}

fn plugin_admission(c: &mut Criterion) {
    // The agent's own runtime: its front-ends, the manager's loops and the
    // built-in plugins share one thread.
    let runtime = pinion_agent::daemon::runtime().expect("runtime");
    for (medium, base) in testing::state_media() {
        let base = base.as_path();
        let runs = [
            ("static_policy", Mode::StaticPolicy, false),
            ("builtin_cpu_plugin", Mode::BuiltinCpuPlugin, false),
            ("static_policy_widget", Mode::StaticPolicy, true),
            ("one_plugin", Mode::OnePlugin, true),
            ("one_plugin_policy_none", Mode::OnePluginPolicyNone, true),
        ];
        for (case, mode, widget) in runs {
            bench_case(
                c,
                &runtime,
                &format!("admit_release_2cpus/{medium}/{case}"),
                base,
                mode,
                widget,
                0,
            );
        }
        for (case, mode) in [
            ("static_policy", Mode::StaticPolicy),
            ("builtin_cpu_plugin", Mode::BuiltinCpuPlugin),
        ] {
            bench_case(
                c,
                &runtime,
                &format!("admit_release_2cpus/{medium}/{case}_1000_pods"),
                base,
                mode,
                false,
                1000,
            );
        }
    }
}

criterion_group!(benches, plugin_admission);
criterion_main!(benches);
