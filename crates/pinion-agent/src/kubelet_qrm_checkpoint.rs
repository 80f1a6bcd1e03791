//! The kubelet fork's QoS Resource Manager checkpoint,
//! `kubelet_qrm_checkpoint`, kept beside Pinion's journal while the QoS
//! Resource Manager is on: every container's resource-plugin allocations
//! in the form a QRM-enabled kubelet reads at its start (spec `qrm.md` §5),
//! so that a node can go back to one. Pinion's own state stays the journal;
//! this file is written from it and never read by the agent (a node coming
//! from katalyst-agent's ORM imports its file once with `pinion state
//! import-qrm`).
//!
//! Written a reconcile period after the allocations change (never on an
//! admission's path) and once more at the agent's stop.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pinion_core::qrm_checkpoint::{self, Entry};
use prost::Message;
use tokio::sync::watch;

use crate::controller::Snapshot;
use crate::qrm::convert::wire_allocation;

/// The file's name (the fork's and katalyst's checkpoint name).
pub const FILE: &str = "kubelet_qrm_checkpoint";

/// The checkpoint of `snapshot`'s plugin allocations: one entry per
/// (pod, container, resource), each `AllocationInfo` the protobuf encoding
/// of its `ResourceAllocationInfo` as the fork stores it.
#[must_use]
pub fn encode(snapshot: &Snapshot) -> Vec<u8> {
    let entries = snapshot
        .workloads
        .iter()
        .flat_map(|workload| {
            workload.plugins.iter().map(|(resource, allocation)| Entry {
                pod_uid: workload.pod.clone(),
                container_name: workload.container.clone(),
                resource_name: resource.clone(),
                allocation_info: qrm_checkpoint::go_json_string(
                    &wire_allocation(allocation).encode_to_vec(),
                ),
            })
        })
        .collect();
    qrm_checkpoint::encode(entries)
}

/// Keeps `dir/kubelet_qrm_checkpoint` equal to the allocations of the
/// latest snapshot until `stop`, writing `period` after a change.
pub async fn keep_written(
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    dir: PathBuf,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut written: Option<Vec<u8>> = None;
    let first = snapshots.borrow_and_update().clone();
    write_if_changed(&dir, &first, &mut written).await;
    loop {
        tokio::select! {
            changed = snapshots.changed() => {
                if changed.is_err() {
                    break;
                }
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    _ = stop.changed() => {}
                }
                let latest = snapshots.borrow_and_update().clone();
                write_if_changed(&dir, &latest, &mut written).await;
                if *stop.borrow() {
                    break;
                }
            }
            _ = stop.changed() => break,
        }
    }
    let latest = snapshots.borrow().clone();
    write_if_changed(&dir, &latest, &mut written).await;
}

