//! Serving a resource plugin the way katalyst's plugins do (spec `qrm.md`
//! §3.1): one unix socket carries both the plugin-watcher `Registration`
//! service (`GetInfo`, `NotifyRegistrationStatus`) and the
//! `ResourcePlugin` service, so a manager watching the socket's directory
//! discovers and registers it.

use std::future::Future;
use std::path::{Path, PathBuf};

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::pluginregistration as pr;
use crate::resourceplugin::resource_plugin_server::{ResourcePlugin, ResourcePluginServer};
use crate::uds;

/// The plugin type in `PluginInfo.type` for resource plugins.
pub const RESOURCE_PLUGIN_TYPE: &str = "ResourcePlugin";
/// The one API version (`v1alpha1`).
pub const API_VERSION: &str = "v1alpha1";
/// The largest message a manager or plugin accepts from the other side
/// (`GetResourcesAllocation` lists every container of the node).
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// How long a stopping plugin lets in-flight calls finish.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// What the manager last said in `NotifyRegistrationStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RegistrationState {
    /// Not told yet.
    #[default]
    Pending,
    Registered,
    Refused(String),
}

/// The plugin-watcher registration service of a plugin for `resource`.
#[derive(Debug)]
pub struct Identity {
    resource: String,
    state: watch::Sender<RegistrationState>,
}

impl Identity {
    /// The identity of a plugin for `resource` (the `PluginInfo.name`).
    #[must_use]
    pub fn new(resource: &str) -> Self {
        Self {
            resource: resource.to_string(),
            state: watch::channel(RegistrationState::Pending).0,
        }
    }

    /// Follows what the manager says about the registration.
    #[must_use]
    pub fn registration(&self) -> watch::Receiver<RegistrationState> {
        self.state.subscribe()
    }
}

#[tonic::async_trait]
impl pr::registration_server::Registration for Identity {
    async fn get_info(
        &self,
        _request: Request<pr::InfoRequest>,
    ) -> Result<Response<pr::PluginInfo>, Status> {
        Ok(Response::new(pr::PluginInfo {
            r#type: RESOURCE_PLUGIN_TYPE.to_string(),
            name: self.resource.clone(),
            endpoint: String::new(),
            supported_versions: vec![API_VERSION.to_string()],
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<pr::RegistrationStatus>,
    ) -> Result<Response<pr::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        let state = if status.plugin_registered {
            RegistrationState::Registered
        } else {
            RegistrationState::Refused(status.error)
        };
        self.state.send_replace(state);
        Ok(Response::new(pr::RegistrationStatusResponse {}))
    }
}

/// Errors of serving a plugin.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {}: {source}", .path.display())]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("serving {}: {source}", .path.display())]
    Serve {
        path: PathBuf,
        source: tonic::transport::Error,
    },
}

/// Serves `plugin` and `identity` on the unix socket `socket` (mode 0600)
/// until `shutdown` resolves; removes the socket file afterwards, which a
/// watching manager takes as de-registration.
pub async fn serve<P: ResourcePlugin>(
    socket: &Path,
    identity: Identity,
    plugin: P,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let incoming = uds::bind_grpc(socket, 0o600).map_err(|source| ServeError::Bind {
        path: socket.to_path_buf(),
        source,
    })?;
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    let stopped = std::sync::Arc::clone(&stop);
    let server = tonic::transport::Server::builder()
        .add_service(pr::registration_server::RegistrationServer::new(identity))
        .add_service(
            ResourcePluginServer::new(plugin)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .serve_with_incoming_shutdown(incoming, async move { stopped.notified().await });
    tokio::pin!(server);
    let result = tokio::select! {
        result = &mut server => result,
        () = shutdown => {
            // The socket goes first: the manager's watcher sees the plugin
            // leave at once. Then in-flight calls get DRAIN to finish; a
            // manager that keeps its connection open does not hold the
            // plugin's exit.
            let _ = std::fs::remove_file(socket);
            stop.notify_one();
            tokio::time::timeout(DRAIN, &mut server).await.unwrap_or(Ok(()))
        }
    };
    let _ = std::fs::remove_file(socket);
    result.map_err(|source| ServeError::Serve {
        path: socket.to_path_buf(),
        source,
    })
}
