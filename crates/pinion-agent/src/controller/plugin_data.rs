//! Owns the resource plugins' data in the controller: each container's plugin resources and answers, and the side data that keeps them durable.
//!
//! Two types, one per owner:
//!
//! * [`ContainerPlugins`], held by each workload: the plugin resources the
//!   container requested, what the plugins answered (`Allocate`, merged
//!   reconcile answers) and when those answers were recorded.
//! * [`PluginData`], held once by the controller: the journal's side data
//!   ([`Side`], with the undo log of the open batch) in which the answers
//!   (kind [`ALLOCATIONS`]) and the pods whose plugins must hear of their
//!   removal (kind [`REMOVALS`]) are durable; the records that wait for the
//!   next flush (the built-in plugins' state changes: their outbox); and the
//!   channel that tells the removal loop which pods are pending.
//!
//! The side data also carries the engine's pod-level data (promised and
//! pod-level CPUs, `resize.rs`) and the built-in plugins' own state: one
//! table with one undo log, journalled as one kind of record, so it is not
//! split by who writes its kinds. What the plugins' answers do to a
//! placement, and the checks only the controller can make of them, are in
//! `plugins.rs` (they need the engine and every workload).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use pinion_core::plugin_allocation::PluginAllocations;
use pinion_core::record::{Record, SideData, SideValue};
use pinion_plugins::store::Outbox;
use tokio::sync::watch;

use super::side::Side;
use super::{Key, StoredAllocations};

/// Side-data kind of a container's allocations (key `<pod>/<container>`).
pub use pinion_core::qrm_checkpoint::ALLOCATIONS;
/// Side-data kind of a pod whose plugins have not all heard of its removal
/// (key: the pod UID).
pub const REMOVALS: &str = "qrm-removal";

/// Side-data kind of a pod one of whose containers left with plugin
/// allocations while others of the pod still run: its plugins must hear of
/// the pod's removal when the last one goes (key: the pod UID).
pub const PLUGIN_PODS: &str = "qrm-pod";

/// The side-data key of container `key`'s allocations.
pub(super) fn side_key((pod, container): &Key) -> String {
    pinion_core::qrm_checkpoint::side_key(pod, container)
}

/// One container's resource-plugin data.
#[derive(Debug, Clone, Default)]
pub(super) struct ContainerPlugins {
    /// The plugin resources it requested.
    pub(super) resources: BTreeSet<String>,
    /// What the plugins allocated (resource → allocation).
    pub(super) allocations: PluginAllocations,
    /// When `Allocate` answers were last recorded (reconcile polls older
    /// than that do not know of them).
    pub(super) recorded: Option<Instant>,
}

impl ContainerPlugins {
    /// True when it asked no plugin and holds no allocation.
    pub(super) fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.allocations.is_empty()
    }

    /// Holds `stored`, recorded at `at` (`None`: restored from the journal).
    pub(super) fn hold(&mut self, stored: StoredAllocations, at: Option<Instant>) {
        self.allocations = stored.allocations;
        self.resources = stored.resources;
        if at.is_some() {
            self.recorded = at;
        }
    }

    /// Its resources and `allocations`, as the journal keeps them.
    pub(super) fn stored_with(&self, allocations: PluginAllocations) -> StoredAllocations {
        StoredAllocations {
            resources: self.resources.clone(),
            allocations,
        }
    }
}

/// See the module documentation.
pub(super) struct PluginData {
    side: Side,
    /// Side-data records journalled with the next flush rather than
    /// flushed on their own: the built-in resource plugins' state changes
    /// (`pinion_plugins::store`; the outbox is shared with them when they
    /// run in the agent), and records whose loss costs nothing but a
    /// repeated message (a pod every plugin heard of).
    waiting: Outbox,
    /// The pods whose plugins have yet to hear of their removal, sent only
    /// when the list changes (the removal loop waits on it; waking it at
    /// every snapshot cost each command a thread wake-up).
    removals_tx: watch::Sender<Vec<String>>,
}

impl PluginData {
    /// The side data `side` as restored at start, nothing waiting.
    pub(super) fn new(side: SideData) -> Self {
        let (removals_tx, _) = watch::channel(Vec::new());
        Self {
            side: Side::new(side),
            waiting: Outbox::default(),
            removals_tx,
        }
    }

