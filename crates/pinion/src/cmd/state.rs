//! `pinion state`: look at kubelet's CPU manager checkpoint.
//!
//! `pinion state inspect FILE` prints the format version, the policy, the
//! default CPU set, every assignment and whether the checksum is valid
//! (stored vs recomputed). When FILE is `cpu_manager_state` and Pinion's
//! journal (`pinion_journal`) lies beside it, the journal follows: its
//! records, how it relates to the checkpoint, its tail and the state a
//! restart would start from. FILE may also be a journal itself (e.g. one
//! kept aside as `pinion_journal.damaged-1`). It exits non-zero when the file
//! cannot be read or decoded, when the checksum does not match, when a CPU
//! set does not parse, or when the journal is damaged, unreadable or
//! superseded — after printing what it could. A torn tail (what a crash
//! leaves) is shown, not an error. A checkpoint that does not decode is
//! shown as far as it can be read (`state_salvage`). FILE `-` reads a
//! checkpoint from standard input (no journal beside it).

use crate::output::{self, OutputArgs};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pinion_core::checkpoint::{self, Checkpoint, CheckpointError, Entries};
use pinion_core::CpuSet;
use pinion_host::journal;
use pinion_host::store::CPU_MANAGER_STATE;
use serde::Serialize;

use super::agent_config::AgentConfig;
use super::state_journal;
use super::state_salvage::DamagedReport;
use crate::render::text::{plural, CpuSetView};

/// Arguments of `pinion state`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: StateCommand,
}

#[derive(Debug, clap::Subcommand)]
enum StateCommand {
    /// Show a checkpoint file (kubelet's `cpu_manager_state`) and check its
    /// checksum, with Pinion's journal beside it (or a journal file).
    Inspect(InspectArgs),
    /// Check a checkpoint against this machine and a policy configuration,
    /// as kubelet does when it starts.
    Verify(super::state_check::VerifyArgs),
    /// Turn a checkpoint kubelet would refuse into a valid one for a new
    /// configuration, keeping every assignment that is still valid.
    Migrate(super::state_check::MigrateArgs),
    /// Rebuild the state from the running workloads (each cgroup's cpus
    /// and run record), as the agent does when its checkpoint is missing
    /// or unreadable (dry run unless --write).
    Rebuild(super::state_rebuild::RebuildArgs),
    /// Carry katalyst ORM's resource-plugin allocations
    /// (`kubelet_qrm_checkpoint`) into Pinion's state directory (dry run
    /// unless --write).
    ImportQrm(super::state_import::ImportArgs),
}

#[derive(Debug, clap::Args)]
struct InspectArgs {
    /// The checkpoint file, e.g. /var/lib/kubelet/cpu_manager_state, or a
    /// journal file (pinion_journal); `-` reads a checkpoint from standard
    /// input; default: the agent's checkpoint.
    file: Option<PathBuf>,
    /// The agent's config file (its `stateDir` says where the default
    /// checkpoint is).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the `cpu_manager_state` a restart would start from: the
    /// checkpoint with the journal beside it replayed, in kubelet's format.
    #[arg(long)]
    effective: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// Runs `pinion state`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.command {
        StateCommand::Inspect(inspect) => run_inspect(inspect),
        StateCommand::Verify(verify) => super::state_check::verify(verify),
        StateCommand::Migrate(migrate) => super::state_check::migrate_file(migrate),
        StateCommand::ImportQrm(import) => super::state_import::import(import),
        StateCommand::Rebuild(rebuild) => super::state_rebuild::run(rebuild),
    }
}

