//! One resource plugin must not hold up another (found from outside, hunt
//! D2, D10, D11): a plugin slow to register delays no other registration
//! or removal; a plugin hung in `GetTopologyAwareAllocatableResources`
//! does not stretch the others' reconcile period; a plugin hung in
//! `RemovePod` delays no other plugin's `RemovePod`, pod after pod; a
//! plugin whose `GetInfo` names another endpoint stops with its
//! registration socket, and that endpoint stays in the plugin directory.
//! End to end through the agent's manager over real unix sockets.
//!
//! No speed is measured: each test waits (bounded by [`PATIENCE`], only
//! to end a hang) for an event that, before its fix, could only come after
//! the hung call ended, and checks that the hung call has not ended yet.

mod qrm_common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pinion_agent::testing::qrm_node::serve_service_in;
use pinion_api::plugin::{RegistrationState, API_VERSION, RESOURCE_PLUGIN_TYPE};
use pinion_api::pluginregistration as pr;
use pinion_host::cgroup::fake::FakeCgroups;
use qrm_common::gated::{Gate, Gated, Method};
use qrm_common::{admission, serve_in, wait_until, Agent, Knob, PATIENCE};
use tokio::sync::watch;

type Answer<T> = Result<tonic::Response<T>, tonic::Status>;

/// The deadline of plugin calls here: long, so a hung call is still hung
/// while the test watches the other plugins.
const RPC_TIMEOUT: Duration = Duration::from_secs(15);

fn agent() -> Agent {
    Agent::start_with(
        tempfile::tempdir().expect("tempdir"),
        FakeCgroups::default(),
        Vec::new(),
        RPC_TIMEOUT,
    )
}

/// The calls of one method that hang until [`Hang::release`]: each call
/// is numbered when it enters and noted when it ends (answered, or dropped
/// by the server at the caller's deadline).
#[derive(Clone)]
struct Hang {
    released: Arc<watch::Sender<bool>>,
    calls: Arc<Mutex<HangCalls>>,
}

#[derive(Default)]
struct HangCalls {
    entered: usize,
    ended: BTreeSet<usize>,
}

/// Notes the end of call `.1` when dropped.
struct Ends(Arc<Mutex<HangCalls>>, usize);

impl Drop for Ends {
    fn drop(&mut self) {
        self.0.lock().expect("hang").ended.insert(self.1);
    }
}

impl Hang {
    fn new() -> Self {
        Self {
            released: Arc::new(watch::channel(false).0),
            calls: Arc::default(),
        }
    }

    async fn hang(&self) {
        let ends = {
            let mut calls = self.calls.lock().expect("hang");
            calls.entered += 1;
            Ends(Arc::clone(&self.calls), calls.entered)
        };
        let mut released = self.released.subscribe();
        let _ = tokio::time::timeout(PATIENCE * 3, released.wait_for(|r| *r)).await;
        drop(ends);
    }

    /// Waits until call number `n` (from 1) entered.
    async fn entered(&self, n: usize) {
        wait_until(&format!("hung call {n} entered"), || {
            self.calls.lock().expect("hang").entered >= n
        })
        .await;
    }

    fn ended(&self, n: usize) -> bool {
        self.calls.lock().expect("hang").ended.contains(&n)
    }

    fn release(&self) {
        self.released.send_replace(true);
    }
}

/// A plugin whose `method` hangs on a [`Hang`] before answering
/// ([`Gated`]); its other methods answer at once.
struct HangOn {
    method: Method,
    hang: Hang,
}

impl HangOn {
    fn new(method: Method, hang: &Hang) -> Self {
        Self {
            method,
            hang: hang.clone(),
        }
    }
}

#[tonic::async_trait]
impl Gate for HangOn {
    async fn before(&self, method: Method) {
        if method == self.method {
            self.hang.hang().await;
        }
    }
}

/// A registration server ([`serve_registration`]) until [`Served::stop`]
/// (which removes the socket); `registration` follows what the manager
/// told it.
struct Served {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    registration: watch::Receiver<RegistrationState>,
}

impl Served {
    async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("plugin task");
    }
}

