//! Owns what the resource plugins' answers do in the controller: placements with the answers applied (`pinion_core::plugin_allocation`), the checks only the controller can make of them, their recording (durable before anyone hears of them) and each reconcile poll's merge (the spec's §4.9: the `Allocate`-time hints are kept).
//!
//! The data itself (each container's answers, the side data they are
//! durable in, the pods whose plugins must hear of a removal) is owned by
//! [`super::plugin_data`]; these methods need the engine and every
//! workload besides.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use pinion_core::plugin_allocation::{self, PluginAllocation, PluginAllocations};
use pinion_core::plugin_answer::{self, AnswerError};
use pinion_core::record::{Record, SideValue};
use pinion_core::{CpuSet, Placement};
use pinion_host::journal::format::MAX_PAYLOAD;

use super::batch::Batch;
use super::plugin_data::{allocation_keys, side_key, stored_allocations, ALLOCATIONS};
use super::{Admitted, ControlError, Controller, Frontend, Key, RefusedAnswer, Workload};
use crate::qrm::Poll;

/// A container's plugin data as the journal keeps it (shared with
/// `pinion state import-qrm`).
pub use pinion_core::qrm_checkpoint::StoredAllocations;

/// A container to allocate again, and what a reconcile pass of plugin
/// answers did: the QRM loops' own types.
pub use crate::qrm::loops::{Reallocation, Reconciled};

impl Controller {
    /// The placement of `key` the engine decides, with its plugins'
    /// allocations applied. Allocations that cannot be applied were refused
    /// when they arrived; should one slip through, the engine's placement
    /// stands (logged).
    pub(super) fn placement_for(&self, key: &Key) -> Placement {
        let base = self.engine.placement(&key.0, &key.1);
        let Some(workload) = self
            .workloads
            .get(key)
            .filter(|w| !w.plugins.allocations.is_empty())
        else {
            return base;
        };
        match plugin_allocation::apply(base.clone(), &workload.plugins.allocations) {
            Ok((placement, _)) => placement,
            Err(err) => {
                tracing::error!(pod = %key.0, container = %key.1, "plugin allocation not applied: {err}");
                base
            }
        }
    }

    /// Stores the plugins' allocations of an admitted container (durable
    /// before the answer) and answers with its placement, which a runtime
    /// container being created applies itself.
    pub fn record_allocations(
        &mut self,
        key: &Key,
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
    ) -> Result<Admitted, ControlError> {
        self.store_and_place(key, resources, allocations, false)
    }

    /// Stores the allocations of a running container a plugin had forgotten
    /// (its re-allocation, §4.9): unlike at admission, nobody applies the
    /// answer, so a runtime container gets it as an update like any change.
    pub fn record_reallocation(
        &mut self,
        key: &Key,
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
    ) -> Result<Admitted, ControlError> {
        if !self.workloads.contains_key(key) {
            // The container left while its plugins allocated for it again:
            // their `Allocate` may have come after the pod's `RemovePod`, so
            // when no container of the pod is left they must hear of its
            // removal (again), or they keep what they allocated for good.
            self.forget_refused(&key.0);
        }
        self.store_and_place(key, resources, allocations, true)
    }

    fn store_and_place(
        &mut self,
        key: &Key,
        resources: BTreeSet<String>,
        allocations: PluginAllocations,
        running: bool,
    ) -> Result<Admitted, ControlError> {
        if !self.workloads.contains_key(key) {
            return Err(ControlError::NotFound {
                pod: key.0.clone(),
                container: Some(key.1.clone()),
            });
        }
        let base = self.engine.placement(&key.0, &key.1);
        let stored = StoredAllocations {
            resources,
            allocations,
        };
        let (_, encoded) = self.with_plugin_answers(key, base, &stored)?;
        let mut batch = self.begin();
        self.keep_plugin_answers(key, stored, encoded, &mut batch);
        self.commit(batch)?;
        if running {
            self.converge();
        } else {
            self.converge_admitted(std::slice::from_ref(key));
        }
        Ok(self.admitted(key))
    }

