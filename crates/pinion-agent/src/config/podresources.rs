//! The `podResources` section: where kubelet's podresources API is served
//! and how fast clients may call it (docs/podresources.md).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{field_error, ConfigError};

/// kubelet's `DefaultQPS` for the podresources server.
pub const DEFAULT_QPS: u32 = 100;
/// kubelet's `DefaultBurstTokens`.
pub const DEFAULT_BURST: u32 = 10;
/// The socket's path under the state directory.
pub const DEFAULT_SOCKET: &str = pinion_api::paths::PODRESOURCES_SOCKET;

/// The file form.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodResourcesFileConfig {
    pub socket: Option<PathBuf>,
    pub qps: Option<u32>,
    pub burst: Option<u32>,
}

/// The validated section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResourcesConfig {
    /// The unix socket (mode 0600, its directory created 0750).
    pub socket: PathBuf,
    /// Requests per second the token bucket refills.
    pub qps: u32,
    /// The bucket's size.
    pub burst: u32,
}

impl PodResourcesConfig {
    /// The section for an agent whose state lives in `state_dir`: the
    /// socket defaults to `<stateDir>/pod-resources/pinion.sock`
    /// (`/var/lib/pinion/pod-resources/pinion.sock` for root), like the
    /// other sockets the agent derives from its state directory.
    pub fn resolve(
        file: Option<PodResourcesFileConfig>,
        flag: Option<&Path>,
        state_dir: &Path,
    ) -> Result<Self, ConfigError> {
        let file = file.unwrap_or_default();
        let socket = flag
            .map(Path::to_path_buf)
            .or(file.socket)
            .unwrap_or_else(|| state_dir.join(DEFAULT_SOCKET));
        if socket.as_os_str().is_empty() {
            return Err(field_error("podResources.socket", "", &"must not be empty"));
        }
        let positive = |field: &'static str, value: Option<u32>, default: u32| match value {
            Some(0) => Err(field_error(field, "0", &"must be at least 1")),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        Ok(Self {
            socket,
            qps: positive("podResources.qps", file.qps, DEFAULT_QPS)?,
            burst: positive("podResources.burst", file.burst, DEFAULT_BURST)?,
        })
    }
}
