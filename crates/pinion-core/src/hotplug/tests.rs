use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::rebuild::Conflict;
use crate::testing::{cpus, machine_8c2t, static_policy, without_cpus as without};

fn machine() -> Topology {
    machine_8c2t()
}

fn state(default: &str, assignments: &[(&str, &str)]) -> State {
    let mut state = State {
        default: cpus(default),
        ..State::default()
    };
    for (pod, list) in assignments {
        state.assign(pod, "main", cpus(list));
    }
    state
}

fn valid(followed: &Followed, policy: &Policy) {
    let mut started = followed.rebuilt.state.clone();
    assert_eq!(policy.start(&mut started), Ok(()), "{followed:?}");
    assert_eq!(started, followed.rebuilt.state);
}

#[test]
fn an_offline_cpu_is_replaced_by_a_free_one_and_nothing_else_moves() {
    let old = state("0,3-8,11-15", &[("pod-a", "1,9"), ("pod-b", "2,10")]);
    let before = machine().all_cpus().clone();
    let policy = policy_on(
        &static_policy(machine(), "0"),
        &without(&machine(), &cpus("9")),
    )
    .expect("policy");
    let followed = follow_online(&old, &PodCpus::new(), &before, &policy);
    valid(&followed, &policy);
    assert_eq!(followed.gone, cpus("9"));
    assert!(followed.back.is_empty());
    let a = &followed.rebuilt.outcomes[0];
    assert_eq!(a.pod, "pod-a");
    assert_eq!(a.cpus.len(), 2, "{a:?}");
    assert!(a.cpus.contains(1), "keeps its online cpu: {a:?}");
    assert!(!a.cpus.contains(9));
    let added = a.cpus.difference(&cpus("1"));
    assert_eq!(
        a.conflicts,
        [
            Conflict::CpusGone { cpus: cpus("9") },
            Conflict::Replaced { added }
        ]
    );
    let b = &followed.rebuilt.outcomes[1];
    assert!(b.unmoved(), "{b:?}");
    assert_eq!(
        followed.rebuilt.state.assignment("pod-b", "main"),
        Some(&cpus("2,10"))
    );
}

#[test]
fn without_a_free_cpu_the_workload_keeps_what_is_left() {
    // Everything but the reserved CPU 0 is held (admission allows that: the
    // reserved CPU keeps the shared pool), so no free CPU replaces 15.
    let old = state("0", &[("pod-a", "1-8"), ("pod-b", "9-15")]);
    let before = machine().all_cpus().clone();
    let policy = policy_on(
        &static_policy(machine(), "0"),
        &without(&machine(), &cpus("15")),
    )
    .expect("policy");
    let followed = follow_online(&old, &PodCpus::new(), &before, &policy);
    valid(&followed, &policy);
    let b = &followed.rebuilt.outcomes[1];
    assert_eq!(b.cpus, cpus("9-14"));
    assert_eq!(
        b.conflicts.last(),
        Some(&Conflict::Short { asked: 7, kept: 6 })
    );
    assert!(followed.rebuilt.outcomes[0].unmoved());
}

#[test]
fn a_cpu_back_online_joins_the_shared_pool() {
    let offline = cpus("9");
    let smaller = without(&machine(), &offline);
    let old = state("0,3-8,11-15", &[("pod-a", "1"), ("pod-b", "2,10")]);
    let policy = policy_on(&static_policy(smaller.clone(), "0"), &machine()).expect("policy");
    let followed = follow_online(&old, &PodCpus::new(), smaller.all_cpus(), &policy);
    valid(&followed, &policy);
    assert_eq!(followed.back, offline);
    assert!(followed.rebuilt.outcomes.iter().all(|o| o.unmoved()));
    assert_eq!(followed.rebuilt.state.default, cpus("0,3-9,11-15"));
}

#[test]
fn reserved_cpus_stay_reserved_minus_the_offline_ones() {
    let policy = static_policy(machine(), "0,8");
    let moved = policy_on(&policy, &without(&machine(), &cpus("8"))).expect("policy");
    assert_eq!(moved.reserved(), cpus("0"));
    assert!(matches!(
        policy_on(&Policy::None, &machine()),
        Ok(Policy::None)
    ));
}

