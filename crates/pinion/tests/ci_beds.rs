//! What CI's time guard (`.ci/run`) asks the Kubernetes beds before it runs
//! them: `scripts/e2e-kubelet.sh --peers-cached` and
//! `scripts/e2e-cluster.sh --peers-cached` say whether their Go-built peers
//! are built and current, and build nothing.

mod common;

use std::os::unix::fs::PermissionsExt as _;
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

/// A stand-in for `go` in `dir`: `version` and `list -m` answer, `build -o
/// OUT` and `install` (into `$GOBIN`) leave small executables, each call
/// is appended to `dir/calls`; with `fail_builds` every build fails.
fn fake_go(dir: &Path, fail_builds: bool) {
    let build = if fail_builds {
        "echo 'fake go: build failed' >&2; exit 1"
    } else {
        "out=; while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done; cp /bin/true \"$out\""
    };
    let install = if fail_builds {
        "exit 1"
    } else {
        "for b in containerd containerd-shim-runc-v2 ctr; do cp /bin/true \"$GOBIN/$b\"; done"
    };
    let script = format!(
        "#!/bin/sh\necho \"$*\" >>\"{calls}\"\ncase $1 in\n\
         version) echo 'go version go0.0-fake linux/amd64' ;;\n\
         list) echo v0.0.1 ;;\n\
         build) {build} ;;\n\
         install) {install} ;;\n\
         *) exit 1 ;;\nesac\n",
        calls = dir.join("calls").display()
    );
    let go = dir.join("go");
    std::fs::write(&go, script).expect("fake go");
    std::fs::set_permissions(&go, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// An empty cache for the beds and a directory holding the stand-in `go`.
fn bed_with_fake_go(fail_builds: bool) -> (tempfile::TempDir, tempfile::TempDir) {
    let (cache, bin) = (
        tempfile::tempdir().expect("cache"),
        tempfile::tempdir().expect("bin"),
    );
    fake_go(bin.path(), fail_builds);
    (cache, bin)
}

/// Whether the stand-in `go` of `bin` was asked to build or install.
fn go_built(bin: &Path) -> bool {
    std::fs::read_to_string(bin.join("calls"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("build ") || l.starts_with("install "))
}

/// `script FLAG` with the beds' cache at `cache` and the stand-in `go` of
/// `bin` first on PATH.
fn with_fake_go(script: &str, flag: &str, cache: &Path, bin: &Path) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(workspace().join(script))
        .arg(flag)
        .env("PINION_E2E_CACHE", cache)
        .env("PATH", path)
        .env_remove("PINION_E2E_CACHED_ONLY")
        .output()
        .expect("the script runs")
}

/// What CI does with the time it has left when it skipped a Kubernetes bed
/// for want of its peers: `--build-peers` builds every peer that
/// `--peers-cached` asks about (and runs nothing), so the next run finds
/// them cached; a peer that cannot be built fails it and stays uncached.
#[test]
fn build_peers_leaves_the_peers_that_peers_cached_counts() {
    for script in ["scripts/e2e-kubelet.sh", "scripts/e2e-cluster.sh"] {
        let (cache, bin) = bed_with_fake_go(false);
        let before = with_fake_go(script, "--peers-cached", cache.path(), bin.path());
        assert_eq!(
            before.status.code(),
            Some(1),
            "{script}: nothing cached yet"
        );

        let built = with_fake_go(script, "--build-peers", cache.path(), bin.path());
        assert_eq!(
            built.status.code(),
            Some(0),
            "{script}: {}{}",
            stdout(&built),
            stderr(&built)
        );
        assert_eq!(
            stdout(&built),
            "",
            "{script}: the peers' directories are not printed"
        );
        assert!(go_built(bin.path()), "{script} built something");
        let after = with_fake_go(script, "--peers-cached", cache.path(), bin.path());
        assert_eq!(
            after.status.code(),
            Some(0),
            "{script}: cached after --build-peers: {}",
            stderr(&after)
        );

        // Built again: nothing to do, no go build.
        std::fs::remove_file(bin.path().join("calls")).expect("reset the calls");
        let again = with_fake_go(script, "--build-peers", cache.path(), bin.path());
        assert_eq!(again.status.code(), Some(0), "{script}: built already");
        assert!(!go_built(bin.path()), "{script}: nothing rebuilt");
    }
}

/// A peer that cannot be built fails `--build-peers`, saying why, and is
/// still counted as not cached.
#[test]
fn build_peers_fails_when_a_peer_cannot_be_built_and_leaves_it_uncached() {
    for script in ["scripts/e2e-kubelet.sh", "scripts/e2e-cluster.sh"] {
        let (cache, bin) = bed_with_fake_go(true);
        let built = with_fake_go(script, "--build-peers", cache.path(), bin.path());
        assert_eq!(built.status.code(), Some(1), "{script}: a failed build");
        assert!(
            stderr(&built).contains("fake go: build failed"),
            "{script}: says why: {}",
            stderr(&built)
        );
        let after = with_fake_go(script, "--peers-cached", cache.path(), bin.path());
        assert_eq!(after.status.code(), Some(1), "{script}: still not cached");
    }
}
