//! What opening a state store found and did: the report a caller logs.

use std::path::PathBuf;

use pinion_core::record::Record;

/// A torn last batch that recovery dropped (never acknowledged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub offset: u64,
    pub reason: String,
    /// Readable frames of that batch, dropped with it.
    pub dropped: usize,
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
}

impl Recovery {
    /// One line per abnormal finding, for the caller's log (`warn`).
    #[must_use]
    pub fn warnings(&self) -> Vec<String> {
        let path = self.journal.display();
        let mut out = Vec::new();
        if let Some(torn) = &self.torn {
            out.push(format!(
                "journal {path}: dropped an unfinished last batch at offset {} ({} readable records, never acknowledged): {}",
                torn.offset, torn.dropped, torn.reason
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
        out
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
