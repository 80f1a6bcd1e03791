//! Every deliberate difference marked in the code
//! (`// difference-from-kubelet: <marker>` at the place that implements it)
//! is written down in `docs/differences-from-kubelet.md` (the marker column
//! of a table row), and every marker the document names exists in the code.
//! The role table of the QRM proposal's vocabulary in `docs/qrm.md` is the
//! one in the code (`pinion_core::qos::vocabulary::ROLES`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::workspace;
use pinion_core::qos::vocabulary::{NumaHolding, ROLES};

/// The marker's prefix, spelled so that this file holds none.
const PREFIX: &str = concat!("// difference", "-from-kubelet: ");

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Marker → the files that carry it.
fn code_markers() -> BTreeMap<String, Vec<PathBuf>> {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates"), &mut files);
    let mut markers: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        for line in text.lines() {
            if let Some(marker) = line.trim().strip_prefix(PREFIX) {
                markers
                    .entry(marker.trim().to_string())
                    .or_default()
                    .push(file.clone());
            }
        }
    }
    markers
}

/// The markers of the document: the last cell of a table row, when it is
/// one backticked word.
fn doc_markers(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter(|line| line.starts_with('|'))
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim().trim_end_matches('|').split('|').collect();
            let last = cells.last()?.trim();
            let word = last.strip_prefix('`')?.strip_suffix('`')?;
            let is_marker = !word.is_empty()
                && word
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            is_marker.then(|| word.to_string())
        })
        .collect()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace().join(path)).expect("doc")
}

#[test]
fn every_marked_difference_is_in_the_differences_document_and_back() {
    let doc = read("docs/differences-from-kubelet.md");
    let code = code_markers();
    let documented = doc_markers(&doc);
    // The rows issue 28 asks for, at least.
    for required in [
        "qrm-follows-katalyst",
        "qrm-journal-not-state-file",
        "qrm-annotations-over-nri",
        "refusal-is-create-container-error",
        "option-maturities",
        "metric-names-without-kubelet-prefix",
        "static-default-without-config",
        "shared-pool-pushed-at-once",
    ] {
        assert!(documented.contains(required), "no row for {required}");
    }
    let missing: Vec<String> = code
        .iter()
        .filter(|(marker, _)| !documented.contains(*marker))
        .map(|(marker, files)| format!("{marker} ({})", files[0].display()))
        .collect();
    assert!(
        missing.is_empty(),
        "marked in the code, not in docs/differences-from-kubelet.md: {missing:?}"
    );
    let unmarked: Vec<&String> = documented
        .iter()
        .filter(|marker| !code.contains_key(*marker))
        .collect();
    assert!(
        unmarked.is_empty(),
        "in docs/differences-from-kubelet.md, marked nowhere in the code: {unmarked:?}"
    );
}

#[test]
fn the_marker_reader_finds_what_it_should() {
    let doc =
        "| a | b | `some-marker` |\n| x | `not a marker` |\n| y | `Upper` |\ntext `loose-word`\n";
    assert_eq!(
        doc_markers(doc),
        BTreeSet::from(["some-marker".to_string()])
    );
}

#[test]
fn the_role_table_in_qrm_md_is_the_one_in_the_code() {
    let doc = read("docs/qrm.md");
    let rows: Vec<&str> = doc
        .lines()
        .filter(|line| line.starts_with("| `") && line.contains("_cores` |"))
        .filter(|line| {
            ROLES
                .iter()
                .any(|r| line.starts_with(&format!("| `{}`", r.names[0])))
        })
        .collect();
    assert_eq!(rows.len(), ROLES.len(), "one row per role: {rows:?}");
    for role in ROLES {
        let row = rows
            .iter()
            .find(|line| line.starts_with(&format!("| `{}`", role.names[0])))
            .expect("row");
        for name in role.names {
            assert!(row.contains(&format!("`{name}`")), "{name} in {row}");
        }
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let level = role.shape.level.expect("every role has a level");
        assert_eq!(cells[2], format!("`{level}`"), "{row}");
        let numa = match role.shape.numa {
            None => "—",
            Some(NumaHolding::Sharing) => "bound, shared",
            Some(NumaHolding::Exclusive) => "held alone",
        };
        assert_eq!(cells[3], numa, "{row}");
    }
}
