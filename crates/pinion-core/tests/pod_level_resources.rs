//! Pod-level resources (`PodLevelResourceManagers`, KEP-5526), transcribed
//! from kubelet's own tables in `pkg/kubelet/cm/cpumanager/policy_static_test.go`
//! (the newest stored version: 104,466 characters, v1.36 line — the file the
//! conformance corpus was read from, `../shared/conformance/kubelet/NOTES.md`):
//! `TestStaticPolicyAllocatePod` (all 9 rows: assignments, shared pool and
//! the resource-manager counters they assert) and
//! `TestValidatePodScopeResources` (all 11 rows). The policy code followed
//! is `AllocatePod` / `validatePodScopeResources` of the matching
//! `policy_static.go` (48,674 characters). Pod helpers as upstream's
//! `makePodWithContainersAndPodLevelResources`: every container and the pod
//! carry memory request = limit (100Mi / 300Mi).
//!
//! Then the engine around it: the switch, the Topology Manager scopes, the
//! release with the last container, and the counters.

use pinion_core::engine::{AllocationSource, AssignmentType, Engine};
use pinion_core::pod::{Container, Pod, PodResources, RestartPolicy};
use pinion_core::policy::{Features, PolicyConfig, PolicyError};
use pinion_core::state::State;
use pinion_core::topomgr::{NumaInfo, TopologyManager};
use pinion_core::{CpuInfo, CpuSet, Quantity, Topology, TopologySpec};

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("test cpulist")
}

fn q(text: &str) -> Option<Quantity> {
    (!text.is_empty()).then(|| Quantity::parse(text).expect("quantity"))
}

/// kubelet's topoDualSocketHT: 12 CPUs, core = id mod 6, socket = NUMA
/// node = core mod 2.
fn dual_socket_ht() -> Topology {
    machine(12, 6, |core| core % 2)
}

