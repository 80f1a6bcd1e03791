//! Everything of Pinion that touches the operating system: topology
//! discovery from sysfs (and, later, cgroupfs writers), and the durable file
//! store for kubelet's checkpoint. Decisions live in `pinion-core`; this
//! crate only reads and writes.

pub mod durable;
pub mod store;
