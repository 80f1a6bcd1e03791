//! The plugins' one error type and its classification for the wire.

use pinion_core::policy::PolicyError;
use pinion_core::pools::PoolError;
use pinion_core::qos::QosError;

use crate::store::StoreError;

/// Why a plugin call failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// katalyst's annotations are invalid (unknown QoS level, …).
    #[error(transparent)]
    Qos(#[from] QosError),
    #[error("invalid req.ResourceRequests length: {count} (expected exactly one, for {resource})")]
    RequestCount { resource: String, count: usize },
    #[error("resource {resource} is not in the request (it asks for {got})")]
    RequestMissing { resource: String, got: String },
    #[error("invalid quantity {value} for resource {resource}")]
    BadQuantity { resource: String, value: f64 },
    #[error("request for resource {got} sent to the {expected} plugin")]
    WrongResource { expected: String, got: String },
    #[error("pod {pod} container {container} is not known to the {resource} plugin")]
    UnknownContainer {
        resource: String,
        pod: String,
        container: String,
    },
    #[error("numa nodes {nodes} are held exclusively by pod {pod}")]
    NumaHeld { nodes: String, pod: String },
    #[error(
        "numa_exclusive pod {pod} needs numa nodes {nodes} to itself, but other pods use them"
    )]
    NumaBusy { pod: String, nodes: String },
    #[error("numa nodes {nodes} do not exist on this machine")]
    UnknownNuma { nodes: String },
    #[error(
        "not enough {resource} on numa nodes {nodes}: requested {requested}, available {available}"
    )]
    Insufficient {
        resource: String,
        nodes: String,
        requested: String,
        available: String,
    },
    #[error("no nic can serve pod {pod} (namespace type {namespace_type}, {requested} requested)")]
    NoNic {
        pod: String,
        namespace_type: String,
        requested: String,
    },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Pools(#[from] PoolError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid {plugin} plugin configuration: {reason}")]
    Config {
        plugin: &'static str,
        reason: String,
    },
    #[error("restored {plugin} plugin state does not fit this machine: {reason}")]
    Restore {
        plugin: &'static str,
        reason: String,
    },
}

/// How the wire should report a [`PluginError`] (gRPC status codes map
/// one to one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong (`InvalidArgument`).
    InvalidArgument,
    /// The pod or container is unknown (`NotFound`).
    NotFound,
    /// The machine cannot serve the request now (`ResourceExhausted`).
    ResourceExhausted,
    /// The plugin itself failed (`Internal`).
    Internal,
}

impl PluginError {
    /// The class of this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Qos(_)
            | Self::RequestCount { .. }
            | Self::RequestMissing { .. }
            | Self::BadQuantity { .. }
            | Self::WrongResource { .. }
            | Self::UnknownNuma { .. } => ErrorKind::InvalidArgument,
            Self::UnknownContainer { .. } => ErrorKind::NotFound,
            Self::NumaHeld { .. }
            | Self::NumaBusy { .. }
            | Self::Insufficient { .. }
            | Self::NoNic { .. }
            | Self::Pools(_) => ErrorKind::ResourceExhausted,
            Self::Policy(err) => match err {
                PolicyError::Alloc(_)
                | PolicyError::SmtNotEnoughPhysical { .. }
                | PolicyError::SharedPoolWouldBeEmpty { .. }
                | PolicyError::SharedPoolAllIsolated { .. }
                | PolicyError::IsolatedShortfall { .. }
                | PolicyError::TopologyAffinity(_) => ErrorKind::ResourceExhausted,
                PolicyError::SmtNotMultiple { .. } | PolicyError::CpuAsk(_) => {
                    ErrorKind::InvalidArgument
                }
                _ => ErrorKind::Internal,
            },
            Self::Store(_) | Self::Config { .. } | Self::Restore { .. } => ErrorKind::Internal,
        }
    }
}
