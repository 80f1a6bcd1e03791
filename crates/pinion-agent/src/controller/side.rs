//! Owns the side-data table beside the CPU state, with the undo log of the open batch.
//!
//! The side data is durable data beside the CPU state: resource-plugin
//! allocations, pods whose plugins must hear of their removal, pod-level
//! CPUs, the built-in plugins' state. The controller holds it through
//! [`super::plugin_data::PluginData`].
//!
//! Every change goes through [`Side::set`], which returns the journal
//! record of the change and remembers the old value, so a batch whose flush
//! fails is rolled back entry by entry ([`Side::rollback`]) — instead of a
//! copy of all side data taken at every batch, which grows with the node.

use std::ops::Deref;

use pinion_core::record::{put_side, Record, SideData, SideValue};

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Side {
    data: SideData,
    /// Old values of the entries changed since [`Side::begin`], oldest first.
    undo: Vec<(String, String, Option<SideValue>)>,
}

impl Side {
    /// `data` as restored at start.
    pub(super) fn new(data: SideData) -> Self {
        Self {
            data,
            undo: Vec::new(),
        }
    }

    /// A batch begins: changes from now on can be rolled back.
    pub(super) fn begin(&mut self) {
        self.undo.clear();
    }

    /// Undoes every change since [`Side::begin`].
    pub(super) fn rollback(&mut self) {
        while let Some((kind, key, old)) = self.undo.pop() {
            put_side(&mut self.data, &kind, &key, old);
        }
    }

    /// Entry `kind`/`key` becomes `value` (`None`: removed). Returns the
    /// journal record of the change, or `None` when it was already so.
    pub(super) fn set(
        &mut self,
        kind: &str,
        key: &str,
        value: Option<SideValue>,
    ) -> Option<Record> {
        if !self.put(kind, key, value.as_ref()) {
            return None;
        }
        Some(Record::Side {
            kind: kind.to_string(),
            key: key.to_string(),
            value,
        })
    }

    /// Applies a side-data record made elsewhere (the built-in plugins'
    /// outbox, a lazy record); other records change nothing.
    pub(super) fn apply(&mut self, record: &Record) {
        if let Record::Side { kind, key, value } = record {
            self.put(kind, key, value.as_ref());
        }
    }

    /// [`Side::set`] without its record: whether the entry changed.
    fn put(&mut self, kind: &str, key: &str, value: Option<&SideValue>) -> bool {
        let old = self.data.get(kind).and_then(|entries| entries.get(key));
        if old == value {
            return false;
        }
        let old = put_side(&mut self.data, kind, key, value.cloned());
        self.undo.push((kind.to_string(), key.to_string(), old));
        true
    }
}

impl Deref for Side {
    type Target = SideData;

    fn deref(&self) -> &SideData {
        &self.data
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn value(n: u32) -> SideValue {
        SideValue::from(serde_json::Value::from(n))
    }

    #[test]
    fn a_rollback_undoes_every_change_of_the_batch_and_only_those() {
        let mut side = Side::new(SideData::from([(
            "a".to_string(),
            BTreeMap::from([("k".to_string(), value(1))]),
        )]));
        side.set("a", "early", Some(value(0)));
        side.begin();
        let before = side.data.clone();
        assert!(side.set("a", "k", Some(value(1))).is_none(), "no change");
        assert!(side.set("a", "k", Some(value(2))).is_some());
        assert!(side.set("a", "k", None).is_some());
        assert!(side.set("b", "new", Some(value(3))).is_some());
        side.apply(&Record::Side {
            kind: "a".into(),
            key: "early".into(),
            value: None,
        });
        assert_ne!(side.data, before);
        side.rollback();
        assert_eq!(side.data, before);
        assert!(!side.contains_key("b"), "an emptied kind goes");
    }
}
