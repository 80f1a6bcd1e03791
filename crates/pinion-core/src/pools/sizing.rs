//! Per-period sizing of one shared pool: its bounds and the closed-loop
//! step (grow under pressure, shrink when idle, hysteresis and cooldown).

use serde::{Deserialize, Serialize};

use super::{request_cpus, PoolParams, PoolSize};

/// A pool's measured load over the last period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolLoad {
    /// CPU pressure in percent (cgroup v2 `cpu.pressure` "some avg10", the
    /// highest among the pool's containers; on cgroup v1 an estimate from
    /// usage and throttling, see [`PoolLoad::from_usage`]).
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
