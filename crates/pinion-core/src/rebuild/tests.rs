use proptest::prelude::*;

use super::*;
use crate::policy::{
    ContainerKind, ContainerRequest, Reservation, StaticPolicy, StaticPolicyOptions,
};
use crate::state::PodCpus;
use crate::testing::{
    cpus, machine_8c2t, small_machine, static_policy as policy_on, strict_static_policy,
    without_cpus as without,
};
use crate::topology::Topology;

fn machine() -> Topology {
    machine_8c2t()
}

fn policy(reserved: &str) -> Policy {
    policy_on(machine(), reserved)
}

fn claim(pod: &str, list: &str, exclusive: usize) -> Claim {
    Claim {
        pod: pod.to_string(),
        container: "main".to_string(),
        cpus: cpus(list),
        exclusive,
    }
}

fn started(rebuilt: &Rebuilt, policy: &Policy) {
    let mut state = rebuilt.state.clone();
    assert_eq!(policy.start(&mut state), Ok(()), "{rebuilt:?}");
    assert_eq!(state, rebuilt.state, "the policy changed nothing");
}

#[test]
fn workloads_without_conflict_keep_exactly_their_cpus() {
    let policy = policy("0");
    let claims = [
        claim("pod-b", "2,10", 2),
        claim("pod-a", "1", 1),
        claim("pod-c", "1-7,9-15", 0),
    ];
    let rebuilt = rebuild(&claims, &policy);
    assert!(rebuilt.outcomes.iter().all(Outcome::unmoved), "{rebuilt:?}");
    assert_eq!(rebuilt.state.assignment("pod-a", "main"), Some(&cpus("1")));
    assert_eq!(
        rebuilt.state.assignment("pod-b", "main"),
        Some(&cpus("2,10"))
    );
    assert_eq!(rebuilt.state.assignment("pod-c", "main"), None);
    assert_eq!(rebuilt.state.default, cpus("0,3-9,11-15"));
    started(&rebuilt, &policy);
}

#[test]
fn the_earlier_pod_keeps_a_doubly_claimed_cpu_and_the_later_one_is_topped_up() {
    let policy = policy("0");
    let rebuilt = rebuild(
        &[claim("pod-b", "2-3", 2), claim("pod-a", "1-2", 2)],
        &policy,
    );
    assert_eq!(
        rebuilt.state.assignment("pod-a", "main"),
        Some(&cpus("1-2"))
    );
    let b = &rebuilt.outcomes[1];
    assert_eq!(
        b.conflicts[0],
        Conflict::CpusTaken {
            cpus: cpus("2"),
            by_pod: "pod-a".into(),
            by_container: "main".into()
        }
    );
    assert!(b.cpus.contains(3), "pod-b keeps its uncontested cpu: {b:?}");
    assert_eq!(b.cpus.len(), 2);
    assert!(matches!(b.conflicts[1], Conflict::Replaced { .. }), "{b:?}");
    started(&rebuilt, &policy);
}

#[test]
fn containers_of_one_pod_may_share() {
    let policy = policy("0");
    let claims = [
        Claim {
            container: "init".into(),
            ..claim("pod-a", "1-2", 2)
        },
        claim("pod-a", "1-2", 2),
    ];
    let rebuilt = rebuild(&claims, &policy);
    assert!(rebuilt.outcomes.iter().all(Outcome::unmoved), "{rebuilt:?}");
}

#[test]
fn offline_and_reserved_cpus_are_taken_away_and_replaced() {
    // The machine lost cores 6 and 7 (CPUs 6-7, 14-15).
    let mut spec = machine().spec().clone();
    spec.cpus.retain(|c| c.core < 6);
    let policy = policy_on(Topology::new(spec).expect("valid"), "0,8");
    let rebuilt = rebuild(
        &[claim("pod-a", "6,14", 2), claim("pod-b", "8-9", 2)],
        &policy,
    );
    let a = &rebuilt.outcomes[0];
    assert_eq!(a.conflicts[0], Conflict::CpusGone { cpus: cpus("6,14") });
    assert_eq!(a.cpus.len(), 2);
    let b = &rebuilt.outcomes[1];
    assert_eq!(b.conflicts[0], Conflict::CpusReserved { cpus: cpus("8") });
    assert!(b.cpus.contains(9) && b.cpus.len() == 2, "{b:?}");
    started(&rebuilt, &policy);
}

