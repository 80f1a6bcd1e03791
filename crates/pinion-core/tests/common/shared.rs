//! The workspace's one locator of `../shared` (real machines' sysfs trees,
//! kubelet's conformance tables), read in place and never copied. Every
//! crate's tests include this file (`#[path = …] mod shared;`) so the rule
//! lives once:
//!
//! * `../shared` beside the checkout, or the directory `PINION_SHARED_DIR`
//!   names;
//! * when the wanted path is absent, the test prints `skipped: ../shared not
//!   found` (straight to stderr, so it shows for passing tests too) and
//!   skips — unless `PINION_REQUIRE_SHARED=1` (CI sets it), which makes the
//!   absence a failure.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Set to `1` to make a missing `../shared` fail instead of skip.
pub const REQUIRE_SHARED: &str = "PINION_REQUIRE_SHARED";
/// Names another directory to use instead of `../shared`.
pub const SHARED_DIR: &str = "PINION_SHARED_DIR";

/// The workspace root (every crate lives at `crates/<name>`).
pub fn workspace() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).to_path_buf()
}

/// `<shared>/<relative>`, or `None` after the skip notice when absent
/// (a failure under `PINION_REQUIRE_SHARED=1`).
#[track_caller]
pub fn shared(relative: &str) -> Option<PathBuf> {
    let root =
        std::env::var_os(SHARED_DIR).map_or_else(|| workspace().join("../shared"), PathBuf::from);
    let path = root.join(relative);
    if path.exists() {
        return Some(path);
    }
    let what = if root.is_dir() {
        format!("{} not found", path.display())
    } else {
        "../shared not found".to_string()
    };
    assert!(
        std::env::var_os(REQUIRE_SHARED).is_none_or(|v| v != "1"),
        "{what}, and {REQUIRE_SHARED}=1 makes that an error"
    );
    let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("skipped: {what}\n"));
    None
}
