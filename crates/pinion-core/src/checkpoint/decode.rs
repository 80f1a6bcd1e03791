//! Reading a checkpoint the way kubelet's Go code reads it.
//!
//! Facts of Go's `encoding/json` reproduced here:
//! * object keys match struct fields case-insensitively (ASCII letters, plus
//!   the Kelvin sign folding to `K` and the long s folding to `S`);
//! * unknown keys are ignored; for a repeated key the last value wins, except
//!   that a repeated `entries` object is merged into the map decoded so far;
//! * `null` leaves a string or number field unchanged, and makes a map nil;
//!   inside a map, a `null` string is `""` and a `null` map is nil;
//! * the checksum must be a non-negative integer that fits 64 bits.
//!
//! kubelet tried the v1 layout first and fell back to v2 when v1 did not
//! decode or its checksum did not verify; [`decode`] picks the layout the
//! same way and leaves the final checksum check to [`Checkpoint::verify`].

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::{Checkpoint, CheckpointError, Entries, NilMaps};

/// Decodes a checkpoint file. The stored checksum is not checked here; call
/// [`Checkpoint::verify`] (or use [`super::decode_verified`]).
pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let v1 = parse::<V1Entries>(bytes).map(Raw::into_v1);
    if matches!(&v1, Ok(checkpoint) if checkpoint.verify().is_ok()) {
        return v1;
    }
    match parse::<V2Entries>(bytes) {
        Ok(raw) => Ok(raw.into_v2()),
        // A v1 file whose checksum fails: report it as v1 (verify then says
        // "checkpoint is corrupted") rather than as a v2 layout error.
        Err(err) => v1.map_err(|_| err),
    }
}

/// v1 `entries`: container id → CPU set (a `null` value reads as `""`).
type V1Entries = BTreeMap<String, Option<String>>;
/// v2 `entries`: pod → container → CPU set (`null` pod map = nil map).
type V2Entries = BTreeMap<String, Option<BTreeMap<String, Option<String>>>>;

/// The four fields as Go's decoder leaves them; `entries: None` is a nil map.
struct Raw<E> {
    policy_name: String,
    default_cpu_set: String,
    entries: Option<E>,
    checksum: u64,
}

impl Raw<V1Entries> {
    fn into_v1(self) -> Checkpoint {
        let nils = NilMaps {
            entries: self.entries.is_none(),
            ..NilMaps::default()
        };
        let entries = self
            .entries
            .unwrap_or_default()
            .into_iter()
            .map(|(id, cpus)| (id, cpus.unwrap_or_default()))
            .collect();
        Checkpoint::from_parts(
            self.policy_name,
            self.default_cpu_set,
            Entries::V1(entries),
            self.checksum,
            nils,
        )
    }
}

impl Raw<V2Entries> {
    fn into_v2(self) -> Checkpoint {
        let mut nils = NilMaps {
            entries: self.entries.is_none(),
            ..NilMaps::default()
        };
        let mut pods = BTreeMap::new();
        for (pod, containers) in self.entries.unwrap_or_default() {
            if containers.is_none() {
                nils.pods.insert(pod.clone());
            }
            let containers = containers
                .unwrap_or_default()
                .into_iter()
                .map(|(name, cpus)| (name, cpus.unwrap_or_default()))
                .collect();
            pods.insert(pod, containers);
        }
        Checkpoint::from_parts(
            self.policy_name,
            self.default_cpu_set,
            Entries::V2(pods),
            self.checksum,
            nils,
        )
    }
}

fn parse<E>(bytes: &[u8]) -> Result<Raw<E>, CheckpointError>
where
    E: DeserializeOwned + Default + Extend<<E as IntoIterator>::Item> + IntoIterator,
{
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    deserializer
        .deserialize_any(RawVisitor::<E>(PhantomData))
        .and_then(|raw| deserializer.end().map(|()| raw))
        .map_err(|err| classify(&err))
}

pub(crate) fn classify(err: &serde_json::Error) -> CheckpointError {
    let reason = err.to_string();
    match err.classify() {
        serde_json::error::Category::Eof => CheckpointError::Truncated { reason },
        serde_json::error::Category::Data => CheckpointError::Layout { reason },
        serde_json::error::Category::Syntax | serde_json::error::Category::Io => {
            CheckpointError::Syntax { reason }
        }
    }
}

/// The struct fields, named by their folded (upper-case) JSON names.
enum Field {
    PolicyName,
    DefaultCpuSet,
    Entries,
    Checksum,
}

impl Field {
    fn from_key(key: &str) -> Option<Field> {
        match fold_key(key).as_str() {
            "POLICYNAME" => Some(Field::PolicyName),
            "DEFAULTCPUSET" => Some(Field::DefaultCpuSet),
            "ENTRIES" => Some(Field::Entries),
            "CHECKSUM" => Some(Field::Checksum),
            _ => None,
        }
    }
}

/// Go's key folding, reduced to what can equal an ASCII field name: ASCII
/// letters upper-cased, KELVIN SIGN → `K`, LATIN SMALL LETTER LONG S → `S`;
/// every other character is kept (and so never matches).
pub(crate) fn fold_key(key: &str) -> String {
    key.chars()
        .map(|ch| match ch {
            '\u{212a}' => 'K',
            '\u{17f}' => 'S',
            c => c.to_ascii_uppercase(),
        })
        .collect()
}

/// Visits the top level, which must be an object. (Go would accept a bare
/// `null` as an empty checkpoint with policy `""`, which kubelet then refuses
/// as a policy mismatch; refusing it here says more plainly what is wrong.)
struct RawVisitor<E>(PhantomData<E>);

impl<'de, E> Visitor<'de> for RawVisitor<E>
where
    E: DeserializeOwned + Default + Extend<<E as IntoIterator>::Item> + IntoIterator,
{
    type Value = Raw<E>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a checkpoint object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut raw = Raw {
            policy_name: String::new(),
            default_cpu_set: String::new(),
            entries: Some(E::default()),
            checksum: 0,
        };
        while let Some(key) = map.next_key::<String>()? {
            match Field::from_key(&key) {
                Some(Field::PolicyName) => set_if_some(&mut raw.policy_name, map.next_value()?),
                Some(Field::DefaultCpuSet) => {
                    set_if_some(&mut raw.default_cpu_set, map.next_value()?);
                }
                Some(Field::Checksum) => set_if_some(&mut raw.checksum, map.next_value()?),
                Some(Field::Entries) => merge_entries(&mut raw.entries, map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(raw)
    }
}

fn set_if_some<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

/// Go decodes a repeated map field into the map it already holds.
fn merge_entries<E>(entries: &mut Option<E>, value: Option<E>)
where
    E: Default + Extend<<E as IntoIterator>::Item> + IntoIterator,
{
    match value {
        None => *entries = None,
        Some(more) => entries.get_or_insert_with(E::default).extend(more),
    }
}
