//! Admission through Pinion's built-in CPU plugin against admission by the
//! static policy alone, both through the controller handle as the local API
//! and NRI call it (hints gathered, decision, durable record, placement on
//! fake cgroups), then release. The plugin path adds the QoS Resource
//! Manager's calls over the plugin's unix socket (`GetTopologyHints`,
//! `Allocate`), the plugin's own state file and the allocation record.
//! Each case runs with the state on the disk (a temp dir) and on tmpfs
//! (`/dev/shm`), to tell the protocol's share from the flushes'. Besides
//! criterion's estimate, each prints p50/p99 of single admissions.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_agent::config::{BuiltinPlugin, QrmConfig};
use pinion_agent::controller::{self, ControllerHandle};
use pinion_agent::hints::{HintGatherer, HintSource};
use pinion_agent::qrm::{builtin, Qrm, QrmHints};
use pinion_agent::testing::{machine, run_request, SyntheticNode};
use pinion_core::topomgr::Scope;
use pinion_plugins::builtin::{Config, Kind};
use tokio::runtime::Runtime;
use tokio::sync::watch;

struct Node {
    _dir: tempfile::TempDir,
    handle: ControllerHandle,
    _stop: watch::Sender<bool>,
}

/// A controller on a 64-CPU synthetic machine with its state under `base`,
/// with or without the built-in CPU plugin.
fn node(runtime: &Runtime, base: &Path, with_plugin: bool) -> Node {
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let topology = machine(2, 16, 2);
    let controller = SyntheticNode::new(topology.clone())
        .start(dir.path())
        .expect("controller");
    let (stop, stop_rx) = watch::channel(false);
    if !with_plugin {
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
        builtin: vec![BuiltinPlugin {
            config: Config::default_for(Kind::Cpu),
            reservation_from_agent: true,
        }],
    });
    let handle = runtime.block_on(async {
        let sources: Vec<Arc<dyn HintSource>> = vec![Arc::new(QrmHints(Arc::clone(&qrm)))];
        let hints = HintGatherer::new(sources, Scope::Container, Duration::from_secs(20));
        let (handle, _) =
            controller::spawn_with(controller, hints, Some(Arc::clone(&qrm))).expect("spawn");
        let _tasks = qrm.start(&handle, &stop_rx).expect("qrm");
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
        handle
    });
    Node {
        _dir: dir,
        handle,
        _stop: stop,
    }
}

fn percentiles(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |percent: usize| samples[(samples.len() - 1) * percent / 100];
    eprintln!(
        "{name}: admissions={} p50={:?} p99={:?} max={:?}",
        samples.len(),
        at(50),
        at(99),
        at(100)
    );
}

fn bench_case(c: &mut Criterion, runtime: &Runtime, name: &str, base: &Path, with_plugin: bool) {
    let node = node(runtime, base, with_plugin);
    let mut admissions = Vec::new();
    let mut n = 0u64;
    c.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                n += 1;
                let request = run_request(&format!("pinion-run-bench-{n}"), Some("2"), None);
                let uid = request.pod.uid.clone();
                let started = Instant::now();
                runtime.block_on(node.handle.admit(request)).expect("admit");
                admissions.push(started.elapsed());
                runtime
                    .block_on(node.handle.release(uid, None))
                    .expect("release");
                total += started.elapsed();
            }
            total
        });
    });
    percentiles(name, &mut admissions);
}

fn plugin_admission(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let disk = std::env::temp_dir();
    let shm = Path::new("/dev/shm");
    let mut cases = vec![("disk", disk.as_path())];
    if shm.is_dir() {
        cases.push(("tmpfs", shm));
    }
    for (medium, base) in cases {
        bench_case(
            c,
            &runtime,
            &format!("admit_release_2cpus/{medium}/static_policy"),
            base,
            false,
        );
        bench_case(
            c,
            &runtime,
            &format!("admit_release_2cpus/{medium}/builtin_cpu_plugin"),
            base,
            true,
        );
    }
}

criterion_group!(benches, plugin_admission);
criterion_main!(benches);
