//! The journal part of `pinion state inspect`: Pinion's `pinion_journal`
//! beside the checkpoint — its records, how it relates to the checkpoint,
//! its tail (clean, torn, damaged) and the state a restart would start from.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use pinion_core::checkpoint::Checkpoint;
use pinion_core::CpuSet;
use pinion_host::journal::format::{Entry, Frame};
use pinion_host::journal::scan::{Basis, Tail};
use pinion_host::journal::{inspect_paths, JournalView};
use serde::Serialize;

use crate::render::text::plural;

/// One frame of the journal.
#[derive(Debug, Serialize)]
struct FrameView {
    seq: u64,
    offset: u64,
    /// The last frame of a flush.
    commit: bool,
    /// The record as stored (JSON), or the compaction marker.
    entry: serde_json::Value,
    /// The record as stored, for the text view.
    #[serde(skip)]
    text: String,
}

#[derive(Debug, Serialize)]
struct TailView {
    /// `clean`, `torn` or `damaged`.
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Sequence numbers of readable frames not used.
    dropped: Vec<u64>,
}

/// The state a restart would start from.
#[derive(Debug, Serialize)]
struct RestartView {
    default: String,
    pods: usize,
    containers: usize,
}

/// The journal report (`journal` in the JSON report).
#[derive(Debug, Serialize)]
pub struct JournalReport {
    file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_seq: Option<u64>,
    /// `checkpoint`, `compaction` or `superseded` (see docs/checkpoint-format.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    basis: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compacted_through: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_seq: Option<u64>,
    frames: Vec<FrameView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tail: Option<TailView>,
    /// Records a restart applies, skips (already in the checkpoint), or
    /// does not apply (superseded checkpoint).
    replayed: usize,
    skipped: usize,
    superseded: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    restart: Option<RestartView>,
    /// What a restart would report as abnormal (a torn tail is not: it is
    /// what a crash leaves).
    pub problems: Vec<String>,
    #[serde(skip)]
    basis_text: String,
}

/// The checkpoint a restart would start from: `checkpoint` with the valid
/// records of `journal` replayed. Fails, naming the file, when either is
/// unreadable, the journal is damaged in the middle, or the replay fails.
pub fn effective(checkpoint: &Path, journal: &Path) -> anyhow::Result<Checkpoint> {
    let inspection = inspect_paths(checkpoint, journal)?;
    let view = match inspection.journal {
        None => {
            let bytes = pinion_host::journal::read_state_file(checkpoint)
                .with_context(|| format!("cannot read {}", checkpoint.display()))?;
            return pinion_core::checkpoint::decode_verified(&bytes)
                .with_context(|| format!("cannot decode checkpoint {}", checkpoint.display()));
        }
        Some(Err(reason)) => {
            anyhow::bail!("journal {} unreadable: {reason}", journal.display())
        }
        Some(Ok(view)) => view,
    };
    if let Tail::Damaged { offset, reason, .. } = &view.scan.tail {
        anyhow::bail!(
            "journal {} is damaged at offset {offset} ({reason}); see `pinion state inspect {}`",
            journal.display(),
            journal.display()
        );
    }
    match view.effective {
        Ok(Some(checkpoint)) => Ok(checkpoint),
        Ok(None) => anyhow::bail!(
            "no state: neither {} nor the records of {} hold any",
            checkpoint.display(),
            journal.display()
        ),
        Err(err) => Err(anyhow::anyhow!(err).context(format!(
            "the records of {} cannot be replayed on {}",
            journal.display(),
            checkpoint.display()
        ))),
    }
}

/// Reads `journal` against `checkpoint` (either may be missing).
pub fn report(checkpoint: &Path, journal: &Path) -> anyhow::Result<JournalReport> {
    let inspection = inspect_paths(checkpoint, journal)?;
    let mut out = JournalReport {
        file: journal.display().to_string(),
        generation: None,
        policy: None,
        base_seq: None,
        basis: None,
        compacted_through: None,
        last_seq: None,
        frames: Vec::new(),
        tail: None,
        replayed: 0,
        skipped: 0,
        superseded: 0,
        restart: None,
        problems: Vec::new(),
        basis_text: String::new(),
    };
    match inspection.journal {
        None => out
            .problems
            .push(format!("no journal at {}", journal.display())),
        Some(Err(reason)) => out
            .problems
            .push(format!("journal header unreadable: {reason}")),
        Some(Ok(view)) => out.fill(&view, inspection.checkpoint_id),
    }
    Ok(out)
}

impl JournalReport {
    fn fill(&mut self, view: &JournalView, checkpoint_id: u64) {
        let header = &view.scan.header;
        self.generation = Some(header.generation);
        self.policy = Some(header.policy.clone());
        self.base_seq = Some(header.base_seq);
        self.last_seq = Some(view.scan.last_seq());
        self.frames = view.scan.frames.iter().map(frame_view).collect();
        let (basis, text) = match view.replay.basis {
            Basis::Checkpoint => (
                "checkpoint",
                "the checkpoint beside it (every record replays)".to_string(),
            ),
            Basis::Compaction { through } => {
                self.compacted_through = Some(through);
                (
                    "compaction",
                    format!("a compaction's checkpoint holding records up to {through}; later ones replay"),
                )
            }
            Basis::Superseded {
                journal_base,
                checkpoint,
            } => {
                self.problems.push(format!(
                    "the checkpoint was replaced outside pinion (journal extends {journal_base:#018x}, checkpoint is {checkpoint:#018x}): {} journal records would not be applied",
                    view.replay.superseded.len()
                ));
                ("superseded", format!("NOT the checkpoint beside it ({journal_base:#018x} vs {checkpoint_id:#018x})"))
            }
        };
        self.basis = Some(basis);
        self.basis_text = text;
        self.replayed = view.replay.records.len();
        self.skipped = view.replay.skipped;
        self.superseded = view.replay.superseded.len();
        self.tail = Some(self.tail_view(&view.scan.tail));
        match &view.effective {
            Ok(Some(checkpoint)) => self.restart = restart_view(checkpoint),
            Ok(None) => {}
            Err(err) => self.problems.push(format!(
                "the records cannot be replayed on the checkpoint: {err}"
            )),
        }
    }

