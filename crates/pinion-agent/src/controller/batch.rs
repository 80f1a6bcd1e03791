//! Owns the batch: group commit of decisions, the batch's undo log, its one journal flush and the effects applied after it.
//!
//! Batches: group commit of decisions. A batch is a run of decisions made
//! in memory one after the other (strictly in arrival order), each appending
//! its records to the journal; then one `fdatasync` makes them all durable
//! ([`Controller::commit`]). Only after that are their effects applied
//! (processes moved into cgroups, cgroups removed, cpusets written, runtime
//! updates sent) and their callers answered. When the flush fails, the
//! batch is rolled back to the last durable point and every decision in it
//! fails; nothing of it reaches a cgroup or the runtime.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pinion_core::engine::Engine;
use pinion_core::pod::Pod;
use pinion_core::record::{diff, diff_side, Record, Scope, SideData};
use pinion_core::state::State;
use pinion_host::cgroup::CgroupName;

use super::{
    AdmitRequest, Admitted, ControlError, Controller, Key, Reach, Released, StoredAllocations,
    Workload,
};
use crate::hints::GatheredHints;

/// Compact the journal into the checkpoint when it has records this old.
const COMPACT_AFTER: Duration = Duration::from_secs(60);

/// One decision of a batch.
#[derive(Debug)]
pub enum Decision {
    Admit {
        request: Box<AdmitRequest>,
        hints: Box<GatheredHints>,
        /// The plugins' answers when they were asked before the admission
        /// (stored with it, in the same flush); `None`: asked after it, if
        /// at all ([`super::admission`]).
        plugins: Option<Box<StoredAllocations>>,
    },
    Release {
        pod: String,
        container: Option<String>,
        reach: Reach,
    },
}

/// The answer to one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Admitted(Box<Admitted>),
    Released(Released),
}

/// What a decision does once its batch is durable.
#[derive(Debug)]
pub(super) enum AfterFlush {
    /// Move the run's process into its cgroup.
    AddPid {
        key: Key,
        cgroup: CgroupName,
        pid: u32,
    },
    /// Remove a released run's cgroup (or keep it while processes remain).
    Retire {
        key: Key,
        cgroup: CgroupName,
        pid: Option<u32>,
        /// The pod it was admitted with (it stays known by name while its
        /// processes run on in the shared pool).
        spec: Option<Arc<Pod>>,
    },
}

/// The rollback point and pending effects of the decisions since the last
/// durable point.
pub(super) struct Batch {
    engine: Engine,
    /// The workloads this batch changed, as they were before it (`None`:
    /// absent), first change only — the undo log of a rollback (cloning
    /// every workload for each batch would cost a burst of small batches
    /// dearly).
    workloads: Vec<(Key, Option<Workload>)>,
    /// Cgroups created by this batch's admissions (removed on rollback).
    pub(super) created: Vec<CgroupName>,
    pub(super) after: Vec<AfterFlush>,
    /// Containers admitted by this batch (their callers hand the runtime
    /// their placement with the answer).
    pub(super) admitted: Vec<Key>,
    /// A decision whose records could not be appended: the whole batch is
    /// rolled back (the journal holds a prefix of it).
    pub(super) poisoned: Option<String>,
}

impl Batch {
    /// Notes workload `key` as it is now, before this batch changes it
    /// (only the first time).
    pub(super) fn touch(&mut self, workloads: &BTreeMap<Key, Workload>, key: &Key) {
        if !self.workloads.iter().any(|(k, _)| k == key) {
            self.workloads
                .push((key.clone(), workloads.get(key).cloned()));
        }
    }
}

/// What a decision returns before its batch is durable.
enum Outcome {
    Admitted(Key),
    Released(Released),
}

impl Controller {
    /// Starts a batch at the current (durable) state.
    pub(super) fn begin(&mut self) -> Batch {
        self.plugin_data.side_mut().begin();
        Batch {
            engine: self.engine.clone(),
            workloads: Vec::new(),
            created: Vec::new(),
            after: Vec::new(),
            admitted: Vec::new(),
            poisoned: None,
        }
    }

