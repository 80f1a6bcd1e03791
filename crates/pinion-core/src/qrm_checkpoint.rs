//! katalyst's QoS Resource Manager checkpoint (`kubelet_qrm_checkpoint`,
//! spec `qrm.md` §5), read so that a node moving from katalyst-agent's ORM
//! to Pinion keeps its plugins' allocations.
//!
//! Only ORM's JSON form is understood: every entry's `AllocationInfo` is the
//! JSON encoding of a `ResourceAllocationInfo` (§2.6). The kubelet fork
//! stores protobuf bytes in that string (lossy once Go's JSON encoder has
//! replaced invalid UTF-8); such entries are reported as unreadable, not
//! guessed at.
//!
//! Written too ([`encode`]), in the kubelet fork's form, beside Pinion's
//! journal: a node going back to a QRM-enabled kubelet finds its
//! containers' allocations there.
//!
//! The checksum is FNV-1a (32 bit) over go-spew's `%#v` text of the `Data`
//! value, rebuilt by [`hashed_text`] with the same formatter rules as
//! kubelet's CPU checkpoint ([`crate::checkpoint`]): strings raw, struct
//! fields as `Name:(type)value`, slice elements without types, a nil slice
//! as `<nil>`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::checkpoint::fnv1a_32;
use crate::plugin_allocation::{PluginAllocation, PluginAllocations, PluginHint};

/// The largest checkpoint read (katalyst's are a few hundred bytes per
/// container; this allows far more than a node runs).
pub const MAX_BYTES: usize = 64 * 1024 * 1024;

/// A container's plugin data in Pinion's state (journal side data of kind
/// `qrm-allocation`, key `<pod>/<container>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredAllocations {
    /// The plugin resources the container requested.
    pub resources: BTreeSet<String>,
    pub allocations: PluginAllocations,
}

/// Side-data kind of a container's plugin allocations.
// difference-from-kubelet: qrm-journal-not-state-file
pub const ALLOCATIONS: &str = "qrm-allocation";

/// The side-data key of a container.
#[must_use]
pub fn side_key(pod: &str, container: &str) -> String {
    format!("{pod}/{container}")
}

/// Why a checkpoint cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QrmCheckpointError {
    #[error("checkpoint is {size} bytes, more than the {MAX_BYTES} read")]
    TooLarge { size: usize },
    #[error("not a QRM checkpoint: {reason}")]
    Malformed { reason: String },
    #[error("checksum mismatch: the file says {stored}, its content hashes to {computed} (checkpoint is corrupted)")]
    Checksum { stored: u64, computed: u32 },
}

/// One `PodResourcesEntry`, as written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    #[serde(rename = "ContainerName")]
    pub container_name: String,
    #[serde(rename = "ResourceName")]
    pub resource_name: String,
    #[serde(rename = "AllocationInfo")]
    pub allocation_info: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Data {
    #[serde(rename = "PodResourceEntries")]
    entries: Option<Vec<Entry>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(rename = "Data")]
    data: Data,
    #[serde(rename = "Checksum")]
    checksum: u64,
}

/// A decoded checkpoint (checksum not yet checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QrmCheckpoint {
    /// `None`: written as `null` (an empty cache).
    pub entries: Option<Vec<Entry>>,
    pub checksum: u64,
}

impl QrmCheckpoint {
    /// Decodes the JSON file.
    pub fn decode(bytes: &[u8]) -> Result<QrmCheckpoint, QrmCheckpointError> {
        if bytes.len() > MAX_BYTES {
            return Err(QrmCheckpointError::TooLarge { size: bytes.len() });
        }
        let file: File =
            serde_json::from_slice(bytes).map_err(|err| QrmCheckpointError::Malformed {
                reason: err.to_string(),
            })?;
        Ok(QrmCheckpoint {
            entries: file.data.entries,
            checksum: file.checksum,
        })
    }

    /// The checksum its content should have.
    #[must_use]
    pub fn computed_checksum(&self) -> u32 {
        fnv1a_32(hashed_text(self.entries.as_deref()).as_bytes())
    }

    /// Checks the stored checksum.
    pub fn verify(&self) -> Result<(), QrmCheckpointError> {
        let computed = self.computed_checksum();
        if self.checksum == u64::from(computed) {
            Ok(())
        } else {
            Err(QrmCheckpointError::Checksum {
                stored: self.checksum,
                computed,
            })
        }
    }

