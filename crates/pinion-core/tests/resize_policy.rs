//! In-place resize of exclusive CPUs at the policy and engine level
//! (KEP-5554, switch `Features::in_place_resize_exclusive_cpus`, kubelet
//! gate `InPlacePodVerticalScalingExclusiveCPUs`).
//!
//! First kubelet's own tables, transcribed from
//! `esotsal/kubernetes@2a78223f3bd517de0bf150d778a8989c57f1d653`
//! `pkg/kubelet/cm/cpumanager/policy_static_test.go` (the branch of
//! kubernetes/kubernetes PR #140629): `TestStaticPolicyPodResizeCPUsSingleContainerPod`
//! (all 9 rows) and `TestStaticPolicyPodResizeCPUsMultiContainerPod` (all 8
//! rows). Each row admits the pod, resizes container `appContainer-0`
//! (kubelet calls Allocate with `ResizeOperation` for every container of
//! the pod; the engine is called for each container in the same order),
//! then removes the containers, checking the shared pool after each step
//! and the error of the resize.
//!
//! Transcription notes:
//! * upstream sets the pod's QoS class to Guaranteed by hand; Pinion
//!   computes it, so every container also gets memory request = limit.
//! * upstream runs these rows with the gate *off* on a policy version whose
//!   feasibility checks (`isFeasibleResize`) ran before the gate check, and
//!   compares an error only when one is returned. Here the switch is on, so
//!   the two rows that grow a container (`Increase …`) really grow it: their
//!   shared pool after the resize is Pinion's (`after_resize_on`), while
//!   with the switch off the resize is refused (`ResizeDisabled`) and the
//!   pool is upstream's `expCSetAfterResize`, checked too — except a resize
//!   within the shared pool (fractional before and after), which has nothing
//!   to do (`Ok(None)`), as kubelet's `Allocate` returns at once for it. The `Keep same`
//!   rows expect kubelet's "nothing to be done" error upstream; the newest
//!   branch (`@332ea1b2`, which Pinion follows) accepts an unchanged request
//!   and keeps the CPUs, so Pinion returns the same CPUs.
//!
//! Then Pinion's own behaviour tests of the engine API.

use pinion_core::engine::{AlignBoundary, AlignScope, Engine};
use pinion_core::pod::{Container, Pod, PodResources};
use pinion_core::policy::{Features, PolicyConfig, PolicyError};
use pinion_core::state::State;
use pinion_core::topomgr::{NumaInfo, TopologyManager};
use pinion_core::{CpuInfo, CpuSet, Quantity, Topology, TopologySpec};

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("test cpulist")
}

fn q(text: &str) -> Quantity {
    Quantity::parse(text).expect("quantity")
}

/// kubelet's topoSingleSocketHT: 8 CPUs, core = id mod 4.
fn single_socket_ht() -> Topology {
    machine(8, 4, |_| 0)
}

/// kubelet's topoDualSocketHT: 12 CPUs, core = id mod 6, socket = NUMA
/// node = core mod 2.
fn dual_socket_ht() -> Topology {
    machine(12, 6, |core| core % 2)
}

fn machine(cpus: u32, cores: u32, node: impl Fn(u32) -> u32) -> Topology {
    let cpus = (0..cpus)
        .map(|id| {
            let core = id % cores;
            CpuInfo {
                id,
                core,
                socket: node(core),
                numa: node(core),
                uncore: 0,
                llc: None,
                die: None,
                core_type: None,
            }
        })
        .collect();
    Topology::new(TopologySpec {
        cpus,
        ..TopologySpec::default()
    })
    .expect("topology")
}

fn container(name: &str, cpu: &str) -> Container {
    Container {
        name: name.to_owned(),
        cpu_request: Some(q(cpu)),
        cpu_limit: Some(q(cpu)),
        memory_request: Some(q("100Mi")),
        memory_limit: Some(q("100Mi")),
        ..Container::default()
    }
}

/// upstream `makeMultiContainerPodWithOptions(nil, apps)`: app containers
/// `appContainer-<i>`.
fn pod(apps: &[&str]) -> Pod {
    Pod {
        uid: "pod".to_owned(),
        init_containers: Vec::new(),
        containers: apps
            .iter()
            .enumerate()
            .map(|(i, cpu)| container(&format!("appContainer-{i}"), cpu))
            .collect(),
        ..Pod::default()
    }
}

