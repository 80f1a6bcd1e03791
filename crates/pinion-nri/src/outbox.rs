//! Owns the container updates waiting to reach the runtime, and when they
//! may leave.
//!
//! containerd 1.7 (its NRI before the fix of containerd/containerd#13733)
//! takes its two NRI locks in opposite orders: a lifecycle event takes the
//! CRI side's lock, then the adaptation's; a plugin's unsolicited
//! `UpdateContainers` takes the adaptation's, then the CRI side's. An
//! unsolicited update that meets an event starting at the same moment
//! deadlocks containerd's NRI for good: no pod starts or stops on the node
//! until containerd restarts. So an update goes out in one of two ways:
//!
//! * **carried** in the reply to the next `CreateContainer`,
//!   `UpdateContainer` or `StopContainer`, which containerd applies under the
//!   lock it already holds (no second lock, no race). An admission's own
//!   updates (the shared pool shrinking) and a stop's (the pool growing)
//!   always go this way;
//! * **unsolicited**, only once the runtime has sent no request for
//!   [`Timing::quiet`] (kubelet's calls for one pod come in bursts), or once
//!   the oldest update has waited [`Timing::max_delay`].
//!
//! Unsolicited updates that cannot wait for a carrier remain (a pod's stop
//! or removal, the pools' closed loop, a plugin's new answer); the quiet
//! wait makes their race with an event unlikely, not impossible.
//!
//! The runtime answers no carried update: it applies them after it read the
//! reply, while it still holds the event's lock. So they count as applied
//! when the runtime's next request arrives (it took that lock again), or
//! [`Timing::carried_settle`] after the reply. Counted at once, the plugin's
//! reconcile pass read the cpuset before the runtime wrote it, took that for
//! a foreign write and undid nothing but its own update's order.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::model::ContainerUpdate;

/// When unsolicited updates may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long the runtime must have sent no request.
    pub quiet: Duration,
    /// How long an update waits at most for that quiet.
    pub max_delay: Duration,
    /// How long after a reply its carried updates count as applied when no
    /// request of the runtime came first.
    pub carried_settle: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            quiet: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
            carried_settle: Duration::from_secs(5),
        }
    }
}

/// The updates waiting for one plugin, across its connections.
#[derive(Debug)]
pub(crate) struct Outbox {
    state: Mutex<State>,
    queued: Notify,
    carried: Notify,
}

#[derive(Debug)]
struct State {
    pending: Vec<ContainerUpdate>,
    /// When the oldest pending update was queued.
    oldest: Option<Instant>,
    /// When the runtime's last request started or was answered.
    last_request: Instant,
    /// The containers of updates carried in replies, not yet applied.
    unconfirmed: Vec<String>,
    /// When the last of them was carried.
    carried_at: Option<Instant>,
}

