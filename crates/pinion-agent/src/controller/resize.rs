//! Owns in-place resize of a placed container's CPUs, and the engine's pod-level data in the side data.
//!
//! In-place resize of a placed container's CPU request (issue #15, KEP-5554;
//! `featureGates: InPlacePodVerticalScalingExclusiveCPUs`), and the durable
//! data of the newest kubelet features that lives beside the CPU state.
//!
//! A resize is a decision of its own: the engine resizes the container in
//! place (`Engine::resize_container_with`: growing keeps every CPU and adds
//! aligned ones, shrinking releases CPUs without moving the rest, never
//! below the promised CPUs), the records go to the journal with one flush,
//! and only then is the caller answered and the executor run (the resized
//! standalone run's cgroup, the shared-pool containers). A refused resize
//! changes nothing.
//!
//! The engine's promised CPUs (kubelet's checkpoint `Original`) and
//! pod-level CPU sets (kubelet's `podEntries`) are not part of kubelet's
//! checkpoint layout Pinion writes; they are journal side data (kinds
//! [`PROMISED`] and [`POD_CPUS`]), kept equal to the engine's after every
//! decision ([`Controller::engine_side_records`]) and handed back to the
//! engine at start ([`restore_engine_data`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use pinion_core::engine::Engine;
use pinion_core::policy::PolicyError;
use pinion_core::record::{Record, Scope, SideData, SideValue};
use pinion_core::state::PodCpus;
use pinion_core::{CpuSet, Quantity};

use super::{Admitted, ControlError, Controller, Frontend, Key, Reach};

/// Side-data kind of the promised CPUs: pod UID → {container → cpulist}.
pub const PROMISED: &str = pinion_core::record::kinds::PROMISED;
/// Side-data kind of the pod-level CPU sets: pod UID → cpulist.
pub const POD_CPUS: &str = pinion_core::record::kinds::POD_CPUS;