    /// The entries as Pinion's per-container plugin data, and what could
    /// not be carried over (one line per problem, naming the entry).
    #[must_use]
    pub fn to_allocations(&self) -> Imported {
        let mut imported = Imported::default();
        for entry in self.entries.iter().flatten() {
            let who = format!(
                "{}/{} {}",
                entry.pod_uid, entry.container_name, entry.resource_name
            );
            if entry.pod_uid.is_empty()
                || entry.container_name.is_empty()
                || entry.resource_name.is_empty()
            {
                imported.skipped.push(format!(
                    "{who:?}: an entry without pod, container or resource"
                ));
                continue;
            }
            let info = match serde_json::from_str::<AllocationInfo>(&entry.allocation_info) {
                Ok(info) => info,
                Err(err) => {
                    imported.skipped.push(format!(
                        "{who}: AllocationInfo is not ORM's JSON form ({err}); the kubelet fork's protobuf form is not imported"
                    ));
                    continue;
                }
            };
            if info.mounts.as_ref().is_some_and(|m| !m.is_empty())
                || info.devices.as_ref().is_some_and(|d| !d.is_empty())
            {
                imported.notes.push(format!(
                    "{who}: mounts and devices are not applied by Pinion and were left out"
                ));
            }
            let stored = imported
                .containers
                .entry((entry.pod_uid.clone(), entry.container_name.clone()))
                .or_default();
            if stored.allocations.contains_key(&entry.resource_name) {
                imported.skipped.push(format!(
                    "{who}: a second entry for the same resource (the first is kept)"
                ));
                continue;
            }
            stored.resources.insert(entry.resource_name.clone());
            stored
                .allocations
                .insert(entry.resource_name.clone(), info.into_allocation());
        }
        imported
    }
}

/// What [`QrmCheckpoint::to_allocations`] made of the entries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Imported {
    /// (pod UID, container name) → its plugin data.
    pub containers: BTreeMap<(String, String), StoredAllocations>,
    /// Entries left out.
    pub skipped: Vec<String>,
    /// Parts of entries left out.
    pub notes: Vec<String>,
}

/// `ResourceAllocationInfo` in ORM's JSON form (§2.6).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllocationInfo {
    #[serde(default)]
    oci_property_name: String,
    #[serde(default)]
    is_node_resource: bool,
    #[serde(default)]
    is_scalar_resource: bool,
    #[serde(default)]
    allocated_quantity: f64,
    #[serde(default)]
    allocation_result: String,
    #[serde(default)]
    envs: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    resource_hints: Option<ListOfHints>,
    #[serde(default)]
    topology_assignments: BTreeMap<u64, u64>,
    #[serde(default)]
    mounts: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    devices: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListOfHints {
    #[serde(default)]
    hints: Vec<Hint>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Hint {
    #[serde(default)]
    nodes: Vec<u64>,
    #[serde(default)]
    preferred: bool,
}

impl AllocationInfo {
    fn into_allocation(self) -> PluginAllocation {
        PluginAllocation {
            oci_property_name: self.oci_property_name,
            is_node_resource: self.is_node_resource,
            is_scalar_resource: self.is_scalar_resource,
            allocated_quantity: self.allocated_quantity,
            allocation_result: self.allocation_result,
            envs: self.envs,
            annotations: self.annotations,
            resource_hints: self.resource_hints.map(|list| {
                list.hints
                    .into_iter()
                    .map(|h| PluginHint {
                        nodes: h.nodes,
                        preferred: h.preferred,
                    })
                    .collect()
            }),
            topology_assignments: self.topology_assignments,
        }
    }
}

/// The file as kubelet's checkpoint manager writes it: `entries` sorted
/// (by pod, container, resource), a `null` list when there are none, and
/// the checksum of that content.
#[must_use]
pub fn encode(mut entries: Vec<Entry>) -> Vec<u8> {
    #[derive(Serialize)]
    struct OutData<'a> {
        #[serde(rename = "PodResourceEntries")]
        entries: Option<&'a [Entry]>,
    }
    #[derive(Serialize)]
    struct OutFile<'a> {
        #[serde(rename = "Data")]
        data: OutData<'a>,
        #[serde(rename = "Checksum")]
        checksum: u64,
    }
    entries.sort();
    let list = (!entries.is_empty()).then_some(entries.as_slice());
    let checksum = u64::from(fnv1a_32(hashed_text(list).as_bytes()));
    let file = OutFile {
        data: OutData { entries: list },
        checksum,
    };
    // Plain strings and numbers: serializing cannot fail.
    serde_json::to_vec(&file).unwrap_or_default()
}

/// `bytes` as Go's JSON encoder writes a Go string holding them — the
/// kubelet fork stores a `ResourceAllocationInfo`'s protobuf bytes in a Go
/// string — each byte that is not part of valid UTF-8 replaced by U+FFFD.
/// That is what a reader decodes and hashes; an entry so changed no longer
/// decodes (the fork's own files have the same loss, spec `qrm.md` §5).
#[must_use]
pub fn go_json_string(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                out.push_str(valid);
                break;
            }
            Err(err) => {
                let (valid, after) = rest.split_at(err.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                out.push(char::REPLACEMENT_CHARACTER);
                rest = &after[1..];
            }
        }
    }
    out
}

