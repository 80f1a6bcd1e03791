//! Pinion's node daemon (binary `pinion-agent`): one controller owning the
//! engine, the checkpoint and the managed cgroups; the local API
//! (standalone front-end) and the `/metrics` endpoint on one hyper stack
//! (`server`); the configuration. Design: `docs/design.md`.

pub mod api;
pub mod config;
pub mod controller;
pub mod daemon;
pub mod hints;
pub mod kubelet_qrm_checkpoint;
pub mod metrics;
pub mod nri;
pub mod nrt;
pub mod podresources;
pub mod qrm;
pub mod server;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use config::{Config, ConfigError, DefaultPaths, KubeletFlags, Overrides};
pub use daemon::{run, AgentError};
