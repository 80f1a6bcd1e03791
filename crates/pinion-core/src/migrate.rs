//! Recovery without draining the node: turn a state written under one
//! configuration (policy, reserved CPUs, online CPUs) into a valid state for
//! another, keeping every exclusive assignment that is still valid and
//! reporting the ones that cannot be kept.
//!
//! kubelet refuses to start in these situations ("please drain node and remove
//! policy state file"); `pinion state migrate` uses this module instead.

use crate::cpuset::CpuSet;
use crate::policy::Policy;
use crate::state::State;

/// Why an assignment could not be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropReason {
    /// The target policy (`none`) has no exclusive CPUs.
    PolicyHasNoExclusiveCpus,
    /// Some of its CPUs are no longer online.
    CpusOffline { cpus: CpuSet },
    /// Some of its CPUs are reserved under the new configuration.
    CpusReserved { cpus: CpuSet },
    /// Some of its CPUs are held by another pod kept before it.
    CpusTaken { cpus: CpuSet, by_pod: String },
    /// Keeping it would leave the shared pool empty.
    SharedPoolWouldBeEmpty,
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::PolicyHasNoExclusiveCpus => write!(f, "policy none has no exclusive cpus"),
            Self::CpusOffline { cpus } => write!(f, "cpus {cpus} are not online"),
            Self::CpusReserved { cpus } => write!(f, "cpus {cpus} are reserved now"),
            Self::CpusTaken { cpus, by_pod } => write!(f, "cpus {cpus} are held by pod {by_pod}"),
            Self::SharedPoolWouldBeEmpty => {
                write!(f, "keeping it would leave the shared pool empty")
            }
        }
    }
}

/// One assignment and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub pod: String,
    pub container: String,
    pub cpus: CpuSet,
    /// `None` = kept.
    pub dropped: Option<DropReason>,
}

/// Builds a state valid for `policy` from `old`: assignments are visited in
/// pod / container order and kept when all their CPUs are online, not
/// reserved, and not held by another pod already kept (an init container and
/// an app container of the same pod may share CPUs, as kubelet's reuse does).
/// The shared pool is every remaining CPU. For `none` the state is empty.
#[must_use]
pub fn migrate(old: &State, policy: &Policy) -> (State, Vec<Outcome>) {
    let Policy::Static(static_policy) = policy else {
        let outcomes = outcomes(old, |_, _| Some(DropReason::PolicyHasNoExclusiveCpus));
        return (State::default(), outcomes);
    };
    let pool = static_policy.pool_cpus();
    let reserved = static_policy.reserved();
    let mut new = State::default();
    let mut taken_by: Vec<(String, CpuSet)> = Vec::new();
    let outcomes = outcomes(old, |pod, cpus| {
        let offline = cpus.difference(&pool).difference(reserved);
        if !offline.is_empty() {
            return Some(DropReason::CpusOffline { cpus: offline });
        }
        let reserved_hit = cpus.intersection(reserved);
        if !reserved_hit.is_empty() {
            return Some(DropReason::CpusReserved { cpus: reserved_hit });
        }
        for (other, held) in &taken_by {
            let both = cpus.intersection(held);
            if other != pod && !both.is_empty() {
                return Some(DropReason::CpusTaken {
                    cpus: both,
                    by_pod: other.clone(),
                });
            }
        }
        let mut exclusive = cpus.clone();
        for (_, held) in &taken_by {
            exclusive.union_with(held);
        }
        if pool.difference(&exclusive).is_empty() {
            return Some(DropReason::SharedPoolWouldBeEmpty);
        }
        taken_by.push((pod.to_string(), cpus.clone()));
        None
    });
    for outcome in outcomes.iter().filter(|o| o.dropped.is_none()) {
        new.assign(&outcome.pod, &outcome.container, outcome.cpus.clone());
    }
    new.default = pool.difference(&new.exclusive_cpus());
    (new, outcomes)
}

