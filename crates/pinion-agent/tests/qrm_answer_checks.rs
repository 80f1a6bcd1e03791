//! What the QoS Resource Manager makes of plugin answers found hostile
//! from outside (the QRM hunt's D6, D8, D9), end to end through the agent's
//! manager and real gRPC: reconcile answers naming containers the node does
//! not have are dropped as they are read and logged once per poll, and
//! `Allocate` answers the kernel would refuse are refused as the plugin's
//! counted error, naming the plugin and the value.

mod qrm_common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use pinion_agent::qrm::KnownContainers;
use pinion_plugins::{
    Allocation, AllocationInfo, Allocations, Options, PluginError, Request, ResourcePlugin,
};
use qrm_common::{admission, info, Agent, Knob};

/// Every log line the agent wrote (INFO and above), shared by the tests of
/// this binary (each looks for its own resource's lines).
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || Capture(logs))
            .init();
        logs
    })
}

struct Capture(&'static Mutex<Vec<u8>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured lines containing every one of `parts`.
fn lines_with(parts: &[&str]) -> Vec<String> {
    let logs = logs().lock().expect("lock");
    String::from_utf8_lossy(&logs)
        .lines()
        .filter(|line| parts.iter().all(|p| line.contains(p)))
        .map(str::to_string)
        .collect()
}

/// The agent's containers, as its reconcile loop filters a poll by them.
fn known(agent: &Agent) -> KnownContainers {
    let mut known = KnownContainers::new();
    for workload in &agent.handle.snapshot().workloads {
        known
            .entry(workload.pod.clone())
            .or_default()
            .insert(workload.container.clone());
    }
    known
}

const FLOOD: &str = "example.com/flood";
/// Pods the node does not have in a flooded answer.
const UNKNOWN_PODS: usize = 20_000;

/// A [`Knob`] whose `GetResourcesAllocation` answer also names
/// [`UNKNOWN_PODS`] pods the node does not have while `flooding` is set,
/// each with one entry (`flood_answer`); `floods` counts those answers.
#[derive(Clone)]
struct Flood {
    knob: Knob,
    flooding: Arc<AtomicBool>,
    flood_answer: Arc<Mutex<Allocation>>,
    floods: Arc<AtomicUsize>,
}

impl ResourcePlugin for Flood {
    fn resource_name(&self) -> &str {
        self.knob.resource_name()
    }

    fn options(&self) -> Options {
        self.knob.options()
    }

    fn allocate(&mut self, request: &Request) -> Result<Option<Allocation>, PluginError> {
        self.knob.allocate(request)
    }

    fn allocations(&self) -> Allocations {
        let mut all = self.knob.allocations();
        if self.flooding.load(Ordering::SeqCst) {
            let answer = self.flood_answer.lock().expect("lock").clone();
            for i in 0..UNKNOWN_PODS {
                all.insert(
                    format!("not-on-this-node-{i}"),
                    [("main".to_string(), answer.clone())].into(),
                );
            }
            self.floods.fetch_add(1, Ordering::SeqCst);
        }
        all
    }

    fn remove_pod(&mut self, pod_uid: &str) -> Result<(), PluginError> {
        self.knob.remove_pod(pod_uid)
    }
}

/// Found from outside (D6): a reconcile answer naming 100,000 pods the
/// node does not have took the agent from 18 MB to 1 GB (each entry was
/// converted, copied and checked before the controller looked for its own
/// containers), and 30,000 invalid entries wrote 30,000 WARN lines per
/// period. Now entries of containers the node does not have are dropped as
/// the answer is read (the poll holds the node's containers only) and
/// counted in one line per poll; refusals are one line and one counted
/// error per poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_reconcile_answers_for_unknown_pods_are_dropped_and_logged_once() {
    logs();
    let agent = Agent::start();
    let flood = Flood {
        knob: Knob::one(FLOOD, "CpuShares", "512", "flood"),
        flooding: Arc::default(),
        flood_answer: Arc::new(Mutex::new(
            [(FLOOD.to_string(), info("CpuShares", "256", "x"))].into(),
        )),
        floods: Arc::default(),
    };
    let _served = agent.serve(flood.clone());
    agent.wait_for_plugin(FLOOD, "active").await;
    let pod = "pinion-run-flooded";
    agent
        .handle
        .admit(admission(pod, "500m", &[(FLOOD, "1")], &[]))
        .await
        .expect("admitted");

    // Valid entries of pods the node does not have: dropped, one line.
    flood.flooding.store(true, Ordering::SeqCst);
    let known = known(&agent);
    let polls = agent.qrm.poll_for(Some(&known)).await;
    flood.flooding.store(false, Ordering::SeqCst);
    let (_, poll) = polls
        .iter()
        .find(|(resource, _)| resource == FLOOD)
        .expect("the flood plugin was polled");
    assert_eq!(poll.len(), 1, "only the node's pod is kept");
    assert!(poll.contains_key(pod), "the node's pod is kept");
    let answer = poll[pod]["main"].as_ref().expect("its answer");
    assert_eq!(answer[FLOOD].allocation_result, "512");
    let floods = flood.floods.load(Ordering::SeqCst);
    let ignored = lines_with(&["ignored 20000 entries", "resource plugin example.com/flood"]);
    // One line per flooded poll at most (the agent's loop polls too, and
    // one of its polls may still be on its way): never one per entry.
    assert!(
        !ignored.is_empty() && ignored.len() <= floods,
        "{} lines for {floods} flooded polls: {ignored:?}",
        ignored.len()
    );
    assert!(
        ignored[0].contains("\"not-on-this-node-0\""),
        "the first pods are named: {}",
        ignored[0]
    );
    assert_eq!(agent.plugin_errors(FLOOD, "GetResourcesAllocation"), 0);

    // Invalid entries, every one read (no filter): one WARN line, one
    // counted error for the poll.
    flood.flood_answer.lock().expect("lock").insert(
        FLOOD.to_string(),
        AllocationInfo {
            envs: [("A=B".to_string(), "1".to_string())].into(),
            ..info("CpuShares", "256", "x")
        },
    );
    flood.flooding.store(true, Ordering::SeqCst);
    let polls = agent.qrm.poll_for(None).await;
    flood.flooding.store(false, Ordering::SeqCst);
    let (_, poll) = polls
        .iter()
        .find(|(resource, _)| resource == FLOOD)
        .expect("polled");
    assert_eq!(
        poll.len(),
        UNKNOWN_PODS + 1,
        "every entry read without a filter"
    );
    let refused = lines_with(&[
        "resource plugin example.com/flood answered GetResourcesAllocation",
        "container answers refused",
    ]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("20000 container answers refused"),
        "{}",
        refused[0]
    );
    assert!(refused[0].contains("contains '='"), "{}", refused[0]);
    assert_eq!(agent.plugin_errors(FLOOD, "GetResourcesAllocation"), 1);
    agent.stop().await;
}

