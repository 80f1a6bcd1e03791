//! Reading a [`Request`]: its one quantity, its QoS annotations, its hint.

use pinion_core::policy::{CpuAsk, IsolatedAsk, PolicyError};
use pinion_core::qos::{self, QosRequest};
use pinion_core::CpuSet;

use crate::api::{ContainerType, Request};
use crate::PluginError;

/// The request's quantity of `resource`. katalyst's rule: exactly one entry,
/// keyed by the resource name; `extra` names other keys a plugin accepts
/// beside it (the memory plugin's hugepages).
pub fn quantity(
    request: &Request,
    resource: &str,
    extra: impl Fn(&str) -> bool,
) -> Result<f64, PluginError> {
    let own = request.resource_requests.len()
        - request
            .resource_requests
            .keys()
            .filter(|key| key.as_str() != resource && extra(key))
            .count();
    if own != 1 {
        return Err(PluginError::RequestCount {
            resource: resource.to_string(),
            count: request.resource_requests.len(),
        });
    }
    let Some(&value) = request.resource_requests.get(resource) else {
        return Err(PluginError::RequestMissing {
            resource: resource.to_string(),
            got: request
                .resource_requests
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(","),
        });
    };
    if !value.is_finite() || value < 0.0 {
        return Err(PluginError::BadQuantity {
            resource: resource.to_string(),
            value,
        });
    }
    Ok(value)
}

/// Checks the request is for `resource`.
pub fn check_resource(request: &Request, resource: &str) -> Result<(), PluginError> {
    if request.resource_name == resource {
        Ok(())
    } else {
        Err(PluginError::WrongResource {
            expected: resource.to_string(),
            got: request.resource_name.clone(),
        })
    }
}

/// The pod's QoS request (katalyst's annotations; `qrm.md` §7).
pub fn qos(request: &Request) -> Result<QosRequest, PluginError> {
    Ok(qos::parse(&request.annotations)?)
}

/// Whether the pod asks for boot-isolated CPUs (`pinion.io/isolated-cpus:
/// require | prefer`, as the static policy reads it); a bad value is an
/// error naming it. Only the isolated-CPU part of Pinion's asks is read.
pub fn isolated_ask(request: &Request) -> Result<IsolatedAsk, PluginError> {
    let ask = CpuAsk::from_annotations(&request.annotations).map_err(PolicyError::from)?;
    Ok(ask.isolated)
}

/// The NUMA nodes of the request's hint, when it names some (ids no
/// machine has, beyond [`pinion_core::cpuset::MAX_CPU_ID`], dropped:
/// [`crate::hints::nodes`]).
#[must_use]
pub fn hint_nodes(request: &Request) -> Option<CpuSet> {
    let nodes = crate::hints::nodes(request.hint.as_ref()?);
    (!nodes.is_empty()).then_some(nodes)
}

/// True for init containers (katalyst answers them with nothing).
#[must_use]
pub fn is_init(request: &Request) -> bool {
    request.container_type == ContainerType::Init
}

/// Milli-units of a quantity, rounded up (requests are never rounded down).
#[must_use]
pub fn milli(value: f64) -> u64 {
    let scaled = (value * 1000.0).ceil();
    if !(scaled.is_finite() && scaled > 0.0) {
        0
    } else if scaled >= 18_446_744_073_709_551_615.0 {
        u64::MAX
    } else {
        // Positive, integral and below u64::MAX: the cast is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let milli = scaled as u64;
        milli
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pairs: &[(&str, f64)]) -> Request {
        Request {
            resource_name: "cpu".into(),
            resource_requests: pairs.iter().map(|(k, v)| ((*k).to_string(), *v)).collect(),
            ..Request::default()
        }
    }

    #[test]
    fn exactly_one_quantity_keyed_by_the_resource() {
        assert_eq!(
            quantity(&request(&[("cpu", 2.5)]), "cpu", |_| false).ok(),
            Some(2.5)
        );
        assert!(matches!(
            quantity(&request(&[]), "cpu", |_| false),
            Err(PluginError::RequestCount { count: 0, .. })
        ));
        assert!(matches!(
            quantity(&request(&[("cpu", 1.0), ("memory", 1.0)]), "cpu", |_| false),
            Err(PluginError::RequestCount { count: 2, .. })
        ));
        assert!(matches!(
            quantity(&request(&[("memory", 1.0)]), "cpu", |_| false),
            Err(PluginError::RequestMissing { .. })
        ));
        assert!(matches!(
            quantity(&request(&[("cpu", f64::NAN)]), "cpu", |_| false),
            Err(PluginError::BadQuantity { .. })
        ));
        let extra = request(&[("memory", 1.0), ("hugepages-2Mi", 2.0)]);
        assert_eq!(
            quantity(&extra, "memory", |k| k.starts_with("hugepages-")).ok(),
            Some(1.0)
        );
    }

    #[test]
    fn milli_rounds_up_and_never_panics() {
        assert_eq!(milli(0.0), 0);
        assert_eq!(milli(0.0001), 1);
        assert_eq!(milli(2.5), 2500);
        assert_eq!(milli(-1.0), 0);
        assert_eq!(milli(f64::INFINITY), 0);
        assert_eq!(milli(1e30), u64::MAX);
    }

    #[test]
    fn hint_nodes_ignore_an_empty_hint() {
        let mut r = request(&[("cpu", 1.0)]);
        assert_eq!(hint_nodes(&r), None);
        r.hint = Some(crate::Hint {
            nodes: vec![],
            preferred: true,
        });
        assert_eq!(hint_nodes(&r), None);
        r.hint = Some(crate::Hint {
            nodes: vec![1, 3],
            preferred: true,
        });
        assert_eq!(hint_nodes(&r), Some(CpuSet::from_iter([1, 3])));
    }

    /// Found from outside (forty-fourth session): a hint naming node 8192
    /// or more (up to `u32::MAX`) panicked building the node set; over a
    /// plugin's socket that was an internal error, not the request's.
    #[test]
    fn regression_hint_node_ids_no_machine_has_are_dropped_without_a_panic() {
        let mut r = request(&[("cpu", 1.0)]);
        r.hint = Some(crate::Hint {
            nodes: vec![1, 8192, u64::from(u32::MAX), u64::MAX],
            preferred: true,
        });
        assert_eq!(hint_nodes(&r), Some(CpuSet::from_iter([1])));
        r.hint = Some(crate::Hint {
            nodes: vec![8192],
            preferred: true,
        });
        assert_eq!(hint_nodes(&r), None);
    }
}
