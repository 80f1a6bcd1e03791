//! Static policy options (`cpuManagerPolicyOptions`): parsing and validation
//! with kubelet's exact error texts (spec `kubelet-cpumanager.md` §6).
//!
//! Each option is checked in turn: known name, then maturity against the
//! feature gates, then the value as a Go `strconv.ParseBool` literal. Then the
//! incompatible pairs are checked in kubelet's fixed order, and
//! [`StaticPolicyOptions::validate_machine`] checks `align-by-socket` against
//! the Topology Manager policy and the hardware.
//!
//! **Order of several bad options.** kubelet visits the options in Go map
//! order (random), so with several bad options the error it reports varies.
//! Pinion visits them sorted by name (byte order, as `BTreeMap` iterates), so
//! the same input always yields the same error — one of those kubelet can give.

use std::collections::BTreeMap;
use std::fmt;

use crate::topology::Topology;

/// `full-pcpus-only`
pub const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
/// `distribute-cpus-across-numa`
pub const DISTRIBUTE_CPUS_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
/// `align-by-socket`
pub const ALIGN_BY_SOCKET: &str = "align-by-socket";
/// `distribute-cpus-across-cores`
pub const DISTRIBUTE_CPUS_ACROSS_CORES: &str = "distribute-cpus-across-cores";
/// `strict-cpu-reservation`
pub const STRICT_CPU_RESERVATION: &str = "strict-cpu-reservation";
/// `prefer-align-cpus-by-uncorecache`
pub const PREFER_ALIGN_CPUS_BY_UNCORECACHE: &str = "prefer-align-cpus-by-uncorecache";

/// The Topology Manager policy name that excludes `align-by-socket`.
const SINGLE_NUMA_NODE: &str = "single-numa-node";

/// Maturity level of an option (kubelet v1.37 line: `policy_options.go`
/// of k8s.io/kubernetes v1.37.2, the module the live oracle links).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maturity {
    Alpha,
    Beta,
    Ga,
}

/// Every option kubelet knows, with its maturity.
// difference-from-kubelet: option-maturities
pub const KNOWN_OPTIONS: [(&str, Maturity); 6] = [
    (FULL_PCPUS_ONLY, Maturity::Ga),
    (STRICT_CPU_RESERVATION, Maturity::Ga),
    (DISTRIBUTE_CPUS_ACROSS_NUMA, Maturity::Beta),
    (PREFER_ALIGN_CPUS_BY_UNCORECACHE, Maturity::Ga),
    (ALIGN_BY_SOCKET, Maturity::Alpha),
    (DISTRIBUTE_CPUS_ACROSS_CORES, Maturity::Alpha),
];

/// The feature gates `CPUManagerPolicyAlphaOptions` (`alpha`) and
/// `CPUManagerPolicyBetaOptions` (`beta`). `Default` is kubelet's default:
/// alpha off, beta on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FeatureGates {
    pub alpha: bool,
    pub beta: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            alpha: false,
            beta: true,
        }
    }
}

impl FeatureGates {
    /// Both gates on (the conformance corpus default when gates are absent).
    #[must_use]
    pub fn all() -> Self {
        Self {
            alpha: true,
            beta: true,
        }
    }
}

/// The parsed static policy options; all false by default (also each one
/// missing from a serialized form, e.g. the CPU plugin's
/// `staticPolicyOptions: {full_pcpus_only: true}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaticPolicyOptions {
    pub full_pcpus_only: bool,
    pub distribute_cpus_across_numa: bool,
    pub align_by_socket: bool,
    pub distribute_cpus_across_cores: bool,
    pub strict_cpu_reservation: bool,
    pub prefer_align_cpus_by_uncorecache: bool,
}

/// Option errors; `Display` is kubelet's exact text (a contract: tools and
/// people grep for it), hence the capitals and the upstream typo "Topolgy".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyOptionError {
    #[error("unknown CPU Manager Policy option: {}", GoQuoted(.name))]
    Unknown { name: String },
    #[error("CPU Manager Policy Alpha-level Options not enabled, but option {} provided", GoQuoted(.name))]
    AlphaNotEnabled { name: String },
    #[error("CPU Manager Policy Beta-level Options not enabled, but option {} provided", GoQuoted(.name))]
    BetaNotEnabled { name: String },
    #[error(
        "bad value for option {}: strconv.ParseBool: parsing {}: invalid syntax",
        GoQuoted(.name),
        GoQuoted(.value)
    )]
    BadValue { name: String, value: String },
    #[error("static policy options {first} and {second} can not be used at the same time")]
    Incompatible {
        first: &'static str,
        second: &'static str,
    },
    #[error("Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option")]
    AlignBySocketWithSingleNumaNode,
    #[error("Align by socket is not compatible with hardware where number of sockets are more than number of NUMA")]
    AlignBySocketMoreSocketsThanNuma,
}

impl StaticPolicyOptions {
    /// kubelet `NewStaticPolicyOptions`: parses `options` (name → value)
    /// under `gates`, then checks the incompatible pairs.
    pub fn parse(
        options: &BTreeMap<String, String>,
        gates: FeatureGates,
    ) -> Result<Self, PolicyOptionError> {
        let mut parsed = Self::default();
        for (name, value) in options {
            check_available(name, gates)?;
            let enabled = parse_go_bool(value).ok_or_else(|| PolicyOptionError::BadValue {
                name: name.clone(),
                value: value.clone(),
            })?;
            *parsed.flag_mut(name)? = enabled;
        }
        parsed.check_compatible()?;
        Ok(parsed)
    }

