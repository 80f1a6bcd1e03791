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
            Self::SharedPoolWouldBeEmpty => write!(f, "keeping it would leave the shared pool empty"),
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
                return Some(DropReason::CpusTaken { cpus: both, by_pod: other.clone() });
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
            out.push(Outcome { pod: pod.clone(), container: container.clone(), cpus: cpus.clone(), dropped });
        }
    }
    out
}
