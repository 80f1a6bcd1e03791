//! What a request asks of the CPU plugin before any CPU is chosen: its
//! class (static, dedicated, shared, reclaimed, system), its whole CPUs and
//! the name of a NUMA-bound shared pool — read alike by the hints
//! (`hints.rs`) and the allocation (`admit.rs`).

use pinion_core::qos::{QosLevel, QosRequest};
use pinion_core::CpuSet;

use crate::api::Request;
use crate::request;

/// What a request asks for, before any CPU is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Class {
    Static {
        cpus: usize,
    },
    Dedicated {
        cpus: usize,
        binding: bool,
        exclusive: bool,
    },
    Shared {
        pool: String,
        binding: bool,
    },
    Reclaimed {
        binding: bool,
    },
    System,
}

/// The class of `request`; `None` for init containers outside the static
/// path (katalyst answers them with nothing).
pub(super) fn classify(request: &Request, qos: &QosRequest, quantity: f64) -> Option<Class> {
    let integral = quantity > 0.0 && quantity.fract() == 0.0;
    if !qos.level_explicit && request.native_qos_class == "Guaranteed" && integral {
        return Some(Class::Static {
            cpus: whole_cpus(quantity),
        });
    }
    if request::is_init(request) {
        return None;
    }
    Some(match qos.level {
        QosLevel::DedicatedCores => Class::Dedicated {
            cpus: whole_cpus(quantity).max(1),
            binding: qos.numa_binding,
            exclusive: qos.numa_exclusive,
        },
        QosLevel::SharedCores => Class::Shared {
            pool: qos.cpuset_pool.clone(),
            binding: qos.numa_binding,
        },
        QosLevel::ReclaimedCores => Class::Reclaimed {
            binding: qos.numa_binding,
        },
        QosLevel::SystemCores => Class::System,
    })
}

/// CPUs for a quantity, rounded up (katalyst: `ceil`).
fn whole_cpus(quantity: f64) -> usize {
    usize::try_from(request::milli(quantity).div_ceil(1000)).unwrap_or(usize::MAX)
}

/// The pool a NUMA-bound shared container joins: `<pool>@<nodes>`.
pub(super) fn bound_pool(pool: &str, nodes: &CpuSet) -> String {
    format!("{pool}@{nodes}")
}
