//! [`SideValue`]: one side-data value, kept as its JSON text.
//!
//! Side data is opaque to the journal: it stores, copies, compares and
//! writes the values, and only their owners read them. Kept as text, a
//! value is encoded once (straight from its owner's type, without building
//! a `serde_json::Value` tree), copied and compared as a string, and
//! written to the journal as it is — an admission through the built-in
//! plugins carries three such values, so this is most of what it costs
//! beyond the static policy's admission.

use std::fmt;

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

/// See the module documentation.
#[derive(Clone)]
pub struct SideValue(Box<RawValue>);

impl SideValue {
    /// `value` encoded as compact JSON.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// The value read back as `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The JSON text.
    #[must_use]
    pub fn json(&self) -> &str {
        self.0.get()
    }

    fn null() -> Self {
        Self(RawValue::NULL.to_owned())
    }
}

/// The same text. This version always encodes a value the same way, so
/// that is what telling a change needs; a value written by an earlier
/// version (keys in another order) reads as changed once, which costs one
/// journal record.
impl PartialEq for SideValue {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl Eq for SideValue {}

impl fmt::Debug for SideValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl fmt::Display for SideValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl From<serde_json::Value> for SideValue {
    fn from(value: serde_json::Value) -> Self {
        // A `Value` always encodes (its map keys are strings).
        Self::encode(&value).unwrap_or_else(|_| Self::null())
    }
}

impl Serialize for SideValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Read as the text it is (from JSON only; a record is read so that its
/// value can be, `super::decode`).
impl<'de> Deserialize<'de> for SideValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_value_keeps_its_json_and_reads_back() {
        let value = SideValue::encode(&std::collections::BTreeMap::from([("a", 1), ("b", 2)]))
            .expect("encodes");
        assert_eq!(value.json(), r#"{"a":1,"b":2}"#);
        let back: std::collections::BTreeMap<String, u32> = value.decode().expect("decodes");
        assert_eq!(back.get("b"), Some(&2));
        assert_eq!(
            serde_json::to_string(&value).expect("serializes"),
            value.json()
        );
    }

    /// A value read back is the text written, whitespace and key order
    /// included (what replaying the journal gives back compares equal to
    /// what was journalled); a different value is not equal.
    #[test]
    fn a_value_read_back_is_the_text_written() {
        let text = r#"{ "b": [1, 2], "a": "x" }"#;
        let parsed: SideValue = serde_json::from_str(text).expect("parses");
        assert_eq!(parsed.json(), text);
        #[derive(Serialize)]
        struct Ordered {
            b: Vec<u32>,
            a: &'static str,
        }
        let written = SideValue::encode(&Ordered {
            b: vec![1, 2],
            a: "x",
        })
        .expect("encodes");
        let record = crate::record::Record::Side {
            kind: "k".into(),
            key: "e".into(),
            value: Some(written.clone()),
        };
        let back = crate::record::Record::from_bytes(&record.to_bytes()).expect("decodes");
        assert_eq!(back, record);
        assert_ne!(SideValue::from(json!({"a": "x", "b": [1, 3]})), written);
        assert_ne!(SideValue::from(json!(1)), SideValue::from(json!("1")));
    }
}
