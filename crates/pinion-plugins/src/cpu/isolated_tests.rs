//! Issue 31: CPUs the kernel isolates at boot (`isolcpus=`) are in no
//! shared or reclaim pool of the CPU plugin, and go to an exclusive request
//! only when it asks for them (`pinion.io/isolated-cpus`).

use pinion_core::policy::cpu_ask::ISOLATED_CPUS;
use pinion_core::policy::PolicyError;
use pinion_core::pools::PoolLoad;
use pinion_core::qos;

use super::tests::{cpus_of, level, machine, request, set};
use super::*;
use crate::api::Hint;
use crate::ErrorKind;

/// [`machine`] (node 0 = 0-3,8-11; node 1 = 4-7,12-15) with `isolated`
/// isolated at boot.
fn isolated_machine(isolated: &str) -> Topology {
    let mut spec = machine().spec().clone();
    spec.isolated = set(isolated);
    Topology::new(spec).expect("topology")
}

fn plugin_on(isolated: &str) -> CpuPlugin {
    CpuPlugin::open(
        isolated_machine(isolated),
        &CpuPluginConfig::default(),
        None,
    )
    .expect("plugin")
}

fn hint_nodes(hints: &[Hint]) -> Vec<(Vec<u64>, bool)> {
    hints
        .iter()
        .map(|h| (h.nodes.clone(), h.preferred))
        .collect()
}

#[test]
fn regression_shared_and_reclaimed_pools_never_hold_boot_isolated_cpus() {
    let isolated = set("6-7,14-15");
    let mut p = plugin_on("6-7,14-15");
    let shared = cpus_of(&p.allocate(&request("s", 1.5, &[])).expect("s"));
    let batch = cpus_of(
        &p.allocate(&request(
            "b",
            1.0,
            &[(qos::CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool":"batch"}"#)],
        ))
        .expect("b"),
    );
    let reclaimed = cpus_of(
        &p.allocate(&request("r", 1.0, &[level("reclaimed_cores")]))
            .expect("r"),
    );
    for (name, cpus) in [
        ("share", &shared),
        ("batch", &batch),
        ("reclaim", &reclaimed),
    ] {
        assert!(cpus.is_disjoint(&isolated), "{name} pool {cpus}");
    }
    // Reclaim takes every CPU the shared pools leave, but not the isolated ones.
    let mut all = shared.union(&batch);
    all.union_with(&reclaimed);
    assert_eq!(all, set("1-5,8-13"));
    // A pool growing under pressure does not reach them either.
    let loads = BTreeMap::from([(
        "share".to_string(),
        PoolLoad {
            pressure: 100.0,
            usage: None,
        },
    )]);
    for _ in 0..8 {
        p.reconcile(&loads).expect("reconcile");
    }
    for cpus in p.cpusets().values() {
        assert!(cpus.is_disjoint(&isolated), "{cpus}");
    }
    assert!(p.pools().plan().reclaim.is_disjoint(&isolated));
}

#[test]
fn regression_dedicated_cores_take_boot_isolated_cpus_only_when_asked() {
    let isolated = set("6-7,14-15");
    let mut p = plugin_on("6-7,14-15");
    let plain = cpus_of(
        &p.allocate(&request("plain", 2.0, &[level("dedicated_cores")]))
            .expect("plain"),
    );
    assert!(plain.is_disjoint(&isolated), "{plain}");
    let require = [level("dedicated_cores"), (ISOLATED_CPUS, "require")];
    let required = cpus_of(&p.allocate(&request("req", 2.0, &require)).expect("req"));
    assert!(required.is_subset(&isolated), "{required}");
    let prefer = [level("dedicated_cores"), (ISOLATED_CPUS, "prefer")];
    let preferred = cpus_of(&p.allocate(&request("pref", 3.0, &prefer)).expect("pref"));
    assert_eq!(
        preferred.intersection(&isolated),
        isolated.difference(&required),
        "the two isolated cpus left come first: {preferred}"
    );
    assert_eq!(preferred.len(), 3);
    // None left: require is refused, naming the shortfall.
    let err = p
        .allocate(&request("late", 1.0, &require))
        .expect_err("no isolated cpu is free");
    assert!(
        matches!(
            &err,
            PluginError::Policy(PolicyError::IsolatedShortfall {
                requested: 1,
                free: 0,
                ..
            })
        ),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted);
    // A Guaranteed pod on the static path follows the same rules.
    let mut guaranteed = request("g", 1.0, &[]);
    guaranteed.native_qos_class = "Guaranteed".into();
    let got = cpus_of(&p.allocate(&guaranteed).expect("g"));
    assert!(got.is_disjoint(&isolated), "{got}");
}

#[test]
fn a_bad_isolated_cpus_annotation_is_refused_naming_the_value() {
    let mut p = plugin_on("6-7");
    let ask = [level("dedicated_cores"), (ISOLATED_CPUS, "always")];
    let err = p.allocate(&request("x", 1.0, &ask)).expect_err("bad value");
    assert!(err.to_string().contains("\"always\""), "{err}");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(p.topology_hints(&request("x", 1.0, &ask)).is_err());
}

#[test]
fn regression_dedicated_hints_count_boot_isolated_cpus_only_when_asked() {
    // Node 1 is isolated whole: a plain request fits only on node 0.
    let p = plugin_on("4-7,12-15");
    let plain = p
        .topology_hints(&request("a", 4.0, &[level("dedicated_cores")]))
        .expect("hints")
        .expect("some");
    assert_eq!(hint_nodes(&plain), [(vec![0], true), (vec![0, 1], false)]);
    let require = [level("dedicated_cores"), (ISOLATED_CPUS, "require")];
    let required = p
        .topology_hints(&request("a", 4.0, &require))
        .expect("hints")
        .expect("some");
    assert_eq!(
        hint_nodes(&required),
        [(vec![1], true), (vec![0, 1], false)]
    );
    // NUMA-bound to node 1 without asking: no ordinary cpu is free there.
    let bound = [
        level("dedicated_cores"),
        (qos::MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#),
    ];
    let mut ask = request("b", 2.0, &bound);
    ask.hint = Some(Hint {
        nodes: vec![1],
        preferred: true,
    });
    let mut p = p;
    let err = p.allocate(&ask).expect_err("node 1 is all isolated");
    assert!(
        matches!(&err, PluginError::Insufficient { nodes, available, .. } if nodes == "1" && available == "0 cpus"),
        "{err}"
    );
}
