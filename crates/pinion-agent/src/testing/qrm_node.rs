//! A controller with the QoS Resource Manager running (plugin watcher,
//! registration server, reconcile and removal loops) on a synthetic node
//! with fake cgroups, and resource plugins served over real unix sockets in
//! its watched directory, as `pinion plugin serve` serves them — the harness
//! the QRM property tests and the reconcile benchmark share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pinion_api::plugin::{Identity, RegistrationState};
use pinion_api::resourceplugin as rp;
use pinion_core::topomgr::Scope;
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_plugins::grpc::GrpcPlugin;
use pinion_plugins::ResourcePlugin;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::SyntheticNode;
use crate::config::{BuiltinPlugin, QrmConfig};
use crate::controller::{self, ControllerHandle, RuntimeUpdate};
use crate::hints::{HintGatherer, HintSource};
use crate::qrm::builtin::Machine;
use crate::qrm::{Qrm, QrmHints};

/// What to start.
#[derive(Debug, Clone)]
pub struct QrmNodeOptions {
    pub reconcile_period: Duration,
    pub rpc_timeout: Duration,
    /// With a runtime front-end: its update batches arrive on
    /// [`QrmNode::runtime_updates`].
    pub runtime: bool,
    /// Pinion's plugins the manager serves itself
    /// ([`QrmNode::start_builtin`]).
    pub builtin: Vec<BuiltinPlugin>,
}

impl QrmNodeOptions {
    /// Reconcile every `reconcile_period`, 10 s RPC deadline, no runtime
    /// front-end, no built-in plugins.
    #[must_use]
    pub fn new(reconcile_period: Duration) -> Self {
        Self {
            reconcile_period,
            rpc_timeout: Duration::from_secs(10),
            runtime: false,
            builtin: Vec::new(),
        }
    }
}

