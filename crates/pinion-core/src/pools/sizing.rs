//! Per-period sizing of one shared pool: its bounds and the closed-loop
//! step (grow under pressure, shrink when idle, hysteresis and cooldown).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{request_cpus, PoolParams, PoolSize};
use crate::cpuset::CpuSet;

/// A pool's measured load over the last period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolLoad {
    /// CPU pressure in percent (cgroup v2 `cpu.pressure` "some avg10", the
    /// highest among the pool's containers; on cgroup v1 the members'
    /// throttling, [`load_from_throttling`]; and the estimate from the busy
    /// CPUs, [`PoolLoad::from_usage`]).
    pub pressure: f64,
    /// CPUs busy on average (the sum over the pool's containers), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<f64>,
}

/// Busy fraction of a pool from which the cgroup v1 estimate reports
/// pressure (it reaches 100 % when the pool is fully busy).
pub const SATURATION_START: f64 = 0.8;

impl PoolLoad {
    /// The cgroup v1 estimate (no PSI there): `usage` CPUs busy in a pool of
    /// `size` CPUs, `throttled` = fraction of periods throttled (0–1). The
    /// pressure is the larger of the throttled percentage and the
    /// saturation: 0 % up to [`SATURATION_START`] busy, rising linearly to
    /// 100 % when every CPU is busy.
    #[must_use]
    pub fn from_usage(usage: f64, size: u32, throttled: f64) -> Self {
        let usage = if usage.is_finite() {
            usage.max(0.0)
        } else {
            0.0
        };
        let busy = if size == 0 {
            1.0
        } else {
            usage / f64::from(size)
        };
        let saturation = ((busy - SATURATION_START) / (1.0 - SATURATION_START)).clamp(0.0, 1.0);
        let throttled = if throttled.is_finite() {
            throttled.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Self {
            pressure: 100.0 * saturation.max(throttled),
            usage: Some(usage),
        }
    }
}

/// A pool's load from its two measures: `on_cpus`, the load on the pool's
/// CPUs (from `/proc/stat`, [`load_from_cpu_times`]), and `psi`, its
/// members' CPU pressure (cgroup v2 `cpu.pressure` "some avg10", the
/// highest among them; on cgroup v1 their throttling,
/// [`load_from_throttling`]). The pressure is the higher of the two — PSI sees
/// tasks waiting for a CPU, the estimate sees CPUs that are all busy —
/// and the busy CPUs are the measured ones. `None` when neither measured.
#[must_use]
pub fn combine_loads(on_cpus: Option<PoolLoad>, psi: Option<PoolLoad>) -> Option<PoolLoad> {
    match (on_cpus, psi) {
        (None, None) => None,
        (Some(load), None) | (None, Some(load)) => Some(load),
        (Some(on_cpus), Some(psi)) => Some(PoolLoad {
            pressure: on_cpus.pressure.max(psi.pressure),
            usage: on_cpus.usage.or(psi.usage),
        }),
    }
}

/// One member pod's CFS bandwidth throttling over the last period, from
/// two samples of its cgroup v1 `cpu.stat` (and `cpuacct.usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Throttling {
    /// Fraction (0–1) of the pod's CFS periods in which it was throttled
    /// (`nr_throttled / nr_periods` between the samples; 0 without a quota
    /// or without a runnable period).
    pub throttled: f64,
    /// CPUs the pod kept busy on average, when its usage was read.
    pub busy: Option<f64>,
}

/// The pressure of a pool on cgroup v1, where there is no PSI, from its
/// members' throttling: the highest member's throttled fraction as a
/// percentage. This is the scale of PSI "some avg10" (the percentage of
/// time some task waited for a CPU), so `growPressure` and
/// `shrinkPressure` mean the same on both versions: a pool none of whose
/// members was throttled gets no pressure from this input; one with a
/// member throttled in at least `growPressure` % of its periods (10 % by
/// default, so certainly one throttled in most of them) grows. The usage
/// is the sum of the members' busy CPUs when every member's was read
/// (else unknown); busy CPUs alone add no pressure here — the load on the
/// pool's CPUs ([`load_from_cpu_times`]) sees a saturated pool. Values
/// that are not finite count as 0, fractions are clamped to 0–1. `None`
/// when no member was measured.
#[must_use]
pub fn load_from_throttling(members: &[Throttling]) -> Option<PoolLoad> {
    let finite = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
    let highest = members
        .iter()
        .map(|m| finite(m.throttled).min(1.0))
        .reduce(f64::max)?;
    let usage = members
        .iter()
        .map(|m| m.busy.map(finite))
        .sum::<Option<f64>>();
    Some(PoolLoad {
        pressure: 100.0 * highest,
        usage,
    })
}

