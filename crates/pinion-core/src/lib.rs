//! Pinion's pure decisions: CPU sets, the topology model, and (in later
//! modules) allocation, policy and state. No I/O, clocks or threads here.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod checkpoint;
pub mod cpuset;
pub mod pod;
pub mod policy;
pub mod quantity;
pub mod topology;
pub mod topomgr;

pub use cpuset::{CpuSet, CpuSetError};
pub use quantity::{Quantity, QuantityError};
pub use topology::{CpuInfo, NumaNode, Topology, TopologyError, TopologySpec};
