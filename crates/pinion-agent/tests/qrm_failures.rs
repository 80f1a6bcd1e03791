//! How the QoS Resource Manager survives resource plugins that fail (spec
//! `qrm.md` §4.6, §4.10, issue #11 item 8), end to end through the agent's
//! manager and real gRPC over real unix sockets: a plugin that hangs past
//! its deadline, one that answers malformed allocations or an unknown OCI
//! property, one that registers twice, a `RemovePod` that fails before it
//! succeeds, a plugin that crashes (its socket stays behind) and comes
//! back, and an admission refused after the plugins answered (under the
//! Topology Manager's `none` policy they are asked first) or undone when
//! one fails `Allocate` after it (`best-effort`).

mod qrm_common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pinion_agent::testing::qrm_node::serve_service_in;
use pinion_api::resourceplugin as rp;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_plugins::grpc::GrpcPlugin;
use qrm_common::gated::{Gate, Gated, Method};
use qrm_common::{admission, info, wait_until, Agent, Knob, ServedPlugin};

const SLOW: &str = "example.com/slow";
const FAST: &str = "example.com/fast";
const BAD: &str = "example.com/bad";
const TWICE: &str = "example.com/twice";
const GONE: &str = "example.com/gone";
const DEDICATED: (&str, &str) = ("katalyst.kubewharf.io/qos_level", "dedicated_cores");

/// An agent with an active [`FAST`] plugin setting `CpuShares=512` and
/// `KNOB=fast` for every container.
async fn agent_with_fast_knob() -> (Agent, Knob, ServedPlugin) {
    let agent = Agent::start();
    let knob = Knob::one(FAST, "CpuShares", "512", "fast");
    let served = agent.serve(knob.clone());
    agent.wait_for_plugin(FAST, "active").await;
    (agent, knob, served)
}

/// Waits until `knob` forgot `pod` and no removal is pending; it heard
/// `RemovePod` for the pod exactly once.
async fn forgotten_once(agent: &Agent, knob: &Knob, pod: &str) {
    wait_until(&format!("{} forgot {pod}", knob.resource), || {
        !knob.state().allocated.contains_key(pod)
            && agent.handle.snapshot().pending_plugin_removals.is_empty()
    })
    .await;
    assert_eq!(knob.state().remove_calls, vec![pod.to_string()]);
}

fn placed(agent: &Agent, pod: &str) -> bool {
    agent
        .handle
        .snapshot()
        .workloads
        .iter()
        .any(|w| w.pod == pod)
}

/// §4.6: fail closed for the pods that need the plugin, never block the
/// others. Regression (#11): the missed deadline was reported as `failed
/// Allocate: Timeout expired` (tonic's cancellation), now as the deadline.
/// The slow plugin hangs in `Allocate` only ([`AllocateHangs`]), so the
/// one deadline it misses is `Allocate`'s and its last error is that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_hanging_past_its_deadline_fails_only_the_pods_needing_it() {
    let agent = Agent::start_with(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        Vec::new(),
        Duration::from_secs(1),
    );
    let slow = Knob::one(SLOW, "", "", "slow");
    let fast = Knob::one(FAST, "CpuShares", "512", "fast");
    let slow_served = serve_service_in(
        agent.registry_dir(),
        SLOW,
        Gated::new(&slow, AllocateHangs(slow.clone())),
        "slow.sock",
    );
    let _fast_served = agent.serve(fast.clone());
    agent.wait_for_plugin(SLOW, "active").await;
    agent.wait_for_plugin(FAST, "active").await;

    slow.state().hang_allocate = true;
    let handle = agent.handle.clone();
    let hung = tokio::spawn(async move {
        handle
            .admit(admission(
                "pinion-run-hung",
                "1",
                &[(SLOW, "1")],
                &[DEDICATED],
            ))
            .await
    });
    wait_until("the slow plugin is inside Allocate", || {
        slow.state().in_allocate
    })
    .await;

    // Other pods, with another plugin's resource or none, are admitted
    // while the slow plugin still holds its call.
    let other = agent
        .handle
        .admit(admission("pinion-run-other", "1", &[(FAST, "1")], &[]))
        .await
        .expect("a pod of another plugin");
    assert_eq!(
        other.placement.env.get("KNOB").map(String::as_str),
        Some("fast")
    );
    agent
        .handle
        .admit(admission("pinion-run-plain", "500m", &[], &[]))
        .await
        .expect("a pod without plugin resources");
    assert!(
        slow.state().in_allocate,
        "the slow call ended before the others were admitted"
    );

    // The pod that needs it fails closed, naming the plugin and deadline.
    let err = hung
        .await
        .expect("admission task")
        .expect_err("the slow plugin never answered");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "allocate for resources {SLOW} for pod: pinion/pinion-run-hung, container: main got error: resource plugin {SLOW} did not answer Allocate within 1s"
        )),
        "{text}"
    );
    assert!(
        !placed(&agent, "pinion-run-hung"),
        "a refused pod stayed placed"
    );
    slow.state().hang_allocate = false;

    // Counted, and shown by `pinion plugins` and /metrics.
    assert_eq!(agent.plugin_errors(SLOW, "Allocate"), 1);
    let last = agent.plugin_last_error(SLOW);
    assert!(last.contains("did not answer Allocate"), "{last}");
    let metrics = pinion_agent::metrics::render(
        &agent.handle.snapshot().metrics,
        &agent.handle.plugins(),
        &[],
    );
    assert!(
        metrics.contains(&format!(
            "pinion_qrm_plugin_call_errors_total{{method=\"Allocate\",resource=\"{SLOW}\"}} 1"
        )),
        "{metrics}"
    );
    slow_served.stop().await;
    agent.stop().await;
}