fn switch(on: bool) -> Features {
    Features {
        in_place_resize_exclusive_cpus: on,
        ..Features::default()
    }
}

fn engine_with(
    topology: &Topology,
    config: &PolicyConfig,
    features: Features,
    manager: Option<TopologyManager>,
) -> Engine {
    let policy = config.build_with(topology, features).expect("policy");
    let mut engine = Engine::new(topology, policy, State::default());
    if let Some(manager) = manager {
        engine = engine.with_topology_manager(manager);
    }
    engine.start().expect("starts");
    engine
}

fn engine(topology: &Topology, features: Features) -> Engine {
    let config = PolicyConfig {
        num_reserved: Some(0),
        ..PolicyConfig::default()
    };
    engine_with(topology, &config, features, None)
}

struct ResizeRow {
    name: &'static str,
    /// CPU request = limit of each app container.
    apps: &'static [&'static str],
    /// The new CPU request = limit of `appContainer-0`.
    resize: &'static str,
    /// The error text of `appContainer-0`'s resize (switch on).
    error: Option<&'static str>,
    after_alloc: &'static str,
    /// upstream `expCSetAfterResize` (gate off; ≡ unchanged).
    after_resize: &'static str,
    /// The shared pool after the resize with the switch on.
    after_resize_on: &'static str,
    after_remove: &'static str,
}

const INCONSISTENT_TO_EXCLUSIVE_2100M: &str = "inconsistentCPUAllocation Error: Not allowed to move a container from shared pool to exclusively allocated pool, (requested CPUs = 2, allocated CPUs = 2100m)";
const INCONSISTENT_TO_SHARED_1500M: &str = "inconsistentCPUAllocation Error: Not allowed to move a container from  exclusively allocated pool to shared pool, not allowed (requested CPUs = 1500m, allocated CPUs = 2)";
const PROHIBITED_4_TO_2: &str = "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool below promised, (requested CPUs = 2, allocated CPUs = 4, promised CPUs = 4, guaranteed CPUs = 2)";

const ALL: &str = "0-7";

fn single_container_rows() -> Vec<ResizeRow> {
    vec![
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in exclusively allocated pool, Increase allocated CPUs",
            apps: &["2000m"],
            resize: "4000m",
            error: None,
            after_alloc: "1-3,5-7",
            after_resize: "1-3,5-7",
            after_resize_on: "2-3,6-7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in exclusively allocated pool, Keep same allocated CPUs",
            apps: &["2000m"],
            resize: "2000m",
            error: None,
            after_alloc: "1-3,5-7",
            after_resize: "1-3,5-7",
            after_resize_on: "1-3,5-7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in exclusively allocated pool, Decrease allocated CPUs",
            apps: &["4000m"],
            resize: "2000m",
            error: Some(PROHIBITED_4_TO_2),
            after_alloc: "2-3,6-7",
            // upstream checks only the size (4) here.
            after_resize: "2-3,6-7",
            after_resize_on: "2-3,6-7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in shared pool with more than one core, Attempt to move to exclusively allocated pool",
            apps: &["2100m"],
            resize: "2000m",
            error: Some(INCONSISTENT_TO_EXCLUSIVE_2100M),
            after_alloc: ALL,
            after_resize: ALL,
            after_resize_on: ALL,
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in shared pool, Increase CPU and keep in shared pool",
            apps: &["100m"],
            resize: "200m",
            error: None,
            after_alloc: ALL,
            after_resize: ALL,
            after_resize_on: ALL,
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in shared pool, Increase CPU and keep in shared pool#01",
            apps: &["1100m"],
            resize: "1200m",
            error: None,
            after_alloc: ALL,
            after_resize: ALL,
            after_resize_on: ALL,
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in shared pool with less than one core, Decrease CPU and keep in shared pool",
            apps: &["200m"],
            resize: "100m",
            error: None,
            after_alloc: ALL,
            after_resize: ALL,
            after_resize_on: ALL,
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in shared pool with more than one core, Decrease CPU and keep in shared pool",
            apps: &["1200m"],
            resize: "1100m",
            error: None,
            after_alloc: ALL,
            after_resize: ALL,
            after_resize_on: ALL,
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Container in exclusively allocated pool, Move to shared pool",
            apps: &["2000m"],
            resize: "1500m",
            error: Some(INCONSISTENT_TO_SHARED_1500M),
            after_alloc: "1-3,5-7",
            after_resize: "1-3,5-7",
            after_resize_on: "1-3,5-7",
            after_remove: ALL,
        },
    ]
}