/// kubelet's topoSingleSocketHT: 8 CPUs, core = id mod 4.
fn single_socket_ht() -> Topology {
    machine(8, 4, |_| 0)
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

/// A container spec: name, CPU request and limit ("" = unset), sidecar.
struct Spec(&'static str, &'static str, &'static str, bool);

fn container(spec: &Spec) -> Container {
    Container {
        name: spec.0.to_owned(),
        cpu_request: q(spec.1),
        cpu_limit: q(spec.2),
        memory_request: q("100Mi"),
        memory_limit: q("100Mi"),
        restart_policy: spec.3.then_some(RestartPolicy::Always),
        ..Container::default()
    }
}

fn pod(uid: &str, init: &[Spec], apps: &[Spec]) -> Pod {
    Pod {
        uid: uid.to_owned(),
        init_containers: init.iter().map(container).collect(),
        containers: apps.iter().map(container).collect(),
        ..Pod::default()
    }
}

fn resources(request: &str, limit: &str) -> PodResources {
    PodResources {
        cpu_request: q(request),
        cpu_limit: q(limit),
        memory_request: q("300Mi"),
        memory_limit: q("300Mi"),
    }
}

fn features() -> Features {
    Features {
        pod_level_resource_managers: true,
        ..Features::default()
    }
}

fn engine_on(topology: &Topology, reserved: &str, features: Features) -> Engine {
    let config = PolicyConfig {
        reserved: (!reserved.is_empty()).then(|| set(reserved)),
        num_reserved: Some(set(reserved).len()),
        ..PolicyConfig::default()
    };
    let policy = config
        .build_with(topology, features)
        .expect("policy builds");
    let mut engine = Engine::new(topology, policy, State::default());
    engine.start().expect("starts");
    engine
}

fn static_policy(engine: &Engine) -> &pinion_core::policy::StaticPolicy {
    match engine.policy() {
        pinion_core::policy::Policy::Static(policy) => policy,
        pinion_core::policy::Policy::None => panic!("static policy expected"),
    }
}

struct AllocatePodRow {
    name: &'static str,
    pod: Pod,
    resources: PodResources,
    /// `(container, cpus)`; empty = no assignment.
    expect: &'static [(&'static str, &'static str)],
    default: &'static str,
    error: Option<&'static str>,
    /// resource_manager counters: allocations{pod}, exclusive_from_pod,
    /// shared_from_pod, errors{pod}.
    counters: (u64, u64, u64, u64),
}

const A: bool = false;
const SIDECAR: bool = true;

fn allocate_pod_rows() -> Vec<AllocatePodRow> {
    vec![
        AllocatePodRow {
            name: "should successfully allocate CPUs for a guaranteed pod with pod-level resources",
            pod: pod("pod1", &[], &[Spec("container1", "1", "1", A)]),
            resources: resources("2", "2"),
            expect: &[("container1", "2")],
            default: "0-1,3-7,9-11",
            error: None,
            counters: (1, 1, 0, 0),
        },
        AllocatePodRow {
            name: "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and guaranteed container, PodLevelResourceManagers enabled",
            pod: pod("gu-pod-level-resources", &[], &[Spec("gu-container", "1", "1", A)]),
            resources: resources("2", "2"),
            expect: &[("gu-container", "2")],
            default: "0-1,3-7,9-11",
            error: None,
            counters: (1, 1, 0, 0),
        },
        AllocatePodRow {
            name: "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and non-guaranteed container, PodLevelResourceManagers enabled",
            pod: pod("gu-pod-level-resources", &[], &[Spec("ngu-container", "", "", A)]),
            resources: resources("1", "1"),
            expect: &[("ngu-container", "6")],
            default: "0-5,7-11",
            error: None,
            counters: (1, 0, 1, 0),
        },
        AllocatePodRow {
            name: "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed and non-guaranteed containers, PodLevelResourceManagers enabled",
            pod: pod(
                "gu-pod-level-mix-ctn",
                &[],
                &[
                    Spec("gu-container-1", "1", "1", A),
                    Spec("gu-container-2", "1", "1", A),
                    Spec("ngu-container", "", "", A),
                ],
            ),
            resources: resources("3", "3"),
            expect: &[("gu-container-1", "6"), ("gu-container-2", "2"), ("ngu-container", "8")],
            default: "0-1,3-5,7,9-11",
            error: None,
            counters: (3, 2, 1, 0),
        },
        AllocatePodRow {
            name: "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed standard and init containers, PodLevelResourceManagers enabled",
            pod: pod(
                "gu-pod-level-gu-init-ctn",
                &[Spec("gu-init-container-1", "1", "1", A), Spec("gu-init-container-2", "1", "1", A)],
                &[Spec("gu-container-1", "1", "1", A), Spec("gu-container-2", "1", "1", A)],
            ),
            resources: resources("2", "2"),
            expect: &[
                ("gu-init-container-1", "2"),
                ("gu-init-container-2", "2"),
                ("gu-container-1", "2"),
                ("gu-container-2", "8"),
            ],
            default: "0-1,3-7,9-11",
            error: None,
            counters: (4, 4, 0, 0),
        },
        AllocatePodRow {
            name: "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed standard and guaranteed restartable and non-guaranteed standard init containers, PodLevelResourceManagers enabled",
            pod: pod(
                "gu-pod-level-gu-init-ctn",
                &[
                    Spec("ngu-init-container-1", "", "", A),
                    Spec("gu-init-restartable-2", "1", "1", SIDECAR),
                    Spec("ngu-init-container-3", "", "", A),
                ],
                &[Spec("gu-container-1", "1", "1", A), Spec("ngu-container-2", "", "", A)],
            ),
            resources: resources("3", "3"),
            expect: &[
                ("ngu-init-container-1", "2,6,8"),
                ("gu-init-restartable-2", "6"),
                ("ngu-init-container-3", "2,8"),
                ("gu-container-1", "2"),
                ("ngu-container-2", "8"),
            ],
            default: "0-1,3-5,7,9-11",
            error: None,
            counters: (5, 2, 3, 0),
        },
        AllocatePodRow {
            name: "scope: pod, should allocate exclusive CPUs to a guaranteed pod with pod-level resources and mix of guaranteed standard and non-guaranteed restartable init containers, PodLevelResourceManagers enabled",
            pod: pod(
                "gu-pod-level-gu-init-ctn",
                &[
                    Spec("ngu-init-container-1", "", "", A),
                    Spec("ngu-init-restartable-2", "", "", SIDECAR),
                    Spec("ngu-init-container-3", "", "", A),
                ],
                &[Spec("gu-container-1", "1", "1", A), Spec("ngu-container-2", "", "", A)],
            ),
            resources: resources("3", "3"),
            expect: &[
                ("ngu-init-container-1", "2,6,8"),
                ("ngu-init-restartable-2", "2,8"),
                ("ngu-init-container-3", "2,6,8"),
                ("gu-container-1", "6"),
                ("ngu-container-2", "2,8"),
            ],
            default: "0-1,3-5,7,9-11",
            error: None,
            counters: (5, 1, 4, 0),
        },
        AllocatePodRow {
            name: "scope: pod, should reject a pod that would result in an empty pod shared pool",
            pod: pod(
                "gu-pod-level-empty-pod-shared-pool",
                &[],
                &[
                    Spec("gu-container-1", "1", "1", A),
                    Spec("gu-container-2", "1", "1", A),
                    Spec("ngu-container", "", "", A),
                ],
            ),
            resources: resources("2", "2"),
            expect: &[],
            default: "0-11",
            error: Some("pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers"),
            counters: (0, 0, 0, 1),
        },
        AllocatePodRow {
            name: "scope: pod, should not allocate exclusive CPUs to a non-guaranteed pod with pod-level resources and guaranteed containers, PodLevelResourceManagers enabled",
            pod: pod("ngu-pod-level-empty-pod-shared-pool", &[], &[Spec("gu-container-1", "1", "1", A)]),
            resources: resources("2", "1"),
            expect: &[],
            default: "0-11",
            error: None,
            counters: (0, 0, 0, 0),
        },
    ]
}

/// `TestStaticPolicyAllocatePod`: topoDualSocketHT, CPU 0 reserved, every
/// CPU shared at the start; kubelet calls `AllocatePod` with no NUMA
/// affinity (the fake Topology Manager's).
#[test]
fn kubelet_static_policy_allocate_pod_table() {
    let mut failures = Vec::new();
    for row in allocate_pod_rows() {
        let mut engine = engine_on(&dual_socket_ht(), "0", features());
        engine.set_pod_resources(&row.pod.uid, Some(row.resources.clone()));
        let first = row
            .pod
            .all_containers()
            .next()
            .expect("a container")
            .name
            .clone();
        let result = engine.admit_container(&row.pod, &first, Some(&[]));
        let got_error = result.as_ref().err().map(ToString::to_string);
        if got_error.as_deref() != row.error {
            failures.push(format!(
                "{}: error {got_error:?}, expected {:?}",
                row.name, row.error
            ));
            continue;
        }
        for (name, cpus) in row.expect {
            let got = engine.state().assignment(&row.pod.uid, name);
            if got != Some(&set(cpus)) {
                failures.push(format!("{}: {name} got {got:?}, expected {cpus}", row.name));
            }
        }
        if row.expect.is_empty() && !engine.state().assignments.is_empty() {
            failures.push(format!(
                "{}: unexpected assignments {:?}",
                row.name,
                engine.state().assignments
            ));
        }
        if engine.state().default != set(row.default) {
            failures.push(format!(
                "{}: default {}, expected {}",
                row.name,
                engine.state().default,
                row.default
            ));
        }
        let rm = engine.metrics().resource_manager;
        let got = (
            rm.allocations(AllocationSource::Pod),
            rm.assignments(AssignmentType::ExclusiveFromPod),
            rm.assignments(AssignmentType::SharedFromPod),
            rm.errors(AllocationSource::Pod),
        );
        if got != row.counters {
            failures.push(format!(
                "{}: counters {got:?}, expected {:?}",
                row.name, row.counters
            ));
        }
        engine.check_invariants().expect("invariants hold");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// name, pod-level CPUs, init containers, app containers, fails.
type ValidateRow = (&'static str, &'static str, Vec<Spec>, Vec<Spec>, bool);

/// `TestValidatePodScopeResources`: topoSingleSocketHT, no reservation.
#[test]
fn kubelet_validate_pod_scope_resources_table() {
    let rows: Vec<ValidateRow> = vec![
        ("Valid: Pod-level != Guaranteed containers, has podSharedPool containers", "4", vec![], vec![Spec("c1", "2", "2", A), Spec("c2", "", "", A)], false),
        ("Valid: Only Guaranteed containers", "4", vec![], vec![Spec("c1", "2", "2", A), Spec("c2", "2", "2", A)], false),
        ("Valid: Only podSharedPool containers", "4", vec![], vec![Spec("c1", "", "", A), Spec("c2", "", "", A)], false),
        ("Valid: Pod-level == Guaranteed containers, has podSharedPool containers with request", "6", vec![], vec![Spec("c1", "3", "3", A), Spec("c2", "2", "2", A), Spec("c3", "500m", "1000m", A), Spec("c4", "", "", A)], false),
        ("Failure: Pod-level == Guaranteed containers, has podSharedPool containers", "5", vec![], vec![Spec("c1", "3", "3", A), Spec("c2", "2", "2", A), Spec("c3", "", "", A)], true),
        ("Valid: Pod-level resources with standard and restartable init containers", "2", vec![Spec("init-container1", "1", "1", A), Spec("restartable-init-container1", "1", "1", SIDECAR)], vec![Spec("container1", "", "", A)], false),
        ("Valid: Pod-level resources equal init and standard container resources", "2", vec![Spec("init-container1", "2", "2", A)], vec![Spec("container1", "2", "2", A)], false),
        ("Failure: Pod-level resources with shared standard init container and no available pool", "2", vec![Spec("restartable-init-container1", "2", "2", SIDECAR), Spec("init-container1", "", "", A)], vec![], true),
        ("Valid: Pod-level resources with shared standard init container and no available pool", "2", vec![Spec("init-container1", "", "", A), Spec("restartable-init-container1", "2", "2", SIDECAR)], vec![], false),
        ("Failure: Pod-level == Restartable guaranteed init containers, has podSharedPool containers", "2", vec![Spec("restartable-init-container1", "2", "2", SIDECAR), Spec("restartable-init-container2", "", "", SIDECAR)], vec![], true),
        ("Valid: Pod-level resources with only restartable one init container and one standard container", "2", vec![Spec("restartable-init-container1", "1", "1", SIDECAR)], vec![Spec("container1", "1", "1", A)], false),
    ];
    let engine = engine_on(&single_socket_ht(), "", features());
    let policy = static_policy(&engine);
    let mut failures = Vec::new();
    for (name, cpus, init, apps, fails) in rows {
        let p = pod("pod", &init, &apps);
        let got = policy.validate_pod_scope_resources(&p, &resources(cpus, cpus));
        if got.is_err() != fails {
            failures.push(format!("{name}: {got:?}"));
        }
        if let Err(err) = got {
            assert!(
                matches!(err, PolicyError::EmptyPodSharedPool { .. }),
                "{err}"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn pod_scope(policy: &str, topology: &Topology) -> TopologyManager {
    let numa = NumaInfo::from_topology(topology).expect("numa info");
    TopologyManager::new(policy, "pod", &Default::default(), numa).expect("topology manager")
}

fn mixed_pod() -> (Pod, PodResources) {
    (
        pod(
            "plrm",
            &[],
            &[Spec("gu", "2", "2", A), Spec("shared", "", "", A)],
        ),
        resources("4", "4"),
    )
}

/// Pod scope with `single-numa-node`: the first container triggers the
/// pod's merge and allocation; the second gets its part without another
/// merge; the pod's CPUs are released with its last container.
#[test]
fn pod_scope_allocates_the_pod_once_and_releases_it_with_the_last_container() {
    let t = dual_socket_ht();
    let mut engine =
        engine_on(&t, "0", features()).with_topology_manager(pod_scope("single-numa-node", &t));
    let (p, res) = mixed_pod();
    engine.set_pod_resources(&p.uid, Some(res));
    let gu = engine.admit_container_with(&p, "gu", &[]);
    assert_eq!(gu.result, Ok(Some(set("2,8"))));
    assert_eq!(engine.pod_cpus().get("plrm"), Some(&set("2,4,8,10")));
    let shared = engine.admit_container_with(&p, "shared", &[]);
    assert_eq!(shared.result, Ok(Some(set("4,10"))));
    assert!(shared.topology.is_none(), "no second merge");
    let m = engine.metrics();
    assert_eq!(m.topology.requests_total, 1);
    assert_eq!(m.pinning_requests_total, 1);
    use pinion_core::engine::{AlignBoundary, AlignScope};
    assert_eq!(m.aligned.get(AlignScope::Pod, AlignBoundary::NumaNode), 1);
    let gauges = engine.cpu_gauges();
    assert_eq!(
        (gauges.exclusive_cpus, gauges.shared_pool_millicores),
        (4, 7000)
    );

    assert_eq!(
        engine.remove("plrm", "gu"),
        CpuSet::new(),
        "nothing released yet"
    );
    assert_eq!(engine.cpu_gauges().exclusive_cpus, 4);
    assert_eq!(engine.remove("plrm", "shared"), set("2,4,8,10"));
    assert!(engine.pod_cpus().is_empty());
    assert_eq!(engine.state().default, set("0-11"));
    engine.check_invariants().expect("invariants");
}

/// kubelet skips pods with pod-level resources when the gate is off: no
/// exclusive CPUs for the pod, even for a Guaranteed-looking container.
#[test]
fn switch_off_skips_pods_with_pod_level_resources() {
    let t = dual_socket_ht();
    let mut engine = engine_on(&t, "0", Features::default())
        .with_topology_manager(pod_scope("single-numa-node", &t));
    let (p, res) = mixed_pod();
    engine.set_pod_resources(&p.uid, Some(res));
    assert_eq!(engine.admit_container_with(&p, "gu", &[]).result, Ok(None));
    assert_eq!(engine.metrics().pinning_requests_total, 0);
    assert!(engine.pod_cpus().is_empty());
}

/// Container scope with the switch on: containers are admitted one by one
/// from the node, and only Guaranteed-equivalent ones get exclusive CPUs.
#[test]
fn container_scope_admits_guaranteed_equivalent_containers_from_the_node() {
    let t = dual_socket_ht();
    let mut engine = engine_on(&t, "0", features());
    let (p, res) = mixed_pod();
    engine.set_pod_resources(&p.uid, Some(res));
    assert_eq!(engine.admit_container(&p, "gu", None), Ok(Some(set("2,8"))));
    assert_eq!(engine.admit_container(&p, "shared", None), Ok(None));
    assert!(engine.pod_cpus().is_empty());
    let rm = engine.metrics().resource_manager;
    assert_eq!(rm.allocations(AllocationSource::Node), 1);
    assert_eq!(rm.assignments(AssignmentType::ExclusiveFromNode), 1);
}

/// A failed pod-level allocation changes nothing (newest kubelet rolls
/// the pod's CPUs back): 13 CPUs on a 12-CPU machine.
#[test]
fn failed_pod_allocation_leaves_the_state_unchanged() {
    let t = dual_socket_ht();
    let mut engine =
        engine_on(&t, "0", features()).with_topology_manager(pod_scope("best-effort", &t));
    let p = pod("huge", &[], &[Spec("gu", "12", "12", A)]);
    engine.set_pod_resources(&p.uid, Some(resources("12", "12")));
    let before = engine.state().clone();
    let report = engine.admit_container_with(&p, "gu", &[]);
    assert!(report.result.is_err(), "{report:?}");
    assert_eq!(engine.state(), &before);
    assert!(engine.pod_cpus().is_empty());
    assert_eq!(
        engine
            .metrics()
            .resource_manager
            .errors(AllocationSource::Pod),
        1
    );
    assert_eq!(engine.metrics().topology.errors_total, 1);
}

/// `pinion simulate` scenarios carry the switch (`features`) and the pods'
/// pod-level resources (`pod_resources`).
#[test]
fn scenarios_carry_features_and_pod_level_resources() {
    let scenario: pinion_core::scenario::Scenario = serde_json::from_value(serde_json::json!({
        "machine": {"sockets": 1, "numa_per_socket": 1, "cores_per_socket": 4, "threads_per_core": 2},
        "num_reserved": 1,
        "topologyManagerPolicy": "best-effort",
        "topologyManagerScope": "pod",
        "features": {"PodLevelResourceManagers": true},
        "pods": {"plr": {"containers": [
            {"name": "gu", "cpu_request": "1", "cpu_limit": "1", "memory_request": "100Mi", "memory_limit": "100Mi"},
            {"name": "shared"}
        ]}},
        "pod_resources": {"plr": {"cpu_request": "3", "cpu_limit": "3", "memory_request": "300Mi", "memory_limit": "300Mi"}},
        "steps": [{"op": "start"}, {"op": "add", "pod": "plr", "container": "gu"},
                  {"op": "add", "pod": "plr", "container": "shared"}]
    }))
    .expect("scenario");
    let topology = pinion_core::scenario::inline_topology(&scenario)
        .expect("topology")
        .expect("inline");
    let outcome = pinion_core::scenario::run(&scenario, &topology).expect("runs");
    let gu = &outcome.assignments["plr/gu"];
    let shared = &outcome.assignments["plr/shared"];
    assert_eq!((gu.len(), shared.len()), (1, 2), "{outcome:?}");
    assert!(gu.is_disjoint(shared));
    assert_eq!(outcome.default.len(), 5, "8 CPUs minus the pod's 3");

    let mut off = scenario.clone();
    off.features = Features::default();
    let outcome = pinion_core::scenario::run(&off, &topology).expect("runs");
    assert!(
        outcome.assignments.is_empty(),
        "switch off: kubelet skips the pod"
    );
}

/// The NRI front-end knows only the containers created so far, so a pod's
/// first container allocates the pod with a partial spec and the others
/// arrive later (issue #15). Arriving in spec order, they get exactly the
/// parts kubelet's partition of the whole spec gives them: a late
/// exclusive container takes its CPUs from the pod's shared CPUs, whose
/// containers keep the rest.
#[test]
fn containers_arriving_one_by_one_get_the_parts_of_the_whole_pods_partition() {
    let t = dual_socket_ht();
    let specs = [
        Spec("gu", "2", "2", A),
        Spec("shared", "", "", A),
        Spec("gu2", "1", "1", A),
    ];
    let whole = pod("late", &[], &specs);
    let mut kubelet =
        engine_on(&t, "0", features()).with_topology_manager(pod_scope("single-numa-node", &t));
    kubelet.set_pod_resources("late", Some(resources("4", "4")));
    for c in &specs {
        kubelet
            .admit_container_with(&whole, c.0, &[])
            .result
            .expect("whole pod");
    }

    let mut nri =
        engine_on(&t, "0", features()).with_topology_manager(pod_scope("single-numa-node", &t));
    nri.set_pod_resources("late", Some(resources("4", "4")));
    for known in 1..=specs.len() {
        let partial = pod("late", &[], &specs[..known]);
        nri.admit_container_with(&partial, specs[known - 1].0, &[])
            .result
            .expect("partial pod");
        nri.check_invariants().expect("invariants");
    }
    assert_eq!(nri.state(), kubelet.state());
    assert_eq!(nri.pod_cpus(), kubelet.pod_cpus());
    let held = &nri.state().assignments["late"];
    assert_eq!(held["gu"].len(), 2);
    assert_eq!(held["gu2"].len(), 1);
    assert_eq!(
        held["shared"].len(),
        1,
        "the shared containers keep the rest"
    );
}

/// A late exclusive container that would leave the pod's shared containers
/// no CPU is refused (kubelet refuses such a pod up front), and nothing
/// changes.
#[test]
fn a_late_exclusive_container_that_would_leave_the_shared_ones_nothing_is_refused() {
    let t = dual_socket_ht();
    let specs = [
        Spec("gu", "2", "2", A),
        Spec("shared", "", "", A),
        Spec("gu2", "2", "2", A),
    ];
    let mut engine =
        engine_on(&t, "0", features()).with_topology_manager(pod_scope("single-numa-node", &t));
    engine.set_pod_resources("late", Some(resources("4", "4")));
    for known in 1..=2 {
        let partial = pod("late", &[], &specs[..known]);
        engine
            .admit_container_with(&partial, specs[known - 1].0, &[])
            .result
            .expect("admitted");
    }
    let before = engine.state().clone();
    let whole = pod("late", &[], &specs);
    let err = engine
        .admit_container_with(&whole, "gu2", &[])
        .result
        .expect_err("nothing left for shared");
    assert!(
        matches!(&err, PolicyError::EmptyPodSharedPool { message } if message.contains("\"shared\"")),
        "{err}"
    );
    assert_eq!(engine.state(), &before);
}

/// After an agent restart NRI shows a container whose CFS quota Pinion
/// removed as having no CPU limit; a container holding exactly its
/// whole-CPU request still counts as an exclusive part, so a late
/// container gets the pod's shared CPUs, not those.
#[test]
fn a_late_container_after_a_restart_does_not_share_an_exclusive_part() {
    let t = dual_socket_ht();
    let mut engine =
        engine_on(&t, "0", features()).with_topology_manager(pod_scope("single-numa-node", &t));
    engine.set_pod_resources("late", Some(resources("4", "4")));
    let first = pod(
        "late",
        &[],
        &[Spec("gu", "2", "2", A), Spec("shared", "", "", A)],
    );
    for name in ["gu", "shared"] {
        engine
            .admit_container_with(&first, name, &[])
            .result
            .expect("admitted");
    }
    let gu = engine.state().assignments["late"]["gu"].clone();
    let shared = engine.state().assignments["late"]["shared"].clone();
    let seen_after_restart = pod(
        "late",
        &[],
        &[
            Spec("gu", "2", "", A),
            Spec("shared", "", "", A),
            Spec("late", "", "", A),
        ],
    );
    let late = engine
        .admit_container_with(&seen_after_restart, "late", &[])
        .result
        .expect("late");
    assert_eq!(late, Some(shared.clone()));
    assert!(late.is_some_and(|cpus| cpus.intersection(&gu).is_empty()));
    engine.check_invariants().expect("invariants");
}

/// kubelet's topoDualSocketHT with CPU `offline` gone (CPU hot-plug).
fn dual_socket_ht_without(offline: u32) -> Topology {
    let mut spec = dual_socket_ht().spec().clone();
    spec.cpus.retain(|cpu| cpu.id != offline);
    spec.offline.insert(offline);
    Topology::new(spec).expect("topology")
}

/// Found from outside (forty-third session): CPU hot-plug ignored pod-level
/// CPU sets. The CPUs of a pod's set no container held went to the shared
/// pool, and the pod's exclusive container, short of the CPU that went
/// offline, was topped up with a CPU outside its pod's set.
#[test]
fn regression_a_cpu_going_offline_keeps_pod_level_cpus_inside_their_pod() {
    use pinion_core::hotplug::{follow_online, policy_on};
    let t = dual_socket_ht();
    let mut engine =
        engine_on(&t, "0", features()).with_topology_manager(pod_scope("single-numa-node", &t));
    let (p, res) = mixed_pod();
    engine.set_pod_resources(&p.uid, Some(res));
    for name in ["gu", "shared"] {
        engine
            .admit_container_with(&p, name, &[])
            .result
            .expect("admitted");
    }
    assert_eq!(engine.pod_cpus()["plrm"], set("2,4,8,10"));
    assert_eq!(engine.state().assignments["plrm"]["gu"], set("2,8"));

    let smaller = dual_socket_ht_without(8);
    let policy = policy_on(engine.policy(), &smaller).expect("policy");
    let followed = follow_online(engine.state(), engine.pod_cpus(), t.all_cpus(), &policy);
    let pod_cpus = followed.rebuilt.pod_cpus();
    let next = engine
        .on_machine(&smaller, policy, followed.rebuilt.state.clone(), pod_cpus)
        .expect("the followed state starts");
    next.check_invariants().expect("invariants");

    let pod_set = next.pod_cpus()["plrm"].clone();
    assert_eq!(pod_set.len(), 4, "the set got a cpu in place of 8");
    assert!(set("2,4,10").is_subset(&pod_set) && !pod_set.contains(8));
    assert!(pod_set.is_disjoint(&next.state().default));
    let gu = &next.state().assignments["plrm"]["gu"];
    assert_eq!(gu.len(), 2);
    assert!(
        gu.contains(2) && gu.is_subset(&pod_set),
        "gu {gu}, pod {pod_set}"
    );
    assert_eq!(next.state().assignments["plrm"]["shared"], set("4,10"));
    assert!(next.shared_pool().is_disjoint(&pod_set));
}

/// Found in the fiftieth session: the NRI front-end forgot a pod's
/// pod-level resources when kubelet removed a sandbox it had replaced, while
/// the new sandbox's containers held the pod's CPU set; a resize then grew
/// a container out of the set (a debug build stopped on the broken
/// invariant). A pod holding its own CPU set is not resized, registered or
/// not, as kubelet does not resize pods with pod-level resources.
#[test]
fn regression_a_pod_holding_its_cpu_set_is_not_resized_without_its_registration() {
    let t = dual_socket_ht();
    let resize_on = Features {
        in_place_resize_exclusive_cpus: true,
        ..features()
    };
    let mut engine =
        engine_on(&t, "0", resize_on).with_topology_manager(pod_scope("best-effort", &t));
    let (p, res) = mixed_pod();
    engine.set_pod_resources(&p.uid, Some(res));
    let gu = engine
        .admit_container_with(&p, "gu", &[])
        .result
        .expect("admitted");
    assert_eq!(gu, Some(set("2,8")));
    let before = engine.state().clone();

    engine.set_pod_resources(&p.uid, None);
    let resized = engine.resize_container(&p, "gu", &Quantity::parse("4").expect("quantity"));
    assert_eq!(resized, Ok(gu), "kept where it was");
    assert_eq!(engine.state(), &before);
    assert_eq!(engine.pod_cpus()["plrm"], set("2,4,8,10"));
    engine.check_invariants().expect("invariants");
}
