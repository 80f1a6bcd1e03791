//! Pinion's pure decisions: CPU sets, the topology model, allocation, policy,
//! state and the engine. No I/O, clocks or threads here.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod cpuset;
pub mod engine;
pub mod migrate;
pub mod policy;
pub mod state;
pub mod topology;

pub use cpuset::{CpuSet, CpuSetError};
pub use topology::{CpuInfo, NumaNode, Topology, TopologyError, TopologySpec};