fn run_inspect(args: &InspectArgs) -> anyhow::Result<()> {
    let file = match &args.file {
        Some(file) if file.as_os_str() == "-" => return inspect_stdin(args),
        Some(file) => file.clone(),
        None => AgentConfig::load(args.config.as_deref())?.checkpoint(),
    };
    let path = file.display().to_string();
    let bytes = journal::read_state_file(&file).with_context(|| format!("cannot read {path}"))?;
    let dir = file.parent().unwrap_or_else(|| Path::new("."));
    let is_journal = journal::is_journal(&bytes);
    let output = args.output.output();
    if args.effective || args.output.legacy_effective() {
        let (checkpoint, journal) = if is_journal {
            (dir.join(CPU_MANAGER_STATE), file.clone())
        } else {
            (file.clone(), dir.join(journal::JOURNAL))
        };
        let effective = state_journal::effective(&checkpoint, &journal)?;
        let bytes = effective.to_bytes().with_context(|| {
            format!("cannot encode the state a restart would start from ({path})")
        })?;
        println!("{}", String::from_utf8_lossy(&bytes));
        return Ok(());
    }
    if is_journal {
        let report = state_journal::report(&dir.join(CPU_MANAGER_STATE), &file)?;
        print!("{}", output::render(output, &report, |r, _| r.to_text())?);
        return fail_on(&path, &report.problems);
    }
    let checkpoint = decode_or_show(&path, &bytes, output, || {
        format!("; {}", super::state_check::repair_hint(&file))
    })?;
    let mut report = Report::new(path.clone(), &checkpoint);
    let beside = dir.join(journal::JOURNAL);
    let is_kubelets_file = file.file_name() == Some(OsStr::new(CPU_MANAGER_STATE));
    if is_kubelets_file && beside.exists() {
        let journal = state_journal::report(&file, &beside)?;
        report.problems.extend(journal.problems.iter().cloned());
        report.journal = Some(journal);
    }
    print_report(output, &report)?;
    fail_on(&path, &report.problems)
}

/// `pinion state inspect -`: a checkpoint piped in (e.g. from `kubectl
/// exec … cat`), with no journal beside it.
fn inspect_stdin(args: &InspectArgs) -> anyhow::Result<()> {
    let path = "standard input".to_string();
    if args.effective || args.output.legacy_effective() {
        anyhow::bail!("--effective replays the journal beside the checkpoint: give the checkpoint's path, not -");
    }
    let bytes = journal::read_state_stream(std::io::stdin().lock())
        .with_context(|| format!("cannot read {path}"))?;
    if journal::is_journal(&bytes) {
        anyhow::bail!("standard input holds a Pinion journal: give its path instead of -, so that the checkpoint beside it is read too");
    }
    let output = args.output.output();
    let checkpoint = decode_or_show(&path, &bytes, output, String::new)?;
    let report = Report::new(path.clone(), &checkpoint);
    print_report(output, &report)?;
    fail_on(&path, &report.problems)
}

/// The checkpoint in `bytes`; one that does not decode is shown as far as
/// it can be read, then is an error (`hint` follows its text).
fn decode_or_show(
    path: &str,
    bytes: &[u8],
    output: output::Output,
    hint: impl FnOnce() -> String,
) -> anyhow::Result<Checkpoint> {
    match checkpoint::decode(bytes) {
        Ok(checkpoint) => Ok(checkpoint),
        Err(err) => {
            let damaged = DamagedReport::new(path.to_string(), &checkpoint::salvage(bytes));
            print!("{}", output::render(output, &damaged, |d, _| d.to_text())?);
            Err(err).with_context(|| format!("cannot decode checkpoint {path}{}", hint()))
        }
    }
}

fn print_report(output: output::Output, report: &Report) -> anyhow::Result<()> {
    let text = output::render(output, report, |report, _| {
        let mut text = report.to_text();
        if let Some(journal) = &report.journal {
            text.push_str(&journal.to_text());
        }
        text
    })?;
    print!("{text}");
    Ok(())
}

fn fail_on(path: &str, problems: &[String]) -> anyhow::Result<()> {
    if problems.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{path}: {}", problems.join("; "))
    }
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum EntriesView {
    /// v2: pod UID → container name → CPU set.
    Pods(BTreeMap<String, BTreeMap<String, CpuSetView>>),
    /// v1: container id → CPU set.
    Containers(BTreeMap<String, CpuSetView>),
}

#[derive(Debug, Serialize)]
struct ChecksumView {
    stored: u64,
    computed: u64,
    /// `valid`, `invalid`, or `not-checked` (stored 0, accepted by kubelet).
    status: &'static str,
}

#[derive(Debug, Serialize)]
struct Report {
    file: String,
    version: &'static str,
    policy: String,
    default: CpuSetView,
    entries: EntriesView,
    checksum: ChecksumView,
    /// Why the checkpoint would not be accepted (empty when it would),
    /// and the journal's problems.
    problems: Vec<String>,
    /// Pinion's journal beside the checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    journal: Option<super::state_journal::JournalReport>,
}

