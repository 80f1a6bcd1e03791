use std::collections::BTreeMap;

use pinion_core::pools::{ChangeReason, PoolLoad, PoolParams, PoolSize};
use pinion_core::qos::{self, QosError};
use pinion_core::record::SideValue;
use pinion_core::topology::{synthetic, Shape};

use super::*;
use crate::api::{ContainerType, Hint};
use crate::ErrorKind;

/// 2 NUMA nodes × 4 cores × 2 threads: node 0 = 0-3,8-11; node 1 = 4-7,12-15.
pub(super) fn machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
}

pub(super) fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn plugin() -> CpuPlugin {
    CpuPlugin::open(machine(), &CpuPluginConfig::default(), None).expect("plugin")
}

pub(super) fn request(pod: &str, cpus: f64, annotations: &[(&str, &str)]) -> Request {
    Request {
        pod_uid: pod.into(),
        pod_namespace: "ns".into(),
        pod_name: pod.into(),
        container_name: "c".into(),
        container_type: ContainerType::Main,
        resource_name: RESOURCE.into(),
        resource_requests: BTreeMap::from([(RESOURCE.to_string(), cpus)]),
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        native_qos_class: "Burstable".into(),
        ..Request::default()
    }
}

pub(super) fn level(value: &'static str) -> (&'static str, &'static str) {
    (qos::QOS_LEVEL_KEY, value)
}

pub(super) fn cpus_of(answer: &Option<Allocation>) -> CpuSet {
    let info = &answer.as_ref().expect("an allocation")[RESOURCE];
    set(&info.allocation_result)
}

