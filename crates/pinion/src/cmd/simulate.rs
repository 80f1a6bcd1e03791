//! `pinion simulate SCENARIO`: run a policy scenario (the conformance corpus
//! `kind: policy` format, JSON or YAML; one scenario or an array) through the
//! same engine the agent uses, and print each step's outcome and the final
//! state — as JSON, or as text with a per-CPU map.
//!
//! A scenario with a `plugins` key is a QoS Resource Manager scenario,
//! run by [`simulate_qrm`] (`docs/simulate.md`).
//!
//! Exit status: 0 when every scenario could be read and run (a policy that
//! cannot be constructed is an outcome, printed as `{"error": …}`, as is a
//! step that fails with kubelet's error); non-zero when the file cannot be
//! read or parsed, a topology cannot be found, or a step itself is wrong
//! (names a container its pod lacks, lacks a field it needs). A wrong step
//! stops the run: the steps before it are printed, then the error naming
//! the scenario and the step (numbered from 1, as the output numbers them).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pinion_core::scenario::{self, Outcome, Scenario, ScenarioError, StepOutcome, TopologyOutcome};
use pinion_core::state::State;
use pinion_core::Topology;

use super::simulate_qrm;
use crate::input;
use crate::output::{self, OutputArgs};
use crate::render;

/// Arguments of `pinion simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (JSON or YAML), or `-` for standard input.
    pub scenario: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `pinion simulate`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let value = input::read_json_or_yaml(&args.scenario)?;
    let batch = value.is_array();
    let items = match value {
        serde_json::Value::Array(items) => items,
        single => vec![single],
    };
    let base = args
        .scenario
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let output = args.output.output();
    let source = if args.scenario.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        args.scenario.display().to_string()
    };
    for (index, item) in items.into_iter().enumerate() {
        if simulate_qrm::is_qrm(&item) {
            simulate_qrm::run(item, &args.scenario, index, &base, output)?;
            continue;
        }
        let scenario: Scenario = serde_json::from_value(item).with_context(|| {
            format!(
                "scenario {index} of {} is malformed",
                args.scenario.display()
            )
        })?;
        let topology = scenario::with_isolated(&scenario, &resolve_topology(&scenario, &base)?)?;
        let (result, wrong_step) = match scenario::run(&scenario, &topology) {
            // The outcome of the steps before the wrong one, then the error.
            Err(ScenarioError::BadStep { index: step, what }) => (
                scenario::run(&steps_before(&scenario, step), &topology),
                Some((step, what)),
            ),
            result => (result, None),
        };
        match output::object_line(output, &to_json(&scenario, &result, batch)?)? {
            Some(text) => print!("{text}"),
            None => print!("{}", to_text(&scenario, &topology, &result)),
        }
        if let Some((step, what)) = wrong_step {
            let which = match (batch, &scenario.name) {
                (false, _) => String::new(),
                (true, Some(name)) => format!("scenario {index} ({name}), "),
                (true, None) => format!("scenario {index}, "),
            };
            anyhow::bail!(
                "{source}: {which}step {} ({}): {what}",
                step + 1,
                describe_step(&scenario, step)
            );
        }
    }
    Ok(())
}

/// `scenario` cut before its step `step` (0-based).
fn steps_before(scenario: &Scenario, step: usize) -> Scenario {
    let mut before = scenario.clone();
    before.steps.truncate(step);
    before
}

/// `add a/c`: the step's operation and whom it names.
fn describe_step(scenario: &Scenario, step: usize) -> String {
    let Some(step) = scenario.steps.get(step) else {
        return "past the last step".to_string();
    };
    let op = format!("{:?}", step.op).to_lowercase();
    match (&step.pod, &step.container) {
        (Some(pod), Some(container)) => format!("{op} {pod}/{container}"),
        (Some(pod), None) => format!("{op} {pod}"),
        (None, _) => op,
    }
}

/// The scenario's topology: inline, a regular `machine`, or discovered from
/// `sysroot` (relative paths are relative to the scenario file).
fn resolve_topology(scenario: &Scenario, base: &Path) -> anyhow::Result<Topology> {
    if let Some(topology) = scenario::inline_topology(scenario)? {
        return Ok(topology);
    }
    let sysroot = scenario
        .sysroot
        .as_deref()
        .ok_or(ScenarioError::NoTopology)?;
    let root = base.join(sysroot);
    pinion_host::discover(&root)
        .with_context(|| format!("cannot discover the cpu topology under {}", root.display()))
}

/// One line of JSON output: the outcome (or `{"error"}`), with the
/// scenario's `name` first in batch mode.
#[derive(serde::Serialize)]
struct Line<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a Option<String>>,
    #[serde(flatten)]
    body: Body<'a>,
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Body<'a> {
    Outcome(&'a Outcome),
    Error { error: String },
}

fn to_json(
    scenario: &Scenario,
    result: &Result<Outcome, ScenarioError>,
    batch: bool,
) -> anyhow::Result<String> {
    let body = match result {
        Ok(outcome) => Body::Outcome(outcome),
        Err(err) => Body::Error {
            error: err.to_string(),
        },
    };
    let name = batch.then_some(&scenario.name);
    Ok(serde_json::to_string(&Line { name, body })?)
}