/// The text katalyst hashes for these entries (`None`: a nil slice).
#[must_use]
pub fn hashed_text(entries: Option<&[Entry]>) -> String {
    let mut out = String::from(
        "(checkpoint.checkpointData){PodResourceEntries:([]checkpoint.PodResourcesEntry)",
    );
    match entries {
        None => out.push_str("<nil>"),
        Some(entries) => {
            out.push('[');
            for (index, entry) in entries.iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                out.push_str("{PodUID:(string)");
                out.push_str(&entry.pod_uid);
                out.push_str(" ContainerName:(string)");
                out.push_str(&entry.container_name);
                out.push_str(" ResourceName:(string)");
                out.push_str(&entry.resource_name);
                out.push_str(" AllocationInfo:(string)");
                out.push_str(&entry.allocation_info);
                out.push('}');
            }
            out.push(']');
        }
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = r#"{"oci_property_name":"CpusetCpus","is_scalar_resource":true,"allocated_quantity":4,"allocation_result":"2-5","resource_hints":{"hints":[{"nodes":[0],"preferred":true}]}}"#;

    fn file(entries: &str, checksum: u64) -> String {
        format!(r#"{{"Data":{{"PodResourceEntries":{entries}}},"Checksum":{checksum}}}"#)
    }

    fn entry(pod: &str, container: &str, resource: &str, info: &str) -> String {
        serde_json::json!({
            "PodUID": pod, "ContainerName": container,
            "ResourceName": resource, "AllocationInfo": info,
        })
        .to_string()
    }

    #[test]
    fn the_hashed_text_has_the_spew_shape_of_the_spec() {
        let checkpoint = QrmCheckpoint::decode(
            file(&format!("[{}]", entry("u1", "c", "cpu", "{}")), 0).as_bytes(),
        )
        .expect("decodes");
        assert_eq!(
            hashed_text(checkpoint.entries.as_deref()),
            "(checkpoint.checkpointData){PodResourceEntries:([]checkpoint.PodResourcesEntry)[{PodUID:(string)u1 ContainerName:(string)c ResourceName:(string)cpu AllocationInfo:(string){}}]}"
        );
        assert_eq!(
            hashed_text(None),
            "(checkpoint.checkpointData){PodResourceEntries:([]checkpoint.PodResourcesEntry)<nil>}"
        );
    }

    #[test]
    fn a_checksum_is_checked_and_a_changed_byte_is_refused() {
        let entries = format!("[{}]", entry("u1", "c", "cpu", INFO));
        let unsigned = QrmCheckpoint::decode(file(&entries, 0).as_bytes()).expect("decodes");
        let good = unsigned.computed_checksum();
        unsigned.verify().expect_err("a zero checksum is wrong");
        let signed =
            QrmCheckpoint::decode(file(&entries, u64::from(good)).as_bytes()).expect("decodes");
        signed.verify().expect("checksum matches");
        let tampered = file(&entries.replace("2-5", "2-6"), u64::from(good));
        let err = QrmCheckpoint::decode(tampered.as_bytes())
            .expect("decodes")
            .verify()
            .expect_err("changed content");
        assert!(
            matches!(err, QrmCheckpointError::Checksum { stored, .. } if stored == u64::from(good))
        );
    }

    #[test]
    fn orm_entries_become_per_container_allocations() {
        let nic = r#"{"is_node_resource":true,"is_scalar_resource":true,"allocated_quantity":1,"envs":{"AFFINITY_NIC_NAME":"eth0"},"annotations":{"kubernetes.io/host-netns-path":"/var/run/netns/ns2"},"topology_assignments":{"1":1}}"#;
        let entries = format!(
            "[{},{},{}]",
            entry("u1", "app", "cpu", INFO),
            entry("u1", "app", "example.com/nic", nic),
            entry(
                "u2",
                "db",
                "memory",
                r#"{"oci_property_name":"CpusetMems","allocation_result":"1"}"#
            ),
        );
        let imported = QrmCheckpoint::decode(file(&entries, 0).as_bytes())
            .expect("decodes")
            .to_allocations();
        assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
        let app = &imported.containers[&("u1".to_string(), "app".to_string())];
        assert_eq!(
            app.resources.iter().map(String::as_str).collect::<Vec<_>>(),
            ["cpu", "example.com/nic"]
        );
        let cpu = &app.allocations["cpu"];
        assert_eq!(cpu.oci_property_name, "CpusetCpus");
        assert_eq!(cpu.allocation_result, "2-5");
        assert!((cpu.allocated_quantity - 4.0).abs() < f64::EPSILON);
        assert_eq!(
            cpu.resource_hints,
            Some(vec![PluginHint {
                nodes: vec![0],
                preferred: true
            }])
        );
        let nic = &app.allocations["example.com/nic"];
        assert_eq!(nic.envs["AFFINITY_NIC_NAME"], "eth0");
        assert_eq!(
            nic.annotations["kubernetes.io/host-netns-path"],
            "/var/run/netns/ns2"
        );
        assert_eq!(nic.topology_assignments, BTreeMap::from([(1, 1)]));
        let db = &imported.containers[&("u2".to_string(), "db".to_string())];
        assert_eq!(db.allocations["memory"].allocation_result, "1");
    }

    #[test]
    fn unreadable_entries_are_skipped_by_name_and_the_rest_imported() {
        let entries = format!(
            "[{},{},{},{}]",
            entry("u1", "app", "cpu", "\u{8}\u{12}\u{fffd}binary"),
            entry(
                "u1",
                "app",
                "memory",
                r#"{"oci_property_name":"CpusetMems","allocation_result":"0"}"#
            ),
            entry(
                "u1",
                "app",
                "memory",
                r#"{"oci_property_name":"CpusetMems","allocation_result":"1"}"#
            ),
            entry("", "app", "cpu", INFO),
        );
        let imported = QrmCheckpoint::decode(file(&entries, 0).as_bytes())
            .expect("decodes")
            .to_allocations();
        assert_eq!(imported.skipped.len(), 3, "{:?}", imported.skipped);
        assert!(
            imported.skipped[0].contains("u1/app cpu") && imported.skipped[0].contains("protobuf")
        );
        assert!(imported.skipped[1].contains("second entry"));
        let app = &imported.containers[&("u1".to_string(), "app".to_string())];
        assert_eq!(app.allocations["memory"].allocation_result, "0");
        assert!(!app.allocations.contains_key("cpu"));
    }

    #[test]
    fn a_null_cache_and_malformed_files() {
        let empty = QrmCheckpoint::decode(file("null", 0).as_bytes()).expect("decodes");
        assert_eq!(empty.entries, None);
        assert!(empty.to_allocations().containers.is_empty());
        for bad in [
            "",
            "{}",
            r#"{"Data":{},"Checksum":"x"}"#,
            r#"{"Data":{"PodResourceEntries":[{"PodUID":1}]},"Checksum":0}"#,
        ] {
            let err = QrmCheckpoint::decode(bad.as_bytes()).expect_err(bad);
            assert!(
                matches!(err, QrmCheckpointError::Malformed { .. }),
                "{bad}: {err}"
            );
        }
    }

    fn typed_entry(pod: &str, container: &str, resource: &str, info: &str) -> Entry {
        Entry {
            pod_uid: pod.into(),
            container_name: container.into(),
            resource_name: resource.into(),
            allocation_info: info.into(),
        }
    }

    /// Issue 28 item 4: what Pinion writes reads back, checksum included,
    /// in a stable order.
    #[test]
    fn an_encoded_checkpoint_decodes_and_verifies() {
        let entries = vec![
            typed_entry("pod-b", "main", "cpu", INFO),
            typed_entry("pod-a", "main", "memory", "\u{fffd}\u{0}x"),
            typed_entry("pod-a", "main", "cpu", INFO),
        ];
        let bytes = encode(entries.clone());
        let decoded = QrmCheckpoint::decode(&bytes).expect("decodes");
        decoded.verify().expect("its checksum holds");
        let mut sorted = entries;
        sorted.sort();
        assert_eq!(decoded.entries, Some(sorted));

        let empty = encode(Vec::new());
        let text = String::from_utf8(empty.clone()).unwrap();
        assert!(text.contains(r#""PodResourceEntries":null"#), "{text}");
        QrmCheckpoint::decode(&empty).unwrap().verify().unwrap();
    }

    #[test]
    fn go_strings_replace_each_invalid_byte() {
        assert_eq!(go_json_string(b"CpusetCpus"), "CpusetCpus");
        assert_eq!(
            go_json_string(&[0x21, 0, 0xf0, 0x3f, b'a']),
            "!\u{0}\u{fffd}?a"
        );
        assert_eq!(
            go_json_string(&[0xe2, 0x82]),
            "\u{fffd}\u{fffd}",
            "a cut sequence: one replacement per byte, as Go's decoder"
        );
        assert_eq!(go_json_string("é".as_bytes()), "é");
    }
}