    /// `base` with the plugins' answers `stored` applied (see
    /// [`plugin_allocation::apply`]), once they pass [`Self::check_answers`];
    /// with the answers' journal text that check encoded, for
    /// [`Self::keep_plugin_answers`] (encoded once per admission).
    pub(super) fn with_plugin_answers(
        &self,
        key: &Key,
        base: Placement,
        stored: &StoredAllocations,
    ) -> Result<(Placement, Option<SideValue>), ControlError> {
        // Named as the manager names a refused answer (the manager counts
        // the refusals it can make; these need the controller's state).
        let encoded = self.check_answers(key, stored).map_err(|source| {
            match source.resource() {
                Some(resource) => ControlError::Plugin {
                    pod: key.0.clone(),
                    container: key.1.clone(),
                    reason: format!("resource plugin {resource} answered Allocate with an allocation that cannot be applied: {source}"),
                    refused_answer: Some(RefusedAnswer {
                        resource: resource.to_string(),
                        reason: source.to_string(),
                    }),
                },
                None => plugin_error(&key.0, &key.1, &source),
            }
        })?;
        let (placement, notes) = plugin_allocation::apply(base, &stored.allocations)
            .map_err(|source| plugin_error(&key.0, &key.1, &source))?;
        for (name, resource) in notes.conflicts {
            tracing::warn!(pod = %key.0, container = %key.1, %name, %resource, "two plugins set the same environment variable or annotation; the first stays");
        }
        Ok((placement, encoded))
    }

    /// What only the controller can check of the plugins' answers for
    /// `key` (`pinion_core::plugin_answer`): a cpuset on online CPUs of the
    /// machine that takes no CPU another workload holds exclusively, and a
    /// record that fits the journal — refused here, naming the resource,
    /// rather than at the kernel's or the journal's write. Returns the
    /// answers' journal text it encoded for the size (`None` when they do
    /// not encode).
    fn check_answers(
        &self,
        key: &Key,
        stored: &StoredAllocations,
    ) -> Result<Option<SideValue>, AnswerError> {
        let record = Record::Side {
            kind: ALLOCATIONS.to_string(),
            key: side_key(key),
            value: SideValue::encode(stored).ok(),
        };
        // Encoded only when the bound does not tell (the journal encodes
        // the record once more when it is appended).
        let fits = record
            .side_len_at_most()
            .is_some_and(|bound| bound <= MAX_PAYLOAD);
        if !fits {
            plugin_answer::check_size(
                &key.0,
                &key.1,
                stored.allocations.keys(),
                record.to_bytes().len(),
                MAX_PAYLOAD,
            )?;
        }
        // The record was made as a side-data record just above.
        let Record::Side { value: encoded, .. } = record else {
            return Ok(None);
        };
        // The manager checked each answer against the online CPUs it
        // follows; the machine may have changed since, and the NUMA nodes
        // and the answers of several plugins together are known only here.
        let machine = self.engine.machine();
        let mems: CpuSet = machine.numa_nodes().iter().map(|n| n.id).collect();
        plugin_answer::check_online(&stored.allocations, Some(machine.all_cpus()), Some(&mems))?;
        plugin_answer::check_swap(&stored.allocations, None)?;
        let state = self.engine.state();
        let mut taken = state.exclusive_cpus();
        if let Some(own) = state.assignment(&key.0, &key.1) {
            taken.difference_with(own);
        }
        for (resource, allocation) in &stored.allocations {
            if allocation.oci_property_name != "CpusetCpus" {
                continue;
            }
            // A list that does not parse is `apply`'s error.
            if let Ok(cpus) = CpuSet::parse_list(allocation.allocation_result.trim()) {
                plugin_answer::check_cpus(resource, &cpus, machine.all_cpus(), &taken)?;
            }
        }
        Ok(encoded)
    }

    /// Keeps the plugins' answers for admitted container `key`: appended to
    /// `batch` (durable with it) and held by its workload. `encoded`: their
    /// journal text when [`Self::check_answers`] made it already.
    pub(super) fn keep_plugin_answers(
        &mut self,
        key: &Key,
        stored: StoredAllocations,
        encoded: Option<SideValue>,
        batch: &mut Batch,
    ) {
        let records = self.store_allocations(key, &stored, encoded);
        self.append(&records, batch);
        batch.touch(&self.workloads, key);
        if let Some(workload) = self.workloads.get_mut(key) {
            workload.plugins.hold(stored, Some(Instant::now()));
        }
    }

