//! Owns the snapshot readers see (`ps`, `/metrics`, the front-ends) and its publication after every change.
//!
//! Snapshots: what readers (the local API's `ps`, `/metrics`, front-ends
//! looking up a container's placement) see, published by the controller
//! after each change.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use pinion_core::plugin_allocation::PluginAllocations;
use pinion_core::pod::Pod;
use pinion_core::state::{Assignments, PodCpus};
use pinion_core::{CpuSet, Placement, Topology};
use serde::{Deserialize, Serialize};

use super::counters::{MetricsSnapshot, PartitionGauges};
use super::{Controller, Frontend, Key, Workload};

/// The controller's view at one point.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// The machine the state places on now: it follows CPU hot-plug
    /// (podresources' allocatable CPUs and NRT's zones read it). `None`
    /// only in a snapshot made by hand.
    #[serde(skip)]
    pub machine: Option<Arc<Topology>>,
    pub policy: String,
    pub all_cpus: CpuSet,
    /// The machine's NUMA nodes (what a `CpusetMems` may name).
    #[serde(default)]
    pub numa_nodes: CpuSet,
    pub reserved: CpuSet,
    pub shared_pool: CpuSet,
    /// The placement of a container in the shared pool.
    pub shared_placement: Placement,
    /// Every workload, sorted by pod and container.
    pub workloads: Vec<WorkloadView>,
    /// The exclusive assignments (the checkpoint's entries).
    pub assignments: Assignments,
    /// The pods' own CPU sets (pod-level resources), by pod UID.
    #[serde(default)]
    pub pod_cpus: PodCpus,
    /// Every resource named by resource plugins' allocations.
    #[serde(default)]
    pub plugin_resources: BTreeSet<String>,
    /// Pods whose plugins have not all heard of their removal yet.
    #[serde(default)]
    pub pending_plugin_removals: Vec<String>,
    /// The pods whose identity is known (podresources), by UID: the spec a
    /// workload was admitted with (the one naming the most containers), or
    /// for a standalone run recovered at start, its id in namespace
    /// `pinion`. Containers of pods outside Kubernetes are not pods.
    #[serde(skip)]
    pub pods: BTreeMap<String, Arc<Pod>>,
    /// What the start repaired (rebuild from the node, migration), one
    /// line per event and conflict.
    #[serde(default)]
    pub recovery: Vec<String>,
    /// What CPU hot-plug changed while the agent ran, one line per change
    /// and per workload that did not keep exactly its CPUs.
    #[serde(default)]
    pub hotplug: Vec<String>,
    /// The cgroup root's `cpuset.cpus.isolated` (cgroup v2, Linux 6.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolated_cpus: Option<CpuSet>,
    /// Each housekeeping cgroup: its cpus, state and last foreign write.
    #[serde(default)]
    pub housekeeping: Vec<String>,
    #[serde(skip)]
    pub metrics: MetricsSnapshot,
    /// The executor pass it was published after: its placements are at
    /// least as new as every runtime update of that pass or an earlier one
    /// ([`super::RuntimeUpdate::pass`]).
    #[serde(skip)]
    pub pass: u64,
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
    /// Why its cgroup settings could not be written (since the last write
    /// that succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_error: Option<String>,
    /// Its cgroup's cpuset partition ([`super::PartitionState::describe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The last cpuset another writer put in its cgroup: when, from, to and
    /// whether Pinion repaired it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_write: Option<String>,
    /// When it was admitted, in admissions since the start (`0`: recovered
    /// at start): podresources' `Get` of a name two pods share answers the
    /// one admitted last, as kubelet does.
    #[serde(skip)]
    pub admitted: u64,
}