impl Report {
    fn new(file: String, checkpoint: &Checkpoint) -> Self {
        let entries = match checkpoint.entries() {
            Entries::V1(by_id) => EntriesView::Containers(
                by_id
                    .iter()
                    .map(|(id, cpus)| (id.clone(), CpuSetView::new(cpus)))
                    .collect(),
            ),
            Entries::V2(pods) => EntriesView::Pods(
                pods.iter()
                    .map(|(pod, containers)| {
                        let views = containers
                            .iter()
                            .map(|(name, cpus)| (name.clone(), CpuSetView::new(cpus)))
                            .collect();
                        (pod.clone(), views)
                    })
                    .collect(),
            ),
        };
        let stored = checkpoint.stored_checksum();
        let computed = checkpoint.computed_checksum();
        let status = match (stored, checkpoint.verify()) {
            (0, _) => "not-checked",
            (_, Ok(())) => "valid",
            (_, Err(_)) => "invalid",
        };
        let mut problems = Vec::new();
        if let Err(err) = checkpoint.verify() {
            problems.push(err.to_string());
        }
        problems.extend(cpuset_problems(checkpoint));
        Report {
            file,
            version: checkpoint.version().as_str(),
            policy: checkpoint.policy_name().to_string(),
            default: CpuSetView::new(checkpoint.default_cpu_set()),
            entries,
            checksum: ChecksumView {
                stored,
                computed,
                status,
            },
            problems,
            journal: None,
        }
    }

    fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "file      {}", self.file);
        let _ = writeln!(out, "format    {}", self.version);
        let _ = writeln!(out, "policy    {}", self.policy);
        let _ = writeln!(out, "default   {}", self.default.describe());
        match &self.entries {
            EntriesView::Pods(pods) => {
                let containers: usize = pods.values().map(BTreeMap::len).sum();
                let _ = writeln!(
                    out,
                    "entries   {} ({})",
                    plural(pods.len(), "pod"),
                    plural(containers, "container")
                );
                for (pod, containers) in pods {
                    let _ = writeln!(out, "  pod {pod}");
                    push_assignments(&mut out, "    ", containers);
                }
            }
            EntriesView::Containers(by_id) => {
                let _ = writeln!(
                    out,
                    "entries   {} (v1: keyed by container id)",
                    plural(by_id.len(), "container")
                );
                push_assignments(&mut out, "  ", by_id);
            }
        }
        let _ = writeln!(out, "checksum  {}", self.checksum.describe());
        out
    }
}

impl ChecksumView {
    fn describe(&self) -> String {
        match self.status {
            "valid" => format!("valid (stored {} = computed)", self.stored),
            "not-checked" => format!(
                "not checked: a stored 0 is accepted as legacy (computed {})",
                self.computed
            ),
            _ => format!(
                "INVALID: stored {}, computed {} (checkpoint is corrupted)",
                self.stored, self.computed
            ),
        }
    }
}

/// kubelet's parse errors: the first bad set of a v2 checkpoint (as a
/// restore reports it), or every bad set of a v1 checkpoint.
fn cpuset_problems(checkpoint: &Checkpoint) -> Vec<String> {
    match checkpoint.entries() {
        Entries::V2(_) => checkpoint
            .to_state()
            .err()
            .map(|err| err.to_string())
            .into_iter()
            .collect(),
        Entries::V1(by_id) => {
            let text = checkpoint.default_cpu_set();
            let default = CpuSet::parse_list(text).err().map(|source| {
                CheckpointError::DefaultCpuSet {
                    text: text.to_string(),
                    source: Box::new(source),
                }
                .to_string()
            });
            let containers = by_id.iter().filter_map(|(id, cpus)| {
                CpuSet::parse_list(cpus).err().map(|err| {
                    format!("could not parse cpuset {cpus:?} for container id {id:?}: {err}")
                })
            });
            default.into_iter().chain(containers).collect()
        }
    }
}

pub(super) fn push_assignments(
    out: &mut String,
    indent: &str,
    items: &BTreeMap<String, CpuSetView>,
) {
    let width = items
        .keys()
        .map(|name| name.chars().count())
        .max()
        .unwrap_or(0);
    for (name, cpus) in items {
        let _ = writeln!(out, "{indent}{name:<width$}  {}", cpus.describe());
    }
}