#[test]
fn more_cpus_than_asked_are_trimmed_by_the_policy() {
    let policy = policy("0");
    let rebuilt = rebuild(&[claim("pod-a", "1-7,9-15", 1)], &policy);
    let a = &rebuilt.outcomes[0];
    assert_eq!(a.cpus.len(), 1);
    assert!(matches!(a.conflicts[0], Conflict::Trimmed { .. }), "{a:?}");
    started(&rebuilt, &policy);
}

#[test]
fn the_shared_pool_is_never_emptied_and_a_short_workload_keeps_what_it_has() {
    // Strict: the reserved CPU is not in the shared pool, so one of the
    // claimed CPUs must stay there.
    let policy = strict_static_policy(machine(), "0");
    let rebuilt = rebuild(
        &[claim("pod-a", "1-15", 15), claim("pod-b", "3", 1)],
        &policy,
    );
    let a = &rebuilt.outcomes[0];
    assert_eq!(a.cpus, cpus("1-14"), "{a:?}");
    assert!(a
        .conflicts
        .contains(&Conflict::SharedPoolWouldBeEmpty { cpus: cpus("15") }));
    let b = &rebuilt.outcomes[1];
    assert!(b.cpus.is_empty(), "{b:?}");
    assert!(b.conflicts.contains(&Conflict::Short { asked: 1, kept: 0 }));
    assert!(a.conflicts.contains(&Conflict::Short {
        asked: 15,
        kept: 14
    }));
    started(&rebuilt, &policy);
}

/// Issue 27, item 3: on a 2-CPU machine with CPU 0 reserved, admission
/// gives `--cpus 1` CPU 1 and leaves the shared pool `{0}`; the rebuild
/// counted the shared pool without the reserved CPU and moved the run from
/// 1 to 0-1 ("the shared pool would be empty").
#[test]
fn regression_rebuild_keeps_the_last_unreserved_cpu_admission_gave() {
    let policy = policy_on(small_machine(2, 1), "0");
    let rebuilt = rebuild(&[claim("pinion-run-a", "1", 1)], &policy);
    assert!(rebuilt.outcomes[0].unmoved(), "{rebuilt:?}");
    assert_eq!(
        rebuilt.state.assignment("pinion-run-a", "main"),
        Some(&cpus("1"))
    );
    assert_eq!(rebuilt.state.default, cpus("0"));
    started(&rebuilt, &policy);
    // Not strict, the reserved CPU keeps the shared pool: a short workload
    // is topped up with the last free CPU too.
    let rebuilt = rebuild(&[claim("pinion-run-a", "0", 1)], &policy);
    assert_eq!(rebuilt.outcomes[0].cpus, cpus("1"), "{rebuilt:?}");
    started(&rebuilt, &policy);
}

/// A wider claim (a container on the whole shared pool that asked for 2
/// exclusive CPUs, as a runtime reports it after a lost checkpoint) earlier
/// in pod order used to be trimmed first and could take the CPUs of a
/// workload placed exactly: the exact claims are visited first now.
#[test]
fn regression_a_wide_claim_is_trimmed_around_exactly_placed_workloads() {
    let policy = policy("0");
    let rebuilt = rebuild(
        &[claim("pod-a", "1-15", 2), claim("pod-b", "1,9", 2)],
        &policy,
    );
    assert!(rebuilt.outcomes[1].unmoved(), "{rebuilt:?}");
    assert_eq!(
        rebuilt.state.assignment("pod-b", "main"),
        Some(&cpus("1,9"))
    );
    let a = rebuilt.state.assignment("pod-a", "main").expect("a");
    assert_eq!(a.len(), 2);
    assert!(a.intersection(&cpus("1,9")).is_empty(), "{a}");
    started(&rebuilt, &policy);
}

