//! Pinion's own resource plugins for the QoS Resource Manager — the
//! decision logic and its state, wire-agnostic (the gRPC server and the
//! agent's in-process endpoints call [`ResourcePlugin`]):
//!
//! * [`cpu::CpuPlugin`] (`cpu`): katalyst's QoS levels over role-based CPU
//!   pools (`pinion_core::pools`); Guaranteed pods with integer CPUs and no
//!   annotation get exactly what the static policy gives them;
//! * [`memory::MemoryPlugin`] (`memory`): per-NUMA accounting, NUMA binding
//!   (`CpusetMems`), hugepages reported and accounted;
//! * [`nic::NicPlugin`] (`resource.katalyst.kubewharf.io/net_bandwidth` by
//!   default): NUMA-affine NICs shared by several pods.
//!
//! [`builtin::open`] opens one of them by name with its configuration (the
//! agent's `qosResourceManager.builtinPlugins` and `pinion plugin serve`).
//! [`grpc::GrpcPlugin`] puts any of them on the wire (`resourceplugin.v1alpha1`,
//! for `pinion plugin serve`); the rest of the crate knows nothing of it.
//!
//! Decisions come from `pinion-core`, OS reads from `pinion-host`; each
//! plugin keeps its state in its own file of a state directory
//! ([`store::StateFile`], written atomically).

pub mod api;
pub mod builtin;
pub mod cpu;
mod error;
pub mod grpc;
pub mod hints;
pub mod memory;
pub mod nic;
pub mod qrm_request;
pub mod request;
pub mod scenario;
pub mod store;

pub use api::{
    AllocatableResource, Allocation, AllocationInfo, Allocations, ContainerType, Hint, Options,
    Request, ResourcePlugin, TopologyAwareQuantity, TopologyAwareResource, TopologyLevel,
};
pub use error::{ErrorKind, PluginError};
