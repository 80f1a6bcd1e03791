//! Topology Manager policies and construction (spec §4, §5.1): `none`,
//! `best-effort`, `restricted`, `single-numa-node`; scopes `container` and
//! `pod`; kubelet's start-up validation and error texts.

use std::collections::BTreeMap;
use std::fmt;

use super::bitmask::NumaMask;
use super::hint::{filter_single_numa, normalize, ProviderHints, TopologyHint};
use super::merge::HintMerger;
use super::numa_info::NumaInfo;
use super::numa_score::NumaScores;
use super::options::{TopologyManagerOptions, TopologyOptionError};

/// A Topology Manager policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    None,
    BestEffort,
    Restricted,
    SingleNumaNode,
}

impl Policy {
    /// Parses kubelet's policy name.
    pub fn parse(name: &str) -> Result<Self, TopologyManagerError> {
        match name {
            "none" => Ok(Self::None),
            "best-effort" => Ok(Self::BestEffort),
            "restricted" => Ok(Self::Restricted),
            "single-numa-node" => Ok(Self::SingleNumaNode),
            _ => Err(TopologyManagerError::UnknownPolicy {
                name: name.to_owned(),
            }),
        }
    }

    /// kubelet's name of the policy.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::BestEffort => "best-effort",
            Self::Restricted => "restricted",
            Self::SingleNumaNode => "single-numa-node",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The admission scope. `None` is what the `none` policy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    None,
    Container,
    Pod,
}

impl Scope {
    /// Parses `container` or `pod`.
    pub fn parse(name: &str) -> Result<Self, TopologyManagerError> {
        match name {
            "container" => Ok(Self::Container),
            "pod" => Ok(Self::Pod),
            _ => Err(TopologyManagerError::UnknownScope {
                name: name.to_owned(),
            }),
        }
    }

    /// kubelet's name of the scope.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Container => "container",
            Self::Pod => "pod",
        }
    }
}

/// Construction errors; `Display` is kubelet's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyManagerError {
    #[error(transparent)]
    Option(#[from] TopologyOptionError),
    #[error("cannot discover NUMA topology: error getting NUMA distances from cadvisor")]
    NoDistances,
    #[error("unsupported on machines with more than {max} NUMA Nodes")]
    TooManyNumaNodes { max: i64, nodes: usize },
    #[error("unknown policy: \"{name}\"")]
    UnknownPolicy { name: String },
    #[error("unknown scope: \"{name}\"")]
    UnknownScope { name: String },
    #[error("cannot represent the numa nodes of this machine: {0}")]
    NumaNodes(String),
}

/// kubelet's pod rejection: reason `TopologyAffinityError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("Resources cannot be allocated with Topology locality")]
pub struct TopologyAffinityError;

impl TopologyAffinityError {
    /// The admission reason kubelet reports.
    pub const REASON: &'static str = "TopologyAffinityError";
}

/// The result of merging one admission's hints under a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The hint stored for the container(s) (`affinity: None` = anywhere).
    pub hint: TopologyHint,
    pub admit: bool,
}

impl Admission {
    /// `Err(TopologyAffinityError)` when not admitted.
    pub fn result(&self) -> Result<TopologyHint, TopologyAffinityError> {
        if self.admit {
            Ok(self.hint)
        } else {
            Err(TopologyAffinityError)
        }
    }
}

/// A configured Topology Manager (policy, scope, options, NUMA nodes).
#[derive(Debug, Clone, PartialEq)]
pub struct TopologyManager {
    policy: Policy,
    scope: Scope,
    options: TopologyManagerOptions,
    numa: NumaInfo,
}

impl TopologyManager {
    /// kubelet `NewManager`, checks in kubelet's order: policy `none` (no
    /// further checks, options not even parsed), options, distances (only
    /// with `prefer-closest-numa-nodes`), NUMA node count against
    /// `max-allowable-numa-nodes`, policy name, scope name.
    pub fn new(
        policy: &str,
        scope: &str,
        options: &BTreeMap<String, String>,
        numa: NumaInfo,
    ) -> Result<Self, TopologyManagerError> {
        if policy == "none" {
            return Ok(Self {
                policy: Policy::None,
                scope: Scope::None,
                options: TopologyManagerOptions::default(),
                numa,
            });
        }
        let options = TopologyManagerOptions::parse(options)?;
        if options.prefer_closest_numa && !numa.has_distances() {
            return Err(TopologyManagerError::NoDistances);
        }
        let nodes = numa.nodes().len();
        if i64::try_from(nodes).unwrap_or(i64::MAX) > options.max_allowable_numa_nodes {
            return Err(TopologyManagerError::TooManyNumaNodes {
                max: options.max_allowable_numa_nodes,
                nodes,
            });
        }
        Ok(Self {
            policy: Policy::parse(policy)?,
            scope: Scope::parse(scope)?,
            options,
            numa,
        })
    }

