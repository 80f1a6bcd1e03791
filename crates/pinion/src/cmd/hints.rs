//! `pinion hints FILE|-`: what the Topology Manager would decide.
//!
//! Reads one case or an array of cases (JSON or YAML) in the formats of the
//! conformance corpus `topomgr/`: kind `merge` (NUMA nodes, distances,
//! policy, options, providers' hints) and kind `cpu_hints` (topology, static
//! policy options, available / reusable CPUs, request, scope). JSON output is
//! one line per case: `{"name", "mask", "preferred", "admit"}` for `merge`,
//! `{"name", "hints": [{"mask", "preferred"}…]}` for `cpu_hints`, and
//! `{"name", "error"}` for a case that cannot be run.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use pinion_core::topomgr::case::{CpuHintsCase, MergeCase};
use pinion_core::topomgr::{Admission, ProviderHints, TopologyAffinityError, TopologyHint};
use serde::Serialize;
use serde_json::Value;

use crate::output::{self, OutputArgs};

/// Arguments of `pinion hints`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Case file (JSON or YAML: one case or an array), or `-` for stdin;
    /// `pinion hints --example` prints one (format: docs/alloc-and-hints.md).
    #[arg(required_unless_present = "example")]
    pub file: Option<PathBuf>,
    /// Print an example case file (`examples/hints/merge-and-cpu-hints.yaml`)
    /// and exit.
    #[arg(long, conflicts_with = "file")]
    pub example: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The example `--example` prints; the same file runs in the tests.
pub const EXAMPLE: &str = include_str!("../../../../examples/hints/merge-and-cpu-hints.yaml");

/// What one case produced.
enum Outcome {
    Merge(Box<MergeCase>, Admission),
    CpuHints(Option<Vec<TopologyHint>>),
    Error(String),
}

/// Runs `pinion hints`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let Some(file) = args.file.as_ref().filter(|_| !args.example) else {
        print!("{EXAMPLE}");
        return Ok(());
    };
    let text = crate::input::read_text(file)?;
    let cases =
        parse_cases(&text).with_context(|| format!("reading cases from {}", file.display()))?;
    let mut failed = 0usize;
    let output = args.output.output();
    let mut stdout = std::io::stdout().lock();
    for case in &cases {
        let name = case.get("name").and_then(Value::as_str).unwrap_or("");
        let outcome = run_case(case);
        if matches!(outcome, Outcome::Error(_)) {
            failed += 1;
        }
        let text = match output::object_line(output, &json_line(name, &outcome)?)? {
            Some(text) => text,
            None => text_block(name, &outcome),
        };
        let written = write!(stdout, "{text}");
        match written {
            // A closed pipe (`pinion hints … | head`) ends the output quietly.
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other.context("writing to stdout")?,
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} cases could not be run", cases.len());
    }
    Ok(())
}

/// One case (an object) or several (an array), JSON first, then YAML.
fn parse_cases(text: &str) -> anyhow::Result<Vec<Value>> {
    let value = crate::input::parse_json_or_yaml(text)?;
    match value {
        Value::Array(cases) => Ok(cases),
        Value::Object(_) => Ok(vec![value]),
        other => anyhow::bail!("expected a case object or an array of cases, found {other}"),
    }
}

/// The case's kind: `kind` when present, else guessed from its keys.
fn kind_of(case: &Value) -> &str {
    match case.get("kind").and_then(Value::as_str) {
        Some(kind) => kind,
        None if case.get("providers").is_some() => "merge",
        None if case.get("request").is_some() => "cpu_hints",
        None => "",
    }
}

fn run_case(case: &Value) -> Outcome {
    match kind_of(case) {
        "merge" => match serde_json::from_value::<MergeCase>(case.clone()) {
            Ok(merge) => match merge.run() {
                Ok(admission) => Outcome::Merge(Box::new(merge), admission),
                Err(err) => Outcome::Error(err.to_string()),
            },
            Err(err) => Outcome::Error(format!("invalid merge case: {err}")),
        },
        "cpu_hints" => match serde_json::from_value::<CpuHintsCase>(case.clone()) {
            Ok(hints) => hints
                .run()
                .map_or_else(|e| Outcome::Error(e.to_string()), Outcome::CpuHints),
            Err(err) => Outcome::Error(format!("invalid cpu_hints case: {err}")),
        },
        "" => Outcome::Error("case has no kind (expected \"merge\" or \"cpu_hints\")".to_owned()),
        other => Outcome::Error(format!(
            "unsupported case kind {other:?} (expected \"merge\" or \"cpu_hints\")"
        )),
    }
}

