//! Reading a [`Record`] back from its JSON object.
//!
//! Records are written as an internally tagged enum (`{"op":"assign",…}`),
//! but not read as one: serde buffers the fields of such an enum before it
//! reads them, and a side-data value ([`SideValue`]) is kept as the text it
//! was read from, which a buffered field no longer is. So a record is read
//! as the flat set of every field a record may have, then checked against
//! what its op needs.

use serde::Deserialize;

use super::{Record, SideValue};
use crate::cpuset::CpuSet;

/// Every field of every kind of record.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Fields {
    op: String,
    #[serde(default)]
    pod: Option<String>,
    #[serde(default)]
    container: Option<String>,
    #[serde(default)]
    cpus: Option<CpuSet>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<SideValue>,
}

fn needs<T>(field: Option<T>, name: &str) -> Result<T, String> {
    field.ok_or_else(|| format!("missing field `{name}`"))
}

impl TryFrom<Fields> for Record {
    type Error = String;

    fn try_from(fields: Fields) -> Result<Record, String> {
        let Fields {
            op,
            pod,
            container,
            cpus,
            kind,
            key,
            value,
        } = fields;
        let present = [
            ("pod", pod.is_some()),
            ("container", container.is_some()),
            ("cpus", cpus.is_some()),
            ("kind", kind.is_some()),
            ("key", key.is_some()),
            ("value", value.is_some()),
        ];
        let (record, allowed): (Record, &[&str]) = match op.as_str() {
            "assign" => (
                Record::Assign {
                    pod: needs(pod, "pod")?,
                    container: needs(container, "container")?,
                    cpus: needs(cpus, "cpus")?,
                },
                &["pod", "container", "cpus"],
            ),
            "unassign" => (
                Record::Unassign {
                    pod: needs(pod, "pod")?,
                    container: needs(container, "container")?,
                },
                &["pod", "container"],
            ),
            "set-default" => (
                Record::SetDefault {
                    cpus: needs(cpus, "cpus")?,
                },
                &["cpus"],
            ),
            "side" => (
                Record::Side {
                    kind: needs(kind, "kind")?,
                    key: needs(key, "key")?,
                    value,
                },
                &["kind", "key", "value"],
            ),
            other => {
                return Err(format!(
                "unknown op `{other}`, expected one of `assign`, `unassign`, `set-default`, `side`"
            ))
            }
        };
        match present
            .iter()
            .find(|(name, here)| *here && !allowed.contains(name))
        {
            Some((name, _)) => Err(format!("field `{name}` does not belong to op `{op}`")),
            None => Ok(record),
        }
    }
}