    /// The side data.
    pub(super) fn side(&self) -> &Side {
        &self.side
    }

    /// The side data, to change (a batch's begin and rollback, the engine's
    /// pod-level kinds).
    pub(super) fn side_mut(&mut self) -> &mut Side {
        &mut self.side
    }

    /// Container `key`'s answers become `value` (`None`: dropped); the
    /// record of the change.
    pub(super) fn set_allocations(
        &mut self,
        key: &Key,
        value: Option<SideValue>,
    ) -> Option<Record> {
        self.side.set(ALLOCATIONS, &side_key(key), value)
    }

    /// True when some container of `pod` has durable answers.
    pub(super) fn pod_has_allocations(&self, pod: &str) -> bool {
        let prefix = format!("{pod}/");
        self.side.get(ALLOCATIONS).is_some_and(|entries| {
            entries
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&prefix))
        })
    }

    /// True when container `key` has durable answers.
    pub(super) fn has_allocations(&self, key: &Key) -> bool {
        self.side
            .get(ALLOCATIONS)
            .is_some_and(|entries| entries.contains_key(&side_key(key)))
    }

    /// True when a container of `pod` that left had durable answers
    /// ([`PLUGIN_PODS`]).
    pub(super) fn pod_had_allocations(&self, pod: &str) -> bool {
        self.side
            .get(PLUGIN_PODS)
            .is_some_and(|pods| pods.contains_key(pod))
    }

    /// The pods a container of which left with durable answers
    /// ([`PLUGIN_PODS`]).
    pub(super) fn pods_that_had_allocations(&self) -> Vec<String> {
        self.side
            .get(PLUGIN_PODS)
            .map(|pods| pods.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Notes (`true`) or forgets that a container of `pod` that left had
    /// durable answers; the record of the change.
    pub(super) fn set_pod_had_allocations(&mut self, pod: &str, had: bool) -> Option<Record> {
        let value = had.then(|| serde_json::Value::Bool(true).into());
        self.side.set(PLUGIN_PODS, pod, value)
    }

    /// Notes that every plugin must hear of pod `pod`'s removal (the
    /// removal loop's `RemovePod`); the record of the change.
    pub(super) fn must_hear_of_removal(&mut self, pod: &str) -> Option<Record> {
        self.side
            .set(REMOVALS, pod, Some(serde_json::Value::Bool(true).into()))
    }

    /// Every plugin heard of pod `pod`'s removal; the record of the change.
    pub(super) fn heard_of_removal(&mut self, pod: &str) -> Option<Record> {
        self.side.set(REMOVALS, pod, None)
    }

    /// The pods waiting for their plugins to hear of their removal.
    pub(super) fn pending_removals(&self) -> Vec<String> {
        self.side
            .get(REMOVALS)
            .map(|pods| pods.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Hands the built-in plugins' outbox over: their changes wait in
    /// `outbox` from now on (with what waited before). Returns the side
    /// data they kept (kind → key → value, kinds starting with `prefix`).
    pub(super) fn keep_builtin_state(&mut self, outbox: Outbox, prefix: &str) -> SideData {
        outbox.put_back(self.waiting.take());
        self.waiting = outbox;
        self.side
            .iter()
            .filter(|(kind, _)| kind.starts_with(prefix))
            .map(|(kind, entries)| (kind.clone(), entries.clone()))
            .collect()
    }

    /// `records` go with the next flush.
    pub(super) fn wait(&self, records: impl IntoIterator<Item = Record>) {
        self.waiting.push(records);
    }

    /// Every waiting record, taken out.
    pub(super) fn take_waiting(&self) -> Vec<Record> {
        self.waiting.take()
    }

    /// `records` wait again, before any that came meanwhile.
    pub(super) fn put_back(&self, records: Vec<Record>) {
        self.waiting.put_back(records);
    }

    /// A receiver of the pending removals (changed only when they do).
    pub(super) fn subscribe_removals(&self) -> watch::Receiver<Vec<String>> {
        self.removals_tx.subscribe()
    }

    /// Sends `pending` when it differs from the last list sent.
    pub(super) fn publish_removals(&self, pending: &[String]) {
        self.removals_tx.send_if_modified(|sent| {
            let changed = sent.as_slice() != pending;
            if changed {
                *sent = pending.to_vec();
            }
            changed
        });
    }
}

/// The durable plugin data of `key` in `side` (restored at start).
pub(super) fn stored_allocations(side: &SideData, key: &Key) -> Option<StoredAllocations> {
    let value = side.get(ALLOCATIONS)?.get(&side_key(key))?;
    match value.decode() {
        Ok(stored) => Some(stored),
        Err(err) => {
            tracing::error!(pod = %key.0, container = %key.1, "unreadable plugin allocations in the journal: {err}");
            None
        }
    }
}

/// The keys of every container with durable plugin data in `side`.
pub(super) fn allocation_keys(side: &SideData) -> Vec<Key> {
    side.get(ALLOCATIONS)
        .into_iter()
        .flat_map(BTreeMap::keys)
        .filter_map(|k| {
            let (pod, container) = k.split_once('/')?;
            Some((pod.to_string(), container.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pod: &str, container: &str) -> Key {
        (pod.to_string(), container.to_string())
    }

    fn answer() -> StoredAllocations {
        StoredAllocations {
            resources: ["cpu".to_string()].into(),
            allocations: PluginAllocations::new(),
        }
    }

    #[test]
    fn a_pod_has_allocations_only_through_its_own_containers() {
        let mut data = PluginData::new(SideData::new());
        let value = SideValue::encode(&answer()).expect("encodes");
        assert!(data
            .set_allocations(&key("pod-a", "main"), Some(value))
            .is_some());
        assert!(data.pod_has_allocations("pod-a"));
        // A UID that is a prefix of another's is not that pod.
        assert!(!data.pod_has_allocations("pod"));
        assert!(!data.pod_has_allocations("pod-b"));
        assert_eq!(allocation_keys(data.side()), [key("pod-a", "main")]);
        assert_eq!(
            stored_allocations(data.side(), &key("pod-a", "main")),
            Some(answer())
        );
        assert!(data.set_allocations(&key("pod-a", "main"), None).is_some());
        assert!(!data.pod_has_allocations("pod-a"));
    }

    #[test]
    fn the_removal_list_is_sent_only_when_it_changes() {
        let mut data = PluginData::new(SideData::new());
        let mut removals = data.subscribe_removals();
        assert!(data.must_hear_of_removal("pod-a").is_some());
        assert!(data.must_hear_of_removal("pod-a").is_none(), "no change");
        data.publish_removals(&data.pending_removals());
        assert!(removals.has_changed().expect("open"));
        assert_eq!(*removals.borrow_and_update(), ["pod-a"]);
        data.publish_removals(&data.pending_removals());
        assert!(!removals.has_changed().expect("open"), "the same list");
        assert!(data.heard_of_removal("pod-a").is_some());
        data.publish_removals(&data.pending_removals());
        assert!(removals.borrow_and_update().is_empty());
    }

    #[test]
    fn the_builtin_plugins_outbox_takes_over_what_waited() {
        let data = {
            let mut data = PluginData::new(SideData::new());
            let record = data.must_hear_of_removal("pod-a").expect("a change");
            data.wait([record]);
            let outbox = Outbox::new();
            data.keep_builtin_state(outbox.clone(), "plugin-state/");
            assert_eq!(outbox.len(), 1, "what waited moved into the outbox");
            data
        };
        assert_eq!(data.take_waiting().len(), 1);
        assert!(data.take_waiting().is_empty());
    }

    #[test]
    fn a_container_holds_answers_and_keeps_when_they_came() {
        let mut plugins = ContainerPlugins::default();
        assert!(plugins.is_empty());
        let at = Instant::now();
        plugins.hold(answer(), Some(at));
        assert!(!plugins.is_empty());
        assert_eq!(plugins.recorded, Some(at));
        plugins.hold(answer(), None);
        assert_eq!(plugins.recorded, Some(at), "a restore keeps the time");
        assert_eq!(plugins.stored_with(PluginAllocations::new()), answer());
    }
}
