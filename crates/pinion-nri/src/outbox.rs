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
//! A batch that only gives containers more ([`Urgency::Growth`]: the CPUs a
//! pod's stop or removal frees, back to the shared pool) takes nothing from
//! anyone, so it waits longer: for a carrier, or for [`Timing::idle`] of
//! quiet, at most [`Timing::growth_max_delay`]. On a slow node the gaps
//! between kubelet's calls for one pod are longer than `quiet`; an update
//! that can wait for the next pod's `CreateContainer` does not go out into
//! them. A prompt update takes every update queued before it along, and
//! everything queued leaves with a carrier: the runtime sees them in the
//! order they were queued.
//!
//! Unsolicited updates that take something away remain (the pools' closed
//! loop, a plugin's new answer, a repair of what another writer added);
//! the quiet wait makes their race with an event unlikely, not
//! impossible.
//!
//! The runtime answers no carried update: it applies them after it read the
//! reply, while it still holds the event's lock. So they count as applied
//! when the runtime's next request arrives (it took that lock again), or
//! [`Timing::carried_settle`] after the reply. Counted at once, the plugin's
//! reconcile pass read the cpuset before the runtime wrote it, took that for
//! a foreign write and undid nothing but its own update's order. Until then
//! nothing goes out unsolicited: containerd may still hold that lock (it
//! runs `runc update` per container, seconds each on a slow node), events
//! queue on it unseen, and an update sent into that deadlocks it. Both were
//! found in the TCG guest's pod churn: a 5 s settle time let the reconcile
//! pass take a cpuset containerd was still writing for a foreign write, and
//! its repair, sent after 2 s of apparent quiet, wedged containerd.

use std::collections::HashMap;
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
    /// How long the runtime must have sent no request before a
    /// [`Urgency::Growth`] batch goes out unsolicited.
    pub idle: Duration,
    /// How long a growth waits at most for a carrier or that idle time.
    pub growth_max_delay: Duration,
    /// How long after a reply its carried updates count as applied when no
    /// request of the runtime came first.
    pub carried_settle: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            quiet: Duration::from_secs(2),
            max_delay: Duration::from_secs(60),
            idle: Duration::from_secs(10),
            growth_max_delay: Duration::from_secs(300),
            carried_settle: Duration::from_secs(30),
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

/// Whether a batch of updates takes anything from a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// It may take CPUs, memory nodes or settings away: unsolicited after
    /// [`Timing::quiet`].
    Prompt,
    /// Each update only gives its container more CPUs or memory nodes than
    /// it may hold: unsolicited only after [`Timing::idle`].
    Growth,
}

#[derive(Debug)]
struct Queued {
    update: ContainerUpdate,
    urgency: Urgency,
    /// When the oldest update it stands for was queued.
    at: Instant,
    /// How many queued updates of the container it stands for (a newer
    /// one replaces the older: each names the container's whole placement).
    updates: usize,
}

/// Updates taken from the queue: at most one a container, and every
/// queued update's container, once per update (the caller reports each as
/// applied or failed, superseded ones included).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) updates: Vec<ContainerUpdate>,
    pub(crate) answered: Vec<String>,
}

impl Batch {
    fn of(queued: Vec<Queued>) -> Self {
        let mut batch = Self::default();
        for q in queued {
            let id = &q.update.container_id;
            batch
                .answered
                .extend(std::iter::repeat_n(id.clone(), q.updates));
            batch.updates.push(q.update);
        }
        batch
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.updates.is_empty()
    }
}

