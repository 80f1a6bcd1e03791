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

/// Log lines at most this often; the stalls between are counted in the
/// next line.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Ticks every `tick` until `stop` turns true and calls `stalled` with how
/// long the thread was held whenever a tick came more than `over` late.
pub async fn watch(
    tick: Duration,
    over: Duration,
    mut stop: watch::Receiver<bool>,
    mut stalled: impl FnMut(Duration),
) {
    let mut due = Instant::now() + tick;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(due.into()) => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        let late = now.saturating_duration_since(due);
        if late > over {
            stalled(late);
        }
        due = now + tick;
    }
}

/// [`watch`] with the daemon's tick and threshold, logging each stall (at
/// most one line per 30 s; the ones held back are counted in it).
pub async fn log_stalls(stop: watch::Receiver<bool>) {
    let mut last_line: Option<Instant> = None;
    let mut held_back = 0u64;
    watch(TICK, REPORT_OVER, stop, |late| {
        let now = Instant::now();
        if last_line.is_some_and(|at| now.duration_since(at) < LOG_EVERY) {
            held_back += 1;
            return;
        }
        last_line = Some(now);
        tracing::warn!(
            held = ?late,
            earlier_stalls_not_logged = std::mem::take(&mut held_back),
            "the agent's async thread was held for {late:?}: NRI answers, the local API and the probes waited (a slow or starved node, or blocking work on that thread)"
        );
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A thread held by blocking work is reported with at least the time
    /// it was held beyond the tick; a thread that only waits is not.
    #[test]
    fn a_held_thread_is_reported_and_an_idle_one_is_not() {
        let runtime = super::super::runtime().expect("runtime");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop_tx, stop_rx) = watch::channel(false);
        let tick = Duration::from_millis(20);
        let over = Duration::from_millis(800);
        runtime.block_on(async {
            let record = Arc::clone(&seen);
            let watcher = tokio::spawn(watch(tick, over, stop_rx, move |late| {
                record.lock().expect("lock").push(late);
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
}