    /// Makes `decisions` (in order) durable with one flush, applies them and
    /// answers each.
    pub fn run_batch(&mut self, decisions: Vec<Decision>) -> Vec<Result<Answer, ControlError>> {
        let mut batch = self.begin();
        // Pods of the admissions whose plugins were asked first.
        let mut asked_first = Vec::new();
        let outcomes: Vec<Result<Outcome, ControlError>> = decisions
            .into_iter()
            .map(|decision| match decision {
                Decision::Admit {
                    request,
                    hints,
                    plugins,
                } => {
                    let asked_plugins = plugins.is_some();
                    let decided =
                        self.decide_admit(&request, &hints, plugins.map(|p| *p), &mut batch);
                    if asked_plugins {
                        if decided.is_err() {
                            if let Some(record) = self.plugins_must_forget(&request.pod.uid) {
                                self.append(&[record], &mut batch);
                            }
                        }
                        asked_first.push(request.pod.uid);
                    }
                    decided.map(Outcome::Admitted)
                }
                Decision::Release {
                    pod,
                    container,
                    reach,
                } => self
                    .decide_release(&pod, container.as_deref(), reach, &mut batch)
                    .map(Outcome::Released),
            })
            .collect();
        let admitted = batch.admitted.clone();
        let committed = self.commit(batch);
        let failed_pids = match committed {
            Ok(failed) => failed,
            Err(err) => {
                // Rolled back: what the plugins allocated first is theirs
                // alone now.
                for pod in &asked_first {
                    self.forget_refused(pod);
                }
                let reason = err.to_string();
                return outcomes
                    .into_iter()
                    .map(|outcome| {
                        outcome.and_then(|_| {
                            Err(ControlError::NotDurable {
                                reason: reason.clone(),
                            })
                        })
                    })
                    .collect();
            }
        };
        self.converge_admitted(&admitted);
        outcomes
            .into_iter()
            .map(|outcome| match outcome? {
                Outcome::Admitted(key) => match failed_pids.iter().find(|(k, _)| *k == key) {
                    Some((_, err)) => Err(ControlError::NotDurable {
                        reason: format!("placing the process failed, admission undone: {err}"),
                    }),
                    None => Ok(Answer::Admitted(Box::new(self.admitted(&key)))),
                },
                Outcome::Released(released) => Ok(Answer::Released(released)),
            })
            .collect()
    }

    /// Appends the records that turn `before` into the current state and
    /// side data to the journal (memory only until the batch's flush).
    pub(super) fn record(
        &mut self,
        before: &State,
        side_before: Option<&SideData>,
    ) -> Result<(), ControlError> {
        let mut records = diff(before, self.engine.state());
        // Brings the side data to the engine's first: `diff_side` then
        // includes those records too.
        let engine_side = self.engine_side_records();
        match side_before {
            Some(side_before) => records.extend(diff_side(side_before, self.plugin_data.side())),
            None => records.extend(engine_side),
        }
        for record in &records {
            self.store.record(record)?;
        }
        Ok(())
    }

    /// Puts `next` in the engine's place (a whole new state: a hot-plug
    /// followed, a rebuild from the runtime), journaled against the old
    /// one with the engine's side data, and flushed. On error nothing
    /// changed: engine and side data are back as they were.
    pub(super) fn replace_engine_durably(&mut self, next: Engine) -> Result<(), ControlError> {
        let previous = std::mem::replace(&mut self.engine, next);
        // The engine's side data (pod-level sets, promised CPUs) follows
        // it in `record`: rolled back with it when nothing is durable.
        self.plugin_data.side_mut().begin();
        let durable = self
            .record(previous.state(), None)
            .and_then(|()| self.store.flush().map(drop).map_err(ControlError::from));
        if let Err(err) = durable {
            self.store.discard_pending();
            self.plugin_data.side_mut().rollback();
            self.engine = previous;
            return Err(err);
        }
        Ok(())
    }

    /// Appends the records of a decision that touched only `scope`'s pods
    /// and the shared pool (admissions and releases): linear in those pods,
    /// not in the whole state.
    pub(super) fn record_scope(&mut self, scope: &Scope, batch: &mut Batch) {
        let mut records = scope.diff(self.engine.state());
        records.extend(self.engine_side_records_of(scope.pods()));
        self.append(&records, batch);
    }

    /// Appends `records`; one that cannot be appended poisons the batch.
    pub(super) fn append(&mut self, records: &[Record], batch: &mut Batch) {
        for record in records {
            if let Err(err) = self.store.record(record) {
                batch.poisoned.get_or_insert_with(|| err.to_string());
            }
        }
    }

