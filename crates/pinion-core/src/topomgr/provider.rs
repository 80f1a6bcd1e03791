//! Hint providers: the one interface through which the Topology Manager
//! collects NUMA hints (kubelet's `HintProvider`, hint half only — the
//! allocation half stays with each resource manager).
//!
//! * the CPU manager ([`crate::policy::hints::CpuManagerHints`]);
//! * [`StaticHints`]: fixed hints per container or pod, as given by a
//!   scenario (`pinion simulate`'s `hints` key) for resources Pinion does not
//!   manage (devices, memory, QoS resource plugins…).

use std::collections::BTreeMap;

use super::hint::{ProviderHints, TopologyHint};
use crate::pod::Pod;

/// A source of NUMA hints. `None` or an empty map = "don't care"; per
/// resource, `None` = "don't care" and an empty list = "cannot satisfy".
pub trait HintProvider {
    /// kubelet `GetTopologyHints(pod, container)`: container scope.
    fn container_hints(&self, pod: &Pod, container: &str) -> ProviderHints;
    /// kubelet `GetPodTopologyHints(pod)`: pod scope.
    fn pod_hints(&self, pod: &Pod) -> ProviderHints;
}

/// Resource name → hints (`None` = "don't care" for that resource).
pub type ResourceHints = BTreeMap<String, Option<Vec<TopologyHint>>>;

/// Fixed hints keyed by `"<pod>/<container>"` (container scope) or `"<pod>"`
/// (pod scope). In pod scope a pod without a `"<pod>"` entry uses the entry
/// of its only container that has one (nothing → "don't care"); when several
/// of its containers have entries, [`StaticHints::pod_entry`] reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticHints {
    entries: BTreeMap<String, ResourceHints>,
}

/// A pod-scope question [`StaticHints`] cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "pod {pod}: containers {containers:?} all have hints; give a \"{pod}\" entry for the pod scope"
)]
pub struct AmbiguousPodHints {
    pub pod: String,
    pub containers: Vec<String>,
}

impl StaticHints {
    /// Hints from `key → resource → hints`.
    #[must_use]
    pub fn new(entries: BTreeMap<String, ResourceHints>) -> Self {
        Self { entries }
    }

    /// True when no entry exists.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry used for `pod` in pod scope (see the type's rules).
    pub fn pod_entry(&self, pod: &Pod) -> Result<Option<&ResourceHints>, AmbiguousPodHints> {
        if let Some(entry) = self.entries.get(&pod.uid) {
            return Ok(Some(entry));
        }
        let with_entry: Vec<(&str, &ResourceHints)> = pod
            .all_containers()
            .filter_map(|c| {
                let key = format!("{}/{}", pod.uid, c.name);
                self.entries.get(&key).map(|e| (c.name.as_str(), e))
            })
            .collect();
        match with_entry.as_slice() {
            [] => Ok(None),
            [(_, entry)] => Ok(Some(*entry)),
            several => Err(AmbiguousPodHints {
                pod: pod.uid.clone(),
                containers: several.iter().map(|(n, _)| (*n).to_owned()).collect(),
            }),
        }
    }
}

impl HintProvider for StaticHints {
    fn container_hints(&self, pod: &Pod, container: &str) -> ProviderHints {
        self.entries
            .get(&format!("{}/{container}", pod.uid))
            .cloned()
    }

    /// An ambiguous pod (see [`StaticHints::pod_entry`]) gets "don't care";
    /// front-ends check [`StaticHints::pod_entry`] first.
    fn pod_hints(&self, pod: &Pod) -> ProviderHints {
        self.pod_entry(pod).ok().flatten().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Container;
    use crate::topomgr::NumaMask;

    fn pod(names: &[&str]) -> Pod {
        Pod {
            uid: "p".into(),
            containers: names
                .iter()
                .map(|n| Container {
                    name: (*n).into(),
                    ..Container::default()
                })
                .collect(),
            ..Pod::default()
        }
    }

    fn entry(node: u32) -> ResourceHints {
        let hint = TopologyHint::new(NumaMask::single(node).unwrap(), true);
        BTreeMap::from([("gpu".to_owned(), Some(vec![hint]))])
    }

    #[test]
    fn container_and_pod_entries() {
        let hints = StaticHints::new(BTreeMap::from([("p/a".to_owned(), entry(1))]));
        let two = pod(&["a", "b"]);
        assert_eq!(hints.container_hints(&two, "a"), Some(entry(1)));
        assert_eq!(hints.container_hints(&two, "b"), None);
        // Only one container has hints: the pod uses them.
        assert_eq!(hints.pod_hints(&two), Some(entry(1)));
        let both = StaticHints::new(BTreeMap::from([
            ("p/a".to_owned(), entry(1)),
            ("p/b".to_owned(), entry(2)),
        ]));
        let err = both.pod_entry(&two).unwrap_err();
        assert_eq!(err.containers, ["a", "b"]);
        assert_eq!(both.pod_hints(&two), None);
        let explicit = StaticHints::new(BTreeMap::from([
            ("p".to_owned(), entry(3)),
            ("p/a".to_owned(), entry(1)),
            ("p/b".to_owned(), entry(2)),
        ]));
        assert_eq!(explicit.pod_hints(&two), Some(entry(3)));
    }
}
