//! Discovery on the 44 real machines of `../shared/topologies`, compared
//! with the oracle's canonical outputs (`oracle/expected/`). Groupings are
//! compared as partitions of the CPUs, never as raw ids (except NUMA node
//! ids, which both sides keep as the kernel's). Skipped with a notice when
//! `../shared` is absent.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use pinion_core::Topology;

/// Machines where Pinion deliberately differs from lscpu, with the reference
/// used instead and why.
const REFERENCES: &[(&str, &str, &str)] = &[
    ("ppc32-qemu-powermac-g3-1cpu", "hwloc", PACKAGE_UNKNOWN),
    ("ppc64-lpar-power7-16c-smt4-2numa", "hwloc", PACKAGE_UNKNOWN),
    ("ppc64-lpar-power7-4c-smt4", "hwloc", PACKAGE_UNKNOWN),
    ("riscv64-sifive-u74-2c", "hwloc", PACKAGE_UNKNOWN),
    ("s390x-kvm-z196-3cpu", "hwloc", PACKAGE_UNKNOWN),
    ("s390x-lpar-z196-cpu0-offline", "hwloc", PACKAGE_UNKNOWN),
    ("s390x-zvm-z196-4cpu", "hwloc", PACKAGE_UNKNOWN),
    ("sparc64-ultrasparc-ii-6cpu-sparse-ids", "hwloc", SPARC),
    (
        "arm64-1s-nvidia-gb10-20c-hybrid-2llc",
        "lscpu-stub-cpuinfo",
        PER_TYPE,
    ),
    (
        "arm64-phone-qcom-x3-a715-a710-a510-8c",
        "lscpu-stub-cpuinfo",
        PER_TYPE,
    ),
];
const PACKAGE_UNKNOWN: &str =
    "physical_package_id is -1: lscpu splits sockets along core_siblings, \
     Pinion (like hwloc and cadvisor) sees one package";
const SPARC: &str = "physical_package_id is -1 (one package, as hwloc) and the only cache \
     data are legacy cpuN/l2_cache_size files, which lscpu reads as per-cpu L2 groups and \
     Pinion (like hwloc) does not: no cache/ directory means one uncore group";
const PER_TYPE: &str = "lscpu numbers cores and sockets per CPU type on heterogeneous ARM";

#[path = "../../pinion-core/tests/common/shared.rs"]
mod shared;

fn shared_topologies() -> Option<PathBuf> {
    shared::shared("topologies")
}