/// `[min, max]` CPUs of a pool whose members request `requests_milli`:
/// `auto` = `[requests, requests + max_headroom]`; a fixed size or pinned
/// bounds never go below the requests.
#[must_use]
pub fn bounds(params: &PoolParams, requests_milli: u64, pin: PoolSize) -> (u32, u32) {
    let floor = request_cpus(requests_milli);
    match pin {
        PoolSize::Auto => (floor, floor.saturating_add(params.max_headroom)),
        PoolSize::Fixed(n) => {
            let n = n.max(floor);
            (n, n)
        }
        PoolSize::Bounds { min, max } => {
            let min = min.max(floor);
            (min, max.max(min))
        }
    }
}

/// The size of a new pool: requests plus headroom, within its bounds.
#[must_use]
pub fn initial_size(params: &PoolParams, requests_milli: u64, pin: PoolSize) -> u32 {
    let (min, max) = bounds(params, requests_milli, pin);
    match pin {
        PoolSize::Fixed(_) => min,
        _ => min.saturating_add(params.headroom).min(max),
    }
}

/// Why a pool's size changes in one period.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Step {
    /// Pressure at or above `grow_pressure`.
    Grow { pressure: f64 },
    /// Pressure at or below `shrink_pressure` and enough idle CPUs.
    Shrink { pressure: f64 },
}

/// One period of the closed loop for a pool of `size` CPUs within
/// `[min, max]`, `quiet` periods after its last change: `Some((new size,
/// why))` or `None` (no change). Sizes outside the bounds are not this
/// function's business (see [`super::Pools`]: they are clamped at once).
#[must_use]
pub fn resize(
    params: &PoolParams,
    size: u32,
    (min, max): (u32, u32),
    quiet: u32,
    load: Option<&PoolLoad>,
) -> Option<(u32, Step)> {
    let load = load?;
    if quiet < params.cooldown || !load.pressure.is_finite() {
        return None;
    }
    let step = params.step.max(1);
    if load.pressure >= params.grow_pressure && size < max {
        let to = size.saturating_add(step).min(max);
        return Some((
            to,
            Step::Grow {
                pressure: load.pressure,
            },
        ));
    }
    if load.pressure <= params.shrink_pressure && size > min {
        let to = size.saturating_sub(step).max(min);
        let idle_enough = load
            .usage
            .is_none_or(|busy| busy <= f64::from(to) * params.shrink_utilization);
        if idle_enough {
            return Some((
                to,
                Step::Shrink {
                    pressure: load.pressure,
                },
            ));
        }
    }
    None
}

/// Cumulative time of one CPU (`/proc/stat`, in clock ticks): busy (user,
/// nice, system, irq, softirq, steal) and total (busy plus idle and
/// iowait).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub busy: u64,
    pub total: u64,
}

/// The load of a pool measured on its CPUs between two samples of every
/// CPU's time: the busy CPUs (the sum over `cpus` of each one's busy
/// fraction) turned into a pressure by [`PoolLoad::from_usage`]. `None`
/// when no CPU of the pool was sampled twice or no time passed. Counters
/// that went backwards (a CPU taken offline and back) count as idle.
#[must_use]
pub fn load_from_cpu_times(
    before: &BTreeMap<u32, CpuTime>,
    after: &BTreeMap<u32, CpuTime>,
    cpus: &CpuSet,
) -> Option<PoolLoad> {
    let mut busy = 0.0f64;
    let mut sampled = false;
    for cpu in cpus.iter() {
        let (Some(a), Some(b)) = (before.get(&cpu), after.get(&cpu)) else {
            continue;
        };
        let total = b.total.saturating_sub(a.total);
        if total == 0 {
            continue;
        }
        sampled = true;
        busy += (b.busy.saturating_sub(a.busy).min(total)) as f64 / total as f64;
    }
    let size = u32::try_from(cpus.len()).unwrap_or(u32::MAX);
    sampled.then(|| PoolLoad::from_usage(busy, size, 0.0))
}

#[cfg(test)]
mod measure_tests {
    use super::*;

    #[test]
    fn psi_and_the_load_on_the_cpus_combine_to_the_higher_pressure() {
        let on_cpus = PoolLoad::from_usage(1.0, 4, 0.0);
        let psi = PoolLoad {
            pressure: 35.0,
            usage: None,
        };
        let both = combine_loads(Some(on_cpus), Some(psi)).expect("measured");
        assert_eq!(both.pressure, 35.0);
        assert_eq!(both.usage, Some(1.0));
        // Saturated CPUs with no waiting task: the estimate wins.
        let saturated = PoolLoad::from_usage(4.0, 4, 0.0);
        let calm = PoolLoad {
            pressure: 0.5,
            usage: None,
        };
        assert_eq!(
            combine_loads(Some(saturated), Some(calm)).map(|l| l.pressure),
            Some(100.0)
        );
        assert_eq!(combine_loads(None, Some(psi)), Some(psi));
        assert_eq!(combine_loads(Some(on_cpus), None), Some(on_cpus));
        assert_eq!(combine_loads(None, None), None);
    }