/// Holds `Allocate` alone while the knob's `hang_allocate` is set, outside
/// the plugin ([`Gated`]), so the plugin's other methods answer meanwhile.
/// Served as it is, a `Knob`'s hanging `Allocate` holds the whole plugin
/// (`GrpcPlugin` calls it under its lock), and the calls queued behind it
/// — the periodic `GetTopologyAwareAllocatableResources` and
/// `GetResourcesAllocation`, the refused pod's `RemovePod` — miss their
/// deadlines after `Allocate` did: whichever of them ended last was the
/// plugin's last error, depending on how late the test read it.
struct AllocateHangs(Knob);

#[tonic::async_trait]
impl Gate for AllocateHangs {
    async fn before(&self, method: Method) {
        if method != Method::Allocate {
            return;
        }
        // Dropped at the caller's deadline (the server's grpc-timeout):
        // `in_allocate` stays set, as for a plugin still stuck.
        self.0.state().in_allocate = true;
        let deadline = tokio::time::Instant::now() + qrm_common::PATIENCE;
        while self.0.state().hang_allocate && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A plugin's answer that cannot be applied fails the admission with the
/// kubelet fork's text naming the value (for every QoS level: the fork
/// fails the container creation), is counted as the plugin's error, and
/// leaves the agent serving. Regression (#11): such answers were not
/// counted as the plugin's errors (`docs/metrics.md` says they are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_answers_and_unknown_oci_properties_fail_the_admission_naming_the_value() {
    let agent = Agent::start();
    let bad = Knob::one(BAD, "CpuQuota", "20000", "bad");
    let _served = agent.serve(bad.clone());
    agent.wait_for_plugin(BAD, "active").await;
    let cases = [
        ("bad cpulist", "CpusetCpus", "0-x", "CpusetCpus \"0-x\" is not a valid list"),
        ("bad memory nodes", "CpusetMems", "1,,z", "CpusetMems \"1,,z\" is not a valid list"),
        ("quota not a number", "CpuQuota", "lots", "parse: lots to int failed with error"),
        ("negative shares", "CpuShares", "-5", "parse: -5 to int failed with error"),
        (
            "unknown OCI property",
            "CpuRealtimeRuntime",
            "100",
            "OCI resource config doesn't support oci property name: CpuRealtimeRuntime for resource: example.com/bad",
        ),
    ];
    for (index, (case, property, value, message)) in cases.iter().enumerate() {
        bad.state()
            .answer
            .insert(BAD.to_string(), info(property, value, "bad"));
        let pod = format!("pinion-run-bad-{index}");
        let err = agent
            .handle
            .admit(admission(&pod, "500m", &[(BAD, "1")], &[]))
            .await
            .expect_err(case);
        let text = err.to_string();
        assert!(text.contains(message), "{case}: {text}");
        assert!(text.contains(&pod), "{case}: {text}");
        assert!(
            !placed(&agent, &pod),
            "{case}: the refused pod stayed placed"
        );
        assert_eq!(
            agent.plugin_errors(BAD, "Allocate"),
            u64::try_from(index + 1).expect("count"),
            "{case}: not counted"
        );
    }
    let last = agent.plugin_last_error(BAD);
    assert!(last.contains("CpuRealtimeRuntime"), "{last}");

    // The agent serves on: a sane answer is admitted.
    bad.state()
        .answer
        .insert(BAD.to_string(), info("CpuQuota", "20000", "good"));
    let admitted = agent
        .handle
        .admit(admission("pinion-run-good", "500m", &[(BAD, "1")], &[]))
        .await
        .expect("a sane answer");
    assert_eq!(admitted.placement.resources.cpu_quota, Some(20_000));
    agent.stop().await;
}

/// Two plugins register the same resource from two sockets: the newest
/// registration serves every call, and the older one leaving (its socket
/// removed) does not stop the newer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_registered_twice_is_served_by_the_newest_registration() {
    let agent = Agent::start();
    let first = Knob::one(TWICE, "CpuShares", "100", "first");
    let first_served = agent.serve_as(first.clone(), "first.sock");
    agent.wait_for_plugin(TWICE, "active").await;
    let second = Knob::one(TWICE, "CpuShares", "200", "second");
    let _second_served = agent.serve_as(second.clone(), "second.sock");
    wait_until("the second registration wins", || {
        agent
            .plugin(TWICE)
            .expect("plugin")
            .socket
            .ends_with("second.sock")
    })
    .await;
    let first_calls = first.state().calls;

    let admitted = agent
        .handle
        .admit(admission("pinion-run-twice", "500m", &[(TWICE, "1")], &[]))
        .await
        .expect("admitted");
    assert_eq!(
        admitted.placement.env.get("KNOB").map(String::as_str),
        Some("second")
    );
    assert_eq!(admitted.placement.resources.cpu_shares, Some(200));
    // Reconcile polls the newest only.
    let polled = second.state().calls;
    wait_until("two more reconcile polls", || {
        second.state().calls >= polled + 2
    })
    .await;
    assert_eq!(
        first.state().calls,
        first_calls,
        "the replaced plugin was still called"
    );

    // The replaced plugin goes away: its socket's removal stops nothing.
    first_served.stop().await;
    let polled = second.state().calls;
    wait_until("two more reconcile polls", || {
        second.state().calls >= polled + 2
    })
    .await;
    let now = agent.plugin(TWICE).expect("plugin");
    assert_eq!(now.state, "active", "{now:?}");
    assert!(now.socket.ends_with("second.sock"), "{now:?}");
    agent
        .handle
        .admit(admission(
            "pinion-run-twice-2",
            "500m",
            &[(TWICE, "1")],
            &[],
        ))
        .await
        .expect("still served");
    agent.stop().await;
}

/// Holds the reconcile poll (`GetResourcesAllocation`) while `hold` is set
/// (at most twice [`qrm_common::PATIENCE`]); `inside` tells the test one
/// waits.
struct PollHolds {
    hold: Arc<AtomicBool>,
    inside: Arc<AtomicBool>,
}

