//! Rebuilding the state from what runs on the node, when the checkpoint is
//! missing or unreadable: every running workload says which CPUs it has
//! (its cgroup's `cpuset.cpus`, or the runtime's view of a container) and
//! how many exclusive CPUs it asked for; [`rebuild`] turns those claims into
//! a valid state that keeps every workload on the CPUs it has, except where
//! the claims cannot all be true.
//!
//! The rule (documented for operators in `docs/state-recovery.md`), applied
//! to the claims sorted by pod then container, whatever order they came in
//! — claims on no more CPUs than they asked for first, then the wider ones:
//!
//! 1. A workload that asked for no exclusive CPUs (or any workload under the
//!    `none` policy) is in the shared pool; its CPUs are not a claim.
//! 2. From an exclusive claim, CPUs that are not online any more and CPUs
//!    that are reserved are taken away; then CPUs that an earlier workload of
//!    another pod keeps (two containers of one pod may share, as kubelet's
//!    init-container reuse does). Each removal is a [`Conflict`].
//! 3. The rest is kept — unless keeping it would leave the shared pool
//!    empty: then its highest CPU goes back to the shared pool (a conflict).
//! 4. After every claim was visited, a workload left with fewer CPUs than it
//!    asked for gets the missing ones from the free CPUs, chosen by the
//!    policy's own allocation algorithm, as long as the shared pool keeps a
//!    CPU; when there are not enough, it keeps what it has (a conflict). A
//!    workload left with nothing runs in the shared pool.
//!
//! "The shared pool" is the one admission keeps non-empty ([`shared_pool`]):
//! every CPU the state accounts for that no workload holds — the reserved
//! CPUs included, except under `strict-cpu-reservation`, which keeps them
//! out of the state. So whatever admission allowed, the rebuild keeps: on a
//! 2-CPU machine with CPU 0 reserved, a run on CPU 1 stays there (the shared
//! pool is `{0}`).
//!
//! So a workload without conflict keeps exactly its CPUs, and a workload in
//! conflict loses only the CPUs the conflict is about.

use std::collections::BTreeMap;

use crate::alloc::{take_with_index, Algorithm};
use crate::cpuset::CpuSet;
use crate::policy::Policy;
use crate::state::State;

/// What one running workload has and asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub pod: String,
    pub container: String,
    /// The CPUs it runs on now.
    pub cpus: CpuSet,
    /// The exclusive CPUs it asked for (0: the shared pool).
    pub exclusive: usize,
}

/// Why a claim did not keep all of its CPUs, or got others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// These CPUs are not online (or no longer exist).
    CpusGone { cpus: CpuSet },
    /// These CPUs are reserved under the configuration.
    CpusReserved { cpus: CpuSet },
    /// These CPUs are kept by a workload of another pod, earlier in order.
    CpusTaken {
        cpus: CpuSet,
        by_pod: String,
        by_container: String,
    },
    /// It had more CPUs than it asked for: these went back to the shared
    /// pool (the policy's algorithm chose the ones it keeps).
    Trimmed { cpus: CpuSet },
    /// Keeping this CPU would have left the shared pool empty.
    SharedPoolWouldBeEmpty { cpus: CpuSet },
    /// These CPUs were added to make up the CPUs it asked for.
    Replaced { added: CpuSet },
    /// It asked for `asked` CPUs but keeps `kept`: no free CPU was left.
    Short { asked: usize, kept: usize },
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CpusGone { cpus } => write!(f, "cpus {cpus} are not online"),
            Self::CpusReserved { cpus } => write!(f, "cpus {cpus} are reserved"),
            Self::CpusTaken {
                cpus,
                by_pod,
                by_container,
            } => write!(f, "cpus {cpus} are kept by {by_pod}/{by_container}"),
            Self::Trimmed { cpus } => {
                write!(f, "cpus {cpus} went back: more than it asked for")
            }
            Self::SharedPoolWouldBeEmpty { cpus } => {
                write!(f, "cpus {cpus} went back: the shared pool would be empty")
            }
            Self::Replaced { added } => write!(f, "cpus {added} added in place of those lost"),
            Self::Short { asked, kept } => {
                write!(f, "asked for {asked} cpus, keeps {kept}: no free cpu left")
            }
        }
    }
}