fn outcomes(
    old: &State,
    mut decide: impl FnMut(&str, &CpuSet) -> Option<DropReason>,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    for (pod, containers) in &old.assignments {
        for (container, cpus) in containers {
            let dropped = decide(pod, cpus);
            out.push(Outcome {
                pod: pod.clone(),
                container: container.clone(),
                cpus: cpus.clone(),
                dropped,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Reservation, StaticPolicy, StaticPolicyOptions};
    use crate::topology::{synthetic, Shape, Topology};

    fn list(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    /// 8 cores × 2 threads: core n = CPUs n and n+8.
    fn machine() -> Topology {
        synthetic(Shape {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 8,
            threads_per_core: 2,
            cores_per_uncore: 0,
        })
    }

    fn policy(topology: Topology, reserved: &str, strict: bool) -> Policy {
        let options = StaticPolicyOptions {
            strict_cpu_reservation: strict,
            ..Default::default()
        };
        let cpus = list(reserved);
        let reservation = Reservation {
            count: cpus.len(),
            cpus,
        };
        Policy::Static(Box::new(
            StaticPolicy::new(topology, options, &reservation).expect("policy"),
        ))
    }

    fn old_state() -> State {
        let mut state = State {
            default: list("0-1,6-9,14-15"),
            ..State::default()
        };
        state.assign("pod-a", "app", list("2-3,10-11"));
        state.assign("pod-b", "db", list("4-5,12-13"));
        state
    }

    #[test]
    fn valid_assignments_survive_a_reserved_change() {
        let policy = policy(machine(), "0-1,8-9", false);
        let (new, outcomes) = migrate(&old_state(), &policy);
        assert!(outcomes.iter().all(|o| o.dropped.is_none()), "{outcomes:?}");
        assert_eq!(new.default, list("0-1,6-9,14-15"));
        assert_eq!(new.assignment("pod-b", "db"), Some(&list("4-5,12-13")));
        let mut started = new.clone();
        assert_eq!(policy.start(&mut started), Ok(()));
    }

    #[test]
    fn assignment_on_newly_reserved_cpus_is_dropped_and_named() {
        let policy = policy(machine(), "2", false);
        let (new, outcomes) = migrate(&old_state(), &policy);
        assert_eq!(
            outcomes[0].dropped,
            Some(DropReason::CpusReserved { cpus: list("2") })
        );
        assert_eq!(outcomes[1].dropped, None);
        assert_eq!(new.default, list("0-3,6-11,14-15"));
    }

    #[test]
    fn assignment_on_offline_cpus_is_dropped() {
        // The machine lost cores 6 and 7 (CPUs 6-7, 14-15) and pod-b's CPUs moved.
        let mut spec = machine().spec().clone();
        spec.cpus.retain(|c| c.core < 6);
        let policy = policy(Topology::new(spec).expect("valid"), "0", false);
        let mut old = old_state();
        old.assign("pod-c", "x", list("6,14"));
        let (new, outcomes) = migrate(&old, &policy);
        let dropped: Vec<_> = outcomes
            .iter()
            .filter(|o| o.dropped.is_some())
            .map(|o| o.pod.as_str())
            .collect();
        assert_eq!(dropped, ["pod-c"]);
        assert_eq!(new.default, list("0-1,8-9"));
    }

    #[test]
    fn overlapping_pods_keep_the_first() {
        let mut old = old_state();
        old.assign("pod-z", "late", list("4"));
        let (_, outcomes) = migrate(&old, &policy(machine(), "0", false));
        let late = outcomes.iter().find(|o| o.pod == "pod-z").expect("pod-z");
        assert_eq!(
            late.dropped,
            Some(DropReason::CpusTaken {
                cpus: list("4"),
                by_pod: "pod-b".into()
            })
        );
    }

    #[test]
    fn to_none_policy_drops_everything() {
        let (new, outcomes) = migrate(&old_state(), &Policy::None);
        assert!(outcomes
            .iter()
            .all(|o| o.dropped == Some(DropReason::PolicyHasNoExclusiveCpus)));
        assert_eq!(new, State::default());
    }

    #[test]
    fn strict_reservation_never_empties_the_shared_pool() {
        // Reserved 0-1; everything else held: the last assignment cannot be kept.
        let policy = policy(machine(), "0,8", true);
        let mut old = State {
            default: list("0,8"),
            ..State::default()
        };
        old.assign("pod-a", "app", list("1-7"));
        old.assign("pod-b", "app", list("9-15"));
        let (new, outcomes) = migrate(&old, &policy);
        assert_eq!(
            outcomes[1].dropped,
            Some(DropReason::SharedPoolWouldBeEmpty)
        );
        assert_eq!(new.default, list("9-15"));
    }
}