#[tonic::async_trait]
impl Gate for PollHolds {
    async fn before(&self, method: Method) {
        if method != Method::Poll || !self.hold.load(Ordering::SeqCst) {
            return;
        }
        self.inside.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + 2 * qrm_common::PATIENCE;
        while self.hold.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The allocation result the agent keeps for `pod`'s container of `resource`.
fn kept_result(agent: &Agent, pod: &str, resource: &str) -> Option<String> {
    agent
        .handle
        .snapshot()
        .workloads
        .iter()
        .find(|w| w.pod == pod)
        .and_then(|w| w.plugins.get(resource))
        .map(|a| a.allocation_result.clone())
}

/// Regression (found from outside, session 45): a reconcile poll still
/// under way when its plugin was replaced by a newer registration held
/// the new plugin's polls back until it ended, and its late answer was
/// then applied as the new plugin's. Each registration now has a number:
/// the old poll is given up at the next pass, the new plugin polled, and
/// an answer of a replaced plugin is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_late_poll_answer_of_a_replaced_plugin_is_not_applied() {
    // Calls may take longer than the test waits: only the replacement ends
    // the held poll's hold on the resource.
    let agent = Agent::start_with(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        Vec::new(),
        2 * qrm_common::PATIENCE,
    );
    let first = Knob::one(TWICE, "CpuShares", "100", "first");
    let hold = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicBool::new(false));
    let _first_served = serve_service_in(
        agent.registry_dir(),
        TWICE,
        Gated::new(
            &first,
            PollHolds {
                hold: Arc::clone(&hold),
                inside: Arc::clone(&inside),
            },
        ),
        "first.sock",
    );
    agent.wait_for_plugin(TWICE, "active").await;
    agent
        .handle
        .admit(admission("pinion-run-late", "500m", &[(TWICE, "1")], &[]))
        .await
        .expect("admitted");
    assert_eq!(
        kept_result(&agent, "pinion-run-late", TWICE).as_deref(),
        Some("100")
    );

    // The first plugin's next poll is held; meanwhile its answer changes
    // (what it will say late) and a second plugin registers the resource,
    // knowing the pod with its own answer.
    hold.store(true, Ordering::SeqCst);
    wait_until("a poll of the first plugin is held", || {
        inside.load(Ordering::SeqCst)
    })
    .await;
    first.state().answer.values_mut().for_each(|info| {
        info.allocation_result = "300".to_string();
    });
    let second = Knob::one(TWICE, "CpuShares", "200", "second");
    second.state().allocated.insert(
        "pinion-run-late".to_string(),
        vec![pinion_agent::controller::RUN_CONTAINER.to_string()],
    );
    let _second_served = agent.serve_as(second.clone(), "second.sock");
    wait_until("the second registration wins", || {
        agent
            .plugin(TWICE)
            .is_some_and(|p| p.state == "active" && p.socket.ends_with("second.sock"))
    })
    .await;
    let registered = second.state().calls;
    wait_until(
        "the second plugin is polled while the first one's poll is held",
        || second.state().calls > registered,
    )
    .await;
    wait_until("the second plugin's answer is kept", || {
        kept_result(&agent, "pinion-run-late", TWICE).as_deref() == Some("200")
    })
    .await;

    // The first plugin's held poll ends now: its answer is not applied.
    hold.store(false, Ordering::SeqCst);
    let polled = second.state().calls;
    wait_until("three more polls of the second plugin", || {
        second.state().calls >= polled + 3
    })
    .await;
    assert_eq!(
        kept_result(&agent, "pinion-run-late", TWICE).as_deref(),
        Some("200")
    );
    agent.stop().await;
}

/// Regression (found from outside, session 45): the reconcile loop
/// re-allocated the containers a plugin forgot one after the other without
/// watching for the agent's stop, so with a hung plugin the stop waited a
/// whole deadline per container. The stop now ends the re-allocations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_the_agent_stops_while_a_hung_plugin_is_asked_to_reallocate() {
    // The plugin's deadline is longer than the test waits for the stop.
    let agent = Agent::start_with(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        Vec::new(),
        2 * qrm_common::PATIENCE,
    );
    let slow = Knob::one(SLOW, "CpuShares", "100", "slow");
    let _served = serve_service_in(
        agent.registry_dir(),
        SLOW,
        Gated::new(&slow, AllocateHangs(slow.clone())),
        "slow.sock",
    );
    agent.wait_for_plugin(SLOW, "active").await;
    for pod in ["pinion-run-one", "pinion-run-two"] {
        agent
            .handle
            .admit(admission(pod, "500m", &[(SLOW, "1")], &[]))
            .await
            .expect("admitted");
    }
    // The plugin forgets both and hangs in `Allocate`: the reconcile loop
    // asks it again, and waits.
    {
        let mut state = slow.state();
        state.hang_allocate = true;
        state.in_allocate = false;
        state.allocated.clear();
    }
    wait_until("the plugin is asked to re-allocate", || {
        slow.state().in_allocate
    })
    .await;
    tokio::time::timeout(qrm_common::PATIENCE, agent.stop())
        .await
        .expect("the agent stops without waiting for the hung plugin");
    slow.state().hang_allocate = false;
}

/// §4.10: `RemovePod` is repeated, with back-off, until every plugin
/// succeeded; only then is the pod forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_remove_pod_is_retried_until_it_succeeds() {
    let (agent, knob, _served) = agent_with_fast_knob().await;
    agent
        .handle
        .admit(admission("pinion-run-removed", "500m", &[(FAST, "1")], &[]))
        .await
        .expect("admitted");
    knob.state().remove_failures = 2;
    agent
        .handle
        .release("pinion-run-removed".into(), None)
        .await
        .expect("released");
    wait_until("the pod is forgotten after RemovePod succeeded", || {
        !agent
            .handle
            .snapshot()
            .pending_plugin_removals
            .contains(&"pinion-run-removed".to_string())
            && knob.state().remove_failures == 0
    })
    .await;
    let calls = knob.state().remove_calls.clone();
    assert_eq!(
        calls,
        vec!["pinion-run-removed".to_string(); 3],
        "two failures, then the success"
    );
    assert!(!knob.state().allocated.contains_key("pinion-run-removed"));
    assert_eq!(agent.plugin_errors(FAST, "RemovePod"), 2);
    agent.stop().await;
}

