//! kubelet's `cpu_manager_state` checkpoint: the model, the codec and the
//! checksum. Bytes in, bytes out; no I/O (the durable file store lives in
//! `pinion-host`).
//!
//! The file is JSON written by Go's `encoding/json`; its `checksum` is
//! FNV-1a (32 bit) over the text go-spew prints for the checkpoint with the
//! checksum set to 0 (see [`hashed_text`] and `docs/checkpoint-format.md`).
//! Two layouts exist: v1 (entries keyed by container id) and v2 (entries
//! keyed by pod UID, then container name). Reading tries v1 first, then v2,
//! as kubelet did; writing always produces v2.
//!
//! The model keeps every stored string verbatim, so the checksum of a file
//! can be recomputed exactly; [`Checkpoint::to_state`] parses the CPU sets.

mod checksum;
mod decode;
mod encode;
mod salvage;

use std::collections::{BTreeMap, BTreeSet};

use crate::cpuset::{CpuSet, CpuSetError};

pub use checksum::{fnv1a_32, hashed_text};
pub use decode::decode;
pub use encode::encode;
pub use salvage::{salvage, Salvaged};

/// Pod UID → container name → CPU set text (the v2 `entries`).
pub type PodEntries = BTreeMap<String, BTreeMap<String, String>>;

/// Errors from decoding, verifying or interpreting a checkpoint. Texts
/// follow kubelet's where kubelet has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// The bytes end before the JSON document does (empty or cut file).
    #[error("checkpoint is truncated: {reason}")]
    Truncated { reason: String },
    /// The bytes are not JSON.
    #[error("checkpoint is not valid json: {reason}")]
    Syntax { reason: String },
    /// The top level is not an object, or a known field holds a value of the
    /// wrong type for both layouts.
    #[error("checkpoint does not fit the v1 or v2 layout: {reason}")]
    Layout { reason: String },
    /// The stored checksum differs from the recomputed one (kubelet's text).
    #[error("checkpoint is corrupted")]
    Corrupted { stored: u64, computed: u64 },
    /// kubelet's text for a bad default CPU set.
    #[error("could not parse default cpu set {text:?}: {source}")]
    DefaultCpuSet {
        text: String,
        source: Box<CpuSetError>,
    },
    /// kubelet's text for a bad container CPU set.
    #[error(
        "could not parse cpuset {text:?} for container {container:?} in pod {pod:?}: {source}"
    )]
    ContainerCpuSet {
        text: String,
        container: String,
        pod: String,
        source: Box<CpuSetError>,
    },
    /// A v1 entry names a container the caller does not know (kubelet's text).
    #[error(
        "error migrating v1 checkpoint state to v2 checkpoint state: \
         containerID '{container_id}' not found in initial containers list"
    )]
    UnknownContainerId { container_id: String },
    /// v1 entries are keyed by container id; they need [`Checkpoint::migrate_v1`].
    #[error("v1 checkpoint entries are keyed by container id and must be migrated to v2 first")]
    NeedsMigration,
    /// The file is larger than any checkpoint ([`MAX_CHECKPOINT_BYTES`]):
    /// not read, so that a damaged file cannot exhaust the memory.
    #[error("checkpoint is {size} bytes, more than the {max} bytes a checkpoint may have")]
    TooLarge { size: u64, max: u64 },
}

/// The largest checkpoint file read: one of 100,000 containers on a
/// 1,024-CPU machine is a few MiB.
pub const MAX_CHECKPOINT_BYTES: u64 = 64 << 20;

/// The two checkpoint layouts kubelet has written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `entries`: container id → CPU set.
    V1,
    /// `entries`: pod UID → container name → CPU set.
    V2,
}

impl Version {
    /// `"v1"` or `"v2"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// The `entries` of a checkpoint, in the layout of its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entries {
    /// Container id → CPU set text.
    V1(BTreeMap<String, String>),
    /// Pod UID → container name → CPU set text.
    V2(PodEntries),
}

/// Go `nil` maps seen in a decoded file (`"entries": null`, `"<pod>": null`).
/// They print differently from empty maps in the hashed text, so they are
/// remembered to recompute kubelet's checksum exactly. Kubelet never writes
/// them; only hand-made files have them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NilMaps {
    pub(crate) entries: bool,
    pub(crate) pods: BTreeSet<String>,
}

/// A decoded checkpoint with every stored string kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    policy_name: String,
    default_cpu_set: String,
    entries: Entries,
    checksum: u64,
    nils: NilMaps,
}

/// A checkpoint whose CPU sets are parsed (what a restore works with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointState {
    pub policy_name: String,
    pub default_cpu_set: CpuSet,
    /// Pod UID → container name → CPU set.
    pub assignments: BTreeMap<String, BTreeMap<String, CpuSet>>,
}

