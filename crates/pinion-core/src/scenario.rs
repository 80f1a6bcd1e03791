//! Policy-level scenarios (`pinion simulate`): the conformance corpus format
//! of `kind: policy` cases — a topology, options, a reservation, an initial
//! state, pods, and steps of start / add / remove — run through the
//! [`Engine`], producing per-step outcomes and the final state. Pinion's
//! additions: `features` (kubelet gates behind a switch, [`Features`]),
//! `pod_resources` (pod-level resources by pod) and `resize` steps
//! (in-place resize to the step's `cpu_request`).
//!
//! Expectation keys of corpus cases (`expect_*`) are ignored here; the
//! conformance tests compare them with the [`Outcome`].
//!
//! Admissions go through the Topology Manager configured by
//! `topologyManagerPolicy` / `topologyManagerScope` /
//! `topologyManagerPolicyOptions`, with the extra providers' `hints` (see
//! [`topology`] and `docs/simulate.md`); a step's own `hint` overrides it.

pub mod explain;
pub mod topology;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::engine::{AdmitReport, Engine};
use crate::placement::Placement;
use crate::pod::{Container, Pod, PodResources, RestartPolicy};
use crate::policy::{Features, PolicyConfig, PolicyError};
use crate::quantity::Quantity;
use crate::state::State;
use crate::topology::{try_synthetic, Shape, ShapeError, Topology};
use crate::topomgr::provider::{HintProvider, StaticHints};
use crate::topomgr::TopologyManagerError;

pub use topology::{HintsSpec, ScenarioHint, TopologyOutcome};

/// One scenario. Either `topology` is given, or the caller resolves
/// `sysroot` into a topology before [`run`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Scenario {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub topology: Option<Topology>,
    /// A regular machine (sockets × cores × threads) instead of a topology.
    #[serde(default)]
    pub machine: Option<Shape>,
    /// A sysfs root to discover the topology from (resolved by the caller).
    #[serde(default)]
    pub sysroot: Option<String>,
    /// Policy, options, feature gates and reservation.
    #[serde(flatten)]
    pub config: PolicyConfig,
    /// kubelet gates Pinion implements behind a switch, and Pinion's own
    /// options (all off by default).
    #[serde(default)]
    pub features: Features,
    /// Pod-level resources (`spec.resources`) by pod UID.
    #[serde(default)]
    pub pod_resources: BTreeMap<String, PodResources>,
    /// CPUs the kernel isolates at boot (`isolcpus=`), added to the
    /// machine's own: kept out of the shared pool, handed out only to pods
    /// that ask (`pinion.io/isolated-cpus`).
    #[serde(default)]
    pub isolated: CpuSet,
    #[serde(default)]
    pub initial_state: Option<InitialState>,
    #[serde(default)]
    pub pods: BTreeMap<String, Pod>,
    /// Extra hint providers: `"<pod>/<container>"` (container scope) or
    /// `"<pod>"` (pod scope) → resource → hints.
    #[serde(default)]
    pub hints: HintsSpec,
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// The state a scenario starts from, loaded as-is (like kubelet's test
/// mock state); a `start` step validates it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct InitialState {
    #[serde(default)]
    pub default: CpuSet,
    /// `"<pod>/<container>"` → CPUs.
    #[serde(default)]
    pub assignments: BTreeMap<String, CpuSet>,
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Start,
    Add,
    Remove,
    /// In-place resize of the container to the step's `cpu_request` (its
    /// new CPU request and limit).
    Resize,
}

/// One step. For `add`, the pod comes from [`Scenario::pods`]; when the pod
/// is not listed, the step's own resource fields describe a one-container pod.
#[derive(Debug, Clone, Deserialize)]
pub struct Step {
    pub op: Op,
    #[serde(default)]
    pub pod: Option<String>,
    #[serde(default)]
    pub container: Option<String>,
    #[serde(default)]
    pub hint: Option<Hint>,
    #[serde(default)]
    pub init: bool,
    #[serde(default)]
    pub restart_policy: Option<RestartPolicy>,
    #[serde(default)]
    pub cpu_request: Option<Quantity>,
    #[serde(default)]
    pub cpu_limit: Option<Quantity>,
    #[serde(default)]
    pub memory_request: Option<Quantity>,
    #[serde(default)]
    pub memory_limit: Option<Quantity>,
}

/// A Topology Manager affinity given to one `add`.
#[derive(Debug, Clone, Deserialize)]
pub struct Hint {
    pub numa_affinity: Vec<u32>,
}