/// Found in the fiftieth session: a pod admitted again under the same UID
/// while its plugins had yet to hear of its earlier removal (a `RemovePod`
/// that failed and waits for its retry; kubelet runs a replaced sandbox's
/// containers under the same pod UID) was allocated by the plugins, and the
/// retried `RemovePod` then took that allocation back: the plugin counted
/// free what Pinion had admitted. Now such an admission waits for the
/// removal (at most a second) and is refused while it is pending, so the
/// runtime's retry comes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_pod_admitted_again_before_its_removal_was_heard_keeps_its_allocation() {
    let (agent, knob, _served) = agent_with_fast_knob().await;
    let pod = "pinion-run-again";
    let request = || admission(pod, "500m", &[(FAST, "1")], &[]);
    agent.handle.admit(request()).await.expect("admitted");
    knob.state().remove_failures = 2;
    agent
        .handle
        .release(pod.into(), None)
        .await
        .expect("released");
    let refused = agent
        .handle
        .admit(request())
        .await
        .expect_err("its plugins have not heard of its removal yet");
    let text = refused.to_string();
    assert!(
        text.contains(pod) && text.contains("earlier removal"),
        "{text}"
    );
    assert!(!placed(&agent, pod), "nothing admitted");

    // The runtime's retry, once the removal is heard.
    wait_until("the earlier removal is heard", || {
        agent.handle.snapshot().pending_plugin_removals.is_empty()
    })
    .await;
    agent.handle.admit(request()).await.expect("admitted again");
    assert!(placed(&agent, pod));
    assert_eq!(
        knob.state().allocated.get(pod),
        Some(&vec!["main".to_string()]),
        "the plugin holds what Pinion admitted"
    );
    assert_eq!(knob.state().remove_calls, vec![pod.to_string(); 3]);
    assert_eq!(
        knob.state().allocate_calls.len(),
        2,
        "the first admission and the retry; nothing taken back to allocate again"
    );
    agent.stop().await;
}

/// Regression: the removal loop marked a pod removed with a command it did
/// not wait for, so a snapshot published meanwhile (another pod admitted or
/// released) still listed the pod and it got `RemovePod` again — every pod
/// twice under churn (the admission bench counted 2 calls per pod). Each
/// pod that goes is told exactly once when its plugins succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_each_departed_pod_gets_remove_pod_once_under_churn() {
    let (agent, knob, _served) = agent_with_fast_knob().await;
    let pods: Vec<String> = (0..40).map(|n| format!("pinion-run-churn-{n}")).collect();
    for uid in &pods {
        agent
            .handle
            .admit(admission(uid, "100m", &[(FAST, "1")], &[]))
            .await
            .expect("admitted");
        agent
            .handle
            .release(uid.clone(), None)
            .await
            .expect("released");
    }
    wait_until("every departed pod is forgotten", || {
        agent.handle.snapshot().pending_plugin_removals.is_empty()
            && knob.state().remove_calls.len() >= pods.len()
    })
    .await;
    // Give a stale snapshot the chance to trigger a repeat.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut calls = knob.state().remove_calls.clone();
    calls.sort();
    let mut expected = pods.clone();
    expected.sort();
    assert_eq!(calls, expected, "one RemovePod per departed pod");
    agent.stop().await;
}

/// A plugin process that dies outright: its own runtime, dropped without
/// any clean-up (the socket file stays, connections break).
struct Crashable {
    runtime: tokio::runtime::Runtime,
}

impl Crashable {
    fn start(knob: Knob, socket: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("plugin runtime");
        let socket = socket.to_path_buf();
        runtime.spawn(async move {
            let identity = pinion_api::plugin::Identity::new(&knob.resource.clone());
            pinion_api::plugin::serve(
                &socket,
                identity,
                GrpcPlugin::new(knob),
                std::future::pending(),
            )
            .await
            .expect("plugin serves");
        });
        Self { runtime }
    }

