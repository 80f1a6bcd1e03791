//! `pinion simulate` with QoS Resource Manager scenarios: the seed's three
//! worked examples (`examples/scenarios/qrm-*.yaml`) give the seed's numbers
//! (the values `pinion-plugins/tests/seed_examples.rs` asserts in-process)
//! through the binary, as JSON and as golden text; the closed loop moves
//! CPUs between a shared pool and reclaim without touching dedicated or
//! reserved CPUs; bad input names the value and the step.
//!
//! Regenerate the golden files after an intended rendering change with
//! `PINION_BLESS=1 cargo test -p pinion --test simulate_qrm_cli`.

mod common;

use std::fs;
use std::path::Path;
use std::process::Output;

use common::pinion_with_stdin as pinion;
use pinion_core::CpuSet;
use serde_json::Value;

fn example(name: &str) -> String {
    common::workspace()
        .join("examples/scenarios")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one json document")
}

fn run_json(path: &str) -> Value {
    json(&pinion(&["simulate", "-o", "json", path], ""))
}

/// Compares `text` with `tests/golden/<name>.txt` (or rewrites it when
/// `PINION_BLESS` is set).
fn golden(name: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{name}.txt"));
    if std::env::var_os("PINION_BLESS").is_some() {
        fs::write(&path, text).expect("write golden");
        return;
    }
    let want = fs::read_to_string(&path).expect("golden file (PINION_BLESS=1 writes it)");
    assert!(
        want == text,
        "output differs from {}:\n{text}",
        path.display()
    );
}

fn text_of(path: &str) -> String {
    let out = pinion(&["simulate", path], "");
    assert!(out.status.success(), "{}", common::stderr(&out));
    common::stdout(&out)
}

/// The placement of `pod/container` after step `index` (1-based).
fn placement<'a>(out: &'a Value, index: usize, pod: &str, container: &str) -> &'a Value {
    let step = &out["steps"][index - 1];
    step["placements"]
        .as_array()
        .expect("placements")
        .iter()
        .find(|p| p["pod"] == pod && p["container"] == container)
        .unwrap_or_else(|| panic!("no {pod}/{container} after step {index}: {step}"))
}

fn cpus(value: &Value) -> CpuSet {
    CpuSet::parse_list(value.as_str().expect("cpulist")).expect("cpulist")
}

/// Example 1: the online pool 0-37,40-77 and the offline pool 38-39,78-79,
/// then, after the advisor's adjustment, 0-13,40-53 and 14-39,54-79 for
/// every container.
#[test]
fn seed_example_one_online_and_offline_pools() {
    let path = example("qrm-online-offline.yaml");
    let out = run_json(&path);
    assert_eq!(out["plugins"], serde_json::json!(["cpu"]));
    let online = |step: usize, pod: &str| placement(&out, step, pod, "container0").clone();
    assert_eq!(online(2, "pod1")["cpus"], "0-37,40-77");
    assert_eq!(online(2, "pod1")["pool"], "share");
    assert_eq!(online(3, "pod2")["cpus"], "38-39,78-79");
    assert_eq!(online(3, "pod2")["pool"], "reclaim");
    assert_eq!(online(4, "pod3")["cpus"], "0-37,40-77");
    assert_eq!(out["steps"][3]["pools"]["shared"]["share"], "0-37,40-77");
    assert_eq!(out["steps"][3]["pools"]["reclaim"], "38-39,78-79");
    // The advisor's step: every member follows, and the step says so.
    for pod in ["pod1", "pod3"] {
        assert_eq!(online(5, pod)["cpus"], "0-13,40-53");
    }
    assert_eq!(online(5, "pod2")["cpus"], "14-39,54-79");
    let step5 = &out["steps"][4];
    assert_eq!(step5["pool_changes"][0]["from"], 76);
    assert_eq!(step5["pool_changes"][0]["to"], 28);
    assert_eq!(step5["pool_changes"][0]["reason"], "pinned");
    assert_eq!(step5["cpu_changes"].as_array().map(Vec::len), Some(3));
    // Beyond the seed: auto clamps to requests + maxHeadroom (16), idling
    // shrinks, pressure grows again — one CPU per change.
    assert_eq!(cpus(&online(6, "pod1")["cpus"]).len(), 16);
    assert_eq!(cpus(&online(7, "pod1")["cpus"]).len(), 13);
    assert_eq!(cpus(&online(8, "pod1")["cpus"]).len(), 14);
    golden("simulate-qrm-online-offline", &text_of(&path));
}

