//! Role-based CPU pools on one machine (katalyst's QoS levels, spec
//! `qrm.md` §7): the decisions, with no I/O.
//!
//! The machine's online CPUs split into
//! * the **system** pool: the reserved CPUs (`system_cores`);
//! * **dedicated** CPUs: exclusive CPUs of `dedicated_cores` containers (and
//!   of Guaranteed pods without annotations), chosen by the static policy's
//!   allocator outside this module, plus CPUs *held back* on NUMA nodes a
//!   `numa_exclusive` pod owns; this module only sees their union;
//! * named **shared** pools (`shared_cores`, `cpuset_pool`): created on first
//!   use, sized from the sum of their members' requests rounded up plus a
//!   headroom, spread evenly over the NUMA nodes (or kept on the nodes of a
//!   NUMA-bound pool), removed when their last member goes;
//! * the **reclaim** pool (`reclaimed_cores`): every CPU the others leave,
//!   never fewer than `reclaim_min` as long as the requests allow it.
//!
//! CPUs isolated at boot (`isolcpus=`) are in no shared or reclaim pool.
//!
//! [`Pools`] keeps each shared pool's size and its last change. A pool's
//! size moves only within its bounds — `[requests, requests + max_headroom]`,
//! or what an operator pinned ([`PoolSize`]) — and, once per reconcile
//! period, with the pool's measured load ([`sizing`]): grow under pressure,
//! shrink when idle, with a hysteresis band and a cooldown. [`layout`] turns
//! sizes into CPU sets, moving as few CPUs as it can from the previous plan.

pub mod layout;
pub mod sizing;
mod state;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::topology::Topology;

pub use layout::{layout, LayoutPool};
pub use sizing::{
    bounds, combine_loads, load_from_cpu_times, load_from_throttling, resize, CpuTime, PoolLoad,
    Throttling,
};
pub use state::{Change, ChangeReason, PoolDemand, PoolEntry, PoolPlan, Pools, PoolsWithoutParams};

/// Parameters of pool sizing (agent config `qosResourceManager.pools`;
/// defaults in [`PoolParams::default`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolParams {
    /// CPUs a new pool gets above its members' requests (rounded up).
    pub headroom: u32,
    /// The most CPUs a pool may hold above its requests when sizing itself.
    pub max_headroom: u32,
    /// The reclaim pool never gets fewer CPUs than this (admissions that
    /// would break it are refused).
    pub reclaim_min: u32,
    /// Grow when the pool's pressure (`some avg10`, percent) is at least this.
    pub grow_pressure: f64,
    /// Shrink only when the pressure is at most this (the band in between is
    /// the hysteresis: no change).
    pub shrink_pressure: f64,
    /// …and when the busy CPUs would fill at most this fraction of the
    /// smaller pool (when usage is measured).
    pub shrink_utilization: f64,
    /// The most CPUs one period adds to or removes from one pool.
    pub step: u32,
    /// Periods a pool waits after a change before the next load-driven one.
    pub cooldown: u32,
}

impl Default for PoolParams {
    fn default() -> Self {
        Self {
            headroom: 1,
            max_headroom: 8,
            reclaim_min: 1,
            grow_pressure: 10.0,
            shrink_pressure: 1.0,
            shrink_utilization: 0.6,
            step: 1,
            cooldown: 2,
        }
    }
}

impl PoolParams {
    /// Checks the parameters: thresholds finite and ordered, step ≥ 1.
    pub fn validate(&self) -> Result<(), PoolError> {
        let thresholds_ok = self.grow_pressure.is_finite()
            && self.shrink_pressure.is_finite()
            && self.shrink_pressure >= 0.0
            && self.shrink_pressure < self.grow_pressure;
        if !thresholds_ok {
            return Err(PoolError::Params {
                reason: format!(
                    "shrinkPressure {} must be at least 0 and below growPressure {}",
                    self.shrink_pressure, self.grow_pressure
                ),
            });
        }
        if !(self.shrink_utilization > 0.0 && self.shrink_utilization <= 1.0) {
            return Err(PoolError::Params {
                reason: format!(
                    "shrinkUtilization {} must be in (0, 1]",
                    self.shrink_utilization
                ),
            });
        }
        if self.step == 0 {
            return Err(PoolError::Params {
                reason: "step must be at least 1".to_string(),
            });
        }
        Ok(())
    }
}

