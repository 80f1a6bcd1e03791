//! Properties of the pool decisions on random machines, reservations,
//! dedicated CPUs, pools, pins and loads.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::topology::{synthetic, Shape};

fn machine(numa: u32, cores: u32, threads: u32) -> Topology {
    synthetic(Shape {
        sockets: 1,
        numa_per_socket: numa,
        cores_per_socket: cores * numa,
        threads_per_core: threads,
        cores_per_uncore: 0,
    })
}

/// A random subset of `all` with roughly `percent` % of its CPUs.
fn subset(all: &CpuSet, bits: &[bool]) -> CpuSet {
    all.iter()
        .zip(bits.iter().cycle())
        .filter(|(_, keep)| **keep)
        .map(|(cpu, _)| cpu)
        .collect()
}

#[derive(Debug, Clone)]
struct Scenario {
    topology: Topology,
    reserved: CpuSet,
    held: CpuSet,
    demands: BTreeMap<String, PoolDemand>,
    pins: BTreeMap<String, PoolSize>,
    params: PoolParams,
    loads: Vec<Vec<f64>>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        (1u32..=3, 1u32..=4, 1u32..=2),
        prop::collection::vec(prop::bool::weighted(0.08), 1..16),
        prop::collection::vec(prop::bool::weighted(0.2), 1..16),
        prop::collection::vec((0u64..2500, 1usize..4, 0u32..4, 0u8..4), 0..5),
        (0u32..4, 0u32..3, 1u32..3, 0u32..3),
        prop::collection::vec(prop::collection::vec(0.0f64..60.0, 5), 1..12),
    )
        .prop_map(
            |((numa, cores, threads), reserved_bits, held_bits, pools, knobs, loads)| {
                let topology = machine(numa, cores, threads);
                let all = topology.all_cpus().clone();
                let reserved = subset(&all, &reserved_bits);
                let held = subset(&all.difference(&reserved), &held_bits);
                let mut demands = BTreeMap::new();
                let mut pins = BTreeMap::new();
                for (i, (milli, members, node, pin)) in pools.into_iter().enumerate() {
                    let name = format!("p{i}");
                    let bound = node < numa && node % 2 == 1;
                    demands.insert(
                        name.clone(),
                        PoolDemand {
                            members,
                            requests_milli: milli,
                            numa: bound.then(|| CpuSet::from_iter([node])),
                        },
                    );
                    let pin = match pin {
                        1 => PoolSize::Fixed(1 + (milli % 3) as u32),
                        2 => PoolSize::Bounds { min: 1, max: 3 },
                        _ => PoolSize::Auto,
                    };
                    pins.insert(name, pin);
                }
                let (headroom, reclaim_min, step, cooldown) = knobs;
                let params = PoolParams {
                    headroom,
                    max_headroom: headroom + 2,
                    reclaim_min,
                    step,
                    cooldown,
                    ..PoolParams::default()
                };
                Scenario {
                    topology,
                    reserved,
                    held,
                    demands,
                    pins,
                    params,
                    loads,
                }
            },
        )
}

