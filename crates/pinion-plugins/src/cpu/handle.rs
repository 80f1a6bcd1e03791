//! A CPU plugin shared by its gRPC server and the two things beside it
//! that change its pools: the closed loop (measured load every period) and
//! the operator or advisor (`pinion pools set`). One owner of the state —
//! the plugin behind one mutex — and these are its three doors.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pinion_api::local::{PoolView, Pools as PoolsView};
use pinion_core::pools::{
    combine_loads, load_from_cpu_times, load_from_throttling, CpuTime, PoolLoad, PoolSize,
    Throttling,
};
use pinion_host::pod_cgroups::{PodCgroups, PodCpuSource, V1PodCgroups, V1PodCounters};

use super::{CpuPlugin, ReconcileReport};
use crate::grpc::GrpcPlugin;
use crate::PluginError;
use pinion_core::Topology;

/// Why a pool could not be set.
#[derive(Debug, thiserror::Error)]
pub enum SetPoolError {
    #[error("pool {pool}: {source}")]
    Size {
        pool: String,
        #[source]
        source: pinion_core::pools::PoolError,
    },
    #[error(transparent)]
    Name(pinion_core::qos::QosError),
    #[error(
        "pool {pool:?}: at most {limit} pools can be pinned at once; \
         give one back to the closed loop first (`pinion pools set NAME=auto`)",
        limit = pinion_core::pools::MAX_PINS
    )]
    TooManyPins { pool: String },
    #[error(
        "no pool {pool:?} (pools now: {}); a shared pool exists while it has members \
         (annotation cpuset_pool); to size one before its first member arrives, \
         `pinion pools set --new {pool}=SIZE`",
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    )]
    Unknown { pool: String, known: Vec<String> },
    /// The pin's minimum would not fit beside the other pools, reclaim's
    /// minimum and the exclusive CPUs: every shared and exclusive admission
    /// would be refused until it went.
    #[error("pool {pool:?}: a pin of {size} does not fit: {source}")]
    DoesNotFit {
        pool: String,
        size: String,
        #[source]
        source: pinion_core::pools::PoolError,
    },
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// A pin [`CpuPluginHandle::set`] took: what it changed, and the pin it
/// replaced.
#[derive(Debug)]
pub struct Pinned {
    /// The pools and containers the pin changed.
    pub report: ReconcileReport,
    pool: String,
    pin: PoolSize,
    previous: PoolSize,
}

/// The shared plugin; clones share it.
#[derive(Clone)]
pub struct CpuPluginHandle {
    plugin: Arc<Mutex<CpuPlugin>>,
    /// The last measured load of each pool (for the view).
    loads: Arc<Mutex<BTreeMap<String, PoolLoad>>>,
    /// The last PSI of each pool's members (for the view).
    psi: Arc<Mutex<BTreeMap<String, f64>>>,
    /// cgroup v1: the last throttling pressure of each pool's members (for
    /// the view) and each member pod's previous counters.
    throttling: Arc<Mutex<Throttled>>,
}

/// cgroup v1 throttling between two periods.
#[derive(Debug, Default)]
struct Throttled {
    /// Pool → pressure from its members' throttling (percent).
    pools: BTreeMap<String, f64>,
    /// Pod UID → its counters and when they were read.
    previous: BTreeMap<String, (Instant, V1PodCounters)>,
}

/// Where the closed loop measures: every CPU's time in `<sysroot>/proc/stat`
/// and, when `pods` is given, the members' pods' CPU pressure: their
/// `cpu.pressure` on cgroup v2, their throttling on cgroup v1.
#[derive(Debug, Clone)]
pub struct LoadSources {
    pub sysroot: PathBuf,
    pub pods: Option<PodCpuSource>,
}

impl std::fmt::Debug for CpuPluginHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuPluginHandle").finish_non_exhaustive()
    }
}

impl CpuPluginHandle {
    /// Shares `plugin`.
    #[must_use]
    pub fn new(plugin: CpuPlugin) -> Self {
        Self {
            plugin: Arc::new(Mutex::new(plugin)),
            loads: Arc::default(),
            psi: Arc::default(),
            throttling: Arc::default(),
        }
    }

