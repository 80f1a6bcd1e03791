//! The agent's metrics: kubelet's CPU manager names and meanings where
//! kubelet has them, `pinion_*` for Pinion's own (list: `docs/metrics.md`,
//! names are a contract), rendered in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pinion_core::engine::Metrics;
use pinion_core::policy::{Policy, PolicyError};
use pinion_core::topomgr::metrics::AdmissionMetrics;
use pinion_core::CpuSet;

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
    pub released_gone_total: u64,
    pub reconcile_runs_total: u64,
    /// (scope, boundary) → count, kubelet's `container_aligned_compute_resources_count`.
    pub aligned: BTreeMap<(&'static str, &'static str), u64>,
    /// kubelet's `container_aligned_compute_resources_failure_count`.
    pub aligned_failures: BTreeMap<(&'static str, &'static str), u64>,
    pub checkpoint_write_seconds: Histogram,
}

impl Counters {
    /// Counts alignment as kubelet's static policy does: `physical_cpu`
    /// with full-pcpus-only (success, or an SMT alignment failure) and
    /// `uncore_cache` when uncore alignment is preferred and achieved.
    pub fn count_alignment(
        &mut self,
        policy: &Policy,
        result: &Result<Option<CpuSet>, PolicyError>,
    ) {
        let Policy::Static(policy) = policy else {
            return;
        };
        let options = policy.options();
        match result {
            Ok(Some(cpus)) => {
                if options.full_pcpus_only {
                    *self
                        .aligned
                        .entry(("container", "physical_cpu"))
                        .or_default() += 1;
                }
                let in_one_uncore = policy
                    .topology()
                    .uncores()
                    .values()
                    .any(|uncore| cpus.is_subset(uncore));
                if options.prefer_align_cpus_by_uncorecache && in_one_uncore {
                    *self
                        .aligned
                        .entry(("container", "uncore_cache"))
                        .or_default() += 1;
                }
            }
            Err(err) if err.reason() == "SMTAlignmentError" => {
                *self
                    .aligned_failures
                    .entry(("container", "physical_cpu"))
                    .or_default() += 1;
            }
            _ => {}
        }
    }
}

