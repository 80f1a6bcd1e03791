//! Core types of heterogeneous (hybrid) machines, by CPU id. The first
//! source that distinguishes the CPUs wins:
//!
//! 1. Intel hybrid parts list their CPUs in `sys/devices/cpu_core/cpus`
//!    (`intel_core`) and `sys/devices/cpu_atom/cpus` (`intel_atom`).
//! 2. arm64 reports each CPU's `regs/identification/midr_el1`; CPUs whose
//!    implementer and part number differ are different core designs
//!    (`arm-0x41-0xd87` = Arm Ltd Cortex-A725).
//! 3. `cpu_capacity` (arm, riscv), as `capacity-N`, only when there is no
//!    MIDR (with one MIDR everywhere, capacity differences are frequency
//!    bins of one core design).
//!
//! A source whose values are all equal says nothing (homogeneous machine),
//! and discovery moves to the next one; with no distinguishing source every
//! CPU has no core type.

use std::collections::BTreeMap;
use std::path::Path;

use pinion_core::CpuSet;

use super::read;
use super::DiscoveryError;

/// Core type of every online CPU of a hybrid machine; empty otherwise.
pub(crate) fn read_core_types(
    root: &Path,
    cpu_dir: &Path,
    online: &CpuSet,
) -> Result<BTreeMap<u32, String>, DiscoveryError> {
    let intel = read_intel_pmus(root, online)?;
    if !intel.is_empty() {
        return Ok(intel);
    }
    let midr = read_per_cpu(cpu_dir, online, "regs/identification/midr_el1", parse_midr)?;
    if !midr.is_empty() {
        // One core design everywhere: capacity differences are then only
        // frequency bins of the same core, not core types.
        return Ok(if distinguishes(&midr) {
            midr
        } else {
            BTreeMap::new()
        });
    }
    let capacity = read_per_cpu(cpu_dir, online, "cpu_capacity", parse_capacity)?;
    if distinguishes(&capacity) {
        return Ok(capacity);
    }
    Ok(BTreeMap::new())
}

fn read_intel_pmus(root: &Path, online: &CpuSet) -> Result<BTreeMap<u32, String>, DiscoveryError> {
    let devices = root.join("sys/devices");
    let mut types = BTreeMap::new();
    for (pmu, name) in [("cpu_core", "intel_core"), ("cpu_atom", "intel_atom")] {
        if let Some(cpus) = read::read_list(&devices.join(pmu).join("cpus"))? {
            for cpu in &cpus.intersection(online) {
                types.insert(cpu, name.to_string());
            }
        }
    }
    Ok(types)
}

/// Reads `cpuN/<file>` for the online CPUs through `parse`. The files are
/// all-or-nothing on a kernel, so a missing file on the first CPU ends the
/// scan early (the common case on x86, where none exist).
fn read_per_cpu(
    cpu_dir: &Path,
    online: &CpuSet,
    file: &str,
    parse: fn(&str) -> Option<String>,
) -> Result<BTreeMap<u32, String>, DiscoveryError> {
    let mut types = BTreeMap::new();
    for cpu in online {
        let path = cpu_dir.join(format!("cpu{cpu}/{file}"));
        let Some(text) = read::read_trimmed(&path)? else {
            if types.is_empty() {
                return Ok(types);
            }
            continue;
        };
        let kind = parse(&text)
            .ok_or_else(|| read::malformed(&path, format!("unexpected value {text:?}")))?;
        types.insert(cpu, kind);
    }
    Ok(types)
}

/// `0x00000000410fd871` → `arm-0x41-0xd87` (implementer bits 31..24, part
/// number bits 15..4; variant and revision are ignored).
fn parse_midr(text: &str) -> Option<String> {
    let digits = text.strip_prefix("0x")?;
    let value = u64::from_str_radix(digits, 16).ok()?;
    let implementer = (value >> 24) & 0xff;
    let part = (value >> 4) & 0xfff;
    Some(format!("arm-{implementer:#x}-{part:#x}"))
}

fn parse_capacity(text: &str) -> Option<String> {
    let value = text.parse::<u32>().ok()?;
    Some(format!("capacity-{value}"))
}

/// True when at least two CPUs have different types.
fn distinguishes(types: &BTreeMap<u32, String>) -> bool {
    let mut values = types.values();
    values
        .next()
        .is_some_and(|first| values.any(|v| v != first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midr_keeps_implementer_and_part() {
        assert_eq!(
            parse_midr("0x00000000410fd871").as_deref(),
            Some("arm-0x41-0xd87")
        );
        assert_eq!(
            parse_midr("0x00000000412fd470").as_deref(),
            Some("arm-0x41-0xd47")
        );
        assert_eq!(parse_midr("410fd871"), None);
        assert_eq!(parse_midr("0xzz"), None);
    }

    #[test]
    fn capacity_must_be_a_number() {
        assert_eq!(parse_capacity("1024").as_deref(), Some("capacity-1024"));
        assert_eq!(parse_capacity("-1"), None);
    }
}