    /// The records that store `stored` for `key` (`encoded`: its journal
    /// text, when made already).
    fn store_allocations(
        &mut self,
        key: &Key,
        stored: &StoredAllocations,
        encoded: Option<SideValue>,
    ) -> Vec<Record> {
        let encoded = match encoded {
            Some(value) => Ok(value),
            None => SideValue::encode(stored),
        };
        let value = match encoded {
            Ok(value) => {
                (!(stored.resources.is_empty() && stored.allocations.is_empty())).then_some(value)
            }
            Err(err) => {
                tracing::error!("encoding plugin allocations: {err}");
                return Vec::new();
            }
        };
        self.plugin_data
            .set_allocations(key, value)
            .into_iter()
            .collect()
    }

    /// Merges one reconcile poll per plugin (§4.9), sent at `polled_at`,
    /// into the allocations of every app container requesting that
    /// plugin's resource: an answer
    /// replaces the stored entries by name (keeping the `Allocate`-time
    /// hints), an empty answer (what the manager makes of a refused one)
    /// changes nothing, no answer drops the resource's entry and asks for a
    /// re-allocation. A container whose allocations were recorded after the
    /// poll began is left alone: the answers predate its `Allocate` (the
    /// loop polls while pods are admitted). Makes the changes durable, then
    /// the executor sends only what changed.
    pub fn plugin_reconcile(
        &mut self,
        polls: &[(String, Poll)],
        polled_at: Instant,
    ) -> Result<Reconciled, ControlError> {
        let mut outcome = Reconciled::default();
        let mut updated: BTreeMap<Key, PluginAllocations> = BTreeMap::new();
        for (resource, poll) in polls {
            for (key, workload) in &self.workloads {
                if !workload.plugins.resources.contains(resource)
                    || workload.is_init(&key.1)
                    || workload.plugins.recorded.is_some_and(|at| at > polled_at)
                {
                    continue;
                }
                let current = updated.get(key).unwrap_or(&workload.plugins.allocations);
                let answer = poll
                    .get(&key.0)
                    .and_then(|c| c.get(&key.1))
                    .and_then(Option::as_ref);
                let next = match answer {
                    // Most answers change nothing: checked without a copy.
                    Some(answer) if !answer_changes(current, answer) => continue,
                    Some(answer) => merge_answer(current, answer.clone()),
                    None => {
                        let listed = outcome
                            .reallocate
                            .iter()
                            .any(|r| r.pod.uid == key.0 && r.container == key.1);
                        if let Some(pod) = workload.spec.as_deref().cloned().filter(|_| !listed) {
                            outcome.reallocate.push(Reallocation {
                                pod,
                                container: key.1.clone(),
                                affinity: self.engine.topology_affinity(&key.0, &key.1),
                            });
                        }
                        let mut next = current.clone();
                        next.remove(resource);
                        next
                    }
                };
                if next == *current {
                    continue;
                }
                let base = self.engine.placement(&key.0, &key.1);
                let checked = workload.plugins.stored_with(next);
                if let Err(err) = self.check_answers(key, &checked) {
                    tracing::error!(pod = %key.0, container = %key.1, %resource, "reconcile answer refused, the previous allocation stays: {err}");
                    continue;
                }
                let next = checked.allocations;
                if let Err(err) = plugin_allocation::apply(base, &next) {
                    tracing::error!(pod = %key.0, container = %key.1, %resource, "reconcile answer refused, the previous allocation stays: {err}");
                    continue;
                }
                *outcome.changed.entry(resource.clone()).or_default() += 1;
                updated.insert(key.clone(), next);
            }
        }
        if updated.is_empty() {
            return Ok(outcome);
        }
        let mut batch = self.begin();
        let mut records = Vec::new();
        for (key, allocations) in &updated {
            batch.touch(&self.workloads, key);
            let stored = self.workloads[key].plugins.stored_with(allocations.clone());
            records.extend(self.store_allocations(key, &stored, None));
        }
        self.append(&records, &mut batch);
        let before: BTreeMap<Key, Placement> = updated
            .keys()
            .filter_map(|k| Some((k.clone(), self.workloads.get(k)?.desired.clone())))
            .collect();
        for (key, allocations) in updated {
            if let Some(workload) = self.workloads.get_mut(&key) {
                workload.plugins.allocations = allocations;
            }
        }
        self.commit(batch)?;
        self.converge();
        for (key, old) in before {
            if self.workloads.get(&key).is_some_and(|w| w.desired != old) {
                self.counters
                    .plugin_apply_seconds
                    .observe(polled_at.elapsed().as_secs_f64());
            }
        }
        Ok(outcome)
    }

