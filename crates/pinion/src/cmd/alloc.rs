//! `pinion alloc`: run kubelet's CPU allocation (take-by-topology).
//!
//! * Case form: `pinion alloc [FILE|-] [--repeat N]` reads one allocation case
//!   or a JSON array of them in the corpus format (`kind: "take"`, fields
//!   `topology`, `available`, `request`, `options`, optional `algorithm` and
//!   `cpu_group_size`) and prints one JSON line per case:
//!   `{"name":…,"cpus":"<cpulist>"}` or `{"name":…,"error":"<kubelet text>"}`
//!   (+ `"ns_per_call"` with `--repeat`). Cases of another kind print
//!   `{"name":…,"skipped":"…"}`; a case with bad input prints
//!   `{"name":…,"invalid":"…"}` and makes the command fail at the end.
//!   (`-o table` prints the same as aligned columns, `-o yaml` as YAML.)
//! * Human form: `pinion alloc [--sysroot DIR | --topology FILE] --request N
//!   [--available LIST] [--option NAME=VALUE]…` prints the chosen CPUs as
//!   text (topology from a sysfs root, `/` by default, or a JSON file).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use pinion_core::alloc::case::{CaseError, TakeCase};
use pinion_core::alloc::{
    take_with_index, Algorithm, AllocIndex, AllocOptions, CpuSortingStrategy,
};
use pinion_core::{CpuSet, Topology};
use serde::Serialize;
use serde_json::Value;

use crate::output::{self, Output, OutputArgs, Table};

/// Arguments of `pinion alloc`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Case file (one case or a JSON array); `-` reads standard input.
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
    /// Run every allocation N times and add the median `ns_per_call`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Human form: topology JSON (as `pinion topology --format json` prints
    /// it, a corpus `topology` object, or a case holding one).
    #[arg(long, value_name = "FILE", conflicts_with = "file")]
    pub topology: Option<PathBuf>,
    /// Human form: discover the topology from this sysfs root (a captured
    /// tree, or `/`, the default, for this machine).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["file", "topology"])]
    pub sysroot: Option<PathBuf>,
    /// Human form: free CPUs as a cpulist (default: every CPU).
    #[arg(long, value_name = "LIST", requires = "request")]
    pub available: Option<String>,
    /// Human form: number of CPUs to allocate.
    #[arg(long, value_name = "N")]
    pub request: Option<usize>,
    /// Human form: a static policy option, e.g. `full-pcpus-only=true`
    /// (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE")]
    pub options: Vec<String>,
    /// Print an example case file (`examples/alloc/two-sockets-smt.json`;
    /// the format: docs/alloc-and-hints.md) and exit.
    #[arg(long, exclusive = true)]
    pub example: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The example `--example` prints; the same file runs in the tests.
pub const EXAMPLE: &str = include_str!("../../../../examples/alloc/two-sockets-smt.json");

/// Runs `pinion alloc`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.example {
        print!("{EXAMPLE}");
        return Ok(());
    }
    if let Some(file) = &args.file {
        // The case form is the corpus tools' interface: JSON lines unless
        // asked otherwise (the module documentation's contract).
        return run_cases(file, args.repeat, args.output.output_or(Output::Json));
    }
    let output = args.output.output();
    let Some(request) = args.request else {
        bail!(
            "nothing to allocate: give --request N (on this machine's topology; --sysroot DIR or \
             --topology FILE for another), or a case FILE (- for stdin); \
             `pinion alloc --example` prints a case file, docs/alloc-and-hints.md explains both"
        );
    };
    let topology = load_topology(args)?;
    run_human(&topology, args, request, output)
}

/// The topology of the human form: `--topology FILE`, else discovered under
/// `--sysroot` (default `/`).
fn load_topology(args: &Args) -> anyhow::Result<Topology> {
    let Some(path) = &args.topology else {
        let root = args.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"));
        return pinion_host::discover(&root).with_context(|| {
            format!(
                "--sysroot: cannot discover the cpu topology under {}",
                root.display()
            )
        });
    };
    let value = read_json(path)?;
    let object = value.get("topology").cloned().unwrap_or(value);
    serde_json::from_value(object)
        .with_context(|| format!("{}: not a valid topology", path.display()))
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = crate::input::read_text(path)?;
    serde_json::from_str(&text).with_context(|| format!("{}: malformed JSON", path.display()))
}

