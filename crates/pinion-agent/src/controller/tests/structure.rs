//! Owns the structure tests of the controller's source: who writes the node, what each file says it owns.
//!
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

/// Every `.rs` file under `dir`, test files and submodules included.
fn every_file(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("controller dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            every_file(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The first line of `source` when it is a module doc line saying, in one
/// sentence, what the file owns (`//! Owns …`).
fn owner_line(source: &str) -> Option<&str> {
    let text = source.lines().next()?.strip_prefix("//! ")?;
    (text.starts_with("Owns ") && text.ends_with('.')).then_some(text)
}

#[test]
fn the_owner_line_is_a_module_doc_sentence_on_the_first_line() {
    assert_eq!(
        owner_line("//! Owns the batch.\n//!\n//! More.\n"),
        Some("Owns the batch.")
    );
    assert_eq!(owner_line("use std::path::Path;\n"), None);
    assert_eq!(owner_line("/// Owns an item, not the file.\n"), None);
    assert_eq!(owner_line("//! Owns the batch and\n//! more.\n"), None);
    assert_eq!(owner_line("\n//! Owns the batch.\n"), None);
}

/// Issue 30 item 3: a reader opening any file of the controller learns
/// from its first line what the file owns.
#[test]
fn every_controller_file_says_in_its_first_line_what_it_owns() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller");
    let mut files = Vec::new();
    every_file(&dir, &mut files);
    assert!(files.iter().any(|f| f.ends_with("tests/structure.rs")));
    let silent: Vec<String> = files
        .iter()
        .filter(|path| owner_line(&std::fs::read_to_string(path).expect("readable")).is_none())
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        silent.is_empty(),
        "files whose first line does not say what they own: {silent:?}"
    );
}
