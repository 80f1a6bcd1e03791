//! Owns one admission, read top to bottom: hints, plugins, the engine's decision, one journal flush, the executor, the answer — and its undo.
//!
//! ```text
//! ControllerHandle::admit ─► admit (this file)
//!   0. which resource plugins are asked; a plugin registered for `cpu` owns the CPUs
//!      ├─ held by an earlier runtime container, answers covering the ask ─► ReadmitHeld ─► answer
//!      └─ the pod's plugins yet to hear of its earlier removal: wait (≤ 1 s), else refused
//!   1. gather hints                  (async: every outside provider, one deadline)
//!   2. ask the plugins: Allocate     (async, when the Topology Manager's hint is known now)
//!   3. the engine decides  ┐
//!   4. one journal flush   ├─ Admit: one trip to the controller thread, one batch
//!   5. the executor applies┘
//!   6. answer
//!   undo: UndoAdmission             (one trip: release what was admitted, plugins told to forget)
//! ```
//!
//! The controller thread is synchronous and never waits on the network, so
//! the steps that may hang — an outside hint provider (1), a plugin's
//! `Allocate` over gRPC (2) — run here on the async side, and each step
//! that needs the controller's state is a [`Command`] to its thread. The
//! trips, and why each exists:
//!
//! * `Admit` (3–6): the engine's decision, made durable with its batch's one
//!   flush and applied by the executor before the answer. With the plugins
//!   asked first (2 before 3), their answers travel with it: decided,
//!   checked and made durable in the same flush.
//! * `ReadmitHeld`: a new runtime container of a container Pinion holds,
//!   whose stored plugin answers cover what it asks now (the snapshot says
//!   so without a trip), keeps its placement; no plugin is asked.
//! * `RecordAllocations`: only when the engine had to decide first (below):
//!   the plugins' answers, which come after the decision, made durable and
//!   applied — a second flush.
//! * `UndoAdmission`: only on failure; one step whatever failed.
//!
//! # Plugins first wherever the Topology Manager allows it
//!
//! kubelet hands every provider's `Allocate` the Topology Manager's merged
//! affinity. The plugins can be asked before the engine whenever that
//! affinity is known without the engine's state
//! ([`pinion_core::engine::admission_before_engine`]): under the `none`
//! policy (a fixed empty hint), and, under the other policies, when a
//! plugin owns the container's CPUs in container scope without NUMA
//! allocation scores (the CPU manager gives no hints; the merge is the
//! outside providers' alone). Everywhere else the engine must decide
//! first, because the merged affinity depends on its state: the CPU
//! manager's hints follow the free CPUs, the pod scope reuses the affinity
//! stored for the pod's earlier containers, and `numa-allocation-strategy`
//! scores NUMA nodes by the exclusive CPUs taken. A known refusal by the
//! Topology Manager, and (outside `none`) a container already admitted — a
//! retry, a conflict, a new runtime container of it — also take the engine
//! first, as before: the engine refuses or answers, and the plugins do not
//! replace a held container's answers before the engine said whether it is
//! the same container.

use pinion_core::engine::{admission_before_engine, CpuOwner};
use pinion_core::qrm_rules::allocations_cover;
use pinion_core::topomgr::TopologyHint;

use super::plugins::plugin_error;
use super::removal_wait::{await_removal, RemovalWait};
use super::task::ControllerHandle;
use super::{AdmitRequest, Admitted, Command, ControlError, Controller, Key, StoredAllocations};
use crate::hints::GatheredHints;
use crate::qrm::{PluginRequest, Qrm};

