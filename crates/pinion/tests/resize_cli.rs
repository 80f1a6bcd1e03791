//! `pinion resize ID --cpus N` against the real agent (started with `pinion
//! agent` on a real machine's sysfs tree from `../shared`, cgroups in a
//! plain directory declared as cgroup v2, `featureGates:
//! InPlacePodVerticalScalingExclusiveCPUs: true`): a run grows in place and
//! its cgroup follows, a shrink below the CPUs it was first given fails
//! with kubelet's text (issue #15).

mod common;

use std::path::{Path, PathBuf};

use pinion_api::local::RunRequest;
use pinion_api::Client;
use pinion_core::CpuSet;
use serde_json::Value;

const MACHINE: &str = "topologies/x86-2s-intel-xeon-silver-4108-ht";
const RUN: &str = "pinion-run-db";

/// The agent on a fake sysroot, with this file's commands.
struct Node(common::SysrootAgent);

impl Node {
    fn start(machine: &Path) -> Self {
        Self(common::SysrootAgent::start(
            machine,
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0,16\"\nfeatureGates:\n  InPlacePodVerticalScalingExclusiveCPUs: true\n",
        ))
    }

    fn socket(&self) -> PathBuf {
        self.0.socket()
    }

    /// `pinion resize RUN --cpus CPUS --socket <ours> ARGS`.
    fn resize(&self, cpus: &str, args: &[&str]) -> std::process::Output {
        let socket = self.socket();
        let mut all = vec!["resize", RUN, "--cpus", cpus];
        all.extend(["--socket", socket.to_str().expect("utf-8")]);
        all.extend(args);
        common::pinion(&all)
    }

    /// The run's cgroup's cpuset, as the agent wrote it.
    fn cgroup_cpus(&self) -> CpuSet {
        let path = self.0.cgroup_root().join(RUN).join("cpuset.cpus");
        let text = std::fs::read_to_string(&path).expect("cpuset.cpus");
        CpuSet::parse_list(text.trim()).expect("cpulist")
    }
}

fn cpus(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

#[test]
fn a_run_grows_in_place_and_cannot_shrink_below_its_first_cpus() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let node = Node::start(&machine);
    let client = Client::new(&node.socket());
    let first = client
        .run(&RunRequest {
            cpus: Some("2".into()),
            ..RunRequest::new(RUN)
        })
        .expect("run");
    let first = cpus(&first.cpus);
    assert_eq!(node.cgroup_cpus(), first);

    let out = node.resize("4", &["-o", "json"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let grown: Value = serde_json::from_str(&common::stdout(&out)).expect("json");
    let grown = cpus(grown["cpus"].as_str().expect("cpus"));
    assert_eq!(grown.len(), 4);
    assert!(first.is_subset(&grown), "{first} kept in {grown}");
    assert_eq!(node.cgroup_cpus(), grown, "the agent rewrote the cgroup");
    let snapshot = client.ps().expect("ps");
    assert_eq!(snapshot.assignments[RUN]["main"], grown.to_string());

    let out = node.resize("1", &[]);
    assert!(!out.status.success());
    let stderr = common::stderr(&out);
    assert!(
        stderr.contains("prohibitedCPUAllocation Error: Skip resize, Not allowed to reduce container exclusively allocated pool below promised")
            && stderr.contains("promised CPUs = 2"),
        "{stderr}"
    );
    assert_eq!(node.cgroup_cpus(), grown, "a refusal changes nothing");

    let out = node.resize("2", &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(
        common::stdout(&out).trim(),
        format!("{RUN} main: exclusive cpus {first}"),
        "no memory nodes shown: no plugin set them"
    );
    assert_eq!(node.cgroup_cpus(), first);
}