    fn crash(self) {
        self.runtime.shutdown_background();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_crashes_and_comes_back_re_registers_and_reconcile_resumes() {
    let agent = Agent::start();
    let knob = Knob::one(GONE, "CpuShares", "512", "gone");
    let socket = agent.registry_dir().join("gone.sock");
    let plugin = Crashable::start(knob.clone(), &socket);
    agent.wait_for_plugin(GONE, "active").await;
    let admitted = agent
        .handle
        .admit(admission("pinion-run-crash", "500m", &[(GONE, "1")], &[]))
        .await
        .expect("admitted");
    let cgroup = admitted.cgroup.clone().expect("cgroup");
    agent
        .wait_for_files(&cgroup, "the plugin's weight", |c| {
            c.files.get("cpu.weight").map(String::as_str) == Some("20")
        })
        .await;

    plugin.crash();
    assert!(socket.exists(), "a crash leaves the socket behind");
    // Reconcile fails against the dead socket, counted; the agent serves on.
    wait_until("a failed reconcile poll", || {
        agent.plugin_errors(GONE, "GetResourcesAllocation") >= 1
    })
    .await;
    agent
        .handle
        .admit(admission("pinion-run-meanwhile", "500m", &[], &[]))
        .await
        .expect("admissions go on");

    // It comes back (from its state) with a new answer: registered again
    // through the watcher, and the next reconcile reaches the container.
    let registrations = knob.state().registrations;
    knob.state()
        .answer
        .insert(GONE.to_string(), info("CpuShares", "1024", "gone"));
    let back = Crashable::start(knob.clone(), &socket);
    wait_until("the plugin registers again", || {
        knob.state().registrations > registrations
    })
    .await;
    agent.wait_for_plugin(GONE, "active").await;
    agent
        .wait_for_files(&cgroup, "the new weight from reconcile", |c| {
            c.files.get("cpu.weight").map(String::as_str) == Some("39")
        })
        .await;
    agent.stop().await;
    back.crash();
}

/// Under the Topology Manager's `none` policy (the agent's default) the
/// plugins are asked before the admission, which is decided with their
/// answers and made durable with them in one flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_none_policy_plugins_answer_first_and_one_flush_keeps_both() {
    let (agent, knob, _served) = agent_with_fast_knob().await;
    let batches = |agent: &Agent| {
        agent
            .handle
            .snapshot()
            .metrics
            .counters
            .journal_batches_total
    };
    let before = batches(&agent);
    let admitted = agent
        .handle
        .admit(admission("pinion-run-first", "2", &[(FAST, "1")], &[]))
        .await
        .expect("admitted");
    assert_eq!(
        batches(&agent) - before,
        1,
        "the admission and the plugin's answer are made durable together"
    );
    assert_eq!(admitted.placement.resources.cpu_shares, Some(512));
    assert_eq!(
        admitted.placement.env.get("KNOB").map(String::as_str),
        Some("fast")
    );
    assert_eq!(admitted.placement.cpus.len(), 2, "the static policy's CPUs");
    assert_eq!(
        knob.state().allocated.get("pinion-run-first"),
        Some(&vec!["main".to_string()])
    );
    // The run's cgroup has its process (as `pinion run` puts it there), so
    // the restart keeps the run.
    let name = pinion_host::cgroup::CgroupName::new("pinion-run-first").expect("cgroup name");
    agent
        .host
        .tree()
        .children
        .get_mut(&name)
        .expect("the run's cgroup")
        .pids
        .push(std::process::id());
    let (dir, host) = agent.stop().await;
    let agent = Agent::start_in(dir, host, Vec::new());
    let workload = agent
        .handle
        .snapshot()
        .workloads
        .iter()
        .find(|w| w.pod == "pinion-run-first")
        .cloned()
        .expect("still admitted after a restart");
    assert_eq!(workload.placement.resources.cpu_shares, Some(512));
    agent.stop().await;
}

fn batches(agent: &Agent) -> u64 {
    agent
        .handle
        .snapshot()
        .metrics
        .counters
        .journal_batches_total
}

/// Issue 30 item 1: under a policy that merges hints, a container whose
/// CPUs a resource plugin owns gets no hints from the CPU manager, so its
/// merged hint is known before the admission: the plugins answer first and
/// one flush keeps the admission and their answers, as under `none`. A
/// container whose CPUs the policy owns still has the engine decide first
/// (its hints count): the plugins' answers are a second flush. The
/// placements are the plugins' and the policy's either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_best_effort_plugins_answer_first_only_for_cpus_a_plugin_owns() {
    let owned_by_plugin = Agent::start_with_policy("best-effort");
    let cpu = Knob::one("cpu", "CpusetCpus", "2-3", "cpu");
    let _cpu = owned_by_plugin.serve(cpu.clone());
    owned_by_plugin.wait_for_plugin("cpu", "active").await;
    let before = batches(&owned_by_plugin);
    let admitted = owned_by_plugin
        .handle
        .admit(admission("pinion-run-owned", "1", &[], &[]))
        .await
        .expect("admitted");
    assert_eq!(
        batches(&owned_by_plugin) - before,
        1,
        "the admission and the plugin's answer are made durable together"
    );
    assert_eq!(admitted.placement.cpus.to_string(), "2-3");
    assert_eq!(
        cpu.state().allocate_calls,
        vec![("pinion-run-owned".to_string(), "main".to_string())]
    );
    owned_by_plugin.stop().await;

    let owned_by_policy = Agent::start_with_policy("best-effort");
    let fast = Knob::one(FAST, "CpuShares", "512", "fast");
    let _fast = owned_by_policy.serve(fast.clone());
    owned_by_policy.wait_for_plugin(FAST, "active").await;
    let before = batches(&owned_by_policy);
    let admitted = owned_by_policy
        .handle
        .admit(admission("pinion-run-policy", "2", &[(FAST, "1")], &[]))
        .await
        .expect("admitted");
    assert_eq!(
        batches(&owned_by_policy) - before,
        2,
        "the engine decides first, the plugin's answer follows"
    );
    assert_eq!(admitted.placement.cpus.len(), 2, "the static policy's CPUs");
    assert_eq!(admitted.placement.resources.cpu_shares, Some(512));
    owned_by_policy.stop().await;
}

/// An admission refused after the plugins answered (here: more exclusive
/// CPUs than the node has) leaves nothing behind: the plugins are told to
/// forget the pod, as for a released one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_refused_after_the_plugins_answered_has_them_forget_the_pod() {
    let (agent, knob, _served) = agent_with_fast_knob().await;
    let err = agent
        .handle
        .admit(admission("pinion-run-too-big", "64", &[(FAST, "1")], &[]))
        .await
        .expect_err("more CPUs than the node has");
    assert!(err.to_string().contains("64"), "names the request: {err}");
    assert!(!placed(&agent, "pinion-run-too-big"));
    forgotten_once(&agent, &knob, "pinion-run-too-big").await;
    agent.stop().await;
}

/// The refused container's pod still has an admitted container: its
/// plugins must not forget the pod (that would drop the live container's
/// allocation); the refused container's stays with them until the pod goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_container_of_a_pod_with_a_live_one_leaves_the_pod_with_its_plugins() {
    let (agent, knob, _served) = agent_with_fast_knob().await;
    let mut first = admission("pinion-run-two", "1", &[(FAST, "1")], &[]);
    let mut big = first.pod.containers[0].clone();
    big.name = "big".into();
    let too_many: pinion_core::Quantity = "64".parse().expect("quantity");
    big.cpu_request = Some(too_many.clone());
    big.cpu_limit = Some(too_many);
    first.pod.containers.push(big);
    let mut second = first.clone();
    second.container = "big".into();
    agent
        .handle
        .admit(first)
        .await
        .expect("the first container");
    agent
        .handle
        .admit(second)
        .await
        .expect_err("more CPUs than the node has");
    // Had the pod been marked, it would be pending now or already told.
    assert!(!agent
        .handle
        .snapshot()
        .pending_plugin_removals
        .contains(&"pinion-run-two".to_string()));
    assert!(knob.state().remove_calls.is_empty());
    assert!(placed(&agent, "pinion-run-two"));
    // The pod goes: its plugins hear of it once.
    agent
        .handle
        .release("pinion-run-two".into(), None)
        .await
        .expect("released");
    forgotten_once(&agent, &knob, "pinion-run-two").await;
    agent.stop().await;
}