/// One output line of the case form.
#[derive(Debug, Serialize)]
struct Line {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpus: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    invalid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ns_per_call: Option<u64>,
}

impl Line {
    /// Its row of the table: name, CPUs, what happened.
    fn row(&self) -> Vec<String> {
        let result = match (&self.error, &self.skipped, &self.invalid) {
            (Some(error), _, _) => format!("error: {error}"),
            (_, Some(skipped), _) => format!("skipped: {skipped}"),
            (_, _, Some(invalid)) => format!("invalid: {invalid}"),
            _ => "allocated".to_string(),
        };
        let mut row = vec![
            self.name.clone(),
            self.cpus.clone().unwrap_or_default(),
            result,
        ];
        if let Some(ns) = self.ns_per_call {
            row.push(ns.to_string());
        }
        row
    }

    fn new(name: String) -> Self {
        Line {
            name,
            cpus: None,
            error: None,
            skipped: None,
            invalid: None,
            ns_per_call: None,
        }
    }
}

/// Runs the cases of `path`: a table of them, or one JSON line (YAML
/// document) per case as it is decided.
fn run_cases(path: &Path, repeat: Option<u32>, output: Output) -> anyhow::Result<()> {
    let cases = match read_json(path)? {
        Value::Array(cases) => cases,
        single => vec![single],
    };
    let mut invalid = 0;
    let mut out = std::io::stdout().lock();
    let mut columns = vec!["CASE", "CPUS", "RESULT"];
    if repeat.is_some() {
        columns.push("NS/CALL>");
    }
    let mut table = Table::new(&columns);
    for (i, raw) in cases.iter().enumerate() {
        let line = run_case(i, raw, repeat);
        if let Some(reason) = &line.invalid {
            eprintln!("pinion: case {i} ({:?}): {reason}", line.name);
            invalid += 1;
        }
        let Some(text) = output::object_line(output, &serde_json::to_string(&line)?)? else {
            table.row(line.row());
            continue;
        };
        match write!(out, "{text}") {
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other.context("writing to standard output")?,
        }
    }
    if matches!(output, Output::Table | Output::Wide) {
        write!(out, "{}", table.render()).context("writing to standard output")?;
    }
    if invalid > 0 {
        bail!("{invalid} of {} cases had invalid input", cases.len());
    }
    Ok(())
}

fn run_case(i: usize, raw: &Value, repeat: Option<u32>) -> Line {
    let name = raw
        .get("name")
        .and_then(Value::as_str)
        .map_or_else(|| format!("case {i}"), str::to_owned);
    let mut line = Line::new(name);
    match raw.get("kind").and_then(Value::as_str) {
        None | Some("take") => {}
        Some(other) => {
            line.skipped = Some(CaseError::NotTake(other.to_owned()).to_string());
            return line;
        }
    }
    match prepare(raw) {
        Ok((topology, available, n, algorithm)) => {
            // One index per case, as the agent keeps one per machine.
            let index = AllocIndex::new(&topology);
            let result = take_with_index(&index, &available, n, algorithm);
            match result {
                Ok(cpus) => line.cpus = Some(cpus.to_string()),
                Err(err) => line.error = Some(err.to_string()),
            }
            line.ns_per_call =
                repeat.map(|r| median_ns(r, || take_with_index(&index, &available, n, algorithm)));
        }
        Err(reason) => line.invalid = Some(reason),
    }
    line
}

/// Parses a case; the error names the offending field.
fn prepare(raw: &Value) -> Result<(Topology, CpuSet, usize, Algorithm), String> {
    let case: TakeCase =
        serde_json::from_value(raw.clone()).map_err(|e| format!("invalid case: {e}"))?;
    let topology =
        Topology::new(case.topology.clone()).map_err(|e| format!("field `topology`: {e}"))?;
    let available = case.available().map_err(|e| e.to_string())?;
    let algorithm = case.algorithm(&topology).map_err(|e| e.to_string())?;
    Ok((topology, available, case.request, algorithm))
}

/// Median wall time of `repeat` calls, in nanoseconds.
fn median_ns<T>(repeat: u32, mut call: impl FnMut() -> T) -> u64 {
    let mut times: Vec<u128> = (0..repeat)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(call());
            start.elapsed().as_nanos()
        })
        .collect();
    times.sort_unstable();
    u64::try_from(times[times.len() / 2]).unwrap_or(u64::MAX)
}

