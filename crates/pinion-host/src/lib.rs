//! Everything of Pinion that touches the operating system: topology
//! discovery from sysfs, the durable file store for kubelet's checkpoint
//! and the cgroupfs cpuset writers (v1 and v2). Decisions live in `pinion-core`; this
//! crate only reads and writes.

mod bounded_read;
pub mod cgroup;
pub mod durable;
pub mod fileops;
pub mod hostname;
pub mod journal;
pub mod lock;
pub mod meminfo;
pub mod net;
pub mod pod_cgroups;
pub mod pressure;
pub mod runs;
pub mod store;
pub mod sysfs;
pub mod trust;

pub use sysfs::{discover, online_cpus, DiscoveryError};