/// The numbers `/metrics` shows, taken from one snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    pub engine: Metrics,
    pub counters: Counters,
    pub shared_pool_cpus: usize,
    pub exclusive_cpus: usize,
    pub exclusive_per_numa: BTreeMap<u32, usize>,
    pub workloads: usize,
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn simple(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// The Prometheus text exposition.
#[must_use]
pub fn render(m: &MetricsSnapshot) -> String {
    let mut out = String::new();
    let c = &m.counters;
    simple(
        &mut out,
        "cpu_manager_pinning_requests_total",
        "counter",
        "The number of cpu core allocations which required pinning.",
        m.engine.pinning_requests_total,
    );
    simple(
        &mut out,
        "cpu_manager_pinning_errors_total",
        "counter",
        "The number of cpu core allocations which required pinning failed.",
        m.engine.pinning_errors_total,
    );
    simple(
        &mut out,
        "cpu_manager_shared_pool_size_millicores",
        "gauge",
        "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
        m.shared_pool_cpus * 1000,
    );
    simple(
        &mut out,
        "cpu_manager_exclusive_cpu_allocation_count",
        "gauge",
        "The total number of CPUs exclusively allocated to containers.",
        m.exclusive_cpus,
    );
    header(
        &mut out,
        "cpu_manager_allocation_per_numa",
        "gauge",
        "Number of CPUs allocated per NUMA node.",
    );
    for (node, count) in &m.exclusive_per_numa {
        let _ = writeln!(
            out,
            "cpu_manager_allocation_per_numa{{numa_node=\"{node}\"}} {count}"
        );
    }
    aligned(
        &mut out,
        "container_aligned_compute_resources_count",
        "Cumulative number of aligned compute resources allocated to containers by alignment type.",
        &c.aligned,
    );
    aligned(&mut out, "container_aligned_compute_resources_failure_count",
        "Cumulative number of failures to allocate aligned compute resources to containers by alignment type.", &c.aligned_failures);
    topology_manager(&mut out, &m.engine.topology);
    simple(
        &mut out,
        "pinion_reconcile_runs_total",
        "counter",
        "Reconcile passes run.",
        c.reconcile_runs_total,
    );
    simple(
        &mut out,
        "pinion_reconcile_drift_repairs_total",
        "counter",
        "Cgroup cpusets found changed outside Pinion and rewritten.",
        c.drift_repairs_total,
    );
    simple(
        &mut out,
        "pinion_released_gone_total",
        "counter",
        "Containers released because their processes had ended.",
        c.released_gone_total,
    );
    simple(
        &mut out,
        "pinion_managed_containers",
        "gauge",
        "Containers currently admitted.",
        m.workloads,
    );
    histogram(
        &mut out,
        "pinion_checkpoint_write_duration_seconds",
        "Durable checkpoint write latency (write, fsync, rename, directory fsync).",
        &c.checkpoint_write_seconds,
    );
    out
}

/// kubelet's Topology Manager admission metrics.
fn topology_manager(out: &mut String, t: &AdmissionMetrics) {
    simple(
        out,
        "topology_manager_admission_requests_total",
        "counter",
        "The number of admission requests where resources have to be aligned.",
        t.requests_total,
    );
    simple(
        out,
        "topology_manager_admission_errors_total",
        "counter",
        "The number of admission request failures where resources could not be aligned.",
        t.errors_total,
    );
    let name = "topology_manager_admission_duration_ms";
    header(
        out,
        name,
        "histogram",
        "Duration in milliseconds to serve a pod admission request.",
    );
    for (bound, cumulative) in t.duration_ms.cumulative() {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let h = &t.duration_ms;
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}", h.sum_ms());
    let _ = writeln!(out, "{name}_count {}", h.count);
}

fn aligned(out: &mut String, name: &str, help: &str, values: &BTreeMap<(&str, &str), u64>) {
    header(out, name, "counter", help);
    for scope in ["container", "pod"] {
        for boundary in ["numa_node", "physical_cpu", "uncore_cache"] {
            let value = values.get(&(scope, boundary)).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}{{boundary=\"{boundary}\",scope=\"{scope}\"}} {value}"
            );
        }
    }
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    header(out, name, "histogram", help);
    let mut cumulative = 0;
    for (bound, count) in WRITE_BUCKETS.iter().zip(h.counts) {
        cumulative += count;
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}", h.sum);
    let _ = writeln!(out, "{name}_count {}", h.count);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_of(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
            .map(|line| line[series.len() + 1..].to_string())
    }

    #[test]
    fn renders_kubelet_names_with_values() {
        let mut m = MetricsSnapshot {
            shared_pool_cpus: 3,
            exclusive_cpus: 5,
            ..MetricsSnapshot::default()
        };
        m.engine.pinning_requests_total = 7;
        m.engine.pinning_errors_total = 2;
        m.exclusive_per_numa.insert(1, 4);
        m.counters.aligned.insert(("container", "physical_cpu"), 6);
        m.counters.checkpoint_write_seconds.observe(0.0007);
        m.counters.checkpoint_write_seconds.observe(3.0);
        m.engine.topology.requests_total = 4;
        m.engine.topology.errors_total = 1;
        m.engine
            .topology
            .observe_duration(std::time::Duration::from_micros(70));
        let text = render(&m);
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
            ("pinion_checkpoint_write_duration_seconds_bucket{le=\"1\"}", "1"),
            ("pinion_checkpoint_write_duration_seconds_bucket{le=\"+Inf\"}", "2"),
            ("pinion_checkpoint_write_duration_seconds_count", "2"),
            ("topology_manager_admission_requests_total", "4"),
            ("topology_manager_admission_errors_total", "1"),
            ("topology_manager_admission_duration_ms_bucket{le=\"0.05\"}", "0"),
            ("topology_manager_admission_duration_ms_bucket{le=\"0.1\"}", "1"),
            ("topology_manager_admission_duration_ms_count", "1"),
        ];
        for (series, want) in cases {
            assert_eq!(
                value_of(&text, series).as_deref(),
                Some(want),
                "{series}\n{text}"
            );
        }
    }
}
