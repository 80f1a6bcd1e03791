//! `pinion topology` end to end: golden text output on corpus machines
//! (`../shared/topologies`, skipped with a notice when absent), JSON that
//! round-trips to the model, and clear errors for bad sysroots.
//!
//! Regenerate the golden files after an intended rendering change with
//! `PINION_BLESS=1 cargo test -p pinion --test topology_cli`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::pinion;

fn shared_topologies() -> Option<PathBuf> {
    common::shared("topologies")
}

fn topology_text(sysroot: &Path) -> String {
    let root = sysroot.to_str().expect("utf-8 path");
    let out = pinion(&["topology", "--sysroot", root]);
    assert!(
        out.status.success(),
        "pinion topology failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Compares `text` with `tests/golden/<name>.txt` (or rewrites it when
/// `PINION_BLESS` is set).
fn golden(name: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{name}.txt"));
    if std::env::var_os("PINION_BLESS").is_some() {
        fs::write(&path, text).expect("write golden");
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(text, expected, "output differs from {}", path.display());
}

#[test]
fn epyc_7451_shows_2_sockets_8_nodes_16_l3_groups_and_smt_pairs() {
    let Some(dir) = shared_topologies() else {
        return;
    };
    let text = topology_text(&dir.join("x86-2s-amd-epyc-7451-ht-16ccx-8numa"));
    let summary = text.lines().next().unwrap_or_default();
    assert!(
        summary
            .starts_with("2 sockets, 8 NUMA nodes, 48 cores, 2 threads per core, 16 LLC groups;"),
        "{summary}"
    );
    assert!(summary.contains("96 online (0-95), 0 offline"), "{summary}");
    assert!(
        text.contains("      core 0: 0,48   core 1: 1,49   core 2: 2,50\n"),
        "{text}"
    );
    assert_eq!(text.matches("\n    llc ").count(), 16);
    assert_eq!(text.matches("\n  node ").count(), 8);
    golden("x86-2s-amd-epyc-7451-ht-16ccx-8numa", &text);
}

#[test]
fn cascade_lake_shows_memory_only_nodes_isolated_cpus_and_distances() {
    let Some(dir) = shared_topologies() else {
        return;
    };
    let text = topology_text(&dir.join("x86-2s-intel-xeon-cascadelake-28c-ht-snc2-pmem-isolcpus"));
    assert!(
        text.starts_with("2 sockets, 6 NUMA nodes (4 with cpus), 56 cores"),
        "{text}"
    );
    assert!(text.contains("8 isolated (4-7,60-63)"), "{text}");
    assert!(
        text.contains("memory-only node 4\nmemory-only node 5\n"),
        "{text}"
    );
    assert!(
        text.contains("numa distances:\n  node    0    1    2    3    4    5\n"),
        "{text}"
    );
    assert!(
        text.contains("llc 0: 28 cpus (of 56 in the whole group)"),
        "{text}"
    );
    golden(
        "x86-2s-intel-xeon-cascadelake-28c-ht-snc2-pmem-isolcpus",
        &text,
    );
}

#[test]
fn offline_cpus_and_hybrid_core_types_are_shown() {
    let Some(dir) = shared_topologies() else {
        return;
    };
    let text =
        topology_text(&dir.join("x86-2s-intel-xeon-e5-2680v3-noht-cpu0-node0-offline-edited"));
    assert!(
        text.contains("17 online (4-20), 7 offline (0-3,21-23)"),
        "{text}"
    );
    golden(
        "x86-2s-intel-xeon-e5-2680v3-noht-cpu0-node0-offline-edited",
        &text,
    );
    let text = topology_text(&dir.join("arm64-1s-nvidia-gb10-20c-hybrid-2llc"));
    assert!(
        text.contains("core types: arm-0x41-0xd87 (0-4,10-14), arm-0x41-0xd85 (5-9,15-19)\n"),
        "{text}"
    );
}

#[test]
fn json_output_is_the_model() {
    let Some(dir) = shared_topologies() else {
        return;
    };
    let root = dir.join("x86-2s-intel-xeon-cascadelake-28c-ht-snc2-pmem-isolcpus");
    let out = pinion(&[
        "topology",
        "-o",
        "json",
        "--sysroot",
        root.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: pinion_core::Topology =
        serde_json::from_slice(&out.stdout).expect("json parses as a Topology");
    let discovered = pinion_host::discover(&root).expect("discover");
    assert_eq!(parsed, discovered);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(value["cpus"][0]["id"], 0);
    assert_eq!(value["isolated"], "4-7,60-63");
}

#[test]
fn missing_sysroot_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-root");
    let out = pinion(&["topology", "--sysroot", missing.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot discover the cpu topology under"),
        "{stderr}"
    );
    assert!(
        stderr.contains("no-such-root/sys/devices/system/cpu not found"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn malformed_sysfs_file_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cpu = dir.path().join("sys/devices/system/cpu");
    fs::create_dir_all(cpu.join("cpu0")).expect("mkdir");
    fs::write(cpu.join("online"), "0-two\n").expect("write");
    let out = pinion(&["topology", "--sysroot", dir.path().to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("malformed") && stderr.contains("system/cpu/online"),
        "{stderr}"
    );
}

#[test]
fn unknown_format_is_rejected() {
    let out = pinion(&["topology", "--format", "yaml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("yaml"));
}
