//! The QoS Resource Manager's loops wired to the controller: the
//! controller's handle as the loops' [`AllocationKeeper`], and the start of
//! the manager with its loops. `qrm/` knows the controller only through
//! that trait, so the arrows point one way: the controller's handle holds
//! the manager, the manager's loops hold a keeper.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use pinion_core::plugin_allocation::PluginAllocations;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::controller::{ControlError, ControllerHandle, Snapshot};
use crate::qrm::loops::{self, AllocationKeeper, Reconciled};
use crate::qrm::{KnownContainers, Poll, Qrm, QrmError};

impl AllocationKeeper for ControllerHandle {
    type Error = ControlError;

    async fn apply_polls(
        &self,
        polls: Vec<(String, Poll)>,
        polled_at: Instant,
    ) -> Result<Reconciled, ControlError> {
        self.plugin_reconcile(polls, polled_at).await
    }

    async fn record_reallocation(
        &self,
        key: (String, String),
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
    ) -> Result<(), ControlError> {
        ControllerHandle::record_reallocation(self, key, resources, allocations)
            .await
            .map(drop)
    }

    fn known_containers(&self) -> Option<KnownContainers> {
        let mut known = KnownContainers::new();
        for workload in &self.snapshot().workloads {
            known
                .entry(workload.pod.clone())
                .or_default()
                .insert(workload.container.clone());
        }
        Some(known)
    }

    fn allocated_resources(&self) -> std::collections::BTreeSet<String> {
        self.snapshot()
            .workloads
            .iter()
            .flat_map(|workload| workload.plugins.keys().cloned())
            .collect()
    }

    fn pending_removals(&self) -> watch::Receiver<Vec<String>> {
        self.plugin_removals()
    }

    async fn pod_removed(&self, uid: String) {
        self.plugin_pod_removed(uid).await;
    }

    async fn flush_plugin_state(&self) -> Result<(), ControlError> {
        ControllerHandle::flush_plugin_state(self).await
    }
}

/// Starts the manager (`Qrm::start`: the plugin watcher and the
/// registration server, with a placeholder for every resource of the
/// controller's durable allocations) and its loops with `handle` as their
/// keeper: reconcile, removal, and the backstop flush of the built-in
/// plugins' state. Each ends when `stop` turns true.
///
/// # Errors
/// When the manager cannot start (`QrmError::Start`).
pub fn start(
    qrm: &Arc<Qrm>,
    handle: &ControllerHandle,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, QrmError> {
    let snapshot = handle.snapshot();
    qrm.follow_machine(&snapshot.all_cpus, &snapshot.numa_nodes);
    let mut tasks = qrm.start(&snapshot.plugin_resources, stop)?;
    tasks.push(tokio::spawn(follow_machine(
        Arc::clone(qrm),
        handle.snapshots(),
        stop.clone(),
    )));
    tasks.push(tokio::spawn(loops::reconcile_loop(
        Arc::clone(qrm),
        handle.clone(),
        stop.clone(),
    )));
    tasks.push(tokio::spawn(loops::removal_loop(
        Arc::clone(qrm),
        handle.clone(),
        stop.clone(),
    )));
    tasks.push(tokio::spawn(loops::flush_backstop(
        Arc::clone(qrm),
        handle.clone(),
        stop.clone(),
    )));
    Ok(tasks)
}

/// Keeps the manager's view of the machine (online CPUs, NUMA nodes: what
/// a plugin's cpusets may name, [`Qrm::follow_machine`]) and the built-in
/// CPU plugin's ([`Qrm::follow_topology`]) on the controller's, which
/// follows CPU hot-plug. Ends when `stop` changes.
async fn follow_machine(
    qrm: Arc<Qrm>,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let machine = {
            let snapshot = snapshots.borrow_and_update();
            qrm.follow_machine(&snapshot.all_cpus, &snapshot.numa_nodes);
            snapshot.machine.clone()
        };
        if let Some(machine) = machine {
            qrm.follow_topology(&machine);
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { break },
            _ = stop.changed() => break,
        }
    }
}
