//! The QoS Resource Manager's admission rules shared by the agent's manager
//! and the simulator (`pinion_plugins::scenario`), so both decide alike.

use crate::plugin_allocation::{PluginAllocation, PluginAllocations};
use crate::pod::{guaranteed_cpus, Pod};
#[cfg(test)]
use crate::qos::QOS_LEVEL_KEY;
use crate::qos::{self, QosLevel};

/// Whether a failed `Allocate` of `container` in `pod` is skipped (the
/// container runs without that resource) rather than failing the admission.
///
/// The kubelet fork tolerates the failure for pods whose QoS level is
/// `shared_cores` or not set (spec `qrm.md` §4.6) — the level as
/// [`qos::parse`] reads it, so a level the proposal's role gives counts
/// (an `ETL` pod is `reclaimed_cores`). Pinion narrows that to
/// containers that asked for no exclusivity: a container with exclusive
/// CPUs asked (a Guaranteed pod's whole-CPU request — `pinion run --cpus N`
/// — kubelet's `guaranteedCPUs`) either gets them or fails with the reason;
/// it never runs silently in the shared pool because its plugin is dead or
/// hung.
#[must_use]
pub fn allocation_failure_is_tolerated(pod: &Pod, container: &str) -> bool {
    let shared_level = qos::parse(&pod.annotations)
        .is_ok_and(|request| !request.level_explicit || request.level == QosLevel::SharedCores);
    shared_level && !asks_exclusive_cpus(pod, container)
}

/// Whether `container` of `pod` asks for exclusive CPUs (a whole-CPU
/// request of a Guaranteed pod); false for a container the pod lacks.
#[must_use]
pub fn asks_exclusive_cpus(pod: &Pod, container: &str) -> bool {
    pod.container(container)
        .is_some_and(|spec| guaranteed_cpus(pod, spec) > 0)
}

/// The proposal's re-admission rule (`IsScalarResource`, spec `qrm.md`
/// §4.4 step 2 and §4.5 step 1): a container admitted again — a new
/// runtime container of a container whose pod still runs — keeps what a
/// plugin allocated to it without a new `GetTopologyHints` or `Allocate`
/// when the allocation is scalar and its quantity, rounded up, covers the
/// request (as a `Quantity`'s integer value, rounded up too). A request
/// grown past it, or a non-scalar allocation, asks the plugin again.
#[must_use]
pub fn allocation_covers(stored: &PluginAllocation, requested: f64) -> bool {
    stored.is_scalar_resource
        && requested.is_finite()
        && stored.allocated_quantity.ceil() >= requested.ceil()
}