/// Found from outside (D8, D9): an `Allocate` cpuset on offline CPUs was
/// refused by the controller without counting it as the plugin's error or
/// naming the plugin; `CpusetMems` of a node the machine does not have,
/// out-of-range CFS period and quota, memory+swap below the memory limit
/// reached the kernel and failed with a 500 naming no plugin, and
/// `OomScoreAdj -1001` was admitted. Each is now the plugin's `Allocate`
/// error: counted, its last error, named with the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_allocate_answers_the_kernel_refuses_are_the_plugins_counted_error() {
    const CPU: &str = "cpu";
    let agent = Agent::start();
    let cpu = Knob::one(CPU, "CpusetCpus", "2-3", "cpu");
    let _served = agent.serve(cpu.clone());
    agent.wait_for_plugin(CPU, "active").await;
    let memory = |limit: &str| (CPU.to_string(), info("MemoryLimitInBytes", limit, "m"));
    let cases: Vec<(&str, Allocation, &str)> = vec![
        (
            "offline cpus",
            [(CPU.to_string(), info("CpusetCpus", "0-31", "c"))].into(),
            "CpusetCpus 0-31 has cpus 16-31 that are offline or not on this machine (online: 0-15)",
        ),
        (
            "empty cpuset",
            [(CPU.to_string(), info("CpusetCpus", "", "c"))].into(),
            "CpusetCpus is empty",
        ),
        (
            "memory nodes the machine does not have",
            [(CPU.to_string(), info("CpusetMems", "7", "c"))].into(),
            "CpusetMems 7 has NUMA nodes 7 that are offline or not on this machine (online: 0-1)",
        ),
        (
            "period beyond the kernel's",
            [(CPU.to_string(), info("CpuPeriod", "18446744073709551615", "c"))].into(),
            "CpuPeriod 9223372036854775807 is outside the CFS periods the kernel accepts",
        ),
        (
            "quota beyond the kernel's",
            [(CPU.to_string(), info("CpuQuota", "9223372036854775807", "c"))].into(),
            "CpuQuota 9223372036854775807 is outside the CFS quotas the kernel accepts",
        ),
        (
            "OOM score adjustment beyond the kernel's",
            [(CPU.to_string(), info("OomScoreAdj", "-1001", "c"))].into(),
            "OomScoreAdj -1001 is outside the OOM score adjustments the kernel accepts (-1000..=1000)",
        ),
        (
            "memory+swap below the memory limit",
            [
                memory("1073741824"),
                (
                    "example.com/swap".to_string(),
                    info("MemorySwapLimitInBytes", "5", "s"),
                ),
            ]
            .into(),
            "MemorySwapLimitInBytes 5 is below the memory limit 1073741824",
        ),
    ];
    for (index, (case, answer, message)) in cases.into_iter().enumerate() {
        cpu.state().answer = answer;
        let pod = format!("pinion-run-refused-{index}");
        let err = agent
            .handle
            .admit(admission(&pod, "1", &[], &[]))
            .await
            .expect_err(case);
        let text = err.to_string();
        assert!(text.contains(message), "{case}: {text}");
        assert!(
            text.contains("resource plugin cpu answered Allocate"),
            "{case}: the plugin is named: {text}"
        );
        assert_eq!(
            agent.plugin_errors(CPU, "Allocate"),
            u64::try_from(index + 1).expect("count"),
            "{case}: counted as the plugin's error"
        );
        let last = agent.plugin_last_error(CPU);
        assert!(last.contains(message), "{case}: last error {last}");
    }
    // Within the kernel's ranges: admitted.
    cpu.state().answer = [
        (CPU.to_string(), info("CpusetCpus", "2-3", "c")),
        (
            "example.com/oom".to_string(),
            info("OomScoreAdj", "-1000", "o"),
        ),
        (
            "example.com/period".to_string(),
            info("CpuPeriod", "1000000", "p"),
        ),
    ]
    .into();
    let admitted = agent
        .handle
        .admit(admission("pinion-run-fine", "1", &[], &[]))
        .await
        .expect("admitted");
    assert_eq!(admitted.placement.resources.oom_score_adj, Some(-1000));
    agent.stop().await;
}

