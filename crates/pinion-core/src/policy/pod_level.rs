//! Pod-level resources (`PodLevelResourceManagers`, KEP-5526): one CPU set
//! for the whole pod, partitioned among its containers — kubelet's
//! `AllocatePod` and `validatePodScopeResources` of the static policy
//! (newest `pkg/kubelet/cm/cpumanager/policy_static.go`, v1.36 line).
//!
//! 1. The pod's CPUs: its whole pod-level CPU request (`podGuaranteedCPUs`);
//!    0 (non-Guaranteed pod, fractional request) leaves every container in
//!    the node's shared pool.
//! 2. The pod is refused when a container needing the pod's shared CPUs
//!    would find none (`validatePodScopeResources`).
//! 3. `full-pcpus-only`'s checks run on the whole request, then the CPUs
//!    are taken as for one container (inside the Topology Manager's
//!    affinity).
//! 4. Partition, in spec order: an init container with exclusive CPUs takes
//!    them from the pod's CPUs minus the sidecars' (a sidecar keeps them);
//!    a regular init container without gets all of those; app containers
//!    with exclusive CPUs take theirs from the pod's CPUs minus the
//!    sidecars'; every other container gets what remains (the pod's shared
//!    pool).
//!
//! On any error nothing changes (newest kubelet rolls a failed partition
//! back; the v1.36 line left the pod's CPUs allocated).

use std::collections::BTreeMap;

use super::static_policy::StaticPolicy;
use super::PolicyError;
use crate::cpuset::CpuSet;
use crate::engine::AssignmentType;
use crate::pod::{guaranteed_cpus_in, pod_guaranteed_cpus_in, Pod, PodResources};
use crate::state::State;

/// One container's part of a pod's CPUs: name, CPUs, how it got them.
pub type ContainerPart = (String, CpuSet, AssignmentType);

/// What [`StaticPolicy::allocate_pod`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAllocation {
    /// The pod's CPUs (kubelet's pod-level entry).
    pub pod_cpus: CpuSet,
    /// Every container of the pod, in spec order (init containers first),
    /// with its CPUs and how it got them.
    pub containers: Vec<ContainerPart>,
    /// Containers that asked for exclusive CPUs (kubelet counts one pinning
    /// request for each).
    pub exclusive_requests: usize,
}

impl StaticPolicy {
    /// kubelet `validatePodScopeResources`: refuses a pod whose containers
    /// needing the pod's shared CPUs would find none.
    pub fn validate_pod_scope_resources(
        &self,
        pod: &Pod,
        resources: &PodResources,
    ) -> Result<(), PolicyError> {
        let total = pod_guaranteed_cpus_in(pod, Some(resources), true);
        let cpus = |c| guaranteed_cpus_in(pod, Some(resources), true, c);
        let mut shared_long_running = false;
        let mut long_running_exclusive = 0usize;
        for init in &pod.init_containers {
            let n = cpus(init);
            if init.is_restartable() {
                if n == 0 {
                    shared_long_running = true;
                } else {
                    long_running_exclusive = long_running_exclusive.saturating_add(n);
                }
                continue;
            }
            if n > 0 {
                let pool = total.saturating_sub(long_running_exclusive);
                if n > pool {
                    return Err(PolicyError::EmptyPodSharedPool {
                        message: format!("pod rejected, largest exclusive init container requests {n} cpus, but only {pool} available"),
                    });
                }
            } else if long_running_exclusive >= total {
                return Err(PolicyError::EmptyPodSharedPool {
                    message: "pod rejected, pod has shared init containers but no cpus available for them".to_owned(),
                });
            }
        }
        for app in &pod.containers {
            let n = cpus(app);
            if n == 0 {
                shared_long_running = true;
            } else {
                long_running_exclusive = long_running_exclusive.saturating_add(n);
            }
        }
        if shared_long_running && long_running_exclusive >= total {
            return Err(PolicyError::EmptyPodSharedPool {
                message: "pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers".to_owned(),
            });
        }
        Ok(())
    }

    /// kubelet `AllocatePod`: the pod's CPUs inside `numa_affinity`,
    /// partitioned among its containers (module documentation). `Ok(None)`
    /// when the pod gets no CPUs of its own. `state` is changed only on
    /// success: its shared pool loses the pod's CPUs and every container
    /// gets its assignment; the caller keeps the pod's CPUs.
    pub fn allocate_pod(
        &self,
        state: &mut State,
        pod: &Pod,
        resources: &PodResources,
        numa_affinity: Option<&[u32]>,
    ) -> Result<Option<PodAllocation>, PolicyError> {
        let total = pod_guaranteed_cpus_in(pod, Some(resources), true);
        if total == 0 {
            return Ok(None);
        }
        self.validate_pod_scope_resources(pod, resources)?;
        self.check_smt(state, total)?;
        let mut next = state.clone();
        let pod_cpus = self.allocate_cpus_for(&mut next, total, numa_affinity, &CpuSet::new())?;
        let (containers, exclusive_requests) = self.partition(pod, resources, &pod_cpus)?;
        for (name, cpus, _) in &containers {
            next.assign(&pod.uid, name, cpus.clone());
        }
        *state = next;
        Ok(Some(PodAllocation {
            pod_cpus,
            containers,
            exclusive_requests,
        }))
    }