/// Regression (hunt D2): the watcher awaited each registration in its only
/// event loop, retrying 5 times, each try up to the calls' deadline; a
/// plugin whose `GetResourcePluginOptions` hung held every other plugin's
/// registration, and every removal, for 5 deadlines (51 s by default).
/// Each socket now registers on its own task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_plugin_slow_to_register_holds_up_no_other_registration_or_removal() {
    let agent = agent();
    let dir = agent.registry_dir().to_path_buf();
    let hang = Hang::new();
    let slow_knob = Knob::one("example.com/a-slow", "CpusetMems", "0", "slow");
    let slow = serve_service_in(
        &dir,
        "example.com/a-slow",
        Gated::new(&slow_knob, HangOn::new(Method::Options, &hang)),
        "a-slow.sock",
    );
    hang.entered(1).await;

    let ok = agent.serve_as(
        Knob::one("example.com/ok", "CpusetMems", "0", "ok"),
        "b-ok.sock",
    );
    agent.wait_for_plugin("example.com/ok", "active").await;
    assert!(
        !hang.ended(1),
        "registered while the slow plugin still hangs"
    );
    ok.stop().await;
    agent.wait_for_plugin("example.com/ok", "stopped").await;
    assert!(
        !hang.ended(1),
        "de-registered while the slow plugin still hangs"
    );
    assert_eq!(agent.plugin("example.com/a-slow").map(|v| v.state), None);

    hang.release();
    agent.wait_for_plugin("example.com/a-slow", "active").await;
    slow.stop().await;
    agent.stop().await;
}

/// Regression (hunt D2, with the fix above): a socket removed while its
/// registration is under way has that registration cancelled before its
/// plugin is stopped; a plugin answering afterwards is not registered
/// from a socket that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_removed_socket_cancels_its_pending_registration() {
    let agent = agent();
    let dir = agent.registry_dir().to_path_buf();
    let hang = Hang::new();
    let slow_knob = Knob::one("example.com/a-slow", "CpusetMems", "0", "slow");
    let slow = serve_service_in(
        &dir,
        "example.com/a-slow",
        Gated::new(&slow_knob, HangOn::new(Method::Options, &hang)),
        "a-slow.sock",
    );
    hang.entered(1).await;
    // The server keeps its connection: only the socket file goes.
    std::fs::remove_file(dir.join("a-slow.sock")).expect("remove the socket");
    // The watcher handles events in order: once a plugin created after the
    // removal is active, the removal was handled.
    let after = agent.serve_as(
        Knob::one("example.com/after", "CpusetMems", "0", "after"),
        "after.sock",
    );
    agent.wait_for_plugin("example.com/after", "active").await;

    hang.release();
    wait_until("the hung call ended", || hang.ended(1)).await;
    // Long enough for an answer that arrived to have been registered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        agent.plugin("example.com/a-slow").map(|v| v.state),
        None,
        "registered from a removed socket"
    );
    assert_eq!(slow.registration(), RegistrationState::Pending);
    after.stop().await;
    slow.stop().await;
    agent.stop().await;
}

/// A healthy plugin and one (`example.com/a-hung`, sorting first) whose
/// `method` hangs: once the hung plugin's call number `call` entered, the
/// healthy one is polled again and again while that call lasts, and the
/// hung plugin is not asked that method again meanwhile.
async fn healthy_plugin_is_polled_while(method: Method, call: usize) {
    let agent = agent();
    let dir = agent.registry_dir().to_path_buf();
    let healthy = Knob::one("example.com/ok", "CpusetMems", "0", "ok");
    let ok = agent.serve_as(healthy.clone(), "ok.sock");
    agent.wait_for_plugin("example.com/ok", "active").await;

    let hang = Hang::new();
    let hung_knob = Knob::one("example.com/a-hung", "CpusetMems", "0", "hung");
    let hung = serve_service_in(
        &dir,
        "example.com/a-hung",
        Gated::new(&hung_knob, HangOn::new(method, &hang)),
        "a-hung.sock",
    );
    agent.wait_for_plugin("example.com/a-hung", "active").await;
    hang.entered(call).await;
    let polls = healthy.state().calls;
    wait_until("the healthy plugin is polled again and again", || {
        healthy.state().calls >= polls + 3
    })
    .await;
    assert!(
        !hang.ended(call),
        "the healthy plugin was polled again only after the hung call's deadline"
    );
    assert_eq!(
        hang.calls.lock().expect("hang").entered,
        call,
        "the hung plugin was asked again while its call was under way"
    );

    hang.release();
    hung.stop().await;
    ok.stop().await;
    agent.stop().await;
}