#[test]
fn under_policy_none_everything_is_shared() {
    let rebuilt = rebuild(&[claim("pod-a", "1", 1)], &Policy::None);
    assert_eq!(rebuilt.state, State::default());
    assert!(!rebuilt.outcomes[0].exclusive);
}

fn pods(sets: &[(&str, &str)]) -> PodCpus {
    sets.iter()
        .map(|(pod, list)| ((*pod).to_string(), cpus(list)))
        .collect()
}

/// The rebuilt state with its pod-level sets starts under `policy`, no set
/// is in the shared pool, and every container of a pod with a set is
/// inside it.
fn started_with_pods(rebuilt: &Rebuilt, policy: &Policy) {
    let pod_cpus = rebuilt.pod_cpus();
    let mut state = rebuilt.state.clone();
    assert_eq!(
        policy.start_with(&mut state, &pod_cpus),
        Ok(()),
        "{rebuilt:?}"
    );
    for (pod, set) in &pod_cpus {
        assert!(set.is_disjoint(&state.default), "{rebuilt:?}");
        for held in state
            .assignments
            .get(pod)
            .into_iter()
            .flatten()
            .map(|(_, c)| c)
        {
            assert!(held.is_subset(set), "{rebuilt:?}");
        }
    }
}

/// Found from outside (forty-third session): pod-level CPU sets
/// (`PodLevelResourceManagers`) were not claims of the rebuild. The CPUs of
/// a set no container held went to the shared pool — another pod's
/// container could keep them — and a container of the pod short of a CPU
/// was topped up outside its pod's set.
#[test]
fn regression_pod_level_cpu_sets_are_claims_of_their_pod() {
    let policy = policy("0");
    let rebuilt = rebuild_with_pods(
        &[claim("pod-a", "1-2", 2), claim("pod-b", "4-5", 2)],
        &pods(&[("pod-a", "1-4")]),
        &policy,
    );
    assert_eq!(rebuilt.pod_cpus(), pods(&[("pod-a", "1-4")]));
    assert!(rebuilt.pod_sets[0].conflicts.is_empty());
    assert!(rebuilt.outcomes[0].unmoved(), "{rebuilt:?}");
    let b = &rebuilt.outcomes[1];
    assert_eq!(
        b.conflicts[0],
        Conflict::InPodSet {
            cpus: cpus("4"),
            pod: "pod-a".to_string()
        }
    );
    assert_eq!(b.cpus.len(), 2);
    assert!(
        b.cpus.contains(5) && b.cpus.is_disjoint(&cpus("1-4")),
        "{b:?}"
    );
    assert!(rebuilt.state.default.is_disjoint(&cpus("1-4")));
    started_with_pods(&rebuilt, &policy);
}

#[test]
fn a_container_short_of_a_cpu_is_topped_up_inside_its_pods_set() {
    // CPU 2 went offline: pod-a's set (1-4) gets a free CPU in its place,
    // and a/main, short of one, gets it from the set — leaving one of the
    // CPUs its pod's shared containers ran on (3-4) to them.
    let policy = policy_on(without(&machine(), &cpus("2")), "0");
    let rebuilt = rebuild_with_pods(
        &[claim("pod-a", "1-2", 2)],
        &pods(&[("pod-a", "1-4")]),
        &policy,
    );
    let set = &rebuilt.pod_sets[0];
    assert_eq!(set.conflicts[0], Conflict::CpusGone { cpus: cpus("2") });
    assert!(matches!(&set.conflicts[1], Conflict::Replaced { added } if added.len() == 1));
    assert_eq!(set.cpus.len(), 4);
    let a = &rebuilt.outcomes[0];
    assert_eq!(a.cpus.len(), 2, "{a:?}");
    assert!(a.cpus.contains(1) && a.cpus.is_subset(&set.cpus), "{a:?}");
    assert!(!set.cpus.difference(&a.cpus).is_empty());
    started_with_pods(&rebuilt, &policy);
}

