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
//!
//! Pod-level CPU sets (`PodLevelResourceManagers`: kubelet's `podEntries`,
//! [`rebuild_with_pods`]) are claims of their pod, visited before every
//! container: each keeps its online, unreserved CPUs that no earlier pod's
//! set keeps, as long as the shared pool keeps a CPU. Its CPUs are its
//! pod's: a container of another pod loses them, a container of that pod
//! keeps only the CPUs inside its pod's set. In step 4 the sets are topped
//! up first, from the free CPUs; then a container of such a pod is topped up
//! from its pod's set only — the CPUs of the set no container of the pod
//! keeps — and where the pod's shared containers ran on some of those, one
//! stays theirs.

use std::collections::BTreeMap;

use crate::alloc::{take_with_index, Algorithm};
use crate::cpuset::CpuSet;
use crate::policy::Policy;
use crate::state::{PodCpus, State};

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
    /// These CPUs are in the pod-level CPU set of pod `pod` (another pod,
    /// earlier in order when this is a pod's set itself).
    InPodSet { cpus: CpuSet, pod: String },
    /// These CPUs are outside the pod-level CPU set of its own pod.
    OutsidePodSet { cpus: CpuSet },
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
            Self::InPodSet { cpus, pod } => write!(f, "cpus {cpus} are in pod {pod}'s cpu set"),
            Self::OutsidePodSet { cpus } => {
                write!(f, "cpus {cpus} are outside its pod's cpu set")
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

/// A pod-level CPU set and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSet {
    pub pod: String,
    /// What it was.
    pub observed: CpuSet,
    /// What it is in the rebuilt state (empty: the pod has no set now).
    pub cpus: CpuSet,
    /// Every departure from "keeps what it had", in the rule's order.
    pub conflicts: Vec<Conflict>,
}

/// The state [`rebuild`] built and what it did with every claim, in pod /
/// container order, and with every pod-level CPU set, in pod order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    pub state: State,
    pub outcomes: Vec<Outcome>,
    pub pod_sets: Vec<PodSet>,
}

impl Rebuilt {
    /// The pod-level CPU sets of the rebuilt state (pods whose set kept no
    /// CPU have none).
    #[must_use]
    pub fn pod_cpus(&self) -> PodCpus {
        self.pod_sets
            .iter()
            .filter(|set| !set.cpus.is_empty())
            .map(|set| (set.pod.clone(), set.cpus.clone()))
            .collect()
    }

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
    rebuild_with_pods(claims, &PodCpus::new(), policy)
}