/// One claim and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub pod: String,
    pub container: String,
    /// What it had.
    pub observed: CpuSet,
    /// What it has in the rebuilt state (empty: the shared pool).
    pub cpus: CpuSet,
    /// It asked for exclusive CPUs.
    pub exclusive: bool,
    /// Every departure from "keeps what it had", in the rule's order.
    pub conflicts: Vec<Conflict>,
}

impl Outcome {
    /// True when it keeps exactly the CPUs it had (or stays shared).
    #[must_use]
    pub fn unmoved(&self) -> bool {
        self.conflicts.is_empty()
    }
}

/// The state [`rebuild`] built and what it did with every claim, in pod /
/// container order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    pub state: State,
    pub outcomes: Vec<Outcome>,
}

impl Rebuilt {
    /// Every conflict, with its workload.
    pub fn conflicts(&self) -> impl Iterator<Item = (&Outcome, &Conflict)> {
        self.outcomes
            .iter()
            .flat_map(|o| o.conflicts.iter().map(move |c| (o, c)))
    }
}

/// Builds a state valid for `policy` from the claims of running workloads;
/// see the module documentation for the rule.
#[must_use]
pub fn rebuild(claims: &[Claim], policy: &Policy) -> Rebuilt {
    let mut sorted: Vec<&Claim> = claims.iter().collect();
    // Whole claims compared, so that even two claims of one container (a
    // node listing it twice) give one answer in any order: the first wins.
    sorted.sort_by(|a, b| {
        (&a.pod, &a.container, &a.cpus, a.exclusive).cmp(&(
            &b.pod,
            &b.container,
            &b.cpus,
            b.exclusive,
        ))
    });
    sorted.dedup_by(|a, b| a.pod == b.pod && a.container == b.container);
    let mut outcomes: Vec<Outcome> = sorted
        .iter()
        .map(|c| Outcome {
            pod: c.pod.clone(),
            container: c.container.clone(),
            observed: c.cpus.clone(),
            cpus: CpuSet::new(),
            exclusive: c.exclusive > 0,
            conflicts: Vec::new(),
        })
        .collect();
    let Policy::Static(static_policy) = policy else {
        for outcome in &mut outcomes {
            outcome.exclusive = false;
        }
        return Rebuilt {
            state: State::default(),
            outcomes,
        };
    };
    let pool = static_policy.pool_cpus();
    let reserved = static_policy.reserved();
    let online = static_policy.topology().all_cpus();
    let algorithm = Algorithm::select(
        &static_policy.options().alloc_options(),
        static_policy.topology(),
    );
    let take = |from: &CpuSet, n: usize| {
        take_with_index(static_policy.alloc_index(), from, n, algorithm).ok()
    };
    // CPU → (pod, container) that keeps it.
    let mut kept_by: BTreeMap<u32, (String, String)> = BTreeMap::new();
    // Claims on no more CPUs than they asked for first: a wider claim is
    // trimmed afterwards, so that its trim never takes CPUs a workload
    // placed exactly holds.
    for wide in [false, true] {
        for (claim, outcome) in sorted.iter().zip(&mut outcomes) {
            if claim.exclusive == 0 || (claim.cpus.len() > claim.exclusive) != wide {
                continue;
            }
            keep(claim, outcome, &pool, reserved, online, &mut kept_by, &take);
        }
    }
    for (claim, outcome) in sorted.iter().zip(&mut outcomes) {
        if claim.exclusive == 0 || outcome.cpus.len() >= claim.exclusive {
            continue;
        }
        top_up(claim, outcome, &pool, reserved, &mut kept_by, &take);
    }
    let mut state = State::default();
    for outcome in outcomes.iter().filter(|o| !o.cpus.is_empty()) {
        state.assign(&outcome.pod, &outcome.container, outcome.cpus.clone());
    }
    state.default = pool.difference(&state.exclusive_cpus());
    Rebuilt { state, outcomes }
}

/// The shared pool of a state on `pool` (the policy's [`pool_cpus`]) whose
/// workloads hold `exclusive`: the set admission never empties (kubelet's
/// default CPU set; reserved CPUs are in it unless the reservation is
/// strict, when `pool` lacks them).
///
/// [`pool_cpus`]: crate::policy::StaticPolicy::pool_cpus
#[must_use]
pub fn shared_pool(pool: &CpuSet, exclusive: &CpuSet) -> CpuSet {
    pool.difference(exclusive)
}

