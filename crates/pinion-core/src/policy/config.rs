//! What it takes to build a [`Policy`]: its name, options with the feature
//! gates that allow them, the Topology Manager policy (for option
//! validation) and the reservation — the inputs of kubelet's
//! `NewStaticPolicy`, with the corpus' key names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::policy::{
    FeatureGates, Policy, PolicyError, Reservation, StaticPolicy, StaticPolicyOptions,
};
use crate::topology::Topology;
use crate::topomgr::{NumaInfo, TopologyManager, TopologyManagerError};

/// Policy configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyConfig {
    /// `static` (default) or `none`.
    #[serde(default)]
    pub policy: Option<String>,
    /// Option name → value (Go `ParseBool` literals).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// Absent = alpha and beta options enabled (the corpus convention; the
    /// agent passes kubelet's defaults explicitly).
    #[serde(default)]
    pub feature_gates: Option<FeatureGates>,
    /// Topology Manager policy; absent = `none`.
    #[serde(default, alias = "topologyManagerPolicy")]
    pub topology_manager_policy: Option<String>,
    /// Topology Manager scope (`container` or `pod`); absent = `container`.
    #[serde(default, alias = "topologyManagerScope")]
    pub topology_manager_scope: Option<String>,
    /// `topologyManagerPolicyOptions`: option name → value.
    #[serde(default, alias = "topologyManagerPolicyOptions")]
    pub topology_manager_policy_options: BTreeMap<String, String>,
    /// Number of reserved CPUs (absent = the size of `reserved`).
    #[serde(default)]
    pub num_reserved: Option<usize>,
    /// Explicit reserved CPUs (`reservedSystemCPUs`), used verbatim when non-empty.
    #[serde(default)]
    pub reserved: Option<CpuSet>,
}

/// The kubelet feature gates Pinion implements behind a switch (off by
/// default, like the gates) and Pinion's own options. Kept apart from
/// [`PolicyConfig`] so front-ends opt in explicitly; the simulator reads it
/// from a scenario's `features` key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Features {
    /// kubelet gate `InPlacePodVerticalScalingExclusiveCPUs` (KEP-5554):
    /// in-place resize of containers holding exclusive CPUs
    /// ([`crate::engine::Engine::resize_container`]).
    #[serde(default, alias = "InPlacePodVerticalScalingExclusiveCPUs")]
    pub in_place_resize_exclusive_cpus: bool,
    /// kubelet gate `PodLevelResourceManagers` (KEP-5526, with
    /// `PodLevelResources` on): pods with pod-level resources get one CPU
    /// set for the whole pod, partitioned among their containers.
    #[serde(default, alias = "PodLevelResourceManagers")]
    pub pod_level_resource_managers: bool,
    /// Pinion's own: which cache groups `prefer-align-cpus-by-uncorecache`
    /// aligns to.
    #[serde(default)]
    pub uncore_cache_source: UncoreCacheSource,
}

/// Which cache groups are the allocator's uncore caches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UncoreCacheSource {
    /// kubelet's (cAdvisor's): the L3, else the socket.
    #[default]
    Kubelet,
    /// The last-level cache as discovered: the L3, else the L2 (or L1), so
    /// machines without an L3 align to their shared L2 groups.
    LastLevelCache,
}

impl PolicyConfig {
    /// Builds the policy as kubelet's `NewStaticPolicy` does: parse the
    /// options, validate them against the machine, reserve CPUs. Every
    /// [`Features`] switch is off.
    pub fn build(&self, topology: &Topology) -> Result<Policy, PolicyError> {
        self.build_with(topology, Features::default())
    }

    /// [`PolicyConfig::build`] with feature switches.
    pub fn build_with(
        &self,
        topology: &Topology,
        features: Features,
    ) -> Result<Policy, PolicyError> {
        match self.policy.as_deref().unwrap_or("static") {
            "none" => return Ok(Policy::None),
            "static" => {}
            other => {
                return Err(PolicyError::UnknownPolicy {
                    name: other.to_string(),
                })
            }
        }
        let gates = self.feature_gates.unwrap_or(FeatureGates {
            alpha: true,
            beta: true,
        });
        let options = StaticPolicyOptions::parse(&self.options, gates)?;
        let tm_policy = self.topology_manager_policy.as_deref().unwrap_or("none");
        options.validate_machine(topology, tm_policy)?;
        let cpus = self.reserved.clone().unwrap_or_default();
        let count = self.num_reserved.unwrap_or(cpus.len());
        let topology = match features.uncore_cache_source {
            UncoreCacheSource::Kubelet => topology.clone(),
            UncoreCacheSource::LastLevelCache => topology.with_llc_as_uncore(),
        };
        let policy = StaticPolicy::new(topology, options, &Reservation { count, cpus })?
            .with_features(features);
        Ok(Policy::Static(Box::new(policy)))
    }

    /// Builds the Topology Manager as kubelet's `NewManager` does, over all
    /// NUMA nodes of `topology` (memory-only ones included). Policy `none`
    /// merges no hints and needs no node mask, so node ids past the mask's
    /// 64 bits (POWER's GPU memory nodes 252-255) do not stop it, as they do
    /// not stop kubelet.
    pub fn build_topology_manager(
        &self,
        topology: &Topology,
    ) -> Result<TopologyManager, TopologyManagerError> {
        let policy = self.topology_manager_policy.as_deref().unwrap_or("none");
        let numa = if policy == "none" {
            NumaInfo::empty()
        } else {
            NumaInfo::from_topology(topology)
                .map_err(|err| TopologyManagerError::NumaNodes(err.to_string()))?
        };
        TopologyManager::new(
            policy,
            self.topology_manager_scope
                .as_deref()
                .unwrap_or("container"),
            &self.topology_manager_policy_options,
            numa,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::NumaNode;

    /// [`crate::testing::machine_8c2t`] with its one NUMA node numbered `id`.
    fn one_node_numbered(id: u32) -> Topology {
        let mut spec = crate::testing::machine_8c2t().spec().clone();
        for cpu in &mut spec.cpus {
            cpu.numa = id;
        }
        spec.numa_nodes = vec![NumaNode {
            id,
            distances: Vec::new(),
            memory_bytes: None,
        }];
        Topology::new(spec).expect("topology")
    }

    fn manager(policy: &str, topology: &Topology) -> Result<TopologyManager, TopologyManagerError> {
        PolicyConfig {
            topology_manager_policy: Some(policy.into()),
            ..PolicyConfig::default()
        }
        .build_topology_manager(topology)
    }

    /// Found from outside (thirty-third session): a NUMA node id of 64 or
    /// more (POWER9's GPU memory nodes are 252-255) stopped the agent and
    /// `pinion simulate` even under the Topology Manager's `none` policy,
    /// which needs no node mask; kubelet starts there.
    #[test]
    fn regression_a_numa_node_id_past_63_does_not_stop_policy_none() {
        let topology = one_node_numbered(252);
        assert!(manager("none", &topology).is_ok());
        let err = manager("restricted", &topology).expect_err("needs the mask");
        assert!(err.to_string().contains("252"), "{err}");
        assert!(manager("restricted", &one_node_numbered(63)).is_ok());
    }
}
