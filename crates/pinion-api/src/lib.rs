//! Wire types and clients of Pinion's own surfaces, shared by the agent
//! (server side), the command-line tool and resource plugins (client side)
//! so that none depends on another:
//!
//! * [`local`]: the local API of `pinion-agent` (JSON over HTTP/1.1 on a
//!   unix socket; protocol: `docs/local-api.md`), its requests, answers and
//!   error body;
//! * [`paths`]: where the agent's state and socket are by default;
//! * [`client`]: a blocking client of the local API (hyper over the unix
//!   socket, on a current-thread runtime per call);
//! * [`resourceplugin`]: kubewharf's QoS Resource Manager plugin API
//!   (`resourceplugin.v1alpha1`), served by resource plugins and, for the
//!   device-plugin-style registration, by the manager;
//! * [`pluginregistration`]: kubelet's plugin-watcher registration service;
//! * [`podresources`]: kubelet's podresources API (v1 with kubewharf's
//!   extensions, and the legacy v1alpha1);
//! * [`entries`]: value presence of the plugin API's message-valued maps;
//! * [`plugin`]: serving a resource plugin (both services on one socket);
//! * [`uds`]: gRPC over unix sockets (server incoming stream, client
//!   channel), as every one of these gRPC APIs uses;
//! * [`authority`]: the server side's repair of clients' `:authority` on
//!   those sockets (what `h2` refuses and kubelet accepts).
//!
//! The protobuf code is generated at build time from our own `.proto`
//! files (`proto/`). The agent converts its controller's types into the
//! local API's wire types in one place (`pinion-agent/src/api.rs`), so the
//! controller can change without changing the wire.

pub mod authority;
pub mod client;
pub mod entries;
pub mod local;
pub mod paths;
pub mod plugin;
pub mod uds;

pub use client::{Client, ClientError};
pub use paths::DefaultPaths;

/// `resourceplugin.v1alpha1`.
pub mod resourceplugin {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("resourceplugin.v1alpha1");
}

/// `pluginregistration`.
pub mod pluginregistration {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("pluginregistration");
}

/// kubelet's podresources API.
pub mod podresources {
    /// `v1` (upstream's current schema plus kubewharf's fields).
    pub mod v1 {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("v1");
    }
    /// `v1alpha1` (legacy `List`).
    pub mod v1alpha1 {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("v1alpha1");
    }
}
