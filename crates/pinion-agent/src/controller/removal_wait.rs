//! Owns how long a release waits for the resource plugins to hear of the pod's removal.
//!
//! How long a release waits for the resource plugins to hear of the pod's
//! removal: until they all did, at most [`REMOVAL_WAIT`], and not at all
//! while no removal loop runs to tell them (stopped, or never started) —
//! then nobody would take the pod off the list within the wait.

use std::time::Duration;

use tokio::sync::watch;

/// How long a release waits for the resource plugins to hear that the pod
/// left ([`super::ControllerHandle::release`]); a slower plugin is left to
/// the removal loop, which retries until every plugin answered.
pub const REMOVAL_WAIT: Duration = Duration::from_secs(1);

/// How a release's wait for the plugins ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovalWait {
    /// Every plugin heard of it (or none had to).
    Heard,
    /// No removal loop runs: the plugins hear of it when one does.
    NoLoop,
    /// [`REMOVAL_WAIT`] passed; the removal loop goes on.
    TimedOut,
}

/// Waits until `pod` is off `pending` (the pods whose plugins have yet to
/// hear of their removal), at most [`REMOVAL_WAIT`], and only while
/// `running` (the removal loop's flag, see [`crate::qrm::LoopRunning`]) is
/// true.
pub async fn await_removal(
    mut pending: watch::Receiver<Vec<String>>,
    mut running: watch::Receiver<bool>,
    pod: &str,
) -> RemovalWait {
    let heard = pending.wait_for(|pods| !pods.iter().any(|p| p == pod));
    let gone = running.wait_for(|running| !*running);
    tokio::select! {
        biased;
        _ = heard => RemovalWait::Heard,
        _ = gone => RemovalWait::NoLoop,
        () = tokio::time::sleep(REMOVAL_WAIT) => RemovalWait::TimedOut,
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::qrm::LoopRunning;

    /// Regression (issue 27, item 10h): a release waited the whole second
    /// for plugins to hear of the pod even when the removal loop that tells
    /// them had stopped. Now it answers at once (paused time: a wait would
    /// show as a virtual second).
    #[tokio::test(start_paused = true)]
    async fn regression_a_release_after_the_removal_loop_stopped_answers_at_once() {
        let (_pending_tx, pending) = watch::channel(vec!["pod-a".to_string()]);
        let flag = watch::channel(false).0;
        let started = Instant::now();
        {
            let _loop = LoopRunning::new(&flag);
            assert!(*flag.borrow(), "running while the loop lives");
        }
        let waited = await_removal(pending, flag.subscribe(), "pod-a").await;
        assert_eq!(waited, RemovalWait::NoLoop);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_waits_for_the_plugins_while_the_loop_runs() {
        let (pending_tx, pending) = watch::channel(vec!["pod-a".to_string()]);
        let flag = watch::channel(false).0;
        let _loop = LoopRunning::new(&flag);
        let started = Instant::now();
        let waited = await_removal(pending.clone(), flag.subscribe(), "pod-a").await;
        assert_eq!(waited, RemovalWait::TimedOut);
        assert_eq!(started.elapsed(), REMOVAL_WAIT);
        // Heard before the wait ends.
        let started = Instant::now();
        let heard = tokio::spawn({
            let running = flag.subscribe();
            async move { await_removal(pending, running, "pod-a").await }
        });
        tokio::task::yield_now().await;
        pending_tx.send_replace(Vec::new());
        assert_eq!(heard.await.expect("joined"), RemovalWait::Heard);
        assert!(started.elapsed() < REMOVAL_WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_stopping_during_the_wait_ends_it() {
        let (_pending_tx, pending) = watch::channel(vec!["pod-a".to_string()]);
        let flag = watch::channel(false).0;
        let guard = LoopRunning::new(&flag);
        let started = Instant::now();
        let waiting = tokio::spawn({
            let running = flag.subscribe();
            async move { await_removal(pending, running, "pod-a").await }
        });
        tokio::task::yield_now().await;
        drop(guard);
        assert_eq!(waiting.await.expect("joined"), RemovalWait::NoLoop);
        assert!(started.elapsed() < REMOVAL_WAIT);
    }
}