fn to_text(
    scenario: &Scenario,
    topology: &Topology,
    result: &Result<Outcome, ScenarioError>,
) -> String {
    let mut out = String::new();
    if let Some(name) = &scenario.name {
        let _ = writeln!(out, "scenario: {name}");
    }
    let options: Vec<String> = scenario
        .config
        .options
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(
        out,
        "policy {}, options: {}",
        scenario.config.policy.as_deref().unwrap_or("static"),
        if options.is_empty() {
            "none".to_string()
        } else {
            options.join(", ")
        }
    );
    if let Some(line) = topology_manager_line(scenario) {
        let _ = writeln!(out, "{line}");
    }
    if let Some(line) = features_line(scenario) {
        let _ = writeln!(out, "{line}");
    }
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(err @ (ScenarioError::Policy(_) | ScenarioError::TopologyManager(_))) => {
            let _ = writeln!(out, "the policy cannot be constructed: {err}\n");
            return out;
        }
        Err(err) => {
            let _ = writeln!(out, "the scenario cannot run: {err}\n");
            return out;
        }
    };
    let _ = writeln!(
        out,
        "reserved: {} ({} cpus)",
        show(&outcome.reserved.to_string()),
        outcome.reserved.len()
    );
    for (index, step) in outcome.steps.iter().enumerate() {
        let _ = writeln!(out, "step {:>2}  {}", index + 1, step_line(step));
        if let Some(topology) = &step.topology {
            let _ = writeln!(out, "          {}", topology_line(topology));
        }
        if let Some(explain) = &step.explain {
            let _ = writeln!(out, "          {explain}");
        }
    }
    match &outcome.shared_pool {
        None => {
            let _ = writeln!(
                out,
                "shared pool: {} ({} cpus)",
                show(&outcome.default.to_string()),
                outcome.default.len()
            );
        }
        Some(pool) => {
            let _ = writeln!(
                out,
                "shared pool: {} ({} cpus; the checkpoint's default set {} keeps the free boot-isolated cpus, which the shared pool never uses)",
                show(&pool.to_string()),
                pool.len(),
                show(&outcome.default.to_string()),
            );
        }
    }
    let mut state = State {
        default: outcome.default.clone(),
        ..State::default()
    };
    for (key, cpus) in &outcome.assignments {
        if let Some((pod, container)) = key.split_once('/') {
            state.assign(pod, container, cpus.clone());
        }
    }
    out.push_str(&render::cpumap::render(topology, &state, &outcome.reserved));
    out.push_str(&placements_table(outcome));
    out.push('\n');
    out
}

/// Where every admitted container runs: pool, CPUs and memory nodes.
fn placements_table(outcome: &Outcome) -> String {
    let mut out = String::new();
    if outcome.placements.is_empty() {
        return out;
    }
    let width = outcome
        .placements
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(0);
    let _ = writeln!(out, "placements:");
    for (key, placement) in &outcome.placements {
        let _ = writeln!(
            out,
            "  {key:<width$}  {:<9}  cpus {}",
            placement.pool,
            show(&placement.cpus.to_string()),
        );
    }
    out
}

fn step_line(step: &StepOutcome) -> String {
    let op = format!("{:?}", step.op).to_lowercase();
    let who = match (&step.pod, &step.container) {
        (Some(pod), Some(container)) => format!("{pod}/{container}"),
        _ => String::new(),
    };
    let result = match (&step.error, &step.cpus) {
        (Some(err), _) => format!("FAILED: {err}"),
        (None, Some(cpus)) => format!("-> exclusive cpus {cpus} ({})", cpus.len()),
        (None, None) if matches!(step.op, scenario::Op::Add | scenario::Op::Resize) => {
            "-> shared pool".to_string()
        }
        (None, None) => "ok".to_string(),
    };
    format!("{op:<6} {who:<30} {result}")
}

/// `topology manager: <policy>, scope <scope>[, options …]` when the
/// scenario sets a Topology Manager policy other than `none`.
fn topology_manager_line(scenario: &Scenario) -> Option<String> {
    let config = &scenario.config;
    let policy = config.topology_manager_policy.as_deref().unwrap_or("none");
    if policy == "none" {
        return None;
    }
    let scope = config
        .topology_manager_scope
        .as_deref()
        .unwrap_or("container");
    let mut line = format!("topology manager: {policy}, scope {scope}");
    for (name, value) in &config.topology_manager_policy_options {
        let _ = write!(line, ", {name}={value}");
    }
    Some(line)
}

/// `features: …` (kubelet gate names, Pinion options) when the scenario
/// switches any on.
fn features_line(scenario: &Scenario) -> Option<String> {
    let f = scenario.features;
    let mut on = Vec::new();
    if f.in_place_resize_exclusive_cpus {
        on.push("InPlacePodVerticalScalingExclusiveCPUs");
    }
    if f.pod_level_resource_managers {
        on.push("PodLevelResourceManagers");
    }
    if f.uncore_cache_source == pinion_core::policy::UncoreCacheSource::LastLevelCache {
        on.push("uncoreCacheSource=last-level-cache");
    }
    (!on.is_empty()).then(|| format!("features: {}", on.join(", ")))
}

/// One line per Topology Manager decision: the merged hint and the verdict.
fn topology_line(topology: &TopologyOutcome) -> String {
    let merged = match topology.merged.affinity {
        Some(mask) => format!("numa {{{mask}}}"),
        None => "any numa node".to_string(),
    };
    let preferred = if topology.merged.preferred {
        "preferred"
    } else {
        "not preferred"
    };
    let source = if topology.reused {
        "pod affinity"
    } else {
        "merged hint"
    };
    match &topology.why {
        None => format!("topology: {source} {merged} ({preferred}) -> admitted"),
        Some(why) => format!("topology: {source} {merged} ({preferred}) -> rejected: {why}"),
    }
}

fn show(cpus: &str) -> &str {
    if cpus.is_empty() {
        "(none)"
    } else {
        cpus
    }
}
