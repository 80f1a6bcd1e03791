//! Drift of a runtime container's cpuset: what its cgroup holds against the
//! placement Pinion gave it. The reconcile pass reads the cgroup (the host
//! crate); this decides whether it differs and what the repair sends.

use crate::{CpuSet, Placement};

/// What a container's cgroup holds (`None`: the file is empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeenCpuset {
    pub cpus: Option<CpuSet>,
    pub mems: Option<CpuSet>,
}

/// A cpuset found different from the placement: what was seen where it
/// differs (`Some(None)`: found empty), and the placement to send again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub cpus: Option<Option<CpuSet>>,
    pub mems: Option<Option<CpuSet>>,
    /// The repair: the whole placement again (the runtime applies cpus,
    /// mems and the resource settings together).
    pub repair: Placement,
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |set: &Option<CpuSet>| {
            set.as_ref()
                .map_or("(empty)".to_string(), ToString::to_string)
        };
        let mut parts = Vec::new();
        if let Some(have) = &self.cpus {
            parts.push(format!(
                "cpuset.cpus {} instead of {}",
                show(have),
                self.repair.cpus
            ));
        }
        if let Some(have) = &self.mems {
            parts.push(format!(
                "cpuset.mems {} instead of {}",
                show(have),
                self.repair.mems
            ));
        }
        f.write_str(&parts.join(", "))
    }
}

/// Whether `seen` differs from `placement`: `cpuset.cpus` always,
/// `cpuset.mems` when the placement names memory nodes (Pinion sends them
/// then). `None`: nothing to repair.
#[must_use]
pub fn cpuset_drift(placement: &Placement, seen: &SeenCpuset) -> Option<Drift> {
    let cpus = (seen.cpus.as_ref() != Some(&placement.cpus)).then(|| seen.cpus.clone());
    let mems = (!placement.mems.is_empty() && seen.mems.as_ref() != Some(&placement.mems))
        .then(|| seen.mems.clone());
    (cpus.is_some() || mems.is_some()).then(|| Drift {
        cpus,
        mems,
        repair: placement.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::cpus as set;
    use crate::Pool;

    fn placement(cpus: &str, mems: &str) -> Placement {
        Placement {
            cpus: set(cpus),
            mems: if mems.is_empty() {
                CpuSet::new()
            } else {
                set(mems)
            },
            pool: Pool::Exclusive,
            ..Placement::default()
        }
    }

    fn seen(cpus: Option<&str>, mems: Option<&str>) -> SeenCpuset {
        SeenCpuset {
            cpus: cpus.map(set),
            mems: mems.map(set),
        }
    }

    #[test]
    fn a_cgroup_holding_the_placement_has_no_drift() {
        assert_eq!(
            cpuset_drift(&placement("2-3", "0"), &seen(Some("2-3"), Some("0"))),
            None
        );
    }

    #[test]
    fn changed_cpus_are_drift_and_the_repair_is_the_placement() {
        let want = placement("2-3", "0");
        let drift = cpuset_drift(&want, &seen(Some("0-7"), Some("0"))).expect("drift");
        assert_eq!(drift.cpus, Some(Some(set("0-7"))));
        assert_eq!(drift.mems, None);
        assert_eq!(drift.repair, want);
        assert_eq!(drift.to_string(), "cpuset.cpus 0-7 instead of 2-3");
    }

    #[test]
    fn changed_or_emptied_mems_are_drift_when_pinion_set_them() {
        let drift =
            cpuset_drift(&placement("2-3", "0"), &seen(Some("2-3"), Some("0-1"))).expect("drift");
        assert_eq!((drift.cpus, drift.mems), (None, Some(Some(set("0-1")))));
        let drift = cpuset_drift(&placement("2-3", "0"), &seen(Some("2-3"), None)).expect("drift");
        assert_eq!(drift.to_string(), "cpuset.mems (empty) instead of 0");
    }

    #[test]
    fn mems_are_not_compared_when_the_placement_names_none() {
        assert_eq!(
            cpuset_drift(&placement("1", ""), &seen(Some("1"), Some("0-1"))),
            None
        );
    }

    #[test]
    fn an_empty_cpuset_is_drift() {
        let drift = cpuset_drift(&placement("1", "0"), &seen(None, Some("0"))).expect("drift");
        assert_eq!(drift.cpus, Some(None));
        assert_eq!(drift.to_string(), "cpuset.cpus (empty) instead of 1");
    }
}
