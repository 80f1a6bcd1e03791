//! Property test: after any sequence of admissions, in-place resizes and
//! removals, on random
//! machines (regular ones, and hybrid ones whose P-cores have 2 threads
//! beside single-thread E-cores) and option sets, the state invariants
//! hold — in particular no CPU is ever held by two pods or handed out while
//! reserved — no CPU is lost, and removing everything gives every CPU back
//! to the shared pool.

use proptest::prelude::*;

use std::collections::BTreeMap;

use pinion_core::engine::Engine;
use pinion_core::pod::{Container, Pod, RestartPolicy};
use pinion_core::policy::{
    ContainerKind, ContainerRequest, Features, Policy, Reservation, StaticPolicy,
    StaticPolicyOptions,
};
use pinion_core::state::State;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::Quantity;
use pinion_core::{CpuInfo, CpuSet, Topology, TopologySpec};

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
    /// In-place resize to `cpus` exclusive CPUs.
    Resize {
        pod: u8,
        container: u8,
        cpus: usize,
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
        2 => (0u8..4, 0u8..3, 1usize..9).prop_map(|(pod, container, cpus)| Action::Resize { pod, container, cpus }),
    ]
}

/// Runs `actions` on an engine over `topology` and checks the invariants
/// after every step.
fn check_sequence(
    topology: &Topology,
    options: StaticPolicyOptions,
    reserved: usize,
    actions: &[Action],
) -> Result<(), TestCaseError> {
    let Ok(policy) = StaticPolicy::new(
        topology.clone(),
        options,
        &Reservation {
            count: reserved,
            cpus: CpuSet::new(),
        },
    ) else {
        return Ok(());
    };
    let policy = policy.with_features(Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    });
    let mut engine = Engine::new(topology, Policy::Static(Box::new(policy)), State::default());
    let mut kinds: BTreeMap<(String, String), ContainerKind> = BTreeMap::new();
    engine.start().expect("an empty state starts");
    let mut held = Vec::new();
    for action in actions {
        match *action {
            Action::Add {
                pod,
                container,
                cpus,
                kind,
            } => {
                let (pod, container) = (format!("pod{pod}"), format!("c{container}"));
                let request = ContainerRequest {
                    pod: &pod,
                    container: &container,
                    cpus,
                    kind,
                    ask: Default::default(),
                };
                let before = engine.state().clone();
                match engine.admit(&request, None) {
                    Ok(Some(got)) => {
                        // Admission is idempotent: a known container keeps its CPUs.
                        match before.assignment(&pod, &container) {
                            Some(existing) => prop_assert_eq!(&got, existing),
                            None => prop_assert_eq!(got.len(), cpus),
                        }
                        kinds
                            .entry((pod.clone(), container.clone()))
                            .or_insert(kind);
                        held.push((pod, container));
                    }
                    Ok(None) => prop_assert_eq!(cpus, 0),
                    Err(_) => prop_assert_eq!(
                        engine.state(),
                        &before,
                        "a failed admission changed the state"
                    ),
                }
            }
            Action::Remove { pod, container } => {
                let (pod, container) = (format!("pod{pod}"), format!("c{container}"));
                kinds.remove(&(pod.clone(), container.clone()));
                engine.remove(&pod, &container);
            }
            Action::Resize {
                pod,
                container,
                cpus,
            } => {
                let (pod, container) = (format!("pod{pod}"), format!("c{container}"));
                let before = engine.state().clone();
                let current = before.assignment(&pod, &container).cloned();
                let kind = kinds
                    .get(&(pod.clone(), container.clone()))
                    .copied()
                    .unwrap_or(ContainerKind::App);
                let spec = one_container_pod(&pod, &container, kind, current.as_ref());
                let new = Quantity::from_units(cpus as u64);
                match engine.resize_container(&spec, &container, &new) {
                    Ok(Some(got)) => {
                        prop_assert_eq!(got.len(), cpus);
                        let current = current.expect("only exclusive containers resize");
                        if cpus >= current.len() {
                            prop_assert!(current.is_subset(&got), "a grow moved CPUs");
                        } else {
                            prop_assert!(got.is_subset(&current), "a shrink moved CPUs");
                        }
                    }
                    Ok(None) => prop_assert!(current.is_none()),
                    Err(_) => prop_assert_eq!(
                        engine.state(),
                        &before,
                        "a failed resize changed the state"
                    ),
                }
            }
        }
        prop_assert_eq!(engine.check_invariants(), Ok(()));
    }
    for (pod, container) in &held {
        engine.remove(pod, container);
    }
    prop_assert!(engine.state().assignments.is_empty());
    let Policy::Static(policy) = engine.policy() else {
        unreachable!()
    };
    prop_assert_eq!(&engine.state().default, &policy.pool_cpus());
    Ok(())
}

