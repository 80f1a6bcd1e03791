//! The housekeeping set: the CPUs that cgroups named in the agent's
//! `housekeeping.cgroups` (`/system.slice`, the runtime's and kubelet's
//! cgroups) are kept on — every CPU not exclusively assigned, always with
//! the reserved CPUs — and the order of its writes around exclusive grants:
//! shrink before an exclusive container starts on a CPU, grow after one
//! released it. Decisions only; the agent's executor writes them.

use crate::CpuSet;

/// The CPUs housekeeping cgroups get: the shared pool with the reserved
/// CPUs (kubelet's shared pool already holds them; a pool from elsewhere
/// may not). Never empty: with no shared CPU and nothing reserved, every
/// CPU of the machine (the cgroups must keep running).
#[must_use]
pub fn housekeeping_cpus(shared_pool: &CpuSet, reserved: &CpuSet, all: &CpuSet) -> CpuSet {
    let set = shared_pool.union(reserved);
    if set.is_empty() {
        all.clone()
    } else {
        set
    }
}

/// The writes that bring a housekeeping cgroup from `current` to `target`
/// without ever overlapping a CPU being granted exclusively and without
/// ever writing an empty set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HousekeepingPlan {
    /// Written before the pass's container writes: the CPUs it keeps
    /// (`current ∩ target`), or `target` when it keeps none. `None`:
    /// nothing to shrink.
    pub before: Option<CpuSet>,
    /// Written after them: the CPUs it gains. `None`: nothing to grow.
    pub after: Option<CpuSet>,
}

/// See [`HousekeepingPlan`]. `current`: what the cgroup holds (`None`:
/// unknown or empty, then `target` is written before).
#[must_use]
pub fn plan(current: Option<&CpuSet>, target: &CpuSet) -> HousekeepingPlan {
    let Some(current) = current.filter(|c| !c.is_empty()) else {
        return HousekeepingPlan {
            before: (!target.is_empty()).then(|| target.clone()),
            after: None,
        };
    };
    if current == target || target.is_empty() {
        return HousekeepingPlan::default();
    }
    let kept = current.intersection(target);
    let before = if kept == *current {
        None
    } else if kept.is_empty() {
        Some(target.clone())
    } else {
        Some(kept)
    };
    let after_shrink = before.as_ref().unwrap_or(current);
    let after = (after_shrink != target).then(|| target.clone());
    HousekeepingPlan { before, after }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::cpus as set;

    #[test]
    fn the_set_is_the_shared_pool_with_the_reserved_cpus() {
        assert_eq!(
            housekeeping_cpus(&set("0-1,4-7"), &set("0"), &set("0-7")),
            set("0-1,4-7")
        );
        // A pool without the reserved cpus still gets them.
        assert_eq!(
            housekeeping_cpus(&set("4-7"), &set("0-1"), &set("0-7")),
            set("0-1,4-7")
        );
    }

    #[test]
    fn every_cpu_exclusive_but_the_reserved_ones_leaves_the_reserved() {
        assert_eq!(
            housekeeping_cpus(&set("0"), &set("0"), &set("0-7")),
            set("0")
        );
    }

    #[test]
    fn no_shared_and_no_reserved_cpu_is_never_empty() {
        assert_eq!(
            housekeeping_cpus(&CpuSet::new(), &CpuSet::new(), &set("0-3")),
            set("0-3")
        );
    }

    #[test]
    fn an_exclusive_grant_shrinks_before_and_writes_nothing_after() {
        let p = plan(Some(&set("0-7")), &set("0-1,4-7"));
        assert_eq!(p.before, Some(set("0-1,4-7")));
        assert_eq!(p.after, None);
    }

    #[test]
    fn a_release_grows_after_only() {
        let p = plan(Some(&set("0-1,4-7")), &set("0-7"));
        assert_eq!(p.before, None);
        assert_eq!(p.after, Some(set("0-7")));
    }

    #[test]
    fn a_grant_and_a_release_in_one_pass_shrink_first_then_grow() {
        // 2-3 granted, 6-7 released.
        let p = plan(Some(&set("0-1,4-5")), &set("0-1,6-7"));
        assert_eq!(p.before, Some(set("0-1")));
        assert_eq!(p.after, Some(set("0-1,6-7")));
    }

    #[test]
    fn disjoint_sets_go_straight_to_the_target_before() {
        let p = plan(Some(&set("2-3")), &set("0-1"));
        assert_eq!(p.before, Some(set("0-1")));
        assert_eq!(p.after, None);
    }

    #[test]
    fn an_unknown_or_empty_cgroup_gets_the_target_before() {
        for current in [None, Some(CpuSet::new())] {
            let p = plan(current.as_ref(), &set("0-3"));
            assert_eq!(p.before, Some(set("0-3")));
            assert_eq!(p.after, None);
        }
    }

    #[test]
    fn nothing_to_do_when_it_holds_the_target_and_never_an_empty_write() {
        assert_eq!(
            plan(Some(&set("0-3")), &set("0-3")),
            HousekeepingPlan::default()
        );
        assert_eq!(
            plan(Some(&set("0-3")), &CpuSet::new()),
            HousekeepingPlan::default()
        );
        assert_eq!(plan(None, &CpuSet::new()), HousekeepingPlan::default());
    }
}