/// [`rebuild`] with the pod-level CPU sets the state had (`pods`: pod UID →
/// its set); see the module documentation for the rule.
#[must_use]
pub fn rebuild_with_pods(claims: &[Claim], pods: &PodCpus, policy: &Policy) -> Rebuilt {
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
    let mut pod_sets: Vec<PodSet> = pods
        .iter()
        .map(|(pod, cpus)| PodSet {
            pod: pod.clone(),
            observed: cpus.clone(),
            cpus: CpuSet::new(),
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
            pod_sets,
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
    let mut held = Held::default();
    for set in &mut pod_sets {
        keep_pod_set(set, &pool, reserved, online, &mut held);
    }
    // Claims on no more CPUs than they asked for first: a wider claim is
    // trimmed afterwards, so that its trim never takes CPUs a workload
    // placed exactly holds.
    for wide in [false, true] {
        for (claim, outcome) in sorted.iter().zip(&mut outcomes) {
            if claim.exclusive == 0 || (claim.cpus.len() > claim.exclusive) != wide {
                continue;
            }
            keep(claim, outcome, &pool, reserved, online, &mut held, &take);
        }
    }
    for set in &mut pod_sets {
        top_up_pod_set(set, &pool, reserved, &mut held, &take);
    }
    // Where a pod's shared containers ran: the CPUs of its set no claim
    // held before.
    let mut shared_before: BTreeMap<&str, CpuSet> = pods
        .iter()
        .map(|(pod, cpus)| (pod.as_str(), cpus.clone()))
        .collect();
    for claim in sorted.iter().filter(|c| c.exclusive > 0) {
        if let Some(shared) = shared_before.get_mut(claim.pod.as_str()) {
            *shared = shared.difference(&claim.cpus);
        }
    }
    for (claim, outcome) in sorted.iter().zip(&mut outcomes) {
        if claim.exclusive == 0 || outcome.cpus.len() >= claim.exclusive {
            continue;
        }
        let keeps_shared = shared_before
            .get(claim.pod.as_str())
            .is_some_and(|shared| !shared.is_empty());
        top_up(
            claim,
            outcome,
            keeps_shared,
            &pool,
            reserved,
            &mut held,
            &take,
        );
    }
    let mut state = State::default();
    for outcome in outcomes.iter().filter(|o| !o.cpus.is_empty()) {
        state.assign(&outcome.pod, &outcome.container, outcome.cpus.clone());
    }
    state.default = pool.difference(&held.all());
    Rebuilt {
        state,
        outcomes,
        pod_sets,
    }
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

/// The CPUs kept so far: by containers, and by pod-level CPU sets.
#[derive(Default)]
struct Held {
    /// CPU → (pod, container) that keeps it.
    by_container: BTreeMap<u32, (String, String)>,
    /// Pod → the CPUs its pod-level set keeps.
    pod_sets: BTreeMap<String, CpuSet>,
}

impl Held {
    /// Every CPU kept: none of them is in the shared pool.
    fn all(&self) -> CpuSet {
        let mut all: CpuSet = self.by_container.keys().copied().collect();
        for cpus in self.pod_sets.values() {
            all.union_with(cpus);
        }
        all
    }

    /// `cpus` without those in a pod-level set, with a conflict per set.
    fn outside_pod_sets(&self, mut cpus: CpuSet, conflicts: &mut Vec<Conflict>) -> CpuSet {
        for (pod, set) in &self.pod_sets {
            let both = cpus.intersection(set);
            if !both.is_empty() {
                cpus = cpus.difference(&both);
                conflicts.push(Conflict::InPodSet {
                    cpus: both,
                    pod: pod.clone(),
                });
            }
        }
        cpus
    }

    /// The CPUs of `cpus` that some container keeps.
    fn kept_by_containers(&self, cpus: &CpuSet) -> CpuSet {
        cpus.iter()
            .filter(|cpu| self.by_container.contains_key(cpu))
            .collect()
    }
}

/// Step 0 of the rule for one pod-level CPU set.
fn keep_pod_set(
    set: &mut PodSet,
    pool: &CpuSet,
    reserved: &CpuSet,
    online: &CpuSet,
    held: &mut Held,
) {
    let cpus = usable(&set.observed, pool, reserved, online, &mut set.conflicts);
    let cpus = held.outside_pod_sets(cpus, &mut set.conflicts);
    let cpus = leaving_a_shared_cpu(cpus, pool, held, &mut set.conflicts);
    set.cpus = cpus.clone();
    held.pod_sets.insert(set.pod.clone(), cpus);
}

/// Step 2's first part: the CPUs of `observed` that are online and not
/// reserved, with a conflict for each kind taken away.
fn usable(
    observed: &CpuSet,
    pool: &CpuSet,
    reserved: &CpuSet,
    online: &CpuSet,
    conflicts: &mut Vec<Conflict>,
) -> CpuSet {
    let gone = observed.difference(online);
    if !gone.is_empty() {
        conflicts.push(Conflict::CpusGone { cpus: gone });
    }
    let reserved_hit = observed.intersection(online).intersection(reserved);
    if !reserved_hit.is_empty() {
        conflicts.push(Conflict::CpusReserved { cpus: reserved_hit });
    }
    observed.intersection(pool).difference(reserved)
}

/// Step 3's check: `cpus` without its highest CPU (a conflict) when keeping
/// them all beside what is `held` would leave the shared pool empty.
fn leaving_a_shared_cpu(
    mut cpus: CpuSet,
    pool: &CpuSet,
    held: &Held,
    conflicts: &mut Vec<Conflict>,
) -> CpuSet {
    let mut exclusive = held.all();
    exclusive.union_with(&cpus);
    if !cpus.is_empty() && shared_pool(pool, &exclusive).is_empty() {
        if let Some(last) = cpus.last() {
            let highest: CpuSet = [last].into_iter().collect();
            cpus = cpus.difference(&highest);
            conflicts.push(Conflict::SharedPoolWouldBeEmpty { cpus: highest });
        }
    }
    cpus
}

/// Steps 2 and 3 of the rule for one exclusive claim.
fn keep(
    claim: &Claim,
    outcome: &mut Outcome,
    pool: &CpuSet,
    reserved: &CpuSet,
    online: &CpuSet,
    held: &mut Held,
    take: &impl Fn(&CpuSet, usize) -> Option<CpuSet>,
) {
    let mut cpus = usable(&claim.cpus, pool, reserved, online, &mut outcome.conflicts);
    match held.pod_sets.get(&claim.pod) {
        Some(own) => {
            let outside = cpus.difference(own);
            if !outside.is_empty() {
                cpus = cpus.intersection(own);
                outcome
                    .conflicts
                    .push(Conflict::OutsidePodSet { cpus: outside });
            }
        }
        None => cpus = held.outside_pod_sets(cpus, &mut outcome.conflicts),
    }
    // Taken by other pods, grouped by holder (in CPU order of first hit).
    let mut taken: Vec<((String, String), CpuSet)> = Vec::new();
    for cpu in cpus.iter() {
        let Some(holder) = held.by_container.get(&cpu) else {
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
    let cpus = leaving_a_shared_cpu(cpus, pool, held, &mut outcome.conflicts);
    for cpu in cpus.iter() {
        held.by_container
            .entry(cpu)
            .or_insert_with(|| (claim.pod.clone(), claim.container.clone()));
    }
    outcome.cpus = cpus;
}

/// The CPUs free for a claim short of `missing` outside every pod-level
/// set: chosen by the policy's algorithm, as long as the shared pool keeps a
/// CPU (a reserved one in it, when not strict, does; otherwise one free CPU
/// stays).
fn from_the_free_cpus(
    missing: usize,
    pool: &CpuSet,
    reserved: &CpuSet,
    held: &Held,
    take: &impl Fn(&CpuSet, usize) -> Option<CpuSet>,
) -> Option<CpuSet> {
    let kept = held.all();
    let free = pool.difference(reserved).difference(&kept);
    let others = shared_pool(pool, &kept).difference(&free);
    let keep_one = usize::from(others.is_empty());
    let can = free.len().saturating_sub(keep_one).min(missing);
    if can == 0 {
        None
    } else {
        take(&free, can)
    }
}

/// Step 4 of the rule for one pod-level set left short.
fn top_up_pod_set(
    set: &mut PodSet,
    pool: &CpuSet,
    reserved: &CpuSet,
    held: &mut Held,
    take: &impl Fn(&CpuSet, usize) -> Option<CpuSet>,
) {
    let asked = set.observed.len();
    if set.cpus.len() >= asked {
        return;
    }
    if let Some(added) = from_the_free_cpus(asked - set.cpus.len(), pool, reserved, held, take) {
        set.cpus.union_with(&added);
        held.pod_sets.insert(set.pod.clone(), set.cpus.clone());
        set.conflicts.push(Conflict::Replaced { added });
    }
    if set.cpus.len() < asked {
        set.conflicts.push(Conflict::Short {
            asked,
            kept: set.cpus.len(),
        });
    }
}

/// Step 4 of the rule for one claim left short: from the free CPUs, or,
/// for a container of a pod with a pod-level set, from the CPUs of that set
/// no container keeps — one of them staying with the pod's shared
/// containers when `keeps_shared`.
fn top_up(
    claim: &Claim,
    outcome: &mut Outcome,
    keeps_shared: bool,
    pool: &CpuSet,
    reserved: &CpuSet,
    held: &mut Held,
    take: &impl Fn(&CpuSet, usize) -> Option<CpuSet>,
) {
    let missing = claim.exclusive - outcome.cpus.len();
    let added = match held.pod_sets.get(&claim.pod) {
        Some(own) => {
            let free = own.difference(&held.kept_by_containers(own));
            let can = free
                .len()
                .saturating_sub(usize::from(keeps_shared))
                .min(missing);
            if can == 0 {
                None
            } else {
                take(&free, can)
            }
        }
        None => from_the_free_cpus(missing, pool, reserved, held, take),
    };
    if let Some(added) = added {
        for cpu in added.iter() {
            held.by_container
                .insert(cpu, (claim.pod.clone(), claim.container.clone()));
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
