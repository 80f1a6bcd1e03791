//! The Topology Manager: NUMA hints from resource providers, kubelet's merge
//! and policies (spec `kubelet-topology-manager.md`).
//!
//! * [`bitmask`]: NUMA masks and their ordering;
//! * [`hint`]: hints and provider answers;
//! * [`numa_info`]: NUMA nodes and distances;
//! * [`merge`]: the bounded, exact merge;
//! * [`policy`]: policies, scopes, manager construction and admission;
//! * [`options`]: `prefer-closest-numa-nodes`, `max-allowable-numa-nodes`,
//!   `numa-allocation-strategy` (KEP-6007, [`numa_score`]);
//! * [`cpu_hints`]: the CPU manager as a hint provider;
//! * [`metrics`]: admission counters and the duration histogram;
//! * [`provider`]: the hint-provider interface and fixed hints;
//! * [`case`]: the corpus case formats (`merge`, `cpu_hints`).

pub mod bitmask;
pub mod case;
pub mod cpu_hints;
pub mod hint;
pub mod merge;
pub mod metrics;
pub mod numa_info;
pub mod numa_score;
pub mod options;
pub mod policy;
pub mod provider;

pub use bitmask::{BitMaskError, NumaMask};
pub use hint::{ProviderHints, TopologyHint};
pub use numa_info::{Distances, NumaInfo};
pub use policy::{
    Admission, Policy, Scope, TopologyAffinityError, TopologyManager, TopologyManagerError,
};