    /// Its gRPC server (`resourceplugin.v1alpha1`), on the same plugin.
    #[must_use]
    pub fn grpc(&self) -> GrpcPlugin<CpuPlugin> {
        GrpcPlugin::shared(Arc::clone(&self.plugin))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, CpuPlugin> {
        self.plugin.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pools as `pinion pools` shows them.
    #[must_use]
    pub fn view(&self) -> PoolsView {
        let plugin = self.lock();
        let loads = self.loads.lock().unwrap_or_else(PoisonError::into_inner);
        let psi = self.psi.lock().unwrap_or_else(PoisonError::into_inner);
        let throttled = self
            .throttling
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let pools = plugin.pools();
        let members = plugin.pool_members();
        let views = pools
            .entries()
            .iter()
            .map(|(name, entry)| {
                let (min, max) = pools.bounds_of(name, entry.requests_milli);
                let load = loads.get(name);
                PoolView {
                    name: name.clone(),
                    cpus: pools
                        .plan()
                        .shared
                        .get(name)
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    size: entry.size,
                    min,
                    max,
                    pin: pools.pin_of(name).to_string(),
                    numa: entry.numa.as_ref().map(ToString::to_string),
                    members: members
                        .get(name)
                        .into_iter()
                        .flatten()
                        .map(|(pod, container)| format!("{pod}/{container}"))
                        .collect(),
                    requests_milli: entry.requests_milli,
                    pressure: load.map(|l| l.pressure),
                    usage: load.and_then(|l| l.usage),
                    psi: psi.get(name).copied(),
                    throttled: throttled.pools.get(name).copied(),
                    last_change: entry.last_change.as_ref().map(|c| {
                        format!(
                            "{} -> {} ({}) in period {}",
                            c.from, c.to, c.reason, c.period
                        )
                    }),
                }
            })
            .collect();
        PoolsView {
            pools: views,
            reclaim: pools.plan().reclaim.to_string(),
            reclaim_min: pools.params().reclaim_min,
            period: pools.period(),
            pending_pins: pools
                .pins()
                .iter()
                .filter(|(name, _)| !pools.entries().contains_key(*name))
                .map(|(name, pin)| (name.clone(), pin.to_string()))
                .collect(),
        }
    }

    /// Pins pool `name` to `size` (`N`, `MIN-MAX`) or hands it back to the
    /// closed loop (`auto`). A pin on a pool that does not exist yet is kept
    /// for when it does when `create` is set; without it such a name is
    /// refused with the names that exist (a typo must not pin nothing).
    /// The answer carries the pin it replaced, for
    /// [`CpuPluginHandle::give_back`].
    pub fn set(&self, name: &str, size: &str, create: bool) -> Result<Pinned, SetPoolError> {
        // The names an annotation may give a pool: a pin for any other
        // could never apply.
        pinion_core::qos::check_pool_name(name).map_err(SetPoolError::Name)?;
        let size: PoolSize = size.parse().map_err(|source| SetPoolError::Size {
            pool: name.to_string(),
            source,
        })?;
        let mut plugin = self.lock();
        let pools = plugin.pools();
        if size != PoolSize::Auto && !pools.may_pin(name) {
            return Err(SetPoolError::TooManyPins {
                pool: name.to_string(),
            });
        }
        if !create && !pools.entries().contains_key(name) && !pools.pins().contains_key(name) {
            let known = pools.entries().keys().cloned().collect();
            return Err(SetPoolError::Unknown {
                pool: name.to_string(),
                known,
            });
        }
        if size != PoolSize::Auto {
            plugin
                .pin_fits(name, size)
                .map_err(|source| SetPoolError::DoesNotFit {
                    pool: name.to_string(),
                    size: size.to_string(),
                    source,
                })?;
        }
        let previous = pools.pin_of(name);
        let report = plugin.set_pool_size(name, size)?;
        Ok(Pinned {
            report,
            pool: name.to_string(),
            pin: size,
            previous,
        })
    }

    /// Gives back a pin that could not be made durable: pool `pinned.pool`
    /// has the pin it had before (its size then follows the closed loop
    /// within that pin), unless another pin replaced this one since. The
    /// agent answers such a pin with "nothing changed", and until the
    /// forty-seventh session the pin stayed in force anyway: the pool had
    /// the size the caller was told it did not get, and a later flush wrote
    /// it to disk.
    pub fn give_back(&self, pinned: &Pinned) -> Result<ReconcileReport, PluginError> {
        let mut plugin = self.lock();
        if plugin.pools().pin_of(&pinned.pool) != pinned.pin {
            return Ok(ReconcileReport::default());
        }
        plugin.set_pool_size(&pinned.pool, pinned.previous)
    }

    /// Follows the machine's online CPUs ([`CpuPlugin::follow_topology`]).
    pub fn follow_topology(&self, topology: &Topology) -> Result<ReconcileReport, PluginError> {
        self.lock().follow_topology(topology)
    }

    /// One period of the closed loop with `loads` (pool name → load).
    pub fn reconcile(
        &self,
        loads: BTreeMap<String, PoolLoad>,
    ) -> Result<ReconcileReport, PluginError> {
        let report = self.lock().reconcile(&loads)?;
        *self.loads.lock().unwrap_or_else(PoisonError::into_inner) = loads;
        Ok(report)
    }

    /// The closed loop: every `period`, each pool's load measured from
    /// `sources` ([`CpuPluginHandle::measure`]) and one
    /// [`CpuPlugin::reconcile`]; the manager's next `GetResourcesAllocation`
    /// sees the new cpusets and pushes them. Ends when `stop` resolves.
    pub async fn run_closed_loop(
        self,
        sources: LoadSources,
        period: Duration,
        stop: impl Future<Output = ()>,
    ) {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        let mut sources = Some(sources);
        let mut last: Option<BTreeMap<u32, CpuTime>> = None;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = &mut stop => return,
            }
            let handle = self.clone();
            let Some(mut taken) = sources.take() else {
                return;
            };
            let previous = last.take();
            let outcome = tokio::task::spawn_blocking(move || {
                let result = handle.measure_and_reconcile(&mut taken, previous);
                (taken, result)
            })
            .await;
            match outcome {
                Ok((back, result)) => {
                    sources = Some(back);
                    match result {
                        Ok(sample) => last = Some(sample),
                        Err(err) => tracing::warn!("cpu pools closed loop: {err}"),
                    }
                }
                Err(err) => {
                    tracing::error!("cpu pools closed loop stopped: {err}");
                    return;
                }
            }
        }
    }

