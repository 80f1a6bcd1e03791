//! Pinion's `Registration.Register` service (spec `qrm.md` §3.2): the
//! device-plugin-style registration, where a plugin dials Pinion's
//! registration socket and names its own socket in the same directory.
//! The socket is served as the podresources socket is
//! (`podresources::serve_grpc`): a cap on connections with idle ones
//! evicted at the cap, a first-byte deadline and a bounded call time, so a
//! crowd of idle clients cannot take the agent's descriptors.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pinion_api::plugin::API_VERSION;
use pinion_api::resourceplugin as rp;
use tonic::{Request, Response, Status};

use super::registry::Registry;

/// Connections of the registration socket served at once; at the cap a
/// newcomer evicts the oldest one without a call in flight (plugins
/// register once, and a `Register` call may wait for its plugin's socket,
/// [`super::registry::DIAL_TIMEOUT`]).
pub const MAX_CONNECTIONS: usize = 32;
/// A client must send its first bytes within this after connecting.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections are closed after this long (clients reconnect).
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(600);
/// A `RegisterRequest` is a version, a socket name, a resource name and
/// three flags, well under 1 KiB. A larger one is refused before it is
/// decoded; up to this size a mistaken long name still gets its own error
/// (`is longer than 253 bytes`), and each connection decodes a quarter of
/// tonic's default at most.
pub const MAX_REQUEST: usize = 1024 * 1024;

/// The bounds of the registration socket's connections, for plugin calls
/// whose deadline is `rpc_timeout`: a `Register` call may wait for the
/// plugin's socket, then ask for its node resources.
#[must_use]
pub(crate) fn limits(rpc_timeout: Duration) -> crate::podresources::conn::GrpcLimits {
    crate::podresources::conn::GrpcLimits {
        first_byte: FIRST_BYTE_TIMEOUT,
        call_timeout: super::registry::DIAL_TIMEOUT + 2 * rpc_timeout,
        max_age: MAX_CONNECTION_AGE,
        keepalive_interval: Some(Duration::from_secs(60)),
        keepalive_timeout: Duration::from_secs(20),
    }
}

/// The service; plugins' sockets live in `socket_dir`.
pub struct RegistrationService {
    pub registry: Arc<Registry>,
    pub socket_dir: PathBuf,
}

#[tonic::async_trait]
impl rp::registration_server::Registration for RegistrationService {
    async fn register(
        &self,
        request: Request<rp::RegisterRequest>,
    ) -> Result<Response<rp::Empty>, Status> {
        let request = request.into_inner();
        if request.version != API_VERSION {
            return Err(Status::invalid_argument(format!(
                "requested API version {} is not supported by pinion. Supported version is [{API_VERSION:?}]",
                pinion_core::k8s_names::shown(&request.version)
            )));
        }
        let endpoint = &request.endpoint;
        let plain = !endpoint.is_empty()
            && endpoint.len() <= 255
            && !endpoint.contains('/')
            && endpoint != "."
            && endpoint != "..";
        if !plain {
            return Err(Status::invalid_argument(format!(
                "endpoint {} must be a socket file name in {}",
                pinion_core::k8s_names::shown(endpoint),
                self.socket_dir.display()
            )));
        }
        if let Some(defect) =
            pinion_core::plugin_answer::resource_name_defect(&request.resource_name)
        {
            return Err(Status::invalid_argument(format!(
                "resource name {:?} {defect}",
                shown(&request.resource_name)
            )));
        }
        let socket = self.socket_dir.join(endpoint);
        let options = request.options.unwrap_or_default();
        self.registry
            .register_endpoint(&request.resource_name, &socket, options)
            .await
            .map_err(|err| {
                tracing::warn!(resource = %request.resource_name, "registration failed: {err}");
                Status::unavailable(format!(
                    "failed to register resource {}: {err}",
                    request.resource_name
                ))
            })?;
        Ok(Response::new(rp::Empty {}))
    }
}

/// At most the first 64 characters of a name a peer sent, for messages.
pub(super) fn shown(name: &str) -> String {
    name.chars().take(64).collect()
}