/// The result of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepOutcome {
    pub op: Op,
    pub pod: Option<String>,
    pub container: Option<String>,
    /// The container's exclusive CPUs after the step.
    pub cpus: Option<CpuSet>,
    pub error: Option<String>,
    /// kubelet's admission reason when the step failed (e.g. `SMTAlignmentError`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The shared pool after the step.
    pub default: CpuSet,
    /// The Topology Manager's decision (`add` steps when its policy is not
    /// `none` and the step gives no `hint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyOutcome>,
    /// What Pinion's own asks did (`add` steps of pods with
    /// `pinion.io/isolated-cpus` or `pinion.io/uncore`; [`explain`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<String>,
}

/// The result of a scenario whose policy could be built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub steps: Vec<StepOutcome>,
    pub default: CpuSet,
    pub reserved: CpuSet,
    /// `"<pod>/<container>"` → CPUs.
    pub assignments: BTreeMap<String, CpuSet>,
    /// `"<pod>/<container>"` → where it runs, for every container admitted
    /// and not removed (the placement the agent's front-ends would apply).
    pub placements: BTreeMap<String, Placement>,
    /// The shared pool containers run in, when it differs from `default`
    /// (boot-isolated CPUs kept out of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_pool: Option<CpuSet>,
}

/// Why a scenario could not run at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// The policy could not be constructed (kubelet's error text).
    #[error("{0}")]
    Policy(#[from] PolicyError),
    /// The Topology Manager could not be constructed (kubelet's text).
    #[error("{0}")]
    TopologyManager(#[from] TopologyManagerError),
    #[error("hints key {key:?} names no pod or container of the scenario (expected \"<pod>/<container>\" or \"<pod>\")")]
    UnknownHintsKey { key: String },
    #[error("hints {key:?}, resource {resource:?}: {what}")]
    BadHints {
        key: String,
        resource: String,
        what: String,
    },
    #[error("scenario has no topology (give `topology`, `machine` or `sysroot`)")]
    NoTopology,
    #[error(transparent)]
    Shape(#[from] ShapeError),
    #[error("initial_state assignment key {key:?} is not \"<pod>/<container>\"")]
    BadAssignmentKey { key: String },
    #[error("step {index}: {what}")]
    BadStep { index: usize, what: String },
    #[error("isolated: {what}")]
    BadIsolated { what: String },
}

/// The topology given inline (`topology`, else `machine`); `Ok(None)` when
/// the scenario names only a `sysroot`, which the caller must discover.
pub fn inline_topology(scenario: &Scenario) -> Result<Option<Topology>, ScenarioError> {
    if let Some(topology) = &scenario.topology {
        return Ok(Some(topology.clone()));
    }
    match scenario.machine {
        Some(shape) => Ok(Some(try_synthetic(shape)?)),
        None if scenario.sysroot.is_some() => Ok(None),
        None => Err(ScenarioError::NoTopology),
    }
}

/// `topology` with the scenario's `isolated` CPUs added to the machine's
/// boot-isolated ones.
pub fn with_isolated(scenario: &Scenario, topology: &Topology) -> Result<Topology, ScenarioError> {
    let unknown = scenario.isolated.difference(topology.all_cpus());
    if !unknown.is_empty() {
        return Err(ScenarioError::BadIsolated {
            what: format!("cpus {unknown} are not online cpus of the machine"),
        });
    }
    let mut spec = topology.spec().clone();
    spec.isolated.union_with(&scenario.isolated);
    Topology::new(spec).map_err(|err| ScenarioError::BadIsolated {
        what: err.to_string(),
    })
}

/// Runs a scenario on `topology` (with the scenario's `isolated` CPUs
/// added to the machine's).
pub fn run(scenario: &Scenario, topology: &Topology) -> Result<Outcome, ScenarioError> {
    let isolated_topology;
    let topology = if scenario.isolated.is_subset(topology.isolated()) {
        topology
    } else {
        isolated_topology = with_isolated(scenario, topology)?;
        &isolated_topology
    };
    // kubelet's container manager builds the Topology Manager before the CPU
    // manager: a configuration both refuse fails with the former's error.
    let manager = scenario.config.build_topology_manager(topology)?;
    let policy = scenario.config.build_with(topology, scenario.features)?;
    check_hint_keys(scenario)?;
    let hints = topology::static_hints(&scenario.hints)?;
    let reserved = policy.reserved();
    let mut engine =
        Engine::new(topology, policy, initial_state(scenario)?).with_topology_manager(manager);
    for (uid, resources) in &scenario.pod_resources {
        engine.set_pod_resources(uid, Some(resources.clone()));
    }
    let mut steps = Vec::with_capacity(scenario.steps.len());
    let mut pods = BTreeMap::new();
    let mut admitted = std::collections::BTreeSet::new();
    for (index, step) in scenario.steps.iter().enumerate() {
        // The pod spec keeps its pod-level resources while the pod exists:
        // the engine forgets them with the pod's last held container, so a
        // container added after its siblings were all removed registers
        // them again (kubelet reads them from the spec at every admission).
        if let Some(uid) = step.pod.as_deref() {
            if let Some(resources) = scenario.pod_resources.get(uid) {
                if engine.pod_resources(uid).is_none() {
                    engine.set_pod_resources(uid, Some(resources.clone()));
                }
            }
        }
        let outcome = run_step(&mut engine, scenario, &hints, step, index, &mut pods)?;
        if let (Some(pod), Some(container)) = (&outcome.pod, &outcome.container) {
            let key = (pod.clone(), container.clone());
            match outcome.op {
                Op::Add if outcome.error.is_none() => {
                    admitted.insert(key);
                }
                Op::Remove => {
                    admitted.remove(&key);
                }
                _ => {}
            }
        }
        steps.push(outcome);
    }
    let placements = admitted
        .iter()
        .map(|(pod, container)| {
            (
                format!("{pod}/{container}"),
                engine.placement(pod, container),
            )
        })
        .collect();
    let state = engine.state();
    let assignments = state
        .assignments
        .iter()
        .flat_map(|(pod, containers)| {
            containers
                .iter()
                .map(move |(container, cpus)| (format!("{pod}/{container}"), cpus.clone()))
        })
        .collect();
    let shared_pool = engine.shared_pool();
    Ok(Outcome {
        steps,
        shared_pool: (shared_pool != state.default).then_some(shared_pool),
        default: state.default.clone(),
        reserved,
        assignments,
        placements,
    })
}

/// Every `hints` key must name a pod, or a container of a pod, that the
/// scenario defines (in `pods` or in a step).
fn check_hint_keys(scenario: &Scenario) -> Result<(), ScenarioError> {
    let mut known = std::collections::BTreeSet::new();
    for (uid, pod) in &scenario.pods {
        known.insert(uid.clone());
        for container in pod.all_containers() {
            known.insert(format!("{uid}/{}", container.name));
        }
    }
    for step in &scenario.steps {
        if let Some(pod) = &step.pod {
            known.insert(pod.clone());
            if let Some(container) = &step.container {
                known.insert(format!("{pod}/{container}"));
            }
        }
    }
    match scenario.hints.keys().find(|key| !known.contains(*key)) {
        Some(key) => Err(ScenarioError::UnknownHintsKey { key: key.clone() }),
        None => Ok(()),
    }
}

fn initial_state(scenario: &Scenario) -> Result<State, ScenarioError> {
    let mut state = State::default();
    let Some(initial) = &scenario.initial_state else {
        return Ok(state);
    };
    state.default = initial.default.clone();
    for (key, cpus) in &initial.assignments {
        let (pod, container) = key
            .split_once('/')
            .ok_or_else(|| ScenarioError::BadAssignmentKey { key: key.clone() })?;
        state.assign(pod, container, cpus.clone());
    }
    Ok(state)
}

/// Runs one step; `pods` holds the pod specs as admitted and resized so far.
fn run_step(
    engine: &mut Engine,
    scenario: &Scenario,
    hints: &StaticHints,
    step: &Step,
    index: usize,
    pods: &mut BTreeMap<String, Pod>,
) -> Result<StepOutcome, ScenarioError> {
    let names = || -> Result<(&str, &str), ScenarioError> {
        match (step.pod.as_deref(), step.container.as_deref()) {
            (Some(pod), Some(container)) => Ok((pod, container)),
            _ => Err(ScenarioError::BadStep {
                index,
                what: "needs `pod` and `container`".into(),
            }),
        }
    };
    let mut error = None;
    let mut topology = None;
    let mut explained = None;
    match step.op {
        Op::Start => error = engine.start().err(),
        Op::Remove => {
            let (pod, container) = names()?;
            engine.remove(pod, container);
        }
        Op::Add => {
            let (pod_uid, name) = names()?;
            let pod = step_pod(scenario, step, pod_uid);
            remember(pods, &pod, name, scenario.pods.contains_key(pod_uid));
            let report = admit(engine, hints, step, &pod, name, index)?;
            if let Ok(ask) = crate::policy::CpuAsk::from_annotations(&pod.annotations) {
                if !ask.is_plain() {
                    let requested = engine.exclusive_cpus_asked(&pod, name);
                    let machine = engine.machine();
                    explained = Some(explain::explain(machine, ask, requested, &report.result));
                }
            }
            let policy = engine.topology_manager().policy();
            topology = report.topology.map(|d| topology::outcome(policy, &d));
            error = match report.result {
                Err(PolicyError::UnknownContainer { pod, container }) => {
                    let what = format!("pod {pod} has no container {container:?}");
                    return Err(ScenarioError::BadStep { index, what });
                }
                other => other.err(),
            };
        }
        Op::Resize => {
            let (pod_uid, name) = names()?;
            let bad = |what: &str| ScenarioError::BadStep {
                index,
                what: what.to_owned(),
            };
            let new = step
                .cpu_request
                .clone()
                .ok_or_else(|| bad("`resize` needs `cpu_request` (the new CPU request)"))?;
            let pod = pods
                .get(pod_uid)
                .cloned()
                .ok_or_else(|| bad("`resize` of a pod that no `add` step admitted"))?;
            let providers: Vec<&dyn HintProvider> = if hints.is_empty() {
                Vec::new()
            } else {
                vec![hints]
            };
            let report = engine.resize_container_with(&pod, name, &new, &providers);
            let policy = engine.topology_manager().policy();
            topology = report.topology.map(|d| topology::outcome(policy, &d));
            match report.result {
                Err(PolicyError::UnknownContainer { pod, container }) => {
                    let what = format!("pod {pod} has no container {container:?}");
                    return Err(ScenarioError::BadStep { index, what });
                }
                Err(err) => error = Some(err),
                Ok(_) => {
                    if let Some(entry) = pods.get_mut(pod_uid) {
                        entry.set_container_cpus(name, &new);
                    }
                }
            }
        }
    }
    let cpus = match (step.pod.as_deref(), step.container.as_deref()) {
        (Some(pod), Some(container)) => engine.state().assignment(pod, container).cloned(),
        _ => None,
    };
    Ok(StepOutcome {
        op: step.op,
        pod: step.pod.clone(),
        container: step.container.clone(),
        cpus,
        reason: error.as_ref().map(|e| e.reason().to_string()),
        error: error.map(|e| e.to_string()),
        default: engine.state().default.clone(),
        topology,
        explain: explained,
    })
}

/// One `add`: with the step's explicit `hint`, else through the Topology
/// Manager with the scenario's extra providers.
fn admit(
    engine: &mut Engine,
    hints: &StaticHints,
    step: &Step,
    pod: &Pod,
    name: &str,
    index: usize,
) -> Result<AdmitReport, ScenarioError> {
    if let Some(hint) = &step.hint {
        return Ok(AdmitReport {
            result: engine.admit_container(pod, name, Some(&hint.numa_affinity)),
            topology: None,
        });
    }
    if engine.topology_manager().scope() == crate::topomgr::Scope::Pod {
        if let Err(err) = hints.pod_entry(pod) {
            return Err(ScenarioError::BadStep {
                index,
                what: err.to_string(),
            });
        }
    }
    let providers: Vec<&dyn HintProvider> = if hints.is_empty() {
        Vec::new()
    } else {
        vec![hints]
    };
    Ok(engine.admit_container_with(pod, name, &providers))
}

/// Records container `name` of an admitted `pod` for later `resize` steps:
/// the whole pod when the scenario lists it (`listed`), else the containers
/// the `add` steps described; a resized spec already recorded is kept.
fn remember(pods: &mut BTreeMap<String, Pod>, pod: &Pod, name: &str, listed: bool) {
    let entry = pods.entry(pod.uid.clone()).or_insert_with(|| {
        if listed {
            pod.clone()
        } else {
            Pod {
                uid: pod.uid.clone(),
                ..Pod::default()
            }
        }
    });
    if entry.container(name).is_some() {
        return;
    }
    if let Some(container) = pod.init_containers.iter().find(|c| c.name == name) {
        entry.init_containers.push(container.clone());
    } else if let Some(container) = pod.containers.iter().find(|c| c.name == name) {
        entry.containers.push(container.clone());
    }
}

/// The pod of an `add` step: from `pods`, else a one-container pod built
/// from the step's own fields (kubelet tests' `makePod`).
fn step_pod(scenario: &Scenario, step: &Step, uid: &str) -> Pod {
    if let Some(pod) = scenario.pods.get(uid) {
        let mut pod = pod.clone();
        pod.uid = uid.to_string();
        return pod;
    }
    let container = Container {
        name: step.container.clone().unwrap_or_default(),
        cpu_request: step.cpu_request.clone(),
        cpu_limit: step.cpu_limit.clone(),
        memory_request: step.memory_request.clone(),
        memory_limit: step.memory_limit.clone(),
        restart_policy: step.restart_policy,
        ..Container::default()
    };
    let mut pod = Pod {
        uid: uid.to_string(),
        ..Pod::default()
    };
    if step.init {
        pod.init_containers.push(container);
    } else {
        pod.containers.push(container);
    }
    pod
}
