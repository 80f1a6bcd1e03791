use std::fs;

use super::*;
use crate::cgroup::fake::FakePartitions;
use crate::cgroup::{CgroupVersion, Cgroups, CpusetHost};

fn set(text: &str) -> CpuSet {
    CpuSet::parse_list(text).unwrap()
}

fn chain() -> Vec<PathBuf> {
    vec![PathBuf::from("pods"), PathBuf::from("pods/c1")]
}

fn writes(files: &FakePartitions) -> Vec<String> {
    files
        .writes
        .iter()
        .map(|(dir, file, value)| format!("{dir}/{file}={}", value.trim()))
        .collect()
}

#[test]
fn make_writes_in_the_kernels_order_and_reads_the_partition_back() {
    let mut files = FakePartitions::default();
    let outcome = make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated);
    assert_eq!(
        outcome,
        PartitionOutcome::Made {
            partition: "isolated".to_string(),
            exclusive_effective: set("2-3"),
        }
    );
    assert_eq!(
        writes(&files),
        vec![
            "pods/cpuset.cpus.exclusive=2-3",
            "pods/c1/cpuset.cpus=2-3",
            "pods/c1/cpuset.cpus.exclusive=2-3",
            "pods/c1/cpuset.cpus.partition=isolated",
        ]
    );
    assert_eq!(isolated(&files, Path::new("")), Some(set("2-3")));
}

#[test]
fn unmake_writes_member_then_empties_exclusive_child_first() {
    let mut files = FakePartitions::default();
    make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated);
    files.writes.clear();
    unmake(&mut files, &chain(), &set("2-3")).unwrap();
    assert_eq!(
        writes(&files),
        vec![
            "pods/c1/cpuset.cpus.partition=member",
            "pods/c1/cpuset.cpus.exclusive=",
            "pods/cpuset.cpus.exclusive=",
        ]
    );
    assert_eq!(files.partition("pods/c1"), "member");
    assert_eq!(isolated(&files, Path::new("")), Some(CpuSet::new()));
}

#[test]
fn a_partition_the_kernel_reads_back_invalid_falls_back_with_its_reason_and_is_taken_back() {
    let mut files = FakePartitions {
        reject: Some("Parent is not a partition root".to_string()),
        ..FakePartitions::default()
    };
    let outcome = make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated);
    assert_eq!(
        outcome,
        PartitionOutcome::Fallback {
            reason: "Parent is not a partition root".to_string()
        }
    );
    // Nothing stays claimed: a sibling may take the CPUs.
    assert_eq!(files.partition("pods/c1"), "member");
    assert_eq!(files.get(Path::new("pods"), "cpuset.cpus.exclusive"), "");
}

#[test]
fn a_refused_write_falls_back_naming_the_file_and_takes_back_the_ancestors_claim() {
    let mut files = FakePartitions::default();
    files.fail_files.insert("cpuset.cpus.partition".to_string());
    let PartitionOutcome::Fallback { reason } =
        make(&mut files, &chain(), &set("2-3"), PartitionMode::Root)
    else {
        panic!("a refused write made a partition");
    };
    assert!(reason.contains("cpuset.cpus.partition"), "{reason}");
    assert_eq!(files.get(Path::new("pods"), "cpuset.cpus.exclusive"), "");
}

#[test]
fn a_kernel_without_exclusive_files_falls_back_naming_6_7_and_writes_nothing() {
    let mut files = FakePartitions {
        unsupported: true,
        ..FakePartitions::default()
    };
    let PartitionOutcome::Fallback { reason } =
        make(&mut files, &chain(), &set("2"), PartitionMode::Isolated)
    else {
        panic!("made a partition without the files");
    };
    assert!(reason.contains("6.7"), "{reason}");
    assert!(files.writes.is_empty());
    assert_eq!(isolated(&files, Path::new("")), None);
    assert!(unmake(&mut files, &chain(), &set("2")).is_ok());
}

#[test]
fn two_partitions_under_one_ancestor_share_its_claim_and_release_only_their_own() {
    let mut files = FakePartitions::default();
    let second = vec![PathBuf::from("pods"), PathBuf::from("pods/c2")];
    make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated);
    make(&mut files, &second, &set("5"), PartitionMode::Isolated);
    assert_eq!(
        files.get(Path::new("pods"), "cpuset.cpus.exclusive"),
        "2-3,5"
    );
    unmake(&mut files, &chain(), &set("2-3")).unwrap();
    assert_eq!(files.get(Path::new("pods"), "cpuset.cpus.exclusive"), "5");
    assert_eq!(files.partition("pods/c2"), "isolated");
    assert_eq!(isolated(&files, Path::new("")), Some(set("5")));
}

