//! Issue 31 items 3 and 4 through the engine: CPUs the kernel isolates at
//! boot (`isolcpus=`) stay out of the shared pool and out of plain
//! exclusive requests, and are handed out on `pinion.io/isolated-cpus`;
//! `pinion.io/uncore: exclusive` takes whole uncore caches that nobody
//! else shares afterwards.

use std::collections::BTreeMap;

use pinion_core::alloc::whole_uncore::WholeUncoreError;
use pinion_core::engine::Engine;
use pinion_core::pod::{Container, Pod};
use pinion_core::policy::cpu_ask::{ISOLATED_CPUS, UNCORE, UNCORE_ROUND_UP};
use pinion_core::policy::{Policy, PolicyError, Reservation, StaticPolicy, StaticPolicyOptions};
use pinion_core::quantity::Quantity;
use pinion_core::state::State;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::{CpuSet, Topology};

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("test cpulist")
}

/// 2 sockets × 4 cores × 2 threads (core c = CPUs c, c+8), one NUMA node
/// and one L3 per socket (the isolation guest's shape), with `isolated`
/// isolated at boot.
fn guest(isolated: &str) -> Topology {
    let t = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    let mut spec = t.spec().clone();
    spec.isolated = set(isolated);
    spec.nohz_full = set(isolated);
    Topology::new(spec).expect("topology")
}

/// 16 CPUs without SMT, 4 NUMA nodes, one L3 per 2 cores (8 L3s of 2).
fn big16() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 2,
        cores_per_socket: 8,
        threads_per_core: 1,
        cores_per_uncore: 2,
    })
}

fn engine(topology: &Topology, reserved: &str, strict: bool) -> Result<Engine, PolicyError> {
    let cpus = set(reserved);
    let reservation = Reservation {
        count: cpus.len(),
        cpus,
    };
    let options = StaticPolicyOptions {
        strict_cpu_reservation: strict,
        ..StaticPolicyOptions::default()
    };
    let policy = StaticPolicy::new(topology.clone(), options, &reservation)?;
    let mut engine = Engine::new(topology, Policy::Static(Box::new(policy)), State::default());
    engine.start()?;
    Ok(engine)
}

fn pod(uid: &str, cpus: &str, annotations: &[(&str, &str)]) -> Pod {
    let quantity = Quantity::parse(cpus).expect("quantity");
    let memory = Quantity::parse("1Gi").expect("quantity");
    Pod {
        uid: uid.to_owned(),
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        containers: vec![Container {
            name: "c".to_owned(),
            cpu_request: Some(quantity.clone()),
            cpu_limit: Some(quantity),
            memory_request: Some(memory.clone()),
            memory_limit: Some(memory),
            ..Container::default()
        }],
        ..Pod::default()
    }
}

fn admit(engine: &mut Engine, pod: &Pod) -> Result<Option<CpuSet>, PolicyError> {
    engine.admit_container(pod, "c", None)
}

#[test]
fn boot_isolated_cpus_are_never_in_the_shared_pool() {
    let e = engine(&guest("6"), "0", false).expect("test setup or admission");
    assert_eq!(e.shared_pool(), set("0-5,7-15"));
    assert_eq!(
        e.placement("nobody", "c").cpus,
        set("0-5,7-15"),
        "a shared container's placement"
    );
    // The checkpoint's default set is kubelet's: it still holds CPU 6.
    assert!(e.state().default.contains(6));
}

/// Issue 31: `cpu_manager_shared_pool_size_millicores` counted the free
/// boot-isolated CPUs, which never enter the shared pool. It is the shared
/// pool without the reserved CPUs, before and after an isolated CPU is
/// taken on `require` and after it comes back.
#[test]
fn regression_shared_pool_gauge_leaves_out_boot_isolated_cpus() {
    let mut e = engine(&guest("6-7"), "0", false).expect("test setup or admission");
    let pool_without_reserved = |e: &Engine| {
        u64::try_from(e.shared_pool().difference(&set("0")).len()).expect("count") * 1000
    };
    assert_eq!(e.cpu_gauges().shared_pool_millicores, 13_000);
    assert_eq!(
        e.cpu_gauges().shared_pool_millicores,
        pool_without_reserved(&e)
    );
    let got = admit(&mut e, &pod("a", "1", &[(ISOLATED_CPUS, "require")]))
        .expect("test setup or admission")
        .expect("exclusive cpus");
    assert!(got.is_subset(&set("6-7")), "got {got}");
    assert_eq!(e.cpu_gauges().shared_pool_millicores, 13_000);
    let plain = admit(&mut e, &pod("b", "2", &[]))
        .expect("test setup or admission")
        .expect("exclusive cpus");
    assert_eq!(plain.intersection_len(&set("6-7")), 0, "got {plain}");
    assert_eq!(e.cpu_gauges().shared_pool_millicores, 11_000);
    assert_eq!(
        e.cpu_gauges().shared_pool_millicores,
        pool_without_reserved(&e)
    );
}

