//! [`Pools`]: the shared pools of one machine, their sizes, pins and last
//! changes, and the current plan. Pure: every method takes what it needs
//! and returns what changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::layout::{allowed_cpus, layout, LayoutPool};
use super::sizing::{bounds, initial_size, resize, PoolLoad, Step};
use super::{Cpus, PoolError, PoolParams, PoolSize};
use crate::cpuset::CpuSet;

/// What a pool's members ask for, summed by the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDemand {
    /// Containers in the pool (0 removes it).
    pub members: usize,
    /// Sum of their CPU requests in milli-CPUs.
    pub requests_milli: u64,
    /// NUMA nodes the pool is bound to (`None` = any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<CpuSet>,
}

/// Why a pool's size changed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ChangeReason {
    /// First member: requests plus headroom.
    Created,
    /// Last member gone.
    Removed,
    /// Pressure at or above the grow threshold.
    Grow { pressure: f64 },
    /// Idle: pressure at or below the shrink threshold.
    Shrink { pressure: f64 },
    /// Its requests changed and the size left the bounds.
    Requests,
    /// An operator or advisor pinned its size or bounds.
    Pinned,
    /// Cut so that every pool and reclaim's minimum fit.
    Budget,
}

impl std::fmt::Display for ChangeReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Created => f.write_str("created"),
            Self::Removed => f.write_str("removed"),
            Self::Grow { pressure } => write!(f, "pressure {pressure:.1}%"),
            Self::Shrink { pressure } => write!(f, "idle (pressure {pressure:.1}%)"),
            Self::Requests => f.write_str("requests changed"),
            Self::Pinned => f.write_str("pinned"),
            Self::Budget => f.write_str("cut to fit the machine"),
        }
    }
}

/// One change of a pool's size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub pool: String,
    pub from: u32,
    pub to: u32,
    pub reason: ChangeReason,
    /// The reconcile period it happened in.
    pub period: u64,
}

/// One shared pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolEntry {
    pub members: usize,
    pub requests_milli: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa: Option<CpuSet>,
    /// The CPUs it should have.
    pub size: u32,
    /// Reconcile periods since its last load-driven change.
    pub quiet: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<Change>,
}

/// The CPU sets of the shared pools (by name) and of reclaim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolPlan {
    pub shared: BTreeMap<String, CpuSet>,
    pub reclaim: CpuSet,
}

/// The shared pools, their pins and the current plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pools {
    /// Missing in the CPU plugin's journal entries since issue 30
    /// ([`Pools::without_params`]): its owner sets them from its
    /// configuration at every start.
    #[serde(default)]
    params: PoolParams,
    /// Pins by pool name; kept while the pool does not exist.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pins: BTreeMap<String, PoolSize>,
    #[serde(default)]
    pools: BTreeMap<String, PoolEntry>,
    #[serde(default)]
    plan: PoolPlan,
    #[serde(default)]
    period: u64,
}

/// [`Pools`] borrowed without its parameters: what the CPU plugin keeps
/// in the agent's journal on every change (the parameters come from the
/// configuration at every start; their three floats were a third of the
/// entry's encoding). Read back as [`Pools`] with default parameters.
#[derive(Debug, Serialize)]
pub struct PoolsWithoutParams<'a> {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pins: &'a BTreeMap<String, PoolSize>,
    pools: &'a BTreeMap<String, PoolEntry>,
    plan: &'a PoolPlan,
    period: u64,
}