#[test]
fn every_level_lands_in_its_pool() {
    let mut p = plugin();
    assert_eq!(p.reserved(), &set("0"));
    let dedicated = p
        .allocate(&request("d", 2.0, &[level("dedicated_cores")]))
        .expect("d");
    let shared = p.allocate(&request("s", 1.5, &[])).expect("s");
    let batch = p
        .allocate(&request(
            "b",
            1.0,
            &[(qos::CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool":"batch"}"#)],
        ))
        .expect("b");
    let reclaimed = p
        .allocate(&request("r", 1.0, &[level("reclaimed_cores")]))
        .expect("r");
    let system = p
        .allocate(&request("y", 1.0, &[level("system_cores")]))
        .expect("y");
    let (d, s, b, r) = (
        cpus_of(&dedicated),
        cpus_of(&shared),
        cpus_of(&batch),
        cpus_of(&reclaimed),
    );
    assert_eq!(d.len(), 2);
    assert_eq!(s.len(), 3, "2 requested (rounded up) + 1 headroom");
    assert_eq!(b.len(), 2);
    assert_eq!(cpus_of(&system), set("0"));
    let all = [&d, &s, &b, &r];
    for (i, a) in all.iter().enumerate() {
        assert!(a.is_disjoint(&set("0")));
        for other in &all[i + 1..] {
            assert!(a.is_disjoint(other), "{a} and {other} overlap");
        }
    }
    assert_eq!(d.len() + s.len() + b.len() + r.len(), 15);
    assert_eq!(
        p.pool_members().keys().collect::<Vec<_>>(),
        ["batch", "share"]
    );
}

#[test]
fn invalid_annotations_and_requests_are_refused_with_their_values() {
    let mut p = plugin();
    let err = p
        .allocate(&request("x", 1.0, &[level("gold")]))
        .expect_err("bad level");
    assert!(matches!(&err, PluginError::Qos(QosError::InvalidLevel { value }) if value == "gold"));
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let mut two = request("x", 1.0, &[]);
    two.resource_requests.insert("memory".into(), 1.0);
    assert!(matches!(
        p.allocate(&two),
        Err(PluginError::RequestCount { count: 2, .. })
    ));
    let mut wrong = request("x", 1.0, &[]);
    wrong.resource_name = "memory".into();
    assert!(matches!(
        p.topology_hints(&wrong),
        Err(PluginError::WrongResource { .. })
    ));
    assert!(p.allocations().is_empty());
    let err = p
        .topology_aware_resources("nobody", "c")
        .expect_err("unknown");
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn init_containers_get_nothing_outside_the_static_path() {
    let mut p = plugin();
    let mut init = request("i", 1.0, &[level("dedicated_cores")]);
    init.container_type = ContainerType::Init;
    assert_eq!(p.topology_hints(&init).expect("hints"), None);
    assert_eq!(p.allocate(&init).expect("allocate"), None);
    assert!(p.allocations().is_empty());
}

#[test]
fn dedicated_numa_binding_stays_on_the_hinted_node_and_exclusive_nodes_are_kept() {
    let mut p = plugin();
    let bound = [
        level("dedicated_cores"),
        (
            qos::MEMORY_ENHANCEMENT_KEY,
            r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
        ),
    ];
    let hints = p
        .topology_hints(&request("a", 4.0, &bound))
        .expect("hints")
        .expect("some");
    assert!(
        hints.contains(&Hint {
            nodes: vec![1],
            preferred: true
        }),
        "{hints:?}"
    );
    let mut ask = request("a", 4.0, &bound);
    ask.hint = Some(Hint {
        nodes: vec![1],
        preferred: true,
    });
    let got = cpus_of(&p.allocate(&ask).expect("a"));
    assert!(got.is_subset(&set("4-7,12-15")), "{got}");
    // Nobody else gets node 1: not dedicated pods, not the pools.
    let other = p
        .topology_hints(&request("b", 1.0, &[level("dedicated_cores")]))
        .expect("hints");
    assert!(other.expect("some").iter().all(|h| h.nodes == vec![0]));
    let shared = cpus_of(&p.allocate(&request("s", 1.0, &[])).expect("s"));
    assert!(shared.is_subset(&set("1-3,8-11")), "{shared}");
    let reclaim = &p.pools().plan().reclaim;
    assert!(reclaim.is_disjoint(&set("4-7,12-15")));
    // After the pod goes, node 1 is everyone's again.
    p.remove_pod("a").expect("remove");
    p.remove_pod("a").expect("idempotent");
    assert!(p.state().exclusive_numa.is_empty());
    assert!(p.pools().plan().reclaim.intersection_len(&set("4-7,12-15")) > 0);
}

#[test]
fn numa_bound_shared_pools_are_per_node() {
    let mut p = plugin();
    let bound = [(qos::MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#)];
    let hints = p
        .topology_hints(&request("s", 2.0, &bound))
        .expect("hints")
        .expect("some");
    assert_eq!(
        hints.iter().map(|h| h.nodes.clone()).collect::<Vec<_>>(),
        [vec![0], vec![1]]
    );
    let mut ask = request("s", 2.0, &bound);
    ask.hint = Some(Hint {
        nodes: vec![1],
        preferred: true,
    });
    let got = cpus_of(&p.allocate(&ask).expect("s"));
    assert!(got.is_subset(&set("4-7,12-15")));
    assert!(p.pools().entries().contains_key("share@1"));
}

#[test]
fn the_online_pool_grows_under_pressure_and_gives_cpus_back_when_idle() {
    let config = CpuPluginConfig {
        pools: PoolParams {
            cooldown: 0,
            step: 2,
            max_headroom: 6,
            ..PoolParams::default()
        },
        ..CpuPluginConfig::default()
    };
    let mut p = CpuPlugin::open(machine(), &config, None).expect("plugin");
    let dedicated = cpus_of(
        &p.allocate(&request("d", 2.0, &[level("dedicated_cores")]))
            .expect("d"),
    );
    p.allocate(&request("web", 2.0, &[])).expect("web");
    p.allocate(&request("etl", 1.0, &[level("reclaimed_cores")]))
        .expect("etl");
    let size = |p: &CpuPlugin| p.cpuset("web", "c").len();
    assert_eq!(size(&p), 3);
    let hot = BTreeMap::from([(
        "share".to_string(),
        PoolLoad {
            pressure: 40.0,
            usage: None,
        },
    )]);
    let report = p.reconcile(&hot).expect("reconcile");
    assert_eq!(size(&p), 5);
    assert!(matches!(report.pools[0].reason, ChangeReason::Grow { .. }));
    let moved: Vec<&str> = report
        .containers
        .iter()
        .map(|c| c.pod_uid.as_str())
        .collect();
    assert_eq!(moved, ["etl", "web"], "the pool and reclaim both changed");
    for _ in 0..5 {
        p.reconcile(&hot).expect("reconcile");
    }
    assert_eq!(size(&p), 8, "requests + max headroom");
    assert_eq!(p.cpuset("d", "c"), dedicated, "dedicated cpus never move");
    assert!(
        p.cpuset("web", "c").is_disjoint(&set("0")),
        "nor reserved ones"
    );
    assert_eq!(p.cpuset("etl", "c").len(), 15 - 2 - 8);
    let idle = BTreeMap::from([(
        "share".to_string(),
        PoolLoad {
            pressure: 0.0,
            usage: Some(0.5),
        },
    )]);
    for _ in 0..10 {
        p.reconcile(&idle).expect("reconcile");
    }
    assert_eq!(size(&p), 2);
    assert_eq!(p.reconcile(&idle).expect("steady").containers, vec![]);
}

#[test]
fn pool_loads_take_the_worst_pressure_and_the_total_usage() {
    let mut p = plugin();
    p.allocate(&request("a", 1.0, &[])).expect("a");
    p.allocate(&request("b", 1.0, &[])).expect("b");
    let per_container = BTreeMap::from([
        (
            ("a".to_string(), "c".to_string()),
            PoolLoad {
                pressure: 5.0,
                usage: Some(0.5),
            },
        ),
        (
            ("b".to_string(), "c".to_string()),
            PoolLoad {
                pressure: 30.0,
                usage: Some(1.0),
            },
        ),
    ]);
    let loads = p.pool_loads(&per_container);
    assert_eq!(
        loads["share"],
        PoolLoad {
            pressure: 30.0,
            usage: Some(1.5)
        }
    );
}

#[test]
fn state_survives_a_restart_and_must_fit_the_machine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = CpuPluginConfig::default();
    let before = {
        let mut p = CpuPlugin::open(machine(), &config, Some(dir.path())).expect("plugin");
        p.allocate(&request("d", 2.0, &[level("dedicated_cores")]))
            .expect("d");
        p.allocate(&request("s", 1.0, &[])).expect("s");
        p.set_pool_size("share", PoolSize::Fixed(4)).expect("pin");
        p.allocations()
    };
    let p = CpuPlugin::open(machine(), &config, Some(dir.path())).expect("reopen");
    assert_eq!(p.allocations(), before);
    assert_eq!(p.pools().pin_of("share"), PoolSize::Fixed(4));
    // A reservation that an exclusive container now holds (kubelet's
    // validateState refuses it too).
    let held = p.cpuset("d", "c").first().expect("a cpu");
    let other = CpuPluginConfig {
        reserved_cpu_list: CpuSet::from_iter([held]),
        ..CpuPluginConfig::default()
    };
    let err =
        CpuPlugin::open(machine(), &other, Some(dir.path())).expect_err("reservation changed");
    assert!(matches!(err, PluginError::Restore { .. }), "{err}");
}

#[test]
fn answers_look_like_katalysts() {
    let mut p = plugin();
    let mut ask = request("g", 2.0, &[]);
    ask.native_qos_class = "Guaranteed".into();
    let answer = p.allocate(&ask).expect("g").expect("answer");
    let info = &answer[RESOURCE];
    assert_eq!(info.oci_property_name, "CpusetCpus");
    assert!(info.is_scalar_resource && !info.is_node_resource);
    assert_eq!(info.allocated_quantity, 2.0);
    assert_eq!(info.topology_assignments.values().sum::<u64>(), 2);
    let aware = p.topology_aware_resources("g", "c").expect("known");
    assert_eq!(aware[RESOURCE].aggregated_quantity, 2.0);
    assert_eq!(aware[RESOURCE].original_aggregated_quantity, 2.0);
    let allocatable = &p.allocatable_resources()[RESOURCE];
    assert_eq!(allocatable.aggregated_allocatable_quantity, 15.0);
    assert_eq!(allocatable.aggregated_capacity_quantity, 16.0);
    assert!(p.options().with_topology_alignment);
    // A second Allocate of the same container answers the same.
    assert_eq!(p.allocate(&ask).expect("again"), Some(answer));
}

/// The side data a journal would hold after `outbox`'s records.
fn apply(outbox: &crate::store::Outbox, journal: &mut BTreeMap<String, SideValue>) {
    for record in outbox.take() {
        let pinion_core::record::Record::Side { key, value, .. } = record else {
            panic!("a plugin hands side-data records only: {record:?}");
        };
        match value {
            Some(value) => journal.insert(key, value),
            None => journal.remove(&key),
        };
    }
}

fn journal_plugin(
    entries: BTreeMap<String, SideValue>,
    outbox: &crate::store::Outbox,
    legacy_dir: Option<&Path>,
) -> CpuPlugin {
    let store = crate::store::Journal::new(
        crate::store::Journal::kind_of("cpu"),
        entries,
        outbox.clone(),
        StateFile::new(legacy_dir, STATE_FILE),
    );
    CpuPlugin::open_with_store(machine(), &CpuPluginConfig::default(), store.into())
        .expect("plugin from the journal")
}

/// A dedicated pod of 2 CPUs holding NUMA node `node` exclusively
/// (`numa_binding` + `numa_exclusive`), hinted there.
fn numa_holder(pod: &str, node: u64) -> Request {
    let mut r = request(
        pod,
        2.0,
        &[
            level("dedicated_cores"),
            (
                qos::MEMORY_ENHANCEMENT_KEY,
                r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
            ),
        ],
    );
    r.hint = Some(Hint {
        nodes: vec![node],
        preferred: true,
    });
    r
}

/// #17: in the agent the CPU plugin's state is journal entries (one per
/// pod, and the rest) instead of its state file. After every kind of change
/// the entries rebuild exactly the plugin's state, and an admission writes
/// the entries of its pod and the rest only.
#[test]
fn the_journal_entries_rebuild_the_state_after_every_change() {
    let outbox = crate::store::Outbox::new();
    let mut journal = BTreeMap::new();
    let mut p = journal_plugin(BTreeMap::new(), &outbox, None);
    apply(&outbox, &mut journal);
    type Step = Box<dyn Fn(&mut CpuPlugin)>;
    let steps: Vec<(&str, Step)> = vec![
        (
            "dedicated",
            Box::new(|p| {
                p.allocate(&request("d", 2.0, &[level("dedicated_cores")]))
                    .expect("d");
            }),
        ),
        (
            "numa exclusive",
            Box::new(|p| {
                p.allocate(&numa_holder("x", 1)).expect("x");
            }),
        ),
        (
            "shared",
            Box::new(|p| {
                p.allocate(&request("s", 1.5, &[])).expect("s");
            }),
        ),
        (
            "reclaimed",
            Box::new(|p| {
                p.allocate(&request("r", 1.0, &[level("reclaimed_cores")]))
                    .expect("r");
            }),
        ),
        (
            // Periods that resize nothing are not saved (their hysteresis
            // counters start again after a restart); the one that grows the
            // pool is.
            "pressure",
            Box::new(|p| {
                let loads = BTreeMap::from([(
                    "share".to_string(),
                    PoolLoad {
                        pressure: 90.0,
                        usage: Some(3.0),
                    },
                )]);
                let grew =
                    (0..10).any(|_| !p.reconcile(&loads).expect("reconcile").pools.is_empty());
                assert!(grew, "the share pool grows under pressure");
            }),
        ),
        (
            "pin",
            Box::new(|p| {
                p.set_pool_size("share", PoolSize::Fixed(3)).expect("pin");
            }),
        ),
        (
            "remove dedicated",
            Box::new(|p| p.remove_pod("d").expect("remove d")),
        ),
        (
            "remove exclusive",
            Box::new(|p| p.remove_pod("x").expect("remove x")),
        ),
    ];
    for (name, step) in steps {
        step(&mut p);
        apply(&outbox, &mut journal);
        let reopened = journal_plugin(journal.clone(), &outbox, None);
        let _ = outbox.take();
        assert_eq!(reopened.state(), p.state(), "after {name}");
    }
    assert!(!journal.contains_key("pod/d") && !journal.contains_key("pod/x"));

    // One more admission: its pod's entry and the rest, nothing else.
    p.allocate(&request("t", 1.0, &[])).expect("t");
    let keys: Vec<String> = outbox
        .take()
        .into_iter()
        .map(|record| match record {
            pinion_core::record::Record::Side { key, .. } => key,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(keys, ["pod/t", "rest"]);
}

/// Found from outside (forty-fourth session): every exclusive admission
/// after a pod held a NUMA node exclusively put the CPUs of the other pods'
/// held nodes back into the shared set — the holder's own exclusive CPUs
/// too. The next exclusive request could get them a second time, and the
/// state saved so was refused at the next start (an assignment overlapping
/// the default set), which stopped the agent.
#[test]
fn regression_an_exclusive_admission_after_a_numa_holder_keeps_the_holders_cpus_out_of_the_shared_set(
) {
    let outbox = crate::store::Outbox::new();
    let mut journal = BTreeMap::new();
    let mut p = journal_plugin(BTreeMap::new(), &outbox, None);
    let held = cpus_of(&p.allocate(&numa_holder("x", 1)).expect("x"));
    for pod in ["d", "e"] {
        let got = cpus_of(
            &p.allocate(&request(pod, 2.0, &[level("dedicated_cores")]))
                .expect("dedicated"),
        );
        assert!(got.is_disjoint(&held), "{pod} got {got}, x holds {held}");
        let exclusive = &p.state().exclusive;
        assert!(
            exclusive.default.is_disjoint(&exclusive.exclusive_cpus()),
            "shared {} overlaps the exclusive cpus {}",
            exclusive.default,
            exclusive.exclusive_cpus()
        );
    }
    apply(&outbox, &mut journal);
    let reopened = journal_plugin(journal, &outbox, None);
    assert_eq!(reopened.state(), p.state());
}

/// #17: an agent upgraded from the state-file version finds no journal
/// entries; the plugin takes its state file once and hands all of it to
/// the journal.
#[test]
fn a_state_file_of_an_earlier_version_is_taken_into_the_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = {
        let mut p = CpuPlugin::open(machine(), &CpuPluginConfig::default(), Some(dir.path()))
            .expect("plugin");
        p.allocate(&request("d", 2.0, &[level("dedicated_cores")]))
            .expect("d");
        p.allocate(&request("s", 1.0, &[])).expect("s");
        p.state().clone()
    };
    let outbox = crate::store::Outbox::new();
    let p = journal_plugin(BTreeMap::new(), &outbox, Some(dir.path()));
    assert_eq!(p.state(), &before);
    let mut journal = BTreeMap::new();
    apply(&outbox, &mut journal);
    assert!(journal.contains_key("pod/d") && journal.contains_key("pod/s"));
    // From now on the journal wins over the (stale) file.
    let mut p = journal_plugin(journal.clone(), &outbox, Some(dir.path()));
    p.remove_pod("d").expect("remove");
    apply(&outbox, &mut journal);
    let reopened = journal_plugin(journal, &outbox, Some(dir.path()));
    assert!(reopened.state().member("d", "c").is_none());
    assert!(reopened.state().member("s", "c").is_some());
}

/// Damaged entries are refused naming the kind, as a damaged state file.
#[test]
fn damaged_journal_entries_are_named() {
    let entries = BTreeMap::from([
        (
            "rest".to_string(),
            serde_json::json!({"default": "0-15"}).into(),
        ),
        (
            "pod/p".to_string(),
            serde_json::json!({"containers": 7}).into(),
        ),
    ]);
    let store = crate::store::Journal::new(
        "plugin-state/cpu",
        entries,
        crate::store::Outbox::new(),
        StateFile::memory(STATE_FILE),
    );
    let err = CpuPlugin::open_with_store(machine(), &CpuPluginConfig::default(), store.into())
        .expect_err("damaged");
    assert!(err.to_string().contains("plugin-state/cpu"), "{err}");
}

/// Regression (#17, found by the journal-entries test): pinning a pool to
/// the size it already had was not saved, so the pin was gone after a
/// restart and the closed loop resized the pool again.
#[test]
fn regression_a_pin_to_the_current_size_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = CpuPluginConfig::default();
    {
        let mut p = CpuPlugin::open(machine(), &config, Some(dir.path())).expect("plugin");
        p.allocate(&request("s", 1.5, &[])).expect("s");
        let size = u32::try_from(p.state().pools.plan().shared["share"].len()).expect("small");
        let report = p
            .set_pool_size("share", PoolSize::Fixed(size))
            .expect("pin");
        assert!(report.pools.is_empty(), "no resize: {report:?}");
    }
    let p = CpuPlugin::open(machine(), &config, Some(dir.path())).expect("reopen");
    assert!(matches!(p.pools().pin_of("share"), PoolSize::Fixed(_)));
}

fn guaranteed(pod: &str, container: &str, cpus: f64) -> Request {
    let mut r = request(pod, cpus, &[]);
    r.container_name = container.into();
    r.native_qos_class = "Guaranteed".into();
    r
}

/// #30: exclusive CPUs are chosen on the state itself, not on a copy of
/// every assignment. A refusal — by the allocator, or by the pools that
/// would no longer fit — leaves the state exactly as it was, including the
/// pod's other containers' CPUs.
#[test]
fn a_refused_exclusive_allocation_leaves_the_state_as_it_was() {
    let mut p = plugin();
    p.allocate(&request("s", 4.0, &[])).expect("shared");
    p.allocate(&guaranteed("g", "a", 2.0))
        .expect("first container");
    let before = p.state().clone();
    // 13 free CPUs: the allocator refuses 14.
    let err = p
        .allocate(&guaranteed("g", "b", 14.0))
        .expect_err("more than the free cpus");
    assert!(matches!(err, PluginError::Policy(_)), "{err}");
    assert_eq!(p.state(), &before, "after the allocator's refusal");
    // 10 fit the allocator, but not beside the shared pool and reclaim.
    let err = p
        .allocate(&guaranteed("g", "b", 10.0))
        .expect_err("the pools no longer fit");
    assert!(matches!(err, PluginError::Pools(_)), "{err}");
    assert_eq!(p.state(), &before, "after the pools' refusal");
    let err = p
        .allocate(&guaranteed("h", "c", 10.0))
        .expect_err("the pools no longer fit");
    assert!(matches!(err, PluginError::Pools(_)), "{err}");
    assert_eq!(p.state(), &before, "a new pod refused");
    // What fits is still given, from the same CPUs as before.
    let got = cpus_of(&p.allocate(&guaranteed("g", "b", 2.0)).expect("fits"));
    assert_eq!(got.len(), 2);
    assert!(got.is_disjoint(&before.exclusive.assignments["g"]["a"]));
    assert!(got.is_subset(&before.exclusive.default));
}

/// #30: the `rest` entry no longer carries the pools' parameters (the
/// configuration gives them at every start); entries written before, with
/// them, are still read, to the same state.
#[test]
fn rest_entries_with_and_without_the_pool_parameters_are_read() {
    let outbox = crate::store::Outbox::new();
    let mut journal = BTreeMap::new();
    let mut p = journal_plugin(BTreeMap::new(), &outbox, None);
    p.allocate(&request("s", 1.5, &[])).expect("s");
    p.allocate(&guaranteed("g", "c", 2.0)).expect("g");
    apply(&outbox, &mut journal);
    let rest: serde_json::Value = journal["rest"].decode().expect("rest");
    assert!(rest["pools"].get("params").is_none(), "{rest}");
    assert!(rest["pools"].get("plan").is_some(), "{rest}");
    assert_eq!(
        journal_plugin(journal.clone(), &outbox, None).state(),
        p.state()
    );

    // The form written before issue 30: the whole pools, parameters too.
    let old = serde_json::json!({
        "default": p.state().exclusive.default,
        "pools": p.state().pools,
    });
    assert!(old["pools"].get("params").is_some(), "{old}");
    journal.insert("rest".to_string(), old.into());
    let reopened = journal_plugin(journal, &outbox, None);
    assert_eq!(reopened.state(), p.state());
}

#[test]
fn every_member_is_answered_for_its_own_cpuset_when_pools_share_one() {
    let mut p = plugin();
    for pod in ["s1", "s2", "s3"] {
        p.allocate(&request(pod, 1.0, &[])).expect("shared");
    }
    let batch = [(qos::CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool":"batch"}"#)];
    for pod in ["b1", "b2"] {
        p.allocate(&request(pod, 1.0, &batch)).expect("batch");
    }
    p.allocate(&request("d", 2.0, &[level("dedicated_cores")]))
        .expect("dedicated");
    p.allocate(&request("r", 1.0, &[level("reclaimed_cores")]))
        .expect("reclaimed");
    let all = p.allocations();
    let answered: Vec<(&str, CpuSet)> = all
        .iter()
        .map(|(pod, containers)| (pod.as_str(), cpus_of(&containers.get("c").cloned())))
        .collect();
    assert_eq!(answered.len(), 7);
    for (pod, cpus) in &answered {
        assert_eq!(*cpus, p.cpuset(pod, "c"), "{pod}");
        // The same answer `Allocate` gives for the container alone.
        assert_eq!(
            all[*pod]["c"][RESOURCE],
            p.info(pod, "c").expect("a member"),
            "{pod}"
        );
    }
    let cpus = |pod: &str| {
        answered
            .iter()
            .find(|(p, _)| *p == pod)
            .expect(pod)
            .1
            .clone()
    };
    assert_eq!(cpus("s1"), cpus("s3"));
    assert_eq!(cpus("b1"), cpus("b2"));
    assert!(cpus("s1").is_disjoint(&cpus("b1")));
    assert!(cpus("d").is_disjoint(&cpus("s1")));
}

/// Found from outside (session 43): `pools set` took any name up to 253
/// bytes and any number of pins. Control characters grow sixfold in the
/// state record's JSON, and some 700 pins pushed the CPU plugin's `rest`
/// record past the journal's record limit: the pins were answered and lost
/// at the next restart. A pin's name now follows the rules of an
/// annotation's pool name, and at most `MAX_PINS` pools are pinned.
#[test]
fn regression_pool_pins_take_pool_names_only_and_are_capped() {
    use pinion_core::pools::MAX_PINS;

    let pools = CpuPluginHandle::new(plugin());
    for bad in ["", "a b", "x=1", "\u{1}\u{2}", &"p".repeat(64)] {
        let err = pools.set(bad, "1", true).expect_err(bad);
        assert!(
            matches!(&err, SetPoolError::Name(QosError::InvalidPoolName { value, .. }) if value == bad),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
    assert!(pools.view().pending_pins.is_empty(), "nothing pinned");

    let name = |n: usize| format!("later-{n:03}");
    for n in 0..MAX_PINS {
        pools.set(&name(n), "1", true).expect("under the cap");
    }
    let err = pools.set("one-more", "2", true).expect_err("over the cap");
    assert!(
        matches!(&err, SetPoolError::TooManyPins { pool } if pool == "one-more"),
        "{err}"
    );
    assert!(
        err.to_string().contains(&MAX_PINS.to_string()) && err.to_string().contains("auto"),
        "{err}"
    );
    // At the cap, a pinned pool's pin still changes, and `auto` frees a
    // place for another.
    pools
        .set(&name(7), "2", false)
        .expect("a new size for a pin");
    pools.set(&name(7), "auto", false).expect("auto");
    pools.set("one-more", "2", true).expect("the freed place");
    assert_eq!(pools.view().pending_pins.len(), MAX_PINS);
}

/// Found from outside (forty-fourth session): a pin was taken without
/// checking that it fits. `pinion pools set share=64` on a 16-CPU node was
/// answered 200, and from then on every shared and exclusive admission was
/// refused (the pin's minimum is the floor the admission checks), while
/// the closed loop resized the pool up and down every period.
#[test]
fn regression_a_pin_that_does_not_fit_is_refused_and_changes_nothing() {
    let pools = CpuPluginHandle::new(plugin());
    pools
        .lock()
        .allocate(&request("s", 1.5, &[]))
        .expect("shared");
    for size in ["64", "40-48"] {
        let err = pools.set("share", size, false).expect_err(size);
        assert!(
            matches!(&err, SetPoolError::DoesNotFit { pool, .. } if pool == "share"),
            "{size}: {err}"
        );
        assert!(
            err.to_string().contains(size) && err.to_string().contains("not enough cpus"),
            "{err}"
        );
        assert_eq!(pools.lock().pools().pin_of("share"), PoolSize::Auto);
    }
    pools
        .lock()
        .allocate(&request("t", 1.0, &[]))
        .expect("shared admissions go on");
    pools
        .lock()
        .allocate(&request("d", 2.0, &[level("dedicated_cores")]))
        .expect("exclusive admissions go on");
    pools.set("share", "3", false).expect("a pin that fits");
    assert_eq!(pools.lock().pools().pin_of("share"), PoolSize::Fixed(3));
}

/// The check refuses only what makes things worse: when the pools do not
/// fit already, a pin that lowers a pool's minimum is taken.
#[test]
fn a_lower_pin_is_taken_even_when_the_pools_do_not_fit_already() {
    let pools = CpuPluginHandle::new(plugin());
    pools
        .lock()
        .allocate(&request("s", 1.5, &[]))
        .expect("shared");
    // A pin past what the machine has, set directly (as a restored state
    // that no longer fits after CPUs went offline would be).
    pools
        .lock()
        .set_pool_size("share", PoolSize::Fixed(16))
        .expect("set directly");
    assert!(
        pools.lock().pin_fits("share", PoolSize::Fixed(15)).is_ok(),
        "15 does not fit either, but is lower"
    );
    let lower = pools.set("share", "15", false);
    let higher = pools.set("share", "20", false);
    assert!(lower.is_ok(), "{lower:?}");
    assert!(
        matches!(higher, Err(SetPoolError::DoesNotFit { .. })),
        "{higher:?}"
    );
}

/// Every CPU the plugin answers for any container.
fn every_answered_cpu(p: &CpuPlugin) -> CpuSet {
    let mut all = CpuSet::new();
    for cpus in p.cpusets().values() {
        all.union_with(cpus);
    }
    all
}

/// Found from outside (session 44): the built-in CPU plugin kept the
/// machine it started on. After a CPU went offline it went on answering
/// it (the manager refuses such answers: the shared pods' new cpusets were
/// dropped, dedicated admissions failed). It now follows the online CPUs
/// as the agent's own state does: the dedicated container that lost a CPU
/// gets a free one in its place, the pools are laid out on the CPUs left,
/// and a CPU back online is free again.
#[test]
fn regression_the_cpu_plugin_follows_cpus_going_offline_and_back() {
    let mut p = plugin();
    let dedicated = cpus_of(
        &p.allocate(&request("d", 2.0, &[level("dedicated_cores")]))
            .expect("d"),
    );
    p.allocate(&request("s", 1.5, &[])).expect("s");
    let lost = CpuSet::from_iter([dedicated.iter().next().expect("a cpu")]);
    let offline = pinion_core::testing::without_cpus(&machine(), &lost);
    let report = p.follow_topology(&offline).expect("followed");
    let now = p.cpuset("d", "c");
    assert_eq!(now.len(), 2, "a cpu in place of the lost one: {now}");
    assert!(now.is_disjoint(&lost), "{now}");
    assert!(every_answered_cpu(&p).is_disjoint(&lost));
    assert!(
        report.containers.iter().any(|c| c.pod_uid == "d"),
        "{report:?}"
    );
    assert_eq!(p.topology().all_cpus(), offline.all_cpus());
    // Admissions after it get online CPUs only.
    let later = cpus_of(
        &p.allocate(&request("e", 2.0, &[level("dedicated_cores")]))
            .expect("e"),
    );
    assert!(later.is_disjoint(&lost) && later.is_disjoint(&now));
    // Back online: free again, nobody moves.
    let report = p.follow_topology(&machine()).expect("back");
    assert_eq!(p.cpuset("d", "c"), now);
    assert!(report.containers.iter().all(|c| c.pod_uid != "d"));
    assert_eq!(p.topology().all_cpus(), machine().all_cpus());
    assert!(p
        .follow_topology(&machine())
        .expect("same")
        .containers
        .is_empty());
}

/// Found from outside (session 44): a CPU of the plugin's state that went
/// offline while the agent was down made the plugin refuse its state
/// ("current set of available CPUs … doesn't match"), and with it the
/// agent's start. The state is now followed onto the online CPUs.
#[test]
fn regression_a_cpu_gone_offline_while_down_does_not_stop_the_plugin_opening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = CpuPluginConfig::default();
    let dedicated = {
        let mut p = CpuPlugin::open(machine(), &config, Some(dir.path())).expect("open");
        cpus_of(
            &p.allocate(&request("d", 2.0, &[level("dedicated_cores")]))
                .expect("d"),
        )
    };
    let lost = CpuSet::from_iter([dedicated.iter().next().expect("a cpu")]);
    let offline = pinion_core::testing::without_cpus(&machine(), &lost);
    let p = CpuPlugin::open(offline, &config, Some(dir.path())).expect("opens");
    let now = p.cpuset("d", "c");
    assert_eq!(now.len(), 2, "{now}");
    assert!(now.is_disjoint(&lost));
    assert!(every_answered_cpu(&p).is_disjoint(&lost));
}
