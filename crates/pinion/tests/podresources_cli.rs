//! `pinion podresources` against the real agent (started with `pinion
//! agent` on a real machine's sysfs tree from `../shared`, cgroups in a
//! plain directory declared as cgroup v2): what it prints is what the gRPC
//! API answers — pods of `pinion run`s in namespace `pinion` or the one
//! given, exclusive CPUs, allocatable CPUs as `pinion ps` shows them, and
//! kubelet's error text for an unknown pod.

mod common;

use std::path::{Path, PathBuf};

use pinion_api::local::RunRequest;
use pinion_api::Client;
use pinion_core::CpuSet;
use serde_json::Value;

const MACHINE: &str = "topologies/x86-2s-intel-xeon-silver-4108-ht";

/// The agent on a fake sysroot, with this file's commands.
struct Node(common::SysrootAgent);

impl Node {
    fn start(machine: &Path) -> Self {
        Self(common::SysrootAgent::start(
            machine,
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0,16\"\n",
        ))
    }

    fn socket(&self) -> PathBuf {
        self.0.socket()
    }

    fn podresources(&self) -> PathBuf {
        self.0.podresources()
    }

    /// `pinion podresources ARGS --socket <ours>`.
    fn query(&self, args: &[&str]) -> std::process::Output {
        let socket = self.podresources();
        let mut all: Vec<&str> = vec!["podresources"];
        all.extend(args);
        all.extend(["--socket", socket.to_str().expect("utf-8")]);
        common::pinion(&all)
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.query(args);
        assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
        serde_json::from_str(&common::stdout(&out)).expect("json")
    }
}

fn cpus_of(value: &Value) -> CpuSet {
    let ids = value
        .as_array()
        .expect("cpu ids")
        .iter()
        .map(|v| u32::try_from(v.as_u64().expect("id")).expect("u32"));
    CpuSet::from_ids(ids).expect("cpus")
}

#[test]
fn list_get_and_allocatable_print_what_the_api_answers() {
    let Some(machine) = common::shared(MACHINE) else {
        return;
    };
    let node = Node::start(&machine);
    let client = Client::new(&node.socket());
    let db = client
        .run(&RunRequest {
            cpus: Some("2".into()),
            pod_name: Some("db".into()),
            namespace: Some("prod".into()),
            ..RunRequest::new("pinion-run-db")
        })
        .expect("run");
    client.run(&RunRequest::new("pinion-run-web")).expect("run");

    let pods = node.json(&["list", "-o", "json"]);
    let names: Vec<(&str, &str)> = pods
        .as_array()
        .expect("pods")
        .iter()
        .map(|p| {
            (
                p["namespace"].as_str().expect("ns"),
                p["name"].as_str().expect("name"),
            )
        })
        .collect();
    assert_eq!(names, [("pinion", "pinion-run-web"), ("prod", "db")]);
    assert_eq!(
        cpus_of(&pods[1]["containers"][0]["cpu_ids"]),
        CpuSet::parse_list(&db.cpus).expect("cpus")
    );
    assert_eq!(
        pods[0]["containers"][0]["cpu_ids"],
        Value::Array(Vec::new())
    );

    let got = node.json(&["get", "db", "--namespace", "prod", "-o", "json"]);
    assert_eq!(got, pods[1]);
    let table = node.query(&["get", "db", "-n", "prod"]);
    let text = common::stdout(&table);
    let row = text.lines().nth(1).expect("a row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cells[..4],
        ["prod", "db", "main", db.cpus.as_str()],
        "{text}"
    );

    let missing = node.query(&["get", "nope", "--namespace", "prod"]);
    assert!(!missing.status.success());
    assert!(
        common::stderr(&missing).contains("pod nope in namespace prod not found"),
        "{}",
        common::stderr(&missing)
    );

    let allocatable = node.json(&["allocatable", "-o", "json"]);
    let snapshot = client.ps().expect("ps");
    let all = CpuSet::parse_list(&snapshot.all_cpus).expect("all");
    let reserved = CpuSet::parse_list(&snapshot.reserved).expect("reserved");
    assert_eq!(cpus_of(&allocatable["cpu_ids"]), all.difference(&reserved));
}
