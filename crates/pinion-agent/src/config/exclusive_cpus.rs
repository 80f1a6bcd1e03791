//! The `exclusiveCpus` section: what an exclusive container's cgroup
//! becomes (`partition: member|root|isolated`, docs/configuration.md).

use pinion_core::partition::PartitionMode;
use serde::Deserialize;

use super::{field_error, ConfigError};

/// The file form.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExclusiveCpusFileConfig {
    pub partition: Option<String>,
}

/// The validated section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExclusiveCpusConfig {
    /// `member` (default: an ordinary cpuset, as every peer), `root` or
    /// `isolated` (a cgroup v2 cpuset partition; Linux 6.7).
    pub partition: PartitionMode,
}

impl ExclusiveCpusConfig {
    pub fn resolve(file: Option<ExclusiveCpusFileConfig>) -> Result<Self, ConfigError> {
        let partition = match file.and_then(|f| f.partition) {
            None => PartitionMode::default(),
            Some(text) => text
                .parse()
                .map_err(|err| field_error("exclusiveCpus.partition", &text, &err))?,
        };
        Ok(Self { partition })
    }
}
