//! The agent's metrics exposition: one snapshot of the controller's numbers
//! (`controller::counters::MetricsSnapshot`) and the resource plugins'
//! statistics encoded by `prometheus-client` in the OpenMetrics text format,
//! with kubelet's CPU manager names and meanings where kubelet has them and
//! `pinion_*` for Pinion's own (list: `docs/metrics.md`, names are a
//! contract). The HTTP endpoint serving it is `server::metrics`.

use pinion_api::local as wire;
use pinion_core::engine::{
    AlignmentCounts, AllocationSource, AssignmentType, ResourceManagerCounts,
};
use pinion_core::topomgr::metrics::AdmissionMetrics;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::controller::counters::{Histogram, MetricsSnapshot, WRITE_BUCKETS};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exposition (OpenMetrics text) of one snapshot and the resource
/// plugins' statistics.
#[must_use]
// difference-from-kubelet: metric-names-without-kubelet-prefix
pub fn render(
    m: &MetricsSnapshot,
    plugins: &[wire::Plugin],
    nri_requests: &[(&'static str, Histogram)],
) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(
        m.clone(),
        plugins.to_vec(),
        nri_requests.to_vec(),
    )));
    let mut out = String::new();
    if let Err(err) = encode(&mut out, &registry) {
        tracing::error!("encoding metrics: {err}");
    }
    out
}

