//! Helpers for tests that read the shared conformance corpus in place.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod shared;

/// `../shared/conformance/kubelet/<relative>`, or `None` (after the skip
/// notice) when absent.
pub fn corpus_file(relative: &str) -> Option<PathBuf> {
    shared::shared(&format!("conformance/kubelet/{relative}"))
}

/// The cases (a JSON array) of a corpus file, or `None` when absent.
pub fn load_cases(relative: &str) -> Option<Vec<serde_json::Value>> {
    let path = corpus_file(relative)?;
    let text = std::fs::read_to_string(&path).expect("corpus file is readable");
    let value: serde_json::Value = serde_json::from_str(&text).expect("corpus file is JSON");
    Some(value.as_array().expect("corpus file is an array").clone())
}

/// Asserts that no case failed, listing the failures.
pub fn assert_all_passed(file: &str, total: usize, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{file}: {} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{file}: {total}/{total} cases passed");
}
