//! What can still be read of a checkpoint that does not decode — a file cut
//! short by a crash or a full disk, or damaged further on: the fields and
//! the entries that are complete before the point where reading stopped
//! (`pinion state inspect` shows them; nothing restores from them).
//!
//! The file is read front to back, as [`super::decode`] reads it (keys
//! folded as Go folds them, unknown keys skipped); every field and every
//! container entry is kept as soon as it is complete, so an error leaves
//! the prefix behind. The checksum "it should have" is the one kubelet
//! computes for the readable content.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error, IgnoredAny, MapAccess, Visitor};

use super::decode::fold_key;
use super::{Checkpoint, CheckpointError, Entries, NilMaps, PodEntries};

/// The readable prefix of a damaged checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// `policyName`, when read whole.
    pub policy_name: Option<String>,
    /// `defaultCpuSet`, when read whole.
    pub default_cpu_set: Option<String>,
    /// Complete container entries (v2: pod → container → CPU set).
    pub entries: PodEntries,
    /// Complete v1 entries (container id → CPU set), if the file has those.
    pub v1_entries: BTreeMap<String, String>,
    /// The pod whose entries were being read when reading stopped (its
    /// complete containers are in `entries`).
    pub cut_in_pod: Option<String>,
    /// `checksum`, when read whole.
    pub stored_checksum: Option<u64>,
    /// Why reading stopped; `None` when the whole file decodes.
    pub error: Option<CheckpointError>,
}

impl Salvaged {
    /// The readable content as a checkpoint (missing fields empty; v1 when
    /// only v1 entries were read), with the checksum it stores (0 when
    /// none was read).
    #[must_use]
    pub fn checkpoint(&self) -> Checkpoint {
        let entries = if self.entries.is_empty() && !self.v1_entries.is_empty() {
            Entries::V1(self.v1_entries.clone())
        } else {
            Entries::V2(self.entries.clone())
        };
        Checkpoint::from_parts(
            self.policy_name.clone().unwrap_or_default(),
            self.default_cpu_set.clone().unwrap_or_default(),
            entries,
            self.stored_checksum.unwrap_or(0),
            NilMaps::default(),
        )
    }

    /// The checksum kubelet computes for the readable content: what the
    /// file would store if it held exactly that.
    #[must_use]
    pub fn computed_checksum(&self) -> u64 {
        self.checkpoint().computed_checksum()
    }
}

/// Reads what can be read of `bytes`; see the module documentation.
#[must_use]
pub fn salvage(bytes: &[u8]) -> Salvaged {
    let found = RefCell::new(Salvaged {
        policy_name: None,
        default_cpu_set: None,
        entries: PodEntries::new(),
        v1_entries: BTreeMap::new(),
        cut_in_pod: None,
        stored_checksum: None,
        error: None,
    });
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let result = deserializer
        .deserialize_any(Top(&found))
        .and_then(|()| deserializer.end());
    let mut found = found.into_inner();
    match result {
        Ok(()) => found.cut_in_pod = None,
        Err(err) => found.error = Some(super::decode::classify(&err)),
    }
    found
}

struct Top<'a>(&'a RefCell<Salvaged>);

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a checkpoint object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match fold_key(&key).as_str() {
                "POLICYNAME" => {
                    if let Some(value) = map.next_value::<Option<String>>()? {
                        self.0.borrow_mut().policy_name = Some(value);
                    }
                }
                "DEFAULTCPUSET" => {
                    if let Some(value) = map.next_value::<Option<String>>()? {
                        self.0.borrow_mut().default_cpu_set = Some(value);
                    }
                }
                "CHECKSUM" => {
                    if let Some(value) = map.next_value::<Option<u64>>()? {
                        self.0.borrow_mut().stored_checksum = Some(value);
                    }
                }
                "ENTRIES" => map.next_value_seed(EntriesSeed(self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `entries`: a map of pods (v2) or of container ids (v1), or `null`.
struct EntriesSeed<'a>(&'a RefCell<Salvaged>);

impl<'de> DeserializeSeed<'de> for EntriesSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EntriesSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the entries map")
    }

    fn visit_unit<E: Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            map.next_value_seed(PodSeed { found: self.0, key })?;
        }
        Ok(())
    }
}

/// One value of `entries`: a pod's containers (v2) or a CPU set (v1).
struct PodSeed<'a> {
    found: &'a RefCell<Salvaged>,
    key: String,
}

