//! The case formats of the conformance corpus `topomgr/`, shared by the
//! tests and by `pinion hints`: kind `merge` (NUMA nodes, distances, policy,
//! options, the providers' hints) and kind `cpu_hints` (topology, static
//! policy options, available / reusable CPUs, request, scope, assignments).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::bitmask::BitMaskError;
use super::cpu_hints::{container_cpu_hints, pod_cpu_hints, ContainerCpus, HintInputs};
use super::hint::{ProviderHints, TopologyHint};
use super::numa_info::{Distances, NumaInfo};
use super::policy::{Admission, TopologyManager, TopologyManagerError};
use crate::cpuset::CpuSet;
use crate::policy::options::{FeatureGates, PolicyOptionError, StaticPolicyOptions};
use crate::topology::Topology;

/// One merge question.
#[derive(Debug, Clone, Deserialize)]
pub struct MergeCase {
    #[serde(default)]
    pub name: String,
    pub numa_nodes: Vec<u32>,
    #[serde(default)]
    pub distances: Option<Distances>,
    pub policy: String,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    #[serde(default)]
    pub providers: Vec<ProviderHints>,
}

/// Errors from running a case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeCaseError {
    #[error("invalid numa nodes: {0}")]
    Numa(#[from] BitMaskError),
    #[error(transparent)]
    Manager(#[from] TopologyManagerError),
}

impl MergeCase {
    /// Builds the manager (scope `container` unless given) and merges.
    pub fn run(&self) -> Result<Admission, MergeCaseError> {
        let numa = NumaInfo::new(&self.numa_nodes, self.distances.as_ref())?;
        let scope = self.scope.as_deref().unwrap_or("container");
        let manager = TopologyManager::new(&self.policy, scope, &self.options, numa)?;
        Ok(manager.merge(&self.providers))
    }
}

/// One CPU-manager hint question.
#[derive(Debug, Clone, Deserialize)]
pub struct CpuHintsCase {
    #[serde(default)]
    pub name: String,
    pub topology: Topology,
    /// Static policy options (parsed with both feature gates on).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// The static policy's available CPUs (default set − reserved).
    pub available: CpuSet,
    #[serde(default)]
    pub reusable: CpuSet,
    /// Exclusive CPUs requested (the pod total in pod scope).
    pub request: usize,
    /// `container` (default) or `pod`.
    #[serde(default)]
    pub scope: Option<String>,
    /// Container scope: the container's current assignment.
    #[serde(default)]
    pub assigned: Option<CpuSet>,
    /// Pod scope: the pod's containers.
    #[serde(default)]
    pub containers: Vec<CaseContainer>,
}

/// A container of a pod-scope `cpu_hints` case.
#[derive(Debug, Clone, Deserialize)]
pub struct CaseContainer {
    #[serde(default)]
    pub name: String,
    pub request: usize,
    #[serde(default)]
    pub assigned: Option<CpuSet>,
}

/// Errors from running a `cpu_hints` case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuHintsCaseError {
    #[error(transparent)]
    Options(#[from] PolicyOptionError),
    #[error("unknown scope {0:?} (expected \"container\" or \"pod\")")]
    Scope(String),
}

impl CpuHintsCase {
    /// The `cpu` hints: `None` = "don't care" (request 0).
    pub fn run(&self) -> Result<Option<Vec<TopologyHint>>, CpuHintsCaseError> {
        let options = StaticPolicyOptions::parse(&self.options, FeatureGates::all())?;
        let inputs = HintInputs {
            topology: &self.topology,
            available: &self.available,
            reusable: &self.reusable,
            align_by_socket: options.align_by_socket,
        };
        match self.scope.as_deref().unwrap_or("container") {
            "container" => Ok(container_cpu_hints(
                &inputs,
                self.request,
                self.assigned.as_ref(),
            )),
            "pod" => {
                let containers: Vec<ContainerCpus> = self
                    .containers
                    .iter()
                    .map(|c| ContainerCpus {
                        request: c.request,
                        assigned: c.assigned.clone(),
                    })
                    .collect();
                Ok(pod_cpu_hints(&inputs, self.request, &containers))
            }
            other => Err(CpuHintsCaseError::Scope(other.to_owned())),
        }
    }
}