    /// Makes the batch durable (one flush, when it has records) and applies
    /// its effects; on a failed flush rolls it back. Returns the admissions
    /// whose process could not be placed (undone by a second batch).
    pub(super) fn commit(
        &mut self,
        batch: Batch,
    ) -> Result<Vec<(Key, ControlError)>, ControlError> {
        self.commit_with(batch, false)
    }

    /// [`Controller::commit`]; `force_waiting`: flush the waiting records
    /// even when the batch has no records of its own.
    fn commit_with(
        &mut self,
        batch: Batch,
        force_waiting: bool,
    ) -> Result<Vec<(Key, ControlError)>, ControlError> {
        if let Some(reason) = batch.poisoned.clone() {
            let dropped = self.store.discard_pending();
            tracing::error!(
                dropped,
                "a decision could not be recorded, rolling the batch back: {reason}"
            );
            self.rollback(batch);
            return Err(ControlError::NotDurable { reason });
        }
        // Waiting records go with any flush, but do not cause one by
        // themselves (the next flush, or the plugins' backstop, takes them).
        let waiting = if self.store.pending() > 0 || force_waiting {
            match self.take_waiting() {
                Ok(waiting) => waiting,
                Err(err) => {
                    let dropped = self.store.discard_pending();
                    tracing::error!(dropped, "rolling the batch back: {err}");
                    self.rollback(batch);
                    return Err(err);
                }
            }
        } else {
            Vec::new()
        };
        if self.store.pending() > 0 {
            let started = Instant::now();
            let records = self.store.pending();
            let flushed = self.store.flush();
            self.counters
                .journal_flush_seconds
                .observe(started.elapsed().as_secs_f64());
            if let Err(err) = flushed {
                self.counters.journal_flush_failures_total += 1;
                tracing::error!(
                    records,
                    "journal flush failed, rolling the batch back: {err}"
                );
                self.rollback(batch);
                // The rollback took them out of the side data; the next
                // flush carries them.
                self.plugin_data.put_back(waiting);
                return Err(err.into());
            }
            self.counters.journal_batches_total += 1;
            self.counters.journal_records_total += records as u64;
        }
        // Housekeeping cgroups give up the newly exclusive cpus before any
        // process joins them (the growing half waits for the executor).
        self.shrink_housekeeping();
        let failed = self.apply_after_flush(batch.after);
        if !failed.is_empty() {
            let keys: Vec<Key> = failed.iter().map(|(key, _)| key.clone()).collect();
            tracing::error!(?keys, "placing processes failed; undoing their admissions");
            self.undo_admissions(&keys);
        }
        self.maybe_compact(false);
        Ok(failed)
    }

    /// The waiting records, appended to the journal and applied to the side
    /// data (a no-op for those already applied): they become durable with
    /// this flush — a plugin's change together with the allocation it was
    /// made for. A record the journal cannot take (larger than a record may
    /// be) fails the batch, and every waiting record waits again: the
    /// batch acknowledged without it would leave the plugin's state ahead of
    /// the disk, and a restart would roll back what was answered. A later
    /// change of the same entry replaces the record while it waits.
    fn take_waiting(&mut self) -> Result<Vec<Record>, ControlError> {
        let records = self.plugin_data.take_waiting();
        for record in &records {
            if let Err(err) = self.store.record(record) {
                let reason = format!("{} cannot be journalled: {err}", describe(record));
                self.plugin_data.put_back(records);
                return Err(ControlError::NotDurable { reason });
            }
        }
        for record in &records {
            self.plugin_data.side_mut().apply(record);
        }
        Ok(records)
    }

    /// Makes the built-in plugins' waiting state changes durable (changes
    /// made outside an admission: a pod's removal, a pool resized by the
    /// closed loop or pinned by an operator).
    pub fn flush_plugin_state(&mut self) -> Result<(), ControlError> {
        let batch = self.begin();
        self.commit_with(batch, true).map(drop)
    }

