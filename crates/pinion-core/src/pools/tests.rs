use std::collections::BTreeMap;

use super::sizing::initial_size;
use super::*;
use crate::topology::{synthetic, Shape};

fn list(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

/// The seed's machine: 80 CPUs, 0-39 on NUMA node 0, 40-79 on node 1.
fn seed_machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 40,
        threads_per_core: 1,
        cores_per_uncore: 0,
    })
}

/// 2 NUMA nodes × 4 cores × 2 threads: node 0 = 0-3,8-11; node 1 = 4-7,12-15.
fn smt_machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 1,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    })
}

fn demand(members: usize, requests_milli: u64) -> PoolDemand {
    PoolDemand {
        members,
        requests_milli,
        numa: None,
    }
}

fn demands(pairs: &[(&str, PoolDemand)]) -> BTreeMap<String, PoolDemand> {
    pairs
        .iter()
        .map(|(name, d)| ((*name).to_string(), d.clone()))
        .collect()
}

fn load(pressure: f64) -> PoolLoad {
    PoolLoad {
        pressure,
        usage: None,
    }
}

fn loads(name: &str, load: PoolLoad) -> BTreeMap<String, PoolLoad> {
    BTreeMap::from([(name.to_string(), load)])
}

/// Seed example 1: the online pool starts at 0-37,40-77 and the offline
/// (reclaim) pool at 38-39,78-79; the QoS-aware system then sets the online
/// pool to 28 CPUs: 0-13,40-53 and reclaim 14-39,54-79.
#[test]
fn seed_example_one_online_and_offline_pools() {
    let topology = seed_machine();
    let none = CpuSet::new();
    let cpus = Cpus {
        topology: &topology,
        reserved: &none,
        held: &none,
    };
    let mut pools = Pools::new(PoolParams {
        reclaim_min: 4,
        ..PoolParams::default()
    });
    pools.set_pin("share", PoolSize::Fixed(76));
    pools.sync(&demands(&[("share", demand(1, 4000))]));
    pools.relayout(cpus);
    assert_eq!(pools.plan().shared["share"], list("0-37,40-77"));
    assert_eq!(pools.plan().reclaim, list("38-39,78-79"));
    let change = pools
        .set_pin("share", PoolSize::Fixed(28))
        .expect("a change");
    assert_eq!(
        (change.from, change.to, change.reason),
        (76, 28, ChangeReason::Pinned)
    );
    pools.relayout(cpus);
    assert_eq!(pools.plan().shared["share"], list("0-13,40-53"));
    assert_eq!(pools.plan().reclaim, list("14-39,54-79"));
}

#[test]
fn a_pool_is_created_with_headroom_and_removed_with_its_last_member() {
    let topology = smt_machine();
    let reserved = list("0");
    let none = CpuSet::new();
    let cpus = Cpus {
        topology: &topology,
        reserved: &reserved,
        held: &none,
    };
    let mut pools = Pools::new(PoolParams::default());
    let changes = pools.sync(&demands(&[("web", demand(2, 2500))]));
    assert_eq!(changes.len(), 1);
    assert_eq!(
        (changes[0].to, changes[0].reason),
        (4, ChangeReason::Created)
    );
    pools.relayout(cpus);
    let web = &pools.plan().shared["web"];
    assert_eq!(web.len(), 4);
    // Balanced over both nodes, whole cores: 1+9 on node 0, 4+12 on node 1.
    assert_eq!(web, &list("1,4,9,12"));
    assert_eq!(pools.plan().reclaim, list("2-3,5-8,10-11,13-15"));
    let changes = pools.sync(&BTreeMap::new());
    assert_eq!(changes[0].reason, ChangeReason::Removed);
    pools.relayout(cpus);
    assert!(pools.plan().shared.is_empty());
    assert_eq!(pools.plan().reclaim, list("1-15"));
}