/// Admits a container (see the module documentation); answers once
/// everything is durable and placed. A failure after anything was
/// allocated or admitted is undone before the error is returned.
pub(super) async fn admit(
    handle: &ControllerHandle,
    mut request: AdmitRequest,
) -> Result<Admitted, ControlError> {
    // 0. Which plugins are asked; a plugin registered for `cpu` owns the
    //    container's CPUs (the policy gives it none).
    let asked = plugins_asked(handle.qrm.as_deref(), &request)?;
    if asked.iter().any(|r| r.resource == "cpu") {
        request.cpu_owner = CpuOwner::Plugin;
    }
    if let Some(admitted) = readmit_held(handle, &request, &asked).await? {
        return Ok(admitted);
    }
    let qrm = handle.qrm.as_deref().filter(|_| !asked.is_empty());
    if let Some(qrm) = qrm {
        earlier_removal_heard(handle, qrm, &request).await?;
    }
    // 1. Gather hints.
    let hints = gather_hints(handle, &request).await?;
    let Some(qrm) = qrm else {
        // No plugin to ask: 3–6 in one trip.
        return decide(handle, request, hints, None).await;
    };
    let abandoned = AbandonedIfDropped {
        handle,
        pod: Some(request.pod.uid.clone()),
    };
    let admitted = match plugins_first_hint(handle, &request, &hints) {
        Some(hint) => plugins_first(handle, qrm, request, &asked, hints, hint).await,
        None => engine_first(handle, qrm, request, &asked, hints).await,
    };
    abandoned.finished();
    admitted
}

/// While an admission that asks resource plugins runs: dropped before it
/// finished (its caller went away, so the future is dropped at an
/// `.await`), it tells the controller the admission was abandoned — the
/// plugins may have allocated for a container Pinion never records
/// ([`Controller::admission_abandoned`]). Found from outside (forty-fourth
/// session): such allocations were never undone.
struct AbandonedIfDropped<'h> {
    handle: &'h ControllerHandle,
    pod: Option<String>,
}

impl AbandonedIfDropped<'_> {
    /// The admission finished (admitted, or refused and undone).
    fn finished(mut self) {
        self.pod = None;
    }
}

impl Drop for AbandonedIfDropped<'_> {
    fn drop(&mut self) {
        if let Some(pod) = self.pod.take() {
            tracing::warn!(%pod, "an admission that asked resource plugins was abandoned half-way (its caller went away)");
            self.handle.admission_abandoned(&pod);
        }
    }
}

/// Step 2 before step 3: the plugins' `Allocate` with the Topology Manager's hint
/// known now, then the engine decides with their answers (one trip, one
/// flush).
async fn plugins_first(
    handle: &ControllerHandle,
    qrm: &Qrm,
    request: AdmitRequest,
    asked: &[PluginRequest],
    hints: GatheredHints,
    hint: TopologyHint,
) -> Result<Admitted, ControlError> {
    let (uid, container) = (request.pod.uid.clone(), request.container.clone());
    let allocations = match qrm
        .allocate(&request.pod, &container, asked, Some(hint))
        .await
    {
        Ok(allocations) => allocations,
        Err(err) => {
            // Plugins before the failed one may have allocated.
            undo(handle, uid.clone(), None).await;
            return Err(plugin_error(&uid, &container, &err));
        }
    };
    let answers = StoredAllocations {
        resources: asked.iter().map(|r| r.resource.clone()).collect(),
        allocations,
    };
    // A refusal here has the controller note the plugins must forget the
    // pod within the same batch ([`Controller::run_batch`]).
    let admitted = decide(handle, request, hints, Some(answers)).await;
    count_refused_answer(qrm, &admitted);
    let admitted = admitted?;
    // The plugins may have moved other containers to make room.
    qrm.request_reconcile();
    Ok(admitted)
}

/// Step 3 before step 2: the engine decides (its merged affinity is what the plugins
/// are given), then the plugins' answers are recorded (a second trip and
/// flush).
async fn engine_first(
    handle: &ControllerHandle,
    qrm: &Qrm,
    request: AdmitRequest,
    asked: &[PluginRequest],
    hints: GatheredHints,
) -> Result<Admitted, ControlError> {
    let pod = request.pod.clone();
    let key: Key = (pod.uid.clone(), request.container.clone());
    let admitted = decide(handle, request, hints, None).await?;
    let allocated = qrm.allocate(&pod, &key.1, asked, admitted.affinity).await;
    let recorded = match allocated {
        Ok(allocations) => {
            let resources = asked.iter().map(|r| r.resource.clone()).collect();
            let recorded = handle
                .ask(|reply| Command::RecordAllocations {
                    key: key.clone(),
                    resources,
                    allocations,
                    running: false,
                    reply,
                })
                .await;
            count_refused_answer(qrm, &recorded);
            // The plugins may have moved other containers to make room.
            qrm.request_reconcile();
            recorded
        }
        Err(err) => Err(plugin_error(&key.0, &key.1, &err)),
    };
    if recorded.is_err() {
        undo(handle, key.0, Some(key.1)).await;
    }
    recorded
}

