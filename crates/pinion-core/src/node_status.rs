//! The QoS Resource Manager's node resources in the Node's status
//! (`docs/nrt.md`, "The Node's extended resources"): which of the resource
//! plugins' `GetTopologyAwareAllocatableResources` answers reach
//! `status.capacity` and `status.allocatable`, with what quantity, and
//! whether what the API server holds still says so.
//!
//! The proposal's rule (`IsNodeResource`): a resource its plugin marks both
//! `IsNodeResource` and `IsScalarResource`. Only extended resources (a name
//! with a domain prefix outside `kubernetes.io/`) are written: the others
//! (`cpu`, `memory`, `hugepages-*`, `pods`, `ephemeral-storage`) are
//! kubelet's. The quantity is the plugin's allocatable, whole units, in both
//! maps: kubelet recomputes `allocatable` from `capacity` for every key at
//! each of its status updates (no reservation applies to an extended
//! resource, so allocatable = capacity), and the API server takes only
//! whole numbers for an extended resource.

use std::collections::{BTreeMap, BTreeSet};

use crate::podresources::AllocatableResource;
use crate::Quantity;

/// Longest DNS subdomain (the prefix, `requests.` included).
const MAX_PREFIX: usize = 253;
/// Longest name part of a qualified name.
const MAX_NAME: usize = 63;
/// The prefix Kubernetes keeps for its own resources.
const NATIVE_NAMESPACE: &str = "kubernetes.io/";
/// The prefix of quota names; never an extended resource's.
const QUOTA_PREFIX: &str = "requests.";
/// Largest whole quantity written (beyond it a float has no whole units).
const MAX_UNITS: f64 = 9_007_199_254_740_992.0; // 2^53

/// Why a plugin's node resource is not written to the Node's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeStatusError {
    #[error("resource plugin node resource {name:?} is not a valid extended resource name: {defect}; it is not written to the node's status")]
    NotExtended { name: String, defect: &'static str },
    #[error("resource plugin node resource {name:?} has allocatable {value}, not a whole quantity the node's status can hold; it is not written to the node's status")]
    Amount { name: String, value: String },
}

/// What the Node's status says of Pinion's resources: every one of them,
/// by name, in whole units; and the plugins' resources refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extended {
    pub quantities: BTreeMap<String, u64>,
    pub refused: Vec<NodeStatusError>,
}

/// The extended resources of `resources` (the plugins' node resources):
/// those marked `IsNodeResource` and `IsScalarResource`, each with its
/// aggregated allocatable rounded down to whole units — written as both
/// capacity and allocatable ([`apply_configuration`]).
// difference-from-kubelet: qrm-node-status-allocatable-as-capacity
#[must_use]
pub fn extended(resources: &[AllocatableResource]) -> Extended {
    let mut out = Extended::default();
    for resource in resources {
        if !(resource.is_node_resource && resource.is_scalar_resource) {
            continue;
        }
        let name = &resource.resource_name;
        if let Some(defect) = extended_name_defect(name) {
            out.refused.push(NodeStatusError::NotExtended {
                name: name.clone(),
                defect,
            });
            continue;
        }
        let value = resource.allocatable;
        if !value.is_finite() || value < 0.0 || value.floor() > MAX_UNITS {
            out.refused.push(NodeStatusError::Amount {
                name: name.clone(),
                value: value.to_string(),
            });
            continue;
        }
        // In range and non-negative: the conversion is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let units = value.floor() as u64;
        out.quantities.insert(name.clone(), units);
    }
    out
}

/// What is wrong with `name` as an extended resource name, if anything
/// (Kubernetes' `IsExtendedResourceName`): a domain prefix outside
/// `kubernetes.io/`, not `requests.`, then `/` and a name of letters,
/// digits, `-`, `_`, `.`, such that `requests.<name>` is a qualified name.
#[must_use]
pub fn extended_name_defect(name: &str) -> Option<&'static str> {
    let Some((prefix, rest)) = name.split_once('/') else {
        return Some("it has no domain prefix (kubelet owns the unprefixed resources: cpu, memory, hugepages-*, pods, ephemeral-storage)");
    };
    if name.contains(NATIVE_NAMESPACE) {
        return Some("the kubernetes.io/ domain is Kubernetes' own");
    }
    if name.starts_with(QUOTA_PREFIX) {
        return Some("it starts with \"requests.\" (a quota name)");
    }
    if rest.contains('/') {
        return Some("it has more than one '/'");
    }
    if QUOTA_PREFIX.len() + prefix.len() > MAX_PREFIX
        || crate::k8s_names::dns1123_subdomain_defect(prefix).is_some()
    {
        return Some("its prefix is not a DNS subdomain (lowercase letters, digits, '-' and '.', at most 244 characters)");
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let valid_name = rest.len() <= MAX_NAME
        && edge(rest.chars().next())
        && edge(rest.chars().last())
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid_name {
        return Some("its name after the '/' must be 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit");
    }
    None
}

/// The server-side apply configuration of the Node's status: `quantities`
/// in `capacity` and in `allocatable`, nothing else. With none, the
/// configuration has no status at all (applying it gives up every key
/// Pinion owned; an empty map would claim the map itself).
#[must_use]
pub fn apply_configuration(
    node_name: &str,
    quantities: &BTreeMap<String, u64>,
) -> serde_json::Value {
    let mut object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": node_name },
    });
    if !quantities.is_empty() {
        let list: serde_json::Map<String, serde_json::Value> = quantities
            .iter()
            .map(|(name, units)| (name.clone(), serde_json::Value::String(units.to_string())))
            .collect();
        object["status"] = serde_json::json!({ "capacity": list, "allocatable": list });
    }
    object
}

/// The Node as the API server holds it, for what Pinion checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub capacity: BTreeMap<String, String>,
    pub allocatable: BTreeMap<String, String>,
    /// The resources whose status keys Pinion's field manager owns
    /// ([`owned_resources`] of its `managedFields` entry).
    pub owned: BTreeSet<String>,
}

/// Whether the Node's status needs Pinion's configuration applied again:
/// a desired resource missing or with another quantity in `capacity` or
/// `allocatable` (kubelet zeroes extended resources when it registers a
/// recreated node), or a key Pinion still owns that it no longer wants
/// (a plugin gone while the agent was down).
#[must_use]
pub fn needs_apply(observed: &Observed, desired: &BTreeMap<String, u64>) -> bool {
    let holds = |map: &BTreeMap<String, String>, name: &str, units: u64| {
        map.get(name)
            .and_then(|text| Quantity::parse(text).ok())
            .is_some_and(|q| q.milli_value() == u128::from(units) * 1000)
    };
    let stale = observed
        .owned
        .iter()
        .any(|name| !desired.contains_key(name));
    stale
        || desired.iter().any(|(name, units)| {
            !holds(&observed.capacity, name, *units) || !holds(&observed.allocatable, name, *units)
        })
}

/// The resource names under `status.capacity` and `status.allocatable` of
/// a `managedFields` entry's `fieldsV1` (`{"f:status": {"f:capacity":
/// {"f:example.com/widget": {}}}}`).
#[must_use]
pub fn owned_resources(fields_v1: &serde_json::Value) -> BTreeSet<String> {
    ["f:capacity", "f:allocatable"]
        .iter()
        .filter_map(|map| fields_v1["f:status"][map].as_object())
        .flat_map(|entries| entries.keys())
        .filter_map(|key| key.strip_prefix("f:"))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests;
