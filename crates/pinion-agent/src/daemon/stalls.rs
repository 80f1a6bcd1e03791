//! Owns the watch of the agent's one async thread: how long it was held.
//!
//! The local API, the NRI front-end, podresources, `/metrics`, the API-server
//! clients and the resource manager's loops share one thread
//! ([`super::runtime`]). Work that holds it (a blocking call, a long
//! computation, a starved node) delays every one of them, and an NRI answer
//! that misses the runtime's request timeout gets Pinion dropped and the
//! container created without its cpuset. Nothing else would tell: this watch
//! ticks on the same thread and logs how late a tick came.

use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How often the watch ticks.
pub const TICK: Duration = Duration::from_millis(250);

/// A tick this much later than due is a stall worth a log line: half of
/// containerd's default NRI request timeout (2 s).
pub const REPORT_OVER: Duration = Duration::from_secs(1);

/// Log lines at most this often; the stalls between are summed up in the
/// next line, or in a line of their own once this much time has passed.
pub const LOG_EVERY: Duration = Duration::from_secs(30);

/// Ticks every `tick` until `stop` turns true and calls `ticked` with how
/// late each tick came (how long the thread was held beyond it).
pub async fn watch(
    tick: Duration,
    mut stop: watch::Receiver<bool>,
    mut ticked: impl FnMut(Duration),
) {
    let mut due = Instant::now() + tick;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(due.into()) => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        ticked(now.saturating_duration_since(due));
        due = now + tick;
    }
}

/// What a tick asks to be logged.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The thread was held for `held`; `earlier` stalls since the last line
    /// were not logged, the longest of them `longest_earlier`.
    Stall {
        held: Duration,
        earlier: u64,
        longest_earlier: Duration,
    },
    /// No stall now, but `count` stalls since the last line were not
    /// logged, the longest `longest`.
    HeldBack { count: u64, longest: Duration },
}

/// Which stalls get a log line: every stall over the threshold, at most one
/// line per period; none is dropped, the ones held back are counted in the
/// next line.
#[derive(Debug)]
pub struct StallLog {
    over: Duration,
    every: Duration,
    last_line: Option<Instant>,
    held_back: u64,
    longest_held_back: Duration,
}

impl StallLog {
    pub fn new(over: Duration, every: Duration) -> Self {
        StallLog {
            over,
            every,
            last_line: None,
            held_back: 0,
            longest_held_back: Duration::ZERO,
        }
    }

    /// A tick came `late` at `now`: the line to log, if any.
    pub fn tick(&mut self, now: Instant, late: Duration) -> Option<Line> {
        let stalled = late > self.over;
        if !stalled && self.held_back == 0 {
            return None;
        }
        let quiet = self
            .last_line
            .is_none_or(|at| now.saturating_duration_since(at) >= self.every);
        if !quiet {
            if stalled {
                self.held_back += 1;
                self.longest_held_back = self.longest_held_back.max(late);
            }
            return None;
        }
        self.last_line = Some(now);
        let earlier = std::mem::take(&mut self.held_back);
        let longest_earlier = std::mem::take(&mut self.longest_held_back);
        Some(if stalled {
            Line::Stall {
                held: late,
                earlier,
                longest_earlier,
            }
        } else {
            Line::HeldBack {
                count: earlier,
                longest: longest_earlier,
            }
        })
    }
}

/// [`watch`] with the daemon's tick, logging the stalls [`StallLog`] picks.
pub async fn log_stalls(stop: watch::Receiver<bool>) {
    let mut log = StallLog::new(REPORT_OVER, LOG_EVERY);
    watch(TICK, stop, |late| match log.tick(Instant::now(), late) {
        Some(Line::Stall { held, earlier, longest_earlier }) => tracing::warn!(
            held = ?held,
            earlier_stalls_not_logged = earlier,
            longest_not_logged = ?longest_earlier,
            "the agent's async thread was held for {held:?}: NRI answers, the local API and the probes waited (a slow or starved node, or blocking work on that thread)"
        ),
        Some(Line::HeldBack { count, longest }) => tracing::warn!(
            stalls = count,
            longest = ?longest,
            "the agent's async thread was held {count} more times over {REPORT_OVER:?} since the last such line, the longest for {longest:?}"
        ),
        None => {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A thread held by blocking work is seen late by at least the time it
    /// was held beyond the tick; a thread that only waits is not.
    #[test]
    fn a_held_thread_is_reported_and_an_idle_one_is_not() {
        let runtime = super::super::runtime().expect("runtime");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop_tx, stop_rx) = watch::channel(false);
        let tick = Duration::from_millis(20);
        let over = Duration::from_millis(800);
        runtime.block_on(async {
            let record = Arc::clone(&seen);
            let watcher = tokio::spawn(watch(tick, stop_rx, move |late| {
                if late > over {
                    record.lock().expect("lock").push(late);
                }
            }));
            // Idle: the watch ticks on time.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                seen.lock().expect("lock").is_empty(),
                "an idle thread is not held"
            );
            // Held: the thread blocks (as a blocking call in a task would).
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(2000));
            tokio::time::sleep(tick * 3).await;
            stop_tx.send(true).expect("stop");
            watcher.await.expect("the watch ends at stop");
        });
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.len(), 1, "one stall: {seen:?}");
        assert!(
            seen[0] >= Duration::from_millis(2000) - tick,
            "held at least the blocked time less one tick: {:?}",
            seen[0]
        );
    }

    /// Stalls within a period of the last line are counted, not dropped:
    /// the next stall's line carries them, and without a next stall a line
    /// of their own comes once the period is over.
    #[test]
    fn regression_stalls_held_back_by_the_rate_limit_are_logged_later() {
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut log = StallLog::new(s(1), s(30));
        assert_eq!(
            log.tick(t0, Duration::from_millis(900)),
            None,
            "under the threshold"
        );
        assert_eq!(
            log.tick(t0 + s(1), s(2)),
            Some(Line::Stall {
                held: s(2),
                earlier: 0,
                longest_earlier: Duration::ZERO
            })
        );
        assert_eq!(log.tick(t0 + s(5), s(3)), None, "held back");
        assert_eq!(log.tick(t0 + s(9), s(4)), None, "held back");
        assert_eq!(
            log.tick(t0 + s(20), Duration::ZERO),
            None,
            "still within the period"
        );
        assert_eq!(
            log.tick(t0 + s(31), Duration::ZERO),
            Some(Line::HeldBack {
                count: 2,
                longest: s(4)
            }),
            "the held-back stalls get their own line once the period is over"
        );
        assert_eq!(
            log.tick(t0 + s(62), Duration::ZERO),
            None,
            "nothing left to say"
        );
        assert_eq!(
            log.tick(t0 + s(63), s(5)),
            Some(Line::Stall {
                held: s(5),
                earlier: 0,
                longest_earlier: Duration::ZERO
            })
        );
        assert_eq!(log.tick(t0 + s(64), s(6)), None);
        assert_eq!(
            log.tick(t0 + s(94), s(7)),
            Some(Line::Stall {
                held: s(7),
                earlier: 1,
                longest_earlier: s(6)
            }),
            "a later stall's line counts the ones held back"
        );
    }
}
