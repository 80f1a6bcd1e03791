//! Where a plugin keeps its state ([`Store`]):
//!
//! * its own file in a state directory ([`StateFile`]), written atomically
//!   (temp file, fsync, rename, fsync directory: `pinion_host::durable`)
//!   after every change and read back at start — `pinion plugin serve`;
//! * the agent's journal ([`Journal`]), for the built-in plugins: each
//!   change hands the entries it changed (one per pod it touched, and the
//!   rest of the state) to an [`Outbox`]; the agent appends them to its
//!   journal and makes them durable with its next flush — the one that
//!   records the allocation the change was made for. Nothing is fsynced on
//!   the plugin's side, and an admission costs the entries of one pod, not
//!   the whole state.
//!
//! A state kept in the journal is cut into entries by [`Entries`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use pinion_core::record::{Record, SideValue};
use pinion_host::durable::{self, DurableError};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Errors of state files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Durable(#[from] DurableError),
    #[error("state file {} is not valid: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot encode the state for {}: {reason}", path.display())]
    Encode { path: PathBuf, reason: String },
    #[error("the journal's {kind} entries are not valid: {reason}")]
    CorruptEntries { kind: String, reason: String },
    #[error("cannot create the state directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One plugin's state file, or none (state kept in memory only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    dir: Option<PathBuf>,
    name: &'static str,
}

impl StateFile {
    /// The file `name` in `dir` (`None` = in memory only).
    #[must_use]
    pub fn new(dir: Option<&Path>, name: &'static str) -> Self {
        Self {
            dir: dir.map(Path::to_path_buf),
            name,
        }
    }

    /// No file: nothing is saved.
    #[must_use]
    pub fn memory(name: &'static str) -> Self {
        Self { dir: None, name }
    }

    /// The file's path, when there is one.
    #[must_use]
    pub fn path(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|dir| dir.join(self.name))
    }

    /// The saved state, or `None` when there is no file (or no directory).
    pub fn load<T: DeserializeOwned>(&self) -> Result<Option<T>, StoreError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        let bytes = match durable::read_optional_at_most(dir, self.name, MAX_STATE_BYTES)? {
            None => return Ok(None),
            Some(durable::Contents::Bytes(bytes)) => bytes,
            Some(durable::Contents::TooLarge { size }) => {
                return Err(StoreError::Corrupt {
                    path: dir.join(self.name),
                    reason: format!(
                        "{size} bytes, more than the {MAX_STATE_BYTES} bytes a plugin's state may have: not read"
                    ),
                })
            }
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| StoreError::Corrupt {
                path: dir.join(self.name),
                reason: err.to_string(),
            })
    }

    /// Replaces the file with `state` (no-op without a directory); the
    /// directory is created on the first save.
    pub fn save<T: Serialize>(&self, state: &T) -> Result<(), StoreError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        let bytes = serde_json::to_vec_pretty(state).map_err(|err| StoreError::Encode {
            path: dir.join(self.name),
            reason: err.to_string(),
        })?;
        durable::write_atomic(dir, self.name, &bytes)?;
        Ok(())
    }
}

/// The most a plugin's state file may be: a larger one (a damaged size)
/// is not read, and counts as corrupt.
const MAX_STATE_BYTES: u64 = 64 << 20;

/// The journal entry of the part of a state that is not per pod.
pub const REST_KEY: &str = pinion_core::record::kinds::PLUGIN_STATE_REST;
/// The journal entries of pods are `pod/<uid>`.
const POD_PREFIX: &str = "pod/";

/// A plugin state that can be kept as journal entries: one per pod, and
/// one for the rest. Encoding a pod's entry must not depend on other pods.
pub trait Entries: Serialize + DeserializeOwned + Default {
    /// The UIDs of the pods the state holds.
    fn pod_uids(&self) -> Vec<String>;
    /// Pod `uid`'s part (`None`: the state holds nothing of it).
    fn pod_entry(&self, uid: &str) -> Option<SideValue>;
    /// Everything that is not per pod.
    fn rest_entry(&self) -> SideValue;
    /// The state of `rest` and the pods' parts.
    fn from_entries(rest: SideValue, pods: BTreeMap<String, SideValue>) -> Result<Self, String>;
}

/// What a change touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed<'a> {
    /// Pod `uid` (and the rest of the state).
    Pod(&'a str),
    /// Only the rest of the state (pools resized, a pin).
    Rest,
    /// Anything (start-up).
    All,
}

/// Journal records handed from the plugins to the agent, which appends
/// them with its next flush. Shared by the plugins and the agent.
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    inner: Arc<OutboxInner>,
}

#[derive(Debug, Default)]
struct OutboxInner {
    records: Mutex<Vec<Record>>,
    changed: tokio::sync::Notify,
}