    /// The `none` manager: no hints, every container admitted anywhere.
    #[must_use]
    pub fn none() -> Self {
        Self {
            policy: Policy::None,
            scope: Scope::None,
            options: TopologyManagerOptions::default(),
            numa: NumaInfo::empty(),
        }
    }

    #[must_use]
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The hint every admission gets when it is known without merging
    /// anything: the `none` policy admits every container with kubelet's
    /// empty hint (no affinity, not preferred). `None` for the other
    /// policies, whose hint depends on the providers' answers.
    #[must_use]
    pub fn fixed_hint(&self) -> Option<TopologyHint> {
        (self.policy == Policy::None).then(TopologyHint::cannot_satisfy)
    }

    #[must_use]
    pub fn scope(&self) -> Scope {
        self.scope
    }

    #[must_use]
    pub fn options(&self) -> &TopologyManagerOptions {
        &self.options
    }

    #[must_use]
    pub fn numa(&self) -> &NumaInfo {
        &self.numa
    }

    /// Merges the providers' hints under the policy and decides admission.
    #[must_use]
    pub fn merge(&self, providers: &[ProviderHints]) -> Admission {
        merge_with_policy(
            self.policy,
            &self.numa,
            self.options.prefer_closest_numa,
            providers,
        )
    }

    /// [`TopologyManager::merge`] with the NUMA nodes' allocation `scores`
    /// for `numa-allocation-strategy` (KEP-6007; the same as `merge` when
    /// the option is `none`).
    #[must_use]
    pub fn merge_scored(&self, providers: &[ProviderHints], scores: &NumaScores) -> Admission {
        let strategy = self.options.numa_allocation_strategy;
        let merger = |lists: &[Vec<TopologyHint>], closest: bool| {
            HintMerger::new(&self.numa, lists, closest).with_scoring(strategy, scores)
        };
        merge_lists(
            self.policy,
            &self.numa,
            self.options.prefer_closest_numa,
            providers,
            merger,
        )
    }
}

/// The policy's `Merge` (spec §4) for `providers` on `numa`.
#[must_use]
pub fn merge_with_policy(
    policy: Policy,
    numa: &NumaInfo,
    prefer_closest: bool,
    providers: &[ProviderHints],
) -> Admission {
    merge_lists(policy, numa, prefer_closest, providers, |lists, closest| {
        HintMerger::new(numa, lists, closest)
    })
}

/// The policy's `Merge` with the mergers `merger` builds (for the lists
/// and the closest switch in use).
fn merge_lists<'a>(
    policy: Policy,
    numa: &NumaInfo,
    prefer_closest: bool,
    providers: &[ProviderHints],
    merger: impl Fn(&[Vec<TopologyHint>], bool) -> HintMerger<'a>,
) -> Admission {
    let lists = normalize(providers);
    match policy {
        Policy::None => Admission {
            hint: TopologyHint::cannot_satisfy(),
            admit: true,
        },
        Policy::BestEffort => Admission {
            hint: merger(&lists, prefer_closest).merge(&lists),
            admit: true,
        },
        Policy::Restricted => {
            let hint = merger(&lists, prefer_closest).merge(&lists);
            Admission {
                hint,
                admit: hint.preferred,
            }
        }
        Policy::SingleNumaNode => single_numa_node(numa, &lists, merger),
    }
}

/// single-numa-node: only preferred single-node (or `None`) hints take part,
/// closest is ignored, and a result equal to all nodes becomes `None`.
fn single_numa_node<'a>(
    numa: &NumaInfo,
    lists: &[Vec<TopologyHint>],
    merger: impl Fn(&[Vec<TopologyHint>], bool) -> HintMerger<'a>,
) -> Admission {
    let filtered = filter_single_numa(lists);
    let mut hint = merger(&filtered, false).merge(&filtered);
    if hint.affinity == Some(numa.default_affinity()) {
        hint.affinity = None;
    }
    Admission {
        hint,
        admit: hint.preferred,
    }
}

/// True when a mask is one NUMA node (what single-numa-node guarantees).
#[must_use]
pub fn is_single_node(mask: Option<NumaMask>) -> bool {
    mask.is_some_and(|m| m.count() == 1)
}

#[cfg(test)]
mod tests;