#[test]
fn plain_requests_never_get_isolated_cpus() {
    let mut e = engine(&guest("1-3,9-11"), "0", false).expect("test setup or admission");
    // Without isolation kubelet would take core 1 (CPUs 1,9) first.
    let got = admit(&mut e, &pod("a", "4", &[]))
        .expect("test setup or admission")
        .expect("test setup or admission");
    assert!(got.is_disjoint(&set("1-3,9-11")), "{got}");
    assert_eq!(got.len(), 4);
}

#[test]
fn required_isolated_cpus_come_from_the_isolated_set() {
    let mut e = engine(&guest("6,14"), "0", false).expect("test setup or admission");
    let got = admit(&mut e, &pod("a", "2", &[(ISOLATED_CPUS, "require")]));
    assert_eq!(got, Ok(Some(set("6,14"))));
    assert_eq!(e.shared_pool(), set("0-5,7-13,15"));
    // Released: back in the checkpoint's default, still not shared.
    e.remove("a", "c");
    assert!(e.state().default.contains(6));
    assert!(!e.shared_pool().contains(6));
}

#[test]
fn required_isolated_cpus_refuse_a_shortfall_naming_it() {
    let mut e = engine(&guest("6"), "0", false).expect("test setup or admission");
    let err = admit(&mut e, &pod("a", "2", &[(ISOLATED_CPUS, "require")])).expect_err("refused");
    assert_eq!(
        err,
        PolicyError::IsolatedShortfall {
            requested: 2,
            free: 1,
            shortfall: 1,
            isolated: "6".to_owned(),
        }
    );
    assert!(err.to_string().contains("1 short"), "{err}");
    // Nothing changed.
    assert_eq!(e.state().assignment_count(), 0);
}

#[test]
fn required_isolated_cpus_on_a_machine_without_any_say_none() {
    let mut e = engine(&guest(""), "0", false).expect("test setup or admission");
    let err = admit(&mut e, &pod("a", "1", &[(ISOLATED_CPUS, "require")])).expect_err("refused");
    assert!(
        err.to_string().contains("boot-isolated cpus: none"),
        "{err}"
    );
}

#[test]
fn preferred_isolated_cpus_come_first_then_ordinary_ones() {
    let mut e = engine(&guest("6"), "0", false).expect("test setup or admission");
    let got = admit(&mut e, &pod("a", "2", &[(ISOLATED_CPUS, "prefer")]))
        .expect("test setup or admission")
        .expect("test setup or admission");
    assert!(got.contains(6), "{got}");
    assert_eq!(got.len(), 2);
    // The isolated set is used up: the next preferring pod gets ordinary CPUs.
    let next = admit(&mut e, &pod("b", "1", &[(ISOLATED_CPUS, "prefer")]))
        .expect("test setup or admission")
        .expect("test setup or admission");
    assert_eq!(next.len(), 1);
    assert!(!next.contains(6));
}

#[test]
fn a_bad_annotation_is_refused_naming_the_value() {
    let mut e = engine(&guest("6"), "0", false).expect("test setup or admission");
    let err = admit(&mut e, &pod("a", "1", &[(ISOLATED_CPUS, "maybe")])).expect_err("refused");
    assert!(matches!(err, PolicyError::CpuAsk(_)), "{err:?}");
    assert!(err.to_string().contains("\"maybe\""), "{err}");
}