async fn write_if_changed(dir: &Path, snapshot: &Snapshot, written: &mut Option<Vec<u8>>) {
    let bytes = encode(snapshot);
    if written.as_ref() == Some(&bytes) {
        return;
    }
    let (target, body) = (dir.to_path_buf(), bytes.clone());
    let result = tokio::task::spawn_blocking(move || {
        pinion_host::durable::write_atomic(&target, FILE, &body)
    })
    .await;
    match result {
        Ok(Ok(())) => *written = Some(bytes),
        Ok(Err(err)) => {
            tracing::warn!(
                "writing the kubelet QRM checkpoint {FILE}: {err}; tried again at the next change"
            );
        }
        Err(err) => tracing::warn!("writing the kubelet QRM checkpoint {FILE}: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinion_api::resourceplugin as rp;
    use pinion_core::plugin_allocation::{PluginAllocation, PluginHint};
    use pinion_core::qrm_checkpoint::QrmCheckpoint;

    use crate::controller::WorkloadView;

    fn workload(pod: &str, container: &str, plugins: &[(&str, PluginAllocation)]) -> WorkloadView {
        WorkloadView {
            pod: pod.into(),
            container: container.into(),
            frontend: "runtime".into(),
            placement: pinion_core::Placement::default(),
            applied: true,
            cgroup: None,
            pid: None,
            container_id: None,
            plugins: plugins
                .iter()
                .map(|(name, a)| ((*name).to_string(), a.clone()))
                .collect(),
            apply_error: None,
            partition: None,
            foreign_write: None,
            admitted: 0,
        }
    }

    fn cpu(cpus: &str, quantity: f64) -> PluginAllocation {
        PluginAllocation {
            oci_property_name: "CpusetCpus".into(),
            is_scalar_resource: true,
            allocated_quantity: quantity,
            allocation_result: cpus.into(),
            envs: [("CPUS".to_string(), cpus.to_string())].into(),
            resource_hints: Some(vec![PluginHint {
                nodes: vec![0],
                preferred: true,
            }]),
            ..PluginAllocation::default()
        }
    }

    fn snapshot(workloads: Vec<WorkloadView>) -> Snapshot {
        Snapshot {
            workloads,
            ..Snapshot::default()
        }
    }

    /// Issue 28 item 4: every container's allocations, one entry per
    /// resource, each the protobuf `ResourceAllocationInfo` the fork reads
    /// back; the file's checksum holds.
    #[test]
    fn the_checkpoint_holds_every_allocation_as_the_fork_stores_it() {
        let db = cpu("2-5", 4.0);
        let web = cpu("6-7", 2.0);
        let bytes = encode(&snapshot(vec![
            workload("pod-b", "web", &[("cpu", web.clone())]),
            workload("pod-a", "db", &[("cpu", db.clone())]),
            workload("pod-c", "plain", &[]),
        ]));
        let file = QrmCheckpoint::decode(&bytes).expect("decodes");
        file.verify().expect("checksum");
        let entries = file.entries.expect("entries");
        let found: Vec<(&str, &str, &str)> = entries
            .iter()
            .map(|e| {
                (
                    e.pod_uid.as_str(),
                    e.container_name.as_str(),
                    e.resource_name.as_str(),
                )
            })
            .collect();
        assert_eq!(found, [("pod-a", "db", "cpu"), ("pod-b", "web", "cpu")]);
        for (entry, want) in entries.iter().zip([&db, &web]) {
            let info = rp::ResourceAllocationInfo::decode(entry.allocation_info.as_bytes())
                .expect("the fork's protobuf form");
            assert_eq!(crate::qrm::convert::allocation(&info), *want);
        }
        let empty = QrmCheckpoint::decode(&encode(&Snapshot::default())).expect("empty");
        assert_eq!(empty.entries, None, "an empty cache is written as null");
    }

    #[tokio::test(start_paused = true)]
    async fn it_is_written_after_a_change_and_at_the_stop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (snapshots_tx, snapshots) = watch::channel(Arc::new(Snapshot::default()));
        let (stop_tx, stop) = watch::channel(false);
        let task = tokio::spawn(keep_written(
            snapshots,
            dir.path().to_path_buf(),
            Duration::from_secs(3),
            stop,
        ));
        let path = dir.path().join(FILE);
        let read =
            || QrmCheckpoint::decode(&std::fs::read(&path).expect("written")).expect("decodes");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(read().entries, None, "written at the start");

        snapshots_tx
            .send(Arc::new(snapshot(vec![workload(
                "p",
                "c",
                &[("cpu", cpu("1", 1.0))],
            )])))
            .expect("send");
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(read().entries.map(|e| e.len()), Some(1), "a period after");

        snapshots_tx
            .send(Arc::new(snapshot(vec![
                workload("p", "c", &[("cpu", cpu("1", 1.0))]),
                workload("q", "c", &[("cpu", cpu("2", 1.0))]),
            ])))
            .expect("send");
        stop_tx.send(true).expect("stop");
        task.await.expect("ends");
        assert_eq!(read().entries.map(|e| e.len()), Some(2), "at the stop");
    }
}