/// See the module documentation.
pub struct QrmNode {
    pub handle: ControllerHandle,
    pub qrm: Arc<Qrm>,
    pub host: FakeCgroups,
    pub runtime_updates: Option<mpsc::UnboundedReceiver<Vec<RuntimeUpdate>>>,
    registry_dir: PathBuf,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl QrmNode {
    /// Starts the controller of `node` with its state in `state_dir` and
    /// the manager's sockets under it. Call inside a tokio runtime.
    ///
    /// # Panics
    /// When the controller or the manager cannot start.
    #[must_use]
    pub fn start(node: &SyntheticNode, state_dir: &Path, options: &QrmNodeOptions) -> Self {
        Self::try_start(node, state_dir, options).expect("qrm starts")
    }

    /// [`QrmNode::start`], with the manager's refusal to start as an error.
    ///
    /// # Panics
    /// When the controller cannot start.
    pub fn try_start(
        node: &SyntheticNode,
        state_dir: &Path,
        options: &QrmNodeOptions,
    ) -> Result<Self, crate::qrm::QrmError> {
        let (controller, runtime_updates) = if options.runtime {
            let (controller, rx) = node.start_with_runtime(state_dir).expect("controller");
            (controller, Some(rx))
        } else {
            (node.start(state_dir).expect("controller"), None)
        };
        let registry_dir = state_dir.join("plugins_registry");
        let qrm = Qrm::new(QrmConfig {
            enabled: true,
            plugin_registration_dir: registry_dir.clone(),
            registration_socket: state_dir.join("resource-plugins/kubelet.sock"),
            reconcile_period: options.reconcile_period,
            rpc_timeout: options.rpc_timeout,
            resource_names_map: BTreeMap::new(),
            builtin: options.builtin.clone(),
        });
        let sources: Vec<Arc<dyn HintSource>> = vec![Arc::new(QrmHints(Arc::clone(&qrm)))];
        let hints = HintGatherer::new(sources, Scope::Container, Duration::from_secs(10));
        let (handle, _thread) =
            controller::spawn_with(controller, hints, Some(Arc::clone(&qrm))).expect("spawn");
        let (stop, stop_rx) = watch::channel(false);
        let tasks = crate::daemon::qrm_loops::start(&qrm, &handle, &stop_rx)?;
        Ok(Self {
            handle,
            qrm,
            host: node.host.clone(),
            runtime_updates,
            registry_dir,
            stop,
            tasks,
        })
    }

    /// The manager's plugin-watcher directory.
    #[must_use]
    pub fn registry_dir(&self) -> &Path {
        &self.registry_dir
    }

    /// Serves the built-in plugins of the options as the daemon does;
    /// returns once each is registered.
    ///
    /// # Panics
    /// When one does not start.
    pub async fn start_builtin(&mut self, machine: Machine<'_>) {
        let stop = self.stop.subscribe();
        let tasks = self
            .qrm
            .start_builtin(machine, &stop)
            .await
            .expect("built-in plugins start");
        self.tasks.extend(tasks);
    }

    /// Serves `plugin` in the watched directory, on a socket named after
    /// its resource; [`ServedPlugin::stop`] stops it and removes its socket.
    ///
    /// # Panics
    /// (In the serving task) when the socket cannot be bound.
    #[must_use]
    pub fn serve(&self, plugin: impl ResourcePlugin + 'static) -> ServedPlugin {
        let file = format!("{}.sock", plugin.resource_name().replace('/', "_"));
        serve_in(&self.registry_dir, plugin, &file)
    }

    /// Waits until the manager lists `resource` in `state` (`active`,
    /// `stopped`).
    ///
    /// # Panics
    /// When it does not within `patience`.
    pub async fn wait_for_plugin(&self, resource: &str, state: &str, patience: Duration) {
        let deadline = Instant::now() + patience;
        loop {
            let views = self.handle.plugins();
            if views
                .iter()
                .any(|v| v.resource == resource && v.state == state)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{resource} never became {state}: {views:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops the manager's tasks and the controller.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.handle.shutdown().await;
    }
}

/// Serves `plugin` on socket `file` of directory `dir`, as `pinion plugin
/// serve` does; [`ServedPlugin::stop`] stops it and removes its socket.
///
/// # Panics
/// (In the serving task) when the socket cannot be bound.
#[must_use]
pub fn serve_in(dir: &Path, plugin: impl ResourcePlugin + 'static, file: &str) -> ServedPlugin {
    let resource = plugin.resource_name().to_string();
    serve_service_in(dir, &resource, GrpcPlugin::new(plugin), file)
}

/// [`serve_in`] for any gRPC service of a resource plugin registering
/// `resource`: a plugin already behind its service (one shared with the
/// test, [`GrpcPlugin::shared`]), or one wrapping a plugin to make its
/// calls wait or fail.
///
/// # Panics
/// (In the serving task) when the socket cannot be bound.
#[must_use]
pub fn serve_service_in<S>(dir: &Path, resource: &str, service: S, file: &str) -> ServedPlugin
where
    S: rp::resource_plugin_server::ResourcePlugin,
{
    let socket = dir.join(file);
    let identity = Identity::new(resource);
    let registration = identity.registration();
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn({
        let socket = socket.clone();
        async move {
            pinion_api::plugin::serve(&socket, identity, service, async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
            .expect("plugin serves");
        }
    });
    ServedPlugin {
        stop,
        task,
        socket,
        registration,
    }
}

/// A plugin being served; see [`QrmNode::serve`].
pub struct ServedPlugin {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    socket: PathBuf,
    registration: watch::Receiver<RegistrationState>,
}

impl ServedPlugin {
    /// What the manager told the plugin of its registration so far.
    #[must_use]
    pub fn registration(&self) -> RegistrationState {
        self.registration.borrow().clone()
    }

    /// The socket it is served on.
    #[must_use]
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops serving and waits until the socket is gone.
    ///
    /// # Panics
    /// When the serving task panicked or the socket outlived it.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("plugin task");
        assert!(
            !self.socket.exists(),
            "{} outlived its plugin",
            self.socket.display()
        );
    }
}