/// Encodes one snapshot's values on each scrape. The names are written
/// without the `_total` suffix prometheus-client appends to counters.
#[derive(Debug)]
struct SnapshotCollector(
    MetricsSnapshot,
    Vec<wire::Plugin>,
    Vec<(&'static str, Histogram)>,
);

impl Collector for SnapshotCollector {
    fn encode(&self, mut out: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = &self.0;
        let c = &m.counters;
        counter(
            &mut out,
            "cpu_manager_pinning_requests",
            "The number of cpu core allocations which required pinning.",
            m.engine.pinning_requests_total,
        )?;
        counter(
            &mut out,
            "cpu_manager_pinning_errors",
            "The number of cpu core allocations which required pinning failed.",
            m.engine.pinning_errors_total,
        )?;
        gauge(
            &mut out,
            "cpu_manager_shared_pool_size_millicores",
            "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
            usize::try_from(m.gauges.shared_pool_millicores).unwrap_or(usize::MAX),
        )?;
        gauge(
            &mut out,
            "cpu_manager_exclusive_cpu_allocation_count",
            "The total number of CPUs exclusively allocated to containers.",
            m.gauges.exclusive_cpus,
        )?;
        let mut per_numa = out.encode_descriptor(
            "cpu_manager_allocation_per_numa",
            "Number of CPUs allocated per NUMA node.",
            None,
            MetricType::Gauge,
        )?;
        for (node, count) in &m.gauges.allocation_per_numa {
            let labels = [("numa_node", node.to_string())];
            ConstGauge::new(*count).encode(per_numa.encode_family(&labels)?)?;
        }
        aligned(
            &mut out,
            "container_aligned_compute_resources_count",
            "Cumulative number of aligned compute resources allocated to containers by alignment type.",
            &m.engine.aligned,
        )?;
        aligned(
            &mut out,
            "container_aligned_compute_resources_failure_count",
            "Cumulative number of failures to allocate aligned compute resources to containers by alignment type.",
            &m.engine.aligned_failures,
        )?;
        resource_manager(&mut out, &m.engine.resource_manager)?;
        topology_manager(&mut out, &m.engine.topology)?;
        counter(
            &mut out,
            "pinion_reconcile_runs",
            "Reconcile passes run.",
            c.reconcile_runs_total,
        )?;
        counter(
            &mut out,
            "pinion_reconcile_drift_repairs",
            "Cgroup cpusets found changed outside Pinion and rewritten.",
            c.drift_repairs_total,
        )?;
        counter(
            &mut out,
            "pinion_reconcile_runtime_drift_repairs",
            "Runtime containers whose cgroup cpuset was found changed outside Pinion and sent again in an NRI UpdateContainers.",
            c.runtime_drift_repairs_total,
        )?;
        counter(
            &mut out,
            "pinion_released_gone",
            "Containers released because their processes had ended.",
            c.released_gone_total,
        )?;
        counter(
            &mut out,
            "pinion_cgroup_apply_failures",
            "Standalone runs whose cgroup settings could not be written after admission (once per failure until a write succeeds).",
            c.cgroup_apply_failures_total,
        )?;
        counter(
            &mut out,
            "pinion_partitions_made",
            "Exclusive runs whose cgroup became a cpuset partition (exclusiveCpus.partition root or isolated).",
            c.partitions_made_total,
        )?;
        counter(
            &mut out,
            "pinion_partition_fallbacks",
            "Exclusive runs left an ordinary cpuset (member) because the kernel could not make the partition (cgroup v1, Linux before 6.7, a refused write or an invalid read-back); the reason is in the log and `pinion ps`.",
            c.partition_fallbacks_total,
        )?;
        counter(
            &mut out,
            "pinion_state_rebuilds",
            "Starts that rebuilt the state from the running workloads (checkpoint missing or unreadable).",
            c.state_rebuilds_total,
        )?;
        counter(
            &mut out,
            "pinion_state_rebuild_conflicts",
            "Workloads a rebuild could not leave on exactly the cpus they had.",
            c.state_rebuild_conflicts_total,
        )?;
        counter(
            &mut out,
            "pinion_state_migrations",
            "Starts that migrated the checkpoint to a changed configuration.",
            c.state_migrations_total,
        )?;
        counter(
            &mut out,
            "pinion_state_migration_dropped",
            "Exclusive assignments a migration at start could not keep (moved to the shared pool).",
            c.state_migration_dropped_total,
        )?;
        counter(
            &mut out,
            "pinion_cpu_online_changes",
            "Changes of the online cpus (cpu hot-plug) the state followed at run time.",
            c.cpu_online_changes_total,
        )?;
        counter(
            &mut out,
            "pinion_cpu_offline_replaced",
            "Workloads that got cpus in place of exclusive cpus that went offline.",
            c.cpu_offline_replaced_total,
        )?;
        counter(
            &mut out,
            "pinion_cpu_offline_short",
            "Workloads left with fewer exclusive cpus than they asked for after cpus went offline (no free cpu).",
            c.cpu_offline_short_total,
        )?;
        gauge(
            &mut out,
            "pinion_managed_containers",
            "Containers currently admitted.",
            m.workloads,
        )?;
        seconds(
            &mut out,
            "pinion_checkpoint_write_duration_seconds",
            "Checkpoint rewrites from the state (the journal's compactions: write, fsync, rename, directory fsync).",
            &c.checkpoint_write_seconds,
        )?;
        seconds(
            &mut out,
            "pinion_journal_flush_duration_seconds",
            "Journal flush latency (one write and one fdatasync per batch of decisions).",
            &c.journal_flush_seconds,
        )?;
        counter(
            &mut out,
            "pinion_journal_flush_failures",
            "Journal flushes that failed (their batch was rolled back and refused).",
            c.journal_flush_failures_total,
        )?;
        counter(
            &mut out,
            "pinion_journal_batches",
            "Batches of decisions made durable by one journal flush.",
            c.journal_batches_total,
        )?;
        counter(
            &mut out,
            "pinion_journal_records",
            "Decision records made durable.",
            c.journal_records_total,
        )?;
        seconds(
            &mut out,
            "pinion_qrm_reconcile_apply_duration_seconds",
            "From polling the resource plugins to the changed placements being applied (cgroup written or runtime update queued).",
            &c.plugin_apply_seconds,
        )?;
        isolation(&mut out, m)?;
        plugins(&mut out, &self.1)?;
        nri_requests(&mut out, &self.2)
    }
}

/// Other writers, housekeeping cgroups and the system partition.
fn isolation(out: &mut DescriptorEncoder, m: &MetricsSnapshot) -> Result<(), std::fmt::Error> {
    let c = &m.counters;
    let mut foreign = out.encode_descriptor(
        "pinion_foreign_writes",
        "Cpusets Pinion keeps found changed by another writer, by kind (container, housekeeping).",
        None,
        MetricType::Counter,
    )?;
    for kind in ["container", "housekeeping"] {
        let count = c.foreign_writes_total.get(kind).copied().unwrap_or(0);
        ConstCounter::new(count).encode(foreign.encode_family(&[("kind", kind)])?)?;
    }
    let mut states = out.encode_descriptor(
        "pinion_housekeeping_cgroups",
        "Housekeeping cgroups by state (kept, pending, missing, failed, conflict).",
        None,
        MetricType::Gauge,
    )?;
    for state in ["kept", "pending", "missing", "failed", "conflict"] {
        let count = m.housekeeping_states.get(state).copied().unwrap_or(0);
        ConstGauge::new(i64::try_from(count).unwrap_or(i64::MAX))
            .encode(states.encode_family(&[("state", state)])?)?;
    }
    counter(
        out,
        "pinion_housekeeping_writes",
        "Writes of housekeeping cgroups' cpuset.cpus.",
        c.housekeeping_writes_total,
    )?;
    counter(
        out,
        "pinion_housekeeping_write_failures",
        "Housekeeping cgroups that could not be written (once per failure until a write succeeds).",
        c.housekeeping_write_failures_total,
    )?;
    if let Some(partition) = &m.system_partition {
        let labels = [("partition", "system")];
        if let Some(limit) = partition.memory_limit {
            let mut family = out.encode_descriptor(
                "pinion_partition_memory_limit_bytes",
                "KEP-5894 systemPartition.memoryLimit.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(i64::try_from(limit).unwrap_or(i64::MAX))
                .encode(family.encode_family(&labels)?)?;
            let mut family = out.encode_descriptor(
                "pinion_partition_memory_limit_enforced",
                "1 when systemPartition.memoryLimit is written to the partition's cgroup, else 0.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(i64::from(partition.memory_limit_enforced))
                .encode(family.encode_family(&labels)?)?;
        }
        let mut family = out.encode_descriptor(
            "pinion_partition_pod_count",
            "Pods with containers in KEP-5894's system partition.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(partition.pods).unwrap_or(i64::MAX))
            .encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A histogram of [`Histogram`] (seconds, [`WRITE_BUCKETS`]).
fn seconds(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    h: &Histogram,
) -> Result<(), std::fmt::Error> {
    histogram(out, name, help, (h.sum, h.count), &buckets(h))
}

/// The (upper bound, count) pairs of `h`, `+Inf` last.
fn buckets(h: &Histogram) -> Vec<(f64, u64)> {
    WRITE_BUCKETS
        .iter()
        .copied()
        .zip(h.counts)
        .chain(std::iter::once((
            f64::INFINITY,
            h.count - h.counts.iter().sum::<u64>(),
        )))
        .collect()
}

/// The NRI front-end's answers to the runtime, by method (seconds,
/// [`WRITE_BUCKETS`]): Pinion's time on a pod's start-up path.
fn nri_requests(
    out: &mut DescriptorEncoder,
    by_method: &[(&'static str, Histogram)],
) -> Result<(), std::fmt::Error> {
    let mut family = out.encode_descriptor(
        "pinion_nri_request_duration_seconds",
        "Time Pinion took to answer the container runtime's NRI requests, by method.",
        None,
        MetricType::Histogram,
    )?;
    for (method, h) in by_method {
        let labels = [("method", *method)];
        family
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(h.sum, h.count, &buckets(h), None)?;
    }
    Ok(())
}

/// Per resource plugin: whether it is active, its calls by method (count,
/// errors, latency) and the containers its reconcile answers changed.
fn plugins(out: &mut DescriptorEncoder, plugins: &[wire::Plugin]) -> Result<(), std::fmt::Error> {
    let mut up = out.encode_descriptor(
        "pinion_qrm_plugin_up",
        "1 while a resource plugin is registered and active, 0 while stopped.",
        None,
        MetricType::Gauge,
    )?;
    for p in plugins {
        let labels = [("resource", p.resource.as_str())];
        ConstGauge::new(i64::from(p.state == "active")).encode(up.encode_family(&labels)?)?;
    }
    let mut calls = out.encode_descriptor(
        "pinion_qrm_plugin_calls",
        "Calls of resource plugins, by resource and method.",
        None,
        MetricType::Counter,
    )?;
    for p in plugins {
        for (method, stats) in &p.stats.calls {
            let labels = [
                ("method", method.as_str()),
                ("resource", p.resource.as_str()),
            ];
            ConstCounter::new(stats.calls).encode(calls.encode_family(&labels)?)?;
        }
    }
    let mut errors = out.encode_descriptor(
        "pinion_qrm_plugin_call_errors",
        "Calls of resource plugins that failed (error, deadline, unreachable), by resource and method.",
        None,
        MetricType::Counter,
    )?;
    for p in plugins {
        for (method, stats) in &p.stats.calls {
            let labels = [
                ("method", method.as_str()),
                ("resource", p.resource.as_str()),
            ];
            ConstCounter::new(stats.errors).encode(errors.encode_family(&labels)?)?;
        }
    }
    let mut latency = out.encode_descriptor(
        "pinion_qrm_plugin_call_duration_seconds",
        "Latency of resource plugin calls, by resource and method.",
        None,
        MetricType::Histogram,
    )?;
    for p in plugins {
        for (method, stats) in &p.stats.calls {
            let labels = [
                ("method", method.as_str()),
                ("resource", p.resource.as_str()),
            ];
            let in_buckets: u64 = stats.buckets.iter().sum();
            let buckets: Vec<(f64, u64)> = wire::PLUGIN_LATENCY_BUCKETS
                .iter()
                .copied()
                .zip(stats.buckets.iter().copied())
                .chain(std::iter::once((
                    f64::INFINITY,
                    stats.calls.saturating_sub(in_buckets),
                )))
                .collect();
            latency
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(stats.seconds, stats.calls, &buckets, None)?;
        }
    }
    let mut changes = out.encode_descriptor(
        "pinion_qrm_reconcile_changes",
        "Containers whose allocation a resource plugin's reconcile answer changed.",
        None,
        MetricType::Counter,
    )?;
    for p in plugins {
        let labels = [("resource", p.resource.as_str())];
        ConstCounter::new(p.stats.reconcile_changes).encode(changes.encode_family(&labels)?)?;
    }
    Ok(())
}

/// kubelet's resource-manager counters for `resource_name="cpu"`
/// (KEP-5526).
fn resource_manager(
    out: &mut DescriptorEncoder,
    rm: &ResourceManagerCounts,
) -> Result<(), std::fmt::Error> {
    let mut allocations = out.encode_descriptor(
        "resource_manager_allocations",
        "Number of allocations made by the resource managers, by resource and source.",
        None,
        MetricType::Counter,
    )?;
    for source in AllocationSource::ALL {
        let labels = [("resource_name", "cpu"), ("source", source.label())];
        ConstCounter::new(rm.allocations(source)).encode(allocations.encode_family(&labels)?)?;
    }
    let mut errors = out.encode_descriptor(
        "resource_manager_allocation_errors",
        "Number of failed allocations of the resource managers, by resource and source.",
        None,
        MetricType::Counter,
    )?;
    for source in AllocationSource::ALL {
        let labels = [("resource_name", "cpu"), ("source", source.label())];
        ConstCounter::new(rm.errors(source)).encode(errors.encode_family(&labels)?)?;
    }
    let mut assignments = out.encode_descriptor(
        "resource_manager_container_assignments",
        "Number of containers by how their resources were assigned.",
        None,
        MetricType::Gauge,
    )?;
    for kind in AssignmentType::ALL {
        let labels = [("assignment_type", kind.label()), ("resource_name", "cpu")];
        let value = i64::try_from(rm.assignments(kind)).unwrap_or(i64::MAX);
        ConstGauge::new(value).encode(assignments.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A counter named `name` (exposed as `name_total`).
fn counter(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(out.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: usize,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(out.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn histogram(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    (sum, count): (f64, u64),
    buckets: &[(f64, u64)],
) -> Result<(), std::fmt::Error> {
    out.encode_descriptor(name, help, None, MetricType::Histogram)?
        .encode_histogram::<NoLabelSet>(sum, count, buckets, None)
}

/// kubelet's Topology Manager admission metrics.
fn topology_manager(
    out: &mut DescriptorEncoder,
    t: &AdmissionMetrics,
) -> Result<(), std::fmt::Error> {
    counter(
        out,
        "topology_manager_admission_requests",
        "The number of admission requests where resources have to be aligned.",
        t.requests_total,
    )?;
    counter(
        out,
        "topology_manager_admission_errors",
        "The number of admission request failures where resources could not be aligned.",
        t.errors_total,
    )?;
    let h = &t.duration_ms;
    let mut previous = 0;
    let mut buckets: Vec<(f64, u64)> = h
        .cumulative()
        .into_iter()
        .map(|(bound, cumulative)| {
            let in_bucket = cumulative - previous;
            previous = cumulative;
            (bound, in_bucket)
        })
        .collect();
    buckets.push((f64::INFINITY, h.count - previous));
    histogram(
        out,
        "topology_manager_admission_duration_ms",
        "Duration in milliseconds to serve a pod admission request.",
        (h.sum_ms(), h.count),
        &buckets,
    )
}

/// kubelet's alignment counters. Their names end in `_count`, not
/// `_total`, so they are written with OpenMetrics type `unknown`: the
/// series names stay kubelet's.
fn aligned(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: &AlignmentCounts,
) -> Result<(), std::fmt::Error> {
    let mut family = out.encode_descriptor(name, help, None, MetricType::Unknown)?;
    for (scope, boundary, value) in values.series() {
        let labels = [("boundary", boundary.label()), ("scope", scope.label())];
        ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
            .encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::counters::PartitionGauges;
    use crate::testing::source_guard;

    fn value_of(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
            .map(|line| line[series.len() + 1..].to_string())
    }

    #[test]
    fn renders_kubelet_names_with_values() {
        let mut m = MetricsSnapshot::default();
        m.gauges.shared_pool_millicores = 3000;
        m.gauges.exclusive_cpus = 5;
        m.engine.pinning_requests_total = 7;
        m.engine.pinning_errors_total = 2;
        m.gauges.allocation_per_numa.insert(1, 4);
        for _ in 0..6 {
            m.engine.aligned.inc(
                pinion_core::engine::AlignScope::Container,
                pinion_core::engine::AlignBoundary::PhysicalCpu,
            );
        }
        m.counters.checkpoint_write_seconds.observe(0.0007);
        m.counters.checkpoint_write_seconds.observe(3.0);
        m.engine.topology.requests_total = 4;
        m.engine.topology.errors_total = 1;
        m.engine
            .topology
            .observe_duration(std::time::Duration::from_micros(70));
        let text = render(&m, &[], &[]);
        let cases = [
            ("cpu_manager_pinning_requests_total", "7"),
            ("cpu_manager_pinning_errors_total", "2"),
            ("cpu_manager_shared_pool_size_millicores", "3000"),
            ("cpu_manager_exclusive_cpu_allocation_count", "5"),
            ("cpu_manager_allocation_per_numa{numa_node=\"1\"}", "4"),
            ("container_aligned_compute_resources_count{boundary=\"physical_cpu\",scope=\"container\"}", "6"),
            ("container_aligned_compute_resources_failure_count{boundary=\"physical_cpu\",scope=\"container\"}", "0"),
            ("pinion_checkpoint_write_duration_seconds_bucket{le=\"0.0005\"}", "0"),
            ("pinion_checkpoint_write_duration_seconds_bucket{le=\"0.001\"}", "1"),
            ("pinion_checkpoint_write_duration_seconds_bucket{le=\"1.0\"}", "1"),
            ("pinion_checkpoint_write_duration_seconds_bucket{le=\"+Inf\"}", "2"),
            ("pinion_checkpoint_write_duration_seconds_count", "2"),
            ("topology_manager_admission_requests_total", "4"),
            ("topology_manager_admission_errors_total", "1"),
            ("topology_manager_admission_duration_ms_bucket{le=\"0.05\"}", "0"),
            ("topology_manager_admission_duration_ms_bucket{le=\"0.1\"}", "1"),
            ("topology_manager_admission_duration_ms_bucket{le=\"+Inf\"}", "1"),
            ("topology_manager_admission_duration_ms_count", "1"),
            ("pinion_reconcile_runs_total", "0"),
        ];
        for (series, want) in cases {
            assert_eq!(
                value_of(&text, series).as_deref(),
                Some(want),
                "{series}\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    /// Issue 30: the counters are the controller's and the endpoint is the
    /// server's; this module only encodes a snapshot, and the controller
    /// does not depend on it.
    #[test]
    fn the_encoder_holds_no_counter_and_serves_nothing() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let found = source_guard::lines_naming(
            &src.join("metrics.rs"),
            &["ControllerHandle", "hyper", "tokio", "pub struct"],
        );
        assert!(found.is_empty(), "metrics.rs:\n{}", found.join("\n"));
        let found = source_guard::lines_naming(&src.join("controller"), &["crate::metrics"]);
        assert!(
            found.is_empty(),
            "the controller names the encoder:\n{}",
            found.join("\n")
        );
    }

    /// The NRI front-end's request times: one histogram series per method
    /// answered, `method` as the label, none without the front-end.
    #[test]
    fn nri_request_times_are_a_histogram_by_method() {
        let mut create = Histogram::default();
        create.observe(0.0003);
        create.observe(0.002);
        let mut start = Histogram::default();
        start.observe(0.0001);
        let m = MetricsSnapshot::default();
        let text = render(
            &m,
            &[],
            &[("CreateContainer", create), ("StartContainer", start)],
        );
        for (series, value) in [
            ("pinion_nri_request_duration_seconds_count{method=\"CreateContainer\"}", "2"),
            ("pinion_nri_request_duration_seconds_bucket{le=\"0.0005\",method=\"CreateContainer\"}", "1"),
            ("pinion_nri_request_duration_seconds_bucket{le=\"0.0025\",method=\"CreateContainer\"}", "2"),
            ("pinion_nri_request_duration_seconds_count{method=\"StartContainer\"}", "1"),
        ] {
            let line = format!("{series} {value}");
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        let sum = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "pinion_nri_request_duration_seconds_sum{method=\"CreateContainer\"} ",
                )
            })
            .expect("the sum");
        assert!(
            (sum.parse::<f64>().expect("a number") - 0.0023).abs() < 1e-9,
            "{sum}"
        );
        let without = render(&m, &[], &[]);
        assert!(
            !without
                .lines()
                .any(|l| l.starts_with("pinion_nri_request_duration_seconds_count")),
            "no series without the front-end:\n{without}"
        );
    }

    /// Every metric of `docs/metrics.md` (a contract) is exposed under its
    /// documented name: counters and gauges as a series of that name,
    /// histograms as `_bucket`, `_sum` and `_count` series.
    #[test]
    fn every_documented_metric_is_exposed_under_its_name() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/metrics.md"
        ))
        .expect("docs/metrics.md");
        let mut m = MetricsSnapshot::default();
        m.gauges.allocation_per_numa.insert(0, 0);
        // The system partition's gauges exist only with the partition.
        m.system_partition = Some(PartitionGauges {
            memory_limit: Some(1 << 30),
            memory_limit_enforced: true,
            pods: 0,
        });
        let mut stats = wire::PluginStats::default();
        stats.calls.insert(
            "Allocate".into(),
            wire::MethodStats {
                calls: 1,
                buckets: vec![0; wire::PLUGIN_LATENCY_BUCKETS.len()],
                ..wire::MethodStats::default()
            },
        );
        let plugin = wire::Plugin {
            resource: "cpu".into(),
            socket: "/x.sock".into(),
            state: "active".into(),
            stop_reason: None,
            topology_aligned: Some(true),
            need_reconcile: Some(true),
            pre_start_required: Some(false),
            registered: 0,
            stats,
            node_resources: Vec::new(),
        };
        let mut create = Histogram::default();
        create.observe(0.0004);
        let text = render(&m, &[plugin], &[("CreateContainer", create)]);
        let series: Vec<&str> = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split([' ', '{']).next())
            .collect();
        let mut checked = 0;
        for row in docs.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`');
            let wanted: Vec<String> = if cells[2] == "histogram" {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .map(|suffix| format!("{name}{suffix}"))
                    .collect()
            } else {
                vec![name.to_string()]
            };
            for want in wanted {
                assert!(series.contains(&want.as_str()), "{want} missing:\n{text}");
            }
            checked += 1;
        }
        assert!(checked >= 15, "only {checked} documented metrics found");
    }
}