impl Outbox {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                pending: Vec::new(),
                oldest: None,
                last_request: Instant::now(),
                unconfirmed: Vec::new(),
                carried_at: None,
            }),
            queued: Notify::new(),
            carried: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `updates` (in order, after those already waiting).
    pub(crate) fn push(&self, updates: Vec<ContainerUpdate>) {
        if updates.is_empty() {
            return;
        }
        let mut state = self.state();
        state.pending.extend(updates);
        state.oldest.get_or_insert_with(Instant::now);
        drop(state);
        self.queued.notify_one();
    }

    /// Takes every waiting update except those of `keep` (a container the
    /// runtime does not list yet), which stay queued.
    pub(crate) fn take_except(&self, keep: Option<&str>) -> Vec<ContainerUpdate> {
        let mut state = self.state();
        let (kept, taken): (Vec<_>, Vec<_>) = std::mem::take(&mut state.pending)
            .into_iter()
            .partition(|u| Some(u.container_id.as_str()) == keep);
        if kept.is_empty() {
            state.oldest = None;
        }
        state.pending = kept;
        taken
    }

    /// Drops every waiting update and what was carried (a new connection's
    /// `Synchronize` sends the whole truth again).
    pub(crate) fn clear(&self) {
        let mut state = self.state();
        state.pending.clear();
        state.oldest = None;
        state.unconfirmed.clear();
        state.carried_at = None;
    }

    /// The runtime sent a request, or it was answered.
    pub(crate) fn request_seen(&self) {
        self.state().last_request = Instant::now();
    }

    /// Updates of `container_ids` went out in a reply.
    pub(crate) fn carried(&self, container_ids: Vec<String>) {
        if container_ids.is_empty() {
            return;
        }
        let mut state = self.state();
        state.unconfirmed.extend(container_ids);
        state.carried_at = Some(Instant::now());
        drop(state);
        self.carried.notify_one();
    }

    /// The runtime sent a new request: what earlier replies carried is
    /// applied. Returns those containers (an id once per update).
    pub(crate) fn take_applied(&self) -> Vec<String> {
        let mut state = self.state();
        state.carried_at = None;
        std::mem::take(&mut state.unconfirmed)
    }

    /// Waits until carried updates have waited `timing.carried_settle`
    /// without a request of the runtime, and takes them as applied.
    pub(crate) async fn settled(&self, timing: Timing) -> Vec<String> {
        self.when_due(
            &self.carried,
            |state| state.carried_at.map(|at| at + timing.carried_settle),
            |state| {
                state.carried_at = None;
                std::mem::take(&mut state.unconfirmed)
            },
        )
        .await
    }

    /// Waits until updates are queued and `timing` lets them leave
    /// unsolicited, and takes them.
    pub(crate) async fn next_unsolicited(&self, timing: Timing) -> Vec<ContainerUpdate> {
        self.when_due(
            &self.queued,
            |state| {
                let quiet = state.last_request + timing.quiet;
                state
                    .oldest
                    .map(|oldest| quiet.min(oldest + timing.max_delay))
            },
            |state| {
                state.oldest = None;
                std::mem::take(&mut state.pending)
            },
        )
        .await
    }

    /// Waits until the time `due` reads from the state has come (`None`:
    /// nothing to wait for until `woken` is notified), then returns what
    /// `take` takes from the state.
    async fn when_due<T>(
        &self,
        woken: &Notify,
        due: impl Fn(&State) -> Option<Instant>,
        take: impl FnOnce(&mut State) -> T,
    ) -> T {
        loop {
            let notified = woken.notified();
            let at = {
                let mut state = self.state();
                match due(&state) {
                    Some(at) if Instant::now() >= at => return take(&mut state),
                    at => at,
                }
            };
            match at {
                None => notified.await,
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinion_core::Placement;

    fn update(id: &str) -> ContainerUpdate {
        ContainerUpdate {
            container_id: id.to_string(),
            placement: Placement::default(),
        }
    }

    fn ids(updates: &[ContainerUpdate]) -> Vec<&str> {
        updates.iter().map(|u| u.container_id.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn updates_wait_for_the_runtime_to_be_quiet() {
        let outbox = Outbox::new();
        let timing = Timing {
            quiet: Duration::from_millis(500),
            max_delay: Duration::from_secs(5),
            ..Timing::default()
        };
        outbox.push(vec![update("a")]);
        let started = tokio::time::Instant::now();
        outbox.request_seen();
        let taken = outbox.next_unsolicited(timing).await;
        assert_eq!(ids(&taken), ["a"]);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(500) && waited < Duration::from_millis(600),
            "left {waited:?} after the last request"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_runtime_delays_updates_at_most_max_delay() {
        let outbox = std::sync::Arc::new(Outbox::new());
        let timing = Timing {
            quiet: Duration::from_millis(500),
            max_delay: Duration::from_secs(2),
            ..Timing::default()
        };
        let busy = std::sync::Arc::clone(&outbox);
        let requests = tokio::spawn(async move {
            loop {
                busy.request_seen();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let started = tokio::time::Instant::now();
        outbox.push(vec![update("a")]);
        let taken = outbox.next_unsolicited(timing).await;
        requests.abort();
        assert_eq!(ids(&taken), ["a"]);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2100),
            "left after {waited:?}"
        );
    }

    #[test]
    fn a_carrier_takes_all_but_the_container_being_created() {
        let outbox = Outbox::new();
        outbox.push(vec![update("a"), update("new"), update("b")]);
        assert_eq!(ids(&outbox.take_except(Some("new"))), ["a", "b"]);
        assert_eq!(ids(&outbox.take_except(None)), ["new"]);
        assert!(outbox.take_except(None).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn carried_updates_are_applied_at_the_next_request_or_after_the_settle_time() {
        let outbox = Outbox::new();
        let timing = Timing::default();
        outbox.carried(vec!["a".to_string(), "b".to_string()]);
        assert_eq!(outbox.take_applied(), ["a", "b"], "the next request");
        assert!(outbox.take_applied().is_empty());
        let started = tokio::time::Instant::now();
        outbox.carried(vec!["c".to_string()]);
        assert_eq!(outbox.settled(timing).await, ["c"]);
        assert_eq!(started.elapsed(), timing.carried_settle);
    }
}
