//! A placement's OCI resource settings (CFS quota and period, CPU shares,
//! memory and memory+swap limits) as cgroup file writes, for standalone runs
//! (the runtime applies them for runtime containers).
//!
//! | setting | v2 file | v1 file (hierarchy) |
//! |---|---|---|
//! | quota, period | `cpu.max` = `QUOTA PERIOD` (`max` for unlimited) | `cpu.cfs_period_us`, then `cpu.cfs_quota_us` (`-1` for unlimited) (cpu) |
//! | shares | `cpu.weight` = 1 + ((shares − 2) × 9999) / 262142 | `cpu.shares` (cpu) |
//! | memory limit | `memory.max` (`max` for unlimited) | `memory.limit_in_bytes` (`-1`) (memory) |
//! | memory+swap limit | `memory.swap.max` = memory+swap − memory (`max`) | `memory.memsw.limit_in_bytes` (`-1`) (memory) |
//! | unified (a plugin's `Unified`) | each listed file (`memory.high`, `io.weight`, … — `pinion_core::plugin_allocation::UNIFIED_FILES`) as given | refused: cgroup v2 files |
//!
//! Only settings the placement gives are written, and only when they differ
//! from what was applied last (`None`: unknown, everything given is
//! written). Zero is CRI's "not set": never written. A negative quota or
//! limit means unlimited. A setting that was applied and is no longer
//! given (a plugin's answer dropped) gets a fresh cgroup's value back:
//! `max` quota and the 100 ms period, weight 100 (v1: shares 1024), no
//! memory or swap limit, each `Unified` file's default
//! ([`pinion_core::plugin_allocation::unified_default`]).
//!
//! [`plan`] is the pure part: which files get which text, in which order;
//! the real writer ([`super::Cgroups`]) and the fake ([`super::fake`]) both
//! run it.

use std::path::Path;

use pinion_core::placement::ResourceSettings;
use pinion_core::plugin_allocation::{unified_default, UNIFIED_FILES};

use super::{CgroupError, CgroupVersion};

/// The file that holds a cgroup's CFS quota and the value that lifts it:
/// `cpu.max` = `max` on v2 (its period kept), `cpu.cfs_quota_us` = `-1`
/// (cpu hierarchy) on v1.
#[must_use]
pub fn unlimited_quota(version: CgroupVersion) -> (&'static str, &'static str) {
    match version {
        CgroupVersion::V2 => ("cpu.max", "max"),
        CgroupVersion::V1 => ("cpu.cfs_quota_us", "-1"),
    }
}

/// The file that limits a cgroup's memory: `memory.max` on v2,
/// `memory.limit_in_bytes` (memory hierarchy) on v1.
#[must_use]
pub fn memory_limit_file(version: CgroupVersion) -> &'static str {
    match version {
        CgroupVersion::V2 => "memory.max",
        CgroupVersion::V1 => "memory.limit_in_bytes",
    }
}

/// The controller (v1 hierarchy) a file belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Controller {
    Cpu,
    Memory,
    Io,
    Pids,
}

impl std::fmt::Display for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Io => "io",
            Self::Pids => "pids",
        })
    }
}

/// One file write of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingWrite {
    pub controller: Controller,
    pub file: &'static str,
    pub value: String,
}

impl SettingWrite {
    fn new(controller: Controller, file: &'static str, value: String) -> Self {
        Self {
            controller,
            file,
            value,
        }
    }
}

/// The largest value of `cpu.shares` the kernel takes (v1 clamps to it).
const MAX_SHARES: u64 = 262_144;
/// The smallest value of `cpu.shares`.
const MIN_SHARES: u64 = 2;

/// `cpu.weight` (cgroup v2) for CPU `shares`, with the conversion kubelet
/// and runc use: 2 → 1, 1024 → 39, 262144 → 10000 (shares clamped to the
/// kernel's range first).
#[must_use]
pub fn cpu_weight(shares: u64) -> u64 {
    let shares = shares.clamp(MIN_SHARES, MAX_SHARES);
    1 + ((shares - MIN_SHARES) * 9999) / (MAX_SHARES - MIN_SHARES)
}

