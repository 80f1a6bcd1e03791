//! Topology Manager policy options (`topologyManagerPolicyOptions`, spec
//! §6): `prefer-closest-numa-nodes` (Go `ParseBool`) and
//! `max-allowable-numa-nodes` (Go `Atoi`, at least 8, default 8). Both are GA
//! in current kubelet, so no feature gate is consulted. Also KEP-6007's
//! `numa-allocation-strategy` (`none` | `most-allocated` |
//! `least-allocated`, [`super::numa_score`]), which kubelet does not ship
//! yet (alpha from v1.38 by the KEP): Pinion takes it without a gate.
//!
//! Options are visited in name order; kubelet visits them in Go map order, so
//! with several bad options it may report another one of them.

use std::collections::BTreeMap;

use super::numa_score::NumaAllocationStrategy;
use crate::policy::options::{parse_go_bool, GoQuoted};

/// `prefer-closest-numa-nodes`
pub const PREFER_CLOSEST_NUMA_NODES: &str = "prefer-closest-numa-nodes";
/// `max-allowable-numa-nodes`
pub const MAX_ALLOWABLE_NUMA_NODES: &str = "max-allowable-numa-nodes";
/// `numa-allocation-strategy` (KEP-6007)
pub const NUMA_ALLOCATION_STRATEGY: &str = "numa-allocation-strategy";
/// kubelet's default (and minimum) `max-allowable-numa-nodes`.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: i64 = 8;

/// Parsed options; `Default` is kubelet's (closest off, at most 8 nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyManagerOptions {
    pub prefer_closest_numa: bool,
    pub max_allowable_numa_nodes: i64,
    pub numa_allocation_strategy: NumaAllocationStrategy,
}

impl Default for TopologyManagerOptions {
    fn default() -> Self {
        Self {
            prefer_closest_numa: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
            numa_allocation_strategy: NumaAllocationStrategy::None,
        }
    }
}

/// Option errors; `Display` is kubelet's exact text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyOptionError {
    #[error("unknown Topology Manager Policy option: {}", GoQuoted(.name))]
    Unknown { name: String },
    #[error(
        "bad value for option {}: strconv.ParseBool: parsing {}: invalid syntax",
        GoQuoted(.name),
        GoQuoted(.value)
    )]
    BadBool { name: String, value: String },
    #[error(
        "unable to convert policy option to integer {}: strconv.Atoi: parsing {}: {reason}",
        GoQuoted(.name),
        GoQuoted(.value)
    )]
    BadInteger {
        name: String,
        value: String,
        reason: AtoiFailure,
    },
    #[error("the minimum value of \"max-allowable-numa-nodes\" should not be less than 8")]
    TooFewNumaNodes { value: i64 },
    /// Pinion's text (kubelet has not shipped the option).
    #[error("bad value for option \"numa-allocation-strategy\": {value:?} (expected none, most-allocated or least-allocated)")]
    BadStrategy { value: String },
}

/// Why Go `strconv.Atoi` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtoiFailure {
    InvalidSyntax,
    OutOfRange,
}

impl std::fmt::Display for AtoiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::InvalidSyntax => "invalid syntax",
            Self::OutOfRange => "value out of range",
        })
    }
}

impl TopologyManagerOptions {
    /// kubelet `NewPolicyOptions`.
    pub fn parse(options: &BTreeMap<String, String>) -> Result<Self, TopologyOptionError> {
        let mut parsed = Self::default();
        for (name, value) in options {
            match name.as_str() {
                PREFER_CLOSEST_NUMA_NODES => {
                    parsed.prefer_closest_numa =
                        parse_go_bool(value).ok_or_else(|| TopologyOptionError::BadBool {
                            name: name.clone(),
                            value: value.clone(),
                        })?;
                }
                MAX_ALLOWABLE_NUMA_NODES => {
                    parsed.max_allowable_numa_nodes = parse_max_allowable(name, value)?;
                }
                NUMA_ALLOCATION_STRATEGY => {
                    parsed.numa_allocation_strategy = NumaAllocationStrategy::parse(value)
                        .ok_or_else(|| TopologyOptionError::BadStrategy {
                            value: value.clone(),
                        })?;
                }
                _ => return Err(TopologyOptionError::Unknown { name: name.clone() }),
            }
        }
        Ok(parsed)
    }
}

fn parse_max_allowable(name: &str, value: &str) -> Result<i64, TopologyOptionError> {
    let number = go_atoi(value).map_err(|reason| TopologyOptionError::BadInteger {
        name: name.to_owned(),
        value: value.to_owned(),
        reason,
    })?;
    if number < DEFAULT_MAX_ALLOWABLE_NUMA_NODES {
        return Err(TopologyOptionError::TooFewNumaNodes { value: number });
    }
    Ok(number)
}

/// Go `strconv.Atoi` on a 64-bit platform: optional sign, decimal digits,
/// nothing else.
fn go_atoi(text: &str) -> Result<i64, AtoiFailure> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AtoiFailure::InvalidSyntax);
    }
    text.parse().map_err(|_| AtoiFailure::OutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<TopologyManagerOptions, TopologyOptionError> {
        let map = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        TopologyManagerOptions::parse(&map)
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(parse(&[]), Ok(TopologyManagerOptions::default()));
        let parsed = parse(&[
            (PREFER_CLOSEST_NUMA_NODES, "T"),
            (MAX_ALLOWABLE_NUMA_NODES, "+64"),
        ]);
        assert_eq!(
            parsed,
            Ok(TopologyManagerOptions {
                prefer_closest_numa: true,
                max_allowable_numa_nodes: 64,
                numa_allocation_strategy: NumaAllocationStrategy::None,
            })
        );
    }

    #[test]
    fn numa_allocation_strategy_takes_the_keps_values_and_names_a_bad_one() {
        for (value, expected) in [
            ("none", NumaAllocationStrategy::None),
            ("most-allocated", NumaAllocationStrategy::MostAllocated),
            ("least-allocated", NumaAllocationStrategy::LeastAllocated),
        ] {
            let parsed = parse(&[(NUMA_ALLOCATION_STRATEGY, value)]).unwrap();
            assert_eq!(parsed.numa_allocation_strategy, expected);
        }
        let err = parse(&[(NUMA_ALLOCATION_STRATEGY, "pack")]).unwrap_err();
        assert_eq!(
            err,
            TopologyOptionError::BadStrategy {
                value: "pack".to_owned()
            }
        );
        assert!(err.to_string().contains("\"pack\""), "{err}");
    }

    #[test]
    fn errors_have_kubelets_texts() {
        let text = |pairs: &[(&str, &str)]| parse(pairs).unwrap_err().to_string();
        assert_eq!(
            text(&[(MAX_ALLOWABLE_NUMA_NODES, "99999999999999999999")]),
            "unable to convert policy option to integer \"max-allowable-numa-nodes\": strconv.Atoi: parsing \"99999999999999999999\": value out of range"
        );
        assert_eq!(
            text(&[(MAX_ALLOWABLE_NUMA_NODES, "-")]),
            "unable to convert policy option to integer \"max-allowable-numa-nodes\": strconv.Atoi: parsing \"-\": invalid syntax"
        );
        assert_eq!(
            text(&[(MAX_ALLOWABLE_NUMA_NODES, "7")]),
            "the minimum value of \"max-allowable-numa-nodes\" should not be less than 8"
        );
        assert_eq!(
            text(&[("x", "1")]),
            "unknown Topology Manager Policy option: \"x\""
        );
    }
}