    /// Step 4 of the module documentation.
    fn partition(
        &self,
        pod: &Pod,
        resources: &PodResources,
        pod_cpus: &CpuSet,
    ) -> Result<(Vec<ContainerPart>, usize), PolicyError> {
        let cpus = |c| guaranteed_cpus_in(pod, Some(resources), true, c);
        let mut decided: BTreeMap<&str, (CpuSet, AssignmentType)> = BTreeMap::new();
        let mut sidecars = CpuSet::new();
        let mut requests = 0usize;
        for init in &pod.init_containers {
            let n = cpus(init);
            let runnable = pod_cpus.difference(&sidecars);
            if n > 0 {
                requests += 1;
                let taken = self.take_from(&runnable, n)?;
                if init.is_restartable() {
                    sidecars.union_with(&taken);
                }
                decided.insert(&init.name, (taken, AssignmentType::ExclusiveFromPod));
            } else if !init.is_restartable() {
                decided.insert(&init.name, (runnable, AssignmentType::SharedFromPod));
            }
        }
        let mut shared = pod_cpus.difference(&sidecars);
        for app in &pod.containers {
            let n = cpus(app);
            if n > 0 {
                requests += 1;
                let taken = self.take_from(&shared, n)?;
                shared.difference_with(&taken);
                decided.insert(&app.name, (taken, AssignmentType::ExclusiveFromPod));
            }
        }
        let mut containers = Vec::new();
        for c in pod.all_containers() {
            let (cpus, kind) = decided
                .remove(c.name.as_str())
                .unwrap_or_else(|| (shared.clone(), AssignmentType::SharedFromPod));
            if cpus.is_empty() {
                // Ruled out by the validation; never assign an empty set.
                return Err(PolicyError::EmptyPodSharedPool {
                    message: format!(
                        "pod rejected, container {:?} would have no cpus in the pod's cpu set {pod_cpus}",
                        c.name
                    ),
                });
            }
            containers.push((c.name.clone(), cpus, kind));
        }
        Ok((containers, requests))
    }

    /// A container of a pod that already holds its CPU set but was not
    /// part of the pod's partition: it arrived after the pod's first
    /// container (the NRI front-end knows only the containers created so
    /// far; kubelet partitions the whole spec at once). Pinion's
    /// continuation of the partition, equal to kubelet's when containers
    /// arrive in spec order: a container with exclusive CPUs takes them
    /// from the pod's shared CPUs (the containers on those keep the rest),
    /// any other gets the pod's shared CPUs. `EmptyPodSharedPool` when
    /// nothing would be left for it or for them; `state` is changed only on
    /// success. Returns the container's CPUs.
    pub fn admit_late_container(
        &self,
        state: &mut State,
        pod: &Pod,
        resources: &PodResources,
        pod_cpus: &CpuSet,
        name: &str,
    ) -> Result<CpuSet, PolicyError> {
        let cpus = |c| guaranteed_cpus_in(pod, Some(resources), true, c);
        let held = state.assignments.get(&pod.uid);
        let mut exclusive = CpuSet::new();
        let mut on_shared = Vec::new();
        let regular_init = |c: &str| {
            pod.init_containers
                .iter()
                .any(|i| i.name == c && !i.is_restartable())
        };
        for c in pod.all_containers().filter(|c| c.name != name) {
            let Some(assigned) = held.and_then(|h| h.get(&c.name)) else {
                continue;
            };
            if cpus(c) > 0 || holds_its_request(c, assigned) {
                exclusive.union_with(assigned);
            } else if !regular_init(&c.name) {
                on_shared.push(c.name.clone());
            }
        }
        let shared = pod_cpus.difference(&exclusive);
        let empty = |who: &str| PolicyError::EmptyPodSharedPool {
            message: format!(
                "pod rejected, container {who:?} would have no cpus in the pod's cpu set {pod_cpus}"
            ),
        };
        let n = pod.container(name).map_or(0, cpus);
        let mut next = state.clone();
        let mine = if n == 0 {
            if shared.is_empty() {
                return Err(empty(name));
            }
            shared
        } else {
            let taken = self.take_from(&shared, n)?;
            let rest = shared.difference(&taken);
            if let Some(first) = on_shared.first() {
                if rest.is_empty() {
                    return Err(empty(first));
                }
            }
            for other in &on_shared {
                next.assign(&pod.uid, other, rest.clone());
            }
            taken
        };
        next.assign(&pod.uid, name, mine.clone());
        *state = next;
        Ok(mine)
    }
}

/// Whether container `c` holds exactly its whole-CPU request without a CPU
/// limit: an exclusive part whose limit the front-end cannot see (through
/// NRI, a container whose CFS quota Pinion removed for its exclusive CPUs
/// reads as having no limit after a restart).
fn holds_its_request(c: &crate::pod::Container, assigned: &CpuSet) -> bool {
    c.cpu_limit.is_none()
        && c.cpu_request.as_ref().is_some_and(|q| {
            q.is_integral() && usize::try_from(q.value()).ok() == Some(assigned.len())
        })
}
