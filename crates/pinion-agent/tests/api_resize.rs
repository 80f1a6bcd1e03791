//! `POST /v1/resize` over the real local API socket (issue #15): a
//! standalone run resized in place, its cgroup rewritten by the executor,
//! the refusals with kubelet's texts and reasons, the switch off.

use std::path::PathBuf;

use pinion_agent::api::{self, RunRequest};
use pinion_agent::controller;
use pinion_agent::testing::{machine, SyntheticNode};
use pinion_api::local::ResizeRequest;
use pinion_api::{Client, ClientError};
use pinion_core::policy::Features;
use pinion_core::testing::cpus as set;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::CgroupName;
use tokio::sync::watch;

const RUN: &str = "pinion-run-resize";

struct Agent {
    _dir: tempfile::TempDir,
    client: Client,
    host: FakeCgroups,
    /// The controller as the NRI front-end calls it.
    handle: controller::ControllerHandle,
    _stop: watch::Sender<bool>,
}

/// 1 socket × 4 cores × 2 threads (cores (0,4) (1,5) (2,6) (3,7)), cpu 0
/// reserved, the local API serving.
fn start_agent(features: Features) -> Agent {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let node = SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(machine(1, 4, 2)).with_features(features)
    };
    let controller = node.start(dir.path()).expect("start");
    let handle = controller::spawn(controller).expect("spawn").0;
    let socket: PathBuf = dir.path().join("pinion.sock");
    let listener = api::bind(&socket).expect("bind");
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(api::serve(listener, handle.clone(), stop_rx));
    Agent {
        _dir: dir,
        client: Client::new(&socket),
        host,
        handle,
        _stop: stop,
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

impl Agent {
    async fn run(&self, cpus: &str) -> pinion_api::local::Admitted {
        let c = self.client.clone();
        let request = RunRequest {
            cpus: Some(cpus.to_string()),
            ..RunRequest::new(RUN)
        };
        blocking(move || c.run(&request)).await.expect("run")
    }

    async fn resize(
        &self,
        pod: &str,
        cpus: &str,
    ) -> Result<pinion_api::local::Admitted, ClientError> {
        let c = self.client.clone();
        let request = ResizeRequest {
            pod: pod.to_string(),
            container: None,
            cpus: cpus.to_string(),
        };
        blocking(move || c.resize(&request)).await
    }

    fn cgroup_cpus(&self) -> String {
        let name = CgroupName::new(RUN).expect("name");
        self.host.tree().children[&name].cpus.to_string()
    }

    async fn shared_pool(&self) -> String {
        let c = self.client.clone();
        blocking(move || c.ps()).await.expect("ps").shared_pool
    }
}

fn refused(err: ClientError) -> (u16, String, Option<String>) {
    match err {
        ClientError::Refused {
            status,
            error,
            reason,
        } => (status, error, reason),
        other => panic!("expected a refusal, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_grows_and_shrinks_in_place_and_its_cgroup_follows() {
    let agent = start_agent(Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    });
    let first = set(&agent.run("2").await.cpus);
    assert_eq!(agent.cgroup_cpus(), first.to_string());

    let grown = agent.resize(RUN, "4").await.expect("grow");
    let grown_cpus = set(&grown.cpus);
    assert!(grown.exclusive);
    assert_eq!(grown_cpus.len(), 4);
    assert!(first.is_subset(&grown_cpus), "{first} kept in {grown_cpus}");
    assert_eq!(agent.cgroup_cpus(), grown.cpus, "cgroup rewritten");
    assert_eq!(
        set(&agent.shared_pool().await),
        set("0-7").difference(&grown_cpus)
    );

    let (status, error, reason) = refused(agent.resize(RUN, "1").await.expect_err("below"));
    assert_eq!(status, 409);
    assert_eq!(reason.as_deref(), Some("prohibitedCPUAllocationError"));
    assert!(error.contains("promised CPUs = 2"), "{error}");
    assert_eq!(agent.cgroup_cpus(), grown.cpus, "a refusal changes nothing");

    let shrunk = agent.resize(RUN, "2").await.expect("shrink");
    assert_eq!(set(&shrunk.cpus), first, "back to the promised cpus");
    assert_eq!(agent.cgroup_cpus(), first.to_string());
    assert_eq!(
        set(&agent.shared_pool().await),
        set("0-7").difference(&first)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_requests_are_checked() {
    let agent = start_agent(Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    });
    let (status, error, _) = refused(agent.resize("pinion-run-none", "2").await.expect_err("x"));
    assert_eq!(status, 404, "{error}");
    agent.run("2").await;
    for bad in ["0", "two"] {
        let (status, error, _) = refused(agent.resize(RUN, bad).await.expect_err(bad));
        assert_eq!(status, 400, "{bad}: {error}");
        assert!(error.contains(&format!("invalid cpus {bad:?}")), "{error}");
    }
    let (status, error, reason) = refused(agent.resize(RUN, "1500m").await.expect_err("x"));
    assert_eq!(status, 409);
    assert_eq!(reason.as_deref(), Some("inconsistentCPUAllocationError"));
    assert!(
        error.contains("exclusively allocated pool to shared pool"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_switch_off_a_resize_is_refused_and_nothing_moves() {
    let agent = start_agent(Features::default());
    let admitted = agent.run("2").await;
    let (status, error, _) = refused(agent.resize(RUN, "4").await.expect_err("off"));
    assert_eq!(status, 409);
    assert!(
        error.contains("InPlacePodVerticalScalingExclusiveCPUs is off"),
        "{error}"
    );
    assert_eq!(agent.cgroup_cpus(), admitted.cpus);
}

/// Found from outside (session 43): `/v1/release` with the UID of a pod the
/// container runtime admitted (NRI) freed its exclusive CPUs while the
/// container kept running on them — the next Guaranteed pod got them too —
/// and `/v1/resize` reached it as well. The local API now reaches Pinion's
/// own runs only; the runtime's front-end still releases its containers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_the_local_api_cannot_release_or_resize_a_runtime_container() {
    const POD: &str = "0c6a3b8e-5d2f-4a51-9a0e-3b1f7c2d9e40";
    let agent = start_agent(Features {
        in_place_resize_exclusive_cpus: true,
        ..Features::default()
    });
    let held = agent
        .handle
        .admit(pinion_agent::testing::runtime_request(POD, Some("2"), "c1"))
        .await
        .expect("admitted by the runtime");
    assert!(held.exclusive());
    let cpus = held.placement.cpus.clone();

    let c = agent.client.clone();
    let (status, error, _) = refused(
        blocking(move || c.release(POD))
            .await
            .expect_err("not a run"),
    );
    assert_eq!(status, 409, "{error}");
    assert!(
        error.contains(POD) && error.contains("container runtime") && error.contains("release"),
        "{error}"
    );
    let (status, error, _) = refused(agent.resize(POD, "4").await.expect_err("not a run"));
    assert_eq!(status, 409, "{error}");
    assert!(error.contains("resize"), "{error}");

    let c = agent.client.clone();
    let ps = blocking(move || c.ps()).await.expect("ps");
    assert_eq!(
        ps.assignments[POD]["main"],
        cpus.to_string(),
        "still held: {ps:?}"
    );
    assert!(set(&ps.shared_pool).is_disjoint(&cpus));

    // The runtime's own release goes through.
    let released = agent
        .handle
        .release(POD.to_string(), None)
        .await
        .expect("the runtime releases it");
    assert_eq!(released.cpus, cpus);
}
