//! Between the checkpoint and the state: restoring a [`State`] from a decoded
//! kubelet checkpoint with kubelet's checks and messages, and the checkpoint
//! entries of a state for saving.

use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::policy::{Policy, PolicyError};
pub use crate::record::checkpoint_entries;
use crate::state::State;

/// Why a checkpoint cannot become the state of the configured policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    #[error(
        "configured policy \"{configured}\" differs from state checkpoint policy \"{stored}\""
    )]
    PolicyMismatch { configured: String, stored: String },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// kubelet's `validateState` refused the content.
    #[error(transparent)]
    Invalid(#[from] PolicyError),
}

/// kubelet's restore: the stored policy name must equal the configured one,
/// every CPU set must parse (kubelet's texts), and the policy's start checks
/// (`validateState`) must pass. An empty default set is initialised, as
/// kubelet does on a first start.
pub fn restore(checkpoint: &Checkpoint, policy: &Policy) -> Result<State, RestoreError> {
    if checkpoint.policy_name() != policy.name() {
        return Err(RestoreError::PolicyMismatch {
            configured: policy.name().to_string(),
            stored: checkpoint.policy_name().to_string(),
        });
    }
    // A v1 file (container-id keys) can only be migrated when it has no
    // entries: Pinion has no container-id map at restore time.
    let parsed = checkpoint.migrate_v1(|_| None)?.to_state()?;
    let mut state = State {
        default: parsed.default_cpu_set,
        assignments: parsed.assignments,
    };
    policy.start(&mut state)?;
    Ok(state)
}

/// The checkpoint kubelet would write for `state` under `policy`.
#[must_use]
pub fn to_checkpoint(state: &State, policy: &Policy) -> Checkpoint {
    Checkpoint::new(
        policy.name(),
        &state.default.to_string(),
        checkpoint_entries(state),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::decode;
    use crate::policy::{Reservation, StaticPolicy, StaticPolicyOptions};
    use crate::testing::cpus;
    use crate::topology::{synthetic, Shape};
    use crate::CpuSet;

    fn static_policy(reserved: &str) -> Policy {
        let topology = synthetic(Shape {
            sockets: 1,
            numa_per_socket: 1,
            cores_per_socket: 4,
            threads_per_core: 2,
            cores_per_uncore: 0,
        });
        let cpus = CpuSet::parse_list(reserved).expect("cpulist");
        let reservation = Reservation {
            count: cpus.len(),
            cpus,
        };
        let policy = StaticPolicy::new(topology, StaticPolicyOptions::default(), &reservation);
        Policy::Static(Box::new(policy.expect("valid policy")))
    }

    #[test]
    fn round_trip_through_checkpoint_bytes() {
        let policy = static_policy("0,4");
        let mut state = State {
            default: cpus("0,2-4,6-7"),
            ..State::default()
        };
        state.assign("pod-a", "app", cpus("1,5"));
        let bytes = to_checkpoint(&state, &policy)
            .to_bytes()
            .expect("v2 encodes");
        let back = decode(&bytes).expect("decodes");
        back.verify().expect("checksum verifies");
        assert_eq!(restore(&back, &policy), Ok(state));
    }

    #[test]
    fn policy_mismatch_uses_kubelets_message() {
        let bytes = br#"{"policyName":"none","defaultCpuSet":"","checksum":0}"#;
        let checkpoint = decode(bytes).expect("decodes");
        let err = restore(&checkpoint, &static_policy("0")).expect_err("mismatch");
        assert_eq!(
            err.to_string(),
            "configured policy \"static\" differs from state checkpoint policy \"none\""
        );
    }

    #[test]
    fn validate_state_failure_is_reported() {
        let bytes = br#"{"policyName":"static","defaultCpuSet":"1-7","checksum":0}"#;
        let checkpoint = decode(bytes).expect("decodes");
        let err = restore(&checkpoint, &static_policy("0")).expect_err("reserved missing");
        assert_eq!(
            err.to_string(),
            "not all reserved cpus: \"0\" are present in defaultCpuSet: \"1-7\""
        );
    }
}
