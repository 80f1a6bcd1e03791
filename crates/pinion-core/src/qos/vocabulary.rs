//! The QoS Resource Manager proposal's pod vocabulary
//! (`../shared/seeds/qos-resource-manager-proposal.txt`, "Synchronous Pod
//! Admission"): a pod names its **role** in the annotation
//! `kubernetes.io/pod-role` and its **resource QoS type** in
//! `kubernetes.io/resource-type`; the manager sends them in the
//! `ResourceRequest`'s `pod_role` and `pod_type`.
//!
//! The proposal gives roles only by example, so [`ROLES`] is the one table
//! that maps them onto Pinion's QoS levels and NUMA holding (the same
//! meaning katalyst's annotations give, `docs/qrm.md`, "The proposal's
//! vocabulary"). The proposal names no values for the resource type; Pinion
//! reads it as the expression the proposal writes for example 3's role,
//! terms joined by `&&` ([`TERMS`]). A role the table does not know is
//! passed on to plugins unchanged (a user-developed plugin may know it) and
//! reported as a [`super::QosWarning`] by [`super::parse`].
//!
//! Both vocabularies may be used together when they agree. A pod whose
//! values contradict each other — between the two vocabularies or inside
//! one — is refused with a [`VocabularyError`] naming both keys and values.
//! Used by the agent's manager and the simulator (through [`identity`] and
//! [`super::parse`]), never copied.

use std::collections::BTreeMap;

use super::{
    QosLevel, MEMORY_ENHANCEMENT_KEY, NUMA_BINDING_KEY, POD_ROLE_LABEL, POD_TYPE_KEY, QOS_LEVEL_KEY,
};

/// The proposal's pod role annotation (copied into `pod_role`).
pub const POD_ROLE_ANNOTATION: &str = "kubernetes.io/pod-role";
/// The proposal's resource QoS type annotation (copied into `pod_type`).
pub const RESOURCE_TYPE_ANNOTATION: &str = "kubernetes.io/resource-type";

/// How a pod holds NUMA nodes: both bind its CPUs and memory to the hinted
/// node(s) (katalyst's `numa_binding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumaHolding {
    /// Other pods may share the node (`numa_binding` alone).
    Sharing,
    /// The node is the pod's alone (`numa_binding` + `numa_exclusive`).
    Exclusive,
}

impl NumaHolding {
    fn exclusive(self) -> bool {
        self == Self::Exclusive
    }
}

/// What a role or a resource-type term says; `None` = says nothing about
/// that aspect (katalyst's annotations may then say it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    pub level: Option<QosLevel>,
    pub numa: Option<NumaHolding>,
}

/// One row of the role table.
#[derive(Debug, Clone, Copy)]
pub struct Role {
    /// The role as the proposal spells it, then other spellings it uses.
    pub names: &'static [&'static str],
    pub shape: Shape,
    /// Where the proposal uses it.
    pub example: &'static str,
}

const fn shape(level: QosLevel, numa: Option<NumaHolding>) -> Shape {
    Shape {
        level: Some(level),
        numa,
    }
}

/// The proposal's roles (its worked examples and story 2), mapped onto
/// Pinion's QoS levels and NUMA holding. The one table both the agent and
/// the simulator use; `docs/qrm.md` prints it.
// difference-from-kubelet: qrm-follows-katalyst
pub const ROLES: &[Role] = &[
    Role {
        names: &["online-micro_service"],
        shape: shape(QosLevel::SharedCores, None),
        example: "example 1: the online pool (the shared pool `share`)",
    },
    Role {
        names: &["ETL"],
        shape: shape(QosLevel::ReclaimedCores, None),
        example: "example 1: the offline pool (the reclaim pool)",
    },
    Role {
        names: &["storage-service"],
        shape: shape(QosLevel::DedicatedCores, Some(NumaHolding::Exclusive)),
        example: "example 2: exclusive CPUs on a NUMA node it holds alone",
    },
    Role {
        names: &["reranker"],
        shape: shape(QosLevel::DedicatedCores, Some(NumaHolding::Sharing)),
        example: "example 2: exclusive CPUs bound to a NUMA node",
    },
    Role {
        // The proposal writes "cpu-execlusive" in its text; both spellings
        // and its abbreviation are the same role.
        names: &[
            "numa-sharing && cpu-exclusive",
            "numa-sharing && cpu-execlusive",
            "numa-enhancement",
        ],
        shape: shape(QosLevel::DedicatedCores, Some(NumaHolding::Sharing)),
        example: "example 3: exclusive CPUs, a NUMA node shared with its peers",
    },
];

