//! One set of QoS Resource Manager rules (issue 30): every
//! `examples/scenarios/qrm-*.yaml` runs through `pinion simulate` (the
//! simulator's manager, plugins in-process) and through the agent's manager
//! ([`Qrm`]: `plugin_requests`, `GetTopologyHints`, the Topology Manager's
//! merge, `Allocate`, `RemovePod`) with the same Pinion plugins served over
//! real unix sockets. After every step each container's placement (CPUs,
//! memory nodes, environment, annotations, the CPU plugin's pool) as the
//! plugins report it over the wire (`GetResourcesAllocation`) is the
//! simulator's, and every admission decides alike (admitted or rejected,
//! the merged hint of each container).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pinion_agent::config::QrmConfig;
use pinion_agent::qrm::{Poll, Qrm};
use pinion_agent::testing::qrm_node::{serve_service_in, ServedPlugin};
use pinion_core::plugin_allocation::PluginAllocations;
use pinion_core::pod::Pod;
use pinion_core::pools::PoolLoad;
use pinion_core::topomgr::{Policy, TopologyManager};
use pinion_core::{CpuSet, Topology};
use pinion_plugins::cpu::CpuPlugin;
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::scenario::{
    self, ContainerPlacement, Outcome, Plugins, QrmScenario, Step, StepOutcome,
};
use pinion_plugins::{qrm_request, Hint, ResourcePlugin};

/// Upper bound for a plugin's socket to appear (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(20);

fn scenarios() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/scenarios")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("qrm-") && name.ends_with(".yaml"))
        })
        .collect();
    files.sort();
    files
}

/// The agent's manager with the scenario's plugins served over sockets.
struct AgentSide {
    qrm: Arc<Qrm>,
    cpu: Option<Arc<Mutex<CpuPlugin>>>,
    served: Vec<ServedPlugin>,
    topology_manager: TopologyManager,
    /// Admitted pods by UID.
    pods: BTreeMap<String, Pod>,
    /// What `Allocate` answered, by pod and container (what the agent
    /// applies; a plugin's reconcile answers replace it).
    allocated: BTreeMap<(String, String), PluginAllocations>,
    loads: BTreeMap<String, PoolLoad>,
}

/// What one admission decided, as both sides report it.
#[derive(Debug, PartialEq)]
struct Decision {
    admitted: bool,
    hints: Vec<(String, Option<Hint>)>,
}

impl AgentSide {
    async fn start(scenario: &QrmScenario, topology: &Topology, dir: &Path) -> Self {
        let registry_dir = dir.join("plugins_registry");
        std::fs::create_dir_all(&registry_dir).expect("registry dir");
        let qrm = Qrm::new(QrmConfig {
            enabled: true,
            plugin_registration_dir: registry_dir.clone(),
            registration_socket: dir.join("kubelet.sock"),
            reconcile_period: Duration::from_secs(3600),
            rpc_timeout: Duration::from_secs(10),
            resource_names_map: scenario.resource_names_map.clone(),
            builtin: Vec::new(),
        });
        let plugins = Plugins::open(scenario, topology).expect("plugins");
        let mut served = Vec::new();
        let cpu = plugins.cpu.map(|plugin| {
            let shared = Arc::new(Mutex::new(plugin));
            served.push(serve(
                &registry_dir,
                "cpu",
                GrpcPlugin::shared(Arc::clone(&shared)),
            ));
            shared
        });
        if let Some(memory) = plugins.memory {
            let resource = memory.resource_name().to_string();
            served.push(serve(&registry_dir, &resource, GrpcPlugin::new(memory)));
        }
        if let Some(nic) = plugins.nic {
            let resource = nic.resource_name().to_string();
            served.push(serve(&registry_dir, &resource, GrpcPlugin::new(nic)));
        }
        for plugin in &served {
            wait_for_socket(plugin.socket()).await;
            qrm.registry()
                .register_socket(plugin.socket())
                .await
                .expect("plugin registers");
        }
        Self {
            qrm,
            cpu,
            served,
            topology_manager: scenario::topology_manager(scenario, topology).expect("tm"),
            pods: BTreeMap::new(),
            allocated: BTreeMap::new(),
            loads: BTreeMap::new(),
        }
    }

