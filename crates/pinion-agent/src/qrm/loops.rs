//! The manager's loops and what they need from whoever keeps the plugins'
//! allocations ([`AllocationKeeper`]; the daemon's wiring implements it for
//! the controller and spawns the loops, so this module never names it).
//!
//! * the reconcile loop polls the plugins every period (and at once when
//!   asked, [`Qrm::request_reconcile`]), hands their answers to the keeper,
//!   which applies only what changed, and re-allocates the containers a
//!   plugin forgot; each period it also forgets the plugins stopped for
//!   longer than their grace period whose resource no allocation names;
//! * the removal loop tells every plugin of each departed pod, retrying
//!   with back-off until all of them answered (§4.10);
//! * the flush backstop makes the built-in plugins' state changes durable
//!   when no admission's flush took them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pinion_core::plugin_allocation::PluginAllocations;
use pinion_core::pod::Pod;
use pinion_core::topomgr::TopologyHint;
use tokio::sync::watch;

use super::{Poll, Qrm};

/// How long a plugin's state change may wait for a flush that an
/// admission would make anyway, before the backstop flushes it.
const BACKSTOP_DELAY: Duration = Duration::from_millis(50);

/// What the loops need from the keeper of the plugins' allocations (the
/// controller): merge a reconcile poll, store a re-allocation, the pods
/// whose plugins have yet to hear of their removal, and a flush of the
/// built-in plugins' state.
pub trait AllocationKeeper: Send + Sync + 'static {
    /// Why the keeper could not do what it was asked (logged by the loops).
    type Error: Display + Send;

    /// Merges one reconcile poll (resource → what its plugin answered,
    /// taken at `polled_at`) into the allocations and applies what changed.
    fn apply_polls(
        &self,
        polls: Vec<(String, Poll)>,
        polled_at: Instant,
    ) -> impl Future<Output = Result<Reconciled, Self::Error>> + Send;

    /// Stores the plugins' new answer for container `key` (pod UID,
    /// container name), allocated again for `resources`.
    fn record_reallocation(
        &self,
        key: (String, String),
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The containers whose plugin answers the keeper keeps (a reconcile
    /// poll drops every other entry as it reads the answer,
    /// [`Qrm::poll_for`]); `None`: every entry is kept.
    fn known_containers(&self) -> Option<super::KnownContainers> {
        None
    }

    /// The resources the stored allocations name: a stopped plugin of one
    /// of them stays in the table (pods asking for it are refused until it
    /// registers again); others are forgotten after their grace period
    /// (`Registry::forget_stopped`). Empty by default.
    fn allocated_resources(&self) -> BTreeSet<String> {
        BTreeSet::new()
    }

    /// The pods (UIDs) whose plugins have yet to hear of their removal;
    /// changes whenever that list does.
    fn pending_removals(&self) -> watch::Receiver<Vec<String>>;

    /// Every plugin heard that pod `uid` left.
    fn pod_removed(&self, uid: String) -> impl Future<Output = ()> + Send;

    /// Makes the built-in plugins' waiting state changes durable.
    fn flush_plugin_state(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// A container a plugin forgot, to be allocated again.
#[derive(Debug, Clone)]
pub struct Reallocation {
    pub pod: Pod,
    pub container: String,
    /// The affinity its admission merged (the hint `Allocate` gets again).
    pub affinity: Option<TopologyHint>,
}

/// What the keeper did with one reconcile poll.
#[derive(Debug, Clone, Default)]
pub struct Reconciled {
    /// Resource → containers whose allocation changed.
    pub changed: BTreeMap<String, u64>,
    pub reallocate: Vec<Reallocation>,
}

/// Holds a loop's "running" flag true while it lives (the loop's future
/// owns it: the flag turns false when the loop ends, is aborted or panics).
#[derive(Debug)]
pub struct LoopRunning<'a>(&'a watch::Sender<bool>);

impl<'a> LoopRunning<'a> {
    /// Sets `flag` until the guard is dropped.
    pub fn new(flag: &'a watch::Sender<bool>) -> Self {
        flag.send_replace(true);
        Self(flag)
    }
}

impl Drop for LoopRunning<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// Every reconcile period: ask every plugin for its node resources
/// (`GetTopologyAwareAllocatableResources`, each plugin on its own task, so
/// the poll waits for none of them: a hung plugin does not stretch the
/// others' period; a plugin whose previous answer is still awaited is not
/// asked again), poll the plugins, hand the answers to `keeper` (which
/// applies only what changed), re-allocate the containers a plugin forgot.
/// Ends when `stop` changes.
pub async fn reconcile_loop<K: AllocationKeeper>(
    qrm: Arc<Qrm>,
    keeper: K,
    stop: watch::Receiver<bool>,
) {
    let mut refreshing = BTreeMap::new();
    let mut polling = Vec::new();
    reconcile_passes(&qrm, &keeper, stop, &mut refreshing, &mut polling).await;
    for task in refreshing.into_values() {
        task.abort();
    }
    for call in polling {
        call.abort();
    }
}

/// The passes of [`reconcile_loop`]; `refreshing` holds each plugin's
/// node-resource refresh under way, `polling` the polls a pass stopped
/// waiting for (a pass waits at most one period: [`Qrm::poll_pass`]).
async fn reconcile_passes<K: AllocationKeeper>(
    qrm: &Arc<Qrm>,
    keeper: &K,
    mut stop: watch::Receiver<bool>,
    refreshing: &mut BTreeMap<String, tokio::task::JoinHandle<()>>,
    polling: &mut Vec<super::PollUnderWay>,
) {
    let mut ticks = tokio::time::interval(qrm.config.reconcile_period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        // Node resources on the period only: a pass woken by an admission
        // or a removal polls allocations alone.
        let period = tokio::select! {
            _ = ticks.tick() => true,
            () = qrm.reconcile_now.notified() => false,
            _ = stop.changed() => break,
        };
        if period {
            qrm.registry.forget_stopped(
                super::registry::STOPPED_GRACE,
                &keeper.allocated_resources(),
            );
            refreshing.retain(|_, task| !task.is_finished());
            for plugin in qrm.registry.all_active() {
                if refreshing.contains_key(&plugin.resource) {
                    continue;
                }
                let registry = Arc::clone(&qrm.registry);
                let resource = plugin.resource.clone();
                let task =
                    tokio::spawn(async move { registry.refresh_node_resources(&plugin).await });
                refreshing.insert(resource, task);
            }
        }
        let polled_at = Instant::now();
        // Read after `polled_at`: a container recorded before it is listed,
        // or its pod was allocated for during the last two polls.
        let known = keeper.known_containers();
        let wait_until = tokio::time::Instant::now() + qrm.config.reconcile_period;
        let (polls, polled_at) = qrm
            .poll_pass(known.as_ref(), polled_at, polling, Some(wait_until))
            .await;
        if polls.is_empty() {
            continue;
        }
        let resources: Vec<String> = polls.iter().map(|(r, _)| r.clone()).collect();
        match keeper.apply_polls(polls, polled_at).await {
            Ok(outcome) => {
                for resource in &resources {
                    let changes = outcome.changed.get(resource).copied().unwrap_or_default();
                    qrm.registry.note_reconcile(resource, changes);
                }
                // Each re-allocation may wait a whole deadline on a hung
                // plugin: `stop` ends them, not the last of them.
                for again in outcome.reallocate {
                    tokio::select! {
                        () = reallocate(qrm, keeper, again) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
            Err(err) => tracing::error!("plugin reconcile: {err}"),
        }
    }
}

/// Runs `Allocate` again for a container a plugin no longer knows.
async fn reallocate<K: AllocationKeeper>(qrm: &Qrm, keeper: &K, again: Reallocation) {
    let requests = match qrm.plugin_requests(&again.pod, &again.container) {
        Ok(requests) => requests,
        Err(err) => {
            tracing::warn!(pod = %again.pod.uid, container = %again.container, "re-allocation: {err}");
            return;
        }
    };
    match qrm
        .allocate(&again.pod, &again.container, &requests, again.affinity)
        .await
    {
        Ok(allocations) => {
            let resources = requests.iter().map(|r| r.resource.clone()).collect();
            let key = (again.pod.uid.clone(), again.container.clone());
            if let Err(err) = keeper
                .record_reallocation(key, resources, allocations)
                .await
            {
                tracing::error!(pod = %again.pod.uid, container = %again.container, "re-allocation: {err}");
            }
        }
        Err(err) => tracing::warn!("re-allocation: {err}"),
    }
}

/// Departed pods whose plugins are being told at once (each attempt tells
/// the pod's plugins concurrently, [`Qrm::remove_pod`]). Beyond it, pods
/// wait for a slot: a plugin that hangs delays the others' `RemovePod` by
/// one deadline per this many pods, not one per pod.
pub const MAX_REMOVALS_IN_FLIGHT: usize = 64;

/// Tells every plugin of each departed pod, retrying with back-off until
/// all of them answered (§4.10). Each pod's attempt runs on its own task
/// (at most [`MAX_REMOVALS_IN_FLIGHT`], one per pod), so a plugin past its
/// deadline for one pod holds up neither the next pods nor the loop. Ends
/// when `stop` changes (attempts under way are dropped); while it runs,
/// [`Qrm::removal_loop_running`] says so.
pub async fn removal_loop<K: AllocationKeeper>(
    qrm: Arc<Qrm>,
    keeper: K,
    mut stop: watch::Receiver<bool>,
) {
    let _running = LoopRunning::new(&qrm.removal_loop_running);
    let mut removals = keeper.pending_removals();
    let mut attempts: BTreeMap<String, (u32, Instant)> = BTreeMap::new();
    // Each attempt's task → its pod.
    let mut in_flight: BTreeMap<tokio::task::Id, String> = BTreeMap::new();
    let mut tasks: tokio::task::JoinSet<Result<(), Vec<super::CallError>>> =
        tokio::task::JoinSet::new();
    let mut retry = tokio::time::interval(Duration::from_secs(1));
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = removals.changed() => {}
            _ = retry.tick() => {}
            Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let (id, result) = match done {
                    Ok((id, result)) => (id, result),
                    // A panicked attempt: its pod is tried again.
                    Err(err) => {
                        in_flight.remove(&err.id());
                        continue;
                    }
                };
                let Some(uid) = in_flight.remove(&id) else {
                    continue;
                };
                match result {
                    Ok(()) => {
                        attempts.remove(&uid);
                        keeper.pod_removed(uid).await;
                        qrm.request_reconcile();
                    }
                    Err(errors) => {
                        let (failures, _) =
                            attempts.get(&uid).copied().unwrap_or((0, Instant::now()));
                        let backoff = Duration::from_secs(1 << failures.min(6));
                        tracing::warn!(pod = %uid, ?errors, retry_in = ?backoff, "RemovePod failed");
                        attempts.insert(uid, (failures + 1, Instant::now() + backoff));
                    }
                }
            }
            _ = stop.changed() => break,
        }
        let pending: Vec<String> = removals.borrow_and_update().clone();
        attempts.retain(|uid, _| pending.contains(uid));
        for uid in pending {
            if in_flight.len() >= MAX_REMOVALS_IN_FLIGHT {
                break;
            }
            let due = attempts
                .get(&uid)
                .is_none_or(|(_, next)| Instant::now() >= *next);
            if !due || in_flight.values().any(|pod| *pod == uid) {
                continue;
            }
            let qrm = Arc::clone(&qrm);
            let pod = uid.clone();
            let task = tasks.spawn(async move { qrm.remove_pod(&pod).await });
            in_flight.insert(task.id(), uid);
        }
    }
    tasks.shutdown().await;
}

/// Flushes the built-in plugins' state changes that no admission's flush
/// took within [`BACKSTOP_DELAY`], until `stop` turns true.
pub async fn flush_backstop<K: AllocationKeeper>(
    qrm: Arc<Qrm>,
    keeper: K,
    mut stop: watch::Receiver<bool>,
) {
    let journal = &qrm.plugin_journal;
    loop {
        tokio::select! {
            () = journal.outbox.changed() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        tokio::time::sleep(BACKSTOP_DELAY).await;
        if journal.outbox.is_empty() {
            continue;
        }
        if let Err(err) = keeper.flush_plugin_state().await {
            tracing::error!("the built-in plugins' state is not durable yet: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use pinion_core::record::Record;
    use pinion_core::testing::cpus;
    use tokio::sync::mpsc;

    use super::*;
    use crate::config::QrmConfig;
    use crate::testing::source_guard;

    /// A keeper that reports what the loops asked of it.
    struct Recorder {
        removals: watch::Receiver<Vec<String>>,
        asked: mpsc::UnboundedSender<String>,
    }

    impl AllocationKeeper for Recorder {
        type Error = String;

        async fn apply_polls(
            &self,
            polls: Vec<(String, Poll)>,
            _polled_at: Instant,
        ) -> Result<Reconciled, String> {
            let _ = self.asked.send(format!("apply {} polls", polls.len()));
            Ok(Reconciled::default())
        }

        async fn record_reallocation(
            &self,
            key: (String, String),
            _resources: BTreeSet<String>,
            _allocations: PluginAllocations,
        ) -> Result<(), String> {
            let _ = self.asked.send(format!("reallocated {}/{}", key.0, key.1));
            Ok(())
        }

        fn pending_removals(&self) -> watch::Receiver<Vec<String>> {
            self.removals.clone()
        }

        async fn pod_removed(&self, uid: String) {
            let _ = self.asked.send(format!("removed {uid}"));
        }

        async fn flush_plugin_state(&self) -> Result<(), String> {
            let _ = self.asked.send("flush".to_string());
            Ok(())
        }
    }

    /// A manager with no plugin (nothing is started: no socket, no file).
    fn manager() -> Arc<Qrm> {
        Qrm::new(QrmConfig {
            enabled: true,
            plugin_registration_dir: PathBuf::from("/nonexistent/plugins_registry"),
            registration_socket: PathBuf::from("/nonexistent/kubelet.sock"),
            reconcile_period: Duration::from_secs(3),
            rpc_timeout: Duration::from_secs(10),
            resource_names_map: BTreeMap::new(),
            builtin: Vec::new(),
        })
    }

    fn recorder(pending: &[&str]) -> (Recorder, mpsc::UnboundedReceiver<String>) {
        let pending = pending.iter().map(ToString::to_string).collect();
        let (asked, answers) = mpsc::unbounded_channel();
        let removals = watch::channel(pending).1;
        (Recorder { removals, asked }, answers)
    }

    /// The next thing the loops asked, within a bound that only ends a
    /// hang (time is paused: the bound is virtual).
    async fn next(asked: &mut mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(Duration::from_secs(60), asked.recv())
            .await
            .expect("the loop asked the keeper")
            .expect("the keeper lives")
    }

    #[tokio::test(start_paused = true)]
    async fn the_removal_loop_tells_the_keeper_once_every_plugin_heard() {
        let qrm = manager();
        let running = qrm.removal_loop_running();
        let (keeper, mut asked) = recorder(&["pod-a", "pod-b"]);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(removal_loop(Arc::clone(&qrm), keeper, stop_rx));
        // No plugin is active: every one of them heard at once.
        assert_eq!(next(&mut asked).await, "removed pod-a");
        assert_eq!(next(&mut asked).await, "removed pod-b");
        assert!(*running.borrow(), "running while the loop lives");
        stop.send_replace(true);
        task.await.expect("the loop ends");
        assert!(!*running.borrow(), "not running once it ended");
    }

    #[tokio::test(start_paused = true)]
    async fn the_backstop_flushes_plugin_state_that_no_admission_took() {
        let qrm = manager();
        let (keeper, mut asked) = recorder(&[]);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(flush_backstop(Arc::clone(&qrm), keeper, stop_rx));
        tokio::task::yield_now().await;
        qrm.plugin_journal
            .outbox
            .push([Record::SetDefault { cpus: cpus("0-3") }]);
        assert_eq!(next(&mut asked).await, "flush");
        // Taken by a flush within the delay: nothing left to flush.
        qrm.plugin_journal
            .outbox
            .push([Record::SetDefault { cpus: cpus("0-1") }]);
        let _ = qrm.plugin_journal.outbox.take();
        tokio::time::sleep(BACKSTOP_DELAY * 4).await;
        assert!(asked.try_recv().is_err(), "no flush of an empty outbox");
        stop.send_replace(true);
        task.await.expect("the backstop ends");
    }

    /// Issue 30: the manager's code knows the controller only as an
    /// [`AllocationKeeper`] (the daemon's wiring implements it), so the
    /// arrows point one way.
    #[test]
    fn the_manager_never_names_the_controller() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/qrm");
        let found = source_guard::lines_naming(&dir, &["controller::", "ControllerHandle"]);
        assert!(
            found.is_empty(),
            "src/qrm names the controller:\n{}",
            found.join("\n")
        );
    }
}