#[test]
fn numa_bound_pools_stay_on_their_nodes() {
    let topology = smt_machine();
    let none = CpuSet::new();
    let cpus = Cpus {
        topology: &topology,
        reserved: &none,
        held: &none,
    };
    let mut pools = Pools::new(PoolParams::default());
    let bound = PoolDemand {
        members: 1,
        requests_milli: 3000,
        numa: Some(list("1")),
    };
    pools.sync(&demands(&[("share@1", bound), ("share", demand(1, 1000))]));
    pools.relayout(cpus);
    let plan = pools.plan();
    assert_eq!(plan.shared["share@1"], list("4-5,12-13"));
    assert!(plan.shared["share"].is_disjoint(&plan.shared["share@1"]));
}

#[test]
fn dedicated_and_reserved_cpus_are_never_used_and_pools_move_little() {
    let topology = smt_machine();
    let reserved = list("0,8");
    let none = CpuSet::new();
    let mut pools = Pools::new(PoolParams::default());
    pools.sync(&demands(&[("share", demand(3, 3000))]));
    pools.relayout(Cpus {
        topology: &topology,
        reserved: &reserved,
        held: &none,
    });
    let before = pools.plan().shared["share"].clone();
    assert_eq!(before.len(), 4);
    // A dedicated container takes two of the pool's CPUs: the pool keeps the
    // other two and takes two free ones.
    let held: CpuSet = before.iter().take(2).collect();
    pools.relayout(Cpus {
        topology: &topology,
        reserved: &reserved,
        held: &held,
    });
    let after = &pools.plan().shared["share"];
    assert_eq!(after.len(), 4);
    assert!(after.is_disjoint(&held) && after.is_disjoint(&reserved));
    assert_eq!(after.intersection_len(&before), 2);
}

#[test]
fn the_loop_grows_under_pressure_with_a_cooldown_and_shrinks_when_idle() {
    let topology = smt_machine();
    let none = CpuSet::new();
    let cpus = Cpus {
        topology: &topology,
        reserved: &none,
        held: &none,
    };
    let params = PoolParams {
        max_headroom: 3,
        cooldown: 2,
        ..PoolParams::default()
    };
    let mut pools = Pools::new(params);
    pools.sync(&demands(&[("share", demand(1, 2000))]));
    pools.relayout(cpus);
    let size = |p: &Pools| p.entries()["share"].size;
    assert_eq!(size(&pools), 3);
    let mut sizes = Vec::new();
    for _ in 0..6 {
        pools.reconcile(cpus, &loads("share", load(50.0)));
        sizes.push(size(&pools));
    }
    // One CPU every other period (cooldown 2), up to requests + 3.
    assert_eq!(sizes, vec![3, 4, 4, 5, 5, 5]);
    assert_eq!(pools.plan().shared["share"].len(), 5);
    let last = pools.entries()["share"]
        .last_change
        .clone()
        .expect("change");
    assert_eq!(last.reason, ChangeReason::Grow { pressure: 50.0 });
    // Between the thresholds nothing moves.
    for _ in 0..4 {
        pools.reconcile(cpus, &loads("share", load(5.0)));
    }
    assert_eq!(size(&pools), 5);
    // Idle: back to the requests, never below.
    for _ in 0..10 {
        pools.reconcile(cpus, &loads("share", load(0.0)));
    }
    assert_eq!(size(&pools), 2);
}

#[test]
fn shrinking_waits_until_the_busy_cpus_fit_the_smaller_pool() {
    let params = PoolParams::default();
    let busy = PoolLoad {
        pressure: 0.0,
        usage: Some(4.0),
    };
    assert_eq!(resize(&params, 6, (2, 8), 5, Some(&busy)), None);
    let idle = PoolLoad {
        pressure: 0.0,
        usage: Some(1.0),
    };
    assert!(matches!(
        resize(&params, 6, (2, 8), 5, Some(&idle)),
        Some((5, sizing::Step::Shrink { .. }))
    ));
    assert_eq!(resize(&params, 6, (2, 8), 5, None), None);
}

