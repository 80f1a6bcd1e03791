//! Property test: after any sequence of admissions and removals, on random
//! machines and option sets, the state invariants hold, no CPU is lost, and
//! removing everything gives every CPU back to the shared pool.

use proptest::prelude::*;

use pinion_core::engine::Engine;
use pinion_core::policy::{
    ContainerKind, ContainerRequest, Policy, Reservation, StaticPolicy, StaticPolicyOptions,
};
use pinion_core::state::State;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::CpuSet;

#[derive(Debug, Clone)]
enum Action {
    Add {
        pod: u8,
        container: u8,
        cpus: usize,
        kind: ContainerKind,
    },
    Remove {
        pod: u8,
        container: u8,
    },
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        1u32..=2,
        1u32..=2,
        1u32..=3,
        prop_oneof![Just(1u32), Just(2), Just(4)],
        0u32..=2,
    )
        .prop_map(
            |(sockets, numa_per_socket, cores_factor, threads_per_core, uncore_split)| {
                let cores_per_socket = numa_per_socket * cores_factor * 2;
                Shape {
                    sockets,
                    numa_per_socket,
                    cores_per_socket,
                    threads_per_core,
                    cores_per_uncore: if uncore_split == 0 {
                        0
                    } else {
                        cores_per_socket / 2
                    },
                }
            },
        )
}

/// Valid option combinations (kubelet rejects the incompatible pairs).
fn options() -> impl Strategy<Value = StaticPolicyOptions> {
    (0usize..6, any::<bool>(), any::<bool>()).prop_map(|(combo, full, strict)| {
        let mut o = StaticPolicyOptions {
            strict_cpu_reservation: strict,
            ..Default::default()
        };
        match combo {
            0 => o.full_pcpus_only = full,
            1 => {
                o.distribute_cpus_across_numa = true;
                o.full_pcpus_only = full;
            }
            2 => o.distribute_cpus_across_cores = true,
            3 => {
                o.prefer_align_cpus_by_uncorecache = true;
                o.full_pcpus_only = full;
            }
            4 => {
                o.distribute_cpus_across_numa = true;
                o.align_by_socket = true;
            }
            _ => o.align_by_socket = true,
        }
        o
    })
}

fn action() -> impl Strategy<Value = Action> {
    let kind = prop_oneof![
        Just(ContainerKind::App),
        Just(ContainerKind::Init),
        Just(ContainerKind::Sidecar)
    ];
    prop_oneof![
        3 => (0u8..4, 0u8..3, 0usize..9, kind).prop_map(|(pod, container, cpus, kind)| Action::Add { pod, container, cpus, kind }),
        1 => (0u8..4, 0u8..3).prop_map(|(pod, container)| Action::Remove { pod, container }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_and_no_cpu_is_lost(
        shape in shape(),
        options in options(),
        reserved in 1usize..4,
        actions in prop::collection::vec(action(), 1..40),
    ) {
        let topology = synthetic(shape);
        let Ok(policy) = StaticPolicy::new(topology.clone(), options, &Reservation { count: reserved, cpus: CpuSet::new() }) else {
            return Ok(());
        };
        let mut engine = Engine::new(Policy::Static(Box::new(policy)), State::default());
        engine.start().expect("an empty state starts");
        let mut held = Vec::new();
        for action in &actions {
            match *action {
                Action::Add { pod, container, cpus, kind } => {
                    let (pod, container) = (format!("pod{pod}"), format!("c{container}"));
                    let request = ContainerRequest { pod: &pod, container: &container, cpus, kind };
                    let before = engine.state().clone();
                    match engine.admit(&request, None) {
                        Ok(Some(got)) => {
                            // Admission is idempotent: a known container keeps its CPUs.
                            match before.assignment(&pod, &container) {
                                Some(existing) => prop_assert_eq!(&got, existing),
                                None => prop_assert_eq!(got.len(), cpus),
                            }
                            held.push((pod, container));
                        }
                        Ok(None) => prop_assert_eq!(cpus, 0),
                        Err(_) => prop_assert_eq!(engine.state(), &before, "a failed admission changed the state"),
                    }
                }
                Action::Remove { pod, container } => {
                    engine.remove(&format!("pod{pod}"), &format!("c{container}"));
                }
            }
            prop_assert_eq!(engine.check_invariants(), Ok(()));
        }
        for (pod, container) in &held {
            engine.remove(pod, container);
        }
        prop_assert!(engine.state().assignments.is_empty());
        let Policy::Static(policy) = engine.policy() else { unreachable!() };
        prop_assert_eq!(&engine.state().default, &policy.pool_cpus());
    }
}
