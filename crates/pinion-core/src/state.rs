//! The CPU manager state: the shared (default) CPU set and the exclusive
//! assignments keyed by pod UID and container name — the content of kubelet's
//! `cpu_manager_state` — and the invariants that every state Pinion produces
//! must keep ([`State::check_invariants`], the one place they are written down).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;

/// Pod UID → container name → exclusive CPUs.
pub type Assignments = BTreeMap<String, BTreeMap<String, CpuSet>>;

/// Pod UID → the CPUs allocated to the pod as a whole (pod-level
/// resources; kubelet's checkpoint `podEntries`).
pub type PodCpus = BTreeMap<String, CpuSet>;

/// No pod-level CPU sets.
static NO_POD_CPUS: PodCpus = PodCpus::new();

/// Shared pool plus exclusive assignments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The shared pool (kubelet's "default cpuset"). Empty means "not
    /// initialised yet" until the policy starts.
    pub default: CpuSet,
    pub assignments: Assignments,
}

/// What [`State::check_invariants`] checks against: the CPUs the state must
/// account for and the reserved CPUs.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// All online CPUs of the machine.
    pub all: &'a CpuSet,
    /// Reserved CPUs (never exclusive; in the shared pool unless strict).
    pub reserved: &'a CpuSet,
    /// `strict-cpu-reservation`: reserved CPUs are in no pool at all.
    pub strict: bool,
    /// Pod-level CPU sets: exclusive to their pod, holding every CPU of the
    /// pod's containers.
    pub pod_cpus: &'a PodCpus,
}

impl<'a> Expected<'a> {
    /// The expectations without pod-level CPU sets.
    #[must_use]
    pub fn new(all: &'a CpuSet, reserved: &'a CpuSet, strict: bool) -> Self {
        Expected {
            all,
            reserved,
            strict,
            pod_cpus: &NO_POD_CPUS,
        }
    }
}

/// A broken state invariant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvariantError {
    #[error("the shared pool is empty")]
    EmptySharedPool,
    #[error("{pod}/{container} holds cpus {cpus} that are also in the shared pool")]
    ExclusiveInShared {
        pod: String,
        container: String,
        cpus: String,
    },
    #[error("{pod}/{container} holds reserved cpus {cpus}")]
    ExclusiveReserved {
        pod: String,
        container: String,
        cpus: String,
    },
    #[error("{pod}/{container} has an empty cpu set")]
    EmptyAssignment { pod: String, container: String },
    #[error("pods {first} and {second} both hold cpus {cpus}")]
    SharedBetweenPods {
        first: String,
        second: String,
        cpus: String,
    },
    #[error("reserved cpus {cpus} are missing from the shared pool")]
    ReservedNotShared { cpus: String },
    #[error("strictly reserved cpus {cpus} are in the shared pool")]
    StrictReservedShared { cpus: String },
    #[error("cpus {cpus} are in no pool (lost)")]
    LostCpus { cpus: String },
    #[error("cpus {cpus} are in the state but not online on this machine")]
    UnknownCpus { cpus: String },
    #[error("{pod}/{container} holds cpus {cpus} outside its pod's cpu set")]
    OutsidePodCpus {
        pod: String,
        container: String,
        cpus: String,
    },
}

impl State {
    /// The exclusive CPUs of one container.
    #[must_use]
    pub fn assignment(&self, pod: &str, container: &str) -> Option<&CpuSet> {
        self.assignments.get(pod)?.get(container)
    }

    /// Records an assignment (replacing any previous one of that container).
    pub fn assign(&mut self, pod: &str, container: &str, cpus: CpuSet) {
        self.assignments
            .entry(pod.to_string())
            .or_default()
            .insert(container.to_string(), cpus);
    }

    /// Deletes an assignment, returning it; drops the pod entry when empty.
    pub fn unassign(&mut self, pod: &str, container: &str) -> Option<CpuSet> {
        let containers = self.assignments.get_mut(pod)?;
        let cpus = containers.remove(container);
        if containers.is_empty() {
            self.assignments.remove(pod);
        }
        cpus
    }

    /// Union of every exclusive assignment.
    #[must_use]
    pub fn exclusive_cpus(&self) -> CpuSet {
        let mut all = CpuSet::new();
        for cpus in self.assignments.values().flat_map(BTreeMap::values) {
            all.union_with(cpus);
        }
        all
    }

