//! Drift of a runtime container's cpuset: what its cgroup holds against the
//! placement Pinion gave it. The reconcile pass reads the cgroup (the host
//! crate); this decides whether it differs and what the repair sends.
//!
//! Other writers: any file Pinion keeps (a container's cpuset, a
//! housekeeping cgroup's, a partition file) is an *observed vs intended*
//! pair; [`judge`] decides whether a difference is a new foreign write to
//! report and whether Pinion writes its value again (config
//! `otherWriters`).

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

impl std::fmt::Display for SeenCpuset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |set: &Option<CpuSet>| {
            set.as_ref()
                .map_or("(empty)".to_string(), ToString::to_string)
        };
        write!(f, "cpus {}", show(&self.cpus))?;
        if self.mems.is_some() {
            write!(f, " mems {}", show(&self.mems))?;
        }
        Ok(())
    }
}

impl SeenCpuset {
    /// What Pinion intends for a cgroup given `placement`: its cpus, and its
    /// memory nodes when it names some (the ones [`cpuset_drift`] compares).
    #[must_use]
    pub fn intended(placement: &Placement) -> Self {
        Self {
            cpus: Some(placement.cpus.clone()),
            mems: (!placement.mems.is_empty()).then(|| placement.mems.clone()),
        }
    }

    /// `self` as far as `intended` says what is compared: the memory nodes
    /// dropped when Pinion sets none.
    #[must_use]
    pub fn compared_with(&self, intended: &Self) -> Self {
        Self {
            cpus: self.cpus.clone(),
            mems: intended.mems.as_ref().and(self.mems.clone()),
        }
    }
}

/// What Pinion does about a file someone else changed (config
/// `otherWriters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OtherWriters {
    /// Write Pinion's value again at once (the default; Pinion's behaviour
    /// before the option existed).
    #[default]
    Repair,
    /// Keep the other writer's value and report it; Pinion writes again only
    /// when its own intended value changes.
    Report,
}

impl OtherWriters {
    /// The config value's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Repair => "repair",
            Self::Report => "report",
        }
    }

    /// Parses a config value (`repair` or `report`).
    ///
    /// # Errors
    /// Any other text, named in the message.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "repair" => Ok(Self::Repair),
            "report" => Ok(Self::Report),
            other => Err(format!(
                "unknown value {other:?} (expected \"repair\" or \"report\")"
            )),
        }
    }
}

/// A value found in place of the one Pinion wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignWrite<T> {
    /// What Pinion intended (and last wrote).
    pub from: T,
    /// What was found.
    pub to: T,
}

/// What to do after comparing a kept file with what Pinion intends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict<T> {
    /// A foreign write to report (`None`: none, or the one already
    /// reported and yielded to).
    pub event: Option<ForeignWrite<T>>,
    /// Whether Pinion writes its value again.
    pub repair: bool,
}

/// Compares `observed` with `intended`. `yielded`: the foreign value last
/// reported and kept (mode `report`); the same value again is no new
/// event. In mode `repair` every difference is a new event (Pinion wrote
/// its value back after the last one) and is repaired.
#[must_use]
pub fn judge<T: PartialEq + Clone>(
    intended: &T,
    observed: &T,
    yielded: Option<&T>,
    mode: OtherWriters,
) -> Verdict<T> {
    if observed == intended {
        return Verdict {
            event: None,
            repair: false,
        };
    }
    let repair = mode == OtherWriters::Repair;
    let known = !repair && yielded == Some(observed);
    Verdict {
        event: (!known).then(|| ForeignWrite {
            from: intended.clone(),
            to: observed.clone(),
        }),
        repair,
    }
}

/// The most reconcile passes a repair that does not stick waits before it
/// is tried again (`2^6`: with the default 10 s period, about 11 minutes).
pub const MAX_REPAIR_WAIT_PASSES: u32 = 64;

/// Repairs of one kept file that did not stick: another writer puts its
/// value back after every repair (a runtime or a node agent that owns the
/// file too). Each repair found undone at the next pass doubles the passes
/// to wait before the next one (1, 2, 4 … up to
/// [`MAX_REPAIR_WAIT_PASSES`]), so the two writers do not fight every
/// period. A pass that finds the file as intended starts over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairBackoff {
    /// Repairs in a row that found the file changed again at the next
    /// comparison (the first repair counts 1).
    pub repairs: u32,
    /// Passes still to skip before the next repair.
    pub wait: u32,
}

impl RepairBackoff {
    /// A pass found the file as intended: the next difference is repaired
    /// at once.
    pub fn held(&mut self) {
        *self = Self::default();
    }