/// Serves a good plugin and [`BAD`], whose answer is malformed, and admits
/// `pod` asking both: refused with the bad answer, not placed. Returns the
/// good plugin and both servers (kept while the test runs).
async fn refused_by_a_later_plugin(agent: &Agent, pod: &str) -> (Knob, [ServedPlugin; 2]) {
    // Asked in resource-name order: the good plugin first.
    const GOOD: &str = "example.com/a-good";
    let good = Knob::one(GOOD, "CpuShares", "512", "good");
    let bad = Knob::one(BAD, "CpusetCpus", "0-x", "bad");
    let served = [agent.serve(good.clone()), agent.serve(bad.clone())];
    agent.wait_for_plugin(GOOD, "active").await;
    agent.wait_for_plugin(BAD, "active").await;
    let err = agent
        .handle
        .admit(admission(pod, "500m", &[(GOOD, "1"), (BAD, "1")], &[]))
        .await
        .expect_err("the bad plugin's answer");
    assert!(err.to_string().contains("0-x"), "{err}");
    assert!(!placed(agent, pod));
    (good, served)
}

/// Under a policy that gathers hints, `Allocate` follows the admission: a
/// plugin failing it has the admission undone (released) and the plugins
/// that allocated told to forget the pod, once — the undo's release does
/// not mark the pod (no answer was stored), the refusal does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_failing_after_the_admission_undoes_it_and_has_the_plugins_told_once() {
    let agent = Agent::start_with_policy("best-effort");
    let (good, _served) = refused_by_a_later_plugin(&agent, "pinion-run-undone").await;
    forgotten_once(&agent, &good, "pinion-run-undone").await;
    // Give a second mark the time to reach the plugins.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        good.state().remove_calls,
        vec!["pinion-run-undone".to_string()],
        "one RemovePod for the undone admission"
    );
    agent.stop().await;
}

/// Regression: when a later plugin failed an admission, the plugins that
/// had already allocated for it were never told (the pod was refused
/// before any answer was stored, so its removal did not count as one with
/// plugin data) and kept the allocation for good — exclusive CPUs lost
/// until a restart. They now hear `RemovePod` for the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_plugins_that_allocated_before_a_failing_one_forget_the_pod() {
    let agent = Agent::start();
    let (good, _served) = refused_by_a_later_plugin(&agent, "pinion-run-half").await;
    // The removal loop may already have told the good plugin to forget the
    // pod, so look at what it heard rather than at what it still holds
    // (reading `allocated` here raced with `RemovePod` and failed CI once).
    assert_eq!(
        good.state().allocate_calls,
        vec![("pinion-run-half".to_string(), "main".to_string())],
        "the good plugin allocated before the bad one failed"
    );
    forgotten_once(&agent, &good, "pinion-run-half").await;
    agent.stop().await;
}

/// Regression (issue 27, item 6): with the `cpu` plugin hung past its
/// deadline or dead (its socket gone), `pinion run --cpus 1` — a pod
/// without a QoS level asking for one exclusive CPU — was tolerated (§4.6)
/// and placed in the shared pool without a word. An exclusive request now
/// fails, naming the plugin and the reason; a shared request (no
/// exclusivity asked) is still tolerated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_exclusive_run_fails_when_the_cpu_plugin_is_hung_or_dead() {
    let agent = Agent::start_with(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        Vec::new(),
        Duration::from_secs(1),
    );
    let cpu = Knob::one("cpu", "CpusetCpus", "2-3", "cpu");
    let served = agent.serve(cpu.clone());
    agent.wait_for_plugin("cpu", "active").await;

    // Hung: past the deadline.
    cpu.state().hang_allocate = true;
    let err = agent
        .handle
        .admit(admission("pinion-run-hung", "1", &[], &[]))
        .await
        .expect_err("an exclusive request never runs shared");
    assert!(
        err.to_string().contains(
            "allocate for resources cpu for pod: pinion/pinion-run-hung, container: main got error: resource plugin cpu did not answer Allocate within 1s"
        ),
        "{err}"
    );
    assert!(!placed(&agent, "pinion-run-hung"));
    let shared = agent
        .handle
        .admit(admission("pinion-run-shared-hung", "500m", &[], &[]))
        .await
        .expect("a shared request is tolerated");
    assert!(!shared.placement.is_exclusive());
    cpu.state().hang_allocate = false;

    // Dead: its socket removed, the endpoint stopped.
    served.stop().await;
    agent.wait_for_plugin("cpu", "stopped").await;
    let err = agent
        .handle
        .admit(admission("pinion-run-dead", "1", &[], &[]))
        .await
        .expect_err("an exclusive request never runs shared");
    assert!(
        err.to_string().contains(
            "allocate for resources cpu for pod: pinion/pinion-run-dead, container: main got error: endpoint cpu has been stopped"
        ),
        "{err}"
    );
    assert!(!placed(&agent, "pinion-run-dead"));
    agent
        .handle
        .admit(admission("pinion-run-shared-dead", "500m", &[], &[]))
        .await
        .expect("a shared request is tolerated");
    agent.stop().await;
}

/// A plugin answering for another pod than the one asked (its answer's
/// `pod_uid` rewritten).
struct OtherPod(GrpcPlugin<Knob>);

type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

