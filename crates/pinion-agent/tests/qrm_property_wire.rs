//! Property test of the QoS Resource Manager's reconcile over real unix
//! sockets (issue #11, item 8): three [`TablePlugin`]s served as `pinion
//! plugin serve` serves plugins, registered through the watcher, polled by the
//! real reconcile loop (which also re-allocates what a plugin forgot), going
//! away and coming back (with or without their state); random admissions,
//! removals, answer changes and forgotten containers. After the passes that
//! follow each step the fake cgroups hold the plugins' last answers (those
//! of a plugin that is away stay applied), and removed pods are gone, from
//! the controller, the cgroups and the plugins. Few cases; the many are on
//! the controller alone (`qrm_property.rs`).

mod qrm_model;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pinion_agent::controller::Key;
use pinion_agent::testing::qrm_node::{QrmNode, QrmNodeOptions, ServedPlugin};
use pinion_agent::testing::table_plugin::TablePlugin;
use pinion_agent::testing::SyntheticNode;
use pinion_core::Placement;
use pinion_plugins::ResourcePlugin;
use proptest::prelude::*;
use qrm_model::*;

/// Upper bound for a registration or the passes after a step (not a timing
/// assertion: the loop runs every [`PERIOD`]).
const PATIENCE: Duration = Duration::from_secs(20);
const PERIOD: Duration = Duration::from_millis(20);

/// A step of the manager-level sequences.
#[derive(Debug, Clone)]
enum Step {
    Admit {
        slot: usize,
        wants: [bool; 3],
        values: [u32; 3],
    },
    Release {
        slot: usize,
    },
    Change {
        slot: usize,
        plugin: usize,
        value: u32,
    },
    Forget {
        slot: usize,
        plugin: usize,
    },
    /// A plugin goes away, changes its answers to `value` while nobody
    /// listens (and loses its state when `lose_state`), and comes back.
    Bounce {
        plugin: usize,
        value: u32,
        lose_state: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let slot = 0..SLOTS;
    prop_oneof![
        3 => (slot.clone(), any::<[bool; 3]>(), any::<[u32; 3]>())
            .prop_map(|(slot, wants, values)| Step::Admit { slot, wants, values }),
        1 => slot.clone().prop_map(|slot| Step::Release { slot }),
        4 => (slot.clone(), 0..3usize, any::<u32>())
            .prop_map(|(slot, plugin, value)| Step::Change { slot, plugin, value }),
        1 => (slot, 0..3usize).prop_map(|(slot, plugin)| Step::Forget { slot, plugin }),
        1 => (0..3usize, any::<u32>(), any::<bool>())
            .prop_map(|(plugin, value, lose_state)| Step::Bounce { plugin, value, lose_state }),
    ]
}

/// A live run of the manager-level sequences.
struct Run {
    key: Key,
    wants: [bool; 3],
    cgroup: String,
    /// Its placement at admission (the engine's CPUs and memory nodes stay
    /// where no plugin sets them; the plugins' settings in it are replaced
    /// by their last answers).
    admitted: Placement,
}

/// The manager with three plugins on their sockets, and the runs.
struct Wire {
    _dir: tempfile::TempDir,
    node: QrmNode,
    plugins: [TablePlugin; 3],
    served: Vec<Option<ServedPlugin>>,
    runs: BTreeMap<usize, Run>,
    released: Vec<(Key, String)>,
    admissions: u32,
}

impl Wire {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = SyntheticNode::new(topology());
        let options = QrmNodeOptions::new(PERIOD);
        let qrm = QrmNode::start(&node, dir.path(), &options);
        let plugins = plugins();
        let mut served = Vec::new();
        for plugin in &plugins {
            served.push(Some(qrm.serve(plugin.clone())));
        }
        for (resource, _) in RESOURCES {
            qrm.wait_for_plugin(resource, "active", PATIENCE).await;
        }
        Self {
            _dir: dir,
            node: qrm,
            plugins,
            served,
            runs: BTreeMap::new(),
            released: Vec::new(),
            admissions: 0,
        }
    }

