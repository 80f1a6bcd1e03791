//! What CI's time guard (`.ci/run`) asks the Kubernetes beds before it runs
//! them: `scripts/e2e-kubelet.sh --peers-cached` and
//! `scripts/e2e-cluster.sh --peers-cached` say whether their Go-built peers
//! are built and current, and build nothing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{have, stderr, stdout, workspace};

/// `script --peers-cached` with the beds' cache at `cache`.
fn peers_cached(script: &str, cache: &Path) -> Output {
    Command::new(workspace().join(script))
        .arg("--peers-cached")
        .env("PINION_E2E_CACHE", cache)
        .output()
        .expect("the script runs")
}

/// Regression (twenty-sixth session): CI's guard kept 15 minutes for the
/// cluster bed before it would start the kubelet bed, even on machines
/// where the cluster bed then skipped (its control plane not built), so
/// the kubelet bed never ran in CI. The guard now keeps no time for the
/// cluster bed and asks the kubelet bed what it would build first (the
/// time it needs follows); its skip message for the cluster bed asks that
/// bed too. With nothing cached both beds say so and build nothing.
#[test]
fn regression_with_nothing_cached_both_beds_say_so_and_build_nothing() {
    if !have("go", "beds with nothing cached") {
        return;
    }
    let cache = tempfile::tempdir().expect("tempdir");
    for script in ["scripts/e2e-kubelet.sh", "scripts/e2e-cluster.sh"] {
        let out = peers_cached(script, cache.path());
        assert_eq!(
            out.status.code(),
            Some(1),
            "{script}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert_eq!(
            (stdout(&out), stderr(&out)),
            (String::new(), String::new()),
            "{script}: an answer, not an error"
        );
        assert!(
            std::fs::read_dir(cache.path())
                .expect("the cache")
                .next()
                .is_none(),
            "{script} built nothing"
        );
    }
}

/// The kubelet bed's peers count as cached only when current: kubelet
/// with the stamp of the module it was built from (a changed `go.mod`,
/// `go.sum`, client source or go version rebuilds it) and containerd
/// 2.x's three binaries.
#[test]
fn the_kubelet_bed_counts_its_peers_cached_only_when_current() {
    if !have("go", "kubelet bed's peers") {
        return;
    }
    let cache = tempfile::tempdir().expect("tempdir");
    let executable = |path: &Path| {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::copy("/bin/true", path).expect("stand-in binary");
    };
    let kubelet = cache.path().join("kubelet-node");
    executable(&kubelet.join("kubelet"));
    executable(&kubelet.join("podresources-client"));
    let version = std::env::var("PINION_E2E_CONTAINERD2_VERSION").unwrap_or_default();
    let version = if version.is_empty() {
        // The script's default, read from it rather than repeated here.
        let script = std::fs::read_to_string(workspace().join("scripts/e2e-kubelet.sh"))
            .expect("the script");
        script
            .lines()
            .find_map(|l| l.strip_prefix("CONTAINERD2_VERSION=${PINION_E2E_CONTAINERD2_VERSION:-"))
            .and_then(|rest| rest.strip_suffix('}'))
            .expect("the script names its containerd 2.x version")
            .to_string()
    } else {
        version
    };
    for bin in ["containerd", "containerd-shim-runc-v2", "ctr"] {
        executable(&cache.path().join(format!("containerd-{version}/bin/{bin}")));
    }

    // No stamp: kubelet would be built first.
    let out = peers_cached("scripts/e2e-kubelet.sh", cache.path());
    assert_eq!(out.status.code(), Some(1), "without a stamp");

    // The stamp the build function writes, made by that same function.
    let stamp = Command::new("bash")
        .arg("-c")
        .arg(
            "E2E_NAME=test; . scripts/e2e/lib.sh; . \"$E2E_LIB/peers.sh\"; \
             mod=interop/kubelet-node; \
             _e2e_go_stamp \"$mod/go.mod\" \"$mod/go.sum\" \"$mod\"/podresources-client/*.go",
        )
        .current_dir(workspace())
        .output()
        .expect("the stamp");
    assert!(stamp.status.success(), "{}", stderr(&stamp));
    std::fs::write(kubelet.join("stamp"), stdout(&stamp)).expect("stamp");
    let out = peers_cached("scripts/e2e-kubelet.sh", cache.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "current: {}{}",
        stdout(&out),
        stderr(&out)
    );

    // A stamp of other sources: stale.
    std::fs::write(kubelet.join("stamp"), "0123abcd\n").expect("stamp");
    let out = peers_cached("scripts/e2e-kubelet.sh", cache.path());
    assert_eq!(out.status.code(), Some(1), "a stale stamp");

    // Current again, but containerd 2.x's shim missing.
    std::fs::write(kubelet.join("stamp"), stdout(&stamp)).expect("stamp");
    std::fs::remove_file(
        cache
            .path()
            .join(format!("containerd-{version}/bin/containerd-shim-runc-v2")),
    )
    .expect("remove the shim");
    let out = peers_cached("scripts/e2e-kubelet.sh", cache.path());
    assert_eq!(out.status.code(), Some(1), "containerd 2.x incomplete");
}
