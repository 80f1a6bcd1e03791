//! Pinion's node daemon: one controller owning the engine, the checkpoint
//! and the managed cgroups; the local API (standalone front-end), the
//! `/metrics` endpoint and the configuration. Design: `docs/design.md`.

pub mod api;
pub mod client;
pub mod config;
pub mod controller;
pub mod daemon;
pub mod http;
pub mod metrics;
pub mod nri;

pub use config::{Config, ConfigError, DefaultPaths, Overrides};
pub use daemon::{run, AgentError};