    /// After `released` went: drops their stored allocations and notes the
    /// pods whose containers are now all gone and had plugin data, now or
    /// in a container that left before (their plugins must hear of it). A
    /// pod that still runs but lost a container with plugin data is
    /// remembered for then ([`PLUGIN_PODS`](super::plugin_data::PLUGIN_PODS)).
    /// Returns the side-data records of the change.
    pub(super) fn note_pod_removals(&mut self, released: &[Key]) -> Vec<Record> {
        let mut records = Vec::new();
        let pods: BTreeSet<&String> = released.iter().map(|(pod, _)| pod).collect();
        for pod in pods {
            let gone = !self.workloads.keys().any(|(p, _)| p == pod);
            let had_plugins = self.plugin_data.pod_has_allocations(pod)
                || self.plugin_data.pod_had_allocations(pod);
            let mut released_had = false;
            for key in released.iter().filter(|(p, _)| p == pod) {
                released_had |= self.plugin_data.has_allocations(key);
                records.extend(self.plugin_data.set_allocations(key, None));
            }
            if gone {
                if had_plugins {
                    records.extend(self.plugin_data.must_hear_of_removal(pod));
                }
                records.extend(self.plugin_data.set_pod_had_allocations(pod, false));
            } else if released_had {
                records.extend(self.plugin_data.set_pod_had_allocations(pod, true));
            }
        }
        records
    }

    /// At a runtime synchronize: the pods remembered because a container
    /// with plugin data left ([`Self::note_pod_removals`]) of which nothing
    /// is left now — no workload, and `alive` says no container runs and no
    /// sandbox is there (they went while the agent was down): every plugin
    /// must hear of their removal. Returns the side-data records.
    pub(super) fn note_departed_plugin_pods(
        &mut self,
        alive: impl Fn(&str) -> bool,
    ) -> Vec<Record> {
        let mut records = Vec::new();
        for pod in self.plugin_data.pods_that_had_allocations() {
            if alive(&pod) || !self.keys_of(&pod, None).is_empty() {
                continue;
            }
            records.extend(self.plugin_data.must_hear_of_removal(&pod));
            records.extend(self.plugin_data.set_pod_had_allocations(&pod, false));
        }
        records
    }

    /// An admission of a container of `pod` that asked resource plugins was
    /// abandoned half-way (its caller went away: a client that disconnected
    /// drops the local API's handler): the plugins may hold an allocation
    /// Pinion has no answer for. When no container of the pod is left they
    /// must hear of its removal now; otherwise the pod is remembered
    /// ([`PLUGIN_PODS`](super::plugin_data::PLUGIN_PODS)), so that they do
    /// when its last container goes. Sent after any `Admit` the admission
    /// sent, so an admitted container counts. The records wait for the next
    /// flush, as [`Controller::forget_refused`]'s.
    pub fn admission_abandoned(&mut self, pod: &str) {
        let record = if self.keys_of(pod, None).is_empty() {
            self.plugin_data.must_hear_of_removal(pod)
        } else {
            self.plugin_data.set_pod_had_allocations(pod, true)
        };
        if let Some(record) = record {
            self.plugin_data.wait([record]);
            self.publish();
        }
    }

    /// The runtime removed a sandbox of pod `uid`. When no container of
    /// the pod is left, its pod-level resources are forgotten; otherwise
    /// the sandbox was one kubelet replaced (its garbage collector removes
    /// the old sandbox while the new one's containers run on the same
    /// resources) and they stay. When a container of it left with plugin
    /// data and no container is left now, every plugin must hear of its
    /// removal. The records wait for the next flush, as
    /// [`Controller::forget_refused`]'s.
    pub fn pod_removed(&mut self, uid: &str) {
        if self.keys_of(uid, None).is_empty() {
            self.set_pod_resources(uid, None);
        }
        let records = self.note_departed_plugin_pods(|pod| pod != uid);
        if !records.is_empty() {
            self.plugin_data.wait(records);
            self.publish();
        }
    }