/// Example 2: storage (numa_exclusive) 2-21 + mems 0, the reranker 42-51 +
/// mems 1 although node 0 has room; a pod insisting on node 0 is rejected
/// until the storage pod leaves.
#[test]
fn seed_example_two_numa_exclusive_storage_and_reranker() {
    let path = example("qrm-role-based-pools.yaml");
    let out = run_json(&path);
    // The memory plugin's machine state of the seed: MemTotal minus 500 MiB.
    let memory = |snapshot: &Value, field: &str| -> Vec<u64> {
        snapshot["memory"]
            .as_array()
            .expect("memory")
            .iter()
            .map(|n| n[field].as_u64().expect("bytes"))
            .collect()
    };
    assert_eq!(
        memory(&out["initial"], "allocatable"),
        [237_182_648_320, 237_282_263_040]
    );
    assert_eq!(memory(&out["initial"], "bound"), [0, 0]);
    assert_eq!(
        memory(&out["steps"][1], "bound"),
        [40_000_000_000, 20_000_000_000]
    );
    let storage = placement(&out, 1, "storage", "container0");
    assert_eq!(storage["cpus"], "2-21");
    assert_eq!(storage["mems"], "0");
    assert_eq!(storage["pool"], "dedicated");
    assert_eq!(
        out["steps"][0]["admission"]["containers"][0]["hint"]["nodes"],
        serde_json::json!([0])
    );
    let reranker = placement(&out, 2, "reranker", "container0");
    assert_eq!(reranker["cpus"], "42-51");
    assert_eq!(reranker["mems"], "1");
    assert_eq!(out["steps"][1]["pools"]["held"], "22-39");
    let pushy = &out["steps"][2]["admission"];
    assert_eq!(pushy["admitted"], false);
    assert!(
        pushy["reason"]
            .as_str()
            .is_some_and(|r| r.contains("TopologyAffinityError")),
        "{pushy}"
    );
    assert_eq!(out["steps"][4]["admission"]["admitted"], true);
    assert_eq!(placement(&out, 5, "pushy", "container0")["mems"], "0");
    golden("simulate-qrm-role-based-pools", &text_of(&path));
}

/// Example 3: two pods of one role share eth1 on node 1 (namespace ns1),
/// with CPUs 42-51 and 52-61 and memory node 1.
#[test]
fn seed_example_three_two_pods_share_a_nic() {
    let path = example("qrm-shared-nic.yaml");
    let out = run_json(&path);
    for (step, pod, want) in [(2, "pod1", "42-51"), (3, "pod2", "52-61")] {
        let p = placement(&out, step, pod, "container0");
        assert_eq!(p["cpus"], want);
        assert_eq!(p["mems"], "1");
        assert_eq!(p["envs"]["AFFINITY_NIC_NAME"], "eth1");
        assert_eq!(p["envs"]["AFFINITY_NIC_ADDR_IPV6"], "fdbd:dc05:3:155::20");
        assert_eq!(
            p["annotations"]["kubernetes.io/host-netns-path"],
            "/var/run/netns/ns1"
        );
    }
    // pod1 keeps eth1 when pod2 joins it.
    assert_eq!(
        placement(&out, 3, "pod1", "container0")["envs"]["AFFINITY_NIC_NAME"],
        "eth1"
    );
    golden("simulate-qrm-shared-nic", &text_of(&path));
}

const LOOP: &str = r#"
machine: { sockets: 2, numa_per_socket: 1, cores_per_socket: 4, threads_per_core: 2 }
plugins:
  cpu: { reservedCpus: 2, pools: { headroom: 0, maxHeadroom: 4, cooldown: 0 } }
pods:
  db:
    annotations: { katalyst.kubewharf.io/qos_level: dedicated_cores }
    containers: [ { name: app, requests: { cpu: "4" } } ]
  web:
    containers: [ { name: app, requests: { cpu: "2" } } ]
  batch:
    annotations: { katalyst.kubewharf.io/qos_level: reclaimed_cores }
    containers: [ { name: job, requests: { cpu: "1" } } ]
steps:
  - { op: add, pod: db }
  - { op: add, pod: web }
  - { op: add, pod: batch }
  - { op: pressure, pool: share, pressure: 50, periods: 6 }
  - { op: pressure, pool: share, pressure: 0, usage: 0, periods: 6 }
"#;

/// The closed loop: the shared pool grows under pressure up to its bound
/// and shrinks back when idle, taking from and giving back to reclaim,
/// never touching the dedicated or the reserved CPUs.
#[test]
fn pressure_moves_cpus_between_share_and_reclaim_only() {
    let out = json(&pinion(&["simulate", "-o", "json", "-"], LOOP));
    let db = cpus(&placement(&out, 1, "db", "app")["cpus"]);
    let reserved = cpus(&out["initial"]["pools"]["reserved"]);
    assert_eq!((db.len(), reserved.len()), (4, 2));
    let size = |step: usize| cpus(&placement(&out, step, "web", "app")["cpus"]).len();
    assert_eq!(size(3), 2, "requests, no headroom");
    assert_eq!(size(4), 6, "grown to requests + maxHeadroom");
    assert_eq!(size(5), 2, "back to the requests");
    for step in out["steps"].as_array().expect("steps") {
        let pools = &step["pools"];
        let mut pooled = cpus(&pools["reclaim"]);
        for cpus_of in pools["shared"].as_object().expect("shared").values() {
            pooled.union_with(&cpus(cpus_of));
        }
        assert!(pooled.is_disjoint(&db), "{step}");
        assert!(pooled.is_disjoint(&reserved), "{step}");
        if step["index"].as_u64() >= Some(3) {
            let db_now = cpus(&placement(&out, 3, "db", "app")["cpus"]);
            assert_eq!(db_now, db, "dedicated cpus never move");
            let reclaim = cpus(&pools["reclaim"]);
            let web = cpus(&pools["shared"]["share"]);
            assert_eq!(reclaim.len() + web.len() + db.len() + reserved.len(), 16);
        }
    }
}

