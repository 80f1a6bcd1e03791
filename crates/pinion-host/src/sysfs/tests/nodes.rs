//! NUMA nodes.

use super::*;

/// `smt_machine` with node directories: node 0 = cpus 0-1, node 1 = 2-3.
fn two_nodes() -> Tree {
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node0/cpulist"), "0-1\n")
        .file(&format!("{NODE}/node0/distance"), "10 20\n")
        .file(&format!("{NODE}/node1/cpulist"), "2-3\n")
        .file(&format!("{NODE}/node1/distance"), "20 10\n");
    tree
}

#[test]
fn nodes_come_with_distances() {
    let t = two_nodes().discover();
    assert_eq!(
        groups(t.numa_cpus()),
        vec![(0, "0-1".into()), (1, "2-3".into())]
    );
    assert_eq!(t.numa_distance(0, 1), Some(20));
    assert_eq!(t.numa_distance(1, 1), Some(10));
}

#[test]
fn cpumap_only_nodes_with_sparse_ids() {
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node0/cpumap"), "00000000,00000003\n")
        .file(&format!("{NODE}/node33/cpumap"), "0000000c\n");
    let t = tree.discover();
    assert_eq!(
        groups(t.numa_cpus()),
        vec![(0, "0-1".into()), (33, "2-3".into())]
    );
    assert!(t.numa_nodes().iter().all(|n| n.distances.is_empty()));
}

#[test]
fn cpu_less_nodes_are_kept_with_distances_and_memory() {
    let tree = two_nodes();
    tree.file(&format!("{NODE}/node0/distance"), "10 20 17\n")
        .file(&format!("{NODE}/node1/distance"), "20 10 28\n")
        .file(&format!("{NODE}/node2/cpulist"), "\n")
        .file(&format!("{NODE}/node2/distance"), "17 28 10\n")
        .file(
            &format!("{NODE}/node2/meminfo"),
            "Node 2 MemTotal:       1048576 kB\nNode 2 MemFree:  12 kB\n",
        );
    let t = tree.discover();
    assert_eq!(t.cpuless_numa_nodes(), vec![2]);
    assert_eq!(t.numa_distance(2, 0), Some(17));
    assert_eq!(t.numa_nodes()[2].memory_bytes, Some(1024 * 1024 * 1024));
    assert_eq!(t.num_numa_nodes(), 2);
}

#[test]
fn a_cpu_listed_by_several_nodes_belongs_to_the_lowest() {
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node0/cpulist"), "0-3\n")
        .file(&format!("{NODE}/node1/cpulist"), "0-3\n");
    let t = tree.discover();
    assert_eq!(groups(t.numa_cpus()), vec![(0, "0-3".into())]);
    assert_eq!(t.cpuless_numa_nodes(), vec![1]);
}

#[test]
fn cpus_no_node_lists_go_to_node_0() {
    let tree = smt_machine();
    tree.file(&format!("{NODE}/node1/cpulist"), "1,3\n")
        .file(&format!("{NODE}/node1/distance"), "21 10\n");
    let t = tree.discover();
    assert_eq!(
        groups(t.numa_cpus()),
        vec![(0, "0,2".into()), (1, "1,3".into())]
    );
    assert_eq!(t.numa_distance(1, 0), Some(21));
}

#[test]
fn node_directory_without_nodes_is_one_node_0() {
    let tree = smt_machine();
    tree.file(&format!("{NODE}/online"), "0\n");
    let t = tree.discover();
    assert_eq!(groups(t.numa_cpus()), vec![(0, "0-3".into())]);
    assert_eq!(t.numa_nodes().len(), 1);
}

#[path = "../../../../pinion-core/tests/common/shared.rs"]
mod shared;

/// `../shared/topologies/<machine>`'s `sys` copied into a temporary
/// directory (read in place, copied only at test time, to be damaged).
fn copy_of(machine: &str) -> Option<Tree> {
    fn copy(from: &Path, to: &Path) {
        fs::create_dir_all(to).expect("mkdir");
        for entry in fs::read_dir(from).expect("read dir") {
            let entry = entry.expect("entry");
            let (source, target) = (entry.path(), to.join(entry.file_name()));
            let kind = entry.file_type().expect("file type");
            if kind.is_symlink() {
                let link = fs::read_link(&source).expect("read link");
                std::os::unix::fs::symlink(link, &target).expect("symlink");
            } else if kind.is_dir() {
                copy(&source, &target);
            } else {
                fs::copy(&source, &target).expect("copy");
            }
        }
    }
    let machine = shared::shared(&format!("topologies/{machine}"))?;
    let tree = Tree::new();
    copy(&machine.join("sys"), &tree.root().join("sys"));
    Some(tree)
}

/// sysfs report, section 6: with node0 and node3 removed from an SNC2
/// Xeon, their CPUs go to a node 0 discovery creates. It was counted
/// against the other nodes' `distance` files, so node1's correct 2×2 row
/// was blamed ("2 distances for 3 nodes"); and had it passed, its columns
/// would have been read as nodes 0 and 1 instead of 1 and 2.
#[test]
fn regression_a_created_node_0_is_not_counted_against_distance_files() {
    let Some(tree) = copy_of("x86-2s-intel-xeon-gold-6230-ht-snc2") else {
        return;
    };
    tree.remove(&format!("{NODE}/node0"))
        .remove(&format!("{NODE}/node3"))
        .file(&format!("{NODE}/node1/distance"), "10 21\n")
        .file(&format!("{NODE}/node2/distance"), "21 10\n");
    let t = tree.discover();
    let ids: Vec<u32> = t.numa_nodes().iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 1, 2]);
    assert_eq!(t.numa_cpus()[&1].len(), 20);
    assert_eq!(t.numa_cpus()[&0].len(), 40, "node0's and node3's cpus");
    // No column for the created node: its distances are unknown, and no
    // column is taken for another node's.
    assert!(t.numa_nodes().iter().all(|n| n.distances.is_empty()));
    assert_eq!(t.numa_distance(1, 0), None);
    let info = pinion_core::topomgr::NumaInfo::from_topology(&t).expect("numa info");
    assert!(!info.has_distances());

    // Files that keep a column for node 0 give it its distances.
    tree.file(&format!("{NODE}/node1/distance"), "21 10 21\n")
        .file(&format!("{NODE}/node2/distance"), "11 21 10\n");
    let t = tree.discover();
    assert!(t.numa_nodes()[0].distances.is_empty(), "created: no row");
    assert_eq!(t.numa_distance(1, 0), Some(21));
    assert_eq!(t.numa_distance(1, 1), Some(10));
    assert_eq!(t.numa_distance(1, 2), Some(21));
    assert_eq!(t.numa_distance(2, 0), Some(11));

    // A wrong file is the one blamed, with the count of the listed nodes.
    tree.file(&format!("{NODE}/node1/distance"), "10 21\n")
        .file(&format!("{NODE}/node2/distance"), "21 10 21 21\n");
    let err = tree.error().to_string();
    assert!(err.contains("node2/distance"), "{err}");
    assert!(!err.contains("node1/distance"), "{err}");
    assert!(
        err.contains("4 distances for the 2 nodes the tree lists (or 3 with node 0"),
        "{err}"
    );
}
