//! The QoS Resource Manager's admission rules shared by the agent's manager
//! and the simulator (`pinion_plugins::scenario`), so both decide alike:
//! which plugins a container asks and for how much ([`plugin_requests`]),
//! its type and index ([`container_type`]), a plugin's hint as the Topology
//! Manager's ([`topology_hint`]), whether a failed `Allocate` is tolerated
//! ([`allocation_failure_is_tolerated`]) and whether a stored allocation
//! still covers a request ([`allocations_cover`]). Nothing here knows a
//! wire type: `pinion_plugins::qrm_request` builds the `ResourceRequest`
//! from these answers for both.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::plugin_allocation::{PluginAllocation, PluginAllocations};
use crate::pod::{guaranteed_cpus, Pod};
use crate::qos::vocabulary::{self, Identity, VocabularyError};
use crate::qos::{self, QosLevel, MAIN_CONTAINER_KEY};
use crate::topomgr::{NumaMask, TopologyHint};
use crate::Quantity;

/// A container's `ContainerType` in a resource request (spec `qrm.md` §4.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ContainerType {
    Init,
    #[default]
    Main,
    Sidecar,
    Ephemeral,
}

/// The container's type and index (§4.1): init containers by their index
/// among init containers; the main container (annotation
/// [`MAIN_CONTAINER_KEY`], else the first app container) `Main`, other app
/// containers `Sidecar`, app containers by their index among app containers.
#[must_use]
pub fn container_type(pod: &Pod, container: &str) -> (ContainerType, u64) {
    if let Some(index) = pod.init_containers.iter().position(|c| c.name == container) {
        return (ContainerType::Init, index as u64);
    }
    let index = pod
        .containers
        .iter()
        .position(|c| c.name == container)
        .unwrap_or_default();
    let main = pod
        .annotations
        .get(MAIN_CONTAINER_KEY)
        .cloned()
        .or_else(|| pod.containers.first().map(|c| c.name.clone()));
    let kind = if main.as_deref() == Some(container) {
        ContainerType::Main
    } else {
        ContainerType::Sidecar
    };
    (kind, index as u64)
}

/// One resource of a container served by a plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginRequest {
    /// The plugin's resource name (after the names map).
    pub resource: String,
    /// The name the container requested.
    pub requested: String,
    /// The quantity as plugins receive it (the raw value: `2` CPUs, bytes,
    /// Mb/s, milli-CPUs of `reclaimed_millicpu`).
    pub quantity: f64,
    /// The container's limit of the resource, likewise (`None`: no limit;
    /// an extended resource's limit is its request).
    pub limit: Option<f64>,
    /// The pod's role and type as every request of the pod carries them.
    pub identity: Identity,
}

/// Why a container's requests cannot go to plugins.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("both {requested} and mapped {mapped} are requested")]
    BothMapped { requested: String, mapped: String },
    #[error("pod {pod} has no container {container:?}")]
    UnknownContainer { pod: String, container: String },
    #[error("pod {pod}: {source}")]
    Vocabulary {
        pod: String,
        source: VocabularyError,
    },
}

/// The plugin resources `container` of `pod` requests (spec `qrm.md`
/// §4.1–4.3), in the order of the requested names: every request whose
/// name after `names_map` `served` accepts. The pod's role and type come
/// from either vocabulary — katalyst's label and annotation or the QRM
/// proposal's — and a pod whose metadata contradicts itself is refused
/// here, before any plugin hears of it.
pub fn plugin_requests(
    pod: &Pod,
    container: &str,
    names_map: &BTreeMap<String, String>,
    served: impl Fn(&str) -> bool,
) -> Result<Vec<PluginRequest>, RequestError> {
    let spec = pod
        .container(container)
        .ok_or_else(|| RequestError::UnknownContainer {
            pod: pod.uid.clone(),
            container: container.to_string(),
        })?;
    let identity = vocabulary::identity(&pod.labels, &pod.annotations).map_err(|source| {
        RequestError::Vocabulary {
            pod: format!("{}/{}", pod.namespace, pod.name),
            source,
        }
    })?;
    let requests = spec.requests();
    let limits = spec.limits();
    let mut out = Vec::new();
    for (name, quantity) in &requests {
        let mapped = names_map.get(name).cloned().unwrap_or_else(|| name.clone());
        if mapped != *name && requests.contains_key(&mapped) {
            return Err(RequestError::BothMapped {
                requested: name.clone(),
                mapped,
            });
        }
        if served(&mapped) {
            out.push(PluginRequest {
                resource: mapped,
                requested: name.clone(),
                quantity: as_float(quantity),
                limit: limits.get(name).map(as_float),
                identity: identity.clone(),
            });
        }
    }
    Ok(out)
}

/// Whether the manager asks for topology hints for `request` at all
/// (§4.4): not for a zero quantity (no plugin is asked, and none can
/// refuse). Of the others only topology-aligned plugins are asked.
#[must_use]
pub fn asks_for_hints(request: &PluginRequest) -> bool {
    request.quantity != 0.0
}

/// A quantity as the `double` plugins receive.
#[allow(clippy::cast_precision_loss)]
fn as_float(quantity: &Quantity) -> f64 {
    quantity.milli_value() as f64 / 1000.0
}

/// A plugin's hint (NUMA node ids, preferred) as the Topology Manager's:
/// no ids is "any node"; `None` for node ids it cannot represent (beyond
/// 63), which no machine Pinion manages has.
#[must_use]
pub fn topology_hint(nodes: &[u64], preferred: bool) -> Option<TopologyHint> {
    if nodes.is_empty() {
        return Some(TopologyHint {
            affinity: None,
            preferred,
        });
    }
    let ids: Option<Vec<u32>> = nodes.iter().map(|n| u32::try_from(*n).ok()).collect();
    let mask = NumaMask::from_ids(ids?).ok()?;
    Some(TopologyHint::new(mask, preferred))
}

/// The node ids of the Topology Manager's affinity as a plugin's hint
/// carries them: ascending; "any node" as no ids.
#[must_use]
pub fn hint_nodes(hint: &TopologyHint) -> Vec<u64> {
    hint.affinity
        .map(|mask| mask.ids().into_iter().map(u64::from).collect())
        .unwrap_or_default()
}

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
mod tests;