/// Found from outside (thirty-third session): with every reserved CPU
/// offline the policy had no reservation left, an admission could take the
/// last CPU of the shared pool, and the engine then gave the shared pool
/// every CPU — the new run's exclusive CPU included.
#[test]
fn regression_with_every_reserved_cpu_offline_the_last_shared_cpu_stays_shared() {
    let reserved = cpus("0,8");
    let offline = without(&machine(), &reserved);
    let mut policy = policy_on(&static_policy(machine(), "0,8"), &offline).expect("policy");
    assert!(policy.reserved().is_empty());
    // Everything else is held; one CPU is left in the shared pool.
    let mut held = state("15", &[("pod-a", "1-7,9-14")]);
    policy.start(&mut held).expect("valid");
    let request = crate::policy::ContainerRequest {
        pod: "pod-b",
        container: "main",
        cpus: 1,
        kind: crate::policy::ContainerKind::App,
        ask: crate::policy::CpuAsk::default(),
    };
    let err = policy
        .allocate(&mut held, &request, None)
        .expect_err("the last shared cpu is not handed out");
    assert!(err.to_string().contains("reserved cpus 0,8"), "{err}");
    assert_eq!(held.default, cpus("15"), "nothing taken");
}

/// Found from outside (thirty-third session): a reserved CPU that went
/// offline and came back was no longer reserved (the reservation was cut
/// to the online CPUs for good) and could be handed out exclusively.
#[test]
fn regression_a_reserved_cpu_back_online_is_reserved_again() {
    let offline = without(&machine(), &cpus("8"));
    let shrunk = policy_on(&static_policy(machine(), "0,8"), &offline).expect("policy");
    assert_eq!(shrunk.reserved(), cpus("0"));
    let back = policy_on(&shrunk, &machine()).expect("policy");
    assert_eq!(back.reserved(), cpus("0,8"));
    // Twice offline and back: still the CPUs chosen at start.
    let again =
        policy_on(&policy_on(&back, &offline).expect("policy"), &machine()).expect("policy");
    assert_eq!(again.reserved(), cpus("0,8"));
}

fn arb_case() -> impl Strategy<Value = (State, CpuSet)> {
    // Owner per CPU 1..16: 0-1 shared, 2.. pod-N. CPU 0 is reserved.
    (
        proptest::collection::vec(0u8..6, 15),
        proptest::collection::vec(any::<bool>(), 15),
    )
        .prop_filter_map("shared pool not empty", |(owners, off)| {
            let mut state = State {
                default: cpus("0"),
                ..State::default()
            };
            let mut held: BTreeMap<u8, CpuSet> = BTreeMap::new();
            for (cpu, owner) in (1u32..16).zip(&owners) {
                if *owner < 2 {
                    state.default.insert(cpu);
                } else {
                    held.entry(*owner).or_default().insert(cpu);
                }
            }
            for (owner, set) in held {
                state.assign(&format!("pod-{owner}"), "main", set);
            }
            let offline: CpuSet = (1u32..16)
                .zip(&off)
                .filter(|(_, o)| **o)
                .map(|(c, _)| c)
                .collect();
            (state.default.len() > 1).then_some((state, offline))
        })
}

proptest! {
    /// Whatever goes offline: the result starts under the new policy, no
    /// CPU is handed out twice, every CPU is online, a workload keeps every
    /// online CPU it had (but one, when the shared pool would be empty) and
    /// never gets more new CPUs than it lost to the offline ones.
    #[test]
    fn only_the_offline_cpus_are_replaced((old, offline) in arb_case()) {
        let base = static_policy(machine(), "0");
        let Ok(policy) = policy_on(&base, &without(&machine(), &offline)) else {
            return Ok(());
        };
        let followed = follow_online(&old, &PodCpus::new(), machine().all_cpus(), &policy);
        let mut started = followed.rebuilt.state.clone();
        prop_assert_eq!(policy.start(&mut started), Ok(()));
        let online = policy.topology().expect("static").all_cpus().clone();
        let mut seen = CpuSet::new();
        for outcome in &followed.rebuilt.outcomes {
            prop_assert!(outcome.cpus.is_subset(&online));
            prop_assert!(seen.intersection(&outcome.cpus).is_empty(), "handed out twice: {:?}", outcome);
            seen.union_with(&outcome.cpus);
            let lost_online = outcome.observed.intersection(&online).difference(&outcome.cpus);
            let emptied = outcome.conflicts.iter().any(|c| matches!(c, Conflict::SharedPoolWouldBeEmpty { .. }));
            prop_assert!(lost_online.is_empty() || (emptied && lost_online.len() == 1), "{:?}", outcome);
            let added = outcome.cpus.difference(&outcome.observed);
            prop_assert!(added.len() <= outcome.observed.difference(&online).len(), "{:?}", outcome);
            if outcome.observed.is_subset(&online) && !emptied {
                prop_assert!(outcome.unmoved());
            }
        }
    }
}
