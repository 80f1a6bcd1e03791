//! The benches' own figures (percentiles, sizes, skip notices) print only
//! while measuring: `cargo bench` passes `--bench`; under `cargo test` the
//! benches run each case once as a smoke test, and print nothing of their
//! own (a passing `cargo test` stays quiet). Included by every bench that
//! prints (`#[macro_use] #[path = …] mod report;`).

/// Whether this run measures (`cargo bench`), rather than smoke-tests.
pub fn measuring() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// `eprintln!` while measuring; nothing under `cargo test`.
macro_rules! report {
    ($($arg:tt)*) => {
        if crate::report::measuring() {
            eprintln!($($arg)*);
        }
    };
}