impl Outbox {
    /// An empty outbox.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn records(&self) -> std::sync::MutexGuard<'_, Vec<Record>> {
        self.inner
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `records` (after those waiting) and wakes [`Outbox::changed`].
    /// A record of a side-data entry replaces the waiting one of the same
    /// entry: only the entry's last value has to reach the journal (an
    /// admission and the previous pod's removal both rewrite the CPU
    /// plugin's `rest` entry, and one flush carries both).
    pub fn push(&self, records: impl IntoIterator<Item = Record>) {
        let mut waiting = self.records();
        for record in records {
            supersede(&mut waiting, record);
        }
        drop(waiting);
        self.inner.changed.notify_one();
    }

    /// Takes every waiting record, oldest first.
    #[must_use]
    pub fn take(&self) -> Vec<Record> {
        std::mem::take(&mut *self.records())
    }

    /// Puts `records` taken by [`Outbox::take`] back before any added
    /// since (their flush failed: the next one carries them).
    pub fn put_back(&self, mut records: Vec<Record>) {
        if records.is_empty() {
            return;
        }
        let mut waiting = self.records();
        let newer = std::mem::take(&mut *waiting);
        records.retain(|record| !newer.iter().any(|n| same_entry(n, record)));
        *waiting = records;
        waiting.extend(newer);
        drop(waiting);
        self.inner.changed.notify_one();
    }

    /// How many records wait.
    #[must_use]
    pub fn len(&self) -> usize {
        self.records().len()
    }

    /// Whether no record waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once records were added since the last time it resolved.
    pub async fn changed(&self) {
        self.inner.changed.notified().await;
    }
}

/// Appends `record` to `waiting`, dropping the waiting record of the same
/// side-data entry (replaying the journal gives the same entries).
fn supersede(waiting: &mut Vec<Record>, record: Record) {
    waiting.retain(|old| !same_entry(old, &record));
    waiting.push(record);
}

/// Whether `a` and `b` set the same side-data entry.
fn same_entry(a: &Record, b: &Record) -> bool {
    match (a, b) {
        (
            Record::Side { kind, key, .. },
            Record::Side {
                kind: other_kind,
                key: other_key,
                ..
            },
        ) => kind == other_kind && key == other_key,
        _ => false,
    }
}

/// A plugin's state in the agent's journal: side-data kind `kind`.
#[derive(Debug)]
pub struct Journal {
    kind: String,
    outbox: Outbox,
    /// The journal's entries of this kind at start (taken by the load).
    restored: Option<BTreeMap<String, SideValue>>,
    /// Pods with an entry in the journal.
    written: BTreeSet<String>,
    /// The state file of an earlier version, read when the journal has no
    /// entry of this kind yet (it is left in place).
    legacy: StateFile,
}

impl Journal {
    /// The state of side-data kind `kind`, restored from `entries` (the
    /// journal's at start) or else from `legacy`, changes going to `outbox`.
    #[must_use]
    pub fn new(
        kind: impl Into<String>,
        entries: BTreeMap<String, SideValue>,
        outbox: Outbox,
        legacy: StateFile,
    ) -> Self {
        Self {
            kind: kind.into(),
            outbox,
            restored: Some(entries),
            written: BTreeSet::new(),
            legacy,
        }
    }

    /// The side-data kind of plugin `name`'s state.
    #[must_use]
    pub fn kind_of(name: &str) -> String {
        format!("plugin-state/{name}")
    }

    fn load<T: Entries>(&mut self) -> Result<Option<T>, StoreError> {
        let entries = self.restored.take().unwrap_or_default();
        let Some(rest) = entries.get(REST_KEY).cloned() else {
            if let Some(state) = self.legacy.load::<T>()? {
                if let Some(path) = self.legacy.path() {
                    tracing::info!(file = %path.display(), kind = %self.kind, "plugin state taken from the state file of an earlier version (the journal keeps it from now on; the file is left in place)");
                }
                return Ok(Some(state));
            }
            return Ok(None);
        };
        let mut pods = BTreeMap::new();
        for (key, value) in entries {
            if let Some(uid) = key.strip_prefix(POD_PREFIX) {
                self.written.insert(uid.to_string());
                pods.insert(uid.to_string(), value);
            }
        }
        T::from_entries(rest, pods)
            .map(Some)
            .map_err(|reason| StoreError::CorruptEntries {
                kind: self.kind.clone(),
                reason,
            })
    }

