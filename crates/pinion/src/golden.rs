//! The one golden-output harness of the CLI's tests, used by the unit tests
//! of the renderers (here, below) and by the integration tests
//! (`tests/common` includes this file). A golden file is
//! `crates/pinion/tests/golden/cli/NAME`; `PINION_BLESS=1 cargo test -p
//! pinion` rewrites every golden file a test compares with (review the
//! diff before committing it).

use std::path::PathBuf;

/// `crates/pinion/tests/golden/cli/NAME`.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/cli")
        .join(name)
}

/// Asserts that `actual` is the golden file `name` (or writes it under
/// `PINION_BLESS=1`).
pub fn check(name: &str, actual: &str) {
    let path = path(name);
    if std::env::var_os("PINION_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write the golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "golden file {}: {err} (PINION_BLESS=1 creates it)",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "output differs from {} (PINION_BLESS=1 rewrites it)\n--- expected\n{expected}--- actual\n{actual}",
        path.display()
    );
}