/// The settings of `desired` that differ from `applied`, zero values
/// dropped (CRI's "not set").
fn changed(desired: &ResourceSettings, applied: Option<&ResourceSettings>) -> ResourceSettings {
    fn pick<T: PartialEq + Copy + Default>(want: Option<T>, had: Option<Option<T>>) -> Option<T> {
        let want = want.filter(|v| *v != T::default())?;
        (had.flatten() != Some(want)).then_some(want)
    }
    ResourceSettings {
        cpu_quota: pick(desired.cpu_quota, applied.map(|a| a.cpu_quota)),
        cpu_period: pick(desired.cpu_period, applied.map(|a| a.cpu_period)),
        cpu_shares: pick(desired.cpu_shares, applied.map(|a| a.cpu_shares)),
        memory_limit: pick(desired.memory_limit, applied.map(|a| a.memory_limit)),
        memory_swap_limit: pick(
            desired.memory_swap_limit,
            applied.map(|a| a.memory_swap_limit),
        ),
        // Set by the launcher on itself before exec (not a cgroup file).
        oom_score_adj: None,
        unified: desired
            .unified
            .iter()
            .filter(|(file, value)| applied.and_then(|a| a.unified.get(*file)) != Some(*value))
            .map(|(file, value)| (file.clone(), value.clone()))
            .collect(),
    }
}

/// The controller of cgroup v2 file `file` (`memory.high` → memory).
fn controller_of(file: &str) -> Option<Controller> {
    match file.split('.').next()? {
        "cpu" => Some(Controller::Cpu),
        "memory" => Some(Controller::Memory),
        "io" => Some(Controller::Io),
        "pids" => Some(Controller::Pids),
        _ => None,
    }
}

fn unlimited_or(value: i64, unlimited: &str) -> String {
    if value < 0 {
        unlimited.to_string()
    } else {
        value.to_string()
    }
}