    /// Number of container assignments.
    #[must_use]
    pub fn assignment_count(&self) -> usize {
        self.assignments.values().map(BTreeMap::len).sum()
    }

    /// Checks every invariant of a started static-policy state:
    /// * the shared pool is not empty;
    /// * no assignment is empty, overlaps the shared pool or touches reserved CPUs;
    /// * assignments of different pods are disjoint (inside one pod, an app
    ///   container may hold CPUs of an init container: kubelet's reuse);
    /// * reserved CPUs are all in the shared pool (none of them when strict);
    /// * shared ∪ exclusive = all online CPUs (minus reserved when strict):
    ///   nothing lost, nothing unknown.
    pub fn check_invariants(&self, expected: Expected<'_>) -> Result<(), InvariantError> {
        if self.default.is_empty() {
            return Err(InvariantError::EmptySharedPool);
        }
        self.check_assignments(expected.reserved, expected.pod_cpus)?;
        if expected.strict {
            let shared = self.default.intersection(expected.reserved);
            if !shared.is_empty() {
                return Err(InvariantError::StrictReservedShared {
                    cpus: shared.to_string(),
                });
            }
        } else {
            let missing = expected.reserved.difference(&self.default);
            if !missing.is_empty() {
                return Err(InvariantError::ReservedNotShared {
                    cpus: missing.to_string(),
                });
            }
        }
        let wanted = if expected.strict {
            expected.all.difference(expected.reserved)
        } else {
            expected.all.clone()
        };
        let mut known = self.default.union(&self.exclusive_cpus());
        for cpus in expected.pod_cpus.values() {
            known.union_with(cpus);
        }
        let lost = wanted.difference(&known);
        if !lost.is_empty() {
            return Err(InvariantError::LostCpus {
                cpus: lost.to_string(),
            });
        }
        let unknown = known.difference(&wanted);
        if !unknown.is_empty() {
            return Err(InvariantError::UnknownCpus {
                cpus: unknown.to_string(),
            });
        }
        Ok(())
    }

