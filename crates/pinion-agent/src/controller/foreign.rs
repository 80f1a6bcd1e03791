//! Owns what Pinion does about other writers of the cpusets it keeps (`otherWriters`): the counters, the rate-limited log lines, the marks `pinion ps` shows.
//!
//! Other writers (issue 31 item 6): cpusets Pinion keeps that someone else
//! changed. The reconcile pass compares each kept file's observed value
//! with the one Pinion intends ([`pinion_core::drift::judge`], the one
//! decision for containers, housekeeping cgroups and any later kept file);
//! this records what it found — a counter per kind, one log line per event
//! (at most [`LOG_LINES_PER_WINDOW`] a minute, the rest counted and
//! summed up in the next line) and the last write per container or cgroup
//! for `pinion ps`.

use std::time::{Duration, Instant, SystemTime};

use pinion_core::drift::{ForeignWrite, OtherWriters};

use super::Controller;

/// Log lines about foreign writes per [`LOG_WINDOW`].
pub const LOG_LINES_PER_WINDOW: u32 = 20;
const LOG_WINDOW: Duration = Duration::from_secs(60);

/// What kind of kept file was written (the metric's `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ForeignKind {
    /// A container's cgroup (a standalone run's or a runtime container's).
    Container,
    /// A cgroup of `housekeeping.cgroups`.
    Housekeeping,
}

impl ForeignKind {
    /// The label value.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Housekeeping => "housekeeping",
        }
    }
}

/// The last foreign write found in one kept file, as `pinion ps` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignMark {
    pub from: String,
    pub to: String,
    pub at: SystemTime,
    /// True when Pinion wrote its value back (`otherWriters: repair`).
    pub repaired: bool,
}

impl std::fmt::Display for ForeignMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "changed by another writer at {}: {} -> {} ({})",
            httpdate::fmt_http_date(self.at),
            self.from,
            self.to,
            if self.repaired {
                "repaired"
            } else {
                "kept, otherWriters: report"
            }
        )
    }
}

/// The mode and the log's rate limit.
#[derive(Debug)]
pub(super) struct Foreign {
    pub(super) mode: OtherWriters,
    window: Option<Instant>,
    lines: u32,
    suppressed: u64,
}

impl Foreign {
    pub(super) fn new(mode: OtherWriters) -> Self {
        Self {
            mode,
            window: None,
            lines: 0,
            suppressed: 0,
        }
    }

    /// Whether a line may be logged now; the lines held back in the last
    /// window, to mention in it.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .window
            .is_none_or(|start| now.duration_since(start) >= LOG_WINDOW)
        {
            self.window = Some(now);
            self.lines = 0;
        }
        if self.lines >= LOG_LINES_PER_WINDOW {
            self.suppressed += 1;
            return None;
        }
        self.lines += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

impl Controller {
    /// Counts and logs one foreign write of `what` (a cgroup, with the pod
    /// and container for a container's), and returns its mark.
    pub(super) fn record_foreign<T: std::fmt::Display>(
        &mut self,
        kind: ForeignKind,
        what: &str,
        write: &ForeignWrite<T>,
        repaired: bool,
    ) -> ForeignMark {
        *self
            .counters
            .foreign_writes_total
            .entry(kind.name())
            .or_default() += 1;
        let mark = ForeignMark {
            from: write.from.to_string(),
            to: write.to.to_string(),
            at: SystemTime::now(),
            repaired,
        };
        if let Some(held_back) = self.foreign.admit(Instant::now()) {
            let more = if held_back > 0 {
                format!(" ({held_back} earlier foreign writes not logged: rate limit)")
            } else {
                String::new()
            };
            let action = if repaired {
                "writing Pinion's value back"
            } else {
                "keeping it (otherWriters: report)"
            };
            tracing::warn!(
                kind = kind.name(),
                "foreign write: {what}: {} -> {} found at {}; {action}{more}",
                mark.from,
                mark.to,
                httpdate::fmt_http_date(mark.at)
            );
        }
        mark
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_limited_per_window_and_counts_what_it_held_back() {
        let mut foreign = Foreign::new(OtherWriters::Repair);
        let start = Instant::now();
        for _ in 0..LOG_LINES_PER_WINDOW {
            assert_eq!(foreign.admit(start), Some(0));
        }
        assert_eq!(foreign.admit(start), None);
        assert_eq!(foreign.admit(start + Duration::from_secs(59)), None);
        // The next window's first line tells how many were held back.
        assert_eq!(foreign.admit(start + LOG_WINDOW), Some(2));
        assert_eq!(foreign.admit(start + LOG_WINDOW), Some(0));
    }

    #[test]
    fn a_mark_tells_from_to_when_and_what_pinion_did() {
        let mark = ForeignMark {
            from: "cpus 2-3".into(),
            to: "cpus 0-7".into(),
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(86_400),
            repaired: false,
        };
        assert_eq!(
            mark.to_string(),
            "changed by another writer at Fri, 02 Jan 1970 00:00:00 GMT: cpus 2-3 -> cpus 0-7 (kept, otherWriters: report)"
        );
    }
}
