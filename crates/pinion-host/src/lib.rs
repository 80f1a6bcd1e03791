//! Everything of Pinion that touches the operating system: topology
//! discovery from sysfs, the durable file store for kubelet's checkpoint
//! (and, later, cgroupfs writers). Decisions live in `pinion-core`; this
//! crate only reads and writes.

pub mod durable;
pub mod store;
pub mod sysfs;

pub use sysfs::{discover, DiscoveryError};
