//! Everything of Pinion that touches the operating system: topology
//! discovery from sysfs (and, later, cgroupfs writers and the durable file
//! store). Decisions live in `pinion-core`; this crate only reads and writes.

pub mod sysfs;

pub use sysfs::{discover, DiscoveryError};
