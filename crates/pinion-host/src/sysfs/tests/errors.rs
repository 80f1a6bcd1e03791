//! Every malformed input is a typed error naming the file.

use super::*;

/// Asserts `err` is `Malformed` for a path ending in `suffix`.
fn assert_malformed(err: &DiscoveryError, suffix: &str) {
    match err {
        DiscoveryError::Malformed { path, reason } => {
            assert!(
                path.ends_with(suffix),
                "path {} should end with {suffix}",
                path.display()
            );
            assert!(!reason.is_empty());
            assert!(err.to_string().contains(suffix), "{err}");
        }
        other => panic!("expected malformed {suffix}, got {other:?}"),
    }
}

#[test]
fn missing_root_is_not_found() {
    let tree = Tree::new();
    let err = tree.error();
    assert!(
        matches!(err, DiscoveryError::NotFound { ref path } if path.ends_with(CPU)),
        "{err:?}"
    );
}

#[test]
fn malformed_online_list() {
    let tree = smt_machine();
    tree.file(&format!("{CPU}/online"), "0-x\n");
    assert_malformed(&tree.error(), "cpu/online");
}

#[test]
fn malformed_per_cpu_online_flag() {
    let tree = smt_machine();
    tree.remove(&format!("{CPU}/online"))
        .file(&format!("{CPU}/cpu1/online"), "2\n");
    assert_malformed(&tree.error(), "cpu1/online");
}

#[test]
fn online_cpu_without_directory() {
    let tree = smt_machine();
    tree.file(&format!("{CPU}/online"), "0-4\n");
    let err = tree.error();
    assert!(
        matches!(err, DiscoveryError::MissingCpu { cpu: 4, .. }),
        "{err:?}"
    );
}

#[test]
fn no_online_cpu() {
    let tree = smt_machine();
    tree.file(&format!("{CPU}/online"), "\n");
    assert!(matches!(tree.error(), DiscoveryError::NoOnlineCpus { .. }));
}

#[test]
fn malformed_and_negative_package_ids() {
    for bad in ["abc", "-2", "4294967296"] {
        let tree = smt_machine();
        tree.file(&format!("{CPU}/cpu1/topology/physical_package_id"), bad);
        assert_malformed(&tree.error(), "cpu1/topology/physical_package_id");
    }
}

#[test]
fn malformed_thread_siblings() {
    let tree = smt_machine();
    tree.file(
        &format!("{CPU}/cpu0/topology/thread_siblings_list"),
        "0,,2\n",
    );
    assert_malformed(&tree.error(), "thread_siblings_list");
}

#[test]
fn malformed_cache_files() {
    let tree = smt_machine();
    tree.file(&format!("{CPU}/cpu0/cache/index3/type"), "Victim\n");
    assert_malformed(&tree.error(), "index3/type");
    let tree = smt_machine();
    tree.file(&format!("{CPU}/cpu0/cache/index3/level"), "three\n");
    assert_malformed(&tree.error(), "index3/level");
    let tree = smt_machine();
    tree.remove(&format!("{CPU}/cpu0/cache/index3/shared_cpu_list"));
    assert_malformed(&tree.error(), "index3");
    let tree = smt_machine();
    tree.remove(&format!("{CPU}/cpu0/cache/index3/shared_cpu_list"))
        .file(
            &format!("{CPU}/cpu0/cache/index3/shared_cpu_map"),
            "0000000g\n",
        );
    assert_malformed(&tree.error(), "index3/shared_cpu_map");
}

#[test]
fn malformed_node_files() {
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node0/cpulist"), "0-3\n")
        .file(&format!("{NODE}/node0/distance"), "10 x\n");
    assert_malformed(&tree.error(), "node0/distance");
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node0/cpulist"), "0-3\n")
        .file(&format!("{NODE}/node0/distance"), "10 20\n");
    assert_malformed(&tree.error(), "node0/distance");
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node0/cpumap"), "zz\n");
    assert_malformed(&tree.error(), "node0/cpumap");
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node0/cpulist"), "0-3\n")
        .file(&format!("{NODE}/node0/meminfo"), "Node 0 MemTotal: 12 MB\n");
    assert_malformed(&tree.error(), "node0/meminfo");
}

#[test]
fn malformed_isolated_and_capacity() {
    let tree = smt_machine();
    tree.file(&format!("{CPU}/isolated"), "3-1\n");
    assert_malformed(&tree.error(), "cpu/isolated");
    let tree = smt_machine();
    tree.file(&format!("{CPU}/cpu0/cpu_capacity"), "big\n");
    assert_malformed(&tree.error(), "cpu0/cpu_capacity");
}

#[test]
fn unreadable_entry_is_a_read_error_naming_the_path() {
    let tree = smt_machine();
    tree.remove(&format!("{CPU}/online"));
    fs::create_dir_all(tree.root().join(format!("{CPU}/online"))).expect("mkdir");
    let err = tree.error();
    assert!(
        matches!(err, DiscoveryError::Read { ref path, .. } if path.ends_with("cpu/online")),
        "{err:?}"
    );
}

#[test]
fn non_utf8_file_is_malformed() {
    let tree = smt_machine();
    fs::write(tree.root().join(format!("{CPU}/present")), [0xff, 0xfe]).expect("write");
    assert_malformed(&tree.error(), "cpu/present");
}

/// Discovery of `tree` on another thread: fails rather than hangs when a
/// read blocks.
fn error_promptly(tree: Tree) -> DiscoveryError {
    crate::bounded_read::testing::without_hanging("discovery", move || tree.error())
}

#[test]
fn regression_fifo_in_the_tree_hung_discovery() {
    for rel in [format!("{CPU}/online"), format!("{NODE}/node0/meminfo")] {
        let tree = smt_machine();
        tree.file(&format!("{NODE}/node0/cpulist"), "0-3\n");
        fs::remove_file(tree.root().join(&rel)).ok();
        crate::bounded_read::testing::mkfifo(&tree.root().join(&rel));
        let err = error_promptly(tree);
        assert!(
            matches!(err, DiscoveryError::Read { ref path, ref source }
                if path.ends_with(&rel) && crate::bounded_read::is_not_regular(source)),
            "{rel}: {err:?}"
        );
        assert!(
            err.to_string().ends_with("not a regular file (a fifo)"),
            "{err}"
        );
    }
}

#[test]
fn regression_device_in_the_tree_was_read_as_if_a_file() {
    let tree = smt_machine();
    let online = tree.root().join(format!("{CPU}/online"));
    fs::remove_file(&online).expect("rm");
    std::os::unix::fs::symlink("/dev/zero", &online).expect("symlink");
    let err = error_promptly(tree);
    assert!(
        matches!(err, DiscoveryError::Read { ref path, ref source }
            if path.ends_with("cpu/online") && crate::bounded_read::is_not_regular(source)),
        "{err:?}"
    );
}

#[test]
fn file_over_one_mib_is_malformed_naming_the_cap() {
    let tree = smt_machine();
    let mut text = "0-3\n".to_string();
    text.push_str(&" ".repeat((1 << 20) + 1 - text.len()));
    tree.file(&format!("{CPU}/present"), &text);
    let err = tree.error();
    assert_malformed(&err, "cpu/present");
    assert!(
        err.to_string().ends_with("larger than 1048576 bytes"),
        "{err}"
    );
    text.pop();
    tree.file(&format!("{CPU}/present"), &text);
    discover(tree.root()).expect("a file of exactly 1 MiB is read");
}