impl Pools {
    /// Everything but the parameters, to encode ([`PoolsWithoutParams`]).
    #[must_use]
    pub fn without_params(&self) -> PoolsWithoutParams<'_> {
        PoolsWithoutParams {
            pins: &self.pins,
            pools: &self.pools,
            plan: &self.plan,
            period: self.period,
        }
    }

    /// No pools yet.
    #[must_use]
    pub fn new(params: PoolParams) -> Self {
        Self {
            params,
            ..Self::default()
        }
    }

    /// The parameters.
    #[must_use]
    pub fn params(&self) -> &PoolParams {
        &self.params
    }

    /// Replaces the parameters (a config reload); sizes follow at the next
    /// [`Pools::sync`] or [`Pools::reconcile`].
    pub fn set_params(&mut self, params: PoolParams) {
        self.params = params;
    }

    /// The current plan.
    #[must_use]
    pub fn plan(&self) -> &PoolPlan {
        &self.plan
    }

    /// The pools by name.
    #[must_use]
    pub fn entries(&self) -> &BTreeMap<String, PoolEntry> {
        &self.pools
    }

    /// Every pin by pool name.
    #[must_use]
    pub fn pins(&self) -> &BTreeMap<String, PoolSize> {
        &self.pins
    }

    /// Whether pool `name` may be pinned: it is pinned already (the pin
    /// changes), or fewer than [`super::MAX_PINS`] pools are.
    #[must_use]
    pub fn may_pin(&self, name: &str) -> bool {
        self.pins.contains_key(name) || self.pins.len() < super::MAX_PINS
    }

    /// The pin of `name` (`auto` when none).
    #[must_use]
    pub fn pin_of(&self, name: &str) -> PoolSize {
        self.pins.get(name).copied().unwrap_or_default()
    }

    /// Reconcile periods so far.
    #[must_use]
    pub fn period(&self) -> u64 {
        self.period
    }

    /// `[min, max]` of pool `name` for `requests_milli`.
    #[must_use]
    pub fn bounds_of(&self, name: &str, requests_milli: u64) -> (u32, u32) {
        bounds(&self.params, requests_milli, self.pin_of(name))
    }

    /// Takes the members' demands (every pool; absent or memberless pools
    /// are removed, new ones created) and clamps sizes into their bounds.
    /// The plan is not laid out again: call [`Pools::relayout`].
    pub fn sync(&mut self, demands: &BTreeMap<String, PoolDemand>) -> Vec<Change> {
        let mut changes = Vec::new();
        let gone: Vec<String> = self
            .pools
            .keys()
            .filter(|name| demands.get(*name).is_none_or(|d| d.members == 0))
            .cloned()
            .collect();
        for name in gone {
            if let Some(entry) = self.pools.remove(&name) {
                changes.push(self.change(&name, entry.size, 0, ChangeReason::Removed));
            }
        }
        for (name, demand) in demands.iter().filter(|(_, d)| d.members > 0) {
            let pin = self.pin_of(name);
            let (min, max) = bounds(&self.params, demand.requests_milli, pin);
            match self.pools.get(name).map(|e| e.size) {
                None => {
                    let size = initial_size(&self.params, demand.requests_milli, pin);
                    let change = self.change(name, 0, size, ChangeReason::Created);
                    self.pools.insert(
                        name.clone(),
                        PoolEntry {
                            members: demand.members,
                            requests_milli: demand.requests_milli,
                            numa: demand.numa.clone(),
                            size,
                            quiet: 0,
                            last_change: Some(change.clone()),
                        },
                    );
                    changes.push(change);
                }
                Some(size) => {
                    let clamped = size.clamp(min, max);
                    let reason = ChangeReason::Requests;
                    let change =
                        (clamped != size).then(|| self.change(name, size, clamped, reason));
                    if let Some(entry) = self.pools.get_mut(name) {
                        entry.members = demand.members;
                        entry.requests_milli = demand.requests_milli;
                        entry.numa.clone_from(&demand.numa);
                        entry.size = clamped;
                        if let Some(change) = change {
                            entry.last_change = Some(change.clone());
                            changes.push(change);
                        }
                    }
                }
            }
        }
        changes
    }

    /// Pins pool `name` (`auto` removes the pin) and clamps its size at once.
    pub fn set_pin(&mut self, name: &str, pin: PoolSize) -> Option<Change> {
        if pin == PoolSize::Auto {
            self.pins.remove(name);
        } else {
            self.pins.insert(name.to_string(), pin);
        }
        let entry = self.pools.get(name)?;
        let (min, max) = bounds(&self.params, entry.requests_milli, pin);
        let to = match pin {
            PoolSize::Fixed(_) => min,
            _ => entry.size.clamp(min, max),
        };
        let from = entry.size;
        let change = self.change(name, from, to, ChangeReason::Pinned);
        let entry = self.pools.get_mut(name)?;
        entry.quiet = 0;
        (from != to).then(|| {
            entry.size = to;
            entry.last_change = Some(change.clone());
            change
        })
    }

    /// Whether `demands` fit on `cpus`: every pool's minimum plus reclaim's
    /// minimum on the available CPUs, and every NUMA-bound pool's minimum
    /// on its nodes (with the other pools bound inside those nodes).
    pub fn check(
        &self,
        cpus: Cpus<'_>,
        demands: &BTreeMap<String, PoolDemand>,
    ) -> Result<(), PoolError> {
        let available = cpus.available();
        let live = || demands.iter().filter(|(_, d)| d.members > 0);
        let floor = |name: &str, d: &PoolDemand| self.bounds_of(name, d.requests_milli).0 as usize;
        let needed: usize = live().map(|(name, d)| floor(name, d)).sum();
        let reclaim_min = self.params.reclaim_min as usize;
        if needed + reclaim_min > available.len() {
            return Err(PoolError::Insufficient {
                needed,
                reclaim_min,
                available: available.len(),
            });
        }
        for (name, demand) in live() {
            let Some(nodes) = &demand.numa else { continue };
            let here = allowed_cpus(cpus.topology, &available, Some(nodes));
            let needed: usize = live()
                .filter(|(_, d)| d.numa.as_ref().is_some_and(|n| n.is_subset(nodes)))
                .map(|(other, d)| floor(other, d))
                .sum();
            if needed > here.len() {
                return Err(PoolError::InsufficientOnNodes {
                    pool: name.clone(),
                    nodes: nodes.to_string(),
                    needed,
                    available: here.len(),
                });
            }
        }
        Ok(())
    }

    /// Fits the sizes to the machine (pools above their minimum are cut
    /// first, the most spare CPUs first; pins are restored when they fit
    /// again) and lays the pools out on `cpus`, starting from the current plan.
    pub fn relayout(&mut self, cpus: Cpus<'_>) -> Vec<Change> {
        let before = self.sizes();
        let changes = self.fit_and_lay_out(cpus);
        self.net(changes, &before)
    }

    /// [`Pools::relayout`]'s work, its changes one after the other.
    fn fit_and_lay_out(&mut self, cpus: Cpus<'_>) -> Vec<Change> {
        let available = cpus.available();
        let mut changes = self.restore_fixed_pins();
        changes.extend(self.fit(cpus, &available));
        let pools: Vec<LayoutPool<'_>> = self
            .pools
            .iter()
            .map(|(name, entry)| LayoutPool {
                name,
                size: entry.size,
                numa: entry.numa.as_ref(),
            })
            .collect();
        let plan = layout(cpus.topology, &available, &pools, &self.plan.shared);
        self.plan = plan;
        changes
    }

    /// One reconcile period: every pool's load-driven step, then
    /// [`Pools::relayout`]. Pools without a load in `loads` keep their size.
    pub fn reconcile(&mut self, cpus: Cpus<'_>, loads: &BTreeMap<String, PoolLoad>) -> Vec<Change> {
        self.period += 1;
        let before = self.sizes();
        let mut changes = Vec::new();
        let names: Vec<String> = self.pools.keys().cloned().collect();
        for name in names {
            let pin = self.pin_of(&name);
            let Some(entry) = self.pools.get(&name) else {
                continue;
            };
            let range = bounds(&self.params, entry.requests_milli, pin);
            let quiet = entry.quiet.saturating_add(1);
            let step = match pin {
                PoolSize::Fixed(_) => None,
                _ => resize(&self.params, entry.size, range, quiet, loads.get(&name)),
            };
            let from = entry.size;
            let change = step.map(|(to, why)| {
                let reason = match why {
                    Step::Grow { pressure } => ChangeReason::Grow { pressure },
                    Step::Shrink { pressure } => ChangeReason::Shrink { pressure },
                };
                self.change(&name, from, to, reason)
            });
            if let Some(entry) = self.pools.get_mut(&name) {
                entry.quiet = quiet;
                if let Some(change) = change {
                    entry.size = change.to;
                    entry.quiet = 0;
                    entry.last_change = Some(change.clone());
                    changes.push(change);
                }
            }
        }
        changes.extend(self.fit_and_lay_out(cpus));
        self.net(changes, &before)
    }

    /// Every pool's size and last change now.
    fn sizes(&self) -> BTreeMap<String, (u32, Option<Change>)> {
        self.pools
            .iter()
            .map(|(name, e)| (name.clone(), (e.size, e.last_change.clone())))
            .collect()
    }

    /// `changes`, made one after the other since `before`, as one change
    /// per pool from its size then: a pool raised and cut back to where it
    /// was has none, and keeps its last change (before the forty-fifth
    /// session a fixed pin that no longer fitted was raised and cut in
    /// every period, and each period saved as a change).
    fn net(
        &mut self,
        changes: Vec<Change>,
        before: &BTreeMap<String, (u32, Option<Change>)>,
    ) -> Vec<Change> {
        let mut last: Vec<Change> = Vec::new();
        for change in changes {
            match last.iter_mut().find(|c| c.pool == change.pool) {
                Some(seen) => {
                    let from = seen.from;
                    *seen = Change { from, ..change };
                }
                None => last.push(change),
            }
        }
        let mut out = Vec::new();
        for change in last {
            let Some((size, previous)) = before.get(&change.pool) else {
                out.push(change);
                continue;
            };
            let entry = self.pools.get_mut(&change.pool);
            if change.to == *size {
                if let Some(entry) = entry {
                    entry.last_change.clone_from(previous);
                }
                continue;
            }
            let change = Change {
                from: *size,
                ..change
            };
            if let Some(entry) = entry {
                entry.last_change = Some(change.clone());
            }
            out.push(change);
        }
        out
    }

    /// Fixed pins win over earlier budget cuts once they fit again.
    fn restore_fixed_pins(&mut self) -> Vec<Change> {
        let mut changes = Vec::new();
        for (name, pin) in &self.pins {
            let Some(entry) = self.pools.get(name) else {
                continue;
            };
            let (min, _) = bounds(&self.params, entry.requests_milli, *pin);
            if matches!(pin, PoolSize::Fixed(_)) && entry.size != min {
                changes.push(self.change(name, entry.size, min, ChangeReason::Pinned));
            }
        }
        self.apply(&changes);
        changes
    }

    /// Cuts sizes until they fit `available` minus reclaim's minimum, and
    /// every NUMA-bound pool (with the pools bound inside its nodes) its
    /// nodes: first down to each pool's minimum, then (only when the
    /// minimums do not fit, which admission prevents) down to one CPU each.
    fn fit(&mut self, cpus: Cpus<'_>, available: &CpuSet) -> Vec<Change> {
        let mut sizes: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for (name, entry) in &self.pools {
            let floor = self.bounds_of(name, entry.requests_milli).0;
            sizes.insert(name.clone(), (entry.size, floor));
        }
        let everyone: Vec<String> = sizes.keys().cloned().collect();
        let capacity = available
            .len()
            .saturating_sub(self.params.reclaim_min as usize);
        cut(&mut sizes, &everyone, capacity);
        for entry in self.pools.values() {
            let Some(nodes) = &entry.numa else { continue };
            let inside: Vec<String> = self
                .pools
                .iter()
                .filter(|(_, e)| e.numa.as_ref().is_some_and(|n| n.is_subset(nodes)))
                .map(|(name, _)| name.clone())
                .collect();
            let capacity = allowed_cpus(cpus.topology, available, Some(nodes)).len();
            cut(&mut sizes, &inside, capacity);
        }
        let changes: Vec<Change> = sizes
            .iter()
            .filter_map(|(name, &(size, _))| {
                let from = self.pools.get(name)?.size;
                (from != size).then(|| self.change(name, from, size, ChangeReason::Budget))
            })
            .collect();
        self.apply(&changes);
        changes
    }

    fn apply(&mut self, changes: &[Change]) {
        for change in changes {
            if let Some(entry) = self.pools.get_mut(&change.pool) {
                entry.size = change.to;
                entry.last_change = Some(change.clone());
            }
        }
    }

    fn change(&self, pool: &str, from: u32, to: u32, reason: ChangeReason) -> Change {
        Change {
            pool: pool.to_string(),
            from,
            to,
            reason,
            period: self.period,
        }
    }
}

/// Cuts the sizes of `members` (name → (size, minimum)) until they add up to
/// at most `capacity`: the pool with the most CPUs above its minimum first,
/// then, if the minimums alone do not fit, above one CPU.
fn cut(sizes: &mut BTreeMap<String, (u32, u32)>, members: &[String], capacity: usize) {
    let total: usize = members
        .iter()
        .filter_map(|name| sizes.get(name))
        .map(|(size, _)| *size as usize)
        .sum();
    let mut excess = total.saturating_sub(capacity);
    for use_floor in [true, false] {
        while excess > 0 {
            let victim = members
                .iter()
                .filter_map(|name| {
                    let &(size, floor) = sizes.get(name)?;
                    let limit = if use_floor { floor } else { 1 };
                    Some((size.saturating_sub(limit), name))
                })
                .filter(|(spare, _)| *spare > 0)
                .max();
            let Some((spare, name)) = victim else { break };
            let cut = spare.min(u32::try_from(excess).unwrap_or(u32::MAX));
            if let Some((size, _)) = sizes.get_mut(name) {
                *size -= cut;
            }
            excess -= cut as usize;
        }
    }
}
