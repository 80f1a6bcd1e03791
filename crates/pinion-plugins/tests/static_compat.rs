//! A Guaranteed pod with integer CPUs and no katalyst annotation gets from
//! the CPU plugin exactly the CPUs the built-in static policy gives it: the
//! same sequence of admissions and removals, with and without NUMA hints,
//! on the same machine, through the engine and through the plugin — with
//! shared-pool pods on the plugin's side that the engine never sees.

mod common;

use common::Pod;
use pinion_core::engine::Engine;
use pinion_core::policy::{
    ContainerKind, ContainerRequest, Policy, Reservation, StaticPolicy, StaticPolicyOptions,
};
use pinion_core::state::State;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::{CpuSet, Topology};
use pinion_plugins::cpu::{CpuPlugin, CpuPluginConfig};
use pinion_plugins::ResourcePlugin;

fn machine() -> Topology {
    synthetic(Shape {
        sockets: 2,
        numa_per_socket: 2,
        cores_per_socket: 8,
        threads_per_core: 2,
        cores_per_uncore: 4,
    })
}

/// xorshift64: a fixed, dependency-free sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let bound = u64::try_from(bound).unwrap_or(1).max(1);
        usize::try_from(self.0 % bound).unwrap_or(0)
    }
}

fn run(seed: u64, options: StaticPolicyOptions) {
    let topology = machine();
    let reservation = Reservation {
        count: 2,
        cpus: CpuSet::new(),
    };
    let policy = StaticPolicy::new(topology.clone(), options, &reservation).expect("policy");
    let mut engine = Engine::new(
        &topology,
        Policy::Static(Box::new(policy)),
        State::default(),
    );
    engine.start().expect("start");
    let config = CpuPluginConfig {
        reserved_cpus: 2,
        static_policy_options: options,
        ..CpuPluginConfig::default()
    };
    let mut plugin = CpuPlugin::open(topology.clone(), &config, None).expect("plugin");
    assert_eq!(plugin.reserved(), &engine.policy().reserved());
    let mut rng = Rng(seed);
    let mut live: Vec<String> = Vec::new();
    let mut matched = 0;
    for step in 0..300 {
        if !live.is_empty() && rng.next(3) == 0 {
            let uid = live.remove(rng.next(live.len()));
            engine.remove(&uid, "container0");
            plugin.remove_pod(&uid).expect("remove");
            continue;
        }
        let pod = Pod::new(&format!("p{step}")).guaranteed();
        let cpus = [1, 2, 3, 4, 6, 8][rng.next(6)];
        let nodes: Option<Vec<u32>> = match rng.next(4) {
            0 => Some(vec![u32::try_from(rng.next(4)).unwrap_or(0)]),
            1 => Some(vec![0, 1]),
            _ => None,
        };
        let request = ContainerRequest {
            pod: &pod.uid,
            container: "container0",
            cpus,
            kind: ContainerKind::App,
            ask: Default::default(),
        };
        // The plugin keeps its shared pools' requests and reclaim's minimum
        // (the one documented difference): stay clear of that edge here;
        // `the_plugin_keeps_room_for_its_pools` covers it.
        let free = engine
            .state()
            .default
            .difference(&engine.policy().reserved())
            .len();
        let pools: usize = plugin
            .pools()
            .entries()
            .values()
            .map(|e| {
                usize::try_from(pinion_core::pools::request_cpus(e.requests_milli))
                    .unwrap_or(usize::MAX)
            })
            .sum();
        if cpus + pools + 1 > free {
            continue;
        }
        let expected = engine.admit(&request, nodes.as_deref());
        let hint: Option<Vec<u64>> = nodes
            .as_ref()
            .map(|n| n.iter().map(|&id| u64::from(id)).collect());
        let got = plugin.allocate(&pod.request("cpu", cpus as f64, hint.as_deref()));
        match (expected, got) {
            (Ok(Some(cpus)), Ok(Some(answer))) => {
                assert_eq!(
                    answer["cpu"].allocation_result,
                    cpus.to_string(),
                    "seed {seed} step {step}"
                );
                live.push(pod.uid.clone());
                matched += 1;
            }
            (Err(_), Err(_)) => {}
            (expected, got) => {
                panic!("seed {seed} step {step}: engine {expected:?}, plugin {got:?}")
            }
        }
        // A shared pod now and then: the plugin's pools, invisible to the engine.
        if rng.next(4) == 0 {
            let shared = Pod::new(&format!("s{step}"));
            let _ = plugin.allocate(&shared.request("cpu", 0.1, None));
        }
        assert_eq!(
            plugin.state().exclusive.assignments,
            engine.state().assignments,
            "seed {seed} step {step}"
        );
    }
    assert!(
        matched >= 50,
        "seed {seed}: only {matched} exclusive admissions compared"
    );
}

#[test]
fn guaranteed_pods_without_annotations_get_the_static_policys_cpus() {
    for seed in [1, 7, 42, 1234] {
        run(seed, StaticPolicyOptions::default());
    }
}

/// The difference: the plugin refuses exclusive CPUs that would leave its
/// shared pools less than their requests or reclaim less than its minimum.
#[test]
fn the_plugin_keeps_room_for_its_pools() {
    let topology = machine();
    let config = CpuPluginConfig {
        reserved_cpus: 2,
        ..CpuPluginConfig::default()
    };
    let mut plugin = CpuPlugin::open(topology, &config, None).expect("plugin");
    plugin
        .allocate(&Pod::new("web").request("cpu", 3.5, None))
        .expect("shared pod");
    // 30 CPUs outside the reservation: 4 for the share pool, 1 for reclaim.
    let err = plugin
        .allocate(&Pod::new("big").guaranteed().request("cpu", 26.0, None))
        .expect_err("would squeeze the pools");
    assert!(
        matches!(err, pinion_plugins::PluginError::Pools(_)),
        "{err}"
    );
    let ok = plugin
        .allocate(&Pod::new("fits").guaranteed().request("cpu", 25.0, None))
        .expect("fits")
        .expect("answer");
    assert_eq!(ok["cpu"].allocated_quantity, 25.0);
}

#[test]
fn the_same_holds_with_static_policy_options() {
    let options = StaticPolicyOptions {
        distribute_cpus_across_numa: true,
        ..StaticPolicyOptions::default()
    };
    for seed in [3, 99] {
        run(seed, options);
    }
}