impl<'de> DeserializeSeed<'de> for PodSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PodSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pod's containers or a cpu set")
    }

    fn visit_str<E: Error>(self, value: &str) -> Result<(), E> {
        self.found
            .borrow_mut()
            .v1_entries
            .insert(self.key, value.to_string());
        Ok(())
    }

    fn visit_unit<E: Error>(self) -> Result<(), E> {
        self.found.borrow_mut().entries.entry(self.key).or_default();
        Ok(())
    }

    fn visit_none<E: Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        {
            let mut found = self.found.borrow_mut();
            found.entries.entry(self.key.clone()).or_default();
            found.cut_in_pod = Some(self.key.clone());
        }
        while let Some(container) = map.next_key::<String>()? {
            let cpus = map.next_value::<Option<String>>()?.unwrap_or_default();
            self.found
                .borrow_mut()
                .entries
                .entry(self.key.clone())
                .or_default()
                .insert(container, cpus);
        }
        self.found.borrow_mut().cut_in_pod = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"policyName":"static","defaultCpuSet":"0,5-7","entries":{"pod-a":{"app":"1-2","side":"3"},"pod-b":{"db":"4"}},"checksum":123}"#;

    #[test]
    fn a_whole_file_reads_whole() {
        let found = salvage(FILE.as_bytes());
        assert_eq!(found.error, None);
        assert_eq!(found.policy_name.as_deref(), Some("static"));
        assert_eq!(found.entries["pod-b"]["db"], "4");
        assert_eq!(found.stored_checksum, Some(123));
        assert_eq!(found.cut_in_pod, None);
    }

    #[test]
    fn a_cut_file_keeps_every_complete_field_and_entry_before_the_cut() {
        let cut = FILE.find(r#""side""#).expect("side") + 8;
        let found = salvage(&FILE.as_bytes()[..cut]);
        assert!(
            matches!(found.error, Some(CheckpointError::Truncated { .. })),
            "{found:?}"
        );
        assert_eq!(found.policy_name.as_deref(), Some("static"));
        assert_eq!(found.default_cpu_set.as_deref(), Some("0,5-7"));
        assert_eq!(found.entries.len(), 1);
        assert_eq!(found.entries["pod-a"].len(), 1, "only app is complete");
        assert_eq!(found.entries["pod-a"]["app"], "1-2");
        assert_eq!(found.cut_in_pod.as_deref(), Some("pod-a"));
        assert_eq!(found.stored_checksum, None);
    }

    #[test]
    fn the_checksum_it_should_have_is_kubelets_for_the_readable_content() {
        let cut = FILE.find(r#","checksum""#).expect("checksum");
        let found = salvage(&FILE.as_bytes()[..cut]);
        let whole = Checkpoint::new(
            "static",
            "0,5-7",
            [
                (
                    "pod-a".to_string(),
                    [("app", "1-2"), ("side", "3")]
                        .into_iter()
                        .map(|(c, s)| (c.to_string(), s.to_string()))
                        .collect(),
                ),
                (
                    "pod-b".to_string(),
                    [("db".to_string(), "4".to_string())].into_iter().collect(),
                ),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(found.computed_checksum(), whole.stored_checksum());
        assert_eq!(found.cut_in_pod, None);
    }

    #[test]
    fn garbage_after_a_prefix_is_a_syntax_error_and_v1_entries_are_kept() {
        let found = salvage(br#"{"policyName":"none","entries":{"cid-1":"1-2","cid-2":x"#);
        assert!(
            matches!(found.error, Some(CheckpointError::Syntax { .. })),
            "{found:?}"
        );
        assert_eq!(found.v1_entries["cid-1"], "1-2");
        assert!(matches!(found.checkpoint().entries(), Entries::V1(_)));
    }

    proptest::proptest! {
        /// Cut anywhere, a checkpoint Pinion writes salvages to a part of
        /// itself: every field read is the original's, every entry read is
        /// one of its entries; whole, it salvages whole, without error.
        #[test]
        fn every_prefix_salvages_to_a_part_of_the_original(
            pods in proptest::collection::btree_map(
                "[a-z0-9-]{1,8}",
                proptest::collection::btree_map("[a-z]{1,6}", "[0-9,-]{0,6}", 0..3),
                0..4,
            ),
            default in "[0-9,-]{0,8}",
        ) {
            let bytes = super::super::encode("static", &default, &pods);
            for cut in 0..=bytes.len() {
                let found = salvage(&bytes[..cut]);
                if let Some(policy) = &found.policy_name {
                    proptest::prop_assert_eq!(policy, "static");
                }
                if let Some(read) = &found.default_cpu_set {
                    proptest::prop_assert_eq!(read, &default);
                }
                for (pod, containers) in &found.entries {
                    for (name, cpus) in containers {
                        proptest::prop_assert_eq!(Some(cpus), pods.get(pod).and_then(|c| c.get(name)));
                    }
                }
                proptest::prop_assert_eq!(found.error.is_none(), cut == bytes.len());
            }
            let whole = salvage(&bytes);
            proptest::prop_assert_eq!(&whole.entries, &pods);
            let decoded = super::super::decode(&bytes).expect("decodes");
            proptest::prop_assert_eq!(whole.stored_checksum, Some(decoded.stored_checksum()));
            proptest::prop_assert_eq!(whole.computed_checksum(), decoded.stored_checksum());
        }
    }

    #[test]
    fn nothing_readable_is_empty() {
        for bytes in [&b""[..], b"[1,2]", b"\x00\x01"] {
            let found = salvage(bytes);
            assert!(found.error.is_some(), "{bytes:?}");
            assert_eq!(found.policy_name, None);
            assert!(found.entries.is_empty());
        }
    }
}
