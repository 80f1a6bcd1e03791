//! The local API over a real unix socket in a temp dir, with the
//! controller's cgroups faked.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use pinion_agent::api::{self, RunRequest};
use pinion_agent::client::{Client, ClientError};
use pinion_agent::controller::{self, Controller, StartParts};
use pinion_core::policy::PolicyConfig;
use pinion_core::topology::{synthetic, Shape};
use pinion_core::CpuSet;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::CgroupName;
use tokio::sync::watch;

struct Agent {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    host: FakeCgroups,
    stop: watch::Sender<bool>,
}

fn start_agent() -> Agent {
    let dir = tempfile::tempdir().expect("tempdir");
    let topology = synthetic(Shape {
        sockets: 1,
        numa_per_socket: 1,
        cores_per_socket: 2,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    let policy = PolicyConfig {
        policy: Some("static".into()),
        num_reserved: Some(1),
        ..PolicyConfig::default()
    }
    .build(&topology)
    .expect("policy");
    let host = FakeCgroups::default();
    let controller = Controller::start(StartParts {
        topology_manager: pinion_core::topomgr::TopologyManager::none(),
        policy,
        topology,
        state_dir: dir.path().to_path_buf(),
        host: Box::new(host.clone()),
    })
    .expect("start");
    let (handle, _thread) = controller::spawn(controller).expect("spawn");
    let socket = dir.path().join("run/pinion.sock");
    let listener = api::bind(&socket).expect("bind");
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(api::serve(listener, handle, stop_rx));
    Agent {
        _dir: dir,
        socket,
        host,
        stop,
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

fn run_request(id: &str, cpus: Option<&str>) -> RunRequest {
    RunRequest {
        id: id.into(),
        cpus: cpus.map(str::to_string),
        memory_nodes: "auto".into(),
    }
}

fn client(socket: &Path) -> Client {
    Client::new(socket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_ps_release_over_the_socket() {
    let agent = start_agent();
    let mode = std::fs::metadata(&agent.socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only socket");
    let c = client(&agent.socket);
    blocking({
        let c = c.clone();
        move || c.health()
    })
    .await
    .expect("healthy");
    let admitted = blocking({
        let c = c.clone();
        move || c.run(&run_request("pinion-run-api", Some("2")))
    })
    .await
    .expect("run");
    assert!(admitted.exclusive);
    assert_eq!(admitted.cpus.len(), 2);
    // The caller (this test process, by peer credentials) was placed.
    let name = CgroupName::new("pinion-run-api").expect("name");
    assert_eq!(
        agent.host.tree().children[&name].pids,
        vec![std::process::id()]
    );

    let snapshot = blocking({
        let c = c.clone();
        move || c.ps()
    })
    .await
    .expect("ps");
    assert_eq!(snapshot.workloads.len(), 1);
    assert_eq!(snapshot.workloads[0].cpus, admitted.cpus);
    assert_eq!(snapshot.workloads[0].pid, Some(std::process::id()));
    assert_eq!(
        snapshot.shared_pool,
        CpuSet::parse_list("0-3")
            .expect("set")
            .difference(&admitted.cpus)
    );

    agent
        .host
        .tree()
        .children
        .get_mut(&name)
        .expect("cgroup")
        .pids
        .clear();
    let released = blocking({
        let c = c.clone();
        move || c.release("pinion-run-api")
    })
    .await
    .expect("release");
    assert_eq!(released.map(|r| r.cpus), Some(admitted.cpus));
    let again = blocking(move || c.release("pinion-run-api"))
        .await
        .expect("release again");
    assert!(again.is_none(), "a second release finds nothing");
    let _ = agent.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors() {
    let agent = start_agent();
    let c = client(&agent.socket);
    let cases: [(RunRequest, u16, &str); 4] = [
        (run_request("not-a-run", None), 400, "must start with"),
        (
            run_request("pinion-run-x", Some("lots")),
            400,
            "invalid cpus",
        ),
        (
            run_request("pinion-run-x", Some("0")),
            400,
            "greater than zero",
        ),
        (run_request("pinion-run-x", Some("64")), 409, "pinion-run-x"),
    ];
    for (request, want_status, want_text) in cases {
        let c = c.clone();
        let result = blocking(move || c.run(&request)).await;
        match result {
            Err(ClientError::Refused { status, error, .. }) => {
                assert_eq!(status, want_status, "{error}");
                assert!(error.contains(want_text), "{error}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    let mut bad_nodes = run_request("pinion-run-y", None);
    bad_nodes.memory_nodes = "0,1".into();
    let result = blocking(move || c.run(&bad_nodes)).await;
    assert!(matches!(
        result,
        Err(ClientError::Refused { status: 400, .. })
    ));
    assert!(agent.host.tree().children.is_empty(), "nothing was created");

    let mut stream = std::os::unix::net::UnixStream::connect(&agent.socket).expect("connect");
    let (status, _) = blocking(move || pinion_agent::http::call(&mut stream, "GET", "/nope", b""))
        .await
        .expect("call");
    assert_eq!(status, 404);
    let _ = agent.stop.send(true);
}

#[test]
fn unreachable_agent_names_the_socket() {
    let err = client(Path::new("/nonexistent/pinion.sock"))
        .ps()
        .expect_err("no agent");
    assert!(matches!(err, ClientError::Connect { .. }));
    assert!(
        err.to_string().contains("/nonexistent/pinion.sock"),
        "{err}"
    );
}