fn parse_options(pairs: &[String]) -> anyhow::Result<AllocOptions> {
    let mut split = Vec::new();
    for pair in pairs {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--option {pair:?}: expected NAME=VALUE, e.g. full-pcpus-only=true");
        };
        split.push((name, value));
    }
    AllocOptions::from_named(split).context("--option")
}

/// What the human form decided, as `-o json|yaml` print it.
#[derive(Debug, Serialize)]
struct Decision {
    algorithm: String,
    cpus: String,
    count: usize,
    numa: String,
    sockets: String,
    uncore: String,
    whole_cores: usize,
    partial_cores: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    ns_per_call: Option<u64>,
}

fn run_human(
    topology: &Topology,
    args: &Args,
    request: usize,
    output: Output,
) -> anyhow::Result<()> {
    let available = match &args.available {
        Some(list) => CpuSet::parse_list(list).context("--available")?,
        None => topology.all_cpus().clone(),
    };
    let options = parse_options(&args.options)?;
    let algorithm = Algorithm::select(&options, topology);
    let index = AllocIndex::new(topology);
    let cpus = take_with_index(&index, &available, request, algorithm)
        .with_context(|| format!("allocating {request} cpus from {available}"))?;
    let cores = topology.cores().values().filter(|c| !c.is_disjoint(&cpus));
    let (whole, partial) = cores.fold((0, 0), |(w, p), core| {
        if core.is_subset(&cpus) {
            (w + 1, p)
        } else {
            (w, p + 1)
        }
    });
    let ns_per_call = args.repeat.map(|repeat| {
        median_ns(repeat, || {
            take_with_index(&index, &available, request, algorithm)
        })
    });
    let decision = Decision {
        algorithm: describe(algorithm),
        cpus: cpus.to_string(),
        count: cpus.len(),
        numa: spread_over(topology.numa_cpus(), &cpus),
        sockets: spread_over(topology.sockets(), &cpus),
        uncore: spread_over(topology.uncores(), &cpus),
        whole_cores: whole,
        partial_cores: partial,
        ns_per_call,
    };
    let text = output::render(output, &decision, |d, _| {
        let mut text = format!(
            "algorithm: {}\ncpus:      {} ({} cpus)\nnuma:      {}\nsockets:   {}\n\
             uncore:    {}\ncores:     {} whole, {} partial\n",
            d.algorithm,
            d.cpus,
            d.count,
            d.numa,
            d.sockets,
            d.uncore,
            d.whole_cores,
            d.partial_cores
        );
        if let (Some(ns), Some(repeat)) = (d.ns_per_call, args.repeat) {
            text.push_str(&format!(
                "time:      {ns} ns per call (median of {repeat})\n"
            ));
        }
        text
    })?;
    print!("{text}");
    Ok(())
}

fn describe(algorithm: Algorithm) -> String {
    match algorithm {
        Algorithm::Packed {
            strategy,
            prefer_uncore,
        } => {
            let spread = if strategy == CpuSortingStrategy::Spread {
                ", spread over cores"
            } else {
                ""
            };
            let uncore = if prefer_uncore {
                ", uncore-aligned"
            } else {
                ""
            };
            format!("packed{spread}{uncore}")
        }
        Algorithm::Distributed {
            group_size,
            strategy,
            align_by_socket,
        } => {
            let spread = if strategy == CpuSortingStrategy::Spread {
                ", spread over cores"
            } else {
                ""
            };
            let align = if align_by_socket {
                ", aligned by socket"
            } else {
                ""
            };
            format!("distributed over NUMA nodes in groups of {group_size}{spread}{align}")
        }
    }
}

/// `id: count` for every entity the CPUs touch, e.g. `0: 4, 1: 4`.
fn spread_over(map: &std::collections::BTreeMap<u32, CpuSet>, cpus: &CpuSet) -> String {
    let parts: Vec<String> = map
        .iter()
        .filter_map(|(id, set)| {
            let n = set.intersection_len(cpus);
            (n > 0).then(|| format!("{id}: {n}"))
        })
        .collect();
    parts.join(", ")
}