    /// An admission refused after its plugins allocated for it: when no
    /// container of `pod` is left, every plugin must hear of the pod's
    /// removal (the removal loop tells them, as for a released pod).
    /// Returns the side-data record of the change.
    pub(super) fn plugins_must_forget(&mut self, pod: &str) -> Option<Record> {
        if !self.keys_of(pod, None).is_empty() {
            return None;
        }
        self.plugin_data.must_hear_of_removal(pod)
    }

    /// An admission of a container of `pod` was refused after plugins may
    /// have allocated for it (a later plugin failed, or the answers could
    /// not be stored): when no container of the pod is left, every plugin
    /// is told to forget it (the removal loop's `RemovePod`). The record
    /// waits for the next flush, as [`Controller::plugin_pod_removed`]'s.
    pub fn forget_refused(&mut self, pod: &str) {
        if let Some(record) = self.plugins_must_forget(pod) {
            self.plugin_data.wait([record]);
            self.publish();
        }
    }

    /// Every plugin heard of pod `uid`'s removal.
    ///
    /// The record waits with the plugins' state changes and does not cause
    /// a flush of its own: it goes with the next one (within the plugins'
    /// backstop delay in the agent). Lost in a crash before that, it costs
    /// one more `RemovePod` (idempotent) after the restart.
    pub fn plugin_pod_removed(&mut self, uid: &str) {
        let Some(record) = self.plugin_data.heard_of_removal(uid) else {
            return;
        };
        self.plugin_data.wait([record]);
        self.publish();
    }

    /// Attaches the durable plugin data to the recovered workloads; data
    /// of containers without one becomes a runtime workload (kept until the
    /// runtime synchronizes) when there is a runtime front-end, else it is
    /// dropped.
    pub(super) fn restore_allocations(&mut self) {
        for key in allocation_keys(self.plugin_data.side()) {
            let Some(stored) = stored_allocations(self.plugin_data.side(), &key) else {
                continue;
            };
            if !self.workloads.contains_key(&key) {
                if self.runtime_updates.is_none() {
                    tracing::warn!(pod = %key.0, container = %key.1, "plugin allocations of a container that no longer runs dropped");
                    self.plugin_data.set_allocations(&key, None);
                    continue;
                }
                let desired = self.engine.placement(&key.0, &key.1);
                self.workloads.insert(
                    key.clone(),
                    Workload::new(Frontend::runtime_unknown(), None, desired),
                );
            }
            if let Some(workload) = self.workloads.get_mut(&key) {
                workload.plugins.hold(stored, None);
            }
        }
    }

    /// Every plugin resource named by the durable allocations.
    pub(super) fn plugin_resources(&self) -> BTreeSet<String> {
        self.workloads
            .values()
            .flat_map(|w| {
                w.plugins
                    .resources
                    .iter()
                    .chain(w.plugins.allocations.keys())
            })
            .cloned()
            .collect()
    }

    /// The pods waiting for their plugins to hear of their removal.
    pub(super) fn pending_removals(&self) -> Vec<String> {
        self.plugin_data.pending_removals()
    }
}

/// A plugin's reconcile answer merged into a container's allocations: each
/// named entry replaced, keeping the hints and topology assignments the
/// plugin gave at `Allocate` when the answer has none (reconcile answers
/// omit them); names the answer does not mention stay.
fn merge_answer(current: &PluginAllocations, answer: PluginAllocations) -> PluginAllocations {
    let mut next = current.clone();
    for (name, mut allocation) in answer {
        if let Some(old) = current.get(&name) {
            if allocation.resource_hints.is_none() {
                allocation.resource_hints.clone_from(&old.resource_hints);
            }
            if allocation.topology_assignments.is_empty() {
                allocation
                    .topology_assignments
                    .clone_from(&old.topology_assignments);
            }
        }
        next.insert(name, allocation);
    }
    next
}

/// Whether [`merge_answer`] of `answer` changes `current`, told without
/// building the merge (a reconcile pass asks it of every container).
fn answer_changes(current: &PluginAllocations, answer: &PluginAllocations) -> bool {
    answer.iter().any(|(name, new)| {
        current
            .get(name)
            .is_none_or(|old| !same_after_merge(old, new))
    })
}