#[test]
fn a_container_outside_its_pods_set_loses_what_is_outside() {
    let policy = policy("0");
    let rebuilt = rebuild_with_pods(
        &[claim("pod-a", "1,5", 2)],
        &pods(&[("pod-a", "1-4")]),
        &policy,
    );
    let a = &rebuilt.outcomes[0];
    assert_eq!(a.conflicts[0], Conflict::OutsidePodSet { cpus: cpus("5") });
    assert_eq!(a.cpus.len(), 2);
    assert!(
        a.cpus.contains(1) && a.cpus.is_subset(&cpus("1-4")),
        "{a:?}"
    );
    assert!(rebuilt.state.default.contains(5));
    started_with_pods(&rebuilt, &policy);
}

#[test]
fn the_earlier_pods_set_keeps_a_cpu_two_sets_claim() {
    let policy = policy("0");
    let rebuilt = rebuild_with_pods(&[], &pods(&[("pod-a", "1-2"), ("pod-b", "2-3")]), &policy);
    assert_eq!(rebuilt.pod_sets[0].cpus, cpus("1-2"));
    let b = &rebuilt.pod_sets[1];
    assert_eq!(
        b.conflicts[0],
        Conflict::InPodSet {
            cpus: cpus("2"),
            pod: "pod-a".to_string()
        }
    );
    assert_eq!(b.cpus.len(), 2);
    assert!(b.cpus.contains(3) && !b.cpus.contains(2), "{b:?}");
    started_with_pods(&rebuilt, &policy);
}

fn arb_pod_sets() -> impl Strategy<Value = PodCpus> {
    let one = (0u8..6, proptest::collection::vec(0u32..20, 0..6));
    proptest::collection::vec(one, 0..4).prop_map(|items| {
        items
            .into_iter()
            .map(|(pod, ids)| (format!("pod-{pod}"), ids.into_iter().collect()))
            .collect()
    })
}

fn arb_claims() -> impl Strategy<Value = Vec<Claim>> {
    let one = (
        0u8..6,
        0u8..2,
        proptest::collection::vec(0u32..20, 0..6),
        0usize..4,
    );
    proptest::collection::vec(one, 0..8).prop_map(|items| {
        items
            .into_iter()
            .map(|(pod, container, ids, exclusive)| Claim {
                pod: format!("pod-{pod}"),
                container: format!("c{container}"),
                cpus: ids.into_iter().collect(),
                exclusive,
            })
            .collect()
    })
}