    fn member(throttled: f64, busy: Option<f64>) -> Throttling {
        Throttling { throttled, busy }
    }

    #[test]
    fn members_never_throttled_give_no_pressure() {
        let load = load_from_throttling(&[member(0.0, Some(0.5)), member(0.0, Some(1.0))])
            .expect("measured");
        assert_eq!(load.pressure, 0.0);
        assert_eq!(load.usage, Some(1.5));
        let params = PoolParams::default();
        assert!(load.pressure <= params.shrink_pressure);
        assert_eq!(load_from_throttling(&[]), None);
    }

    #[test]
    fn a_member_throttled_in_most_periods_grows_its_pool() {
        let params = PoolParams::default();
        for throttled in [0.51, 0.75, 1.0] {
            let load = load_from_throttling(&[member(0.0, None), member(throttled, None)])
                .expect("measured");
            assert!(
                load.pressure >= params.grow_pressure,
                "{throttled}: {load:?}"
            );
            assert_eq!(
                resize(&params, 3, (2, 6), params.cooldown, Some(&load)),
                Some((
                    4,
                    Step::Grow {
                        pressure: load.pressure
                    }
                )),
                "{throttled}"
            );
        }
    }

    #[test]
    fn throttling_is_a_percentage_on_the_psi_scale_and_the_highest_member_counts() {
        let load = load_from_throttling(&[member(0.05, Some(1.0)), member(0.25, Some(0.5))])
            .expect("measured");
        assert!((load.pressure - 25.0).abs() < 1e-9, "{load:?}");
        assert_eq!(load.usage, Some(1.5));
        // In the hysteresis band: neither grows nor shrinks by default.
        let calm = load_from_throttling(&[member(0.05, None)]).expect("measured");
        let params = PoolParams::default();
        assert!(calm.pressure > params.shrink_pressure && calm.pressure < params.grow_pressure);
        assert_eq!(
            resize(&params, 3, (2, 6), params.cooldown, Some(&calm)),
            None
        );
    }

    #[test]
    fn unread_usage_is_unknown_and_bad_values_count_as_zero() {
        let partly =
            load_from_throttling(&[member(0.0, Some(2.0)), member(0.0, None)]).expect("measured");
        assert_eq!(partly.usage, None);
        let bad = load_from_throttling(&[
            member(f64::NAN, Some(f64::INFINITY)),
            member(-1.0, Some(-2.0)),
            member(7.0, Some(1.0)),
        ])
        .expect("measured");
        assert_eq!(bad.pressure, 100.0, "a fraction above 1 is clamped");
        assert_eq!(bad.usage, Some(1.0));
        let nan = load_from_throttling(&[member(f64::NAN, None)]).expect("measured");
        assert_eq!(nan.pressure, 0.0);
    }

    #[test]
    fn throttling_stands_in_for_psi_in_the_combined_load() {
        let on_cpus = PoolLoad::from_usage(1.0, 4, 0.0);
        let throttled = load_from_throttling(&[member(0.6, Some(0.9))]);
        let both = combine_loads(Some(on_cpus), throttled).expect("measured");
        assert!((both.pressure - 60.0).abs() < 1e-9, "{both:?}");
        assert_eq!(both.usage, Some(1.0), "the busy CPUs are the measured ones");
    }

    fn times(samples: &[(u32, u64, u64)]) -> BTreeMap<u32, CpuTime> {
        samples
            .iter()
            .map(|&(cpu, busy, total)| (cpu, CpuTime { busy, total }))
            .collect()
    }

    #[test]
    fn a_pool_is_as_loaded_as_its_cpus_were_between_the_samples() {
        let before = times(&[(0, 0, 0), (1, 100, 1000), (2, 0, 0), (3, 0, 0)]);
        // CPU 1 fully busy for 100 ticks, CPU 2 half busy, CPU 3 idle; CPU 0
        // is not in the pool.
        let after = times(&[(0, 100, 100), (1, 200, 1100), (2, 50, 100), (3, 0, 100)]);
        let pool = CpuSet::from_iter([1, 2, 3]);
        let load = load_from_cpu_times(&before, &after, &pool).expect("measured");
        assert_eq!(load.usage, Some(1.5));
        assert_eq!(load, PoolLoad::from_usage(1.5, 3, 0.0));
        // Fully busy: 100 % pressure; a counter going backwards is idle.
        let full =
            load_from_cpu_times(&before, &after, &CpuSet::from_iter([0, 1])).expect("measured");
        assert!((full.pressure - 100.0).abs() < 1e-9, "{full:?}");
        let back = times(&[(1, 50, 500)]);
        assert_eq!(
            load_from_cpu_times(&after, &back, &CpuSet::from_iter([1])),
            None,
            "no time passed forward"
        );
        assert_eq!(
            load_from_cpu_times(&before, &after, &CpuSet::from_iter([7])),
            None
        );
    }
}