/// Steps 2 and 3 of the rule for one exclusive claim.
fn keep(
    claim: &Claim,
    outcome: &mut Outcome,
    pool: &CpuSet,
    reserved: &CpuSet,
    online: &CpuSet,
    kept_by: &mut BTreeMap<u32, (String, String)>,
    take: &impl Fn(&CpuSet, usize) -> Option<CpuSet>,
) {
    let gone = claim.cpus.difference(online);
    if !gone.is_empty() {
        outcome.conflicts.push(Conflict::CpusGone { cpus: gone });
    }
    let reserved_hit = claim.cpus.intersection(online).intersection(reserved);
    if !reserved_hit.is_empty() {
        outcome
            .conflicts
            .push(Conflict::CpusReserved { cpus: reserved_hit });
    }
    let mut cpus = claim.cpus.intersection(pool).difference(reserved);
    // Taken by other pods, grouped by holder (in CPU order of first hit).
    let mut taken: Vec<((String, String), CpuSet)> = Vec::new();
    for cpu in cpus.iter() {
        let Some(holder) = kept_by.get(&cpu) else {
            continue;
        };
        if holder.0 == claim.pod {
            continue;
        }
        match taken.iter_mut().find(|(h, _)| h == holder) {
            Some((_, set)) => {
                set.insert(cpu);
            }
            None => taken.push((holder.clone(), [cpu].into_iter().collect())),
        }
    }
    for ((by_pod, by_container), set) in taken {
        cpus = cpus.difference(&set);
        outcome.conflicts.push(Conflict::CpusTaken {
            cpus: set,
            by_pod,
            by_container,
        });
    }
    if cpus.len() > claim.exclusive {
        if let Some(chosen) = take(&cpus, claim.exclusive) {
            outcome.conflicts.push(Conflict::Trimmed {
                cpus: cpus.difference(&chosen),
            });
            cpus = chosen;
        }
    }
    let mut exclusive: CpuSet = kept_by.keys().copied().collect();
    exclusive.union_with(&cpus);
    if !cpus.is_empty() && shared_pool(pool, &exclusive).is_empty() {
        if let Some(last) = cpus.last() {
            let highest: CpuSet = [last].into_iter().collect();
            cpus = cpus.difference(&highest);
            outcome
                .conflicts
                .push(Conflict::SharedPoolWouldBeEmpty { cpus: highest });
        }
    }
    for cpu in cpus.iter() {
        kept_by
            .entry(cpu)
            .or_insert_with(|| (claim.pod.clone(), claim.container.clone()));
    }
    outcome.cpus = cpus;
}

/// Step 4 of the rule for one claim left short.
fn top_up(
    claim: &Claim,
    outcome: &mut Outcome,
    pool: &CpuSet,
    reserved: &CpuSet,
    kept_by: &mut BTreeMap<u32, (String, String)>,
    take: &impl Fn(&CpuSet, usize) -> Option<CpuSet>,
) {
    let held: CpuSet = kept_by.keys().copied().collect();
    let free = pool.difference(reserved).difference(&held);
    let missing = claim.exclusive - outcome.cpus.len();
    // The shared pool keeps a CPU: a reserved one in it (not strict) does;
    // otherwise one free CPU stays.
    let others = shared_pool(pool, &held).difference(&free);
    let keep_one = usize::from(others.is_empty());
    let can = free.len().saturating_sub(keep_one).min(missing);
    let added = if can == 0 { None } else { take(&free, can) };
    if let Some(added) = added {
        for cpu in added.iter() {
            kept_by.insert(cpu, (claim.pod.clone(), claim.container.clone()));
        }
        outcome.cpus.union_with(&added);
        outcome.conflicts.push(Conflict::Replaced { added });
    }
    if outcome.cpus.len() < claim.exclusive {
        outcome.conflicts.push(Conflict::Short {
            asked: claim.exclusive,
            kept: outcome.cpus.len(),
        });
    }
}

#[cfg(test)]
mod tests;
