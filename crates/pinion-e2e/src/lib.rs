//! End-to-end test support for Pinion.
//!
//! `pinion-cri` (the binary of this crate) acts as kubelet against a real
//! container runtime over CRI v1: it creates pod sandboxes and containers
//! with the cgroup parents, CPU shares, CFS quota and OOM score kubelet would
//! set for a given QoS class and resources, so a runtime with Pinion as its
//! NRI plugin sees exactly what it would see on a Kubernetes node. The
//! scenarios themselves are shell scripts (`scripts/e2e-containerd.sh`,
//! `scripts/e2e/`), which also start and restart the runtime and the agent.

pub mod client;
pub mod spec;

/// The CRI v1 types and client generated from `proto/cri.proto` (our own
/// subset of the upstream API, wire-compatible).
#[allow(clippy::all, clippy::pedantic, missing_docs, reason = "generated code")]
pub mod proto {
    tonic::include_proto!("runtime.v1");
}