#[derive(Debug)]
struct State {
    /// In the order queued, one a container: containerd refuses a reply
    /// with two updates of one container that both set its CPUs
    /// ("plugins "90-pinion" and "90-pinion" both tried to set CPU
    /// pinning"), and fails the event that carried it.
    pending: Vec<Queued>,
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
    pub(crate) fn push(&self, updates: Vec<ContainerUpdate>, urgency: Urgency) {
        if updates.is_empty() {
            return;
        }
        let at = Instant::now();
        let mut state = self.state();
        let mut slot: HashMap<String, usize> = state
            .pending
            .iter()
            .enumerate()
            .map(|(i, q)| (q.update.container_id.clone(), i))
            .collect();
        let mut queue: Vec<Option<Queued>> = std::mem::take(&mut state.pending)
            .into_iter()
            .map(Some)
            .collect();
        for update in updates {
            let mut new = Queued {
                update,
                urgency,
                at,
                updates: 1,
            };
            // The newer update replaces the older one and goes last: it is
            // the container's placement now, whatever the older one held.
            if let Some(old) = slot
                .get(&new.update.container_id)
                .and_then(|i| queue[*i].take())
            {
                new.at = old.at;
                new.updates += old.updates;
                if old.urgency == Urgency::Prompt {
                    new.urgency = Urgency::Prompt;
                }
            }
            slot.insert(new.update.container_id.clone(), queue.len());
            queue.push(Some(new));
        }
        state.pending = queue.into_iter().flatten().collect();
        drop(state);
        self.queued.notify_one();
    }

    /// Takes every waiting update except those of `keep` (a container the
    /// runtime does not list yet), which stay queued.
    pub(crate) fn take_except(&self, keep: Option<&str>) -> Batch {
        let mut state = self.state();
        let (kept, taken): (Vec<_>, Vec<_>) = std::mem::take(&mut state.pending)
            .into_iter()
            .partition(|q| Some(q.update.container_id.as_str()) == keep);
        state.pending = kept;
        Batch::of(taken)
    }

