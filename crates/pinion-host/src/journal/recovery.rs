//! What opening a state store found and did: the report a caller logs.

use std::path::PathBuf;

use pinion_core::record::Record;

/// An incomplete last batch that recovery did not replay. A crash during
/// its write leaves one (then it was never acknowledged), but so does a
/// file cut from outside, which may have lost acknowledged records: the
/// file cannot tell which, so the bytes are kept and the caller rebuilds
/// from the node ([`Recovery::incomplete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub offset: u64,
    pub reason: String,
    /// Readable frames of that batch, not replayed.
    pub dropped: usize,
    /// Where the journal's bytes were kept before the tail was erased
    /// (`None`: keeping them failed; the warning says so).
    pub aside: Option<PathBuf>,
    /// Why the bytes could not be kept, when they could not.
    pub aside_error: Option<String>,
}

/// Damage inside the log: acknowledged records that recovery could not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub offset: u64,
    pub reason: String,
    /// The sequence number of the last record used.
    pub last_good_seq: u64,
    /// Readable records after the damage, not applied (seq, record).
    pub dropped: Vec<(u64, Record)>,
    /// Where the damaged file was kept.
    pub aside: PathBuf,
}

/// Records of a journal whose checkpoint was replaced by someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superseded {
    /// The checkpoint the journal extended, and the one found.
    pub journal_base: u64,
    pub checkpoint: u64,
    /// CPU records not applied (seq, record).
    pub dropped: Vec<(u64, Record)>,
    /// Where the journal was kept.
    pub aside: PathBuf,
}

/// A readable journal whose CPU records the checkpoint cannot take: the
/// checkpoint does not parse as a state (a CPU set such as `"9999999999"`,
/// v1 entries) though the journal extends it. An agent that started
/// degraded on such a checkpoint and stopped before its start's compaction
/// leaves one. The journal is kept and not applied; the caller rebuilds
/// from the node ([`Recovery::incomplete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreplayable {
    /// Why the checkpoint cannot take them.
    pub reason: String,
    /// CPU and side records not applied to the state (side data is kept).
    pub records: usize,
    /// Where the journal was kept.
    pub aside: PathBuf,
}

/// What [`StateStore::open`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub journal: PathBuf,
    /// No journal was there (first start): a new one was created.
    pub created: bool,
    /// Records applied on the checkpoint (CPU and side data).
    pub replayed: usize,
    /// CPU records the checkpoint already held (a compaction whose journal
    /// reset did not happen), not applied again.
    pub skipped: usize,
    /// The last durable sequence number.
    pub last_seq: u64,
    pub torn: Option<TornTail>,
    pub damage: Option<Damage>,
    pub superseded: Option<Superseded>,
    pub unreplayable: Option<Unreplayable>,
    /// An earlier open found the journal incomplete (why, as it said) and
    /// cut it, and the state rebuilt from the node was never made durable
    /// after it: that start failed or was killed
    /// ([`super::INCOMPLETE_MARK`]). The journal read now lacks what the
    /// cut lost, so the caller rebuilds again ([`Recovery::incomplete`]).
    pub earlier: Option<String>,
}

impl Recovery {
    /// One line per abnormal finding, for the caller's log (`warn`).
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        let path = self.journal.display();
        let mut out = Vec::new();
        if let Some(torn) = &self.torn {
            let kept = match (&torn.aside, &torn.aside_error) {
                (Some(aside), _) => format!("the file is kept as {}", aside.display()),
                (None, Some(err)) => format!("the file could not be kept: {err}"),
                (None, None) => "the file was not kept".to_string(),
            };
            out.push(format!(
                "journal {path}: its last batch is incomplete at offset {} ({}; {} readable records not replayed; a crash during a write leaves this, but so does a file cut from outside, so they may have been acknowledged); {kept}",
                torn.offset, torn.reason, torn.dropped
            ));
        }
        if let Some(damage) = &self.damage {
            out.push(format!(
                "journal {path}: damaged at offset {} ({}); state restored up to record {}, {} later records not applied: {}; the damaged file is kept as {}",
                damage.offset,
                damage.reason,
                damage.last_good_seq,
                damage.dropped.len(),
                describe(&damage.dropped),
                damage.aside.display()
            ));
        }
        if let Some(sup) = &self.superseded {
            out.push(format!(
                "journal {path}: the checkpoint was replaced outside pinion (journal extends {:#018x}, found {:#018x}); it wins, {} journal records not applied: {}; the old journal is kept as {}",
                sup.journal_base,
                sup.checkpoint,
                sup.dropped.len(),
                describe(&sup.dropped),
                sup.aside.display()
            ));
        }
        if let Some(unreplayable) = &self.unreplayable {
            out.push(format!(
                "journal {path}: the checkpoint cannot take its {} records ({}); not applied, the state is rebuilt from the node; the journal is kept as {}",
                unreplayable.records,
                unreplayable.reason,
                unreplayable.aside.display()
            ));
        }
        if let Some(why) = &self.earlier {
            out.push(format!(
                "journal {path}: an earlier start found that {why}, and stopped before it recorded the state it rebuilt from the node; the state is rebuilt from the node again"
            ));
        }
        out
    }
}

impl Recovery {
    /// Why the journal could not be replayed to its end (an incomplete last
    /// batch, damage, an unreadable header), or `None` when it was. Then
    /// the state opened may lack acknowledged decisions: the caller
    /// rebuilds it from the node, as for a lost checkpoint. A checkpoint
    /// replaced from outside ([`Recovery::superseded`]) is not this: it
    /// wins on purpose.
    #[must_use]
    pub fn incomplete(&self) -> Option<String> {
        let path = self.journal.display();
        if let Some(unreplayable) = &self.unreplayable {
            return Some(format!(
                "the checkpoint cannot take journal {path}'s {} records ({}); the journal is kept as {}",
                unreplayable.records,
                unreplayable.reason,
                unreplayable.aside.display()
            ));
        }
        if let Some(damage) = &self.damage {
            return Some(format!(
                "journal {path} is damaged at offset {} ({}); the damaged file is kept as {}",
                damage.offset,
                damage.reason,
                damage.aside.display()
            ));
        }
        if let Some(torn) = &self.torn {
            let kept = torn.aside.as_ref().map_or_else(
                || "the file could not be kept".to_string(),
                |aside| format!("the file is kept as {}", aside.display()),
            );
            return Some(format!(
                "journal {path} ends in an incomplete batch at offset {} ({}); {kept}",
                torn.offset, torn.reason
            ));
        }
        self.earlier.as_ref().map(|why| {
            format!("an earlier start found that {why}, and stopped before it recorded the state it rebuilt from the node")
        })
    }
}

fn describe(records: &[(u64, Record)]) -> String {
    let shown: Vec<String> = records
        .iter()
        .take(8)
        .map(|(seq, record)| format!("#{seq} {}", String::from_utf8_lossy(&record.to_bytes())))
        .collect();
    let more = records.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else if shown.is_empty() {
        "none".to_string()
    } else {
        shown.join(", ")
    }
}