/// Step 0, before any plugin is asked: a pod on the list of those whose plugins have yet to hear of
/// their removal (its containers went, and it is admitted again under the
/// same UID: a `pinion run` of the same id, or kubelet's new sandbox for a
/// pod whose old one died) waits until they have, at most
/// [`REMOVAL_WAIT`](super::removal_wait::REMOVAL_WAIT), and is refused while they have
/// not: a `RemovePod` that reached a plugin after this admission's
/// `Allocate` would take that allocation back. The runtime retries a
/// refused container.
async fn earlier_removal_heard(
    handle: &ControllerHandle,
    qrm: &Qrm,
    request: &AdmitRequest,
) -> Result<(), ControlError> {
    let pod = &request.pod.uid;
    let removals = handle.plugin_removals();
    if !removals.borrow().contains(pod) {
        return Ok(());
    }
    match await_removal(removals, qrm.removal_loop_running(), pod).await {
        RemovalWait::Heard => Ok(()),
        RemovalWait::NoLoop | RemovalWait::TimedOut => Err(ControlError::RemovalPending {
            pod: pod.clone(),
            container: request.container.clone(),
        }),
    }
}

/// Step 0: the resource plugins container `request` asks (none without the QoS
/// Resource Manager).
fn plugins_asked(
    qrm: Option<&Qrm>,
    request: &AdmitRequest,
) -> Result<Vec<PluginRequest>, ControlError> {
    let Some(qrm) = qrm else {
        return Ok(Vec::new());
    };
    qrm.plugin_requests(&request.pod, &request.container)
        .map_err(|err| plugin_error(&request.pod.uid, &request.container, &err))
}

/// A new runtime container of a container Pinion holds whose resource
/// plugins' stored allocations cover what it asks now (the proposal's
/// re-admission, [`allocations_cover`]): it keeps its placement and those
/// allocations, and no plugin is asked for hints or `Allocate`. `None`:
/// admit it the ordinary way (not held, no plugin asked, or a quantity
/// changed — then every plugin is asked again).
async fn readmit_held(
    handle: &ControllerHandle,
    request: &AdmitRequest,
    asked: &[PluginRequest],
) -> Result<Option<Admitted>, ControlError> {
    let snapshot = handle.snapshot();
    let Some(held) = snapshot.workload(&request.pod.uid, &request.container) else {
        return Ok(None);
    };
    let asked = asked.iter().map(|r| (r.resource.as_str(), r.quantity));
    if !allocations_cover(&held.plugins, asked) {
        return Ok(None);
    }
    let readmitted = handle
        .ask(|reply| Command::ReadmitHeld {
            request: Box::new(request.clone()),
            reply,
        })
        .await?;
    if readmitted.is_some() {
        tracing::info!(pod = %request.pod.uid, container = %request.container, "re-admitted with the allocations its resource plugins made before; no plugin asked");
    }
    Ok(readmitted)
}

/// Step 1: the outside providers' hints (every provider at once, one deadline;
/// one that fails or misses it fails the admission closed).
async fn gather_hints(
    handle: &ControllerHandle,
    request: &AdmitRequest,
) -> Result<GatheredHints, ControlError> {
    handle
        .hints
        .gather(&request.pod, &request.container)
        .await
        .map_err(|err| ControlError::Hints {
            pod: request.pod.uid.clone(),
            container: request.container.clone(),
            reason: err.to_string(),
        })
}

/// The hint the plugins are asked with before the engine decides, or
/// `None` when the engine decides first (see the module documentation).
fn plugins_first_hint(
    handle: &ControllerHandle,
    request: &AdmitRequest,
    hints: &GatheredHints,
) -> Option<TopologyHint> {
    let manager = &handle.topology_manager;
    let known = admission_before_engine(
        manager,
        &request.pod,
        &request.container,
        hints,
        request.cpu_owner,
    );
    let admitted_already = || {
        handle
            .snapshot()
            .workload(&request.pod.uid, &request.container)
            .is_some()
    };
    order(known, manager.fixed_hint().is_some(), admitted_already)
}

