//! `pinion simulate` for QoS Resource Manager scenarios (a scenario with a
//! `plugins` key, `pinion_plugins::scenario`): Pinion's plugins driven as the
//! agent's manager drives them; after each step every container's placement
//! and a per-CPU map of the pools, as text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use pinion_core::qos::QosLevel;
use pinion_core::{CpuSet, Topology};
use pinion_plugins::scenario::{self, Outcome, PoolMap, QrmScenario, Snapshot, StepOutcome};

use crate::output::{self, Output};
use crate::render;

/// True when a scenario document is a QRM scenario.
#[must_use]
pub fn is_qrm(value: &serde_json::Value) -> bool {
    value.get("plugins").is_some()
}

/// Runs one QRM scenario and prints its outcome.
pub fn run(
    value: serde_json::Value,
    source: &Path,
    index: usize,
    base: &Path,
    output: Output,
) -> anyhow::Result<()> {
    let scenario: QrmScenario = serde_json::from_value(value)
        .with_context(|| format!("scenario {index} of {} is malformed", source.display()))?;
    let topology = match scenario::inline_topology(&scenario)? {
        Some(topology) => topology,
        None => {
            let root = base.join(scenario.sysroot.as_deref().unwrap_or_default());
            pinion_host::discover(&root).with_context(|| {
                format!("cannot discover the cpu topology under {}", root.display())
            })?
        }
    };
    let outcome = scenario::run(&scenario, &topology)?;
    match output::object_line(output, &serde_json::to_string(&outcome)?)? {
        Some(text) => print!("{text}"),
        None => print!("{}", to_text(&topology, &outcome)),
    }
    Ok(())
}

/// The text report: a header, the initial pools, then every step.
#[must_use]
pub fn to_text(topology: &Topology, outcome: &Outcome) -> String {
    let mut out = String::new();
    if let Some(name) = &outcome.name {
        let _ = writeln!(out, "scenario: {name}");
    }
    let _ = writeln!(
        out,
        "plugins: {}; topology manager: {}; {} cpus, {} numa nodes",
        outcome.plugins.join(", "),
        outcome.topology_manager_policy,
        topology.all_cpus().len(),
        topology.numa_cpus().len()
    );
    let labels = Labels::of(outcome);
    out.push_str("\nbefore the first step\n");
    snapshot_text(&mut out, topology, &labels, &outcome.initial);
    for step in &outcome.steps {
        step_text(&mut out, topology, &labels, step);
    }
    out
}

/// Map symbols, fixed for the whole scenario so that a pool or container
/// keeps its letter from step to step: `A`… shared pools, `a`… dedicated
/// containers, in order of first appearance.
struct Labels {
    shared: BTreeMap<String, char>,
    dedicated: BTreeMap<String, char>,
}

impl Labels {
    fn of(outcome: &Outcome) -> Self {
        const SHARED: &str = "ABCDEFGHIJKLMNOPQSTUVWXYZ";
        const DEDICATED: &str = "abcdefghijklmnopqrstuvwyz0123456789";
        let mut labels = Self {
            shared: BTreeMap::new(),
            dedicated: BTreeMap::new(),
        };
        let snapshots =
            std::iter::once(&outcome.initial).chain(outcome.steps.iter().map(|s| &s.snapshot));
        let (mut shared, mut dedicated) = (SHARED.chars(), DEDICATED.chars());
        for pools in snapshots.filter_map(|s| s.pools.as_ref()) {
            for name in pools.shared.keys() {
                if !labels.shared.contains_key(name) {
                    labels
                        .shared
                        .insert(name.clone(), shared.next().unwrap_or('#'));
                }
            }
            for key in pools.dedicated.keys() {
                if !labels.dedicated.contains_key(key) {
                    labels
                        .dedicated
                        .insert(key.clone(), dedicated.next().unwrap_or('#'));
                }
            }
        }
        labels
    }
}

fn step_text(out: &mut String, topology: &Topology, labels: &Labels, step: &StepOutcome) {
    let _ = writeln!(out, "\nstep {}: {}", step.index, step.step);
    if let Some(admission) = &step.admission {
        match &admission.reason {
            None => {
                let _ = writeln!(out, "  admitted");
            }
            Some(reason) => {
                let _ = writeln!(out, "  REJECTED: {reason}");
            }
        }
        for container in &admission.containers {
            let hint = match &container.hint {
                None => "none asked (topology manager none)".to_string(),
                Some(hint) if hint.nodes.is_empty() => "any numa node".to_string(),
                Some(hint) => {
                    let nodes: Vec<String> = hint.nodes.iter().map(u64::to_string).collect();
                    let preferred = if hint.preferred {
                        ""
                    } else {
                        ", not preferred"
                    };
                    format!("numa {{{}}}{preferred}", nodes.join(","))
                }
            };
            let _ = writeln!(out, "  {}: hint {hint}", container.container);
            for skipped in &container.skipped {
                let _ = writeln!(out, "    skipped ({}): {skipped}", QosLevel::SharedCores);
            }
        }
    }
    for change in &step.pool_changes {
        let _ = writeln!(
            out,
            "  pool {}: {} -> {} cpus ({})",
            change.pool, change.from, change.to, change.reason
        );
    }
    for change in &step.cpu_changes {
        let _ = writeln!(
            out,
            "  {}/{}: cpus {} -> {}",
            change.pod,
            change.container,
            show(&change.from),
            show(&change.to)
        );
    }
    snapshot_text(out, topology, labels, &step.snapshot);
}