    fn tail_view(&mut self, tail: &Tail) -> TailView {
        let seqs = |frames: &[Frame]| frames.iter().map(|f| f.seq).collect::<Vec<_>>();
        match tail {
            Tail::Clean => TailView {
                status: "clean",
                offset: None,
                reason: None,
                dropped: Vec::new(),
            },
            Tail::Torn {
                offset,
                reason,
                dropped,
            } => TailView {
                status: "torn",
                offset: Some(*offset),
                reason: Some(reason.clone()),
                dropped: seqs(dropped),
            },
            Tail::Damaged {
                offset,
                reason,
                after,
            } => {
                self.problems.push(format!(
                    "journal damaged at offset {offset}: {reason}; {} later records would not be applied",
                    after.len()
                ));
                TailView {
                    status: "damaged",
                    offset: Some(*offset),
                    reason: Some(reason.clone()),
                    dropped: seqs(after),
                }
            }
        }
    }

    /// The text view.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "journal   {}", self.file);
        let (Some(generation), Some(policy), Some(base)) =
            (self.generation, &self.policy, self.base_seq)
        else {
            for problem in &self.problems {
                let _ = writeln!(out, "  {problem}");
            }
            return out;
        };
        let _ = writeln!(
            out,
            "  generation {generation}, policy {policy}, base sequence {base}"
        );
        let _ = writeln!(out, "  extends   {}", self.basis_text);
        let first = self.frames.first().map_or(base, |f| f.seq);
        let last = self.last_seq.unwrap_or(base);
        let _ = match self.frames.len() {
            0 => writeln!(out, "  records   none"),
            n => writeln!(
                out,
                "  records   {n} (sequence {first}-{last}; * ends a flush)"
            ),
        };
        for frame in &self.frames {
            let mark = if frame.commit { '*' } else { ' ' };
            let _ = writeln!(out, "    {:>6} {mark} {}", frame.seq, frame.text);
        }
        if let Some(tail) = &self.tail {
            let _ = writeln!(out, "  tail      {}", tail.describe());
        }
        let replay = format!(
            "{} replayed, {} already in the checkpoint, {} not applied",
            self.replayed, self.skipped, self.superseded
        );
        match &self.restart {
            Some(restart) => {
                let _ = writeln!(
                    out,
                    "  restart   default {}, {} ({}); records: {replay}",
                    restart.default,
                    plural(restart.pods, "pod"),
                    plural(restart.containers, "container")
                );
            }
            None => {
                let _ = writeln!(out, "  restart   no state; records: {replay}");
            }
        }
        out
    }
}

impl TailView {
    fn describe(&self) -> String {
        let offset = self.offset.unwrap_or(0);
        let reason = self.reason.as_deref().unwrap_or("");
        let seqs: Vec<String> = self.dropped.iter().map(u64::to_string).collect();
        match self.status {
            "clean" => "clean".to_string(),
            "torn" => format!(
                "torn at offset {offset} ({reason}): an incomplete last batch, not replayed ({} readable records: {}); a crash during its write leaves this, but so does a file cut from outside, so a restart keeps the file and rebuilds the state from the node",
                seqs.len(),
                if seqs.is_empty() { "none".to_string() } else { seqs.join(", ") }
            ),
            _ => format!(
                "DAMAGED at offset {offset} ({reason}): acknowledged records {} would not be applied",
                seqs.join(", ")
            ),
        }
    }
}

fn frame_view(frame: &Frame) -> FrameView {
    let (entry, text) = match &frame.entry {
        Entry::Record(record) => {
            let bytes = record.to_bytes();
            let entry = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            (entry, String::from_utf8_lossy(&bytes).into_owned())
        }
        Entry::Compaction {
            checkpoint_id,
            through,
        } => (
            serde_json::json!({
                "op": "compaction",
                "checkpoint": format!("{checkpoint_id:#018x}"),
                "through": through,
            }),
            format!("compaction: checkpoint {checkpoint_id:#018x} holds records up to {through}"),
        ),
    };
    FrameView {
        seq: frame.seq,
        offset: frame.offset,
        commit: frame.commit,
        entry,
        text,
    }
}

fn restart_view(checkpoint: &Checkpoint) -> Option<RestartView> {
    let state = checkpoint.to_state().ok()?;
    let default = if state.default_cpu_set.is_empty() {
        "(empty)".to_string()
    } else {
        format!(
            "{} ({} CPUs)",
            state.default_cpu_set,
            CpuSet::len(&state.default_cpu_set)
        )
    };
    Some(RestartView {
        default,
        pods: state.assignments.len(),
        containers: state.assignments.values().map(|c| c.len()).sum(),
    })
}