/// [`allocation_covers`] for every `(resource, quantity)` a container asks
/// plugins for: true when each one has a stored allocation that covers it
/// (and the container asks plugins for something).
#[must_use]
pub fn allocations_cover<'a>(
    stored: &PluginAllocations,
    requests: impl IntoIterator<Item = (&'a str, f64)>,
) -> bool {
    let mut any = false;
    for (resource, quantity) in requests {
        any = true;
        let covered = stored
            .get(resource)
            .is_some_and(|allocation| allocation_covers(allocation, quantity));
        if !covered {
            return false;
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Container;
    use crate::Quantity;

    fn pod(level: Option<&str>, cpu_request: &str, cpu_limit: Option<&str>) -> Pod {
        let q = |text: &str| Quantity::parse(text).expect("quantity");
        let guaranteed = cpu_limit.is_some();
        Pod {
            uid: "uid".into(),
            annotations: level
                .map(|l| (QOS_LEVEL_KEY.to_string(), l.to_string()))
                .into_iter()
                .collect(),
            containers: vec![Container {
                name: "main".into(),
                cpu_request: Some(q(cpu_request)),
                cpu_limit: cpu_limit.map(q),
                memory_request: guaranteed.then(|| q("1Gi")),
                memory_limit: guaranteed.then(|| q("1Gi")),
                ..Container::default()
            }],
            ..Pod::default()
        }
    }

    /// Regression (issue 27, item 6): with the `cpu` plugin dead or hung,
    /// `pinion run --cpus 1` (no QoS level, Guaranteed, one whole CPU) was
    /// tolerated and ran in the shared pool without a word.
    #[test]
    fn regression_an_exclusive_request_is_never_tolerated() {
        let cases = [
            ("no level, shared 500m", pod(None, "500m", None), true),
            ("no level, burstable 2", pod(None, "2", None), true),
            (
                "no level, guaranteed 1500m",
                pod(None, "1500m", Some("1500m")),
                true,
            ),
            (
                "shared_cores, burstable",
                pod(Some("shared_cores"), "1", None),
                true,
            ),
            (
                "no level, guaranteed 1 (--cpus 1)",
                pod(None, "1", Some("1")),
                false,
            ),
            (
                "shared_cores, guaranteed 2",
                pod(Some("shared_cores"), "2", Some("2")),
                false,
            ),
            (
                "dedicated_cores",
                pod(Some("dedicated_cores"), "500m", None),
                false,
            ),
            (
                "reclaimed_cores",
                pod(Some("reclaimed_cores"), "1", None),
                false,
            ),
        ];
        for (name, pod, tolerated) in cases {
            assert_eq!(
                allocation_failure_is_tolerated(&pod, "main"),
                tolerated,
                "{name}"
            );
        }
    }

    #[test]
    fn the_proposals_roles_count_as_the_levels_they_map_to() {
        let with_role = |role: &str| {
            let mut pod = pod(None, "1", None);
            pod.annotations.insert(
                qos::vocabulary::POD_ROLE_ANNOTATION.to_string(),
                role.to_string(),
            );
            pod
        };
        let cases = [
            ("online-micro_service", true),
            ("ETL", false),
            ("storage-service", false),
            ("numa-enhancement", false),
            ("a role the table does not know", true),
        ];
        for (role, tolerated) in cases {
            assert_eq!(
                allocation_failure_is_tolerated(&with_role(role), "main"),
                tolerated,
                "{role}"
            );
        }
    }

    fn scalar(quantity: f64) -> PluginAllocation {
        PluginAllocation {
            is_scalar_resource: true,
            allocated_quantity: quantity,
            ..PluginAllocation::default()
        }
    }

    /// Issue 28 item 2: the requested quantity is compared with the
    /// allocated one at a re-admission.
    #[test]
    fn a_scalar_allocation_covers_requests_up_to_its_rounded_quantity() {
        assert!(allocation_covers(&scalar(2.0), 2.0));
        assert!(
            allocation_covers(&scalar(2.0), 1.0),
            "a smaller request fits"
        );
        assert!(allocation_covers(&scalar(1.5), 2.0), "1.5 rounds up to 2");
        assert!(allocation_covers(&scalar(2.0), 1.5), "1.5 asks for 2");
        assert!(
            !allocation_covers(&scalar(2.0), 3.0),
            "a grown request asks again"
        );
        assert!(!allocation_covers(&scalar(2.0), 2.5), "2.5 asks for 3");
        assert!(!allocation_covers(&scalar(2.0), f64::NAN));
        let not_scalar = PluginAllocation {
            allocated_quantity: 4.0,
            ..PluginAllocation::default()
        };
        assert!(
            !allocation_covers(&not_scalar, 1.0),
            "only scalar allocations are compared"
        );
    }

    #[test]
    fn every_requested_resource_must_be_covered() {
        let stored: PluginAllocations = [
            ("cpu".to_string(), scalar(2.0)),
            ("memory".to_string(), scalar(1024.0)),
        ]
        .into();
        assert!(allocations_cover(
            &stored,
            [("cpu", 2.0), ("memory", 1024.0)]
        ));
        assert!(allocations_cover(&stored, [("cpu", 2.0)]));
        assert!(!allocations_cover(
            &stored,
            [("cpu", 2.0), ("memory", 2048.0)]
        ));
        assert!(
            !allocations_cover(&stored, [("cpu", 2.0), ("example.com/widget", 1.0)]),
            "a resource with no stored allocation is asked for"
        );
        assert!(
            !allocations_cover(&stored, []),
            "nothing asked, nothing covered"
        );
    }
}
