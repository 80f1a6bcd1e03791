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
