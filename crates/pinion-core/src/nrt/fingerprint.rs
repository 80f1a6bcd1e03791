//! The pods fingerprint of a NodeResourceTopology (spec `nrt.md` §3): a
//! digest of the set of pods on the node, by namespace and name, that the
//! scheduler plugin's cache compares with its own view before it trusts an
//! updated object. Same output as the podfingerprint library (`pfp0v001`
//! and 16 hex digits).
//!
//! Which pods count depends on the method; under
//! [`Method::WithExclusiveResources`] a pod counts when the scheduler plugin
//! would call it exclusive ([`is_exclusive_for_scheduler`]), so both sides
//! hash the same set.

use std::collections::BTreeSet;
use std::hash::Hasher as _;

use twox_hash::XxHash64;

use crate::pod::{Container, Pod, QosClass};
use crate::quantity::Quantity;

/// The attribute holding the fingerprint.
pub const ATTRIBUTE: &str = "nodeTopologyPodsFingerprint";
/// The attribute holding the method.
pub const ATTRIBUTE_METHOD: &str = "nodeTopologyPodsFingerprintMethod";
/// The legacy annotation holding the fingerprint.
pub const ANNOTATION: &str = "topology.node.k8s.io/fingerprint";
/// Prefix and version of the signature.
pub const PREFIX: &str = "pfp0";
pub const VERSION: &str = "v001";

/// Which pods the fingerprint covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// Every pod on the node (`all`).
    All,
    /// Pods holding exclusive resources (`with-exclusive-resources`,
    /// resource-topology-exporter's default).
    #[default]
    WithExclusiveResources,
}

/// An unknown method name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown pods fingerprint method {value:?} (expected \"all\" or \"with-exclusive-resources\")"
)]
pub struct MethodError {
    pub value: String,
}

impl Method {
    /// The name the attribute carries.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::WithExclusiveResources => "with-exclusive-resources",
        }
    }

    /// The method named `text`.
    pub fn parse(text: &str) -> Result<Self, MethodError> {
        match text {
            "all" => Ok(Self::All),
            "with-exclusive-resources" => Ok(Self::WithExclusiveResources),
            _ => Err(MethodError {
                value: text.to_string(),
            }),
        }
    }
}

/// The signature of the pods `(namespace, name)`: each pod hashed as
/// XXH64(name) seeded with XXH64(namespace), the hashes sorted ascending
/// (duplicates kept) and streamed little-endian into one XXH64, printed
/// big-endian in hex after `pfp0v001`.
#[must_use]
pub fn sign<'a>(pods: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut hashes: Vec<u64> = pods
        .into_iter()
        .map(|(namespace, name)| {
            let seed = XxHash64::oneshot(0, namespace.as_bytes());
            XxHash64::oneshot(seed, name.as_bytes())
        })
        .collect();
    hashes.sort_unstable();
    let mut digest = XxHash64::with_seed(0);
    for hash in hashes {
        digest.write(&hash.to_le_bytes());
    }
    format!("{PREFIX}{VERSION}{:016x}", digest.finish())
}

/// The signature of `pods` under `method`; `nrt_resources` are the
/// resource names the object's zones expose (an extended resource counts
/// as exclusive only when it is one of them).
#[must_use]
pub fn pods_fingerprint(method: Method, pods: &[&Pod], nrt_resources: &BTreeSet<String>) -> String {
    sign(
        pods.iter()
            .filter(|pod| method == Method::All || is_exclusive_for_scheduler(pod, nrt_resources))
            .map(|pod| (pod.namespace.as_str(), pod.name.as_str())),
    )
}

/// Whether the scheduler plugin (scheduler-plugins'
/// `resourcerequests.AreExclusiveForPod`) takes `pod` as holding exclusive
/// resources: a restartable init container or an app container requests a
/// non-native resource the NRT exposes, or — Guaranteed pods only — a whole
/// number of CPUs, memory or hugepages. Other init containers do not count.
/// A Guaranteed pod with a fractional CPU request counts (by its memory),
/// although it holds no exclusive CPU.
#[must_use]
pub fn is_exclusive_for_scheduler(pod: &Pod, nrt_resources: &BTreeSet<String>) -> bool {
    let guaranteed = pod.qos() == QosClass::Guaranteed;
    pod.init_containers
        .iter()
        .filter(|c| c.is_restartable())
        .chain(&pod.containers)
        .any(|c| container_is_exclusive(c, guaranteed, nrt_resources))
}

fn container_is_exclusive(
    container: &Container,
    guaranteed: bool,
    nrt_resources: &BTreeSet<String>,
) -> bool {
    container
        .requests()
        .iter()
        .any(|(name, quantity)| is_exclusive(name, quantity, guaranteed, nrt_resources))
}

/// scheduler-plugins' `IsExclusive` for one request.
fn is_exclusive(
    name: &str,
    quantity: &Quantity,
    guaranteed: bool,
    nrt_resources: &BTreeSet<String>,
) -> bool {
    if !is_native(name) {
        return nrt_resources.contains(name);
    }
    if !guaranteed {
        return false;
    }
    let units = quantity.value();
    match name {
        // A whole number of CPUs (Kubernetes `Value() * 1000 == MilliValue()`).
        "cpu" => units > 0 && u128::from(units) * 1000 == quantity.milli_value(),
        "memory" => units > 0,
        _ => name.starts_with("hugepages-") && units > 0,
    }
}

/// Kubernetes' `IsNativeResource`: no domain, or a name containing
/// `kubernetes.io/`.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}