/// Regression (left open since the QRM hunt's D8): an `Allocate` cpuset on
/// CPUs another workload holds exclusively is refused by the controller —
/// only its state tells — and that refusal was not counted as the plugin's
/// error, nor its last error, as the manager's own refusals are. Both ways
/// the admission asks: plugins first (the `none` policy) and the engine
/// first (the pod scope, whose merge reuses the pod's stored affinity).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_allocate_answer_the_controller_refuses_is_the_plugins_counted_error() {
    const CPU: &str = "cpu";
    for (policy, scope) in [("none", None), ("best-effort", Some("pod"))] {
        let agent = Agent::start_with_topology_manager(policy, scope);
        // A static-policy run holding exclusive CPUs, before any cpu plugin.
        let exclusive = agent
            .handle
            .admit(admission("pinion-run-exclusive", "2", &[], &[]))
            .await
            .expect("exclusive run");
        assert!(exclusive.placement.is_exclusive(), "{policy}");
        let held = exclusive.placement.cpus.to_string();
        let cpu = Knob::one(CPU, "CpusetCpus", &held, "c");
        let _served = agent.serve(cpu.clone());
        agent.wait_for_plugin(CPU, "active").await;
        let err = agent
            .handle
            .admit(admission("pinion-run-taken", "1", &[], &[]))
            .await
            .expect_err("the held cpus are refused");
        let message =
            format!("CpusetCpus {held} takes cpus {held} that other workloads hold exclusively");
        assert!(err.to_string().contains(&message), "{policy}: {err}");
        assert_eq!(
            agent.plugin_errors(CPU, "Allocate"),
            1,
            "{policy}: counted as the plugin's error"
        );
        let last = agent.plugin_last_error(CPU);
        assert!(
            last.contains(&message) && last.starts_with("resource plugin cpu answered Allocate"),
            "{policy}: last error {last}"
        );
        agent.stop().await;
    }
}