fn machines(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read topologies dir")
        .map(|entry| entry.expect("dir entry"))
        .filter(|entry| entry.path().join("sys").is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn load(dir: &Path, machine: &str) -> Topology {
    pinion_host::discover(&dir.join(machine))
        .unwrap_or_else(|err| panic!("{machine}: discovery failed: {err}"))
}

/// One oracle row: `cpu core socket node llc online`.
#[derive(Debug)]
struct Row {
    cpu: u32,
    columns: [String; 4],
    online: bool,
}

/// The oracle file for `machine` (its backend, and why when not lscpu) and
/// its rows.
fn oracle_rows(dir: &Path, machine: &str) -> (String, Vec<Row>) {
    let (backend, why) = REFERENCES
        .iter()
        .find(|(name, _, _)| *name == machine)
        .map_or(("lscpu", ""), |(_, backend, why)| (backend, why));
    let path = dir.join(format!("oracle/expected/{machine}.{backend}.txt"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words.len(), 6, "{}: bad row {line:?}", path.display());
            Row {
                cpu: words[0].parse().expect("cpu id"),
                columns: [1, 2, 3, 4].map(|i| words[i].to_string()),
                online: words[5] == "1",
            }
        })
        .collect();
    let label = if why.is_empty() {
        backend.to_string()
    } else {
        format!("{backend}, because {why}")
    };
    (label, rows)
}

/// Pinion's value for column `k` (core, socket, node, llc) of an online CPU.
fn ours(topology: &Topology, cpu: u32, k: usize) -> Option<u32> {
    let info = topology.cpu(cpu)?;
    Some([info.core, info.socket, info.numa, info.llc?][k])
}

/// Every mismatch between Pinion and the oracle on one machine.
fn compare(topology: &Topology, rows: &[Row]) -> Vec<String> {
    const NAMES: [&str; 4] = ["core", "socket", "node", "llc"];
    let mut problems = Vec::new();
    for row in rows {
        let online = topology.cpu(row.cpu).is_some();
        let offline = topology.offline().contains(row.cpu);
        if row.online != online || online == offline {
            problems.push(format!(
                "cpu {}: oracle online={}, pinion online={online} offline={offline}",
                row.cpu, row.online
            ));
        }
    }
    let online_rows: Vec<&Row> = rows.iter().filter(|r| r.online).collect();
    if online_rows.len() != topology.num_cpus() {
        problems.push(format!(
            "oracle has {} online cpus, pinion {}",
            online_rows.len(),
            topology.num_cpus()
        ));
    }
    for (k, name) in NAMES.iter().enumerate() {
        let mut forward: BTreeMap<&str, u32> = BTreeMap::new();
        let mut backward: BTreeMap<u32, &str> = BTreeMap::new();
        for row in &online_rows {
            let Some(value) = ours(topology, row.cpu, k) else {
                continue;
            };
            let theirs = row.columns[k].as_str();
            let f = *forward.entry(theirs).or_insert(value);
            let b = *backward.entry(value).or_insert(theirs);
            if f != value || b != theirs {
                problems.push(format!(
                    "{name} grouping differs at cpu {}: oracle {theirs}, pinion {value}",
                    row.cpu
                ));
            }
            if *name == "node" && theirs != "-" && theirs != value.to_string() {
                problems.push(format!(
                    "cpu {}: oracle node {theirs}, pinion node {value}",
                    row.cpu
                ));
            }
        }
    }
    problems
}

#[test]
fn every_machine_matches_the_oracle() {
    let Some(dir) = shared_topologies() else {
        return;
    };
    let mut report = Vec::new();
    for machine in machines(&dir) {
        let topology = load(&dir, &machine);
        let (backend, rows) = oracle_rows(&dir, &machine);
        for problem in compare(&topology, &rows) {
            report.push(format!("{machine} (vs {backend}): {problem}"));
        }
    }
    assert!(
        report.is_empty(),
        "{} mismatches:\n{}",
        report.len(),
        report.join("\n")
    );
}

/// Whether CPU `cpu` of `machine` has a cache above L2 (what cAdvisor
/// reports to kubelet as an uncore cache).
fn has_cache_above_l2(dir: &Path, machine: &str, cpu: u32) -> bool {
    let cache = dir.join(format!("{machine}/sys/devices/system/cpu/cpu{cpu}/cache"));
    let Ok(entries) = fs::read_dir(&cache) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let read = |name: &str| fs::read_to_string(entry.path().join(name)).unwrap_or_default();
        let level: u32 = read("level")
            .trim()
            .trim_end_matches('\0')
            .parse()
            .unwrap_or(0);
        level > 2 && read("type").trim() != "Instruction"
    })
}

