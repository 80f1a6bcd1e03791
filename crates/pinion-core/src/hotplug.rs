//! CPUs going offline or coming back while workloads run (issue 13): the
//! state follows the machine's new online set with the rule that rebuilds
//! it from the node ([`crate::rebuild`]), so there is one rule for both.
//!
//! Every exclusive assignment is a claim for as many CPUs as it holds; a
//! CPU that went offline is taken away (`cpus N are not online`) and
//! replaced by a free CPU the policy's allocation algorithm chooses (`cpus
//! M added in place of those lost`), as long as one free CPU stays in the
//! shared pool — otherwise the workload keeps what is left (`asked for 2
//! cpus, keeps 1: no free cpu left`). A workload that lost nothing keeps
//! exactly its CPUs; a CPU that comes back online is free, so it joins the
//! shared pool. Pod-level CPU sets (`PodLevelResourceManagers`) follow the
//! same way, first, and their pods' containers are topped up from them only
//! ([`crate::rebuild::rebuild_with_pods`]).

use crate::cpuset::CpuSet;
use crate::policy::{Policy, PolicyError, Reservation, StaticPolicy, UncoreCacheSource};
use crate::rebuild::{rebuild_with_pods, Claim, Rebuilt};
use crate::state::{PodCpus, State};
use crate::topology::Topology;

/// `policy` on the machine `topology` (its online CPUs changed): the same
/// options and features; the reserved CPUs are the ones chosen at start
/// that are online now — a reserved CPU is never moved, one that went
/// offline is reserved again when it comes back. Should none be online,
/// the policy still keeps one CPU in the shared pool.
pub fn policy_on(policy: &Policy, topology: &Topology) -> Result<Policy, PolicyError> {
    let Policy::Static(old) = policy else {
        return Ok(Policy::None);
    };
    let cpus = old.configured_reserved().intersection(topology.all_cpus());
    let reservation = Reservation {
        count: cpus.len(),
        cpus,
    };
    let topology = match old.features().uncore_cache_source {
        UncoreCacheSource::Kubelet => topology.clone(),
        UncoreCacheSource::LastLevelCache => topology.with_llc_as_uncore(),
    };
    let new = StaticPolicy::new(topology, *old.options(), &reservation)?
        .with_features(old.features())
        .with_configured_reserved(old.configured_reserved().clone());
    Ok(Policy::Static(Box::new(new)))
}

/// What [`follow_online`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    /// The new state and what became of every exclusive assignment.
    pub rebuilt: Rebuilt,
    /// CPUs that went offline since `state` was made.
    pub gone: CpuSet,
    /// CPUs that came (back) online: they join the shared pool.
    pub back: CpuSet,
}

/// `state` with the pod-level CPU sets `pods` (valid for the old online
/// set, `before`) made valid for `policy`, whose topology has the new
/// online set; see the module documentation.
#[must_use]
pub fn follow_online(state: &State, pods: &PodCpus, before: &CpuSet, policy: &Policy) -> Followed {
    let claims: Vec<Claim> = state
        .assignments
        .iter()
        .flat_map(|(pod, containers)| {
            containers.iter().map(move |(container, cpus)| Claim {
                pod: pod.clone(),
                container: container.clone(),
                cpus: cpus.clone(),
                exclusive: cpus.len(),
            })
        })
        .collect();
    let online = policy
        .topology()
        .map_or_else(|| before.clone(), |t| t.all_cpus().clone());
    Followed {
        rebuilt: rebuild_with_pods(&claims, pods, policy),
        gone: before.difference(&online),
        back: online.difference(before),
    }
}

#[cfg(test)]
mod tests;