impl Checkpoint {
    /// A v2 checkpoint with its checksum computed, as kubelet would write it.
    #[must_use]
    pub fn new(policy_name: &str, default_cpu_set: &str, entries: PodEntries) -> Self {
        let mut checkpoint = Self::from_parts(
            policy_name.to_string(),
            default_cpu_set.to_string(),
            Entries::V2(entries),
            0,
            NilMaps::default(),
        );
        checkpoint.checksum = checkpoint.computed_checksum();
        checkpoint
    }

    pub(crate) fn from_parts(
        policy_name: String,
        default_cpu_set: String,
        entries: Entries,
        checksum: u64,
        nils: NilMaps,
    ) -> Self {
        Self {
            policy_name,
            default_cpu_set,
            entries,
            checksum,
            nils,
        }
    }

    /// The layout the file was read as.
    #[must_use]
    pub fn version(&self) -> Version {
        match self.entries {
            Entries::V1(_) => Version::V1,
            Entries::V2(_) => Version::V2,
        }
    }

    /// `policyName` as stored.
    #[must_use]
    pub fn policy_name(&self) -> &str {
        &self.policy_name
    }

    /// `defaultCpuSet` as stored (unparsed).
    #[must_use]
    pub fn default_cpu_set(&self) -> &str {
        &self.default_cpu_set
    }

    /// `entries` as stored (unparsed).
    #[must_use]
    pub fn entries(&self) -> &Entries {
        &self.entries
    }

    /// `checksum` as stored.
    #[must_use]
    pub fn stored_checksum(&self) -> u64 {
        self.checksum
    }

    /// The checksum kubelet computes for this content.
    #[must_use]
    pub fn computed_checksum(&self) -> u64 {
        u64::from(fnv1a_32(hashed_text(self).as_bytes()))
    }

    /// kubelet's check: a stored checksum of 0 is accepted (legacy files);
    /// any other value must equal the recomputed one.
    pub fn verify(&self) -> Result<(), CheckpointError> {
        if self.checksum == 0 {
            return Ok(());
        }
        let computed = self.computed_checksum();
        if computed == self.checksum {
            Ok(())
        } else {
            Err(CheckpointError::Corrupted {
                stored: self.checksum,
                computed,
            })
        }
    }

    /// The bytes kubelet would write for this content (always v2; a v1
    /// checkpoint must be migrated first).
    pub fn to_bytes(&self) -> Result<Vec<u8>, CheckpointError> {
        match &self.entries {
            Entries::V1(_) => Err(CheckpointError::NeedsMigration),
            Entries::V2(pods) => Ok(encode(&self.policy_name, &self.default_cpu_set, pods)),
        }
    }

    /// Converts v1 entries (container id → CPU set) to v2 using
    /// `container_ref`, which maps a container id to (pod UID, container
    /// name), as kubelet does with its initial container list. A v2
    /// checkpoint is returned unchanged. The result carries a fresh checksum.
    pub fn migrate_v1<F>(&self, container_ref: F) -> Result<Checkpoint, CheckpointError>
    where
        F: Fn(&str) -> Option<(String, String)>,
    {
        let Entries::V1(by_container) = &self.entries else {
            return Ok(self.clone());
        };
        let mut pods = PodEntries::new();
        for (container_id, cpus) in by_container {
            let (pod, container) =
                container_ref(container_id).ok_or_else(|| CheckpointError::UnknownContainerId {
                    container_id: container_id.clone(),
                })?;
            pods.entry(pod).or_default().insert(container, cpus.clone());
        }
        Ok(Checkpoint::new(
            &self.policy_name,
            &self.default_cpu_set,
            pods,
        ))
    }

    /// Parses the CPU sets with kubelet's error texts. v1 checkpoints must be
    /// migrated first ([`Checkpoint::migrate_v1`]).
    pub fn to_state(&self) -> Result<CheckpointState, CheckpointError> {
        let Entries::V2(pods) = &self.entries else {
            return Err(CheckpointError::NeedsMigration);
        };
        let default_cpu_set = CpuSet::parse_list(&self.default_cpu_set).map_err(|source| {
            CheckpointError::DefaultCpuSet {
                text: self.default_cpu_set.clone(),
                source: Box::new(source),
            }
        })?;
        let mut assignments = BTreeMap::new();
        for (pod, containers) in pods {
            let parsed: &mut BTreeMap<String, CpuSet> = assignments.entry(pod.clone()).or_default();
            for (container, text) in containers {
                let cpus = CpuSet::parse_list(text).map_err(|source| {
                    CheckpointError::ContainerCpuSet {
                        text: text.clone(),
                        container: container.clone(),
                        pod: pod.clone(),
                        source: Box::new(source),
                    }
                })?;
                parsed.insert(container.clone(), cpus);
            }
        }
        Ok(CheckpointState {
            policy_name: self.policy_name.clone(),
            default_cpu_set,
            assignments,
        })
    }
}

/// Decodes and verifies in one step: what a restore wants.
pub fn decode_verified(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let checkpoint = decode(bytes)?;
    checkpoint.verify()?;
    Ok(checkpoint)
}

#[cfg(test)]
mod tests;