fn multi_container_rows() -> Vec<ResizeRow> {
    vec![
        ResizeRow {
            name: "SingleSocketHT, PodResize, Containers in exclusively allocated pool, Increase appContainer-0 allocated CPUs",
            apps: &["2000m", "2000m"],
            resize: "4000m",
            error: None,
            after_alloc: "2-3,6-7",
            after_resize: "2-3,6-7",
            after_resize_on: "3,7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Containers in exclusively allocated pool, Keep same allocated CPUs",
            apps: &["2000m", "2000m"],
            resize: "2000m",
            error: None,
            after_alloc: "2-3,6-7",
            after_resize: "2-3,6-7",
            after_resize_on: "2-3,6-7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Containers in exclusively allocated pool, Decrease appContainer-0 allocated CPUs",
            apps: &["4000m", "4000m"],
            resize: "2000m",
            error: Some(PROHIBITED_4_TO_2),
            after_alloc: "",
            after_resize: "",
            after_resize_on: "",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, Containers in shared pool with more than one core, Attempt to move to exclusively allocated pool",
            apps: &["2100m", "2100m"],
            resize: "2000m",
            error: Some(INCONSISTENT_TO_EXCLUSIVE_2100M),
            after_alloc: ALL,
            after_resize: ALL,
            after_resize_on: ALL,
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, appContainer-0 in shared pool, Increase CPU and keep appContainer-0 in shared pool",
            apps: &["100m", "4000m"],
            resize: "200m",
            error: None,
            after_alloc: "2-3,6-7",
            after_resize: "2-3,6-7",
            after_resize_on: "2-3,6-7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, appContainer-0 in shared pool with more than one core, Increase CPU and keep appContainer-0 in shared pool",
            apps: &["1100m", "4000m"],
            resize: "1200m",
            error: None,
            after_alloc: "2-3,6-7",
            after_resize: "2-3,6-7",
            after_resize_on: "2-3,6-7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, appContainer-0 in shared pool, appContainer-1 in exclusive pool, Decrease CPU and keep in shared pool",
            apps: &["200m", "4000m"],
            resize: "100m",
            error: None,
            after_alloc: "2-3,6-7",
            after_resize: "2-3,6-7",
            after_resize_on: "2-3,6-7",
            after_remove: ALL,
        },
        ResizeRow {
            name: "SingleSocketHT, PodResize, appContainer-0 in exclusively allocated pool, Move to shared pool",
            apps: &["2000m", "200m"],
            resize: "1500m",
            error: Some(INCONSISTENT_TO_SHARED_1500M),
            after_alloc: "1-3,5-7",
            after_resize: "1-3,5-7",
            after_resize_on: "1-3,5-7",
            after_remove: ALL,
        },
    ]
}