proptest! {
    /// The result always starts under the policy (kubelet's checks and
    /// the state invariants), whatever the claims.
    #[test]
    fn the_rebuilt_state_is_always_valid(claims in arb_claims(), reserved in 0u32..16) {
        let policy = policy(&reserved.to_string());
        let rebuilt = rebuild(&claims, &policy);
        let mut state = rebuilt.state.clone();
        prop_assert_eq!(policy.start(&mut state), Ok(()));
        if let Policy::Static(p) = &policy {
            prop_assert!(rebuilt.state.check_invariants(p.expected(p.topology().all_cpus())).is_ok());
        }
    }

    /// With pod-level sets too, whatever they and the claims are: the result
    /// starts with its sets, none of them in the shared pool, every
    /// container of a pod with a set inside it.
    #[test]
    fn the_rebuilt_state_with_pod_sets_is_always_valid(
        claims in arb_claims(),
        sets in arb_pod_sets(),
        reserved in 0u32..16,
    ) {
        let policy = policy(&reserved.to_string());
        let rebuilt = rebuild_with_pods(&claims, &sets, &policy);
        let pod_cpus = rebuilt.pod_cpus();
        let mut state = rebuilt.state.clone();
        prop_assert_eq!(policy.start_with(&mut state, &pod_cpus), Ok(()), "{:?}", rebuilt);
        if let Policy::Static(p) = &policy {
            let expected = crate::state::Expected {
                pod_cpus: &pod_cpus,
                ..p.expected(p.topology().all_cpus())
            };
            prop_assert!(rebuilt.state.check_invariants(expected).is_ok(), "{:?}", rebuilt);
        }
    }

    /// The order the node lists workloads in does not matter.
    #[test]
    fn the_rule_is_deterministic(claims in arb_claims()) {
        let policy = policy("0");
        let mut reversed = claims.clone();
        reversed.reverse();
        prop_assert_eq!(rebuild(&claims, &policy), rebuild(&reversed, &policy));
    }

    /// Nothing moves without a reported conflict, and a workload in
    /// conflict keeps every CPU no conflict names.
    #[test]
    fn only_what_a_conflict_names_moves(claims in arb_claims()) {
        let policy = policy("0");
        let rebuilt = rebuild(&claims, &policy);
        for outcome in rebuilt.outcomes.iter().filter(|o| o.exclusive) {
            let mut named = CpuSet::new();
            for conflict in &outcome.conflicts {
                match conflict {
                    Conflict::CpusGone { cpus }
                    | Conflict::CpusReserved { cpus }
                    | Conflict::CpusTaken { cpus, .. }
                    | Conflict::Trimmed { cpus }
                    | Conflict::SharedPoolWouldBeEmpty { cpus }
                    | Conflict::InPodSet { cpus, .. }
                    | Conflict::OutsidePodSet { cpus } => named.union_with(cpus),
                    Conflict::Replaced { .. } | Conflict::Short { .. } => {}
                }
            }
            prop_assert!(outcome.observed.difference(&named).is_subset(&outcome.cpus), "{:?}", outcome);
            if outcome.conflicts.is_empty() {
                prop_assert_eq!(&outcome.cpus, &outcome.observed);
            }
        }
    }
}

/// The policies of the small machines admission and rebuild must agree on:
/// 2, 3 and 4 CPUs (4 as 2 cores × 2 threads too), one or two CPUs
/// reserved, with and without `strict-cpu-reservation`.
fn small_policies() -> Vec<(String, Policy)> {
    let mut out = Vec::new();
    for (cores, threads) in [(2, 1), (3, 1), (4, 1), (2, 2)] {
        for reserved in ["0", "0-1"] {
            for strict in [false, true] {
                let options = StaticPolicyOptions {
                    strict_cpu_reservation: strict,
                    ..StaticPolicyOptions::default()
                };
                let reservation = Reservation {
                    count: cpus(reserved).len(),
                    cpus: cpus(reserved),
                };
                // A strict reservation of every CPU is refused.
                if let Ok(policy) =
                    StaticPolicy::new(small_machine(cores, threads), options, &reservation)
                {
                    let name = format!("{cores}x{threads} reserved {reserved} strict {strict}");
                    out.push((name, Policy::Static(Box::new(policy))));
                }
            }
        }
    }
    out
}

proptest! {
    /// Issue 27, item 3: whatever admission allowed, the rebuild keeps —
    /// every container the policy admitted, claimed with the CPUs it was
    /// given, keeps exactly them on every small machine.
    #[test]
    fn whatever_admission_allowed_the_rebuild_keeps(requests in proptest::collection::vec(0usize..4, 1..6)) {
        for (name, mut policy) in small_policies() {
            let mut state = State::default();
            prop_assert_eq!(policy.start(&mut state), Ok(()));
            let mut claims = Vec::new();
            for (i, &n) in requests.iter().enumerate() {
                let pod = format!("pod-{i}");
                let request = ContainerRequest { pod: &pod, container: "main", cpus: n, kind: ContainerKind::App, ask: Default::default() };
                if let Ok(Some(given)) = policy.allocate(&mut state, &request, None) {
                    claims.push(claim(&pod, &given.to_string(), n));
                }
            }
            let rebuilt = rebuild(&claims, &policy);
            prop_assert!(rebuilt.outcomes.iter().all(Outcome::unmoved), "{}: {:?}", name, rebuilt);
            prop_assert_eq!(&rebuilt.state, &state, "{}", name);
        }
    }
}
