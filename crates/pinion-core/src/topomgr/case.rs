//! The `merge` case format of the conformance corpus
//! (`topomgr/*Merge*.json`, `TestAdmit.json`), shared by the tests and by
//! `pinion hints`: NUMA nodes, distances, policy, options and the providers'
//! hints.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::bitmask::BitMaskError;
use super::hint::ProviderHints;
use super::numa_info::{Distances, NumaInfo};
use super::policy::{Admission, TopologyManager, TopologyManagerError};

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