/// Runs one row with the switch `on`; returns the failures.
fn run_row(row: &ResizeRow, on: bool) -> Vec<String> {
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(format!("{} (switch {on}): {what}", row.name));
    let mut engine = engine(&single_socket_ht(), switch(on));
    let mut spec = pod(row.apps);
    for c in spec.containers.clone() {
        if let Err(err) = engine.admit_container(&spec, &c.name, None) {
            fail(format!("admit {}: {err}", c.name));
        }
    }
    if engine.state().default != set(row.after_alloc) {
        fail(format!("after alloc: shared {}", engine.state().default));
    }
    // kubelet: Allocate(ResizeOperation) for every container, the first
    // one with its new request.
    let names: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
    for (i, name) in names.iter().enumerate() {
        let new = if i == 0 {
            q(row.resize)
        } else {
            spec.containers[i].cpu_request.clone().expect("request")
        };
        let got = engine.resize_container(&spec, name, &new);
        // Whole CPUs before or after: exclusive (the pods are Guaranteed).
        let whole = |q: &Quantity| q.milli_value().is_multiple_of(1000);
        let shared_both =
            !whole(spec.containers[i].cpu_request.as_ref().expect("request")) && !whole(&new);
        match (&got, on, i) {
            // kubelet's `Allocate` has nothing to do in the shared pool.
            (Ok(None), false, _) if shared_both => {}
            (Err(PolicyError::ResizeDisabled { .. }), false, _) if !shared_both => {}
            (other, false, _) => fail(format!(
                "{name}: expected {}, got {other:?}",
                if shared_both {
                    "Ok(None)"
                } else {
                    "ResizeDisabled"
                }
            )),
            (Err(err), true, 0) if row.error == Some(err.to_string().as_str()) => {}
            (Err(err), true, _) => fail(format!("{name}: unexpected error {err}")),
            (Ok(_), true, 0) if row.error.is_some() => {
                fail(format!("{name}: expected error {:?}", row.error));
            }
            (Ok(_), true, _) => {
                spec.containers[i].cpu_request = Some(new.clone());
                spec.containers[i].cpu_limit = Some(new);
            }
        }
    }
    let expected = if on {
        row.after_resize_on
    } else {
        row.after_resize
    };
    if engine.state().default != set(expected) {
        fail(format!("after resize: shared {}", engine.state().default));
    }
    for name in &names {
        engine.remove("pod", name);
    }
    if engine.state().default != set(row.after_remove) {
        fail(format!("after remove: shared {}", engine.state().default));
    }
    if !engine.state().assignments.is_empty() || !engine.promised_cpus().is_empty() {
        fail("state left behind after removal".into());
    }
    failures
}