    fn save<T: Entries>(&mut self, state: &T, changed: Changed<'_>) {
        let mut records = Vec::new();
        let mut pod = |uid: &str, written: &mut BTreeSet<String>| {
            let value = state.pod_entry(uid);
            let had = if value.is_some() {
                !written.insert(uid.to_string())
            } else {
                written.remove(uid)
            };
            if value.is_some() || had {
                records.push(Record::Side {
                    kind: self.kind.clone(),
                    key: format!("{POD_PREFIX}{uid}"),
                    value,
                });
            }
        };
        match changed {
            Changed::Pod(uid) => pod(uid, &mut self.written),
            Changed::Rest => {}
            Changed::All => {
                let mut uids: BTreeSet<String> = state.pod_uids().into_iter().collect();
                uids.extend(self.written.iter().cloned());
                for uid in &uids {
                    pod(uid, &mut self.written);
                }
            }
        }
        records.push(Record::Side {
            kind: self.kind.clone(),
            key: REST_KEY.to_string(),
            value: Some(state.rest_entry()),
        });
        self.outbox.push(records);
    }
}

/// Where a plugin keeps its state; see the module documentation.
#[derive(Debug)]
pub enum Store {
    File(StateFile),
    Journal(Journal),
}

impl Store {
    /// The saved state, or `None` when there is none yet.
    pub fn load<T: Entries>(&mut self) -> Result<Option<T>, StoreError> {
        match self {
            Self::File(file) => file.load(),
            Self::Journal(journal) => journal.load(),
        }
    }

    /// Saves `state` after a change that touched `changed`: the whole file,
    /// or the changed entries to the journal's outbox.
    pub fn save<T: Entries>(&mut self, state: &T, changed: Changed<'_>) -> Result<(), StoreError> {
        match self {
            Self::File(file) => file.save(state),
            Self::Journal(journal) => {
                journal.save(state, changed);
                Ok(())
            }
        }
    }
}

impl From<StateFile> for Store {
    fn from(file: StateFile) -> Self {
        Self::File(file)
    }
}

impl From<Journal> for Store {
    fn from(journal: Journal) -> Self {
        Self::Journal(journal)
    }
}

