//! Decision records: what the agent's journal stores for every decision, and
//! how a record changes a [`State`].
//!
//! Every record is an *absolute write* of one part of the state — "container
//! c of pod p holds exactly these CPUs", "c holds no exclusive CPUs", "the
//! shared pool is exactly this set", "side-data entry k is exactly this
//! value" — never a delta ("take 2 CPUs"). Two consequences the journal
//! relies on:
//! * replaying a record again on a state that already contains it changes
//!   nothing, and replaying any suffix of a history on the state that
//!   history produced gives that same state ([`replay`] is idempotent);
//! * the records of a decision are computed from the states before and after
//!   it ([`diff`]), so a caller that decides on a copy of its state needs no
//!   record-building code of its own.
//!
//! Records are encoded as one JSON object (`{"op":"assign",…}`), so a
//! journal stays readable with `pinion state inspect`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, CheckpointError, PodEntries};
use crate::cpuset::CpuSet;
use crate::state::State;

/// Side data that is not part of kubelet's CPU manager state (resource
/// plugin allocations and the like): kind → key → value. The journal keeps
/// and replays it; the CPU state ignores it.
pub type SideData = BTreeMap<String, BTreeMap<String, SideValue>>;

/// The side-data kinds the agent keeps, named here so that offline tools
/// (`pinion state`) read them as the agent writes them.
pub mod kinds {
    /// In-place resize: the CPUs each container was first given, which it
    /// cannot shrink below. Pod UID → {container → cpulist}.
    pub const PROMISED: &str = "promised-cpus";
    /// Pod-level CPU sets. Pod UID → cpulist.
    pub const POD_CPUS: &str = "pod-cpus";
    /// The built-in resource plugins' state: `plugin-state/<plugin>`, keyed
    /// by pod UID, plus [`PLUGIN_STATE_REST`].
    pub const PLUGIN_STATE_PREFIX: &str = "plugin-state/";
    /// The key of a plugin's state that belongs to no pod.
    pub const PLUGIN_STATE_REST: &str = "rest";
    /// A rebuild from the container runtime's first `Synchronize` that is
    /// still to come (the state was rebuilt from the node at a start, and
    /// the runtime's containers are in no cgroup of Pinion's). Key
    /// [`RUNTIME_REBUILD_PENDING`] → why, a string.
    pub const RUNTIME_REBUILD: &str = "runtime-rebuild";
    /// The one key of [`RUNTIME_REBUILD`].
    pub const RUNTIME_REBUILD_PENDING: &str = "pending";
}

/// One decision, as the journal stores it. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", try_from = "decode::Fields")]
pub enum Record {
    /// Container `container` of pod `pod` holds exactly `cpus` (exclusive):
    /// an admission, or a changed assignment.
    Assign {
        pod: String,
        container: String,
        cpus: CpuSet,
    },
    /// Container `container` of pod `pod` holds no exclusive CPUs (a
    /// release; a no-op when it held none).
    Unassign { pod: String, container: String },
    /// The shared pool (kubelet's default CPU set) is exactly `cpus`: the
    /// other half of every admission or release of exclusive CPUs, and any
    /// pool change.
    SetDefault { cpus: CpuSet },
    /// Side-data entry `kind`/`key` is exactly `value` (`None`: removed).
    /// Opaque to the CPU state; for resource-plugin allocations.
    Side {
        kind: String,
        key: String,
        value: Option<SideValue>,
    },
}

/// A record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record is not a valid decision: {reason}")]
pub struct RecordError {
    pub reason: String,
}