/// The terms of `kubernetes.io/resource-type`, joined by `&&`.
pub const TERMS: &[(&str, Shape)] = &[
    (
        "cpu-exclusive",
        Shape {
            level: Some(QosLevel::DedicatedCores),
            numa: None,
        },
    ),
    (
        "cpu-sharing",
        Shape {
            level: Some(QosLevel::SharedCores),
            numa: None,
        },
    ),
    (
        "numa-exclusive",
        Shape {
            level: None,
            numa: Some(NumaHolding::Exclusive),
        },
    ),
    (
        "numa-sharing",
        Shape {
            level: None,
            numa: Some(NumaHolding::Sharing),
        },
    ),
];

/// A pod whose metadata cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VocabularyError {
    /// Two values that cannot both hold (the keys may be the same when one
    /// value contradicts itself).
    #[error("contradictory pod metadata: {first_key}: {first_value:?} contradicts {second_key}: {second_value:?}")]
    Contradiction {
        first_key: String,
        first_value: String,
        second_key: String,
        second_value: String,
    },
    #[error("unknown term {term:?} in annotation {RESOURCE_TYPE_ANNOTATION}: {value:?} (expected terms joined by &&: cpu-exclusive, cpu-sharing, numa-exclusive, numa-sharing)")]
    UnknownTerm { value: String, term: String },
}

fn contradiction(first: &Said, second: (&str, &str)) -> VocabularyError {
    VocabularyError::Contradiction {
        first_key: first.key.to_string(),
        first_value: first.text.clone(),
        second_key: second.0.to_string(),
        second_value: second.1.to_string(),
    }
}

/// Where an aspect was said: the key and the value (or term) that said it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Said {
    key: &'static str,
    text: String,
}

/// What the proposal's annotations say, with where each aspect came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proposal {
    level: Option<(QosLevel, Said)>,
    numa: Option<(NumaHolding, Said)>,
    /// The role annotation's value when the table does not know it.
    pub unknown_role: Option<String>,
}

impl Proposal {
    /// The level the proposal's annotations give.
    #[must_use]
    pub fn level(&self) -> Option<QosLevel> {
        self.level.as_ref().map(|(level, _)| *level)
    }

    /// The NUMA holding the proposal's annotations give.
    #[must_use]
    pub fn numa(&self) -> Option<NumaHolding> {
        self.numa.as_ref().map(|(numa, _)| *numa)
    }

    fn add(&mut self, said: Shape, key: &'static str, text: &str) -> Result<(), VocabularyError> {
        let here = Said {
            key,
            text: text.to_string(),
        };
        if let Some(level) = said.level {
            match &self.level {
                Some((have, from)) if *have != level => {
                    return Err(contradiction(from, (key, text)))
                }
                Some(_) => {}
                None => self.level = Some((level, here.clone())),
            }
        }
        if let Some(numa) = said.numa {
            match &self.numa {
                Some((have, from)) if *have != numa => {
                    return Err(contradiction(from, (key, text)))
                }
                Some(_) => {}
                None => self.numa = Some((numa, here)),
            }
        }
        Ok(())
    }
}

/// `a&&b`, ` a && b ` → `a && b`.
fn normalize(value: &str) -> String {
    value
        .split("&&")
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" && ")
}

/// The row of `role`, when the table knows it.
#[must_use]
pub fn role(role: &str) -> Option<&'static Role> {
    let role = normalize(role);
    ROLES.iter().find(|r| r.names.contains(&role.as_str()))
}

/// Reads the proposal's two annotations; a contradiction inside one, or
/// between the role and the resource type, is an error.
pub fn read(annotations: &BTreeMap<String, String>) -> Result<Proposal, VocabularyError> {
    let mut proposal = Proposal::default();
    if let Some(value) = annotations.get(POD_ROLE_ANNOTATION) {
        match role(value) {
            Some(row) => proposal.add(row.shape, POD_ROLE_ANNOTATION, value)?,
            None => proposal.unknown_role = Some(value.clone()),
        }
    }
    if let Some(value) = annotations.get(RESOURCE_TYPE_ANNOTATION) {
        for term in value.split("&&").map(str::trim) {
            let Some((_, said)) = TERMS.iter().find(|(name, _)| *name == term) else {
                return Err(VocabularyError::UnknownTerm {
                    value: value.clone(),
                    term: term.to_string(),
                });
            };
            proposal.add(*said, RESOURCE_TYPE_ANNOTATION, term)?;
        }
    }
    Ok(proposal)
}