#[test]
fn pins_fix_or_bound_a_pool_and_auto_releases_it() {
    let topology = smt_machine();
    let none = CpuSet::new();
    let cpus = Cpus {
        topology: &topology,
        reserved: &none,
        held: &none,
    };
    let mut pools = Pools::new(PoolParams::default());
    pools.sync(&demands(&[("share", demand(1, 1000))]));
    pools.set_pin("share", PoolSize::Fixed(6));
    for _ in 0..5 {
        pools.reconcile(cpus, &loads("share", load(0.0)));
    }
    assert_eq!(pools.plan().shared["share"].len(), 6);
    // A fixed size below the requests is raised to them.
    pools.set_pin("share", PoolSize::Fixed(1));
    pools.sync(&demands(&[("share", demand(2, 3000))]));
    pools.relayout(cpus);
    assert_eq!(pools.plan().shared["share"].len(), 3);
    pools.set_pin("share", PoolSize::Bounds { min: 4, max: 5 });
    assert_eq!(pools.entries()["share"].size, 4);
    for _ in 0..10 {
        pools.reconcile(cpus, &loads("share", load(90.0)));
    }
    assert_eq!(pools.entries()["share"].size, 5);
    pools.set_pin("share", PoolSize::Auto);
    assert!(pools.pins().is_empty());
}

#[test]
fn admission_checks_requests_and_reclaim_minimum() {
    let topology = smt_machine();
    let reserved = list("0");
    let none = CpuSet::new();
    let cpus = Cpus {
        topology: &topology,
        reserved: &reserved,
        held: &none,
    };
    let pools = Pools::new(PoolParams {
        reclaim_min: 2,
        ..PoolParams::default()
    });
    assert_eq!(
        pools.check(cpus, &demands(&[("a", demand(1, 13_000))])),
        Ok(())
    );
    assert_eq!(
        pools.check(cpus, &demands(&[("a", demand(1, 13_001))])),
        Err(PoolError::Insufficient {
            needed: 14,
            reclaim_min: 2,
            available: 15
        })
    );
    let bound = PoolDemand {
        members: 1,
        requests_milli: 9000,
        numa: Some(list("1")),
    };
    assert_eq!(
        pools.check(cpus, &demands(&[("b", bound)])),
        Err(PoolError::InsufficientOnNodes {
            pool: "b".into(),
            nodes: "1".into(),
            needed: 9,
            available: 8
        })
    );
}

#[test]
fn sizes_are_cut_to_fit_when_dedicated_cpus_arrive() {
    let topology = smt_machine();
    let none = CpuSet::new();
    let mut pools = Pools::new(PoolParams {
        reclaim_min: 1,
        ..PoolParams::default()
    });
    pools.set_pin("a", PoolSize::Fixed(8));
    pools.sync(&demands(&[("a", demand(1, 1000)), ("b", demand(1, 2000))]));
    pools.relayout(Cpus {
        topology: &topology,
        reserved: &none,
        held: &none,
    });
    assert_eq!(pools.entries()["b"].size, 3);
    let held = list("0-5");
    let changes = pools.relayout(Cpus {
        topology: &topology,
        reserved: &none,
        held: &held,
    });
    // 10 CPUs left, 1 for reclaim: the auto pool gives up its headroom first,
    // then the fixed pool is cut (its pin comes back when CPUs do).
    assert_eq!(pools.entries()["b"].size, 2);
    assert_eq!(pools.entries()["a"].size, 7);
    assert!(changes.iter().all(|c| c.reason == ChangeReason::Budget));
    pools.relayout(Cpus {
        topology: &topology,
        reserved: &none,
        held: &none,
    });
    assert_eq!(pools.entries()["a"].size, 8);
}

