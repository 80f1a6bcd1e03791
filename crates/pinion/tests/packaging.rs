//! What ships beside the binaries: shell completions and man pages from
//! the CLI's own definitions, `--version`, the systemd unit (checked by
//! `systemd-analyze verify`), the image `scripts/build-image.sh` builds (its
//! OCI layout's digests) and the kustomize base over deploy/'s manifests.

mod common;

use std::path::Path;
use std::process::Command;

use common::{have, pinion, stderr, stdout, workspace};
use serde_yaml_ng::Value;

#[test]
fn completions_cover_every_subcommand_in_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = pinion(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for sub in ["podresources", "pools", "completions", "simulate"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let out = pinion(&["completions", "powershell"]);
    assert!(!out.status.success());
}

#[test]
fn man_pages_are_written_for_every_subcommand() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = pinion(&["man", "--dir", dir.path().to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    for page in [
        "pinion.1",
        "pinion-ps.1",
        "pinion-pools-set.1",
        "pinion-state-inspect.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).expect(page);
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page}: {text}"
        );
    }
    let top = std::fs::read_to_string(dir.path().join("pinion.1")).expect("pinion.1");
    assert!(top.contains("podresources"), "{top}");
    let printed = pinion(&["man"]);
    assert_eq!(stdout(&printed), top, "`pinion man` prints pinion.1");
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let out = pinion(&["--version"]);
    let text = stdout(&out);
    let rest = text
        .strip_prefix(&format!("pinion {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{text}"));
    let (commit, date) = rest.trim_end().split_once(", built ").expect("built");
    assert!(
        commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{commit}"
    );
    let date = date.strip_suffix(')').expect(")");
    assert_eq!(date.len(), 10, "{date}");
    assert_eq!(&date[4..5], "-", "{date}");
}

#[test]
fn the_systemd_unit_verifies() {
    if !have("systemd-analyze", "the_systemd_unit_verifies") {
        return;
    }
    let unit = workspace().join("deploy/systemd/pinion-agent.service");
    let text = std::fs::read_to_string(&unit).expect("unit");
    // `verify` checks that ExecStart's binary exists: point it at a
    // pinion-agent in a scratch directory (this test's pinion binary).
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::os::unix::fs::symlink(common::BIN, bin.join("pinion-agent")).expect("symlink");
    assert!(
        text.contains("ExecStart=/usr/local/bin/pinion-agent "),
        "{text}"
    );
    let local = text.replace(
        "/usr/local/bin/pinion-agent",
        &bin.join("pinion-agent").to_string_lossy(),
    );
    let copy = dir.path().join("pinion-agent.service");
    std::fs::write(&copy, local).expect("unit copy");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze runs");
    // `verify` exits 0 on unknown keys; any complaint is a failure here.
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "systemd-analyze verify complains");
}

/// The unit kept no capability, as the DaemonSet did: the agent could not
/// create its cgroup root, since a cgroup hierarchy's root directory is
/// mode 0555 and uid 0 needs CAP_DAC_OVERRIDE there (found by the
/// DaemonSet's first run on a real node, scripts/e2e-cluster.sh). The unit
/// keeps that one capability and no other.
#[test]
fn regression_the_systemd_unit_keeps_the_one_capability_the_cgroup_root_needs() {
    let unit = workspace().join("deploy/systemd/pinion-agent.service");
    let text = std::fs::read_to_string(&unit).expect("unit");
    let bounding: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .collect();
    assert_eq!(bounding, vec!["CAP_DAC_OVERRIDE"], "{text}");
    assert!(text.lines().any(|l| l == "NoNewPrivileges=yes"));
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    stdout(&out)
        .split_whitespace()
        .next()
        .expect("digest")
        .to_string()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json")).expect("valid json")
}

/// Checks a descriptor (`digest`, `size`) against its blob; the blob's path.
fn blob(layout: &Path, descriptor: &serde_json::Value) -> std::path::PathBuf {
    let digest = descriptor["digest"].as_str().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    let path = layout.join("blobs/sha256").join(hex);
    assert_eq!(sha256(&path), hex, "blob {digest} has another digest");
    let size = std::fs::metadata(&path).expect("blob").len();
    assert_eq!(descriptor["size"].as_u64(), Some(size), "size of {digest}");
    path
}