    /// kubelet `ValidateStaticPolicyOptions`: `align-by-socket` is refused
    /// with the `single-numa-node` Topology Manager policy and on machines
    /// with more sockets than NUMA nodes (checked in that order).
    pub fn validate_machine(
        &self,
        topology: &Topology,
        topology_manager_policy: &str,
    ) -> Result<(), PolicyOptionError> {
        if !self.align_by_socket {
            return Ok(());
        }
        if topology_manager_policy == SINGLE_NUMA_NODE {
            return Err(PolicyOptionError::AlignBySocketWithSingleNumaNode);
        }
        if topology.num_sockets() > topology.num_numa_nodes() {
            return Err(PolicyOptionError::AlignBySocketMoreSocketsThanNuma);
        }
        Ok(())
    }

    /// The options that steer the allocator.
    #[must_use]
    pub fn alloc_options(&self) -> crate::alloc::AllocOptions {
        crate::alloc::AllocOptions {
            full_pcpus_only: self.full_pcpus_only,
            distribute_cpus_across_numa: self.distribute_cpus_across_numa,
            distribute_cpus_across_cores: self.distribute_cpus_across_cores,
            prefer_align_cpus_by_uncorecache: self.prefer_align_cpus_by_uncorecache,
            align_by_socket: self.align_by_socket,
        }
    }

    /// The value of option `name`, or `None` for an unknown name.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<bool> {
        Some(match name {
            FULL_PCPUS_ONLY => self.full_pcpus_only,
            DISTRIBUTE_CPUS_ACROSS_NUMA => self.distribute_cpus_across_numa,
            ALIGN_BY_SOCKET => self.align_by_socket,
            DISTRIBUTE_CPUS_ACROSS_CORES => self.distribute_cpus_across_cores,
            STRICT_CPU_RESERVATION => self.strict_cpu_reservation,
            PREFER_ALIGN_CPUS_BY_UNCORECACHE => self.prefer_align_cpus_by_uncorecache,
            _ => return None,
        })
    }

    fn flag_mut(&mut self, name: &str) -> Result<&mut bool, PolicyOptionError> {
        Ok(match name {
            FULL_PCPUS_ONLY => &mut self.full_pcpus_only,
            DISTRIBUTE_CPUS_ACROSS_NUMA => &mut self.distribute_cpus_across_numa,
            ALIGN_BY_SOCKET => &mut self.align_by_socket,
            DISTRIBUTE_CPUS_ACROSS_CORES => &mut self.distribute_cpus_across_cores,
            STRICT_CPU_RESERVATION => &mut self.strict_cpu_reservation,
            PREFER_ALIGN_CPUS_BY_UNCORECACHE => &mut self.prefer_align_cpus_by_uncorecache,
            _ => {
                return Err(PolicyOptionError::Unknown {
                    name: name.to_owned(),
                })
            }
        })
    }

    /// The four incompatible pairs, in kubelet's order.
    fn check_compatible(&self) -> Result<(), PolicyOptionError> {
        let pairs = [
            (FULL_PCPUS_ONLY, DISTRIBUTE_CPUS_ACROSS_CORES),
            (DISTRIBUTE_CPUS_ACROSS_NUMA, DISTRIBUTE_CPUS_ACROSS_CORES),
            (
                PREFER_ALIGN_CPUS_BY_UNCORECACHE,
                DISTRIBUTE_CPUS_ACROSS_CORES,
            ),
            (
                PREFER_ALIGN_CPUS_BY_UNCORECACHE,
                DISTRIBUTE_CPUS_ACROSS_NUMA,
            ),
        ];
        for (first, second) in pairs {
            if self.get(first) == Some(true) && self.get(second) == Some(true) {
                return Err(PolicyOptionError::Incompatible { first, second });
            }
        }
        Ok(())
    }
}

/// kubelet `CheckPolicyOptionAvailable`: known name, and its maturity's gate on.
fn check_available(name: &str, gates: FeatureGates) -> Result<(), PolicyOptionError> {
    let maturity = KNOWN_OPTIONS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, maturity)| *maturity)
        .ok_or_else(|| PolicyOptionError::Unknown {
            name: name.to_owned(),
        })?;
    match maturity {
        Maturity::Alpha if !gates.alpha => Err(PolicyOptionError::AlphaNotEnabled {
            name: name.to_owned(),
        }),
        Maturity::Beta if !gates.beta => Err(PolicyOptionError::BetaNotEnabled {
            name: name.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Go `strconv.ParseBool`: exactly `1 t T TRUE true True` / `0 f F FALSE
/// false False`; anything else (including `tRuE`, ` true`) is `None`.
#[must_use]
pub fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Formats a string the way Go's `%q` does for the texts kubelet quotes:
/// double quotes, `\"` and `\\`, the C escapes, `\xNN` for other control
/// bytes, and non-printable characters as `\uNNNN`/`\UNNNNNNNN`.
pub struct GoQuoted<'a>(pub &'a str);

impl fmt::Display for GoQuoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for ch in self.0.chars() {
            match ch {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\u{7}' => f.write_str("\\a")?,
                '\u{8}' => f.write_str("\\b")?,
                '\u{c}' => f.write_str("\\f")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\u{b}' => f.write_str("\\v")?,
                c if u32::from(c) < 0x20 || c == '\u{7f}' => write!(f, "\\x{:02x}", u32::from(c))?,
                c if c.is_control() && u32::from(c) <= 0xffff => {
                    write!(f, "\\u{:04x}", u32::from(c))?;
                }
                c if c.is_control() => write!(f, "\\U{:08x}", u32::from(c))?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("\"")
    }
}

#[cfg(test)]
mod tests;
