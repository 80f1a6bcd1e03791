//! Pinion's pure decisions: CPU sets, the topology model, allocation, policy,
//! state and the engine. No I/O, clocks or threads here.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod checkpoint;
pub mod cpuset;
pub mod drift;
pub mod engine;
pub mod hotplug;
pub mod housekeeping;
pub mod k8s_names;
pub mod migrate;
pub mod node_status;
pub mod nrt;
pub mod partition;
pub mod placement;
pub mod plugin_allocation;
pub mod plugin_answer;
pub mod pod;
pub mod podresources;
pub mod policy;
pub mod pools;
pub mod qos;
pub mod qrm_checkpoint;
pub mod qrm_rules;
pub mod quantity;
pub mod rebuild;
pub mod record;
pub mod restore;
pub mod scenario;
pub mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod topology;
pub mod topomgr;

pub use cpuset::{CpuSet, CpuSetError};
pub use placement::{Placement, Pool};
pub use quantity::{Quantity, QuantityError};
pub use topology::{CpuInfo, NumaNode, Topology, TopologyError, TopologySpec};
