//! Pinion's NRI front-end: the multiplexed ttrpc protocol spoken with
//! containerd / CRI-O, the plugin stub with its [`NriHandler`] API, the
//! Kubernetes semantics derived from NRI data, and (feature `fake-runtime`) a
//! fake runtime for tests. See `docs/nri.md`.

pub mod conn;
pub mod handler;
pub mod kube;
pub mod model;
pub mod outbox;
pub mod plugin;
pub mod proto;
pub mod service;
pub mod status;
pub mod wire;

pub use handler::{Created, ErrorKind, HandlerError, NriHandler, RuntimeInfo};
pub use model::{Container, ContainerState, ContainerUpdate, PodSandbox, Resources};
pub use outbox::Urgency;
pub use plugin::{Endpoint, Plugin, PluginError, PluginOptions, UpdateSender};

#[cfg(feature = "fake-runtime")]
pub mod fake_runtime;
