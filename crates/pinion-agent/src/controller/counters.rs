//! Owns the controller's counters, and the metrics snapshot they are published in.
//!
//! The controller's own counters and the numbers `/metrics` shows, taken
//! from one snapshot (the agent's `metrics` module encodes them; names and
//! meanings: `docs/metrics.md`).

use pinion_core::engine::{CpuGauges, Metrics};

/// Upper bounds (seconds) of the checkpoint write latency histogram.
pub const WRITE_BUCKETS: [f64; 10] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

/// A fixed-bucket histogram.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Per bucket of [`WRITE_BUCKETS`], not cumulative.
    pub counts: [u64; WRITE_BUCKETS.len()],
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&mut self, value: f64) {
        if let Some(index) = WRITE_BUCKETS.iter().position(|bound| value <= *bound) {
            self.counts[index] += 1;
        }
        self.count += 1;
        self.sum += value;
    }
}

/// The controller's own counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub drift_repairs_total: u64,
    /// Runtime (NRI) containers whose cgroup cpuset was found changed and
    /// sent again through an `UpdateContainers`.
    pub runtime_drift_repairs_total: u64,
    pub released_gone_total: u64,
    /// Standalone runs whose cgroup settings could not be written after
    /// their admission (once per failure, until a write succeeds).
    pub cgroup_apply_failures_total: u64,
    /// Exclusive runs whose cgroup became a cpuset partition, and those
    /// left a member because the kernel could not make one
    /// (`exclusiveCpus.partition`).
    pub partitions_made_total: u64,
    pub partition_fallbacks_total: u64,
    /// Starts that rebuilt the state from the node (checkpoint missing or
    /// unreadable), and the workloads those rebuilds could not leave as
    /// they were.
    pub state_rebuilds_total: u64,
    pub state_rebuild_conflicts_total: u64,
    /// Starts that migrated the checkpoint to a changed configuration, and
    /// the workloads that lost their exclusive CPUs doing so.
    pub state_migrations_total: u64,
    pub state_migration_dropped_total: u64,
    /// Changes of the machine's online CPUs the state followed (CPU
    /// hot-plug), the workloads that got CPUs in place of offline ones and
    /// those left with fewer CPUs than they asked for.
    pub cpu_online_changes_total: u64,
    pub cpu_offline_replaced_total: u64,
    pub cpu_offline_short_total: u64,
    pub reconcile_runs_total: u64,
    /// Compactions of the journal into the checkpoint.
    pub checkpoint_write_seconds: Histogram,
    /// One journal flush (write + `fdatasync`) per batch of decisions.
    pub journal_flush_seconds: Histogram,
    pub journal_flush_failures_total: u64,
    /// Batches flushed and the records they held (records / batches is the
    /// mean batch size).
    pub journal_batches_total: u64,
    pub journal_records_total: u64,
    /// From a reconcile poll of the resource plugins to the changed
    /// placements being applied.
    pub plugin_apply_seconds: Histogram,
    /// Kept cpusets found changed by another writer, by kind
    /// (`container`, `housekeeping`).
    pub foreign_writes_total: std::collections::BTreeMap<&'static str, u64>,
    /// Writes of housekeeping cgroups, and failures (once per failure
    /// until a write succeeds).
    pub housekeeping_writes_total: u64,
    pub housekeeping_write_failures_total: u64,
}

/// KEP-5894's system partition, for its gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionGauges {
    /// `memoryLimit` in bytes, when set.
    pub memory_limit: Option<u64>,
    /// Whether that limit is written to the partition's cgroup.
    pub memory_limit_enforced: bool,
    /// Pods with containers in the partition.
    pub pods: usize,
}

/// The numbers `/metrics` shows, taken from one snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// kubelet's CPU and Topology Manager counters, kept by the engine.
    pub engine: Metrics,
    /// kubelet's CPU manager gauges, from the state.
    pub gauges: CpuGauges,
    pub counters: Counters,
    pub workloads: usize,
    /// Housekeeping cgroups by state (`kept`, `missing`, `failed`,
    /// `conflict`, `pending`).
    pub housekeeping_states: std::collections::BTreeMap<&'static str, usize>,
    /// The system partition, when configured.
    pub system_partition: Option<PartitionGauges>,
}
