//! CPU manager policies: `none` and `static` (kubelet semantics), their
//! options, and the errors they report (kubelet's texts where kubelet has
//! them, so they can be matched by operators' tooling).

pub mod config;
pub mod cpu_ask;
pub mod defaults;
pub mod hints;
pub mod options;
pub mod pod_level;
pub mod resize;
pub mod static_policy;

use crate::alloc::AllocError;
use crate::cpuset::CpuSet;
use crate::state::State;
use crate::topology::Topology;
use crate::topomgr::TopologyAffinityError;

pub use config::{Features, PolicyConfig, UncoreCacheSource};
pub use cpu_ask::{CpuAsk, CpuAskError, IsolatedAsk, UncoreAsk};
pub use options::{FeatureGates, PolicyOptionError, StaticPolicyOptions};
pub use static_policy::{ContainerKind, ContainerRequest, Reservation, StaticPolicy};

/// Errors of policy construction, start (validateState) and allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Options(#[from] PolicyOptionError),
    #[error("[cpumanager] unable to reserve the required amount of CPUs (size of {cpus} did not equal {count})")]
    ReserveFailed { cpus: String, count: usize },
    #[error("reserved cpus {cpus} are not online cpus of this machine")]
    ReservedNotOnline { cpus: String },
    #[error(
        "strict-cpu-reservation with reserved cpus {reserved} leaves no cpu for the shared pool"
    )]
    NoSharedCpus { reserved: String },
    /// kubelet's `getNumReservedCPUs` without a `cpu` entry in the
    /// reservation (what a zero reservation in a config file becomes:
    /// [`defaults::reservation_entry`]).
    #[error("[cpumanager] unable to determine reserved CPU resources for static policy")]
    NoReservation,
    /// kubelet's `getNumReservedCPUs` with a `cpu` entry of zero (a
    /// reservation handed in directly: [`defaults::num_reserved_cpus`]).
    #[error("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")]
    ZeroReservation,
    #[error("unknown cpu manager policy {name:?} (expected \"none\" or \"static\")")]
    UnknownPolicy { name: String },
    #[error("pod {pod} has no container {container:?}")]
    UnknownContainer { pod: String, container: String },
    #[error("default cpuset cannot be empty")]
    DefaultEmpty,
    #[error("some of strictly reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")]
    StrictReservedInDefault { reserved: String, default: String },
    #[error("not all reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")]
    ReservedNotInDefault { reserved: String, default: String },
    #[error("pod: {pod}, container: {container} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\"")]
    AssignmentOverlapsDefault {
        pod: String,
        container: String,
        cpus: String,
        default: String,
    },
    /// Two pods' containers holding the same CPUs (Pinion's own check:
    /// kubelet's `validateState` lets such a state start, and hands the
    /// CPUs out twice from then on).
    #[error("{holder} cpuset: \"{cpus}\" shares cpus \"{shared}\" with {other}")]
    AssignmentsShared {
        /// `pod: <uid>, container: <name>`.
        holder: String,
        cpus: String,
        shared: String,
        /// The other holder, written the same way.
        other: String,
    },
    #[error(
        "current set of available CPUs \"{online}\" doesn't match with CPUs in state \"{state}\""
    )]
    CpusChanged { online: String, state: String },
    /// A pod-level CPU set (`PodLevelResourceManagers`) that the shared
    /// pool also holds.
    #[error("pod: {pod} pod-level cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\"")]
    PodCpusOverlapDefault {
        pod: String,
        cpus: String,
        default: String,
    },
    /// Two pods' pod-level CPU sets that share CPUs.
    #[error("pod: {pod} pod-level cpuset shares cpus \"{cpus}\" with the pod-level cpuset of pod {other}")]
    PodCpusOverlap {
        pod: String,
        other: String,
        cpus: String,
    },
    /// A container of a pod with a pod-level CPU set holding CPUs outside it.
    #[error("pod: {pod}, container: {container} cpuset: \"{cpus}\" is not inside its pod-level cpuset \"{pod_cpus}\"")]
    AssignmentOutsidePodCpus {
        pod: String,
        container: String,
        cpus: String,
        pod_cpus: String,
    },
    #[error("SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {cpus_per_core}")]
    SmtNotMultiple {
        requested: usize,
        cpus_per_core: usize,
    },
    #[error("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, requested CPUs = {requested}, CPUs per core = {cpus_per_core}")]
    SmtNotEnoughPhysical {
        available: usize,
        requested: usize,
        cpus_per_core: usize,
    },
    #[error("allocating {requested} cpus would leave the shared pool empty (strict-cpu-reservation keeps reserved cpus out of it)")]
    SharedPoolWouldBeEmpty { requested: usize },
    /// Every reserved CPU went offline (CPU hot-plug): nothing else keeps
    /// a CPU in the shared pool.
    #[error("allocating {requested} cpus would leave the shared pool empty: none of the reserved cpus {configured} is online")]
    NoReservedCpuOnline {
        requested: usize,
        configured: String,
    },
    /// kubelet's pod-level rejection (`validatePodScopeResources`): the
    /// message is kubelet's.
    #[error("{message}")]
    EmptyPodSharedPool { message: String },
    /// In-place resize of exclusive CPUs asked for while the switch
    /// (kubelet gate `InPlacePodVerticalScalingExclusiveCPUs`) is off.
    #[error("in-place resize of exclusive CPUs is disabled (feature InPlacePodVerticalScalingExclusiveCPUs is off): pod {pod} container {container:?} keeps its CPUs")]
    ResizeDisabled { pod: String, container: String },
    /// kubelet `inconsistentCPUAllocationError`: a resize would move a
    /// container between the shared pool and exclusive CPUs. Quantities in
    /// Kubernetes' canonical form; the texts (double space included) are
    /// kubelet's.
    #[error("{}", inconsistent_text(requested, allocated, *shared_to_exclusive))]
    InconsistentCpuAllocation {
        requested: String,
        allocated: String,
        shared_to_exclusive: bool,
    },
    /// kubelet `prohibitedCPUAllocationError`: a resize below the CPUs the
    /// container was first given.
    #[error("prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool below promised, (requested CPUs = {requested}, allocated CPUs = {allocated}, promised CPUs = {promised}, guaranteed CPUs = {guaranteed})")]
    ProhibitedCpuAllocation {
        requested: String,
        allocated: String,
        promised: usize,
        guaranteed: usize,
    },
    /// kubelet `getOriginalCPUSetError`: an exclusive resize of a container
    /// that holds no exclusive CPUs.
    #[error("getOriginalCPUSet Error: Skip resize, unable to get PromisedCPUSet, nothing to be done, (podUID = {pod}, containerName {container})")]
    GetOriginalCpuSet { pod: String, container: String },
    /// kubelet `ResizeAllocateCPUsError`: the resize allocation failed
    /// (`topology_error` is the allocator's text).
    #[error("ResizeAllocateCPUs Error: Skip resize, unable to resize container exclusively allocated pool, (podUID = {pod}, containerName = {container}, topologyError = {topology_error})")]
    ResizeAllocateCpus {
        pod: String,
        container: String,
        topology_error: String,
    },
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A bad `pinion.io/isolated-cpus` / `pinion.io/uncore*` annotation.
    #[error(transparent)]
    CpuAsk(#[from] CpuAskError),
    /// `pinion.io/isolated-cpus: require` with too few free boot-isolated
    /// CPUs.
    #[error("pinion.io/isolated-cpus: require: {requested} isolated cpus asked, {free} free (boot-isolated cpus: {isolated}); {shortfall} short")]
    IsolatedShortfall {
        requested: usize,
        free: usize,
        shortfall: usize,
        isolated: String,
    },
    /// Whole uncore caches could not be given.
    #[error(transparent)]
    WholeUncore(#[from] crate::alloc::whole_uncore::WholeUncoreError),
    /// Every CPU the shared pool could use is isolated at boot (or would be
    /// after this allocation): shared-pool containers would have no CPU.
    #[error("the shared pool would be empty: its cpus {pool} are all isolated at boot (isolcpus= {isolated}); reserve or free a cpu that is not isolated")]
    SharedPoolAllIsolated { pool: String, isolated: String },
    /// The Topology Manager rejected the admission.
    #[error(transparent)]
    TopologyAffinity(#[from] TopologyAffinityError),
    /// kubelet's `PodLevelTopologyAffinityError` (reason
    /// `TopologyAffinityError`): the Topology Manager rejected a pod with
    /// pod-level resources under `PodLevelResourceManagers`; `message` is
    /// [`POD_LEVEL_POD_SCOPE_REFUSAL`] or [`POD_LEVEL_CONTAINER_SCOPE_REFUSAL`].
    #[error("Pod Scope {message}")]
    PodLevelTopologyAffinity { message: &'static str },
}

/// kubelet's pod-scope refusal of a pod with pod-level resources.
pub const POD_LEVEL_POD_SCOPE_REFUSAL: &str =
    "pod with pod-level resources failed admission under pod-scope topology manager";
/// kubelet's container-scope refusal of a pod with pod-level resources.
pub const POD_LEVEL_CONTAINER_SCOPE_REFUSAL: &str =
    "pod with pod-level resources failed admission with a container-level topology manager";

impl PolicyError {
    /// The Topology Manager's refusal of `pod_level` pods (pod-level
    /// resources under `PodLevelResourceManagers`) or of others, in
    /// `pod_scope` or the container scope, with kubelet's text.
    #[must_use]
    pub fn topology_refusal(pod_level: bool, pod_scope: bool) -> Self {
        match (pod_level, pod_scope) {
            (false, _) => Self::TopologyAffinity(TopologyAffinityError),
            (true, true) => Self::PodLevelTopologyAffinity {
                message: POD_LEVEL_POD_SCOPE_REFUSAL,
            },
            (true, false) => Self::PodLevelTopologyAffinity {
                message: POD_LEVEL_CONTAINER_SCOPE_REFUSAL,
            },
        }
    }
}

impl PolicyError {
    /// kubelet's admission reason for this error: `SMTAlignmentError` for the
    /// full-pcpus-only rejections, `UnexpectedAdmissionError` otherwise.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SmtNotMultiple { .. } | Self::SmtNotEnoughPhysical { .. } => "SMTAlignmentError",
            Self::TopologyAffinity(_) | Self::PodLevelTopologyAffinity { .. } => {
                TopologyAffinityError::REASON
            }
            Self::InconsistentCpuAllocation { .. } => "inconsistentCPUAllocationError",
            Self::ProhibitedCpuAllocation { .. } => "prohibitedCPUAllocationError",
            Self::GetOriginalCpuSet { .. } => "getOriginalCPUSetError",
            Self::ResizeAllocateCpus { .. } => "ResizeAllocateCPUsError",
            _ => "UnexpectedAdmissionError",
        }
    }
}

/// kubelet's three texts of `inconsistentCPUAllocationError`.
fn inconsistent_text(requested: &str, allocated: &str, shared_to_exclusive: bool) -> String {
    if requested == allocated {
        format!("inconsistentCPUAllocation Error: Skip resize, nothing to be done, (requested CPUs = {requested} equal to allocated CPUs = {allocated})")
    } else if shared_to_exclusive {
        format!("inconsistentCPUAllocation Error: Not allowed to move a container from shared pool to exclusively allocated pool, (requested CPUs = {requested}, allocated CPUs = {allocated})")
    } else {
        format!("inconsistentCPUAllocation Error: Not allowed to move a container from  exclusively allocated pool to shared pool, not allowed (requested CPUs = {requested}, allocated CPUs = {allocated})")
    }
}

/// The configured CPU manager policy.
#[derive(Debug, Clone)]
pub enum Policy {
    /// kubelet `none`: every container in the shared pool; no exclusive CPUs.
    None,
    /// kubelet `static`.
    Static(Box<StaticPolicy>),
}

impl Policy {
    /// The policy name as stored in the checkpoint (`none` / `static`).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Static(_) => "static",
        }
    }

    /// Reserved CPUs (empty for `none`).
    #[must_use]
    pub fn reserved(&self) -> CpuSet {
        match self {
            Self::None => CpuSet::new(),
            Self::Static(policy) => policy.reserved().clone(),
        }
    }

    /// Starts the policy on `state` (validates or initialises it).
    pub fn start(&self, state: &mut State) -> Result<(), PolicyError> {
        self.start_with(state, &crate::state::PodCpus::new())
    }

    /// [`Policy::start`] with pod-level CPU sets.
    pub fn start_with(
        &self,
        state: &mut State,
        pod_cpus: &crate::state::PodCpus,
    ) -> Result<(), PolicyError> {
        match self {
            Self::None => Ok(()),
            Self::Static(policy) => policy.start_with(state, pod_cpus),
        }
    }

    /// Admits one container; `Ok(None)` = shared pool.
    pub fn allocate(
        &mut self,
        state: &mut State,
        request: &ContainerRequest<'_>,
        numa_affinity: Option<&[u32]>,
    ) -> Result<Option<CpuSet>, PolicyError> {
        match self {
            Self::None => Ok(None),
            Self::Static(policy) => policy.allocate(state, request, numa_affinity),
        }
    }

    /// Releases one container's exclusive CPUs; returns what went back to the
    /// shared pool.
    pub fn remove_container(&self, state: &mut State, pod: &str, container: &str) -> CpuSet {
        match self {
            Self::None => CpuSet::new(),
            Self::Static(policy) => policy.remove_container(state, pod, container),
        }
    }

    /// The topology (static only).
    #[must_use]
    pub fn topology(&self) -> Option<&Topology> {
        match self {
            Self::None => None,
            Self::Static(policy) => Some(policy.topology()),
        }
    }
}