    async fn step(&mut self, scenario: &QrmScenario, step: &Step) -> Option<Decision> {
        match step {
            Step::Add { pod } => {
                let spec = scenario.pods.get(pod).expect("pod of the scenario");
                let pod = spec.to_pod(pod).expect("pod");
                return Some(self.add(pod).await);
            }
            Step::Remove { pod } => {
                self.pods.remove(pod).expect("admitted");
                self.allocated.retain(|(uid, _), _| uid != pod);
                self.qrm.remove_pod(pod).await.expect("removed");
                let pools = self.pool_names();
                self.loads.retain(|pool, _| pools.contains(pool));
            }
            Step::Pressure {
                pool,
                pressure,
                usage,
                periods,
            } => {
                let load = PoolLoad {
                    pressure: *pressure,
                    usage: *usage,
                };
                self.loads.insert(pool.clone(), load);
                self.reconcile(*periods);
            }
            Step::Reconcile { periods } => self.reconcile(*periods),
            Step::Advisor { pool, size } => {
                self.cpu_plugin()
                    .set_pool_size(pool, scenario::pool_size(size))
                    .expect("pool size");
            }
        }
        None
    }

    /// The manager's admission of every container of `pod`, in order.
    async fn add(&mut self, pod: Pod) -> Decision {
        let names: Vec<String> = pod.all_containers().map(|c| c.name.clone()).collect();
        let mut hints = Vec::new();
        for name in &names {
            let requests = self.qrm.plugin_requests(&pod, name).expect("requests");
            let affinity = if self.topology_manager.policy() == Policy::None {
                None
            } else {
                let resource_hints = self.qrm.hints(&pod, name).await.expect("hints");
                match self
                    .topology_manager
                    .merge(&[Some(resource_hints)])
                    .result()
                {
                    Ok(hint) => Some(hint),
                    Err(_) => return self.reject(&pod, hints).await,
                }
            };
            match self.qrm.allocate(&pod, name, &requests, affinity).await {
                Ok(allocations) => {
                    self.allocated
                        .insert((pod.uid.clone(), name.clone()), allocations);
                }
                Err(_) => return self.reject(&pod, hints).await,
            }
            hints.push((name.clone(), affinity.map(|a| qrm_request::hint(&a))));
        }
        self.pods.insert(pod.uid.clone(), pod);
        Decision {
            admitted: true,
            hints,
        }
    }

    async fn reject(&mut self, pod: &Pod, hints: Vec<(String, Option<Hint>)>) -> Decision {
        self.qrm.remove_pod(&pod.uid).await.expect("removed");
        self.allocated.retain(|(uid, _), _| *uid != pod.uid);
        Decision {
            admitted: false,
            hints,
        }
    }

    fn cpu_plugin(&self) -> std::sync::MutexGuard<'_, CpuPlugin> {
        self.cpu
            .as_ref()
            .expect("the scenario's steps need the cpu plugin")
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn reconcile(&self, periods: u32) {
        let mut cpu = self.cpu_plugin();
        for _ in 0..periods {
            cpu.reconcile(&self.loads).expect("reconcile");
        }
    }

    fn pool_names(&self) -> Vec<String> {
        self.cpu.as_ref().map_or_else(Vec::new, |_| {
            self.cpu_plugin()
                .pools()
                .entries()
                .keys()
                .cloned()
                .collect()
        })
    }