/// kubelet's uncore groups on every machine: where every CPU has an L3 they
/// are the LLC groups (checked against the oracle above); where no CPU has
/// a cache above L2 they are the sockets (cAdvisor reports no uncore cache
/// and kubelet falls back to the socket).
#[test]
fn uncore_follows_kubelet_l3_else_socket_on_every_machine() {
    let Some(dir) = shared_topologies() else {
        return;
    };
    let mut report = Vec::new();
    let mut socket_fallbacks = Vec::new();
    for machine in machines(&dir) {
        let t = load(&dir, &machine);
        let with_l3 = t
            .cpus()
            .iter()
            .filter(|c| has_cache_above_l2(&dir, &machine, c.id))
            .count();
        let expected = if with_l3 == t.num_cpus() {
            t.llcs()
        } else if with_l3 == 0 {
            socket_fallbacks.push(machine.clone());
            t.sockets()
        } else {
            report.push(format!("{machine}: only {with_l3} cpus have an L3"));
            continue;
        };
        let ours: Vec<&pinion_core::CpuSet> = t.uncores().values().collect();
        let mut theirs: Vec<&pinion_core::CpuSet> = expected.values().collect();
        let mut ours_sorted = ours.clone();
        ours_sorted.sort_by_key(|s| s.first());
        theirs.sort_by_key(|s| s.first());
        if ours_sorted != theirs {
            report.push(format!("{machine}: uncore {ours:?}, expected {theirs:?}"));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
    assert!(
        socket_fallbacks
            .iter()
            .any(|m| m == "x86-2s-intel-xeon-e5345-no-l3"),
        "{socket_fallbacks:?}"
    );
}

#[test]
fn all_44_machines_load() {
    let Some(dir) = shared_topologies() else {
        return;
    };
    let names = machines(&dir);
    assert_eq!(names.len(), 44, "machines found: {names:?}");
    let failures: Vec<String> = names
        .iter()
        .filter_map(|machine| {
            pinion_host::discover(&dir.join(machine))
                .err()
                .map(|e| format!("{machine}: {e}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Loads one machine for a headline test, or `None` (with the notice) when
/// `../shared` is absent.
fn machine(name: &str) -> Option<Topology> {
    let dir = shared_topologies()?;
    Some(load(&dir, name))
}

use pinion_core::testing::cpus as set;

#[test]
fn epyc_7451_has_2_sockets_8_nodes_16_l3_groups_and_smt_pairs() {
    let Some(t) = machine("x86-2s-amd-epyc-7451-ht-16ccx-8numa") else {
        return;
    };
    assert_eq!(t.num_sockets(), 2);
    assert_eq!(t.num_numa_nodes(), 8);
    assert_eq!(t.num_uncore_caches(), 16);
    assert_eq!(t.num_cores(), 48);
    assert_eq!(t.cpus_per_core(), 2);
    assert!(t.cores().values().all(|threads| threads.len() == 2));
    assert_eq!(t.cores()[&0], set("0,48"));
    assert_eq!(t.cpus_per_uncore(), 6);
}

#[test]
fn cascade_lake_snc2_keeps_memory_only_nodes_distances_and_isolated_cpus() {
    let Some(t) = machine("x86-2s-intel-xeon-cascadelake-28c-ht-snc2-pmem-isolcpus") else {
        return;
    };
    assert_eq!(t.numa_nodes().len(), 6);
    assert_eq!(t.cpuless_numa_nodes(), vec![4, 5]);
    assert_eq!(t.num_numa_nodes(), 4);
    assert_eq!(t.num_sockets(), 2);
    assert_eq!(t.num_uncore_caches(), 2);
    assert_eq!(t.numa_distance(0, 2), Some(11));
    assert_eq!(t.numa_distance(4, 0), Some(17));
    assert_eq!(*t.isolated(), set("4-7,60-63"));
    assert!(t.nohz_full().is_empty());
}

#[test]
fn edited_xeon_has_offline_cpu0_and_cpus_of_the_removed_node_on_node_0() {
    let Some(t) = machine("x86-2s-intel-xeon-e5-2680v3-noht-cpu0-node0-offline-edited") else {
        return;
    };
    assert_eq!(*t.all_cpus(), set("4-20"));
    assert_eq!(*t.offline(), set("0-3,21-23"));
    assert_eq!(t.numa_cpus()[&1], set("5,7,9,11,13,15,17,19"));
    assert_eq!(t.numa_cpus()[&0], set("4,6,8,10,12,14,16,18,20"));
    assert_eq!(t.numa_distance(1, 0), Some(21));
}

#[test]
fn s390_lpar_with_cpu0_offline() {
    let Some(t) = machine("s390x-lpar-z196-cpu0-offline") else {
        return;
    };
    assert_eq!(*t.all_cpus(), set("1-5,8-19"));
    assert_eq!(*t.offline(), set("0,6,7"));
    assert_eq!(t.num_sockets(), 1, "physical_package_id -1 is one socket");
    assert_eq!(t.num_uncore_caches(), 1, "no caches: one uncore group");
}

#[test]
fn power7_lpar_groups_llc_by_l1_uncore_by_socket_and_keeps_the_empty_node() {
    let Some(t) = machine("ppc64-lpar-power7-16c-smt4-2numa") else {
        return;
    };
    assert_eq!(t.num_cpus(), 64);
    assert_eq!(t.num_cores(), 16);
    assert_eq!(t.cpus_per_core(), 4);
    assert_eq!(t.num_sockets(), 1);
    assert_eq!(t.llcs().len(), 16);
    assert_eq!(t.num_uncore_caches(), 1, "no L3: kubelet's socket fallback");
    assert_eq!(t.with_llc_as_uncore().num_uncore_caches(), 16);
    assert_eq!(t.cpuless_numa_nodes(), vec![1]);
}

#[test]
fn sparse_ids_are_kept() {
    let Some(sparc) = machine("sparc64-ultrasparc-ii-6cpu-sparse-ids") else {
        return;
    };
    assert_eq!(*sparc.all_cpus(), set("6-7,10-11,14-15"));
    let Some(amd) = machine("x86-4s-amd-magnycours-sparse-numa-ids-edited") else {
        return;
    };
    let ids: Vec<u32> = amd.numa_nodes().iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 33, 34, 45, 72, 73]);
    assert_eq!(amd.num_uncore_caches(), 8);
}

#[test]
fn kernel_cache_ids_label_uncore_groups() {
    let Some(t) = machine("x86-vm-vmware-2s-amd-opteron-6328-4numa") else {
        return;
    };
    let ids: Vec<u32> = t.uncores().keys().copied().collect();
    assert_eq!(ids, vec![8, 9, 16, 17]);
}

#[test]
fn heterogeneous_arm_gets_core_types_from_midr() {
    let Some(t) = machine("arm64-1s-nvidia-gb10-20c-hybrid-2llc") else {
        return;
    };
    let kinds: std::collections::BTreeSet<&str> = t
        .cpus()
        .iter()
        .filter_map(|c| c.core_type.as_deref())
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    let kind = |cpu: u32| t.cpu(cpu).and_then(|c| c.core_type.clone());
    assert_eq!(kind(0).as_deref(), Some("arm-0x41-0xd87"));
    assert_eq!(kind(5).as_deref(), Some("arm-0x41-0xd85"));
    assert_eq!(kind(10), kind(0));
    assert_eq!(kind(15), kind(5));
    assert_eq!(t.num_uncore_caches(), 2);
    assert_eq!(t.num_cores(), 20);
    let Some(phone) = machine("arm64-phone-qcom-x3-a715-a710-a510-8c") else {
        return;
    };
    let kinds: std::collections::BTreeSet<&str> = phone
        .cpus()
        .iter()
        .filter_map(|c| c.core_type.as_deref())
        .collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
}

#[test]
fn ryzen_capture_without_possible_or_online_files_loads_from_cpu_dirs() {
    let Some(t) = machine("x86-1s-amd-ryzen5-1600-ht-2ccx-nopossible") else {
        return;
    };
    assert_eq!(t.num_cpus(), 12);
    assert_eq!(t.num_cores(), 6);
    assert_eq!(
        t.uncores().values().cloned().collect::<Vec<_>>(),
        vec![set("0-2,6-8"), set("3-5,9-11")]
    );
}

#[test]
fn no_l3_machine_groups_llc_by_shared_l2_and_uncore_by_socket() {
    let Some(t) = machine("x86-2s-intel-xeon-e5345-no-l3") else {
        return;
    };
    assert_eq!(t.llcs().len(), 4);
    assert!(t.llcs().values().any(|cpus| *cpus == set("0,4")));
    assert_eq!(t.uncores(), t.sockets(), "kubelet falls back to the socket");
    let llc = t.with_llc_as_uncore();
    assert_eq!(llc.uncores(), t.llcs());
}