#[test]
fn the_image_layout_is_consistent_and_names_the_daemonsets_image() {
    if !have("sha256sum", "image layout") || !have("ldd", "image layout") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // Small stand-ins for the two binaries (the layout, not their content,
    // is under test; a release build here would take minutes).
    let bins = dir.path().join("bins");
    std::fs::create_dir(&bins).expect("bins");
    for name in ["pinion", "pinion-agent"] {
        std::fs::copy("/bin/true", bins.join(name)).expect("stand-in binary");
    }
    let tarball = dir.path().join("image.tar");
    let out = Command::new(workspace().join("scripts/build-image.sh"))
        .arg("--bin-dir")
        .arg(&bins)
        .arg("--out")
        .arg(&tarball)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .expect("build-image.sh runs");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let layout = dir.path().join("layout");
    std::fs::create_dir(&layout).expect("layout");
    let untar = Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&layout)
        .status()
        .expect("tar");
    assert!(untar.success());
    assert_eq!(
        json(&layout.join("oci-layout")),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    let index = json(&layout.join("index.json"));
    let entry = &index["manifests"][0];
    assert_eq!(
        entry["annotations"]["io.containerd.image.name"],
        "docker.io/library/pinion:latest"
    );
    let manifest = json(&blob(&layout, entry));
    assert_eq!(entry["mediaType"], manifest["mediaType"]);
    let config = json(&blob(&layout, &manifest["config"]));
    let layer = blob(&layout, &manifest["layers"][0]);
    let unzipped = dir.path().join("layer.tar");
    let gunzip = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "gzip -dc '{}' > '{}'",
            layer.display(),
            unzipped.display()
        ))
        .status()
        .expect("gzip");
    assert!(gunzip.success());
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!("sha256:{}", sha256(&unzipped))
    );
    assert_eq!(config["config"]["Entrypoint"][0], "/usr/local/bin/pinion");
    let listing = Command::new("tar")
        .arg("-tf")
        .arg(&unzipped)
        .output()
        .expect("tar -t");
    let listing = stdout(&listing);
    for file in [
        "./usr/local/bin/pinion",
        "./usr/local/bin/pinion-agent",
        "./etc/passwd",
    ] {
        assert!(
            listing.lines().any(|l| l == file),
            "{file} not in the layer:\n{listing}"
        );
    }
    // The DaemonSet runs the image this script names.
    let daemonset =
        std::fs::read_to_string(workspace().join("deploy/kubernetes/pinion-daemonset.yaml"))
            .expect("daemonset");
    assert!(daemonset.contains("image: pinion:latest"));
}

/// The objects of a multi-document YAML stream, sorted by kind and name.
fn objects(text: &str) -> Vec<Value> {
    let mut all: Vec<Value> = serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("yaml document"))
        .filter(|v: &Value| !v.is_null())
        .collect();
    let key = |v: &Value| format!("{:?}/{:?}", v["kind"], v["metadata"]["name"]);
    all.sort_by_key(key);
    all
}

#[test]
fn the_kustomize_base_renders_exactly_deploys_manifests() {
    let deploy = workspace().join("deploy");
    let base = std::fs::read_to_string(deploy.join("kustomization.yaml")).expect("base");
    let base: Value = serde_yaml_ng::from_str(&base).expect("kustomization");
    let mut expected = Vec::new();
    for resource in base["resources"].as_sequence().expect("resources") {
        let path = deploy.join(resource.as_str().expect("path"));
        expected.extend(objects(&std::fs::read_to_string(&path).expect("manifest")));
    }
    let mut listed: Vec<String> = std::fs::read_dir(deploy.join("kubernetes"))
        .expect("deploy/kubernetes")
        .map(|e| {
            format!(
                "kubernetes/{}",
                e.expect("entry").file_name().to_string_lossy()
            )
        })
        .collect();
    listed.sort();
    let resources: Vec<&str> = base["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        resources, listed,
        "every manifest of deploy/kubernetes is in the base"
    );
    if !have("kubectl", "kustomize base") {
        return;
    }
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&deploy)
        .output()
        .expect("kubectl kustomize");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut expected = expected;
    expected.sort_by_key(|v| format!("{:?}/{:?}", v["kind"], v["metadata"]["name"]));
    assert_eq!(objects(&stdout(&out)), expected);
}