fn snapshot_text(out: &mut String, topology: &Topology, labels: &Labels, snapshot: &Snapshot) {
    if snapshot.placements.is_empty() {
        let _ = writeln!(out, "  placements: none");
    } else {
        let _ = writeln!(out, "  placements:");
        let width = snapshot
            .placements
            .iter()
            .map(|p| p.pod.len() + p.container.len() + 1)
            .max()
            .unwrap_or(0);
        for p in &snapshot.placements {
            let who = format!("{}/{}", p.pod, p.container);
            let cpus = p
                .cpus
                .as_ref()
                .map_or("-".to_string(), |c| format!("{} ({})", show(c), c.len()));
            let mems = p.mems.as_ref().map_or("-".to_string(), show);
            let _ = writeln!(
                out,
                "    {who:<width$}  {:<10} cpus {cpus}  mems {mems}",
                p.pool.as_deref().unwrap_or("-"),
            );
            for (key, value) in &p.envs {
                let _ = writeln!(out, "    {:<width$}  env {key}={value}", "");
            }
            for (key, value) in &p.annotations {
                let _ = writeln!(out, "    {:<width$}  annotation {key}={value}", "");
            }
        }
    }
    if !snapshot.memory.is_empty() {
        let nodes: Vec<String> = snapshot
            .memory
            .iter()
            .map(|n| {
                format!(
                    "node {} {} of {} bytes bound",
                    n.numa, n.bound, n.allocatable
                )
            })
            .collect();
        let _ = writeln!(out, "  memory: {}", nodes.join("; "));
    }
    if let Some(pools) = &snapshot.pools {
        pool_map_text(out, topology, labels, pools);
    }
}

/// One symbol per holder: `R` system, `.` reclaim, `A`… shared pools,
/// `a`… dedicated containers, `x` held for a `numa_exclusive` pod, `-` none.
fn pool_map_text(out: &mut String, topology: &Topology, labels: &Labels, pools: &PoolMap) {
    let mut holders: Vec<(char, String, &CpuSet)> = Vec::new();
    for (name, cpus) in &pools.shared {
        let label = labels.shared.get(name).copied().unwrap_or('#');
        holders.push((label, format!("pool {name}"), cpus));
    }
    for (key, cpus) in &pools.dedicated {
        let label = labels.dedicated.get(key).copied().unwrap_or('#');
        holders.push((label, key.clone(), cpus));
    }
    let mark = |id: u32| -> String {
        let held: String = holders
            .iter()
            .filter(|(_, _, cpus)| cpus.contains(id))
            .map(|(label, _, _)| *label)
            .collect();
        if !held.is_empty() {
            held
        } else if pools.reserved.contains(id) {
            "R".into()
        } else if pools.reclaim.contains(id) {
            ".".into()
        } else if pools.held.contains(id) {
            "x".into()
        } else {
            "-".into()
        }
    };
    let mut lines: Vec<(char, String, &CpuSet)> = vec![
        ('R', "system (reserved)".to_string(), &pools.reserved),
        ('.', "reclaim".to_string(), &pools.reclaim),
    ];
    lines.extend(holders.iter().map(|(l, n, c)| (*l, n.clone(), *c)));
    if !pools.held.is_empty() {
        lines.push(('x', "held (numa_exclusive)".to_string(), &pools.held));
    }
    let width = lines.iter().map(|(_, n, _)| n.len()).max().unwrap_or(0);
    let _ = writeln!(out, "  pools:");
    for (label, name, cpus) in &lines {
        let _ = writeln!(out, "    {label}  {name:<width$}  {}", count(cpus));
    }
    for line in render::cpumap::grid(topology, &mark).lines() {
        let _ = writeln!(out, "  {line}");
    }
}

fn count(cpus: &CpuSet) -> String {
    format!("{} ({} cpus)", show(cpus), cpus.len())
}

fn show(cpus: &CpuSet) -> String {
    if cpus.is_empty() {
        "(none)".to_string()
    } else {
        cpus.to_string()
    }
}