/// The writes that bring the cgroup `dir` (named in errors) from `applied`
/// to `desired`, in order, taking back what `applied` gave and `desired`
/// no longer gives ([`plan_taking_back`]).
pub fn plan(
    version: CgroupVersion,
    dir: &Path,
    desired: &ResourceSettings,
    applied: Option<&ResourceSettings>,
    current: &mut dyn FnMut(Controller, &'static str) -> Result<String, CgroupError>,
) -> Result<Vec<SettingWrite>, CgroupError> {
    let taken_back = applied.map(|a| desired.taken_back(a)).unwrap_or_default();
    plan_taking_back(version, dir, desired, applied, &taken_back, current)
}

/// The writes that bring the cgroup `dir` (named in errors) from `applied`
/// to `desired`, in order, each setting of `taken_back` (settings that may
/// be in the files and that `desired` no longer gives) written back to a
/// fresh cgroup's value. `current` reads a file's present text (empty when
/// unknown): v2 keeps the quota in place when only the period changes, and
/// v1 orders the two memory limits by the present one (the kernel keeps
/// memory ≤ memory+swap at every step).
pub fn plan_taking_back(
    version: CgroupVersion,
    dir: &Path,
    desired: &ResourceSettings,
    applied: Option<&ResourceSettings>,
    taken_back: &ResourceSettings,
    current: &mut dyn FnMut(Controller, &'static str) -> Result<String, CgroupError>,
) -> Result<Vec<SettingWrite>, CgroupError> {
    let target = with_defaults_back(version, desired, taken_back);
    let change = changed(&target, applied);
    match version {
        CgroupVersion::V2 => plan_v2(dir, &target, &change, applied, current),
        CgroupVersion::V1 => plan_v1(dir, &change, current),
    }
}

/// The CFS period of a fresh cgroup, in microseconds.
const DEFAULT_PERIOD: u64 = 100_000;

/// The shares that give a fresh cgroup's CPU weight: `cpu.shares` 1024 on
/// v1; on v2 the smallest shares whose [`cpu_weight`] is the kernel's
/// default `cpu.weight` of 100.
fn default_shares(version: CgroupVersion) -> u64 {
    match version {
        CgroupVersion::V1 => 1024,
        CgroupVersion::V2 => 2598,
    }
}

/// `desired`, with every setting of `back` (given before, no longer given:
/// [`ResourceSettings::taken_back`], a plugin's answer dropped) set to a
/// fresh cgroup's value: no quota, the default period and weight, no memory
/// or swap limit, each `Unified` file's default. Without it the plugin's
/// old value would stay in the file.
fn with_defaults_back(
    version: CgroupVersion,
    desired: &ResourceSettings,
    back: &ResourceSettings,
) -> ResourceSettings {
    let mut target = desired.clone();
    if back.cpu_quota.is_some() {
        target.cpu_quota = Some(pinion_core::placement::UNLIMITED_QUOTA);
    }
    if back.cpu_period.is_some() {
        target.cpu_period = Some(DEFAULT_PERIOD);
    }
    if back.cpu_shares.is_some() {
        target.cpu_shares = Some(default_shares(version));
    }
    if back.memory_limit.is_some() {
        target.memory_limit = Some(-1);
    }
    if back.memory_swap_limit.is_some() {
        target.memory_swap_limit = Some(-1);
    }
    for (file, old) in &back.unified {
        if let Some(value) = unified_default(file, old) {
            target.unified.insert(file.clone(), value);
        }
    }
    target
}

fn plan_v2(
    dir: &Path,
    desired: &ResourceSettings,
    change: &ResourceSettings,
    applied: Option<&ResourceSettings>,
    current: &mut dyn FnMut(Controller, &'static str) -> Result<String, CgroupError>,
) -> Result<Vec<SettingWrite>, CgroupError> {
    let mut writes = Vec::new();
    if change.cpu_quota.is_some() || change.cpu_period.is_some() {
        let quota = match desired.cpu_quota.filter(|q| *q != 0) {
            Some(quota) => unlimited_or(quota, "max"),
            None => current(Controller::Cpu, "cpu.max")?
                .split_whitespace()
                .next()
                .unwrap_or("max")
                .to_string(),
        };
        let value = match desired.cpu_period.filter(|p| *p != 0) {
            Some(period) => format!("{quota} {period}"),
            None => quota,
        };
        writes.push(SettingWrite::new(Controller::Cpu, "cpu.max", value));
    }
    if let Some(shares) = change.cpu_shares {
        writes.push(SettingWrite::new(
            Controller::Cpu,
            "cpu.weight",
            cpu_weight(shares).to_string(),
        ));
    }
    if let Some(limit) = change.memory_limit {
        writes.push(SettingWrite::new(
            Controller::Memory,
            "memory.max",
            unlimited_or(limit, "max"),
        ));
    }
    // memory.swap.max is swap alone (runc's convention for the CRI's
    // memory+swap): it follows the memory limit too.
    let memory = desired.memory_limit.filter(|m| *m != 0);
    let memory_moved = applied.is_none_or(|a| a.memory_limit != desired.memory_limit);
    if let Some(swap) = desired.memory_swap_limit.filter(|s| *s != 0) {
        if change.memory_swap_limit.is_some() || memory_moved {
            let value = swap_v2(swap, memory).map_err(|reason| CgroupError::Setting {
                path: dir.to_path_buf(),
                file: "memory.swap.max",
                reason,
            })?;
            writes.push(SettingWrite::new(
                Controller::Memory,
                "memory.swap.max",
                value,
            ));
        }
    }
    for (file, value) in &change.unified {
        let listed = UNIFIED_FILES.iter().find(|f| **f == file.as_str());
        let Some((file, controller)) = listed.and_then(|f| Some((*f, controller_of(f)?))) else {
            return Err(CgroupError::Setting {
                path: dir.to_path_buf(),
                file: "unified",
                reason: format!("{file:?} is not a cgroup file a resource plugin may set"),
            });
        };
        writes.push(SettingWrite::new(controller, file, value.clone()));
    }
    Ok(writes)
}

/// `memory.swap.max` for a memory+swap limit `swap` beside `memory`.
fn swap_v2(swap: i64, memory: Option<i64>) -> Result<String, String> {
    if swap < 0 {
        return Ok("max".to_string());
    }
    match memory {
        Some(memory) if memory > 0 && swap >= memory => Ok((swap - memory).to_string()),
        Some(memory) if memory > 0 => Err(format!(
            "memory+swap limit {swap} is below the memory limit {memory}"
        )),
        _ => Err(format!(
            "memory+swap limit {swap} without a memory limit (cgroup v2 limits swap alone)"
        )),
    }
}

fn plan_v1(
    dir: &Path,
    change: &ResourceSettings,
    current: &mut dyn FnMut(Controller, &'static str) -> Result<String, CgroupError>,
) -> Result<Vec<SettingWrite>, CgroupError> {
    if let Some(file) = change.unified.keys().next() {
        return Err(CgroupError::Setting {
            path: dir.to_path_buf(),
            file: "unified",
            reason: format!(
                "{file} (a resource plugin's Unified setting) is a cgroup v2 file; this node runs cgroup v1"
            ),
        });
    }
    let mut writes = Vec::new();
    if let Some(period) = change.cpu_period {
        writes.push(SettingWrite::new(
            Controller::Cpu,
            "cpu.cfs_period_us",
            period.to_string(),
        ));
    }
    if let Some(quota) = change.cpu_quota {
        writes.push(SettingWrite::new(
            Controller::Cpu,
            "cpu.cfs_quota_us",
            unlimited_or(quota, "-1"),
        ));
    }
    if let Some(shares) = change.cpu_shares {
        writes.push(SettingWrite::new(
            Controller::Cpu,
            "cpu.shares",
            shares.to_string(),
        ));
    }
    let memory = change.memory_limit.map(|limit| {
        SettingWrite::new(
            Controller::Memory,
            "memory.limit_in_bytes",
            unlimited_or(limit, "-1"),
        )
    });
    let swap = change.memory_swap_limit.map(|limit| {
        SettingWrite::new(
            Controller::Memory,
            "memory.memsw.limit_in_bytes",
            unlimited_or(limit, "-1"),
        )
    });
    match (memory, swap) {
        (Some(memory), Some(swap)) => {
            // Raising: memory+swap first; lowering: memory first.
            let new_swap = change.memory_swap_limit.unwrap_or_default();
            let present = current(Controller::Memory, "memory.limit_in_bytes")?;
            let present: Option<i128> = present.trim().parse().ok();
            let swap_first = new_swap < 0 || present.is_some_and(|p| p < i128::from(new_swap));
            if swap_first {
                writes.extend([swap, memory]);
            } else {
                writes.extend([memory, swap]);
            }
        }
        (memory, swap) => writes.extend(memory.into_iter().chain(swap)),
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(writes: &[SettingWrite]) -> Vec<(&'static str, &str)> {
        writes.iter().map(|w| (w.file, w.value.as_str())).collect()
    }

    fn no_files(_: Controller, _: &'static str) -> Result<String, CgroupError> {
        Ok(String::new())
    }

    #[test]
    fn cpu_weight_follows_kubelets_conversion() {
        let cases = [
            (0, 1),
            (2, 1),
            (1024, 39),
            (512, 20),
            (102, 4),
            (262_144, 10_000),
            (1_000_000, 10_000),
        ];
        for (shares, weight) in cases {
            assert_eq!(cpu_weight(shares), weight, "shares {shares}");
        }
    }

    #[test]
    fn v2_writes_every_setting_given_and_nothing_else() {
        let desired = ResourceSettings {
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            cpu_shares: Some(1024),
            memory_limit: Some(1 << 30),
            memory_swap_limit: Some(3 << 29),
            oom_score_adj: Some(500),
            ..ResourceSettings::default()
        };
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &desired,
            None,
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(
            files(&writes),
            vec![
                ("cpu.max", "50000 100000"),
                ("cpu.weight", "39"),
                ("memory.max", "1073741824"),
                ("memory.swap.max", "536870912"),
            ]
        );
        let only_quota = ResourceSettings {
            cpu_quota: Some(-1),
            ..ResourceSettings::default()
        };
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &only_quota,
            None,
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(files(&writes), vec![("cpu.max", "max")]);
    }

    #[test]
    fn only_changed_settings_are_written() {
        let applied = ResourceSettings {
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            cpu_shares: Some(1024),
            memory_limit: Some(1 << 30),
            ..ResourceSettings::default()
        };
        let same = plan(
            CgroupVersion::V1,
            Path::new("/cg"),
            &applied,
            Some(&applied),
            &mut no_files,
        )
        .expect("plan");
        assert!(same.is_empty(), "{same:?}");
        let desired = ResourceSettings {
            cpu_shares: Some(2048),
            ..applied.clone()
        };
        let writes = plan(
            CgroupVersion::V1,
            Path::new("/cg"),
            &desired,
            Some(&applied),
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(files(&writes), vec![("cpu.shares", "2048")]);
        // Zero is CRI's "not set".
        let zero = ResourceSettings {
            cpu_shares: Some(0),
            memory_limit: Some(0),
            ..ResourceSettings::default()
        };
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &zero,
            None,
            &mut no_files,
        )
        .expect("plan");
        assert!(writes.is_empty(), "{writes:?}");
    }

    fn plugin_settings() -> ResourceSettings {
        ResourceSettings {
            cpu_quota: Some(50_000),
            cpu_period: Some(200_000),
            cpu_shares: Some(512),
            memory_limit: Some(1 << 30),
            memory_swap_limit: Some(2 << 30),
            unified: [
                ("memory.high".to_string(), "900M".to_string()),
                ("io.max".to_string(), "8:0 wbps=1048576".to_string()),
            ]
            .into(),
            ..ResourceSettings::default()
        }
    }

    #[test]
    fn regression_dropped_plugin_settings_go_back_to_a_fresh_cgroups_values_v2() {
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &ResourceSettings::default(),
            Some(&plugin_settings()),
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(
            files(&writes),
            vec![
                ("cpu.max", "max 100000"),
                ("cpu.weight", "100"),
                ("memory.max", "max"),
                ("memory.swap.max", "max"),
                ("io.max", "8:0 rbps=max wbps=max riops=max wiops=max"),
                ("memory.high", "max"),
            ]
        );
        // Once applied, nothing is written again.
        let again = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &ResourceSettings::default(),
            Some(&ResourceSettings::default()),
            &mut no_files,
        )
        .expect("plan");
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(cpu_weight(default_shares(CgroupVersion::V2)), 100);
        assert!(cpu_weight(default_shares(CgroupVersion::V2) - 1) < 100);
    }

    #[test]
    fn regression_dropped_plugin_settings_go_back_to_a_fresh_cgroups_values_v1() {
        let applied = ResourceSettings {
            unified: Default::default(),
            ..plugin_settings()
        };
        let writes = plan(
            CgroupVersion::V1,
            Path::new("/cg"),
            &ResourceSettings::default(),
            Some(&applied),
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(
            files(&writes),
            vec![
                ("cpu.cfs_period_us", "100000"),
                ("cpu.cfs_quota_us", "-1"),
                ("cpu.shares", "1024"),
                // Raising: memory+swap first, so memory ≤ memory+swap holds.
                ("memory.memsw.limit_in_bytes", "-1"),
                ("memory.limit_in_bytes", "-1"),
            ]
        );
    }

    #[test]
    fn a_quota_kept_while_the_period_is_dropped_keeps_the_quota_v2() {
        let desired = ResourceSettings {
            cpu_quota: Some(50_000),
            ..ResourceSettings::default()
        };
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &desired,
            Some(&plugin_settings()),
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(writes[0].file, "cpu.max");
        assert_eq!(writes[0].value, "50000 100000");
        // Unknown applied settings (None) take nothing back.
        let unknown = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &ResourceSettings::default(),
            None,
            &mut no_files,
        )
        .expect("plan");
        assert!(unknown.is_empty(), "{unknown:?}");
    }

    #[test]
    fn v2_period_alone_keeps_the_present_quota() {
        let desired = ResourceSettings {
            cpu_period: Some(50_000),
            ..ResourceSettings::default()
        };
        let mut present = |_: Controller, file: &'static str| {
            assert_eq!(file, "cpu.max");
            Ok("20000 100000\n".to_string())
        };
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &desired,
            None,
            &mut present,
        )
        .expect("plan");
        assert_eq!(files(&writes), vec![("cpu.max", "20000 50000")]);
    }

    #[test]
    fn v2_swap_is_rewritten_when_the_memory_limit_moves() {
        let applied = ResourceSettings {
            memory_limit: Some(100),
            memory_swap_limit: Some(300),
            ..ResourceSettings::default()
        };
        let desired = ResourceSettings {
            memory_limit: Some(200),
            ..applied.clone()
        };
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &desired,
            Some(&applied),
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(
            files(&writes),
            vec![("memory.max", "200"), ("memory.swap.max", "100")]
        );
    }

    #[test]
    fn v2_swap_without_a_usable_memory_limit_is_refused_naming_both() {
        let cases = [
            (None, 300, "without a memory limit"),
            (Some(-1), 300, "without a memory limit"),
            (Some(400), 300, "below the memory limit 400"),
        ];
        for (memory, swap, reason) in cases {
            let desired = ResourceSettings {
                memory_limit: memory,
                memory_swap_limit: Some(swap),
                ..ResourceSettings::default()
            };
            let err = plan(
                CgroupVersion::V2,
                Path::new("/cg/run"),
                &desired,
                None,
                &mut no_files,
            )
            .expect_err("refused");
            let text = err.to_string();
            assert!(
                matches!(
                    err,
                    CgroupError::Setting {
                        file: "memory.swap.max",
                        ..
                    }
                ),
                "{text}"
            );
            assert!(
                text.contains(reason) && text.contains("/cg/run") && text.contains("300"),
                "{text}"
            );
        }
        let unlimited = ResourceSettings {
            memory_swap_limit: Some(-1),
            ..ResourceSettings::default()
        };
        let writes = plan(
            CgroupVersion::V2,
            Path::new("/cg"),
            &unlimited,
            None,
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(files(&writes), vec![("memory.swap.max", "max")]);
    }

    #[test]
    fn v1_orders_period_before_quota_and_the_memory_limits_by_direction() {
        let desired = ResourceSettings {
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            memory_limit: Some(300),
            memory_swap_limit: Some(400),
            ..ResourceSettings::default()
        };
        // Raising (present limit 100 < new memory+swap 400): swap first.
        let mut low = |_: Controller, _: &'static str| Ok("100\n".to_string());
        let writes = plan(
            CgroupVersion::V1,
            Path::new("/cg"),
            &desired,
            None,
            &mut low,
        )
        .expect("plan");
        assert_eq!(
            files(&writes),
            vec![
                ("cpu.cfs_period_us", "100000"),
                ("cpu.cfs_quota_us", "-1"),
                ("memory.memsw.limit_in_bytes", "400"),
                ("memory.limit_in_bytes", "300"),
            ]
        );
        // Lowering (present limit 1000): memory first.
        let mut high = |_: Controller, _: &'static str| Ok("1000\n".to_string());
        let writes = plan(
            CgroupVersion::V1,
            Path::new("/cg"),
            &desired,
            None,
            &mut high,
        )
        .expect("plan");
        assert_eq!(
            files(&writes)[2..],
            [
                ("memory.limit_in_bytes", "300"),
                ("memory.memsw.limit_in_bytes", "400"),
            ]
        );
        assert!(writes[..2].iter().all(|w| w.controller == Controller::Cpu));
        assert!(writes[2..]
            .iter()
            .all(|w| w.controller == Controller::Memory));
    }

    /// Issue 28 item 4: a plugin's `Unified` files are written on v2 under
    /// their controllers, only when changed, and refused on v1.
    #[test]
    fn unified_files_are_written_on_v2_when_changed_and_refused_on_v1() {
        let dir = Path::new("/sys/fs/cgroup/pinion/run");
        let desired = ResourceSettings {
            unified: [
                ("io.weight".to_string(), "default 200".to_string()),
                ("memory.high".to_string(), "1073741824".to_string()),
                ("pids.max".to_string(), "64".to_string()),
            ]
            .into(),
            ..ResourceSettings::default()
        };
        let writes = plan(CgroupVersion::V2, dir, &desired, None, &mut no_files).expect("plan");
        assert_eq!(
            files(&writes),
            [
                ("io.weight", "default 200"),
                ("memory.high", "1073741824"),
                ("pids.max", "64")
            ]
        );
        let controllers: Vec<Controller> = writes.iter().map(|w| w.controller).collect();
        assert_eq!(
            controllers,
            [Controller::Io, Controller::Memory, Controller::Pids]
        );
        let mut applied = desired.clone();
        applied.unified.insert("memory.high".into(), "max".into());
        let again = plan(
            CgroupVersion::V2,
            dir,
            &desired,
            Some(&applied),
            &mut no_files,
        )
        .expect("plan");
        assert_eq!(files(&again), [("memory.high", "1073741824")]);
        let v1 = plan(CgroupVersion::V1, dir, &desired, None, &mut no_files)
            .expect_err("v1 has no unified files")
            .to_string();
        assert!(
            v1.contains("is a cgroup v2 file; this node runs cgroup v1"),
            "{v1}"
        );
        let mut unlisted = ResourceSettings::default();
        unlisted.unified.insert("cpuset.cpus".into(), "0".into());
        let refused = plan(CgroupVersion::V2, dir, &unlisted, None, &mut no_files)
            .expect_err("not a plugin's file")
            .to_string();
        assert!(
            refused.contains("\"cpuset.cpus\" is not a cgroup file"),
            "{refused}"
        );
    }
}