/// Regression (hunt D2): the reconcile loop asked each plugin for its
/// node resources one after the other before every poll, so a plugin
/// hung in `GetTopologyAwareAllocatableResources` held every plugin's
/// poll until its deadline. Each plugin's refresh now runs on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_plugin_hung_in_node_resources_does_not_hold_the_others_polls() {
    // Call 1 comes with the registration; call 2 from the reconcile loop.
    healthy_plugin_is_polled_while(Method::NodeResources, 2).await;
}

/// Regression (hunt D2, the poll): the reconcile pass asked the plugins
/// for their allocations one after the other and waited for every answer,
/// so a plugin hung in `GetResourcesAllocation` (sorting before the
/// others) held every other plugin's polls until its deadline, pass after
/// pass. The plugins on sockets are now asked at once, a pass waits at
/// most one period, and a poll still under way is not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_plugin_hung_in_its_poll_does_not_keep_the_others_from_being_asked() {
    healthy_plugin_is_polled_while(Method::Poll, 1).await;
}

/// Regression (hunt D10): `RemovePod` went to the plugins one after the
/// other, and to the departed pods one after the other, so a plugin hung
/// in `RemovePod` (sorting before the others) held every other plugin's
/// `RemovePod` one deadline per pod. The plugins of a pod are now called
/// at once, and the pods' attempts run side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_plugin_hung_in_remove_pod_delays_no_other_plugins_removal() {
    let agent = agent();
    let dir = agent.registry_dir().to_path_buf();
    let healthy = Knob::one("example.com/bb", "CpusetMems", "0", "bb");
    let bb = agent.serve_as(healthy.clone(), "bb.sock");
    let hang = Hang::new();
    let hung_knob = Knob::one("example.com/a-hung", "CpusetMems", "0", "hung");
    let hung = serve_service_in(
        &dir,
        "example.com/a-hung",
        Gated::new(&hung_knob, HangOn::new(Method::RemovePod, &hang)),
        "a-hung.sock",
    );
    agent.wait_for_plugin("example.com/bb", "active").await;
    agent.wait_for_plugin("example.com/a-hung", "active").await;

    let pods: Vec<String> = (0..3).map(|n| format!("pinion-run-gone-{n}")).collect();
    for uid in &pods {
        agent
            .handle
            .admit(admission(uid, "100m", &[("example.com/bb", "1")], &[]))
            .await
            .expect("admitted");
    }
    for uid in &pods {
        agent
            .handle
            .release(uid.clone(), None)
            .await
            .expect("released");
    }
    hang.entered(1).await;
    wait_until("the healthy plugin heard every departed pod", || {
        let heard = healthy.state().remove_calls.clone();
        pods.iter().all(|pod| heard.contains(pod))
    })
    .await;
    assert!(
        !hang.ended(1),
        "every pod reached the healthy plugin while the first hung call lasts"
    );

    hang.release();
    wait_until("every departed pod is forgotten", || {
        agent.handle.snapshot().pending_plugin_removals.is_empty()
    })
    .await;
    hung.stop().await;
    bb.stop().await;
    agent.stop().await;
}

/// A plugin-watcher socket that serves only `Registration`, whose
/// `GetInfo` names `endpoint` (kubelet's `PluginInfo.endpoint`).
struct NamesEndpoint {
    resource: String,
    endpoint: String,
    state: watch::Sender<RegistrationState>,
}

#[tonic::async_trait]
impl pr::registration_server::Registration for NamesEndpoint {
    async fn get_info(&self, _request: tonic::Request<pr::InfoRequest>) -> Answer<pr::PluginInfo> {
        Ok(tonic::Response::new(pr::PluginInfo {
            r#type: RESOURCE_PLUGIN_TYPE.to_string(),
            name: self.resource.clone(),
            endpoint: self.endpoint.clone(),
            supported_versions: vec![API_VERSION.to_string()],
        }))
    }

    async fn notify_registration_status(
        &self,
        request: tonic::Request<pr::RegistrationStatus>,
    ) -> Answer<pr::RegistrationStatusResponse> {
        let status = request.into_inner();
        self.state.send_replace(if status.plugin_registered {
            RegistrationState::Registered
        } else {
            RegistrationState::Refused(status.error)
        });
        Ok(tonic::Response::new(pr::RegistrationStatusResponse {}))
    }
}

