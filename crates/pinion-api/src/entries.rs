//! The `map<string, Message>` fields of the resource-plugin API, declared as
//! repeated entry messages so that value presence survives decoding (spec
//! `qrm.md` §1): an entry whose value is absent means "no preference" (hints)
//! or "no record" (allocations), an empty value means "cannot satisfy".
//! These helpers turn them into ordered maps of `Option`s and back; the
//! last entry of a repeated key wins, as for a proto map.

use std::collections::BTreeMap;

use crate::resourceplugin as rp;

/// `resource → hints` with presence: `None` = no preference.
pub type HintsMap = BTreeMap<String, Option<rp::ListOfTopologyHints>>;

/// Hints entries as a map.
#[must_use]
pub fn hints_map(entries: &[rp::TopologyHintsEntry]) -> HintsMap {
    entries
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect()
}

/// A map as hints entries (`None` is sent as an entry without a value).
#[must_use]
pub fn hints_entries(map: &HintsMap) -> Vec<rp::TopologyHintsEntry> {
    map.iter()
        .map(|(key, value)| rp::TopologyHintsEntry {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// `resource → allocation` of one container; entries without a value are
/// skipped (as upstream managers do).
#[must_use]
pub fn allocation_map(
    allocation: &rp::ResourceAllocation,
) -> BTreeMap<String, rp::ResourceAllocationInfo> {
    allocation
        .resource_allocation
        .iter()
        .filter_map(|e| Some((e.key.clone(), e.value.clone()?)))
        .collect()
}

/// An allocation from `resource → info`.
#[must_use]
pub fn allocation_of(map: &BTreeMap<String, rp::ResourceAllocationInfo>) -> rp::ResourceAllocation {
    rp::ResourceAllocation {
        resource_allocation: map
            .iter()
            .map(|(key, info)| rp::ResourceAllocationEntry {
                key: key.clone(),
                value: Some(info.clone()),
            })
            .collect(),
    }
}

/// Pod UID → container → (`None`: the plugin has no record) allocation.
pub type AllocationsMap = BTreeMap<String, BTreeMap<String, Option<rp::ResourceAllocation>>>;

/// A `GetResourcesAllocation` answer as nested maps with presence.
#[must_use]
pub fn allocations_map(response: &rp::GetResourcesAllocationResponse) -> AllocationsMap {
    let mut pods = AllocationsMap::new();
    for pod in &response.pod_resources {
        let containers = pods.entry(pod.key.clone()).or_default();
        if let Some(value) = &pod.value {
            for container in &value.container_resources {
                containers.insert(container.key.clone(), container.value.clone());
            }
        }
    }
    pods
}

/// Nested maps as a `GetResourcesAllocation` answer.
#[must_use]
pub fn allocations_response(map: &AllocationsMap) -> rp::GetResourcesAllocationResponse {
    rp::GetResourcesAllocationResponse {
        pod_resources: map
            .iter()
            .map(|(pod, containers)| rp::PodAllocationEntry {
                key: pod.clone(),
                value: Some(rp::ContainerResources {
                    container_resources: containers
                        .iter()
                        .map(|(name, allocation)| rp::ContainerAllocationEntry {
                            key: name.clone(),
                            value: allocation.clone(),
                        })
                        .collect(),
                }),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    /// A proto map entry for key "cpu" without a value: the bytes a Go
    /// plugin sends for `{"cpu": nil}` — tag 1 (key) only.
    const CPU_NIL_ENTRY: &[u8] = &[0x52, 0x05, 0x0a, 0x03, b'c', b'p', b'u'];

    #[test]
    fn an_absent_hint_list_stays_distinct_from_an_empty_one() {
        let response = rp::ResourceHintsResponse::decode(CPU_NIL_ENTRY).expect("decodes");
        let map = hints_map(&response.resource_hints);
        assert_eq!(map.get("cpu"), Some(&None), "no preference");

        let mut both = HintsMap::new();
        both.insert("cpu".into(), None);
        both.insert("memory".into(), Some(rp::ListOfTopologyHints::default()));
        let response = rp::ResourceHintsResponse {
            resource_hints: hints_entries(&both),
            ..rp::ResourceHintsResponse::default()
        };
        let bytes = response.encode_to_vec();
        assert!(
            bytes.starts_with(CPU_NIL_ENTRY),
            "nil is sent without a value field"
        );
        let back = rp::ResourceHintsResponse::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(hints_map(&back.resource_hints), both);
    }

    #[test]
    fn allocations_keep_containers_without_a_record() {
        let mut containers = BTreeMap::new();
        containers.insert("app".to_string(), None);
        let info = rp::ResourceAllocationInfo {
            oci_property_name: "CpusetCpus".into(),
            allocation_result: "2-3".into(),
            ..rp::ResourceAllocationInfo::default()
        };
        let allocation = allocation_of(&BTreeMap::from([("cpu".to_string(), info.clone())]));
        containers.insert("side".to_string(), Some(allocation.clone()));
        let map = AllocationsMap::from([("pod-1".to_string(), containers)]);
        let response = allocations_response(&map);
        let decoded =
            rp::GetResourcesAllocationResponse::decode(response.encode_to_vec().as_slice())
                .expect("decodes");
        assert_eq!(allocations_map(&decoded), map);
        assert_eq!(allocation_map(&allocation)["cpu"], info);
    }
}
