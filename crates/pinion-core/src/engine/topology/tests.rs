use std::collections::BTreeMap;

use super::*;
use crate::engine::find_container;
use crate::pod::Container;
use crate::policy::PolicyConfig;
use crate::quantity::Quantity;
use crate::state::State;
use crate::topology::{synthetic, Shape, Topology};
use crate::topomgr::provider::StaticHints;
use crate::topomgr::{NumaMask, TopologyAffinityError};

/// 2 NUMA nodes (= sockets) × 4 cores × 2 threads: node 0 = CPUs 0-3,8-11.
fn machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
}

fn engine(policy: &str, scope: &str) -> Engine {
    engine_on(policy, scope, State::default())
}

/// [`engine`] started on `state` (as after a restart).
fn engine_on(policy: &str, scope: &str, state: State) -> Engine {
    let topology = machine();
    let config = PolicyConfig {
        topology_manager_policy: Some(policy.into()),
        topology_manager_scope: Some(scope.into()),
        ..PolicyConfig::default()
    };
    let manager = config.build_topology_manager(&topology).unwrap();
    let mut engine = Engine::new(&topology, config.build(&topology).unwrap(), state)
        .with_topology_manager(manager);
    engine.start().unwrap();
    engine
}

fn container(name: &str, cpus: u32) -> Container {
    let cpu = Quantity::parse(&cpus.to_string()).unwrap();
    let memory = Quantity::parse("1Gi").unwrap();
    Container {
        name: name.into(),
        cpu_request: Some(cpu.clone()),
        cpu_limit: Some(cpu),
        memory_request: Some(memory.clone()),
        memory_limit: Some(memory),
        restart_policy: None,
        ..Container::default()
    }
}

/// A Guaranteed pod with app containers of the given CPU counts (`c0`, `c1`…).
fn pod(uid: &str, cpus: &[u32]) -> Pod {
    Pod {
        uid: uid.into(),
        containers: cpus
            .iter()
            .enumerate()
            .map(|(i, &n)| container(&format!("c{i}"), n))
            .collect(),
        ..Pod::default()
    }
}

use crate::testing::cpus;

fn node(id: u32) -> NumaMask {
    NumaMask::single(id).unwrap()
}

#[test]
fn single_numa_node_aligns_then_rejects() {
    let mut engine = engine("single-numa-node", "container");
    let a = engine.admit_container(&pod("a", &[4]), "c0", None).unwrap();
    assert_eq!(a, Some(cpus("0-1,8-9")));
    let b = engine.admit_container(&pod("b", &[6]), "c0", None).unwrap();
    assert_eq!(b, Some(cpus("4-6,12-14")));
    assert_eq!(
        engine.topology_affinity("b", "c0").unwrap().affinity,
        Some(node(1))
    );
    // 4 free on node 0, 2 on node 1: 5 CPUs fit only across both nodes.
    let before = engine.state().clone();
    let report = engine.admit_container_with(&pod("c", &[5]), "c0", &[]);
    assert_eq!(
        report.result,
        Err(PolicyError::TopologyAffinity(TopologyAffinityError))
    );
    assert_eq!(
        report.result.unwrap_err().to_string(),
        "Resources cannot be allocated with Topology locality"
    );
    let decision = report.topology.unwrap();
    assert!(!decision.admit);
    assert_eq!(decision.hint, TopologyHint::cannot_satisfy());
    assert_eq!(decision.hints[0].0, "cpu");
    assert_eq!(engine.state(), &before);
    let metrics = engine.metrics().topology;
    assert_eq!((metrics.requests_total, metrics.errors_total), (3, 1));
}

#[test]
fn best_effort_and_restricted_differ_on_non_preferred_hints() {
    for (policy, admitted) in [("best-effort", true), ("restricted", false)] {
        let mut engine = engine(policy, "container");
        engine.admit_container(&pod("a", &[6]), "c0", None).unwrap();
        // 2 free on node 0, 8 on node 1; the extra provider wants node 0.
        let gpu = TopologyHint::new(node(0), true);
        let extra = StaticHints::new(BTreeMap::from([(
            "b/c0".to_owned(),
            BTreeMap::from([("gpu".to_owned(), Some(vec![gpu]))]),
        )]));
        let free_on_0 = engine.state().default.intersection(&cpus("0-3,8-11"));
        assert_eq!(free_on_0.len(), 2);
        let report = engine.admit_container_with(&pod("b", &[4]), "c0", &[&extra]);
        let decision = report.topology.unwrap();
        assert_eq!(decision.admit, admitted, "{policy}");
        assert_eq!(decision.hint, TopologyHint::new(node(0), false), "{policy}");
        if admitted {
            // Aligned CPUs first (node 0's last two), then the rest.
            let got = report.result.unwrap().unwrap();
            assert_eq!(got.len(), 4);
            assert!(free_on_0.is_subset(&got));
        } else {
            assert!(report.result.is_err());
        }
    }
}