    /// Samples the CPUs' time; with a `previous` sample, measures every
    /// pool and reconciles. Returns the new sample.
    fn measure_and_reconcile(
        &self,
        sources: &mut LoadSources,
        previous: Option<BTreeMap<u32, CpuTime>>,
    ) -> Result<BTreeMap<u32, CpuTime>, String> {
        let sample = pinion_host::pressure::read_cpu_times(&sources.sysroot)
            .map_err(|err| err.to_string())?;
        let Some(previous) = previous else {
            return Ok(sample);
        };
        let loads = self.measure(&previous, &sample, sources.pods.as_mut());
        let report = self.reconcile(loads).map_err(|err| err.to_string())?;
        for change in &report.pools {
            tracing::info!(pool = %change.pool, from = change.from, to = change.to, reason = %change.reason, "cpu pool resized");
        }
        Ok(sample)
    }

    /// Every pool's load: the load on its CPUs between the two samples,
    /// combined ([`combine_loads`]) with its members' pressure when `pods`
    /// can find their cgroups — their PSI on cgroup v2, their throttling
    /// since the previous call on cgroup v1 ([`load_from_throttling`]).
    /// Remembers the members' pressure for the view.
    pub fn measure(
        &self,
        before: &BTreeMap<u32, CpuTime>,
        after: &BTreeMap<u32, CpuTime>,
        pods: Option<&mut PodCpuSource>,
    ) -> BTreeMap<String, PoolLoad> {
        let (plan, members) = {
            let plugin = self.lock();
            (plugin.pools().plan().shared.clone(), plugin.pool_members())
        };
        let (mut psi, mut throttled) = (BTreeMap::new(), BTreeMap::new());
        if let Some(source) = pods {
            match source {
                PodCpuSource::V2(pods) => psi = members_psi(pods, &members),
                PodCpuSource::V1(pods) => throttled = self.members_throttling(pods, &members),
            }
        }
        let loads = plan
            .iter()
            .filter_map(|(name, cpus)| {
                let on_cpus = load_from_cpu_times(before, after, cpus);
                let members = psi.get(name).or_else(|| throttled.get(name)).copied();
                combine_loads(on_cpus, members).map(|load| (name.clone(), load))
            })
            .collect();
        let pressures = |map: BTreeMap<String, PoolLoad>| {
            map.into_iter()
                .map(|(name, load)| (name, load.pressure))
                .collect()
        };
        *self.psi.lock().unwrap_or_else(PoisonError::into_inner) = pressures(psi);
        self.throttling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pools = pressures(throttled);
        loads
    }