impl Record {
    /// The record's bytes (compact JSON).
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_bytes(&mut out);
        out
    }

    /// Appends [`Record::to_bytes`] to `out` (the journal encodes a record
    /// straight into its pending batch).
    pub fn write_bytes(&self, out: &mut Vec<u8>) {
        let start = out.len();
        // Strings, CPU sets and JSON values always serialize; should one
        // not, nothing half-written stays.
        if serde_json::to_writer(&mut *out, self).is_err() {
            out.truncate(start);
        }
    }

    /// An upper bound of `to_bytes().len()` for a side-data record, found
    /// without encoding it: the value's JSON is copied as it is, and each
    /// byte of the kind and key takes at most six (`\u00XX`). `None` for
    /// the other records.
    #[must_use]
    pub fn side_len_at_most(&self) -> Option<usize> {
        // `{"op":"side","kind":"","key":"","value":}` is 41 bytes.
        const FRAME: usize = 41;
        let Record::Side { kind, key, value } = self else {
            return None;
        };
        let value = value.as_ref().map_or("null".len(), |v| v.json().len());
        Some(FRAME + 6 * (kind.len() + key.len()) + value)
    }

    /// Decodes [`Record::to_bytes`] output.
    pub fn from_bytes(bytes: &[u8]) -> Result<Record, RecordError> {
        serde_json::from_slice(bytes).map_err(|err| RecordError {
            reason: err.to_string(),
        })
    }

    /// Whether the record changes the CPU state (not only side data).
    #[must_use]
    pub fn touches_state(&self) -> bool {
        !matches!(self, Record::Side { .. })
    }

    /// Applies the record: an absolute write of one part of `state` or `side`.
    pub fn apply(&self, state: &mut State, side: &mut SideData) {
        match self {
            Record::Assign {
                pod,
                container,
                cpus,
            } => state.assign(pod, container, cpus.clone()),
            Record::Unassign { pod, container } => {
                state.unassign(pod, container);
            }
            Record::SetDefault { cpus } => state.default = cpus.clone(),
            Record::Side { kind, key, value } => {
                put_side(side, kind, key, value.clone());
            }
        }
    }
}

/// Puts `value` at `kind`/`key` of `side` (removing the entry, and a kind
/// left empty, for `None`); returns the old value.
pub fn put_side(
    side: &mut SideData,
    kind: &str,
    key: &str,
    value: Option<SideValue>,
) -> Option<SideValue> {
    match value {
        Some(value) => side
            .entry(kind.to_string())
            .or_default()
            .insert(key.to_string(), value),
        None => {
            let entries = side.get_mut(kind)?;
            let old = entries.remove(key);
            if entries.is_empty() {
                side.remove(kind);
            }
            old
        }
    }
}

/// Applies `records` in order.
pub fn replay<'a>(
    records: impl IntoIterator<Item = &'a Record>,
    state: &mut State,
    side: &mut SideData,
) {
    for record in records {
        record.apply(state, side);
    }
}

/// The records that turn `before` into `after`: an [`Record::Unassign`] for
/// every container that lost its assignment, an [`Record::Assign`] for every
/// new or changed one, a [`Record::SetDefault`] when the shared pool
/// changed. Empty when the states are equal.
#[must_use]
pub fn diff(before: &State, after: &State) -> Vec<Record> {
    let mut records = Vec::new();
    for (pod, containers) in &before.assignments {
        for container in containers.keys() {
            if after.assignment(pod, container).is_none() {
                records.push(Record::Unassign {
                    pod: pod.clone(),
                    container: container.clone(),
                });
            }
        }
    }
    for (pod, containers) in &after.assignments {
        for (container, cpus) in containers {
            if before.assignment(pod, container) != Some(cpus) {
                records.push(Record::Assign {
                    pod: pod.clone(),
                    container: container.clone(),
                    cpus: cpus.clone(),
                });
            }
        }
    }
    if before.default != after.default {
        records.push(Record::SetDefault {
            cpus: after.default.clone(),
        });
    }
    records
}

/// A part of a state taken before a decision that touches only the
/// assignments of `pods` and the shared pool (every admission and release
/// does): [`Scope::diff`] then gives the decision's records in time
/// proportional to those pods, not to the whole state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pods: BTreeMap<String, Option<BTreeMap<String, CpuSet>>>,
    default: CpuSet,
}