#[tonic::async_trait]
impl rp::resource_plugin_server::ResourcePlugin for OtherPod {
    async fn allocate(
        &self,
        request: tonic::Request<rp::ResourceRequest>,
    ) -> Answer<rp::ResourceAllocationResponse> {
        let mut answer = self.0.allocate(request).await?;
        answer.get_mut().pod_uid = "pinion-run-someone-else".into();
        Ok(answer)
    }

    async fn get_resource_plugin_options(
        &self,
        request: tonic::Request<rp::Empty>,
    ) -> Answer<rp::ResourcePluginOptions> {
        self.0.get_resource_plugin_options(request).await
    }
}

/// Regression (issue 27, item 5): whatever a plugin answered was applied —
/// a cpuset from a plugin of another resource, CPUs off the machine or
/// held exclusively by another workload (failing at the kernel's write, if
/// at all), environment variables and annotations a runtime splits, a NaN
/// quantity, an answer for another pod, a record too large for the
/// journal. Each is now refused when it arrives, naming the plugin (or the
/// size and the limit), and the pod is not placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_answers_a_plugin_may_not_give_are_refused_naming_the_plugin() {
    const WIDGET: &str = "example.com/widget";
    let agent = Agent::start();
    // A static-policy run holding exclusive CPUs, before any cpu plugin.
    let exclusive = agent
        .handle
        .admit(admission("pinion-run-exclusive", "2", &[], &[]))
        .await
        .expect("exclusive run");
    assert!(exclusive.placement.is_exclusive());
    let held = exclusive.placement.cpus.to_string();
    let free = (1..16)
        .find(|cpu| !exclusive.placement.cpus.contains(*cpu))
        .expect("a free cpu")
        .to_string();

    let widget = Knob::one(WIDGET, "CpuShares", "512", "w");
    let cpu = Knob::one("cpu", "CpusetCpus", &free, "c");
    let _served = [agent.serve(widget.clone()), agent.serve(cpu.clone())];
    agent.wait_for_plugin(WIDGET, "active").await;
    agent.wait_for_plugin("cpu", "active").await;

    let refused = |pod: &'static str, expected: String| {
        let agent = &agent;
        async move {
            let err = agent
                .handle
                .admit(admission(pod, "500m", &[(WIDGET, "1")], &[]))
                .await
                .expect_err(pod);
            assert!(err.to_string().contains(&expected), "{pod}: {err}");
            assert!(!placed(agent, pod), "{pod} stayed placed");
        }
    };
    let answer = |knob: &Knob, info: pinion_plugins::AllocationInfo| {
        knob.state().answer = [(knob.resource.clone(), info)].into();
    };

    answer(&widget, info("CpusetCpus", "1", "w"));
    refused(
        "pinion-run-widget-cpus",
        format!("resource plugin {WIDGET} answered Allocate with an allocation that cannot be applied: resource {WIDGET}: only the cpu resource plugin may set CpusetCpus, not the {WIDGET} plugin (it answered \"1\")"),
    )
    .await;
    answer(&widget, info("CpuShares", "512", "w"));

    answer(&cpu, info("CpusetCpus", "14-17", "c"));
    refused(
        "pinion-run-off-machine",
        "resource cpu: CpusetCpus 14-17 has cpus 16-17 that are offline or not on this machine (online: 0-15)".to_string(),
    )
    .await;
    answer(&cpu, info("CpusetCpus", &held, "c"));
    refused(
        "pinion-run-taken",
        format!("resource cpu: CpusetCpus {held} takes cpus {held} that other workloads hold exclusively"),
    )
    .await;
    answer(&cpu, info("CpusetCpus", &free, "c"));

    let mut split = info("CpuShares", "512", "w");
    split
        .envs
        .insert("EVIL".into(), "1\nLD_PRELOAD=/tmp/x.so".into());
    answer(&widget, split);
    refused(
        "pinion-run-split-env",
        format!("resource plugin {WIDGET} answered Allocate with an allocation that cannot be applied: resource {WIDGET}: the value of environment variable \"EVIL\" contains a newline"),
    )
    .await;
    let mut named = info("CpuShares", "512", "w");
    named.envs.insert("A=B".into(), "1".into());
    answer(&widget, named);
    refused(
        "pinion-run-env-name",
        "environment variable name \"A=B\" contains '='".to_string(),
    )
    .await;
    let mut nul = info("CpuShares", "512", "w");
    nul.annotations.insert("k".into(), "v\0w".into());
    answer(&widget, nul);
    refused(
        "pinion-run-nul-annotation",
        "the value of annotation \"k\" contains a NUL byte".to_string(),
    )
    .await;
    let mut nan = info("CpuShares", "512", "w");
    nan.allocated_quantity = f64::NAN;
    answer(&widget, nan);
    refused(
        "pinion-run-nan",
        format!("resource {WIDGET}: allocated quantity NaN is not a finite non-negative number"),
    )
    .await;
    let mut huge = info("CpuShares", "512", "w");
    huge.annotations.insert("big".into(), "x".repeat(1 << 20));
    answer(&widget, huge);
    refused(
        "pinion-run-huge",
        "more than the journal's limit of 1048576 bytes".to_string(),
    )
    .await;
    answer(&widget, info("CpuShares", "512", "w"));
    assert!(
        agent.plugin_errors(WIDGET, "Allocate") >= 5,
        "refusals count as the plugin's errors"
    );

    // An answer for another pod.
    const OTHER: &str = "example.com/other";
    let plugin = OtherPod(GrpcPlugin::new(Knob::one(OTHER, "CpuShares", "512", "o")));
    let served = serve_service_in(agent.registry_dir(), OTHER, plugin, "other.sock");
    agent.wait_for_plugin(OTHER, "active").await;
    let err = agent
        .handle
        .admit(admission("pinion-run-asked", "500m", &[(OTHER, "1")], &[]))
        .await
        .expect_err("an answer for another pod");
    assert!(
        err.to_string().contains(&format!("resource plugin {OTHER} answered Allocate with an allocation that cannot be applied: the answer is for pod \"pinion-run-someone-else\", not for pod \"pinion-run-asked\" that was asked")),
        "{err}"
    );
    served.stop().await;

    // The agent serves on.
    agent
        .handle
        .admit(admission("pinion-run-fine", "500m", &[(WIDGET, "1")], &[]))
        .await
        .expect("a sane answer");
    agent.stop().await;
}