/// Bad input stops the simulation with a non-zero exit and an error
/// naming the step and the bad value.
#[test]
fn bad_input_names_the_value_and_the_step() {
    let base = r#"
machine: { sockets: 1, numa_per_socket: 1, cores_per_socket: 4, threads_per_core: 2 }
plugins: { cpu: {} }
pods:
  gold:
    annotations: { katalyst.kubewharf.io/qos_level: gold }
    containers: [ { name: app, requests: { cpu: "1" } } ]
  typo:
    containers: [ { name: app, requests: { cpu: "4x" } } ]
  web:
    containers: [ { name: app, requests: { cpu: "1" } } ]
"#;
    let cases = [
        ("[{op: add, pod: gold}]", "step 1 (add gold)", "\"gold\""),
        ("[{op: add, pod: typo}]", "step 1 (add typo)", "\"4x\""),
        (
            "[{op: add, pod: web}, {op: advisor, pool: shrae, size: 3}]",
            "step 2 (advisor sets shrae to 3)",
            "pool \"shrae\" does not exist",
        ),
        (
            "[{op: add, pod: web}, {op: pressure, pool: batch, pressure: 20}]",
            "step 2 (pressure batch",
            "pool \"batch\" does not exist",
        ),
        (
            "[{op: advisor, pool: share, size: lots}]",
            "step 1",
            "\"lots\"",
        ),
        ("[{op: add, pod: ghost}]", "step 1 (add ghost)", "\"ghost\""),
        ("[{op: grow}]", "step 1", "`grow`"),
    ];
    for (steps, step, value) in cases {
        let scenario = format!("{base}steps: {steps}\n");
        let out = pinion(&["simulate", "-"], &scenario);
        let err = common::stderr(&out);
        assert!(!out.status.success(), "{steps}: {}", common::stdout(&out));
        assert!(err.contains(step), "{steps}: {err}");
        assert!(err.contains(value), "{steps}: {err}");
    }
    let unknown = base.replace("cpu: {}", "cpu: { reservedCPUs: 2 }");
    let out = pinion(&["simulate", "-"], &unknown);
    assert!(common::stderr(&out).contains("reservedCPUs"));
    let no_memory = base.replace("cpu: {}", "memory: {}");
    let out = pinion(&["simulate", "-"], &no_memory);
    assert!(common::stderr(&out).contains("needs `memory`"));
}

/// A real machine from `../shared` (`sysroot`, read in place): a
/// NUMA-bound dedicated pod under `single-numa-node` gets CPUs of one node
/// of the SNC2 Xeon (node of CPU n = n mod 4) and that node's memory.
#[test]
fn a_real_machine_from_shared() {
    let Some(root) = common::shared("topologies/x86-2s-intel-xeon-gold-6230-ht-snc2") else {
        return;
    };
    let scenario = format!(
        r#"
sysroot: {root}
topologyManagerPolicy: single-numa-node
plugins: {{ cpu: {{ reservedCpus: 2 }} }}
pods:
  db:
    annotations:
      katalyst.kubewharf.io/qos_level: dedicated_cores
      katalyst.kubewharf.io/memory_enhancement: '{{"numa_binding":"true"}}'
    containers: [ {{ name: app, requests: {{ cpu: "8" }} }} ]
  web:
    containers: [ {{ name: app, requests: {{ cpu: "3" }} }} ]
steps:
  - {{ op: add, pod: db }}
  - {{ op: add, pod: web }}
"#,
        root = root.display()
    );
    let out = json(&pinion(&["simulate", "-o", "json", "-"], &scenario));
    let db = placement(&out, 2, "db", "app");
    let db_cpus = cpus(&db["cpus"]);
    assert_eq!(db_cpus.len(), 8);
    let node = db_cpus.iter().next().expect("a cpu") % 4;
    assert!(db_cpus.iter().all(|cpu| cpu % 4 == node), "{db_cpus}");
    // No memory plugin runs: the memory nodes are left as they are (the
    // CPU plugin's binding does not write them; the manager has no rule).
    assert!(db["mems"].is_null(), "{db}");
    let web = placement(&out, 2, "web", "app");
    assert_eq!(web["pool"], "share");
    assert_eq!(cpus(&web["cpus"]).len(), 4, "3 requested + 1 headroom");
    assert!(cpus(&web["cpus"]).is_disjoint(&db_cpus));
}
