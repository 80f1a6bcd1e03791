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

/// The agent's memory allocator: jemalloc on x86_64 Linux, the system's
/// elsewhere.
///
/// * Why: an admission allocates and frees a few hundred small objects on
///   two threads (requests, records, the published snapshot); under glibc's
///   allocator that was about 30 % of the instructions an admission runs.
///   jemalloc takes 5–10 % off an admission's p50 on tmpfs and, with 1000
///   pods on the node, about 30 % off p50 and p99 (`docs/performance.md`,
///   "Thirty-second session"). mimalloc was as fast at p50 but doubled the
///   1000-pod p99.
/// * Why here and not in `main.rs`: every build of the agent's code — the
///   binary, its integration tests and its benches — runs on the allocator
///   that ships, so the benches measure what users run. No other crate
///   links this library.
/// * Why only x86_64: jemalloc fixes the page size when it is built, and
///   stops at start on a kernel with larger pages; aarch64 kernels run 4,
///   16 or 64 KiB pages, x86_64's are always 4 KiB.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