/// Regression: a reconcile answer that fails the checks every `Allocate`
/// answer passes (a cpuset from a plugin other than `cpu`, a NaN quantity,
/// an environment variable a runtime splits) was logged as refused — and
/// merged all the same: the run moved to the plugin's CPU, the journal kept
/// the NaN (written as `null`, so the snapshot no longer read back and the
/// record was dropped whole at the next start). A refused reconcile answer
/// now keeps the previous allocation (and is the plugin's error), and it
/// does not count as the plugin having forgotten the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_refused_reconcile_answer_keeps_the_previous_allocation() {
    const W: &str = "example.com/w";
    const POD: &str = "pinion-run-reconciled";
    const POLL: &str = "GetResourcesAllocation";
    let agent = Agent::start();
    let knob = Knob::one(W, "CpuShares", "512", "w");
    let served = agent.serve(knob.clone());
    agent.wait_for_plugin(W, "active").await;
    let admitted = agent
        .handle
        .admit(admission(POD, "500m", &[(W, "1")], &[]))
        .await
        .expect("admitted");
    let cgroup = admitted.cgroup.clone().expect("cgroup");
    let cpus = admitted.placement.cpus.clone();
    agent
        .wait_for_cgroup(&cgroup, "the admission's cpus", |c, _| *c == cpus)
        .await;
    let stored = |agent: &Agent| {
        let snapshot = agent.handle.snapshot();
        // What `pinion ps` reads: the snapshot must survive its JSON.
        let text = serde_json::to_string(&*snapshot).expect("snapshot as json");
        let read: pinion_agent::controller::Snapshot =
            serde_json::from_str(&text).expect("the snapshot reads back");
        read.workload(POD, "main").expect("still placed").clone()
    };
    let allocated = stored(&agent).plugins;
    assert_eq!(allocated[W].allocation_result, "512");

    let mut cpuset = info("CpusetCpus", "1", "w");
    cpuset.envs.insert("A=B".into(), "x\ny".into());
    let mut nan = info("CpuShares", "256", "w");
    nan.allocated_quantity = f64::NAN;
    let mut env = info("CpuShares", "256", "w");
    env.envs.insert("A=B".into(), "x\ny".into());
    let allocate_calls = knob.state().allocate_calls.len();
    for (case, answer) in [("cpuset", cpuset), ("nan", nan), ("env", env)] {
        knob.state().answer = [(W.to_string(), answer)].into();
        let before = agent.plugin_errors(W, POLL);
        // Two refused polls: the first one's merge is done by the second.
        wait_until(&format!("{case}: two refused polls"), || {
            agent.plugin_errors(W, POLL) >= before + 2
        })
        .await;
        let workload = stored(&agent);
        assert_eq!(workload.plugins, allocated, "{case}: the stored allocation");
        assert_eq!(workload.placement.cpus, cpus, "{case}: the placement");
        assert_eq!(workload.placement.resources.cpu_shares, Some(512), "{case}");
        assert!(!workload.placement.env.contains_key("A=B"), "{case}");
        let name = pinion_host::cgroup::CgroupName::new(&cgroup).expect("cgroup name");
        assert_eq!(
            agent.host.tree().children[&name].cpus,
            cpus,
            "{case}: the cgroup's cpus"
        );
    }
    assert_eq!(
        knob.state().allocate_calls.len(),
        allocate_calls,
        "a refused answer is not a forgotten container: no re-allocation"
    );

    // The journal holds the `Allocate` answer: a restart keeps it (the
    // run's cgroup has its process, as `pinion run` puts it there).
    let name = pinion_host::cgroup::CgroupName::new(POD).expect("cgroup name");
    agent
        .host
        .tree()
        .children
        .get_mut(&name)
        .expect("the run's cgroup")
        .pids
        .push(std::process::id());
    served.stop().await;
    let (dir, host) = agent.stop().await;
    let agent = Agent::start_in(dir, host, Vec::new());
    let workload = stored(&agent);
    assert_eq!(workload.plugins, allocated, "after a restart");
    assert_eq!(workload.placement.cpus, cpus, "after a restart");
    agent.stop().await;
}

/// Found from outside (forty-fourth session): an admission abandoned by
/// its caller (a `pinion run` interrupted: the local API's handler is
/// dropped when the client disconnects) after the plugins were asked left
/// them holding whatever they allocated, with no `RemovePod` ever. Now the
/// pod, none of whose containers was admitted, is on the removal list at
/// once, and the plugin hears `RemovePod` even while its `Allocate` for the
/// pod still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_admission_abandoned_inside_allocate_has_the_plugins_forget_the_pod() {
    let agent = Agent::start_with(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        Vec::new(),
        Duration::from_secs(30),
    );
    let slow = Knob::one(SLOW, "", "", "slow");
    let slow_served = serve_service_in(
        agent.registry_dir(),
        SLOW,
        Gated::new(&slow, AllocateHangs(slow.clone())),
        "slow.sock",
    );
    agent.wait_for_plugin(SLOW, "active").await;
    slow.state().hang_allocate = true;
    let handle = agent.handle.clone();
    let caller = tokio::spawn(async move {
        handle
            .admit(admission(
                "pinion-run-left",
                "1",
                &[(SLOW, "1")],
                &[DEDICATED],
            ))
            .await
    });
    wait_until("the plugin is inside Allocate", || slow.state().in_allocate).await;
    caller.abort();
    assert!(caller.await.is_err(), "the caller went away");
    wait_until("the plugin heard RemovePod", || {
        slow.state()
            .remove_calls
            .contains(&"pinion-run-left".to_string())
    })
    .await;
    assert!(!placed(&agent, "pinion-run-left"));
    slow.state().hang_allocate = false;
    slow_served.stop().await;
}
