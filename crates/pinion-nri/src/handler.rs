//! The API the rest of Pinion implements: [`NriHandler`], one async method
//! per lifecycle event, and [`HandlerError`], the one error type a handler
//! returns. [`to_status`] is the single place where a handler error becomes
//! an NRI (gRPC) error.

use std::future::Future;
use std::time::Duration;

use crate::kube::KubeError;
use crate::model::{Container, ContainerUpdate, PodSandbox, Resources};
use crate::status::{Code, Status};

/// What the runtime said about itself in `Configure`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub runtime_name: String,
    pub runtime_version: String,
    /// The configuration a runtime-launched plugin gets (empty when external).
    pub config: String,
    pub registration_timeout: Option<Duration>,
    pub request_timeout: Option<Duration>,
}

/// The answer to `CreateContainer`: the new container's placement (`None` =
/// leave it as the runtime made it) and updates of other containers (e.g. the
/// shared pool shrinking).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Created {
    pub adjust: Option<pinion_core::Placement>,
    pub updates: Vec<ContainerUpdate>,
}

/// The kind of a handler failure (chooses the NRI status code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request's data is malformed or incomplete.
    InvalidInput,
    /// Admission failed for lack of resources (kubelet's admission errors).
    ResourceExhausted,
    /// The pod or container is unknown.
    NotFound,
    /// The request asks for something Pinion does not support.
    Unsupported,
    /// Anything else (e.g. the checkpoint could not be written).
    Internal,
}

/// A handler failure; the message is shown to the user (e.g. by kubelet in
/// the pod's events when it fails container creation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    pub kind: ErrorKind,
    pub message: String,
}

impl HandlerError {
    #[must_use]
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl From<KubeError> for HandlerError {
    fn from(err: KubeError) -> Self {
        Self::new(ErrorKind::InvalidInput, err.to_string())
    }
}

/// The one mapping from handler errors to NRI statuses.
#[must_use]
// difference-from-kubelet: refusal-is-create-container-error
pub fn to_status(err: &HandlerError) -> Status {
    let code = match err.kind {
        ErrorKind::InvalidInput => Code::InvalidArgument,
        ErrorKind::ResourceExhausted => Code::ResourceExhausted,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::Unsupported => Code::FailedPrecondition,
        ErrorKind::Internal => Code::Internal,
    };
    Status::new(code, err.message.clone())
}

/// Lifecycle events, as Pinion needs them. Every method runs while the
/// runtime waits (within its request timeout, 2 s by default): answer fast.
/// Never wait inside a handler for an unsolicited update to be delivered —
/// use [`crate::plugin::UpdateSender`], which sends after the handler returned.
pub trait NriHandler: Send + Sync + 'static {
    /// The runtime identified itself (after each (re-)registration).
    fn configure(
        &self,
        info: RuntimeInfo,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = info;
        async { Ok(()) }
    }

    /// The full state after each (re-)registration; returns updates for
    /// existing containers (e.g. the shared pool for containers Pinion did
    /// not know). Each is reported to [`NriHandler::updates_applied`] once the
    /// runtime's next request shows it applied them (or after
    /// [`crate::outbox::Timing::carried_settle`]).
    fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> impl Future<Output = Result<Vec<ContainerUpdate>, HandlerError>> + Send;

    /// A pod sandbox started.
    fn run_pod_sandbox(
        &self,
        pod: PodSandbox,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = pod;
        async { Ok(()) }
    }

    /// Admission of a new container; an error fails the container creation.
    fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = Result<Created, HandlerError>> + Send;

    /// A container started.
    fn start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = (pod, container);
        async { Ok(()) }
    }

    /// A running container's resources are changing to `resources`; the
    /// returned updates may include this container (to keep its CPUs).
    fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Resources,
    ) -> impl Future<Output = Result<Vec<ContainerUpdate>, HandlerError>> + Send;

    /// A container stopped; returns updates of other containers.
    fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = Result<Vec<ContainerUpdate>, HandlerError>> + Send;

    /// A container was removed.
    fn remove_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// A pod sandbox stopped.
    fn stop_pod_sandbox(
        &self,
        pod: PodSandbox,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = pod;
        async { Ok(()) }
    }

    /// A pod sandbox was removed.
    fn remove_pod_sandbox(
        &self,
        pod: PodSandbox,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Pod-level resources changed (NRI v0.10+).
    fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        resources: Resources,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = (pod, resources);
        async { Ok(()) }
    }

    /// The runtime's request `method` (a method of the Plugin service,
    /// [`crate::service::PLUGIN_METHODS`]) took `took` to answer, the
    /// handler's time included: for the plugin's metrics. Called once per
    /// answered request, before the answer is sent; it must not block.
    fn request_served(&self, method: &'static str, took: Duration) {
        let _ = (method, took);
    }

    /// The runtime could not apply these unsolicited updates.
    fn updates_failed(&self, container_ids: Vec<String>) -> impl Future<Output = ()> + Send {
        tracing::warn!(?container_ids, "runtime failed to apply container updates");
        async {}
    }

    /// The runtime applied these updates (an id once per update): the
    /// unsolicited ones it answered, and those an event or `Synchronize`
    /// reply carried once its next request arrived. Every update sent is
    /// answered once, here or in [`NriHandler::updates_failed`].
    fn updates_applied(&self, container_ids: Vec<String>) -> impl Future<Output = ()> + Send {
        let _ = container_ids;
        async {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_distinct_codes() {
        let cases = [
            (ErrorKind::InvalidInput, Code::InvalidArgument),
            (ErrorKind::ResourceExhausted, Code::ResourceExhausted),
            (ErrorKind::NotFound, Code::NotFound),
            (ErrorKind::Unsupported, Code::FailedPrecondition),
            (ErrorKind::Internal, Code::Internal),
        ];
        for (kind, code) in cases {
            let status = to_status(&HandlerError::new(kind, "text"));
            assert_eq!(status, Status::new(code, "text"));
        }
    }
}