/// Serves a [`NamesEndpoint`] for `resource` on `socket`.
fn serve_registration(socket: &Path, resource: &str, endpoint: &str) -> Served {
    let (state, registration) = watch::channel(RegistrationState::Pending);
    let service = NamesEndpoint {
        resource: resource.to_string(),
        endpoint: endpoint.to_string(),
        state,
    };
    let incoming = pinion_api::uds::bind_grpc(socket, 0o600).expect("bind");
    let (stop, mut stopped) = watch::channel(false);
    let path: PathBuf = socket.to_path_buf();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
            let _ = std::fs::remove_file(&path);
        };
        tonic::transport::Server::builder()
            .add_service(pr::registration_server::RegistrationServer::new(service))
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
            .expect("registration serves");
    });
    Served {
        stop,
        task,
        registration,
    }
}

/// Regression (hunt D11): a plugin whose `GetInfo` named another endpoint
/// was kept under that endpoint only, and a removed socket stopped the
/// entries called on it, so removing its registration socket stopped
/// nothing (spec §3.1 step 7: socket deleted ⇒ `DeRegisterPlugin(name)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_a_plugin_naming_another_endpoint_stops_with_its_registration_socket() {
    let agent = agent();
    let dir = agent.registry_dir().to_path_buf();
    let resource = "example.com/e";
    let endpoint = serve_in(&dir, Knob::one(resource, "CpusetMems", "0", "e"), ".e.sock");
    wait_until("the endpoint listens", || {
        std::os::unix::net::UnixStream::connect(dir.join(".e.sock")).is_ok()
    })
    .await;
    let registration = serve_registration(&dir.join("r.sock"), resource, ".e.sock");
    agent.wait_for_plugin(resource, "active").await;
    let view = agent
        .handle
        .plugins()
        .into_iter()
        .find(|v| v.resource == resource)
        .expect("listed");
    assert_eq!(view.socket, dir.join(".e.sock").display().to_string());

    registration.stop().await;
    agent.wait_for_plugin(resource, "stopped").await;
    endpoint.stop().await;
    agent.stop().await;
}

/// Regression (hunt D11): the endpoint a plugin names in `GetInfo` could
/// be any path — absolute, with `..`, or a link leading out of the plugin
/// directory. Kubelet dials whatever it is given; Pinion keeps plugins in
/// their directory and refuses the others, naming the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_an_endpoint_outside_the_plugin_directory_is_refused_naming_it() {
    let agent = agent();
    let dir = agent.registry_dir().to_path_buf();
    let outside = agent.dir.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let resource = "example.com/out";
    let away = serve_in(
        &outside,
        Knob::one(resource, "CpusetMems", "0", "out"),
        "e.sock",
    );
    wait_until("the outside socket listens", || {
        std::os::unix::net::UnixStream::connect(outside.join("e.sock")).is_ok()
    })
    .await;
    std::os::unix::fs::symlink(outside.join("e.sock"), dir.join(".link.sock")).expect("symlink");
    let absolute = outside.join("e.sock").display().to_string();
    let cases = [
        (absolute.as_str(), "outside the plugin directory"),
        ("../outside/e.sock", "has a \"..\" component"),
        ("sub/../../outside/e.sock", "has a \"..\" component"),
        (".", "names no socket file"),
        (".link.sock", "outside the plugin directory"),
    ];
    for (n, (named, defect)) in cases.iter().enumerate() {
        let registration = serve_registration(&dir.join(format!("r{n}.sock")), resource, named);
        let mut told = registration.registration.clone();
        let told = tokio::time::timeout(
            PATIENCE,
            told.wait_for(|s| *s != RegistrationState::Pending),
        )
        .await
        .expect("the plugin is told")
        .expect("registration state")
        .clone();
        let RegistrationState::Refused(error) = told else {
            panic!("{named:?} was registered");
        };
        assert!(
            error.contains(&format!("endpoint {named:?}")) && error.contains(defect),
            "{named:?}: {error}"
        );
        assert_eq!(agent.plugin(resource).map(|v| v.state), None, "{named:?}");
        registration.stop().await;
    }
    away.stop().await;
    agent.stop().await;
}