/// What katalyst's annotations say explicitly, compared with the
/// proposal's: its level (when it parses; an invalid level is
/// [`super::parse`]'s error), `numa_binding` and `numa_exclusive`.
pub fn check_katalyst(
    proposal: &Proposal,
    annotations: &BTreeMap<String, String>,
    memory_enhancement: &BTreeMap<String, String>,
) -> Result<(), VocabularyError> {
    if let (Some((level, from)), Some(text)) = (&proposal.level, annotations.get(QOS_LEVEL_KEY)) {
        if text.parse::<QosLevel>().is_ok_and(|given| given != *level) {
            return Err(contradiction(from, (QOS_LEVEL_KEY, text)));
        }
    }
    let Some((numa, from)) = &proposal.numa else {
        return Ok(());
    };
    let stated = [
        ("numa_binding", memory_enhancement.get("numa_binding"), true),
        (
            "numa_exclusive",
            memory_enhancement.get("numa_exclusive"),
            numa.exclusive(),
        ),
    ];
    for (name, value, want) in stated {
        if let Some(value) = value.filter(|v| (v.as_str() == "true") != want) {
            let text = format!("{name}: {value}");
            return Err(contradiction(from, (MEMORY_ENHANCEMENT_KEY, &text)));
        }
    }
    if let Some(value) = annotations
        .get(NUMA_BINDING_KEY)
        .filter(|v| v.as_str() != "true")
    {
        return Err(contradiction(from, (NUMA_BINDING_KEY, value)));
    }
    Ok(())
}

/// What the manager sends as the pod's identity in every `ResourceRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `kubernetes.io/pod-role`, else the katalyst label `…/pod_role`.
    pub pod_role: String,
    /// `kubernetes.io/resource-type`, else katalyst's `…/pod_type`.
    pub pod_type: String,
}

/// The pod's role and type as the manager sends them, after checking that
/// nothing in its metadata contradicts anything else: the proposal's role
/// annotation and katalyst's role label, the resource type and katalyst's
/// pod type (both go to `pod_type`), and what the proposal's annotations
/// say against katalyst's level and NUMA enhancements.
pub fn identity(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Identity, VocabularyError> {
    let proposal = read(annotations)?;
    let memory = annotations
        .get(MEMORY_ENHANCEMENT_KEY)
        .and_then(|text| serde_json::from_str::<BTreeMap<String, String>>(text).ok())
        .unwrap_or_default();
    check_katalyst(&proposal, annotations, &memory)?;
    let pod_role = agreed(
        (POD_ROLE_ANNOTATION, annotations.get(POD_ROLE_ANNOTATION)),
        (POD_ROLE_LABEL, labels.get(POD_ROLE_LABEL)),
        |a, b| a == b || role(a).is_some_and(|row| role(b).is_some_and(|r| std::ptr::eq(row, r))),
    )?;
    let pod_type = agreed(
        (
            RESOURCE_TYPE_ANNOTATION,
            annotations.get(RESOURCE_TYPE_ANNOTATION),
        ),
        (POD_TYPE_KEY, annotations.get(POD_TYPE_KEY)),
        |a, b| normalize(a) == normalize(b),
    )?;
    Ok(Identity { pod_role, pod_type })
}

/// One value from two keys that must agree; the first wins when both are
/// set.
fn agreed(
    first: (&'static str, Option<&String>),
    second: (&'static str, Option<&String>),
    same: impl Fn(&str, &str) -> bool,
) -> Result<String, VocabularyError> {
    match (first.1, second.1) {
        (Some(a), Some(b)) if !same(a, b) => Err(VocabularyError::Contradiction {
            first_key: first.0.to_string(),
            first_value: a.clone(),
            second_key: second.0.to_string(),
            second_value: b.clone(),
        }),
        (Some(a), _) => Ok(a.clone()),
        (None, Some(b)) => Ok(b.clone()),
        (None, None) => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests;