    /// A pass found a difference that Pinion repairs: whether to repair it
    /// in this pass. Counts the repair and sets the wait before the next.
    pub fn repair_now(&mut self) -> bool {
        if self.wait > 0 {
            self.wait -= 1;
            return false;
        }
        self.repairs = self.repairs.saturating_add(1);
        let doubling = self
            .repairs
            .saturating_sub(1)
            .min(MAX_REPAIR_WAIT_PASSES.ilog2());
        self.wait = (1u32 << doubling) - 1;
        true
    }
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

    /// The passes (1-based) in which a repair that never sticks is tried.
    fn repair_passes(passes: u32) -> Vec<u32> {
        let mut backoff = RepairBackoff::default();
        (1..=passes).filter(|_| backoff.repair_now()).collect()
    }

    #[test]
    fn a_repair_that_does_not_stick_waits_twice_as_long_each_time() {
        assert_eq!(
            repair_passes(140),
            [1, 2, 4, 8, 16, 32, 64, 128],
            "waits of 0, 1, 3, 7, 15, 31, 63 passes"
        );
        // Capped: after that, once every MAX_REPAIR_WAIT_PASSES passes.
        let tried = repair_passes(1000);
        let gaps: Vec<u32> = tried.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|g| *g <= MAX_REPAIR_WAIT_PASSES),
            "{gaps:?}"
        );
        assert_eq!(gaps.last(), Some(&MAX_REPAIR_WAIT_PASSES));
    }

    #[test]
    fn a_repair_that_held_starts_the_backoff_over() {
        let mut backoff = RepairBackoff::default();
        assert!(backoff.repair_now());
        assert!(backoff.repair_now());
        assert!(!backoff.repair_now(), "waiting");
        backoff.held();
        assert_eq!(backoff, RepairBackoff::default());
        assert!(backoff.repair_now(), "a new difference is repaired at once");
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

    #[test]
    fn the_intended_value_is_no_foreign_write() {
        for mode in [OtherWriters::Repair, OtherWriters::Report] {
            let v = judge(&set("2-3"), &set("2-3"), Some(&set("0-7")), mode);
            assert_eq!(
                v,
                Verdict {
                    event: None,
                    repair: false
                }
            );
        }
    }

    #[test]
    fn repair_reports_and_repairs_every_difference() {
        let v = judge(&set("2-3"), &set("0-7"), None, OtherWriters::Repair);
        assert_eq!(
            v.event,
            Some(ForeignWrite {
                from: set("2-3"),
                to: set("0-7")
            })
        );
        assert!(v.repair);
        // The same value again after a repair is another write.
        let v = judge(
            &set("2-3"),
            &set("0-7"),
            Some(&set("0-7")),
            OtherWriters::Repair,
        );
        assert!(v.event.is_some() && v.repair);
    }

    #[test]
    fn report_reports_once_and_never_repairs() {
        let v = judge(&set("2-3"), &set("0-7"), None, OtherWriters::Report);
        assert_eq!(v.event.map(|e| e.to), Some(set("0-7")));
        assert!(!v.repair);
        let v = judge(
            &set("2-3"),
            &set("0-7"),
            Some(&set("0-7")),
            OtherWriters::Report,
        );
        assert_eq!(
            v,
            Verdict {
                event: None,
                repair: false
            }
        );
        // Another value is another write.
        let v = judge(
            &set("2-3"),
            &set("1"),
            Some(&set("0-7")),
            OtherWriters::Report,
        );
        assert_eq!(
            v.event.map(|e| (e.from, e.to)),
            Some((set("2-3"), set("1")))
        );
    }

    #[test]
    fn the_option_parses_its_two_values_and_names_a_bad_one() {
        assert_eq!(OtherWriters::parse("repair"), Ok(OtherWriters::Repair));
        assert_eq!(OtherWriters::parse("report"), Ok(OtherWriters::Report));
        assert_eq!(OtherWriters::default(), OtherWriters::Repair);
        let err = OtherWriters::parse("yield").expect_err("refused");
        assert!(err.contains("\"yield\""), "{err}");
    }

    #[test]
    fn seen_cpusets_compare_mems_only_where_pinion_sets_them() {
        let intended = SeenCpuset::intended(&placement("2-3", ""));
        assert_eq!(intended.mems, None);
        let seen = seen(Some("2-3"), Some("0-1")).compared_with(&intended);
        assert_eq!(seen, intended);
        let intended = SeenCpuset::intended(&placement("2-3", "0"));
        let seen = seen_of("2-3", "0-1").compared_with(&intended);
        assert_ne!(seen, intended);
        assert_eq!(seen.to_string(), "cpus 2-3 mems 0-1");
        assert_eq!(SeenCpuset::default().to_string(), "cpus (empty)");
    }

    fn seen_of(cpus: &str, mems: &str) -> SeenCpuset {
        seen(Some(cpus), Some(mems))
    }
}
