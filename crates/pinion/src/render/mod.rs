//! Human-readable renderings of core types, one module per subject.

pub mod cpumap;
pub mod text;
pub mod topology;