    /// Back to the batch's starting point: state, workloads, and the
    /// cgroups its admissions created.
    fn rollback(&mut self, batch: Batch) {
        self.engine = batch.engine;
        for (key, before) in batch.workloads.into_iter().rev() {
            match before {
                Some(workload) => {
                    self.workloads.insert(key, workload);
                }
                None => {
                    self.workloads.remove(&key);
                }
            }
        }
        self.plugin_data.side_mut().rollback();
        for cgroup in batch.created {
            if let Err(err) = self.remove_cgroup(&cgroup) {
                tracing::warn!("removing cgroup {cgroup} of a rolled-back admission: {err}");
            }
        }
        self.publish();
    }

    /// Releases admissions whose process could not be placed, as a batch of
    /// its own. When that batch cannot be made durable, nothing is undone:
    /// memory keeps what the disk says, the runs' cgroups stay (empty), and
    /// the reconcile pass releases them as runs that ended. (Before the
    /// forty-fifth session memory freed their CPUs while the disk still
    /// held them: the next admission was given the same CPUs, and a restart
    /// found both on them.)
    fn undo_admissions(&mut self, keys: &[Key]) {
        let mut batch = self.begin();
        let before = self.engine.state().clone();
        let mut cgroups = Vec::new();
        for key in keys {
            self.engine.remove(&key.0, &key.1);
            batch.touch(&self.workloads, key);
            if let Some(workload) = self.workloads.remove(key) {
                if let super::Frontend::Standalone { cgroup, .. } = workload.frontend {
                    cgroups.push(cgroup);
                }
            }
        }
        // Their plugin answers go with them, and a pod none of whose
        // containers is left has its plugins told to forget it.
        let side = self.note_pod_removals(keys);
        let recorded = self.record(&before, None).and_then(|()| {
            for record in &side {
                self.store.record(record)?;
            }
            self.store.flush().map(drop).map_err(ControlError::from)
        });
        if let Err(err) = recorded {
            tracing::error!(
                "undoing admissions: {err}; kept until the reconcile pass releases them"
            );
            self.store.discard_pending();
            self.rollback(batch);
            return;
        }
        self.publish();
        for cgroup in cgroups {
            if let Err(err) = self.remove_cgroup(&cgroup) {
                tracing::warn!("removing cgroup {cgroup} of an undone admission: {err}");
            }
        }
    }

    /// At shutdown: the checkpoint catches up with the journal, so tools
    /// reading `cpu_manager_state` see the final state.
    pub fn shutdown(&mut self) {
        if let Err(err) = self.flush_plugin_state() {
            tracing::error!("the built-in plugins' last state changes are lost: {err}");
        }
        self.maybe_compact(true);
    }

    /// Rewrites the checkpoint from the state and resets the journal, when
    /// the journal is large or has records older than a minute (or always
    /// with `force`). Never on the way to an answer: callers run it after
    /// the batch's effects. A failure loses nothing and is retried later:
    /// once the journal grew by another threshold's worth (the store's
    /// backoff) or a minute after the failure — not after every batch, so
    /// that a lasting failure (a full disk) does not cost every admission.
    pub(super) fn maybe_compact(&mut self, force: bool) {
        let backoff = self.store.compaction_backoff();
        let timer = backoff.map_or(self.compacted, |backoff| backoff.since);
        let due = self.store.should_compact()
            || (self.store.records_since_compaction() > 0 && timer.elapsed() >= COMPACT_AFTER);
        if !(force || due) || self.store.pending() > 0 {
            return;
        }
        let started = Instant::now();
        match self
            .store
            .compact(self.engine.state(), self.plugin_data.side())
        {
            Ok(()) => {
                self.compacted = Instant::now();
                self.counters
                    .checkpoint_write_seconds
                    .observe(started.elapsed().as_secs_f64());
            }
            Err(err) => {
                let retry = self.store.compaction_backoff().map_or_else(String::new, |b| {
                    format!(
                        " ({} failed in a row); retried once the journal holds {} records or {} bytes, or in {} s",
                        b.failures,
                        b.due_records,
                        b.due_bytes,
                        COMPACT_AFTER.as_secs()
                    )
                });
                tracing::error!(
                    "compacting the journal into the checkpoint: {err}; nothing is lost (the journal keeps every record){retry}"
                );
            }
        }
    }
}

/// A waiting record as an error names it: its side-data entry.
fn describe(record: &Record) -> String {
    match record {
        Record::Side { kind, key, .. } => format!("side-data entry {kind:?} {key:?}"),
        other => format!("record {other:?}"),
    }
}