/// How a pool is sized: by itself, or pinned by an operator or advisor
/// (`pinion pools set NAME=SIZE|MIN-MAX|auto`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolSize {
    /// Within `[requests, requests + max_headroom]`, following the load.
    #[default]
    Auto,
    /// Exactly this many CPUs (still at least the requests).
    Fixed(u32),
    /// Following the load within these bounds (min at least the requests).
    Bounds { min: u32, max: u32 },
}

impl fmt::Display for PoolSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Bounds { min, max } => write!(f, "{min}-{max}"),
        }
    }
}

impl FromStr for PoolSize {
    type Err = PoolError;
    fn from_str(text: &str) -> Result<Self, PoolError> {
        let bad = || PoolError::BadSize {
            text: text.to_string(),
        };
        let text_trimmed = text.trim();
        if text_trimmed == "auto" {
            return Ok(Self::Auto);
        }
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| bad());
        match text_trimmed.split_once('-') {
            Some((min, max)) => {
                let (min, max) = (number(min)?, number(max)?);
                if min == 0 || min > max {
                    return Err(bad());
                }
                Ok(Self::Bounds { min, max })
            }
            None => match number(text_trimmed)? {
                0 => Err(bad()),
                n => Ok(Self::Fixed(n)),
            },
        }
    }
}

/// The CPUs pools may use: online minus reserved minus `held` (dedicated
/// CPUs and CPUs held back on exclusive NUMA nodes) minus the CPUs the
/// kernel isolates at boot (`isolcpus=`, `Topology::isolated`), which are
/// never in a shared or reclaim pool (only a dedicated container that asks
/// for them gets them).
#[derive(Debug, Clone, Copy)]
pub struct Cpus<'a> {
    pub topology: &'a Topology,
    pub reserved: &'a CpuSet,
    pub held: &'a CpuSet,
}

impl Cpus<'_> {
    /// The CPUs shared pools and reclaim share.
    #[must_use]
    pub fn available(&self) -> CpuSet {
        let mut cpus = self.topology.all_cpus().difference(self.reserved);
        cpus.difference_with(self.held);
        cpus.difference_with(self.topology.isolated());
        cpus
    }
}

/// Most pools pinned at once. The pins live in the CPU plugin's state
/// record beside the pools, which must stay within the journal's record
/// limit; an operator pins a handful.
pub const MAX_PINS: usize = 256;

/// Errors of pool decisions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("not enough cpus for the pools: shared pools need {needed} cpus and reclaim at least {reclaim_min}, {available} are available")]
    Insufficient {
        needed: usize,
        reclaim_min: usize,
        available: usize,
    },
    #[error("not enough cpus on numa nodes {nodes} for pool {pool}: it needs {needed}, {available} are available there")]
    InsufficientOnNodes {
        pool: String,
        nodes: String,
        needed: usize,
        available: usize,
    },
    #[error("invalid pool size {text:?} (expected a number of cpus, MIN-MAX or auto)")]
    BadSize { text: String },
    #[error("invalid pool parameters: {reason}")]
    Params { reason: String },
}

/// CPUs for `milli` milli-CPUs of requests: rounded up, at least 1 (a pool
/// whose members request nothing still needs a CPU to run on).
#[must_use]
pub fn request_cpus(milli: u64) -> u32 {
    u32::try_from(milli.div_ceil(1000))
        .unwrap_or(u32::MAX)
        .max(1)
}