    /// Every admitted container's placement from the plugins' answers —
    /// `Allocate`'s, replaced by those of `GetResourcesAllocation` for the
    /// plugins the manager reconciles — built as the simulator's snapshot
    /// builds its own.
    async fn placements(&self) -> Vec<ContainerPlacement> {
        let polls: Vec<(String, Poll)> = self.qrm.poll().await;
        let mut out = Vec::new();
        for (uid, pod) in &self.pods {
            for container in pod.all_containers() {
                let mut entry = ContainerPlacement {
                    pod: uid.clone(),
                    container: container.name.clone(),
                    ..ContainerPlacement::default()
                };
                let key = (uid.clone(), container.name.clone());
                let mut allocations = self.allocated.get(&key).cloned().unwrap_or_default();
                for (_, poll) in &polls {
                    if let Some(Some(answer)) = poll.get(uid).and_then(|c| c.get(&container.name)) {
                        allocations.extend(answer.clone());
                    }
                }
                for info in allocations.values() {
                    let set = CpuSet::parse_list(&info.allocation_result).ok();
                    match info.oci_property_name.as_str() {
                        "CpusetCpus" => entry.cpus = set,
                        "CpusetMems" => entry.mems = set,
                        _ => {}
                    }
                    entry.envs.extend(info.envs.clone());
                    entry.annotations.extend(info.annotations.clone());
                }
                if self.cpu.is_some() {
                    entry.pool = self
                        .cpu_plugin()
                        .state()
                        .member(uid, &container.name)
                        .map(|m| m.kind.pool_name().to_string());
                }
                out.push(entry);
            }
        }
        out
    }

    async fn stop(self) {
        for plugin in self.served {
            plugin.stop().await;
        }
    }
}

fn serve<P: ResourcePlugin + 'static>(
    dir: &Path,
    resource: &str,
    plugin: GrpcPlugin<P>,
) -> ServedPlugin {
    let file = format!("{}.sock", resource.replace('/', "_"));
    serve_service_in(dir, resource, plugin, &file)
}

async fn wait_for_socket(socket: &Path) {
    let deadline = Instant::now() + PATIENCE;
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            socket.display()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn simulated_decision(step: &StepOutcome) -> Option<Decision> {
    step.admission.as_ref().map(|admission| Decision {
        admitted: admission.admitted,
        hints: admission
            .containers
            .iter()
            .map(|c| (c.container.clone(), c.hint.clone()))
            .collect(),
    })
}

fn simulate(path: &Path) -> (QrmScenario, Topology, Outcome) {
    let text = std::fs::read_to_string(path).expect("scenario");
    let scenario: QrmScenario = serde_yaml_ng::from_str(&text).expect("scenario parses");
    let topology = scenario::inline_topology(&scenario)
        .expect("machine")
        .expect("the examples give their machine inline");
    let outcome = scenario::run(&scenario, &topology).expect("the simulator runs it");
    (scenario, topology, outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_and_the_agents_manager_place_every_example_alike() {
    let files = scenarios();
    assert!(files.len() >= 3, "the qrm examples are missing: {files:?}");
    for path in files {
        let name = path.display().to_string();
        let (scenario, topology, outcome) = simulate(&path);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut agent = AgentSide::start(&scenario, &topology, dir.path()).await;
        let mut placed = 0;
        for (offset, value) in scenario.steps.iter().enumerate() {
            let step = Step::parse(offset + 1, value).expect("step");
            let simulated = &outcome.steps[offset];
            let decision = agent.step(&scenario, &step).await;
            assert_eq!(
                decision,
                simulated_decision(simulated),
                "{name}, step {} ({}): admission",
                offset + 1,
                simulated.step
            );
            let placements = agent.placements().await;
            assert_eq!(
                placements,
                simulated.snapshot.placements,
                "{name}, step {} ({}): placements",
                offset + 1,
                simulated.step
            );
            placed += placements.iter().filter(|p| p.cpus.is_some()).count();
        }
        assert!(placed > 0, "{name}: no step placed a container's CPUs");
        agent.stop().await;
    }
}