/// The plugins-first rule on what is known: the Topology Manager's
/// admission before the engine (`known`), whether its hint is fixed (the
/// `none` policy), whether the container is admitted already.
fn order(
    known: Option<pinion_core::topomgr::Admission>,
    fixed: bool,
    admitted_already: impl FnOnce() -> bool,
) -> Option<TopologyHint> {
    let known = known?;
    if fixed {
        return Some(known.hint);
    }
    (known.admit && !admitted_already()).then_some(known.hint)
}

/// Steps 3–6: the engine decides (with the plugins' answers when they were asked
/// first), the batch is made durable with one flush, the executor applies
/// it, the controller answers.
async fn decide(
    handle: &ControllerHandle,
    request: AdmitRequest,
    hints: GatheredHints,
    plugins: Option<StoredAllocations>,
) -> Result<Admitted, ControlError> {
    handle
        .ask(|reply| Command::Admit {
            request: Box::new(request),
            hints: Box::new(hints),
            plugins: plugins.map(Box::new),
            reply,
        })
        .await
}

/// A plugin's `Allocate` answer the controller refused (what only its
/// state can tell: CPUs another workload holds exclusively, a record over
/// the journal's limit) is counted as that plugin's error, as the manager
/// counts the answers it refuses.
fn count_refused_answer(qrm: &Qrm, result: &Result<Admitted, ControlError>) {
    if let Err(ControlError::Plugin {
        refused_answer: Some(refused),
        ..
    }) = result
    {
        qrm.count_refused_answer(&refused.resource, "Allocate", &refused.reason);
    }
}

/// Undo, one step: releases `container` of pod `uid` when it was admitted
/// (`Some`), and has the plugins told to forget the pod when none of its
/// containers is left (they may have allocated for it). Failures are
/// logged: the caller answers with the error that caused the undo.
async fn undo(handle: &ControllerHandle, uid: String, container: Option<String>) {
    let undone = handle
        .ask(|reply| Command::UndoAdmission {
            pod: uid.clone(),
            container,
            reply,
        })
        .await;
    if let Err(err) = undone {
        tracing::error!(pod = %uid, "the plugins will not be told to forget the refused pod: {err}");
    }
}

impl Controller {
    /// The controller's side of [`undo`]: releases `container` of `pod`
    /// when it was admitted (a batch of its own), then, when no container
    /// of the pod is left, has every plugin told to forget it
    /// ([`Controller::forget_refused`]).
    pub fn undo_admission(&mut self, pod: &str, container: Option<&str>) {
        if let Some(container) = container {
            if let Err(err) = self.release(pod, Some(container)) {
                tracing::error!(%pod, %container, "undoing a failed plugin admission: {err}");
            }
        }
        self.forget_refused(pod);
    }
}

#[cfg(test)]
mod tests {
    use pinion_core::topomgr::{Admission, NumaMask};

    use super::*;

    fn hint() -> TopologyHint {
        TopologyHint::new(NumaMask::single(1).expect("a node"), true)
    }

    #[test]
    fn the_plugins_go_first_only_when_the_engines_answer_is_known_and_new() {
        let admits = Some(Admission {
            hint: hint(),
            admit: true,
        });
        let refuses = Some(Admission {
            hint: TopologyHint::cannot_satisfy(),
            admit: false,
        });
        let cases = [
            ("not known: the engine first", None, false, false, None),
            ("a fixed hint", admits, true, false, Some(hint())),
            (
                "a fixed hint, admitted already",
                admits,
                true,
                true,
                Some(hint()),
            ),
            ("known and new", admits, false, false, Some(hint())),
            ("admitted already", admits, false, true, None),
            (
                "a known refusal: the engine refuses",
                refuses,
                false,
                false,
                None,
            ),
        ];
        for (what, known, fixed, admitted, expected) in cases {
            assert_eq!(order(known, fixed, || admitted), expected, "{what}");
        }
    }
}