#[test]
fn kubelet_pod_resize_single_container_pod_table() {
    let rows = single_container_rows();
    assert_eq!(rows.len(), 9);
    let failures: Vec<String> = rows
        .iter()
        .flat_map(|row| [run_row(row, true), run_row(row, false)])
        .flatten()
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn kubelet_pod_resize_multi_container_pod_table() {
    let rows = multi_container_rows();
    assert_eq!(rows.len(), 8);
    let failures: Vec<String> = rows
        .iter()
        .flat_map(|row| [run_row(row, true), run_row(row, false)])
        .flatten()
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------
// Pinion's behaviour tests of the engine API.

/// Growing keeps every CPU and adds whole cores next to them; shrinking
/// gives back only what was added; the promised (first) CPUs are kept.
#[test]
fn grow_keeps_all_cpus_and_shrink_keeps_the_promised_ones() {
    let topo = dual_socket_ht();
    let mut engine = engine(&topo, switch(true));
    let mut p = pod(&["2"]);
    p.containers.push(container("other", "2"));
    let first = engine
        .admit_container(&p, "appContainer-0", None)
        .expect("admit")
        .expect("exclusive");
    engine.admit_container(&p, "other", None).expect("admit");
    let grown = engine
        .resize_container(&p, "appContainer-0", &q("6"))
        .expect("grow")
        .expect("exclusive");
    assert!(first.is_subset(&grown), "{first} ⊄ {grown}");
    assert_eq!(grown.len(), 6);
    assert_eq!(engine.promised_cpus()["pod"]["appContainer-0"], first);
    engine.check_invariants().expect("invariants");
    assert!(engine.state().default.is_disjoint(&grown));

    p.containers[0] = container("appContainer-0", "6");
    let before = engine.state().clone();
    let shrunk = engine
        .resize_container(&p, "appContainer-0", &q("4"))
        .expect("shrink")
        .expect("exclusive");
    assert_eq!(shrunk.len(), 4);
    assert!(first.is_subset(&shrunk) && shrunk.is_subset(&grown));
    // Exactly the released CPUs went back to the shared pool.
    let released = grown.difference(&shrunk);
    assert_eq!(
        engine.state().default,
        before.default.union(&released),
        "shrink must not move other CPUs"
    );

    p.containers[0] = container("appContainer-0", "4");
    let back = engine
        .resize_container(&p, "appContainer-0", &q("2"))
        .expect("shrink to promised");
    assert_eq!(back, Some(first.clone()));

    p.containers[0] = container("appContainer-0", "2");
    let before = engine.state().clone();
    let err = engine
        .resize_container(&p, "appContainer-0", &q("1"))
        .expect_err("below promised");
    assert_eq!(
        err.to_string(),
        "prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool below promised, (requested CPUs = 1, allocated CPUs = 2, promised CPUs = 2, guaranteed CPUs = 1)"
    );
    assert_eq!(err.reason(), "prohibitedCPUAllocationError");
    assert_eq!(engine.state(), &before, "state untouched on error");
}

/// The switch is off by default: the resize is refused with a clear error
/// and nothing changes.
#[test]
fn resize_is_refused_while_the_switch_is_off() {
    let mut engine = engine(&single_socket_ht(), Features::default());
    let p = pod(&["2"]);
    engine
        .admit_container(&p, "appContainer-0", None)
        .expect("admit");
    let before = engine.state().clone();
    let err = engine
        .resize_container(&p, "appContainer-0", &q("4"))
        .expect_err("off");
    assert_eq!(
        err.to_string(),
        "in-place resize of exclusive CPUs is disabled (feature InPlacePodVerticalScalingExclusiveCPUs is off): pod pod container \"appContainer-0\" keeps its CPUs"
    );
    assert_eq!(engine.state(), &before);
    assert_eq!(engine.metrics().pinning_requests_total, 1);
}

#[test]
fn resize_of_an_unknown_container_names_it() {
    let mut engine = engine(&single_socket_ht(), switch(true));
    let err = engine
        .resize_container(&pod(&["2"]), "ghost", &q("4"))
        .expect_err("unknown");
    assert_eq!(err.to_string(), "pod pod has no container \"ghost\"");
}

/// A grow that does not fit is kubelet's ResizeAllocateCPUs error, with the
/// allocator's text; the state, counters aside, is unchanged.
#[test]
fn grow_beyond_the_free_cpus_fails_and_changes_nothing() {
    let mut engine = engine(&single_socket_ht(), switch(true));
    let p = pod(&["2", "4"]);
    for name in ["appContainer-0", "appContainer-1"] {
        engine.admit_container(&p, name, None).expect("admit");
    }
    let before = engine.state().clone();
    let err = engine
        .resize_container(&p, "appContainer-0", &q("5"))
        .expect_err("only 2 free");
    let text = err.to_string();
    assert!(
        text.starts_with("ResizeAllocateCPUs Error: Skip resize, unable to resize container exclusively allocated pool, (podUID = pod, containerName = appContainer-0, topologyError = not enough cpus available to satisfy request"),
        "{text}"
    );
    assert_eq!(err.reason(), "ResizeAllocateCPUsError");
    assert_eq!(engine.state(), &before);
    assert!(engine.promised_cpus().is_empty());
    let m = engine.metrics();
    assert_eq!((m.pinning_requests_total, m.pinning_errors_total), (3, 1));
}

/// Feasibility errors come before kubelet's pinning counters.
#[test]
fn refused_moves_do_not_count_as_pinning_requests() {
    let mut engine = engine(&single_socket_ht(), switch(true));
    let p = pod(&["2"]);
    engine
        .admit_container(&p, "appContainer-0", None)
        .expect("admit");
    let err = engine
        .resize_container(&p, "appContainer-0", &q("1500m"))
        .expect_err("to shared");
    assert_eq!(err.reason(), "inconsistentCPUAllocationError");
    let m = engine.metrics();
    assert_eq!((m.pinning_requests_total, m.pinning_errors_total), (1, 0));
    assert_eq!(m.topology.errors_total, 1);
}

/// `full-pcpus-only`: the new count must be a multiple of the threads per
/// core, and the container's own CPUs count as available.
#[test]
fn full_pcpus_only_checks_count_the_containers_own_cpus() {
    let config = PolicyConfig {
        num_reserved: Some(0),
        options: [("full-pcpus-only".to_owned(), "true".to_owned())].into(),
        ..PolicyConfig::default()
    };
    let mut engine = engine_with(&single_socket_ht(), &config, switch(true), None);
    let p = pod(&["4", "2"]);
    for name in ["appContainer-0", "appContainer-1"] {
        engine.admit_container(&p, name, None).expect("admit");
    }
    assert_eq!(engine.state().default.len(), 2);
    let err = engine
        .resize_container(&p, "appContainer-0", &q("5"))
        .expect_err("odd");
    assert_eq!(
        err,
        PolicyError::SmtNotMultiple {
            requested: 5,
            cpus_per_core: 2
        }
    );
    let err = engine
        .resize_container(&p, "appContainer-0", &q("8"))
        .expect_err("2 free + 4 own");
    assert_eq!(
        err,
        PolicyError::SmtNotEnoughPhysical {
            available: 6,
            requested: 8,
            cpus_per_core: 2
        }
    );
    let grown = engine
        .resize_container(&p, "appContainer-0", &q("6"))
        .expect("fits")
        .expect("exclusive");
    assert_eq!(grown.len(), 6);
    assert!(engine.state().default.is_empty());
    let m = engine.metrics();
    assert_eq!(
        m.aligned
            .get(AlignScope::Container, AlignBoundary::PhysicalCpu),
        3
    );
    assert_eq!(
        m.aligned_failures
            .get(AlignScope::Container, AlignBoundary::PhysicalCpu),
        2
    );
}

fn single_numa(topology: &Topology) -> TopologyManager {
    let numa = NumaInfo::from_topology(topology).expect("numa info");
    TopologyManager::new("single-numa-node", "container", &Default::default(), numa)
        .expect("topology manager")
}

/// Under `single-numa-node` a container may grow only inside its NUMA node:
/// the resize hints keep its own CPUs' nodes.
#[test]
fn single_numa_node_keeps_a_growing_container_on_its_node() {
    let topo = dual_socket_ht();
    let config = PolicyConfig {
        num_reserved: Some(0),
        ..PolicyConfig::default()
    };
    let manager = single_numa(&topo);
    let mut engine = engine_with(&topo, &config, switch(true), Some(manager));
    let p = pod(&["2"]);
    let first = engine
        .admit_container(&p, "appContainer-0", None)
        .expect("admit")
        .expect("exclusive");
    let node = |cpus: &CpuSet| -> Vec<u32> {
        let mut nodes: Vec<u32> = cpus
            .iter()
            .map(|c| topo.cpu(c).expect("cpu").numa)
            .collect();
        nodes.dedup();
        nodes
    };
    let grown = engine
        .resize_container(&p, "appContainer-0", &q("6"))
        .expect("NUMA node has 6 CPUs")
        .expect("exclusive");
    assert_eq!(node(&grown), node(&first));
    assert_eq!(grown.len(), 6);

    let mut p6 = pod(&["6"]);
    p6.uid = p.uid.clone();
    let before = engine.state().clone();
    let report = engine.resize_container_with(&p6, "appContainer-0", &q("8"), &[]);
    assert_eq!(
        report.result,
        Err(PolicyError::TopologyAffinity(
            pinion_core::topomgr::TopologyAffinityError
        ))
    );
    assert!(!report.topology.expect("decision").admit);
    assert_eq!(engine.state(), &before);
    let m = engine.metrics();
    assert_eq!(
        m.aligned_failures
            .get(AlignScope::Container, AlignBoundary::NumaNode),
        1
    );
    assert_eq!(
        m.aligned
            .get(AlignScope::Container, AlignBoundary::NumaNode),
        2
    );
}

/// kubelet skips the resize of pods with pod-level resources: the CPUs stay.
#[test]
fn pods_with_pod_level_resources_keep_their_cpus() {
    let features = Features {
        in_place_resize_exclusive_cpus: true,
        pod_level_resource_managers: true,
        ..Features::default()
    };
    let mut engine = engine(&dual_socket_ht(), features);
    let p = pod(&["2"]);
    engine.set_pod_resources(
        "pod",
        Some(PodResources {
            cpu_request: Some(q("4")),
            cpu_limit: Some(q("4")),
            memory_request: Some(q("300Mi")),
            memory_limit: Some(q("300Mi")),
        }),
    );
    let cpus = engine
        .admit_container(&p, "appContainer-0", None)
        .expect("admit");
    let before = engine.state().clone();
    assert_eq!(
        engine.resize_container(&p, "appContainer-0", &q("4")),
        Ok(cpus)
    );
    assert_eq!(engine.state(), &before);
}

/// Regression guard for Pinion's strict-reservation rule: a grow that would
/// take the last shared CPU is refused like an admission would be.
#[test]
fn strict_reservation_never_lets_a_resize_empty_the_shared_pool() {
    let config = PolicyConfig {
        num_reserved: Some(2),
        options: [("strict-cpu-reservation".to_owned(), "true".to_owned())].into(),
        ..PolicyConfig::default()
    };
    let mut engine = engine_with(&single_socket_ht(), &config, switch(true), None);
    let p = pod(&["2"]);
    engine
        .admit_container(&p, "appContainer-0", None)
        .expect("admit");
    assert_eq!(engine.state().default.len(), 4);
    let before = engine.state().clone();
    let err = engine
        .resize_container(&p, "appContainer-0", &q("6"))
        .expect_err("would empty the pool");
    assert_eq!(err, PolicyError::SharedPoolWouldBeEmpty { requested: 6 });
    assert_eq!(engine.state(), &before);
    assert!(engine
        .resize_container(&p, "appContainer-0", &q("5"))
        .expect("one shared CPU left")
        .is_some());
}

/// The promised CPUs survive a restart when the front-end persists them.
#[test]
fn promised_cpus_are_restored_with_the_engine() {
    let topo = single_socket_ht();
    let mut engine = engine(&topo, switch(true));
    let p = pod(&["2"]);
    let first = engine
        .admit_container(&p, "appContainer-0", None)
        .expect("admit")
        .expect("exclusive");
    engine
        .resize_container(&p, "appContainer-0", &q("4"))
        .expect("grow");
    let policy = PolicyConfig {
        num_reserved: Some(0),
        ..PolicyConfig::default()
    }
    .build_with(&topo, switch(true))
    .expect("policy");
    let mut restarted = Engine::new(&topo, policy, engine.state().clone())
        .with_promised_cpus(engine.promised_cpus().clone());
    restarted.start().expect("start");
    let p4 = pod(&["4"]);
    assert_eq!(
        restarted.resize_container(&p4, "appContainer-0", &q("2")),
        Ok(Some(first))
    );
}

/// Regression (found by the engine property test): an init container grown
/// in place, whose CPUs the app container then reused, shrank back and
/// returned to the shared pool CPUs the app container still held — a double
/// allocation (kubelet's `allocateCPUsForResize` releases them; the API
/// server does not let regular init containers be resized, Pinion's engine
/// does not rely on that).
#[test]
fn shrinking_never_frees_cpus_another_container_of_the_pod_reuses() {
    let mut engine = engine(&single_socket_ht(), switch(true));
    let mut p = Pod {
        uid: "pod".to_owned(),
        init_containers: vec![container("init", "1")],
        containers: vec![container("app", "4")],
        ..Pod::default()
    };
    engine
        .admit_container(&p, "init", None)
        .expect("admit init");
    let grown = engine
        .resize_container(&p, "init", &q("4"))
        .expect("grow init")
        .expect("exclusive");
    p.init_containers[0] = container("init", "4");
    let app = engine
        .admit_container(&p, "app", None)
        .expect("admit app")
        .expect("exclusive");
    assert_eq!(
        app, grown,
        "the app container reuses the init container's CPUs"
    );
    engine
        .resize_container(&p, "init", &q("1"))
        .expect("shrink init");
    assert!(engine.state().default.is_disjoint(&app));
    engine.check_invariants().expect("invariants");
}

/// Regression (found from outside with containerd): with the switch off,
/// every CPU resize was refused as `ResizeDisabled`, a Burstable
/// container's too: the agent logged "in-place resize of exclusive CPUs is
/// disabled" for a container that never has any, and kept its old request.
/// kubelet's `Allocate` has nothing to do in the shared pool, switch or not;
/// a resize from or to exclusive CPUs is still refused.
#[test]
fn regression_a_resize_within_the_shared_pool_has_nothing_to_do_with_the_switch_off() {
    let topo = single_socket_ht();
    let mut engine = engine(&topo, switch(false));
    let mut burstable = pod(&["250m"]);
    burstable.containers[0].cpu_limit = None;
    let name = burstable.containers[0].name.clone();
    engine.admit_container(&burstable, &name, None).unwrap();
    let pool = engine.state().default.clone();
    assert_eq!(
        engine.resize_container(&burstable, &name, &q("1")),
        Ok(None),
        "a Burstable container stays in the shared pool"
    );
    assert_eq!(engine.state().default, pool);
    // A Guaranteed container growing from the shared pool to whole CPUs is
    // refused as before.
    let guaranteed = pod(&["500m"]);
    assert!(matches!(
        engine.resize_container(&guaranteed, &name, &q("2")),
        Err(PolicyError::ResizeDisabled { .. })
    ));
}
