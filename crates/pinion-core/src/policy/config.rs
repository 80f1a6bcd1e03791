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

impl PolicyConfig {
    /// Builds the policy as kubelet's `NewStaticPolicy` does: parse the
    /// options, validate them against the machine, reserve CPUs.
    pub fn build(&self, topology: &Topology) -> Result<Policy, PolicyError> {
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
        let policy = StaticPolicy::new(topology.clone(), options, &Reservation { count, cpus })?;
        Ok(Policy::Static(Box::new(policy)))
    }

    /// Builds the Topology Manager as kubelet's `NewManager` does, over all
    /// NUMA nodes of `topology` (memory-only ones included).
    pub fn build_topology_manager(
        &self,
        topology: &Topology,
    ) -> Result<TopologyManager, TopologyManagerError> {
        let numa = NumaInfo::from_topology(topology)
            .map_err(|err| TopologyManagerError::NumaNodes(err.to_string()))?;
        TopologyManager::new(
            self.topology_manager_policy.as_deref().unwrap_or("none"),
            self.topology_manager_scope
                .as_deref()
                .unwrap_or("container"),
            &self.topology_manager_policy_options,
            numa,
        )
    }
}