impl Scope {
    /// The assignments of `pods` and the shared pool of `state`.
    #[must_use]
    pub fn of<'a>(state: &State, pods: impl IntoIterator<Item = &'a str>) -> Scope {
        Scope {
            pods: pods
                .into_iter()
                .map(|pod| (pod.to_string(), state.assignments.get(pod).cloned()))
                .collect(),
            default: state.default.clone(),
        }
    }

    /// The pods of the scope.
    pub fn pods(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(String::as_str)
    }

    /// The records that turn the scoped part into that of `after` — the
    /// same records as [`diff`] of the whole states when nothing outside
    /// the scope changed.
    #[must_use]
    pub fn diff(&self, after: &State) -> Vec<Record> {
        let mut records = Vec::new();
        let empty = BTreeMap::new();
        for (pod, before) in &self.pods {
            let before = before.as_ref().unwrap_or(&empty);
            let now = after.assignments.get(pod).unwrap_or(&empty);
            for container in before.keys().filter(|c| !now.contains_key(*c)) {
                records.push(Record::Unassign {
                    pod: pod.clone(),
                    container: container.clone(),
                });
            }
            for (container, cpus) in now {
                if before.get(container) != Some(cpus) {
                    records.push(Record::Assign {
                        pod: pod.clone(),
                        container: container.clone(),
                        cpus: cpus.clone(),
                    });
                }
            }
        }
        if self.default != after.default {
            records.push(Record::SetDefault {
                cpus: after.default.clone(),
            });
        }
        records
    }
}

/// The records that turn side data `before` into `after` (absolute writes).
#[must_use]
pub fn diff_side(before: &SideData, after: &SideData) -> Vec<Record> {
    let mut records = Vec::new();
    for (kind, entries) in before {
        for key in entries.keys() {
            if after.get(kind).and_then(|e| e.get(key)).is_none() {
                records.push(Record::Side {
                    kind: kind.clone(),
                    key: key.clone(),
                    value: None,
                });
            }
        }
    }
    for (kind, entries) in after {
        for (key, value) in entries {
            if before.get(kind).and_then(|e| e.get(key)) != Some(value) {
                records.push(Record::Side {
                    kind: kind.clone(),
                    key: key.clone(),
                    value: Some(value.clone()),
                });
            }
        }
    }
    records
}

/// The checkpoint entries (pod → container → cpulist text) of a state.
#[must_use]
pub fn checkpoint_entries(state: &State) -> PodEntries {
    state
        .assignments
        .iter()
        .map(|(pod, containers)| {
            let containers = containers
                .iter()
                .map(|(name, cpus)| (name.clone(), cpus.to_string()))
                .collect();
            (pod.clone(), containers)
        })
        .collect()
}

/// A checkpoint with `records` replayed on it: what a restart starts from.
///
/// When no record touches the CPU state the checkpoint comes back as it was
/// (verbatim: same strings, same checksum, v1 stays v1). Otherwise its CPU
/// sets are parsed (kubelet's errors; a v1 checkpoint must be migrated
/// first), the records applied, and a v2 checkpoint with a fresh checksum
/// built, keeping the checkpoint's policy name. Without a checkpoint the
/// records start from an empty state under `policy_name`.
pub fn replay_onto_checkpoint(
    checkpoint: Option<&Checkpoint>,
    policy_name: &str,
    records: &[Record],
) -> Result<Option<Checkpoint>, CheckpointError> {
    if !records.iter().any(Record::touches_state) {
        return Ok(checkpoint.cloned());
    }
    let (policy, mut state) = match checkpoint {
        Some(checkpoint) => {
            let parsed = checkpoint.to_state()?;
            let state = State {
                default: parsed.default_cpu_set,
                assignments: parsed.assignments,
            };
            (parsed.policy_name, state)
        }
        None => (policy_name.to_string(), State::default()),
    };
    replay(records, &mut state, &mut SideData::new());
    Ok(Some(Checkpoint::new(
        &policy,
        &state.default.to_string(),
        checkpoint_entries(&state),
    )))
}

mod decode;
mod side_value;

pub use side_value::SideValue;

#[cfg(test)]
mod tests;
