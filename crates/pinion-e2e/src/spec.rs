//! What kubelet sends over CRI for a pod and a container: the cgroup parent
//! of the QoS class (cgroupfs driver), CPU shares and CFS quota from the
//! CPU request and limit, the memory limit and the OOM score adjustment.
//!
//! The arithmetic is kubelet's (`pkg/kubelet/cm/helpers_linux.go`,
//! `pkg/kubelet/qos/policy.go`): shares = milli × 1024 / 1000 (at least 2),
//! quota = milli × period / 1000 (at least 1000 µs) with a 100 ms period,
//! OOM score −997 for Guaranteed, 1000 for BestEffort and, for Burstable,
//! 1000 − 1000 × memory request / capacity clamped to 2..=999 (this client
//! sends no memory request, so 999).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use pinion_core::{Quantity, QuantityError};

use crate::proto;

/// kubelet's CFS period (µs).
pub const CFS_PERIOD_US: i64 = 100_000;
/// kubelet's smallest CPU shares value.
const MIN_SHARES: i64 = 2;
/// kubelet's smallest CFS quota (µs).
const MIN_QUOTA_US: i64 = 1_000;
/// OOM score adjustment of Guaranteed containers.
const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// OOM score adjustment of BestEffort containers.
const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// OOM score adjustment of a Burstable container without memory request.
const BURSTABLE_OOM_SCORE_ADJ: i64 = 999;

/// Errors in the pod or container description; each names the bad value.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("unknown qos class {0:?} (expected guaranteed, burstable or besteffort)")]
    UnknownQos(String),
    #[error("invalid {what}: {source}")]
    Quantity {
        what: &'static str,
        source: QuantityError,
    },
    #[error("{what} {value} is too large")]
    TooLarge { what: &'static str, value: String },
    #[error("invalid annotation {0:?} (expected KEY=VALUE with a non-empty KEY)")]
    Annotation(String),
    #[error("a guaranteed container needs a cpu request and a memory limit")]
    IncompleteGuaranteed,
    #[error("a besteffort container has no cpu or memory resources (got {0})")]
    BestEffortWithResources(&'static str),
}

/// A pod's QoS class, which decides its cgroup parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl FromStr for Qos {
    type Err = SpecError;
    fn from_str(text: &str) -> Result<Self, SpecError> {
        match text.to_ascii_lowercase().as_str() {
            "guaranteed" => Ok(Self::Guaranteed),
            "burstable" => Ok(Self::Burstable),
            "besteffort" => Ok(Self::BestEffort),
            _ => Err(SpecError::UnknownQos(text.to_string())),
        }
    }
}

impl fmt::Display for Qos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Guaranteed => "guaranteed",
            Self::Burstable => "burstable",
            Self::BestEffort => "besteffort",
        })
    }
}

/// A pod as kubelet describes it to the runtime.
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub qos: Qos,
    pub annotations: Vec<(String, String)>,
}

impl PodSpec {
    /// kubelet's cgroup parent for the pod with the cgroupfs driver.
    pub fn cgroup_parent(&self) -> String {
        match self.qos {
            Qos::Guaranteed => format!("/kubepods/pod{}", self.uid),
            Qos::Burstable => format!("/kubepods/burstable/pod{}", self.uid),
            Qos::BestEffort => format!("/kubepods/besteffort/pod{}", self.uid),
        }
    }

    /// The sandbox configuration: host network (no CNI needed), the pod's
    /// cgroup parent, kubelet's identifying labels.
    pub fn sandbox_config(&self) -> proto::PodSandboxConfig {
        let labels = HashMap::from([
            ("io.kubernetes.pod.name".to_string(), self.name.clone()),
            (
                "io.kubernetes.pod.namespace".to_string(),
                self.namespace.clone(),
            ),
            ("io.kubernetes.pod.uid".to_string(), self.uid.clone()),
        ]);
        proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: 0,
            }),
            // kubelet sets no hostname for host-network pods (runc refuses
            // one without a private UTS namespace).
            hostname: String::new(),
            log_directory: String::new(),
            labels,
            annotations: self.annotations.iter().cloned().collect(),
            linux: Some(proto::LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent(),
                security_context: Some(proto::LinuxSandboxSecurityContext {
                    namespace_options: Some(host_network()),
                }),
            }),
        }
    }
}

fn host_network() -> proto::NamespaceOption {
    proto::NamespaceOption {
        network: proto::NamespaceMode::Node.into(),
        pid: proto::NamespaceMode::Container.into(),
        ipc: proto::NamespaceMode::Pod.into(),
    }
}

/// A container's resources as in a pod spec.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    pub cpu_request: Option<Quantity>,
    pub cpu_limit: Option<Quantity>,
    pub memory_limit: Option<Quantity>,
}