/// The engine's promised CPUs and pod-level CPU sets as side data holds
/// them (entries that do not decode are dropped with a warning: the engine
/// then treats those containers as never resized / those pods as having no
/// pod-level set).
#[must_use]
pub fn restore_engine_data(
    side: &SideData,
) -> (BTreeMap<String, BTreeMap<String, CpuSet>>, PodCpus) {
    let mut promised = BTreeMap::new();
    for (pod, value) in side.get(PROMISED).into_iter().flatten() {
        match value.decode::<BTreeMap<String, CpuSet>>() {
            Ok(containers) if !containers.is_empty() => {
                promised.insert(pod.clone(), containers);
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(%pod, "dropping unreadable promised cpus {value}: {err}"),
        }
    }
    let mut pod_cpus = PodCpus::new();
    for (pod, value) in side.get(POD_CPUS).into_iter().flatten() {
        match value.decode::<CpuSet>() {
            Ok(cpus) => {
                pod_cpus.insert(pod.clone(), cpus);
            }
            Err(err) => tracing::warn!(%pod, "dropping unreadable pod-level cpus {value}: {err}"),
        }
    }
    (promised, pod_cpus)
}

/// `engine` with the restored promised CPUs and pod-level CPU sets of
/// `side`, started. A start that refuses the pod-level sets (the state was
/// rebuilt or migrated under them) starts without them, with an error
/// logged: their pods' containers keep their own CPUs.
pub fn start_with_side(engine: Engine, side: &SideData) -> Result<Engine, PolicyError> {
    let (promised, pod_cpus) = restore_engine_data(side);
    let had_pod_cpus = !pod_cpus.is_empty();
    let mut with = engine
        .clone()
        .with_promised_cpus(promised.clone())
        .with_pod_cpus(pod_cpus);
    match with.start() {
        Ok(()) => Ok(with),
        Err(err) if had_pod_cpus => {
            tracing::error!("the restored pod-level cpu sets do not fit the state ({err}); starting without them");
            let mut without = engine.with_promised_cpus(promised);
            without.start()?;
            Ok(without)
        }
        Err(err) => Err(err),
    }
}

/// The side data of pod `pod` the engine's promised CPUs and pod-level
/// sets make, by kind (`None`: the engine holds nothing for it).
fn engine_side_of(engine: &Engine, pod: &str) -> [(&'static str, Option<SideValue>); 2] {
    let promised = engine
        .promised_cpus()
        .get(pod)
        .and_then(|containers| SideValue::encode(containers).ok());
    let pod_cpus = engine
        .pod_cpus()
        .get(pod)
        .and_then(|cpus| SideValue::encode(cpus).ok());
    [(PROMISED, promised), (POD_CPUS, pod_cpus)]
}

impl Controller {
    /// Brings the side data's [`PROMISED`] and [`POD_CPUS`] kinds to the
    /// engine's for every pod; returns the records of the change (none when
    /// equal).
    pub(super) fn engine_side_records(&mut self) -> Vec<Record> {
        let mut pods: std::collections::BTreeSet<String> = self
            .engine
            .promised_cpus()
            .keys()
            .chain(self.engine.pod_cpus().keys())
            .cloned()
            .collect();
        for kind in [PROMISED, POD_CPUS] {
            pods.extend(
                self.plugin_data
                    .side()
                    .get(kind)
                    .into_iter()
                    .flat_map(|m| m.keys().cloned()),
            );
        }
        self.engine_side_records_of(pods.iter().map(String::as_str))
    }

    /// [`Controller::engine_side_records`] for `pods` only (a decision that
    /// touched only them: linear in those pods, not in the whole state).
    pub(super) fn engine_side_records_of<'a>(
        &mut self,
        pods: impl IntoIterator<Item = &'a str>,
    ) -> Vec<Record> {
        let mut records = Vec::new();
        for pod in pods {
            for (kind, now) in engine_side_of(&self.engine, pod) {
                records.extend(self.plugin_data.side_mut().set(kind, pod, now));
            }
        }
        records
    }

    /// [`Controller::resize`] of a container within `reach` ([`Reach`]).
    pub fn resize_within(
        &mut self,
        key: &Key,
        cpus: &Quantity,
        reach: Reach,
    ) -> Result<Admitted, ControlError> {
        self.within_reach(key, reach, "resize")?;
        self.resize(key, cpus)
    }

    /// Resizes container `key` in place to `cpus` (its new CPU request and,
    /// when it has one, limit): decide, make durable, apply, answer.
    /// Answers where the container runs now.
    pub fn resize(&mut self, key: &Key, cpus: &Quantity) -> Result<Admitted, ControlError> {
        let Some(workload) = self.workloads.get(key) else {
            return Err(ControlError::NotFound {
                pod: key.0.clone(),
                container: Some(key.1.clone()),
            });
        };
        let Some(spec) = workload.spec.clone() else {
            return Err(ControlError::ResizeUnknownSpec {
                pod: key.0.clone(),
                container: key.1.clone(),
            });
        };
        let held = spec
            .all_containers()
            .find(|c| c.name == key.1)
            .and_then(|c| c.effective_cpu_request().map(Quantity::milli_value));
        if held == Some(cpus.milli_value()) {
            // Nothing to resize (e.g. an update of memory only).
            return Ok(self.admitted(key));
        }
        let mut batch = self.begin();
        batch.touch(&self.workloads, key);
        let scope = Scope::of(self.engine.state(), [key.0.as_str()]);
        let report = self.engine.resize_container_with(&spec, &key.1, cpus, &[]);
        if let Err(source) = report.result {
            tracing::warn!(pod = %key.0, container = %key.1, %cpus, "resize refused: {source}");
            return Err(ControlError::Resize {
                pod: key.0.clone(),
                container: key.1.clone(),
                source: Box::new(source),
            });
        }
        let desired = self.placement_for(key);
        let mut cgroup = None;
        if let Some(workload) = self.workloads.get_mut(key) {
            workload.spec = Some(Arc::new(spec.with_container_cpus(&key.1, cpus)));
            workload.desired = desired.clone();
            if let Frontend::Standalone { cgroup: name, .. } = &workload.frontend {
                cgroup = Some(name.clone());
            }
        }
        self.record_scope(&scope, &mut batch);
        self.commit(batch)?;
        if let Some(cgroup) = cgroup {
            self.record_run(key, &cgroup, &desired);
        }
        tracing::info!(pod = %key.0, container = %key.1, %cpus, pool = %desired.pool, cpus_now = %desired.cpus, "resized");
        // A runtime container gets its placement with the answer; a
        // standalone run's cgroup is written by the executor.
        self.converge_admitted(std::slice::from_ref(key));
        Ok(self.admitted(key))
    }
}

#[cfg(test)]
mod tests {
    use pinion_core::policy::Features;
    use pinion_core::CpuSet;
    use pinion_host::cgroup::fake::FakeCgroups;
    use pinion_host::cgroup::CgroupName;
    use pinion_host::fileops::{Effect, FileOp};

    use super::super::{ControlError, Controller, Key, RUN_CONTAINER};
    use crate::hints::GatheredHints;
    use crate::testing::{machine, run_request, SyntheticNode};
    use pinion_core::Quantity;

    const RUN: &str = "pinion-run-r";

    fn node(host: &FakeCgroups) -> SyntheticNode {
        SyntheticNode {
            host: host.clone(),
            ..SyntheticNode::new(machine(1, 4, 2)).with_features(Features {
                in_place_resize_exclusive_cpus: true,
                ..Features::default()
            })
        }
    }

    fn key() -> Key {
        (RUN.to_string(), RUN_CONTAINER.to_string())
    }

    fn cpus(n: &str) -> Quantity {
        Quantity::parse(n).expect("quantity")
    }

    fn cgroup_cpus(host: &FakeCgroups) -> CpuSet {
        host.tree().children[&CgroupName::new(RUN).expect("name")]
            .cpus
            .clone()
    }

    fn admitted(controller: &mut Controller) -> CpuSet {
        controller
            .admit(
                &run_request(RUN, Some("2"), None),
                &GatheredHints::default(),
            )
            .expect("admitted")
            .placement
            .cpus
    }

    /// Issue 15: a resize whose flush fails changes nothing — state,
    /// promised CPUs, side data, the run's cgroup — and the next one works.
    #[test]
    fn a_resize_that_cannot_be_made_durable_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = FakeCgroups::default();
        let (mut controller, plan) = node(&host).start_with_faults(dir.path());
        let first = admitted(&mut controller);
        let state = controller.state().clone();

        plan.inject(FileOp::SyncData, Some("pinion_journal"), Effect::Fail(5));
        let err = controller
            .resize(&key(), &cpus("4"))
            .expect_err("not durable");
        assert!(matches!(err, ControlError::Journal(_)), "{err}");
        assert_eq!(controller.state(), &state, "rolled back");
        assert!(controller.engine.promised_cpus().is_empty());
        assert!(!controller.plugin_data.side().contains_key(super::PROMISED));
        assert_eq!(cgroup_cpus(&host), first);

        let grown = controller.resize(&key(), &cpus("4")).expect("resized");
        assert_eq!(grown.placement.cpus.len(), 4);
        assert_eq!(cgroup_cpus(&host), grown.placement.cpus);
    }

    /// Issue 15: the promised CPUs are side data of the journal, restored
    /// by the next start; released with the container.
    #[test]
    fn promised_cpus_survive_a_restart_and_go_with_the_container() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = FakeCgroups::default();
        let first = {
            let mut controller = node(&host).start(dir.path()).expect("start");
            let first = admitted(&mut controller);
            controller.resize(&key(), &cpus("4")).expect("resized");
            assert_eq!(controller.engine.promised_cpus()[RUN][RUN_CONTAINER], first);
            first
        };
        host.tree()
            .children
            .get_mut(&CgroupName::new(RUN).expect("name"))
            .expect("cgroup")
            .pids
            .push(std::process::id());
        let mut controller = node(&host).start(dir.path()).expect("restart");
        assert_eq!(
            controller.engine.promised_cpus()[RUN][RUN_CONTAINER],
            first,
            "restored from the journal"
        );
        host.tree()
            .children
            .get_mut(&CgroupName::new(RUN).expect("name"))
            .expect("cgroup")
            .pids
            .clear();
        controller.release(RUN, None).expect("released");
        assert!(controller.engine.promised_cpus().is_empty());
        assert!(!controller.plugin_data.side().contains_key(super::PROMISED));
        drop(controller);
        let controller = node(&host).start(dir.path()).expect("restart");
        assert!(controller.engine.promised_cpus().is_empty());
    }
}
