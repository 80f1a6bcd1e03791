//! Boot-isolated CPUs (`isolcpus=`) through the agent's controller on a
//! fake cgroup tree (issue 31 item 3): a shared run's cgroup never gets
//! them, a plain exclusive run never gets them, and a run asking
//! `pinion.io/isolated-cpus: require` gets exactly them.

use pinion_agent::api::{run_pod, RunRequest};
use pinion_agent::controller::{AdmitRequest, Frontend, RUN_CONTAINER};
use pinion_agent::hints::GatheredHints;
use pinion_agent::testing::{machine, SyntheticNode};
use pinion_core::engine::CpuOwner;
use pinion_core::{CpuSet, Topology};
use pinion_host::cgroup::fake::FakeCgroups;
use pinion_host::cgroup::CgroupName;

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

/// 1 socket × 4 cores × 2 threads (core c = CPUs c, c+4), core 3 (CPUs 3
/// and 7) isolated at boot.
fn isolated_machine() -> Topology {
    let mut spec = machine(1, 4, 2).spec().clone();
    spec.isolated = set("3,7");
    Topology::new(spec).expect("topology")
}

fn request(id: &str, cpus: Option<&str>, annotations: &[(&str, &str)]) -> AdmitRequest {
    let run = RunRequest {
        cpus: cpus.map(str::to_owned),
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..RunRequest::new(id)
    };
    AdmitRequest {
        frontend: Frontend::standalone(id, Some(100)).expect("valid id"),
        pod: run_pod(&run).expect("pod"),
        container: RUN_CONTAINER.into(),
        cpu_owner: CpuOwner::Policy,
    }
}

#[test]
fn isolated_cpus_are_out_of_the_shared_pool_and_given_only_on_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = FakeCgroups::default();
    let node = SyntheticNode {
        host: host.clone(),
        ..SyntheticNode::new(isolated_machine())
    };
    let mut controller = node.start(dir.path()).expect("start");
    let hints = GatheredHints::default();

    let shared = controller
        .admit(&request("pinion-run-shared", None, &[]), &hints)
        .expect("shared run");
    assert_eq!(shared.placement.cpus, set("0-2,4-6"));
    let cgroup = |id: &str| {
        host.tree().children[&CgroupName::new(id).expect("name")]
            .cpus
            .clone()
    };
    assert_eq!(cgroup("pinion-run-shared"), set("0-2,4-6"));

    let plain = controller
        .admit(&request("pinion-run-plain", Some("4"), &[]), &hints)
        .expect("plain run");
    assert!(plain.placement.cpus.is_disjoint(&set("3,7")), "{plain:?}");

    let rt = controller
        .admit(
            &request(
                "pinion-run-rt",
                Some("2"),
                &[("pinion.io/isolated-cpus", "require")],
            ),
            &hints,
        )
        .expect("isolated run");
    assert_eq!(rt.placement.cpus, set("3,7"));
    assert_eq!(cgroup("pinion-run-rt"), set("3,7"));
    // The shared run shrank with the plain run and never grew into 3,7.
    let pool = cgroup("pinion-run-shared");
    assert!(pool.is_disjoint(&set("3,7")), "{pool}");
    assert!(pool.is_disjoint(&plain.placement.cpus), "{pool}");

    let refused = controller.admit(
        &request(
            "pinion-run-more",
            Some("1"),
            &[("pinion.io/isolated-cpus", "require")],
        ),
        &hints,
    );
    let err = refused.expect_err("no isolated cpu left");
    assert!(err.to_string().contains("1 short"), "{err}");
}