#[test]
fn cgroupfs_run_partition_writes_the_files_of_pinions_root_and_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = dir.path().to_path_buf();
    let root = mount.join("pinion");
    let run = root.join("r1");
    fs::create_dir_all(&run).unwrap();
    for d in [&root, &run] {
        fs::write(d.join("cpuset.cpus.exclusive"), "").unwrap();
    }
    fs::write(mount.join(ISOLATED_FILE), "6\n").unwrap();
    let mut cgroups = Cgroups::new(CgroupVersion::V2, mount.clone(), root.clone());
    let target = PartitionTarget::Run(CgroupName::new("r1").unwrap());
    let outcome = cgroups.make_partition(&target, &set("2-3"), PartitionMode::Isolated);
    // A plain file reads back what was written.
    assert!(
        matches!(outcome, PartitionOutcome::Made { ref partition, .. } if partition == "isolated"),
        "{outcome:?}"
    );
    assert_eq!(
        fs::read_to_string(root.join("cpuset.cpus.exclusive")).unwrap(),
        "2-3"
    );
    assert_eq!(fs::read_to_string(run.join("cpuset.cpus")).unwrap(), "2-3");
    assert_eq!(cgroups.isolated_cpus(), Some(set("6")));
    cgroups.unmake_partition(&target, &set("2-3")).unwrap();
    assert_eq!(
        fs::read_to_string(run.join("cpuset.cpus.partition")).unwrap(),
        "member"
    );
    assert_eq!(
        fs::read_to_string(root.join("cpuset.cpus.exclusive")).unwrap(),
        "\n"
    );
}

#[test]
fn root_isolated_reads_the_v2_roots_list_and_is_none_without_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(root_isolated(dir.path()), None);
    let cg = dir.path().join("sys/fs/cgroup");
    fs::create_dir_all(&cg).unwrap();
    fs::write(cg.join(ISOLATED_FILE), "2-3,6\n").unwrap();
    assert_eq!(root_isolated(dir.path()), Some(set("2-3,6")));
    fs::write(cg.join(ISOLATED_FILE), "\n").unwrap();
    assert_eq!(root_isolated(dir.path()), Some(CpuSet::new()));
}

#[test]
fn regression_fifo_as_root_isolated_hung_pinion_topology() {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::bounded_read::testing::mkfifo(&dir.path().join("sys/fs/cgroup").join(ISOLATED_FILE));
    let root = dir.path().to_path_buf();
    let isolated = crate::bounded_read::testing::without_hanging("root_isolated", move || {
        root_isolated(&root)
    });
    assert_eq!(isolated, None);
}

#[test]
fn cgroup_v1_falls_back_and_touches_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = dir.path().to_path_buf();
    let mut cgroups = Cgroups::new(CgroupVersion::V1, mount.clone(), mount.join("pinion"));
    let target = PartitionTarget::Run(CgroupName::new("r1").unwrap());
    assert_eq!(
        cgroups.make_partition(&target, &set("1"), PartitionMode::Isolated),
        PartitionOutcome::Fallback {
            reason: crate::cgroup::V1_NO_PARTITIONS.to_string()
        }
    );
    assert!(!mount.join("pinion").exists());
    assert_eq!(cgroups.isolated_cpus(), None);
}

/// A runtime container's cgroup is often gone when its stop is relayed
/// (the runtime removed it): the ancestors must still lose its CPUs from
/// their `cpuset.cpus.exclusive`, or they stay claimed for good.
#[test]
fn regression_unmake_of_a_removed_cgroup_still_empties_the_ancestors_claims() {
    let mut files = FakePartitions::default();
    let second = vec![PathBuf::from("pods"), PathBuf::from("pods/c2")];
    make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated);
    make(&mut files, &second, &set("5"), PartitionMode::Isolated);
    files.remove_dir("pods/c1");
    files.writes.clear();
    unmake(&mut files, &chain(), &set("2-3")).unwrap();
    assert_eq!(writes(&files), vec!["pods/cpuset.cpus.exclusive=5"]);
    assert_eq!(isolated(&files, Path::new("")), Some(set("5")));
    // The pod's cgroup gone too: nothing left to write below the mount.
    files.remove_dir("pods");
    files.writes.clear();
    unmake(&mut files, &second, &set("5")).unwrap();
    assert!(files.writes.is_empty(), "{:?}", files.writes);
}