/// A pod holding just `container` (of `kind`) with the CPU count it holds
/// (half a CPU when it holds none).
fn one_container_pod(
    pod: &str,
    container: &str,
    kind: ContainerKind,
    current: Option<&CpuSet>,
) -> Pod {
    let cpu = match current {
        Some(cpus) => Quantity::from_units(cpus.len() as u64),
        None => Quantity::parse("500m").expect("quantity"),
    };
    let memory = Quantity::parse("64Mi").expect("quantity");
    let spec = Container {
        name: container.to_owned(),
        cpu_request: Some(cpu.clone()),
        cpu_limit: Some(cpu),
        memory_request: Some(memory.clone()),
        memory_limit: Some(memory),
        restart_policy: (kind == ContainerKind::Sidecar).then_some(RestartPolicy::Always),
        ..Container::default()
    };
    let mut pod = Pod {
        uid: pod.to_owned(),
        ..Pod::default()
    };
    match kind {
        ContainerKind::App => pod.containers.push(spec),
        ContainerKind::Init | ContainerKind::Sidecar => pod.init_containers.push(spec),
    }
    pod
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
        check_sequence(&synthetic(shape), options, reserved, &actions)?;
    }
}

/// A hybrid machine: per socket `p` P-cores with 2 threads and `e`
/// single-thread E-cores; `adjacent` numbers P-core siblings 2k, 2k+1
/// (Intel hybrid parts), otherwise k and k + (number of P-cores).
fn hybrid() -> impl Strategy<Value = Topology> {
    (1u32..=2, 1u32..=4, 0u32..=4, any::<bool>(), any::<bool>()).prop_map(
        |(sockets, p, e, adjacent, e_first)| {
            let mut cpus = Vec::new();
            let mut next = 0u32;
            for socket in 0..sockets {
                let mut p_cores: Vec<Vec<u32>> = Vec::new();
                let mut e_cores: Vec<Vec<u32>> = Vec::new();
                let mut take = |n: u32| {
                    let ids: Vec<u32> = (next..next + n).collect();
                    next += n;
                    ids
                };
                let (p_ids, e_ids) = if e_first {
                    let e_ids = take(e);
                    (take(2 * p), e_ids)
                } else {
                    let p_ids = take(2 * p);
                    (p_ids, take(e))
                };
                for k in 0..p as usize {
                    let pair = if adjacent {
                        vec![p_ids[2 * k], p_ids[2 * k + 1]]
                    } else {
                        vec![p_ids[k], p_ids[k + p as usize]]
                    };
                    p_cores.push(pair);
                }
                e_cores.extend(e_ids.iter().map(|&id| vec![id]));
                for threads in p_cores.iter().chain(&e_cores) {
                    let core = threads[0];
                    for &id in threads {
                        cpus.push(CpuInfo {
                            id,
                            core,
                            socket,
                            numa: socket,
                            uncore: socket,
                            llc: None,
                            die: None,
                            core_type: None,
                        });
                    }
                }
            }
            Topology::new(TopologySpec {
                cpus,
                ..TopologySpec::default()
            })
            .expect("generated hybrid machine is valid")
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Regression guard for kubernetes/kubernetes#140495 (kubelet handed out
    /// a reserved CPU on a hybrid machine): on random hybrid machines no
    /// admission sequence ever breaks the invariants.
    #[test]
    fn hybrid_machines_never_double_allocate(
        topology in hybrid(),
        options in options(),
        reserved in 1usize..4,
        actions in prop::collection::vec(action(), 1..40),
    ) {
        check_sequence(&topology, options, reserved, &actions)?;
    }
}