impl Controller {
    /// Builds and publishes a snapshot, then the list of pending plugin
    /// removals: whoever wakes on the list (the removal loop, a release
    /// waiting for the plugins) reads a snapshot at least as new.
    pub(super) fn publish(&self) {
        let state = self.engine.state();
        let workloads: Vec<WorkloadView> = self
            .workloads
            .iter()
            .map(|(key, w)| {
                let mut view = view(key, w);
                view.partition = self.partitions.of(w).map(super::PartitionState::describe);
                view
            })
            .collect();
        let shared_pool = self.engine.shared_pool();
        let pending_plugin_removals = self.pending_removals();
        let snapshot = Snapshot {
            machine: Some(self.engine.shared_machine()),
            policy: self.engine.policy().name().to_string(),
            all_cpus: self.engine.machine().all_cpus().clone(),
            numa_nodes: self
                .engine
                .machine()
                .numa_nodes()
                .iter()
                .map(|n| n.id)
                .collect(),
            reserved: self.engine.policy().reserved(),
            metrics: MetricsSnapshot {
                engine: self.engine.metrics(),
                gauges: self.engine.cpu_gauges(),
                counters: self.counters.clone(),
                workloads: workloads.len(),
                housekeeping_states: self.housekeeping.states(),
                system_partition: self.system_partition.as_ref().map(|p| PartitionGauges {
                    memory_limit: p.memory_limit,
                    memory_limit_enforced: self.partition_memory.is_enforced(),
                    pods: self.system_partition_pods(),
                }),
            },
            shared_placement: Placement::shared(shared_pool.clone()),
            shared_pool,
            workloads,
            assignments: state.assignments.clone(),
            pod_cpus: self.engine.pod_cpus().clone(),
            plugin_resources: self.plugin_resources(),
            pending_plugin_removals,
            pods: self.known_pods(),
            recovery: self.start_report.lines.clone(),
            hotplug: self.hotplug_lines.clone(),
            isolated_cpus: self.host.isolated_cpus(),
            housekeeping: self.housekeeping.lines(),
            pass: self.passes,
        };
        let snapshot = Arc::new(snapshot);
        self.snapshot_tx.send_replace(Arc::clone(&snapshot));
        self.plugin_data
            .publish_removals(&snapshot.pending_plugin_removals);
    }
}

impl Controller {
    /// See [`Snapshot::pods`].
    fn known_pods(&self) -> BTreeMap<String, Arc<Pod>> {
        let mut pods: BTreeMap<String, Arc<Pod>> = BTreeMap::new();
        for ((uid, container), workload) in &self.workloads {
            let spec = match (&workload.spec, &workload.frontend) {
                (Some(spec), _) => Arc::clone(spec),
                (None, Frontend::Standalone { .. }) => {
                    if pods.contains_key(uid) {
                        continue;
                    }
                    Arc::new(recovered_run(uid, container))
                }
                (None, Frontend::Runtime { .. }) => continue,
            };
            let size = |p: &Pod| p.init_containers.len() + p.containers.len();
            match pods.get(uid) {
                Some(known) if size(known) >= size(&spec) => {}
                _ => {
                    pods.insert(uid.clone(), spec);
                }
            }
        }
        pods
    }
}

/// A standalone run known only by its id (recovered from the checkpoint).
fn recovered_run(uid: &str, container: &str) -> Pod {
    Pod {
        uid: uid.to_string(),
        name: uid.to_string(),
        namespace: pinion_api::local::RUN_NAMESPACE.to_string(),
        containers: vec![pinion_core::pod::Container {
            name: container.to_string(),
            ..pinion_core::pod::Container::default()
        }],
        ..Pod::default()
    }
}

fn view(key: &Key, workload: &Workload) -> WorkloadView {
    let (cgroup, pid, container_id) = match &workload.frontend {
        Frontend::Standalone { cgroup, pid } => (Some(cgroup.to_string()), *pid, None),
        Frontend::Runtime { container_id, .. } => (None, None, container_id.clone()),
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
        plugins: workload.plugins.allocations.clone(),
        apply_error: workload.apply_failure.clone(),
        partition: None,
        foreign_write: workload.foreign_mark.as_ref().map(ToString::to_string),
        admitted: workload.admitted,
    }
}