/// A `merge` result line, fields in the documented order.
#[derive(Serialize)]
struct MergeLine<'a> {
    name: &'a str,
    mask: Option<Vec<u32>>,
    preferred: bool,
    admit: bool,
}

#[derive(Serialize)]
struct HintsLine<'a> {
    name: &'a str,
    hints: Option<&'a [TopologyHint]>,
}

#[derive(Serialize)]
struct ErrorLine<'a> {
    name: &'a str,
    error: &'a str,
}

fn json_line(name: &str, outcome: &Outcome) -> anyhow::Result<String> {
    let line = match outcome {
        Outcome::Merge(_, admission) => serde_json::to_string(&MergeLine {
            name,
            mask: admission.hint.affinity.map(|m| m.ids()),
            preferred: admission.hint.preferred,
            admit: admission.admit,
        }),
        Outcome::CpuHints(hints) => serde_json::to_string(&HintsLine {
            name,
            hints: hints.as_deref(),
        }),
        Outcome::Error(error) => serde_json::to_string(&ErrorLine { name, error }),
    };
    line.context("formatting a result line")
}

fn text_block(name: &str, outcome: &Outcome) -> String {
    let mut out = format!("case {name:?}\n");
    match outcome {
        Outcome::Merge(case, admission) => {
            out.push_str(&format!(
                "  policy {}, NUMA nodes {:?}\n",
                case.policy, case.numa_nodes
            ));
            for (index, provider) in case.providers.iter().enumerate() {
                out.push_str(&format!(
                    "  provider {}: {}\n",
                    index + 1,
                    describe_provider(provider)
                ));
            }
            out.push_str(&format!("  merged hint: {}\n", describe(&admission.hint)));
            match admission.result() {
                Ok(_) => out.push_str("  admitted\n"),
                Err(err) => out.push_str(&format!(
                    "  rejected: {}: {err}\n",
                    TopologyAffinityError::REASON
                )),
            }
        }
        Outcome::CpuHints(None) => out.push_str("  no exclusive CPUs requested: no preference\n"),
        Outcome::CpuHints(Some(hints)) if hints.is_empty() => {
            out.push_str("  no NUMA placement can satisfy the request\n");
        }
        Outcome::CpuHints(Some(hints)) => {
            for hint in hints {
                out.push_str(&format!("  {}\n", describe(hint)));
            }
        }
        Outcome::Error(error) => out.push_str(&format!("  error: {error}\n")),
    }
    out
}

/// `NUMA 0-1, preferred` / `any NUMA node, not preferred`.
fn describe(hint: &TopologyHint) -> String {
    let place = hint
        .affinity
        .map_or_else(|| "any NUMA node".to_owned(), |mask| format!("NUMA {mask}"));
    let preferred = if hint.preferred {
        "preferred"
    } else {
        "not preferred"
    };
    format!("{place}, {preferred}")
}

/// `cpu: NUMA 0, preferred | NUMA 0-1, not preferred; gpu: no preference`.
fn describe_provider(provider: &ProviderHints) -> String {
    let Some(resources) = provider.as_ref().filter(|r| !r.is_empty()) else {
        return "no preference".to_owned();
    };
    let parts: Vec<String> = resources
        .iter()
        .map(|(resource, hints)| match hints {
            None => format!("{resource}: no preference"),
            Some(list) if list.is_empty() => format!("{resource}: cannot be satisfied"),
            Some(list) => {
                let hints: Vec<String> = list.iter().map(describe).collect();
                format!("{resource}: {}", hints.join(" | "))
            }
        })
        .collect();
    parts.join("; ")
}
