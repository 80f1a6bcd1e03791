//! Pinion's `Registration.Register` service (spec `qrm.md` §3.2): the
//! device-plugin-style registration, where a plugin dials Pinion's
//! registration socket and names its own socket in the same directory.

use std::path::PathBuf;
use std::sync::Arc;

use pinion_api::plugin::API_VERSION;
use pinion_api::resourceplugin as rp;
use tonic::{Request, Response, Status};

use super::registry::Registry;

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
                "requested API version {:?} is not supported by pinion. Supported version is [{API_VERSION:?}]",
                request.version
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
                "endpoint {endpoint:?} must be a socket file name in {}",
                self.socket_dir.display()
            )));
        }
        if request.resource_name.is_empty() || request.resource_name.len() > 253 {
            return Err(Status::invalid_argument(format!(
                "resource name {:?} must have 1 to 253 characters",
                request.resource_name
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
