//! Issue 30 item 2: the executor (controller/executor.rs) is the only
//! writer of the node. The other files of the controller read it (pids,
//! cpusets) and ask the executor for every write; this reads their source
//! (test code excluded) and names any write through the host handle.

use std::path::{Path, PathBuf};

use crate::testing::source_guard::non_test_code;

/// `CpusetHost`'s methods that change the node.
const WRITES: &[&str] = &[
    "create",
    "set",
    "set_resources",
    "add_pid",
    "remove",
    "ensure_root",
    "make_partition",
    "unmake_partition",
    "set_housekeeping_cpus",
    "set_memory_limit",
    "as_mut",
];

/// The writes through a host handle in `source` (whitespace ignored, so a
/// call chain split over lines counts), as `host.METHOD(`.
fn node_writes(source: &str) -> Vec<String> {
    let compact: String = source.chars().filter(|c| !c.is_whitespace()).collect();
    WRITES
        .iter()
        .map(|method| format!("host.{method}("))
        .filter(|call| compact.contains(call.as_str()))
        .collect()
}

fn controller_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("controller dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                controller_files(&path, out);
            }
        } else if name.ends_with(".rs")
            && !matches!(name, "tests.rs" | "damage_tests.rs" | "executor.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn the_scan_finds_a_write_split_over_lines() {
    assert_eq!(node_writes("self.host.add_pid(&c, 1)"), ["host.add_pid("]);
    assert_eq!(
        node_writes("controller\n    .host\n    .ensure_root(&all, &mems)"),
        ["host.ensure_root("]
    );
    assert!(node_writes("self.host.pids(&c); self.host.cpus(&c)").is_empty());
}

#[test]
fn only_the_executor_writes_the_node() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller");
    let mut files = Vec::new();
    controller_files(&dir, &mut files);
    assert!(files.len() > 10, "{files:?}");
    let found: Vec<String> = files
        .iter()
        .flat_map(|path| {
            let source = std::fs::read_to_string(path).expect("readable");
            node_writes(&non_test_code(&source).0.join("\n"))
                .into_iter()
                .map(|call| format!("{}: {call}", path.display()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "node writes outside controller/executor.rs: {found:?}"
    );
}