    /// Waits until every plugin on its socket has answered two more
    /// `GetResourcesAllocation`: the pass that heard its current answers
    /// (and the re-allocations it asked for) is complete.
    async fn settle(&self) {
        let serving: Vec<(&TablePlugin, u64)> = self
            .plugins
            .iter()
            .zip(&self.served)
            .filter(|(_, served)| served.is_some())
            .map(|(plugin, _)| (plugin, plugin.polls()))
            .collect();
        let deadline = Instant::now() + PATIENCE;
        while serving.iter().any(|(plugin, at)| plugin.polls() < at + 2) {
            assert!(
                Instant::now() < deadline,
                "the reconcile loop stopped polling"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// What plugin `plugin` last said about `run`: its current answer, or
    /// `frozen` while it is away.
    fn said(
        &self,
        run: &Run,
        frozen: Option<(usize, &BTreeMap<Key, String>)>,
    ) -> BTreeMap<usize, String> {
        (0..3)
            .filter(|p| run.wants[*p])
            .map(|p| {
                let value = match frozen {
                    Some((away, values)) if away == p => values.get(&run.key).cloned(),
                    _ => self.plugins[p].value(&run.key.0, &run.key.1),
                };
                let value = value.unwrap_or_else(|| {
                    panic!("{:?}: plugin {p} has no answer after a pass", run.key)
                });
                (p, value)
            })
            .collect()
    }

    /// The property after the passes of a step.
    fn check(&self, frozen: Option<(usize, &BTreeMap<Key, String>)>) {
        let snapshot = self.node.handle.snapshot();
        for run in self.runs.values() {
            let said = self.said(run, frozen);
            let want = expected(&self.plugins, &run.admitted, &said);
            assert_eq!(
                cgroup_of(&self.node.host, &run.cgroup),
                written(&self.node.host, &want),
                "{:?}: cpus and mems written, plugins said {said:?}",
                run.key
            );
            assert_eq!(
                quota_of(&self.node.host, &run.cgroup),
                quota_written(&want),
                "{:?}: quota written, plugins said {said:?}",
                run.key
            );
            let placement = &snapshot
                .workload(&run.key.0, &run.key.1)
                .expect("workload")
                .placement;
            assert_eq!(
                (&placement.env, &placement.annotations),
                (&want.env, &want.annotations),
                "{:?}",
                run.key
            );
        }
        for ((pod, container), cgroup) in &self.released {
            assert!(
                snapshot.workload(pod, container).is_none(),
                "{pod} was released"
            );
            assert_eq!(
                cgroup_of(&self.node.host, cgroup),
                None,
                "{cgroup} was released"
            );
        }
    }

    async fn apply(&mut self, step: &Step) {
        match step {
            Step::Admit {
                slot,
                wants,
                values,
            } => {
                if self.runs.contains_key(slot) {
                    return;
                }
                self.admissions += 1;
                let uid = format!("pinion-run-w{}", self.admissions);
                for (plugin, table) in self.plugins.iter().enumerate() {
                    table.set_default(&answer(plugin, values[plugin]));
                }
                let request = admission(&uid, *wants, false);
                let key = (uid, request.container.clone());
                let admitted = self.node.handle.admit(request).await.expect("admitted");
                let cgroup = admitted.cgroup.clone().expect("a run has a cgroup");
                self.runs.insert(
                    *slot,
                    Run {
                        key,
                        wants: *wants,
                        cgroup,
                        admitted: admitted.placement,
                    },
                );
            }
            Step::Release { slot } => {
                if let Some(run) = self.runs.remove(slot) {
                    self.node
                        .handle
                        .release(run.key.0.clone(), None)
                        .await
                        .expect("released");
                    self.released.push((run.key, run.cgroup));
                }
            }
            Step::Change {
                slot,
                plugin,
                value,
            } => {
                if let Some(run) = self.runs.get(slot) {
                    self.plugins[*plugin].set(&run.key.0, &run.key.1, &answer(*plugin, *value));
                }
            }
            Step::Forget { slot, plugin } => {
                if let Some(run) = self.runs.get(slot) {
                    self.plugins[*plugin].forget(&run.key.0, &run.key.1);
                }
            }
            Step::Bounce {
                plugin,
                value,
                lose_state,
            } => {
                let resource = RESOURCES[*plugin].0;
                let served = self.served[*plugin].take().expect("served");
                served.stop().await;
                self.node
                    .wait_for_plugin(resource, "stopped", PATIENCE)
                    .await;
                // What it said stays applied while it is away, whatever it
                // thinks meanwhile.
                let table = &self.plugins[*plugin];
                let frozen: BTreeMap<Key, String> = self
                    .runs
                    .values()
                    .filter_map(|run| Some((run.key.clone(), table.value(&run.key.0, &run.key.1)?)))
                    .collect();
                for run in self.runs.values() {
                    table.set(&run.key.0, &run.key.1, &answer(*plugin, *value));
                    if *lose_state {
                        table.forget(&run.key.0, &run.key.1);
                    }
                }
                self.settle().await;
                self.check(Some((*plugin, &frozen)));
                self.served[*plugin] = Some(self.node.serve(table.clone()));
                self.node
                    .wait_for_plugin(resource, "active", PATIENCE)
                    .await;
            }
        }
    }

    /// Stops everything; every released pod's plugins heard of it.
    async fn stop(mut self) {
        let deadline = Instant::now() + PATIENCE;
        while !self
            .node
            .handle
            .snapshot()
            .pending_plugin_removals
            .is_empty()
        {
            assert!(
                Instant::now() < deadline,
                "RemovePod never reached every plugin"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for ((pod, _), _) in &self.released {
            for plugin in &self.plugins {
                assert_eq!(
                    plugin.value(pod, "main"),
                    None,
                    "{} still holds {pod}",
                    plugin.resource_name()
                );
            }
        }
        for served in self.served.iter_mut().filter_map(Option::take) {
            served.stop().await;
        }
        self.node.stop().await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, max_shrink_iters: 32, ..ProptestConfig::default() })]

    #[test]
    fn over_the_sockets_the_cgroups_follow_the_plugins_last_answers(steps in prop::collection::vec(step(), 1..10)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut wire = Wire::start().await;
            for step in &steps {
                wire.apply(step).await;
                wire.settle().await;
                wire.check(None);
            }
            wire.stop().await;
        });
    }
}

/// Regression: the reconcile loop re-allocated a running runtime container
/// a plugin had forgotten through the admission path, which takes the answer
/// as applied by the runtime creating the container; the running container
/// never got its new cpuset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_running_container_a_plugin_forgot_gets_its_reallocated_cpuset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = QrmNodeOptions {
        runtime: true,
        ..QrmNodeOptions::new(PERIOD)
    };
    let mut node = QrmNode::start(&SyntheticNode::new(topology()), dir.path(), &options);
    let (resource, property) = RESOURCES[CPUSET];
    let cpuset = TablePlugin::new(resource, property, "2-3");
    let served = node.serve(cpuset.clone());
    node.wait_for_plugin(resource, "active", PATIENCE).await;
    let admitted = node
        .handle
        .admit(admission("pinion-run-r", [true, false, false], true))
        .await
        .expect("admitted");
    assert_eq!(admitted.placement.cpus, pinion_core::testing::cpus("2-3"));

    // The plugin restarts without its state and would now give 5-6: the
    // manager drops its entry, allocates again, and the runtime must hear.
    cpuset.set_default("5-6");
    cpuset.forget("pinion-run-r", "main");
    let mut updates = node.runtime_updates.take().expect("a runtime front-end");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let batch = tokio::time::timeout_at(deadline.into(), updates.recv())
            .await
            .expect("the re-allocated cpuset never reached the runtime")
            .expect("updates");
        if batch.iter().any(|u| {
            u.container_id == "c-pinion-run-r"
                && u.placement.cpus == pinion_core::testing::cpus("5-6")
        }) {
            break;
        }
    }
    served.stop().await;
    node.stop().await;
}