/// The same on the real cgroupfs layout: a missing container directory is
/// skipped, its parent's claim is taken back.
#[test]
fn regression_cgroupfs_container_partition_taken_apart_after_the_runtime_removed_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = dir.path().to_path_buf();
    let pod = mount.join("kubepods/podu");
    let leaf = pod.join("c1");
    fs::create_dir_all(&leaf).unwrap();
    for d in [&mount.join("kubepods"), &pod, &leaf] {
        fs::write(d.join("cpuset.cpus.exclusive"), "").unwrap();
    }
    let mut cgroups = Cgroups::new(CgroupVersion::V2, mount.clone(), mount.join("pinion"));
    let cgroup = crate::cgroup::ContainerCgroup::resolve("/kubepods/podu/c1").unwrap();
    let target = PartitionTarget::Container(cgroup);
    let outcome = cgroups.make_partition(&target, &set("4-5"), PartitionMode::Isolated);
    assert!(
        matches!(outcome, PartitionOutcome::Made { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        fs::read_to_string(pod.join("cpuset.cpus.exclusive")).unwrap(),
        "4-5"
    );
    fs::remove_dir_all(&leaf).unwrap();
    cgroups.unmake_partition(&target, &set("4-5")).unwrap();
    for d in [mount.join("kubepods"), pod] {
        assert_eq!(
            fs::read_to_string(d.join("cpuset.cpus.exclusive")).unwrap(),
            "\n",
            "{}",
            d.display()
        );
    }
    assert!(!leaf.exists(), "the removed cgroup is not created again");
}

/// The fallback reason of a kernel without `cpuset.cpus.exclusive` names
/// the topmost directory, the same for every cgroup below it, so the
/// agent logs it once rather than once per container.
#[test]
fn regression_an_old_kernels_fallback_reason_is_the_same_for_every_cgroup() {
    let mut files = FakePartitions {
        unsupported: true,
        ..FakePartitions::default()
    };
    let second = vec![PathBuf::from("pods"), PathBuf::from("pods/c2")];
    let reasons: Vec<PartitionOutcome> = [chain(), second]
        .iter()
        .map(|c| make(&mut files, c, &set("2"), PartitionMode::Isolated))
        .collect();
    assert_eq!(reasons[0], reasons[1]);
    let PartitionOutcome::Fallback { reason } = &reasons[0] else {
        panic!("made without the files");
    };
    assert!(
        reason.starts_with("pods/cpuset.cpus.exclusive is missing"),
        "{reason}"
    );
}

/// Found from outside (sessions 47–49's notes): the take-down removed the
/// partition's CPUs from every ancestor's `cpuset.cpus.exclusive`, also
/// from one an administrator had listed them in before Pinion came, so
/// that partitions below could use them. Pinion now records what it adds
/// (the directory's `user.pinion.exclusive`) and takes back only that.
#[test]
fn regression_take_down_leaves_an_ancestors_own_claim_listed() {
    let mut files = FakePartitions::default();
    files
        .write(Path::new("pods"), "cpuset.cpus.exclusive", "1-7")
        .unwrap();
    let three = vec![
        PathBuf::from("pods"),
        PathBuf::from("pods/p1"),
        PathBuf::from("pods/p1/c1"),
    ];
    files.writes.clear();
    let outcome = make(&mut files, &three, &set("2-3"), PartitionMode::Isolated);
    assert!(
        matches!(outcome, PartitionOutcome::Made { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        writes(&files),
        vec![
            "pods/p1/cpuset.cpus.exclusive=2-3",
            "pods/p1/c1/cpuset.cpus=2-3",
            "pods/p1/c1/cpuset.cpus.exclusive=2-3",
            "pods/p1/c1/cpuset.cpus.partition=isolated",
        ],
        "the administrator's claim already lists the cpus: not written"
    );
    assert_eq!(files.records.get(Path::new("pods")), None);
    assert_eq!(
        files.records.get(Path::new("pods/p1")).map(String::as_str),
        Some("2-3")
    );
    files.writes.clear();
    unmake(&mut files, &three, &set("2-3")).unwrap();
    assert_eq!(
        writes(&files),
        vec![
            "pods/p1/c1/cpuset.cpus.partition=member",
            "pods/p1/c1/cpuset.cpus.exclusive=",
            "pods/p1/cpuset.cpus.exclusive=",
        ]
    );
    assert_eq!(files.get(Path::new("pods"), "cpuset.cpus.exclusive"), "1-7");
    assert_eq!(
        files.records.get(Path::new("pods/p1")).map(String::as_str),
        Some("")
    );
}

/// Where the record cannot be kept (a filesystem without extended
/// attributes), no claim is made that the take-down could not tell apart:
/// the partition falls back, naming the attribute.
#[test]
fn a_record_that_cannot_be_written_falls_back_naming_it_and_claims_nothing() {
    let mut files = FakePartitions::default();
    files
        .fail_files
        .insert(PartitionFile::Record.name().to_string());
    let PartitionOutcome::Fallback { reason } =
        make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated)
    else {
        panic!("made a partition without its record");
    };
    assert!(reason.contains("pods/user.pinion.exclusive"), "{reason}");
    assert_eq!(files.get(Path::new("pods"), "cpuset.cpus.exclusive"), "");
    assert!(
        files.writes.iter().all(|(dir, _, _)| dir == "pods/c1"),
        "only the container's cgroup is set back to a member: {:?}",
        files.writes
    );
}

/// A take-down whose ancestor write failed keeps that ancestor's record:
/// the next try removes the same CPUs (the agent tries again each pass).
#[test]
fn a_refused_ancestor_write_keeps_its_record_for_the_next_try() {
    let mut files = FakePartitions::default();
    make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated);
    files.fail_files.insert("cpuset.cpus.exclusive".to_string());
    assert!(unmake(&mut files, &chain(), &set("2-3")).is_err());
    assert_eq!(
        files.records.get(Path::new("pods")).map(String::as_str),
        Some("2-3")
    );
    files.fail_files.clear();
    unmake(&mut files, &chain(), &set("2-3")).unwrap();
    assert_eq!(files.get(Path::new("pods"), "cpuset.cpus.exclusive"), "");
    assert_eq!(
        files.records.get(Path::new("pods")).map(String::as_str),
        Some("")
    );
}

/// A record damaged by hand counts as empty: nothing is removed that
/// Pinion cannot tell its own, and the next make writes it whole.
#[test]
fn a_damaged_record_removes_nothing_and_is_written_whole_again() {
    let mut files = FakePartitions::default();
    make(&mut files, &chain(), &set("2-3"), PartitionMode::Isolated);
    files
        .records
        .insert(PathBuf::from("pods"), "two-three".to_string());
    unmake(&mut files, &chain(), &set("2-3")).unwrap();
    assert_eq!(files.get(Path::new("pods"), "cpuset.cpus.exclusive"), "2-3");
    let second = vec![PathBuf::from("pods"), PathBuf::from("pods/c2")];
    make(&mut files, &second, &set("5"), PartitionMode::Isolated);
    assert_eq!(
        files.records.get(Path::new("pods")).map(String::as_str),
        Some("5")
    );
}

/// The same on a real filesystem: the record is the directory's extended
/// attribute, and an ancestor's own claim survives the take-down.
#[test]
fn cgroupfs_record_is_an_extended_attribute_and_an_ancestors_claim_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mount = dir.path().to_path_buf();
    let kubepods = mount.join("kubepods");
    let pod = kubepods.join("podu");
    let leaf = pod.join("c1");
    fs::create_dir_all(&leaf).unwrap();
    for d in [&kubepods, &pod, &leaf] {
        fs::write(d.join("cpuset.cpus.exclusive"), "").unwrap();
    }
    fs::write(kubepods.join("cpuset.cpus.exclusive"), "1-7\n").unwrap();
    let mut cgroups = Cgroups::new(CgroupVersion::V2, mount.clone(), mount.join("pinion"));
    let cgroup = crate::cgroup::ContainerCgroup::resolve("/kubepods/podu/c1").unwrap();
    let target = PartitionTarget::Container(cgroup);
    let outcome = cgroups.make_partition(&target, &set("4-5"), PartitionMode::Isolated);
    assert!(
        matches!(outcome, PartitionOutcome::Made { .. }),
        "{outcome:?}"
    );
    let record = |d: &Path| xattr::get(d, PartitionFile::Record.name()).unwrap();
    assert_eq!(record(&pod), Some(b"4-5".to_vec()));
    assert_eq!(record(&kubepods), None);
    fs::remove_dir_all(&leaf).unwrap();
    cgroups.unmake_partition(&target, &set("4-5")).unwrap();
    assert_eq!(
        fs::read_to_string(kubepods.join("cpuset.cpus.exclusive")).unwrap(),
        "1-7\n"
    );
    assert_eq!(
        fs::read_to_string(pod.join("cpuset.cpus.exclusive")).unwrap(),
        "\n"
    );
    assert_eq!(record(&pod), Some(Vec::new()));
}