#[test]
fn pool_sizes_parse_like_the_cli_writes_them() {
    assert_eq!("auto".parse::<PoolSize>(), Ok(PoolSize::Auto));
    assert_eq!("12".parse::<PoolSize>(), Ok(PoolSize::Fixed(12)));
    assert_eq!(
        "4-8".parse::<PoolSize>(),
        Ok(PoolSize::Bounds { min: 4, max: 8 })
    );
    for bad in ["", "0", "-1", "8-4", "x", "1-", "0-3"] {
        assert_eq!(
            bad.parse::<PoolSize>(),
            Err(PoolError::BadSize { text: bad.into() }),
            "{bad}"
        );
    }
    for size in [
        PoolSize::Auto,
        PoolSize::Fixed(3),
        PoolSize::Bounds { min: 2, max: 9 },
    ] {
        assert_eq!(size.to_string().parse::<PoolSize>(), Ok(size));
    }
}

#[test]
fn cgroup_v1_estimate_reports_saturation_and_throttling() {
    assert_eq!(PoolLoad::from_usage(2.0, 4, 0.0).pressure, 0.0);
    assert!((PoolLoad::from_usage(3.6, 4, 0.0).pressure - 50.0).abs() < 1e-9);
    assert_eq!(PoolLoad::from_usage(4.0, 4, 0.0).pressure, 100.0);
    assert!((PoolLoad::from_usage(0.5, 4, 0.25).pressure - 25.0).abs() < 1e-9);
    assert_eq!(PoolLoad::from_usage(f64::NAN, 0, f64::NAN).pressure, 100.0);
}

#[test]
fn parameters_are_validated() {
    assert_eq!(PoolParams::default().validate(), Ok(()));
    let bad = [
        PoolParams {
            shrink_pressure: 20.0,
            ..PoolParams::default()
        },
        PoolParams {
            step: 0,
            ..PoolParams::default()
        },
        PoolParams {
            shrink_utilization: 0.0,
            ..PoolParams::default()
        },
        PoolParams {
            grow_pressure: f64::NAN,
            ..PoolParams::default()
        },
    ];
    for params in bad {
        assert!(matches!(params.validate(), Err(PoolError::Params { .. })));
    }
    assert_eq!(initial_size(&PoolParams::default(), 0, PoolSize::Auto), 2);
}

/// Found from outside (session 44): a fixed pin that fitted and then did
/// not (dedicated pods took CPUs) was raised back to the pin and cut again
/// in every reconcile period: two changes a period, each saved by the CPU
/// plugin as a `rest` record, for nothing. A period now reports what it
/// changed, net: nothing while the pin still does not fit, the pin again
/// once it does.
#[test]
fn regression_a_fixed_pin_that_stopped_fitting_is_not_raised_and_cut_every_period() {
    let topology = seed_machine();
    let none = CpuSet::new();
    let free = Cpus {
        topology: &topology,
        reserved: &none,
        held: &none,
    };
    let dedicated = list("0-9");
    let busy = Cpus {
        topology: &topology,
        reserved: &none,
        held: &dedicated,
    };
    let mut pools = Pools::new(PoolParams {
        reclaim_min: 4,
        ..PoolParams::default()
    });
    pools.set_pin("share", PoolSize::Fixed(76));
    pools.sync(&demands(&[("share", demand(1, 4000))]));
    pools.relayout(free);
    assert_eq!(pools.entries()["share"].size, 76);
    let cut = pools.relayout(busy);
    assert_eq!(
        cut.iter()
            .map(|c| (c.from, c.to, c.reason))
            .collect::<Vec<_>>(),
        [(76, 66, ChangeReason::Budget)]
    );
    let last = pools.entries()["share"].last_change.clone();
    for _ in 0..3 {
        assert_eq!(pools.reconcile(busy, &BTreeMap::new()), []);
        assert_eq!(pools.entries()["share"].size, 66);
        assert_eq!(pools.entries()["share"].last_change, last);
    }
    let restored = pools.reconcile(free, &BTreeMap::new());
    assert_eq!(
        restored
            .iter()
            .map(|c| (c.from, c.to, c.reason))
            .collect::<Vec<_>>(),
        [(66, 76, ChangeReason::Pinned)]
    );
}
