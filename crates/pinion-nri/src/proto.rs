//! Protobuf types generated at build time from `proto/*.proto` (our own subset
//! of the NRI API and of the ttrpc envelope).
#![allow(clippy::all, clippy::pedantic, missing_docs)]

/// The NRI API subset (`nri.pkg.api.v1alpha1`).
pub mod nri {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}

/// The ttrpc envelope (`ttrpc`).
pub mod ttrpc {
    include!(concat!(env!("OUT_DIR"), "/ttrpc.rs"));
}