/// [`Entries`] of a state whose every part is per pod: a map of pod UID
/// to the pod's part, and optionally more maps by pod UID (merged per pod
/// into one JSON object by field name).
#[macro_export]
macro_rules! pod_keyed_entries {
    ($state:ty { $($field:ident),+ $(,)? }) => {
        impl $crate::store::Entries for $state {
            fn pod_uids(&self) -> Vec<String> {
                let mut uids = std::collections::BTreeSet::new();
                $(uids.extend(self.$field.keys().cloned());)+
                uids.into_iter().collect()
            }

            fn pod_entry(&self, uid: &str) -> Option<pinion_core::record::SideValue> {
                use pinion_core::record::SideValue;
                // Each field encoded once, straight into the entry's text
                // (keys sorted, as a JSON object of them would be).
                let null = || SideValue::from(serde_json::Value::Null);
                let mut part = std::collections::BTreeMap::<&str, SideValue>::new();
                $(
                    if let Some(value) = self.$field.get(uid) {
                        part.insert(
                            stringify!($field),
                            SideValue::encode(value).unwrap_or_else(|_| null()),
                        );
                    }
                )+
                (!part.is_empty()).then(|| SideValue::encode(&part).unwrap_or_else(|_| null()))
            }

            fn rest_entry(&self) -> pinion_core::record::SideValue {
                serde_json::Value::Object(serde_json::Map::new()).into()
            }

            fn from_entries(
                _rest: pinion_core::record::SideValue,
                pods: std::collections::BTreeMap<String, pinion_core::record::SideValue>,
            ) -> Result<Self, String> {
                let mut state = Self::default();
                for (uid, part) in pods {
                    let mut part: serde_json::Map<String, serde_json::Value> = part
                        .decode()
                        .map_err(|err| format!("pod {uid}: {err}"))?;
                    $(
                        if let Some(value) = part.get_mut(stringify!($field)) {
                            let value = serde_json::from_value(value.take())
                                .map_err(|err| format!("pod {uid}: {}: {err}", stringify!($field)))?;
                            state.$field.insert(uid.clone(), value);
                        }
                    )+
                }
                Ok(state)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a plugin given a state directory that did not exist yet
    /// (`MemoryPlugin::open(.., Some(dir))` in the agent) failed its first
    /// `Allocate` with "create temp file …: No such file or directory".
    #[test]
    fn the_first_save_creates_a_missing_state_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("not/yet");
        let file = StateFile::new(Some(&dir), "state.json");
        assert_eq!(file.load::<Vec<u32>>().expect("no file yet"), None);
        file.save(&vec![1_u32, 2])
            .expect("save creates the directory");
        assert_eq!(file.load::<Vec<u32>>().expect("load"), Some(vec![1, 2]));
    }

    /// Found from outside (session 49): a plugin's state file was read
    /// whole, whatever its size: a damaged size (a sparse file) made
    /// `pinion plugin serve` allocate it all. One larger than any state
    /// (64 MiB) is not read and is refused as corrupt, naming its size.
    #[test]
    fn regression_a_state_file_larger_than_any_is_refused_unread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = StateFile::new(Some(dir.path()), "state.json");
        std::fs::File::create(dir.path().join("state.json"))
            .and_then(|f| f.set_len(MAX_STATE_BYTES + 1))
            .expect("sparse");
        let err = file.load::<Vec<u32>>().expect_err("refused");
        assert!(
            matches!(&err, StoreError::Corrupt { reason, .. } if reason.contains(&(MAX_STATE_BYTES + 1).to_string()) && reason.contains("not read")),
            "{err}"
        );
    }

    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    struct ByPod {
        containers: BTreeMap<String, BTreeMap<String, u32>>,
        exclusive: BTreeMap<String, String>,
    }

    crate::pod_keyed_entries!(ByPod {
        containers,
        exclusive
    });

    fn replay(outbox: &Outbox, journal: &mut BTreeMap<String, SideValue>) {
        for record in outbox.take() {
            if let Record::Side { key, value, .. } = record {
                match value {
                    Some(value) => journal.insert(key, value),
                    None => journal.remove(&key),
                };
            }
        }
    }

    /// A pod-keyed state (the memory and NIC plugins') in the journal: a
    /// pod's entry carries its fields, a removed pod's entry goes away, and
    /// the entries give the state back.
    #[test]
    fn pod_keyed_states_go_to_the_journal_pod_by_pod() {
        let outbox = Outbox::new();
        let legacy = StateFile::memory("x.json");
        let mut store = Store::from(Journal::new("k", BTreeMap::new(), outbox.clone(), legacy));
        assert_eq!(store.load::<ByPod>().expect("empty"), None);
        let mut state = ByPod::default();
        state
            .containers
            .insert("a".into(), BTreeMap::from([("c".into(), 1)]));
        state.exclusive.insert("a".into(), "0".into());
        state
            .containers
            .insert("b".into(), BTreeMap::from([("c".into(), 2)]));
        store.save(&state, Changed::All).expect("save");
        let mut journal = BTreeMap::new();
        replay(&outbox, &mut journal);
        assert_eq!(
            journal.keys().collect::<Vec<_>>(),
            ["pod/a", "pod/b", "rest"]
        );
        state.containers.remove("a");
        state.exclusive.remove("a");
        store.save(&state, Changed::Pod("a")).expect("save");
        replay(&outbox, &mut journal);
        assert_eq!(journal.keys().collect::<Vec<_>>(), ["pod/b", "rest"]);
        let mut reopened = Store::from(Journal::new(
            "k",
            journal,
            Outbox::new(),
            StateFile::memory("x.json"),
        ));
        assert_eq!(reopened.load::<ByPod>().expect("load"), Some(state));
    }

    /// A flush that failed gives its records back, ahead of newer ones.
    #[test]
    fn records_put_back_come_before_newer_ones() {
        let outbox = Outbox::new();
        let side = |key: &str| Record::Side {
            kind: "k".into(),
            key: key.into(),
            value: None,
        };
        outbox.push([side("1"), side("2")]);
        let taken = outbox.take();
        outbox.push([side("3")]);
        outbox.put_back(taken);
        assert_eq!(outbox.take(), vec![side("1"), side("2"), side("3")]);
        assert!(outbox.is_empty());
    }

    /// Only an entry's last value waits: an older record of the same entry
    /// is dropped, whether it waited or was put back after a failed flush;
    /// replaying what waits gives the entries every record would give.
    #[test]
    fn a_newer_record_of_an_entry_replaces_the_waiting_one() {
        let outbox = Outbox::new();
        let set = |key: &str, value: Option<u32>| Record::Side {
            kind: "k".into(),
            key: key.into(),
            value: value.map(|v| serde_json::Value::from(v).into()),
        };
        let all = [
            set("pod/a", Some(1)),
            set("rest", Some(1)),
            set("pod/b", Some(2)),
            set("pod/a", None),
            set("rest", Some(2)),
        ];
        let mut every = BTreeMap::new();
        for record in all.clone() {
            let single = Outbox::new();
            single.push([record]);
            replay(&single, &mut every);
        }
        outbox.push(all);
        assert_eq!(outbox.len(), 3, "pod/b, pod/a (gone), rest");
        let mut coalesced = BTreeMap::new();
        let taken = outbox.take();
        outbox.push([set("rest", Some(3))]);
        outbox.put_back(taken);
        assert_eq!(
            outbox.len(),
            3,
            "the put-back rest is older than the waiting one"
        );
        replay(&outbox, &mut coalesced);
        every.insert("rest".into(), serde_json::Value::from(3).into());
        assert_eq!(coalesced, every);
    }
}
