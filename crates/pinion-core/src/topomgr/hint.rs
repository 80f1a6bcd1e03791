//! Topology hints and what providers return (spec §1, §3.1).
//!
//! A [`TopologyHint`] is a NUMA affinity (a mask, or `None` = "any node")
//! plus `preferred`. A provider answers with [`ProviderHints`]: `None` or an
//! empty map = "don't care"; per resource, `None` = "don't care" and an empty
//! list = "cannot be satisfied anywhere".

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::bitmask::NumaMask;

/// A NUMA affinity and whether it is one of the provider's best placements.
/// Serde form: `{"mask": [ids] | null, "preferred": bool}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopologyHint {
    #[serde(rename = "mask")]
    pub affinity: Option<NumaMask>,
    pub preferred: bool,
}

impl TopologyHint {
    /// A hint with a mask.
    #[must_use]
    pub fn new(mask: NumaMask, preferred: bool) -> Self {
        Self {
            affinity: Some(mask),
            preferred,
        }
    }

    /// "Any NUMA node", preferred: what a provider that does not care means.
    #[must_use]
    pub fn dont_care() -> Self {
        Self {
            affinity: None,
            preferred: true,
        }
    }

    /// "Nowhere": what an empty hint list means.
    #[must_use]
    pub fn cannot_satisfy() -> Self {
        Self {
            affinity: None,
            preferred: false,
        }
    }

    /// kubelet `LessThan` (used to sort hints for display): preferred first,
    /// then the narrower mask (a `None` mask counts as empty).
    #[must_use]
    pub fn sorts_before(&self, other: &Self) -> bool {
        if self.preferred != other.preferred {
            return self.preferred;
        }
        let mine = self.affinity.unwrap_or_default();
        mine.is_narrower_than(other.affinity.unwrap_or_default())
    }
}

impl fmt::Display for TopologyHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.affinity {
            Some(mask) => write!(f, "{{{mask}}}")?,
            None => f.write_str("any")?,
        }
        f.write_str(if self.preferred {
            " preferred"
        } else {
            " not preferred"
        })
    }
}

/// One provider's answer: resource name → hints. `None` (Go nil map) and an
/// empty map both mean "no preference for anything"; a resource mapped to
/// `None` means "no preference for this resource"; to an empty list,
/// "cannot be satisfied".
pub type ProviderHints = Option<BTreeMap<String, Option<Vec<TopologyHint>>>>;

/// kubelet `filterProvidersHints`: one hint list per (provider, resource),
/// with "don't care" and "cannot satisfy" made explicit. Resources are taken
/// in name order (kubelet: Go map order; the merge result does not depend on
/// it).
#[must_use]
pub fn normalize(providers: &[ProviderHints]) -> Vec<Vec<TopologyHint>> {
    let mut lists = Vec::new();
    for provider in providers {
        match provider {
            Some(resources) if !resources.is_empty() => {
                for hints in resources.values() {
                    lists.push(match hints {
                        None => vec![TopologyHint::dont_care()],
                        Some(list) if list.is_empty() => vec![TopologyHint::cannot_satisfy()],
                        Some(list) => list.clone(),
                    });
                }
            }
            _ => lists.push(vec![TopologyHint::dont_care()]),
        }
    }
    lists
}

/// kubelet `filterSingleNumaHints` (single-numa-node policy): keeps only
/// preferred hints whose mask is `None` or a single node. A list can become
/// empty.
#[must_use]
pub fn filter_single_numa(lists: &[Vec<TopologyHint>]) -> Vec<Vec<TopologyHint>> {
    lists
        .iter()
        .map(|list| {
            list.iter()
                .filter(|h| h.preferred && h.affinity.is_none_or(|m| m.count() == 1))
                .copied()
                .collect()
        })
        .collect()
}

/// kubelet `maxOfMinAffinityCounts` ("bestNonPreferredAffinityCount"): per
/// list the node count of its narrowest non-`None` mask; the maximum of
/// those (lists with only `None` masks are skipped; 0 when none remain).
#[must_use]
pub fn max_of_min_affinity_counts(lists: &[Vec<TopologyHint>]) -> u32 {
    lists
        .iter()
        .filter_map(|list| {
            list.iter()
                .filter_map(|h| h.affinity)
                .reduce(|best, m| if m.is_narrower_than(best) { m } else { best })
                .map(NumaMask::count)
        })
        .max()
        .unwrap_or(0)
}
