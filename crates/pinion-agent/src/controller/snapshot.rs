//! Snapshots: what readers (the local API's `ps`, `/metrics`, front-ends
//! looking up a container's placement) see, published by the controller
//! after each change.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use pinion_core::plugin_allocation::PluginAllocations;
use pinion_core::state::Assignments;
use pinion_core::{CpuSet, Placement};
use serde::{Deserialize, Serialize};

use super::{Controller, Frontend, Key, Workload};
use crate::metrics::MetricsSnapshot;

/// The controller's view at one point.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub policy: String,
    pub all_cpus: CpuSet,
    pub reserved: CpuSet,
    pub shared_pool: CpuSet,
    /// The placement of a container in the shared pool.
    pub shared_placement: Placement,
    /// Every workload, sorted by pod and container.
    pub workloads: Vec<WorkloadView>,
    /// The exclusive assignments (the checkpoint's entries).
    pub assignments: Assignments,
    /// Every resource named by resource plugins' allocations.
    #[serde(default)]
    pub plugin_resources: BTreeSet<String>,
    /// Pods whose plugins have not all heard of their removal yet.
    #[serde(default)]
    pub pending_plugin_removals: Vec<String>,
    /// What the start repaired (rebuild from the node, migration), one
    /// line per event and conflict.
    #[serde(default)]
    pub recovery: Vec<String>,
    #[serde(skip)]
    pub metrics: MetricsSnapshot,
}

impl Snapshot {
    /// The placement of `pod`/`container`: its own when it is a workload,
    /// the shared pool's otherwise.
    #[must_use]
    pub fn placement_of(&self, pod: &str, container: &str) -> Placement {
        self.workload(pod, container)
            .map_or_else(|| self.shared_placement.clone(), |w| w.placement.clone())
    }

    /// The workload of `key`, if any.
    #[must_use]
    pub fn workload(&self, pod: &str, container: &str) -> Option<&WorkloadView> {
        self.workloads
            .iter()
            .find(|w| w.pod == pod && w.container == container)
    }
}

/// One workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadView {
    pub pod: String,
    pub container: String,
    /// `standalone` or `runtime`.
    pub frontend: String,
    /// Where it runs (the desired placement).
    pub placement: Placement,
    /// False while the executor has yet to apply the placement (or the
    /// last attempt failed).
    pub applied: bool,
    pub cgroup: Option<String>,
    pub pid: Option<u32>,
    pub container_id: Option<String>,
    /// What resource plugins allocated to it, by resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugins: PluginAllocations,
}

impl Controller {
    /// Builds and publishes a snapshot.
    pub(super) fn publish(&self) {
        let state = self.engine.state();
        let workloads: Vec<WorkloadView> =
            self.workloads.iter().map(|(key, w)| view(key, w)).collect();
        let shared_pool = self.engine.shared_pool();
        let snapshot = Snapshot {
            policy: self.engine.policy().name().to_string(),
            all_cpus: self.engine.machine().all_cpus().clone(),
            reserved: self.engine.policy().reserved(),
            metrics: MetricsSnapshot {
                engine: self.engine.metrics(),
                gauges: self.engine.cpu_gauges(),
                counters: self.counters.clone(),
                workloads: workloads.len(),
            },
            shared_placement: Placement::shared(self.engine.machine(), shared_pool.clone()),
            shared_pool,
            workloads,
            assignments: state.assignments.clone(),
            plugin_resources: self.plugin_resources(),
            pending_plugin_removals: self.pending_removals(),
            recovery: self.start_report.lines.clone(),
        };
        self.snapshot_tx.send_replace(Arc::new(snapshot));
    }
}

fn view(key: &Key, workload: &Workload) -> WorkloadView {
    let (cgroup, pid, container_id) = match &workload.frontend {
        Frontend::Standalone { cgroup, pid } => (Some(cgroup.to_string()), *pid, None),
        Frontend::Runtime { container_id } => (None, None, container_id.clone()),
    };
    WorkloadView {
        pod: key.0.clone(),
        container: key.1.clone(),
        frontend: workload.frontend.kind().to_string(),
        placement: workload.desired.clone(),
        applied: workload.applied.as_ref() == Some(&workload.desired),
        cgroup,
        pid,
        container_id,
        plugins: workload.plugins.clone(),
    }
}