#[test]
fn extra_provider_steers_the_cpus() {
    let mut engine = engine("single-numa-node", "container");
    let nic = TopologyHint::new(node(1), true);
    let extra = StaticHints::new(BTreeMap::from([(
        "a/c0".to_owned(),
        BTreeMap::from([("example.com/nic".to_owned(), Some(vec![nic]))]),
    )]));
    let report = engine.admit_container_with(&pod("a", &[2]), "c0", &[&extra]);
    assert_eq!(report.result, Ok(Some(cpus("4,12"))));
    let decision = report.topology.unwrap();
    assert_eq!(decision.hint, TopologyHint::new(node(1), true));
    assert_eq!(decision.hints.len(), 2);
}

#[test]
fn pod_scope_merges_once_and_shares_the_affinity() {
    let mut engine = engine("single-numa-node", "pod");
    engine.admit_container(&pod("x", &[2]), "c0", None).unwrap();
    // 6 free on node 0: the pod total 6 fits there, each container alone too.
    let two = pod("p", &[3, 3]);
    let first = engine.admit_container_with(&two, "c0", &[]);
    let second = engine.admit_container_with(&two, "c1", &[]);
    let (d1, d2) = (first.topology.unwrap(), second.topology.unwrap());
    assert!(!d1.reused && d2.reused);
    assert_eq!(d1.hint, TopologyHint::new(node(0), true));
    assert_eq!(d2.hint, d1.hint);
    let all = first
        .result
        .unwrap()
        .unwrap()
        .union(&second.result.unwrap().unwrap());
    assert_eq!(all, cpus("1-3,9-11"));
    assert_eq!(engine.metrics().topology.requests_total, 2);
    // The pod total 10 fits no single node: rejected before any allocation.
    let big = pod("q", &[5, 5]);
    let report = engine.admit_container_with(&big, "c0", &[]);
    assert!(matches!(
        report.result,
        Err(PolicyError::TopologyAffinity(_))
    ));
    assert_eq!(engine.topology_affinity("q", "c0"), None);
}

#[test]
fn explicit_affinity_and_none_policy_bypass_the_merge() {
    let mut engine = engine("single-numa-node", "container");
    // 10 CPUs cannot be single-node, but an explicit affinity is obeyed.
    let got = engine
        .admit_container(&pod("a", &[10]), "c0", Some(&[1]))
        .unwrap()
        .unwrap();
    assert!(cpus("4-7,12-15").is_subset(&got));
    assert_eq!(engine.metrics().topology.requests_total, 0);
    let mut none = self::engine("none", "container");
    let report = none.admit_container_with(&pod("a", &[10]), "c0", &[]);
    assert_eq!(report.topology, None);
    assert_eq!(report.result.unwrap().unwrap().len(), 10);
    assert_eq!(none.metrics().topology.requests_total, 1);
}

#[test]
fn remove_forgets_the_affinity() {
    let mut engine = engine("restricted", "pod");
    let p = pod("p", &[2, 2]);
    engine.admit_container(&p, "c0", None).unwrap();
    engine.admit_container(&p, "c1", None).unwrap();
    assert_eq!(
        engine.topology_affinity("p", "c1"),
        engine.topology_affinity("p", "c0")
    );
    engine.remove("p", "c0");
    assert!(engine.topology_affinity("p", "c1").is_some());
    engine.remove("p", "c1");
    assert_eq!(engine.topology_affinity("p", "c1"), None);
    // The pod is gone: its next admission is a new request with a new merge.
    let report = engine.admit_container_with(&p, "c0", &[]);
    assert!(!report.topology.unwrap().reused);
    assert_eq!(engine.metrics().topology.requests_total, 2);
    engine.record_admission_duration(Duration::from_micros(120));
    assert_eq!(engine.metrics().topology.duration_ms.count, 1);
}