#[test]
fn every_shared_cpu_isolated_is_refused_at_start() {
    // Strict reservation keeps CPU 0 out of the pool; everything else is
    // isolated: the shared pool would be empty.
    let err = engine(&guest("1-15"), "0", true).expect_err("refused");
    assert!(
        matches!(err, PolicyError::SharedPoolAllIsolated { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("1-15"), "{err}");
    // Without strict reservation the reserved CPU stays shared: it starts.
    let e = engine(&guest("1-15"), "0", false).expect("test setup or admission");
    assert_eq!(e.shared_pool(), set("0"));
}

#[test]
fn an_allocation_that_leaves_only_isolated_shared_cpus_is_refused() {
    // Reserved CPU 0 is itself isolated: only 1-7 keep the pool alive.
    let mut e = engine(&guest("0,8-15"), "0", false).expect("test setup or admission");
    assert_eq!(e.shared_pool(), set("1-7"));
    let err = admit(&mut e, &pod("a", "7", &[])).expect_err("refused");
    assert!(
        matches!(err, PolicyError::SharedPoolAllIsolated { .. }),
        "{err:?}"
    );
    assert_eq!(e.shared_pool(), set("1-7"));
}

#[test]
fn whole_uncore_takes_whole_caches_nobody_else_shares() {
    let t = big16();
    let mut e = engine(&t, "0", false).expect("test setup or admission");
    let got = admit(&mut e, &pod("a", "4", &[(UNCORE, "exclusive")]))
        .expect("test setup or admission")
        .expect("test setup or admission");
    // NUMA node 0 (0-3) has one whole free cache (L3 0-1 holds the
    // reserved CPU), too few for two: both come from node 1, not 2-5 across
    // the two nodes.
    assert_eq!(got, set("4-7"));
    assert_eq!(t.numa_nodes_of(&got), vec![1]);
    for cache in t.uncores().values() {
        if !cache.is_disjoint(&got) {
            assert!(cache.is_subset(&got), "cache {cache} is shared");
        }
    }
    assert!(e.shared_pool().is_disjoint(&got));
    let other = admit(&mut e, &pod("b", "2", &[]))
        .expect("test setup or admission")
        .expect("test setup or admission");
    assert!(other.is_disjoint(&got));
}

#[test]
fn whole_uncore_refuses_an_unaligned_request_unless_rounding_up() {
    let mut e = engine(&big16(), "0", false).expect("test setup or admission");
    let err = admit(&mut e, &pod("a", "3", &[(UNCORE, "exclusive")])).expect_err("refused");
    assert_eq!(
        err,
        PolicyError::WholeUncore(WholeUncoreError::Unaligned {
            requested: 3,
            group_size: 2,
            rounded: 4
        })
    );
    let got = admit(
        &mut e,
        &pod(
            "a",
            "3",
            &[(UNCORE, "exclusive"), (UNCORE_ROUND_UP, "true")],
        ),
    )
    .expect("test setup or admission")
    .expect("test setup or admission");
    assert_eq!(
        got,
        set("4-7"),
        "rounded up to two whole caches of one node"
    );
}

#[test]
fn whole_uncore_avoids_caches_a_plain_container_touches() {
    let mut e = engine(&big16(), "0", false).expect("test setup or admission");
    let plain = admit(&mut e, &pod("a", "1", &[]))
        .expect("test setup or admission")
        .expect("test setup or admission");
    let whole = admit(&mut e, &pod("b", "2", &[(UNCORE, "exclusive")]))
        .expect("test setup or admission")
        .expect("test setup or admission");
    let caches_of = |cpus: &CpuSet| -> Vec<u32> {
        big16()
            .uncores()
            .iter()
            .filter(|(_, c)| !c.is_disjoint(cpus))
            .map(|(id, _)| *id)
            .collect()
    };
    for id in caches_of(&whole) {
        assert!(
            !caches_of(&plain).contains(&id),
            "{plain} and {whole} share L3 {id}"
        );
    }
}

#[test]
fn whole_uncore_shortfall_names_the_free_caches() {
    let mut e = engine(&big16(), "0", false).expect("test setup or admission");
    let err = admit(&mut e, &pod("a", "16", &[(UNCORE, "exclusive")])).expect_err("refused");
    match err {
        PolicyError::WholeUncore(WholeUncoreError::NotEnough {
            groups_needed,
            groups_free,
            ..
        }) => assert_eq!((groups_needed, groups_free), (8, 7)),
        other => panic!("{other:?}"),
    }
}