impl Resources {
    /// Parses the optional quantities, naming the one that is wrong.
    pub fn parse(
        cpu_request: Option<&str>,
        cpu_limit: Option<&str>,
        memory_limit: Option<&str>,
    ) -> Result<Self, SpecError> {
        let parse = |what, text: Option<&str>| {
            text.map(|t| Quantity::parse(t).map_err(|source| SpecError::Quantity { what, source }))
                .transpose()
        };
        Ok(Self {
            cpu_request: parse("cpu request", cpu_request)?,
            cpu_limit: parse("cpu limit", cpu_limit)?,
            memory_limit: parse("memory limit", memory_limit)?,
        })
    }

    /// The CRI resources kubelet sends for these resources in a pod of `qos`.
    /// A Guaranteed container's limit defaults to its request, as the API
    /// server's defaulting does.
    pub fn to_linux(&self, qos: Qos) -> Result<proto::LinuxContainerResources, SpecError> {
        let (request, limit) = match qos {
            Qos::Guaranteed => {
                let (Some(request), Some(_)) = (&self.cpu_request, &self.memory_limit) else {
                    return Err(SpecError::IncompleteGuaranteed);
                };
                let limit = self.cpu_limit.as_ref().unwrap_or(request);
                (
                    Some(milli("cpu request", request)?),
                    Some(milli("cpu limit", limit)?),
                )
            }
            Qos::Burstable => (
                self.cpu_request
                    .as_ref()
                    .map(|q| milli("cpu request", q))
                    .transpose()?,
                self.cpu_limit
                    .as_ref()
                    .map(|q| milli("cpu limit", q))
                    .transpose()?,
            ),
            Qos::BestEffort => {
                if self.cpu_request.is_some() || self.cpu_limit.is_some() {
                    return Err(SpecError::BestEffortWithResources("cpu"));
                }
                if self.memory_limit.is_some() {
                    return Err(SpecError::BestEffortWithResources("memory"));
                }
                (None, None)
            }
        };
        let memory = self
            .memory_limit
            .as_ref()
            .map(|q| {
                i64::try_from(q.value()).map_err(|_| SpecError::TooLarge {
                    what: "memory limit",
                    value: q.to_string(),
                })
            })
            .transpose()?
            .unwrap_or(0);
        Ok(proto::LinuxContainerResources {
            cpu_period: CFS_PERIOD_US,
            cpu_quota: limit.map_or(0, quota_from_milli),
            cpu_shares: shares_from_milli(request.unwrap_or(0)),
            memory_limit_in_bytes: memory,
            oom_score_adj: match qos {
                Qos::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
                Qos::Burstable => BURSTABLE_OOM_SCORE_ADJ,
                Qos::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
            },
            cpuset_cpus: String::new(),
            cpuset_mems: String::new(),
        })
    }
}

fn milli(what: &'static str, quantity: &Quantity) -> Result<i64, SpecError> {
    i64::try_from(quantity.milli_value()).map_err(|_| SpecError::TooLarge {
        what,
        value: quantity.to_string(),
    })
}

/// kubelet's `MilliCPUToShares`.
pub fn shares_from_milli(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(1024) / 1000).max(MIN_SHARES)
}

/// kubelet's `MilliCPUToQuota` with the default period; 0 = no limit.
pub fn quota_from_milli(milli: i64) -> i64 {
    if milli == 0 {
        return 0;
    }
    (milli.saturating_mul(CFS_PERIOD_US) / 1000).max(MIN_QUOTA_US)
}

/// A container as kubelet describes it to the runtime.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub resources: Resources,
    pub annotations: Vec<(String, String)>,
}

impl ContainerSpec {
    /// The container configuration for a container of `pod`.
    pub fn config(&self, pod: &PodSpec) -> Result<proto::ContainerConfig, SpecError> {
        let labels = HashMap::from([
            (
                "io.kubernetes.container.name".to_string(),
                self.name.clone(),
            ),
            ("io.kubernetes.pod.name".to_string(), pod.name.clone()),
            (
                "io.kubernetes.pod.namespace".to_string(),
                pod.namespace.clone(),
            ),
            ("io.kubernetes.pod.uid".to_string(), pod.uid.clone()),
        ]);
        Ok(proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: self.name.clone(),
                attempt: 0,
            }),
            image: Some(proto::ImageSpec {
                image: self.image.clone(),
            }),
            command: self.command.clone(),
            args: Vec::new(),
            envs: Vec::new(),
            labels,
            annotations: self.annotations.iter().cloned().collect(),
            log_path: String::new(),
            linux: Some(proto::LinuxContainerConfig {
                resources: Some(self.resources.to_linux(pod.qos)?),
                security_context: Some(proto::LinuxContainerSecurityContext {
                    namespace_options: Some(host_network()),
                }),
            }),
        })
    }
}

/// Parses `KEY=VALUE`.
pub fn parse_annotation(text: &str) -> Result<(String, String), SpecError> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(SpecError::Annotation(text.to_string())),
    }
}

#[cfg(test)]
mod tests;