    /// Drops every waiting update and what was carried (a new connection's
    /// `Synchronize` sends the whole truth again).
    pub(crate) fn clear(&self) {
        let mut state = self.state();
        state.pending.clear();
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
    /// unsolicited. The caller then holds the handler gate and takes them
    /// with [`Outbox::take_if_due`]: taken before, a batch waiting for a
    /// handler to end would reach the runtime after that handler's reply,
    /// which carries newer updates.
    pub(crate) async fn unsolicited_due(&self, timing: Timing) {
        self.when_due(&self.queued, |state| state.unsolicited_due(timing), |_| ())
            .await;
    }

    /// Takes every waiting update if `timing` still lets them leave
    /// unsolicited (a handler that ran since [`Outbox::unsolicited_due`]
    /// returned made the runtime busy again, or its reply carried them):
    /// nothing otherwise.
    pub(crate) fn take_if_due(&self, timing: Timing) -> Batch {
        let mut state = self.state();
        let now = Instant::now();
        if state.unsolicited_due(timing).is_none_or(|at| now < at) {
            return Batch::default();
        }
        let pending = std::mem::take(&mut state.pending);
        let growth = pending.iter().all(|q| q.urgency == Urgency::Growth);
        let waited = pending.iter().map(|q| now - q.at).max().unwrap_or_default();
        let batch = Batch::of(pending);
        tracing::info!(
            containers = ?batch.updates.iter().map(|u| u.container_id.as_str()).collect::<Vec<_>>(),
            urgency = ?if growth { Urgency::Growth } else { Urgency::Prompt },
            quiet_for = ?now - state.last_request,
            waited = ?waited,
            "sending queued container updates unsolicited"
        );
        batch
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

impl State {
    /// When what is queued may leave unsolicited: the earliest of the
    /// prompt updates' due time and the growths'; `None` when nothing is
    /// queued.
    fn unsolicited_due(&self, timing: Timing) -> Option<Instant> {
        let oldest = |urgency: Urgency| {
            self.pending
                .iter()
                .filter(|q| q.urgency == urgency)
                .map(|q| q.at)
                .min()
        };
        let prompt = oldest(Urgency::Prompt)
            .map(|at| (self.last_request + timing.quiet).min(at + timing.max_delay));
        let growth = oldest(Urgency::Growth)
            .map(|at| (self.last_request + timing.idle).min(at + timing.growth_max_delay));
        let due = match (prompt, growth) {
            (Some(p), Some(g)) => Some(p.min(g)),
            (p, g) => p.or(g),
        }?;
        // containerd applies a reply's updates holding the lock an event
        // takes first: until its next request shows it let go (or the
        // settle time passed), it may still be applying them, and events
        // queue on that lock unseen. An update sent then waits for that
        // lock holding the other one, and the first queued event takes the
        // lock and waits for the other: the deadlock, whatever the quiet.
        Some(match self.carried_at {
            Some(carried) => due.max(carried + timing.carried_settle),
            None => due,
        })
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
            order: 0,
        }
    }

    fn ids(batch: &Batch) -> Vec<&str> {
        batch
            .updates
            .iter()
            .map(|u| u.container_id.as_str())
            .collect()
    }

    /// What the plugin's loop sends unsolicited next (with no handler
    /// running).
    async fn next_unsolicited(outbox: &Outbox, timing: Timing) -> Batch {
        loop {
            outbox.unsolicited_due(timing).await;
            let batch = outbox.take_if_due(timing);
            if !batch.is_empty() {
                return batch;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn updates_wait_for_the_runtime_to_be_quiet() {
        let outbox = Outbox::new();
        let timing = Timing {
            quiet: Duration::from_millis(500),
            max_delay: Duration::from_secs(5),
            ..Timing::default()
        };
        outbox.push(vec![update("a")], Urgency::Prompt);
        let started = tokio::time::Instant::now();
        outbox.request_seen();
        let taken = next_unsolicited(&outbox, timing).await;
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
        outbox.push(vec![update("a")], Urgency::Prompt);
        let taken = next_unsolicited(&outbox, timing).await;
        requests.abort();
        assert_eq!(ids(&taken), ["a"]);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2100),
            "left after {waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn regression_a_growth_waits_for_the_idle_time_not_the_quiet() {
        // Before: a pod's removal grew the shared pool unsolicited after
        // `quiet`; on a slow node (TCG), kubelet's calls for the next pod
        // were further apart than that, and the update met one of them.
        let outbox = std::sync::Arc::new(Outbox::new());
        let timing = Timing::default();
        let slow = std::sync::Arc::clone(&outbox);
        let requests = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(timing.quiet * 2).await;
                slow.request_seen();
            }
        });
        let started = tokio::time::Instant::now();
        outbox.request_seen();
        outbox.push(vec![update("a")], Urgency::Growth);
        let taken = next_unsolicited(&outbox, timing).await;
        requests.await.unwrap();
        assert_eq!(ids(&taken), ["a"]);
        assert_eq!(
            started.elapsed(),
            timing.quiet * 6 + timing.idle,
            "left `idle` after the last of the slow requests"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_runtime_delays_a_growth_at_most_growth_max_delay() {
        let outbox = std::sync::Arc::new(Outbox::new());
        let timing = Timing::default();
        let busy = std::sync::Arc::clone(&outbox);
        let requests = tokio::spawn(async move {
            loop {
                busy.request_seen();
                tokio::time::sleep(timing.quiet * 2).await;
            }
        });
        let started = tokio::time::Instant::now();
        outbox.push(vec![update("a")], Urgency::Growth);
        let taken = next_unsolicited(&outbox, timing).await;
        requests.abort();
        assert_eq!(ids(&taken), ["a"]);
        assert_eq!(started.elapsed(), timing.growth_max_delay);
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_update_takes_the_growths_queued_before_it_along() {
        let outbox = Outbox::new();
        let timing = Timing::default();
        outbox.push(vec![update("grows")], Urgency::Growth);
        tokio::time::sleep(timing.quiet / 2).await;
        outbox.push(vec![update("shrinks")], Urgency::Prompt);
        let started = tokio::time::Instant::now();
        outbox.request_seen();
        let taken = next_unsolicited(&outbox, timing).await;
        assert_eq!(ids(&taken), ["grows", "shrinks"], "in the order queued");
        assert_eq!(started.elapsed(), timing.quiet);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_after_the_due_time_keeps_the_updates_queued() {
        let outbox = Outbox::new();
        let timing = Timing::default();
        outbox.push(vec![update("a")], Urgency::Prompt);
        outbox.request_seen();
        outbox.unsolicited_due(timing).await;
        outbox.request_seen();
        assert!(
            outbox.take_if_due(timing).is_empty(),
            "the runtime is busy again"
        );
        assert_eq!(ids(&outbox.take_except(None)), ["a"], "still queued");
    }

    #[tokio::test(start_paused = true)]
    async fn regression_nothing_leaves_unsolicited_while_a_carried_batch_may_be_applied() {
        // Before: 2 s after a reply carried updates, a repair went out
        // unsolicited while containerd (in a TCG guest) was still applying
        // them under its lock, with events queued behind it: deadlocked.
        let outbox = Outbox::new();
        let timing = Timing::default();
        outbox.request_seen();
        outbox.carried(vec!["shared".to_string()]);
        let started = tokio::time::Instant::now();
        outbox.push(vec![update("repair")], Urgency::Prompt);
        assert_eq!(ids(&next_unsolicited(&outbox, timing).await), ["repair"]);
        assert_eq!(
            started.elapsed(),
            timing.carried_settle,
            "waited for the carried batch to settle, not the quiet"
        );
        assert_eq!(outbox.settled(timing).await, ["shared"]);

        // The runtime's next request shows it applied them: the quiet again.
        outbox.carried(vec!["shared".to_string()]);
        outbox.push(vec![update("repair")], Urgency::Prompt);
        tokio::time::sleep(timing.quiet / 2).await;
        outbox.request_seen();
        assert_eq!(outbox.take_applied(), ["shared"]);
        let started = tokio::time::Instant::now();
        assert_eq!(ids(&next_unsolicited(&outbox, timing).await), ["repair"]);
        assert_eq!(started.elapsed(), timing.quiet);
    }

    #[test]
    fn a_carrier_takes_growths_and_prompt_updates_in_order() {
        let outbox = Outbox::new();
        outbox.push(vec![update("a")], Urgency::Prompt);
        outbox.push(vec![update("b")], Urgency::Growth);
        outbox.push(vec![update("c")], Urgency::Prompt);
        assert_eq!(ids(&outbox.take_except(None)), ["a", "b", "c"]);
    }

    #[test]
    fn a_carrier_takes_all_but_the_container_being_created() {
        let outbox = Outbox::new();
        outbox.push(
            vec![update("a"), update("new"), update("b")],
            Urgency::Prompt,
        );
        assert_eq!(ids(&outbox.take_except(Some("new"))), ["a", "b"]);
        assert_eq!(ids(&outbox.take_except(None)), ["new"]);
        assert!(outbox.take_except(None).is_empty());
    }

    #[test]
    fn regression_a_container_is_queued_once_with_its_newest_update() {
        // Before: a pod's removal queued a growth of the shared container,
        // the next exclusive pod's admission a shrink of it, and the
        // CreateContainer reply carried both; containerd 1.7 refused the
        // pod ("plugins "90-pinion" and "90-pinion" both tried to set CPU
        // pinning"), in the cluster bed's node.
        let outbox = Outbox::new();
        let grown = ContainerUpdate {
            container_id: "shared".to_string(),
            placement: Placement::shared(pinion_core::CpuSet::parse_list("0-7").unwrap()),
            order: 0,
        };
        let shrunk = ContainerUpdate {
            container_id: "shared".to_string(),
            placement: Placement::shared(pinion_core::CpuSet::parse_list("0-5").unwrap()),
            order: 0,
        };
        outbox.push(vec![grown, update("a")], Urgency::Growth);
        outbox.push(vec![shrunk.clone()], Urgency::Prompt);
        let batch = outbox.take_except(None);
        assert_eq!(ids(&batch), ["a", "shared"], "the newer one, last");
        assert_eq!(batch.updates[1], shrunk);
        assert_eq!(batch.answered, ["a", "shared", "shared"], "both answered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replaced_update_keeps_its_wait_and_the_stricter_urgency() {
        let outbox = Outbox::new();
        let timing = Timing::default();
        outbox.push(vec![update("shared")], Urgency::Prompt);
        tokio::time::sleep(timing.max_delay / 2).await;
        outbox.push(vec![update("shared")], Urgency::Growth);
        outbox.request_seen();
        let started = tokio::time::Instant::now();
        let busy = std::sync::Arc::new(outbox);
        let requests = {
            let busy = std::sync::Arc::clone(&busy);
            tokio::spawn(async move {
                loop {
                    busy.request_seen();
                    tokio::time::sleep(timing.quiet / 2).await;
                }
            })
        };
        let batch = next_unsolicited(&busy, timing).await;
        requests.abort();
        assert_eq!(batch.answered, ["shared", "shared"]);
        assert_eq!(
            started.elapsed(),
            timing.max_delay / 2,
            "a prompt update's bound from when the first was queued"
        );
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