#[test]
fn admit_pod_follows_kubelets_order_and_stops_at_the_first_failure() {
    let mut engine = engine("single-numa-node", "container");
    let mut p = pod("p", &[2, 6, 2]);
    p.init_containers.push(container("init", 4));
    let reports = engine.admit_pod(&p, &[]);
    let names: Vec<&str> = reports.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["init", "c0", "c1", "c2"]);
    assert!(reports.iter().all(|(_, r)| r.result.is_ok()));
    assert_eq!(engine.metrics().topology.requests_total, 1);
    // 16 CPUs, 10 taken: a pod of 3 + 8 stops after its second container.
    let q = pod("q", &[3, 8, 1]);
    let reports = engine.admit_pod(&q, &[]);
    assert_eq!(reports.len(), 2);
    assert!(reports[0].1.result.is_ok());
    assert!(matches!(
        reports[1].1.result,
        Err(PolicyError::TopologyAffinity(_))
    ));
    let metrics = engine.metrics().topology;
    assert_eq!((metrics.requests_total, metrics.errors_total), (2, 1));
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// 2 sockets × 2 NUMA nodes × 2 cores × 2 threads (4 CPUs per node).
    fn four_nodes() -> Topology {
        synthetic(Shape {
            sockets: 2,
            numa_per_socket: 2,
            cores_per_socket: 4,
            threads_per_core: 2,
            cores_per_uncore: 0,
        })
    }

    fn engine_on(topology: &Topology, policy: &str, scope: &str) -> Engine {
        let config = PolicyConfig {
            topology_manager_policy: Some(policy.into()),
            topology_manager_scope: Some(scope.into()),
            ..PolicyConfig::default()
        };
        let manager = config.build_topology_manager(topology).unwrap();
        let mut engine = Engine::new(topology, config.build(topology).unwrap(), State::default())
            .with_topology_manager(manager);
        engine.start().unwrap();
        engine
    }

    /// CPUs of the nodes of `mask`.
    fn cpus_of(topology: &Topology, mask: NumaMask) -> CpuSet {
        let mut set = CpuSet::new();
        for (node, cpus) in topology.numa_cpus() {
            if mask.is_set(*node) {
                set.union_with(cpus);
            }
        }
        set
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Under restricted and single-numa-node, an admitted container's
        /// CPUs lie inside its merged affinity (one node for
        /// single-numa-node), and a rejection changes nothing.
        #[test]
        fn admitted_cpus_stay_inside_the_affinity(
            requests in prop::collection::vec(1u32..=9, 1..10),
            single in any::<bool>(),
            pod_scope in any::<bool>(),
        ) {
            let topology = four_nodes();
            let policy = if single { "single-numa-node" } else { "restricted" };
            let scope = if pod_scope { "pod" } else { "container" };
            let mut engine = engine_on(&topology, policy, scope);
            for (i, &n) in requests.iter().enumerate() {
                let before = engine.state().clone();
                let report = engine.admit_container_with(&pod(&format!("p{i}"), &[n]), "c0", &[]);
                let decision = report.topology.expect("policy is not none");
                match report.result {
                    Ok(cpus) => {
                        let cpus = cpus.expect("exclusive");
                        prop_assert!(decision.admit && decision.hint.preferred);
                        // `None` = any node (single-numa-node's "don't care").
                        if let Some(mask) = decision.hint.affinity {
                            prop_assert!(cpus.is_subset(&cpus_of(&topology, mask)));
                            prop_assert!(!single || mask.count() == 1);
                        }
                    }
                    Err(err) => {
                        prop_assert_eq!(err, PolicyError::TopologyAffinity(TopologyAffinityError));
                        prop_assert_eq!(engine.state(), &before);
                    }
                }
            }
            let metrics = engine.metrics().topology;
            prop_assert_eq!(metrics.requests_total, requests.len() as u64);
        }
    }
}

/// The agent asks resource plugins before the admission when the Topology
/// Manager's hint is fixed; that hint must be the one the admission stores
/// (and kubelet hands the plugins): under `none`, the empty hint, for CPUs
/// owned by the policy or by a plugin alike. Other policies have none.
#[test]
fn the_fixed_hint_is_the_hint_every_admission_stores() {
    for policy in ["none", "best-effort", "restricted", "single-numa-node"] {
        let mut engine = engine(policy, "container");
        let Some(fixed) = engine.topology_manager().fixed_hint() else {
            assert_ne!(policy, "none");
            continue;
        };
        assert_eq!(policy, "none");
        assert_eq!(fixed, TopologyHint::cannot_satisfy());
        for (uid, owner) in [("a", CpuOwner::Policy), ("b", CpuOwner::Plugin)] {
            let report = engine.admit_container_as(&pod(uid, &[2]), "c0", &[], owner);
            assert!(report.result.is_ok(), "{uid}: {:?}", report.result);
            assert_eq!(engine.topology_affinity(uid, "c0"), Some(fixed), "{uid}");
        }
    }
}