/// Whether `new` replacing `old` leaves `old` as it is, `old`'s hints and
/// topology assignments kept where `new` has none ([`merge_answer`]'s
/// rule). Every field is named, so a new one cannot be forgotten here.
fn same_after_merge(old: &PluginAllocation, new: &PluginAllocation) -> bool {
    let PluginAllocation {
        oci_property_name,
        is_node_resource,
        is_scalar_resource,
        allocated_quantity,
        allocation_result,
        envs,
        annotations,
        resource_hints,
        topology_assignments,
    } = new;
    *oci_property_name == old.oci_property_name
        && *is_node_resource == old.is_node_resource
        && *is_scalar_resource == old.is_scalar_resource
        && *allocated_quantity == old.allocated_quantity
        && *allocation_result == old.allocation_result
        && *envs == old.envs
        && *annotations == old.annotations
        && (resource_hints.is_none() || *resource_hints == old.resource_hints)
        && (topology_assignments.is_empty() || *topology_assignments == old.topology_assignments)
}

/// Container `container` of pod `pod` failed in a resource plugin (a call,
/// or an answer that cannot be applied).
pub(super) fn plugin_error(
    pod: &str,
    container: &str,
    source: &impl std::fmt::Display,
) -> ControlError {
    ControlError::Plugin {
        pod: pod.to_string(),
        container: container.to_string(),
        reason: source.to_string(),
        refused_answer: None,
    }
}

#[cfg(test)]
mod tests {
    use pinion_core::plugin_allocation::PluginHint;

    use super::*;

    /// `answer_changes` says what the merge says, for answers that repeat
    /// the allocation (with or without its hints and assignments), change
    /// one field, or name another resource.
    #[test]
    fn answer_changes_agrees_with_the_merge() {
        let hint = PluginHint {
            nodes: vec![1],
            preferred: true,
        };
        let stored = PluginAllocation {
            oci_property_name: "CpusetCpus".into(),
            is_scalar_resource: true,
            allocated_quantity: 2.0,
            allocation_result: "2-3".into(),
            envs: [("A".to_string(), "1".to_string())].into(),
            resource_hints: Some(vec![hint.clone()]),
            topology_assignments: [(1, 2)].into(),
            ..PluginAllocation::default()
        };
        let current: PluginAllocations = [("cpu".to_string(), stored.clone())].into();
        let with = |change: &dyn Fn(&mut PluginAllocation)| {
            let mut allocation = stored.clone();
            change(&mut allocation);
            allocation
        };
        let answers: Vec<(&str, PluginAllocations)> = vec![
            ("the same", current.clone()),
            (
                "without hints or assignments",
                [(
                    "cpu".to_string(),
                    with(&|a| {
                        a.resource_hints = None;
                        a.topology_assignments.clear();
                    }),
                )]
                .into(),
            ),
            (
                "other CPUs",
                [(
                    "cpu".to_string(),
                    with(&|a| a.allocation_result = "4-5".into()),
                )]
                .into(),
            ),
            (
                "another variable",
                [("cpu".to_string(), with(&|a| a.envs.clear()))].into(),
            ),
            (
                "other hints",
                [(
                    "cpu".to_string(),
                    with(&|a| a.resource_hints = Some(Vec::new())),
                )]
                .into(),
            ),
            (
                "other assignments",
                [(
                    "cpu".to_string(),
                    with(&|a| a.topology_assignments = [(0, 2)].into()),
                )]
                .into(),
            ),
            (
                "another quantity",
                [("cpu".to_string(), with(&|a| a.allocated_quantity = 3.0))].into(),
            ),
            (
                "another resource",
                [("memory".to_string(), stored.clone())].into(),
            ),
            ("nothing", PluginAllocations::new()),
        ];
        let mut changes = 0;
        for (what, answer) in answers {
            let merged = merge_answer(&current, answer.clone());
            assert_eq!(
                answer_changes(&current, &answer),
                merged != current,
                "{what}"
            );
            changes += usize::from(merged != current);
        }
        assert_eq!(changes, 6, "the six changing answers");
    }
}
