//! The Topology Manager side of scenarios: extra providers' hints given by
//! the `hints` key, and what each admission reports about the merge
//! (merged hint, every resource's hints, and why a pod was rejected).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::ScenarioError;
use crate::engine::TopologyDecision;
use crate::topomgr::hint::filter_single_numa;
use crate::topomgr::provider::{ResourceHints, StaticHints};
use crate::topomgr::{NumaMask, Policy, TopologyHint};

/// One hint of the `hints` key: `{"numa": [ids] | null, "preferred": bool}`
/// (`mask` is accepted for `numa`; `null` = any NUMA node).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioHint {
    #[serde(alias = "mask")]
    pub numa: Option<Vec<u32>>,
    pub preferred: bool,
}

/// `"<pod>/<container>"` or `"<pod>"` → resource → hints (`null` = don't
/// care, `[]` = cannot be satisfied anywhere).
pub type HintsSpec = BTreeMap<String, BTreeMap<String, Option<Vec<ScenarioHint>>>>;

/// The extra provider of a scenario.
pub fn static_hints(spec: &HintsSpec) -> Result<StaticHints, ScenarioError> {
    let mut entries = BTreeMap::new();
    for (key, resources) in spec {
        let mut converted = ResourceHints::new();
        for (resource, hints) in resources {
            let list = match hints {
                None => None,
                Some(hints) => Some(convert(hints).map_err(|what| ScenarioError::BadHints {
                    key: key.clone(),
                    resource: resource.clone(),
                    what,
                })?),
            };
            converted.insert(resource.clone(), list);
        }
        entries.insert(key.clone(), converted);
    }
    Ok(StaticHints::new(entries))
}

fn convert(hints: &[ScenarioHint]) -> Result<Vec<TopologyHint>, String> {
    hints
        .iter()
        .map(|hint| {
            let affinity = match &hint.numa {
                None => None,
                Some(ids) if ids.is_empty() => return Err("empty numa list".to_owned()),
                Some(ids) => {
                    Some(NumaMask::from_ids(ids.iter().copied()).map_err(|e| e.to_string())?)
                }
            };
            Ok(TopologyHint {
                affinity,
                preferred: hint.preferred,
            })
        })
        .collect()
}

/// One resource's hints as reported (`hints: null` = don't care).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceOutcome {
    pub resource: String,
    pub hints: Option<Vec<TopologyHint>>,
}

/// What the Topology Manager decided for one `add` step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopologyOutcome {
    pub policy: String,
    pub scope: String,
    /// The merged hint: `{"mask": [ids] | null, "preferred": bool}`.
    pub merged: TopologyHint,
    pub admit: bool,
    /// Pod scope: the pod's affinity, merged for an earlier container.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
    pub resources: Vec<ResourceOutcome>,
    /// Why the pod was rejected (absent when admitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The outcome of a decision taken under `policy`.
#[must_use]
pub fn outcome(policy: Policy, decision: &TopologyDecision) -> TopologyOutcome {
    TopologyOutcome {
        policy: policy.name().to_owned(),
        scope: decision.scope.name().to_owned(),
        merged: decision.hint,
        admit: decision.admit,
        reused: decision.reused,
        resources: decision
            .hints
            .iter()
            .map(|(resource, hints)| ResourceOutcome {
                resource: resource.clone(),
                hints: hints.clone(),
            })
            .collect(),
        why: (!decision.admit).then(|| why(policy, decision)),
    }
}

/// A one-line explanation of a rejection: which resource has no usable
/// hint, else the preferred placements of each resource that do not agree.
fn why(policy: Policy, decision: &TopologyDecision) -> String {
    let single = policy == Policy::SingleNumaNode;
    let mut per_resource = Vec::new();
    for (resource, hints) in &decision.hints {
        let Some(hints) = hints else { continue };
        let usable: Vec<TopologyHint> = if single {
            filter_single_numa(std::slice::from_ref(hints))
                .pop()
                .unwrap_or_default()
        } else {
            hints.iter().filter(|h| h.preferred).copied().collect()
        };
        if usable.is_empty() {
            let what = if hints.is_empty() {
                "cannot be satisfied on any NUMA node".to_owned()
            } else if single {
                "has no preferred single-NUMA-node hint".to_owned()
            } else {
                "has no preferred hint".to_owned()
            };
            return format!("{policy}: {resource} {what}");
        }
        per_resource.push(format!("{resource} prefers {}", masks(&usable)));
    }
    format!(
        "{policy}: no NUMA affinity is preferred by every resource ({}); best merge: {}",
        per_resource.join("; "),
        decision.hint
    )
}

fn masks(hints: &[TopologyHint]) -> String {
    let mut out = String::new();
    for (i, hint) in hints.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        match hint.affinity {
            Some(mask) => {
                let _ = write!(out, "{{{mask}}}");
            }
            None => out.push_str("any"),
        }
    }
    out
}