    /// Each pool's load from its members' throttling (cgroup v1) since
    /// the previous call: every member pod's counters are read once and
    /// kept for the next call (pods no longer members are forgotten). A pod
    /// read for the first time, or whose cgroup cannot be read, is left
    /// out; a pool none of whose pods was measured has no such load.
    fn members_throttling(
        &self,
        pods: &mut V1PodCgroups,
        members: &BTreeMap<String, Vec<(String, String)>>,
    ) -> BTreeMap<String, PoolLoad> {
        pods.refresh(members.values().flatten().map(|(pod, _)| pod.as_str()));
        let mut previous = std::mem::take(
            &mut self
                .throttling
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .previous,
        );
        let mut next = BTreeMap::new();
        let mut per_pod: BTreeMap<&str, Option<Throttling>> = BTreeMap::new();
        let mut pools = BTreeMap::new();
        for (pool, keys) in members {
            let mut measured = Vec::new();
            for (pod, _) in keys {
                let sample = *per_pod.entry(pod.as_str()).or_insert_with(|| {
                    let now = match pods.counters(pod)? {
                        Ok(counters) => (Instant::now(), counters),
                        Err(err) => {
                            tracing::debug!(pod = %pod, "no cpu throttling: {err}");
                            return None;
                        }
                    };
                    let before = previous.remove(pod.as_str());
                    next.insert(pod.clone(), now);
                    before.map(|before| throttling(before, now))
                });
                measured.extend(sample);
            }
            if let Some(load) = load_from_throttling(&measured) {
                pools.insert(pool.clone(), load);
            }
        }
        self.throttling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .previous = next;
        pools
    }
}

/// A pod's throttling between two readings of its counters.
fn throttling(
    (then, before): (Instant, V1PodCounters),
    (now, after): (Instant, V1PodCounters),
) -> Throttling {
    let elapsed = u64::try_from(now.saturating_duration_since(then).as_nanos()).unwrap_or(u64::MAX);
    let (busy, throttled) = after.counters.since(&before.counters, elapsed);
    Throttling {
        throttled,
        busy: (before.usage_read && after.usage_read && elapsed > 0).then_some(busy),
    }
}

/// Each pool's PSI: the highest "some avg10" of its members' pods (a pod's
/// cgroup holds all its containers). Pods whose cgroup or `cpu.pressure`
/// cannot be read (cgroup v1, not created yet) are left out; a pool none of
/// whose pods could be read has no PSI.
fn members_psi(
    pods: &mut PodCgroups,
    members: &BTreeMap<String, Vec<(String, String)>>,
) -> BTreeMap<String, PoolLoad> {
    pods.refresh(members.values().flatten().map(|(pod, _)| pod.as_str()));
    let mut per_pod: BTreeMap<&str, Option<f64>> = BTreeMap::new();
    let mut pools = BTreeMap::new();
    for (pool, keys) in members {
        let mut highest: Option<f64> = None;
        for (pod, _) in keys {
            let avg10 = *per_pod.entry(pod.as_str()).or_insert_with(|| {
                let dir = pods.get(pod)?;
                match pinion_host::pressure::read_cpu_pressure(dir) {
                    Ok(psi) => Some(psi.some.avg10),
                    Err(err) => {
                        tracing::debug!(pod = %pod, "no cpu pressure: {err}");
                        None
                    }
                }
            });
            if let Some(avg10) = avg10 {
                highest = Some(highest.map_or(avg10, |h: f64| h.max(avg10)));
            }
        }
        if let Some(pressure) = highest {
            pools.insert(
                pool.clone(),
                PoolLoad {
                    pressure,
                    usage: None,
                },
            );
        }
    }
    pools
}