fn check_plan(s: &Scenario, pools: &Pools, cpus: Cpus<'_>) -> Result<(), TestCaseError> {
    let plan = pools.plan();
    let available = cpus.available();
    let mut seen = CpuSet::new();
    for (name, set) in &plan.shared {
        prop_assert!(set.is_disjoint(&s.reserved), "{name} takes reserved cpus");
        prop_assert!(set.is_disjoint(&s.held), "{name} takes dedicated cpus");
        prop_assert!(set.is_disjoint(&seen), "{name} overlaps another pool");
        prop_assert!(set.is_subset(&available));
        prop_assert!(!set.is_empty(), "{name} is empty");
        if let Some(nodes) = &pools.entries()[name].numa {
            let allowed = layout::allowed_cpus(&s.topology, &available, Some(nodes));
            prop_assert!(set.is_subset(&allowed), "{name} left its nodes");
        }
        seen.union_with(set);
    }
    prop_assert!(plan.reclaim.is_disjoint(&seen));
    prop_assert_eq!(plan.reclaim.union(&seen), available);
    prop_assert!(plan.reclaim.len() >= s.params.reclaim_min as usize);
    for (name, entry) in pools.entries() {
        let (min, max) = pools.bounds_of(name, entry.requests_milli);
        prop_assert!(
            entry.size >= min && entry.size <= max,
            "{name} outside its bounds"
        );
        if let PoolSize::Fixed(_) = pools.pin_of(name) {
            prop_assert_eq!(entry.size, min, "pinned {} lost its size", name);
        }
        if entry.numa.is_none() {
            prop_assert_eq!(plan.shared[name].len(), entry.size as usize);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_global_rejects: 100_000, ..ProptestConfig::default() })]

    /// Whatever the loads, as long as admission accepted the demands: no
    /// reserved or dedicated CPU in a pool, pools disjoint, reclaim at least
    /// its minimum, sizes within bounds, pinned pools at their size.
    #[test]
    fn plans_keep_every_invariant(s in scenario()) {
        let cpus = Cpus { topology: &s.topology, reserved: &s.reserved, held: &s.held };
        let mut pools = Pools::new(s.params.clone());
        for (name, pin) in &s.pins {
            pools.set_pin(name, *pin);
        }
        prop_assume!(pools.check(cpus, &s.demands).is_ok());
        pools.sync(&s.demands);
        pools.relayout(cpus);
        check_plan(&s, &pools, cpus)?;
        for period in &s.loads {
            let loads: BTreeMap<String, PoolLoad> = s.demands.keys().zip(period)
                .map(|(name, &pressure)| (name.clone(), PoolLoad { pressure, usage: None }))
                .collect();
            pools.reconcile(cpus, &loads);
            check_plan(&s, &pools, cpus)?;
        }
    }

    /// On a constant load the loop settles: a pool whose work keeps `need`
    /// CPUs busy (PSI "some" is 100 % while fewer CPUs than that are there,
    /// 0 % otherwise; usage = the busy CPUs) ends with at least `need` CPUs
    /// (or its maximum), at most what the idle rule allows, and then never
    /// moves again.
    #[test]
    fn the_loop_converges_without_oscillating(
        need in 1u32..24,
        requests in 0u64..6000,
        step in 1u32..3,
        cooldown in 0u32..3,
    ) {
        let topology = machine(2, 8, 2);
        let none = CpuSet::new();
        let cpus = Cpus { topology: &topology, reserved: &none, held: &none };
        let params = PoolParams { max_headroom: 16, step, cooldown, ..PoolParams::default() };
        let utilization = params.shrink_utilization;
        let mut pools = Pools::new(params);
        let demand = PoolDemand { members: 1, requests_milli: requests, numa: None };
        pools.sync(&BTreeMap::from([("share".to_string(), demand)]));
        pools.relayout(cpus);
        let mut history = Vec::new();
        for _ in 0..120 {
            let size = pools.entries()["share"].size;
            let load = PoolLoad {
                pressure: if need > size { 100.0 } else { 0.0 },
                usage: Some(f64::from(need.min(size))),
            };
            pools.reconcile(cpus, &BTreeMap::from([("share".to_string(), load)]));
            history.push(pools.entries()["share"].size);
        }
        let tail = &history[60..];
        prop_assert!(tail.iter().all(|&s| s == tail[0]), "oscillates: {:?}", tail);
        let (min, max) = pools.bounds_of("share", requests);
        let settled = tail[0];
        prop_assert!(settled >= need.min(max), "settled {} below need {}", settled, need);
        let idle_limit = f64::from(need) / utilization + f64::from(step) + 1.0;
        prop_assert!(f64::from(settled) <= idle_limit.max(f64::from(min)), "settled {} far above need {}", settled, need);
    }
}