/// The agent asks resource plugins before the admission whenever
/// `admission_before_engine` knows the Topology Manager's answer: it must
/// be the answer the engine gives (the hint it stores, the refusal), for
/// every policy, scope and owner, whatever the outside providers say and
/// whatever exclusive CPUs are taken already.
#[test]
fn the_admission_known_before_the_engine_is_the_engines() {
    let outside: Vec<(&str, Option<Vec<TopologyHint>>)> = vec![
        ("don't care", None),
        ("cannot satisfy", Some(Vec::new())),
        ("node 0", Some(vec![TopologyHint::new(node(0), true)])),
        (
            "node 1 or both",
            Some(vec![
                TopologyHint::new(node(1), true),
                TopologyHint::new(node(0).or(node(1)), false),
            ]),
        ),
        (
            "both only",
            Some(vec![TopologyHint::new(node(0).or(node(1)), false)]),
        ),
    ];
    let mut known = 0;
    for policy in ["none", "best-effort", "restricted", "single-numa-node"] {
        for scope in ["container", "pod"] {
            for (what, hints) in &outside {
                for owner in [CpuOwner::Policy, CpuOwner::Plugin] {
                    let mut engine = engine(policy, scope);
                    // 6 exclusive CPUs on node 0 taken: the CPU manager's
                    // hints depend on it.
                    engine.admit_container(&pod("a", &[6]), "c0", None).unwrap();
                    let extra = StaticHints::new(BTreeMap::from([
                        (
                            "b/c0".to_owned(),
                            BTreeMap::from([("gpu".to_owned(), hints.clone())]),
                        ),
                        (
                            "b".to_owned(),
                            BTreeMap::from([("gpu".to_owned(), hints.clone())]),
                        ),
                    ]));
                    let b = pod("b", &[2]);
                    let case = format!("{policy} {scope} {what} {owner:?}");
                    let before =
                        admission_before_engine(engine.topology_manager(), &b, "c0", &extra, owner);
                    let report = engine.admit_container_as(&b, "c0", &[&extra], owner);
                    let Some(before) = before else {
                        assert_ne!(policy, "none", "{case}");
                        assert!(owner == CpuOwner::Policy || scope == "pod", "{case}");
                        continue;
                    };
                    known += 1;
                    if before.admit {
                        assert!(report.result.is_ok(), "{case}: {:?}", report.result);
                        assert_eq!(
                            engine.topology_affinity("b", "c0"),
                            Some(before.hint),
                            "{case}"
                        );
                    } else {
                        assert_eq!(
                            report.result,
                            Err(PolicyError::TopologyAffinity(TopologyAffinityError)),
                            "{case}"
                        );
                    }
                }
            }
        }
    }
    // `none` for both owners and scopes, and every other policy for a
    // plugin's CPUs in container scope.
    assert_eq!(known, 5 * (2 * 2 + 3));
}

/// A pod whose init container holds `init` CPUs and whose app container
/// `c0` asks `app`.
fn pod_with_init(uid: &str, init: u32, app: u32) -> Pod {
    let mut p = pod(uid, &[app]);
    p.init_containers.push(container("init", init));
    p
}

/// The CPUs an exclusive admission could take now.
fn free(engine: &Engine) -> usize {
    engine
        .state()
        .default
        .difference(&engine.policy().reserved())
        .len()
}

/// Regression (found from outside, NRI): a runtime creates a pod's
/// containers one by one, and another pod's admission in between made the
/// policy forget the CPUs the finished init container passes on (kubelet
/// keeps one pod's `cpusToReuse`, but admits a pod's containers one after
/// the other), so the app container was refused on a full node where
/// kubelet gives it the init container's CPUs. The agent recalls them
/// ([`Engine::recall_reuse`]) before each container's admission.
#[test]
fn regression_init_cpus_are_reused_after_another_pod_was_admitted_in_between() {
    let mut engine = engine("none", "container");
    let p = pod_with_init("p", 4, 4);
    let init = engine
        .admit_container_with(&p, "init", &[])
        .result
        .unwrap()
        .expect("exclusive");
    let q = pod("q", &[u32::try_from(free(&engine)).unwrap() - 2]);
    engine.admit_container_with(&q, "c0", &[]).result.unwrap();
    assert_eq!(free(&engine), 2);
    engine.recall_reuse(&p.uid, |name| {
        find_container(&p, name).map(|(_, kind)| kind)
    });
    let app = engine.admit_container_with(&p, "c0", &[]).result;
    assert_eq!(app, Ok(Some(init)));
}

/// Regression (found from outside, NRI): after a restart the policy
/// remembered no reusable CPUs, so a pod whose init container had finished
/// before the restart could never start its app container on a full node.
/// Kubelet re-admits its pods after a restart, which rebuilds the list.
#[test]
fn regression_init_cpus_are_reused_after_a_restart() {
    let mut before = engine("none", "container");
    let p = pod_with_init("p", 4, 4);
    let init = before
        .admit_container_with(&p, "init", &[])
        .result
        .unwrap()
        .expect("exclusive");
    let q = pod("q", &[u32::try_from(free(&before)).unwrap() - 2]);
    before.admit_container_with(&q, "c0", &[]).result.unwrap();
    // The restart: a new engine on the same state.
    let mut after = engine_on("none", "container", before.state().clone());
    after.recall_reuse(&p.uid, |name| {
        find_container(&p, name).map(|(_, kind)| kind)
    });
    let app = after.admit_container_with(&p, "c0", &[]).result;
    assert_eq!(app, Ok(Some(init)));
}