    fn check_assignments(&self, reserved: &CpuSet, pods: &PodCpus) -> Result<(), InvariantError> {
        let mut held_by: Vec<(&str, CpuSet)> = Vec::new();
        let no_containers = BTreeMap::new();
        let pod_names: std::collections::BTreeSet<&String> =
            self.assignments.keys().chain(pods.keys()).collect();
        for pod in pod_names {
            let containers = self.assignments.get(pod).unwrap_or(&no_containers);
            let bubble = pods.get(pod);
            let mut pod_cpus = bubble.cloned().unwrap_or_default();
            if let Some(bubble) = bubble {
                let bad = bubble
                    .intersection(&self.default)
                    .union(&bubble.intersection(reserved));
                if !bad.is_empty() {
                    return Err(InvariantError::ExclusiveInShared {
                        pod: pod.clone(),
                        container: String::new(),
                        cpus: bad.to_string(),
                    });
                }
            }
            for (container, cpus) in containers {
                if let Some(bubble) = bubble {
                    let outside = cpus.difference(bubble);
                    if !outside.is_empty() {
                        return Err(InvariantError::OutsidePodCpus {
                            pod: pod.clone(),
                            container: container.clone(),
                            cpus: outside.to_string(),
                        });
                    }
                }
                let err_fields = || (pod.clone(), container.clone());
                if cpus.is_empty() {
                    let (pod, container) = err_fields();
                    return Err(InvariantError::EmptyAssignment { pod, container });
                }
                let shared = cpus.intersection(&self.default);
                if !shared.is_empty() {
                    let (pod, container) = err_fields();
                    return Err(InvariantError::ExclusiveInShared {
                        pod,
                        container,
                        cpus: shared.to_string(),
                    });
                }
                let touched = cpus.intersection(reserved);
                if !touched.is_empty() {
                    let (pod, container) = err_fields();
                    return Err(InvariantError::ExclusiveReserved {
                        pod,
                        container,
                        cpus: touched.to_string(),
                    });
                }
                pod_cpus.union_with(cpus);
            }
            for (other, other_cpus) in &held_by {
                let both = pod_cpus.intersection(other_cpus);
                if !both.is_empty() {
                    return Err(InvariantError::SharedBetweenPods {
                        first: (*other).to_string(),
                        second: pod.clone(),
                        cpus: both.to_string(),
                    });
                }
            }
            held_by.push((pod, pod_cpus));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> CpuSet {
        CpuSet::parse_list(text).expect("cpulist")
    }

    fn state(default: &str, assignments: &[(&str, &str, &str)]) -> State {
        let mut s = State {
            default: list(default),
            ..State::default()
        };
        for (pod, container, cpus) in assignments {
            s.assign(pod, container, list(cpus));
        }
        s
    }

    fn check(s: &State, reserved: &str, strict: bool) -> Result<(), InvariantError> {
        let all = list("0-7");
        let reserved = list(reserved);
        s.check_invariants(Expected::new(&all, &reserved, strict))
    }

    #[test]
    fn consistent_states_pass() {
        assert_eq!(
            check(
                &state("0-3", &[("a", "c", "4-5"), ("b", "c", "6-7")]),
                "0",
                false
            ),
            Ok(())
        );
        assert_eq!(
            check(&state("1-3", &[("a", "c", "4-7")]), "0", true),
            Ok(())
        );
        // An app container reusing its init container's CPUs (same pod).
        assert_eq!(
            check(
                &state("0-5", &[("a", "init", "6-7"), ("a", "app", "6-7")]),
                "0",
                false
            ),
            Ok(())
        );
    }

    #[test]
    fn each_broken_invariant_is_named() {
        assert_eq!(
            check(&state("", &[("a", "c", "0-7")]), "", false),
            Err(InvariantError::EmptySharedPool)
        );
        assert!(matches!(
            check(&state("0-4", &[("a", "c", "4-7")]), "0", false),
            Err(InvariantError::ExclusiveInShared { .. })
        ));
        assert!(matches!(
            check(&state("1-5", &[("a", "c", "0,6-7")]), "0", false),
            Err(InvariantError::ExclusiveReserved { .. })
        ));
        assert!(matches!(
            check(
                &state("0-3", &[("a", "c", "4-6"), ("b", "c", "6-7")]),
                "0",
                false
            ),
            Err(InvariantError::SharedBetweenPods { .. })
        ));
        assert!(matches!(
            check(&state("1-7", &[]), "0", false),
            Err(InvariantError::ReservedNotShared { .. })
        ));
        assert!(matches!(
            check(&state("0-7", &[]), "0", true),
            Err(InvariantError::StrictReservedShared { .. })
        ));
        assert!(matches!(
            check(&state("0-5", &[]), "0", false),
            Err(InvariantError::LostCpus { .. })
        ));
        assert!(matches!(
            check(&state("0-9", &[]), "0", false),
            Err(InvariantError::UnknownCpus { .. })
        ));
        assert!(matches!(
            check(&state("0-7", &[("a", "c", "")]), "0", false),
            Err(InvariantError::EmptyAssignment { .. })
        ));
    }

    #[test]
    fn unassign_drops_empty_pods() {
        let mut s = state("0-3", &[("a", "c", "4-7")]);
        assert_eq!(s.unassign("a", "c"), Some(list("4-7")));
        assert!(s.assignments.is_empty());
        assert_eq!(s.unassign("a", "c"), None);
    }

    /// Pod-level CPU sets count as held, and hold their pod's containers.
    #[test]
    fn pod_level_cpu_sets_are_held_and_contain_their_containers() {
        let all = list("0-7");
        let reserved = list("0");
        let pods = PodCpus::from([("a".to_owned(), list("4-7"))]);
        let with_pods = |s: &State| {
            s.check_invariants(Expected {
                pod_cpus: &pods,
                ..Expected::new(&all, &reserved, false)
            })
        };
        // Container "c" holds 4-5; 6-7 are the pod's, in no container.
        assert_eq!(with_pods(&state("0-3", &[("a", "c", "4-5")])), Ok(()));
        assert!(matches!(
            check(&state("0-3", &[("a", "c", "4-5")]), "0", false),
            Err(InvariantError::LostCpus { .. })
        ));
        assert!(matches!(
            with_pods(&state("0-2", &[("a", "c", "3-5")])),
            Err(InvariantError::OutsidePodCpus { .. })
        ));
        assert!(matches!(
            with_pods(&state("0-3", &[("b", "c", "6-7")])),
            Err(InvariantError::SharedBetweenPods { .. })
        ));
    }
}
