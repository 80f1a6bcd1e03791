//! Online state, cores, sockets, dies, caches and core types.

use super::*;

#[test]
fn smt_machine_has_kubelet_core_ids_and_one_l3() {
    let t = smt_machine().discover();
    assert_eq!(
        groups(t.cores()),
        vec![(0, "0,2".into()), (1, "1,3".into())]
    );
    assert_eq!(groups(t.sockets()), vec![(0, "0-3".into())]);
    assert_eq!(groups(t.uncores()), vec![(0, "0-3".into())]);
    assert_eq!(groups(t.llcs()), vec![(0, "0-3".into())]);
    assert_eq!(groups(t.numa_cpus()), vec![(0, "0-3".into())]);
    assert!(t.offline().is_empty() && t.isolated().is_empty() && t.nohz_full().is_empty());
    assert!(t
        .cpus()
        .iter()
        .all(|c| c.die.is_none() && c.core_type.is_none()));
}

#[test]
fn offline_cpu0_without_topology_is_listed_offline_and_cores_use_online_threads() {
    let tree = smt_machine();
    tree.file(&format!("{CPU}/online"), "1-3\n")
        .remove(&format!("{CPU}/cpu0/topology"))
        .remove(&format!("{CPU}/cpu0/cache"));
    let t = tree.discover();
    assert_eq!(*t.all_cpus(), set("1-3"));
    assert_eq!(*t.offline(), set("0"));
    assert_eq!(groups(t.cores()), vec![(1, "1,3".into()), (2, "2".into())]);
    assert_eq!(groups(t.uncores()), vec![(0, "1-3".into())]);
}

#[test]
fn sparse_cpu_ids_without_cpu0() {
    let tree = Tree::new();
    tree.file(&format!("{CPU}/online"), "6-7,10\n");
    for cpu in [6, 7, 10] {
        tree.cpu(cpu, &cpu.to_string(), "-1");
    }
    let t = tree.discover();
    assert_eq!(*t.all_cpus(), set("6-7,10"));
    assert_eq!(t.num_cores(), 3);
    assert_eq!(
        groups(t.sockets()),
        vec![(0, "6-7,10".into())],
        "package -1 is socket 0"
    );
    assert_eq!(
        groups(t.uncores()),
        vec![(0, "6-7,10".into())],
        "no caches: one group"
    );
}

#[test]
fn missing_online_and_present_files_fall_back_to_cpu_dirs() {
    let tree = smt_machine();
    tree.remove(&format!("{CPU}/online"))
        .remove(&format!("{CPU}/present"))
        .file(&format!("{CPU}/cpu3/online"), "0\n")
        .file(&format!("{CPU}/cpu2/online"), "1\n");
    let t = tree.discover();
    assert_eq!(*t.all_cpus(), set("0-2"));
    assert_eq!(*t.offline(), set("3"));
}

#[test]
fn cache_groups_without_ids_are_labelled_by_their_lowest_cpu() {
    let tree = smt_machine();
    for cpu in 0..4 {
        let l2 = if cpu < 2 { "0-1" } else { "2-3" };
        tree.remove(&format!("{CPU}/cpu{cpu}/cache/index3"))
            .cache(cpu, 2, 2, "Unified", l2);
    }
    let t = tree.discover();
    assert_eq!(groups(t.llcs()), vec![(0, "0-1".into()), (2, "2-3".into())]);
}

#[test]
fn hex_shared_cpu_map_is_read_when_the_list_is_missing() {
    let tree = smt_machine();
    for cpu in 0..4 {
        let dir = format!("{CPU}/cpu{cpu}/cache/index3");
        let mask = if cpu % 2 == 0 { "00000005" } else { "0000000a" };
        tree.remove(&format!("{dir}/shared_cpu_list"))
            .remove(&format!("{dir}/id"))
            .file(
                &format!("{dir}/shared_cpu_map"),
                &format!("00000000,{mask}\n"),
            );
    }
    let t = tree.discover();
    assert_eq!(groups(t.llcs()), vec![(0, "0,2".into()), (1, "1,3".into())]);
}

#[test]
fn kernel_cache_ids_label_groups_unless_they_repeat() {
    let tree = smt_machine();
    for cpu in 0..4 {
        let dir = format!("{CPU}/cpu{cpu}/cache/index3");
        let (shared, id) = if cpu < 2 { ("0-1", "17") } else { ("2-3", "8") };
        tree.file(&format!("{dir}/shared_cpu_list"), shared)
            .file(&format!("{dir}/id"), id);
    }
    assert_eq!(
        groups(tree.discover().llcs()),
        vec![(8, "2-3".into()), (17, "0-1".into())]
    );
    tree.file(&format!("{CPU}/cpu2/cache/index3/id"), "17");
    assert_eq!(
        groups(tree.discover().llcs()),
        vec![(0, "0-1".into()), (2, "2-3".into())],
        "a repeated id falls back to lowest-cpu labels"
    );
}

#[test]
fn data_cache_is_the_llc_when_no_unified_cache_exists() {
    let tree = smt_machine();
    for cpu in 0..4 {
        tree.remove(&format!("{CPU}/cpu{cpu}/cache/index3"));
    }
    let t = tree.discover();
    assert_eq!(groups(t.llcs()), vec![(0, "0,2".into()), (1, "1,3".into())]);
}

#[test]
fn unified_cache_wins_over_a_higher_data_cache() {
    let tree = smt_machine();
    for cpu in 0..4 {
        tree.remove(&format!("{CPU}/cpu{cpu}/cache/index3"))
            .cache(cpu, 2, 2, "Unified", "0-3")
            .cache(cpu, 3, 3, "Data", &cpu.to_string());
    }
    assert_eq!(groups(tree.discover().llcs()), vec![(0, "0-3".into())]);
}

/// kubelet's uncore group is the L3 (cAdvisor's uncore caches are the
/// caches above L2); without one it is the socket, while the LLC stays
/// the L2.
#[test]
fn uncore_falls_back_to_the_socket_without_an_l3_and_llc_keeps_the_l2() {
    let tree = smt_machine();
    for cpu in 0..4 {
        let l2 = if cpu < 2 { "0-1" } else { "2-3" };
        tree.remove(&format!("{CPU}/cpu{cpu}/cache/index3"))
            .cache(cpu, 2, 2, "Unified", l2)
            .file(
                &format!("{CPU}/cpu{cpu}/topology/physical_package_id"),
                "7\n",
            );
    }
    let t = tree.discover();
    assert_eq!(groups(t.uncores()), vec![(7, "0-3".into())]);
    assert_eq!(groups(t.llcs()), vec![(0, "0-1".into()), (2, "2-3".into())]);
    let aligned = t.with_llc_as_uncore();
    assert_eq!(
        groups(aligned.uncores()),
        vec![(0, "0-1".into()), (2, "2-3".into())]
    );
}

#[test]
fn uncore_is_the_first_cache_above_l2_even_below_a_higher_one() {
    let tree = smt_machine();
    for cpu in 0..4 {
        let half = if cpu < 2 { "0-1" } else { "2-3" };
        tree.file(
            &format!("{CPU}/cpu{cpu}/cache/index3/shared_cpu_list"),
            half,
        )
        .file(
            &format!("{CPU}/cpu{cpu}/cache/index3/id"),
            if cpu < 2 { "4" } else { "5" },
        )
        .cache(cpu, 4, 4, "Unified", "0-3")
        .file(&format!("{CPU}/cpu{cpu}/cache/index4/id"), "9");
    }
    let t = tree.discover();
    assert_eq!(
        groups(t.uncores()),
        vec![(4, "0-1".into()), (5, "2-3".into())]
    );
    assert_eq!(groups(t.llcs()), vec![(9, "0-3".into())]);
}

#[test]
fn no_cache_directories_put_every_cpu_in_group_0() {
    let tree = smt_machine();
    for cpu in 0..4 {
        tree.remove(&format!("{CPU}/cpu{cpu}/cache"));
    }
    assert_eq!(groups(tree.discover().llcs()), vec![(0, "0-3".into())]);
}

#[test]
fn die_ids_are_made_unique_per_socket() {
    let tree = Tree::new();
    tree.file(&format!("{CPU}/online"), "0-3\n");
    for cpu in 0..4 {
        tree.cpu(cpu, &cpu.to_string(), &(cpu / 2).to_string())
            .file(&format!("{CPU}/cpu{cpu}/topology/die_id"), "0\n");
    }
    let t = tree.discover();
    let dies: Vec<Option<u32>> = t.cpus().iter().map(|c| c.die).collect();
    assert_eq!(dies, vec![Some(0), Some(0), Some(2), Some(2)]);
    assert_eq!(t.num_sockets(), 2);
}

#[test]
fn intel_hybrid_core_types_come_from_the_cpu_pmus() {
    let tree = smt_machine();
    tree.file("sys/devices/cpu_core/cpus", "0-1\n")
        .file("sys/devices/cpu_atom/cpus", "2-3\n");
    let t = tree.discover();
    let kinds: Vec<Option<&str>> = t.cpus().iter().map(|c| c.core_type.as_deref()).collect();
    assert_eq!(
        kinds,
        vec![
            Some("intel_core"),
            Some("intel_core"),
            Some("intel_atom"),
            Some("intel_atom")
        ]
    );
}

#[test]
fn equal_capacities_give_no_core_type_and_different_ones_do() {
    let tree = smt_machine();
    for cpu in 0..4 {
        tree.file(&format!("{CPU}/cpu{cpu}/cpu_capacity"), "1024\n");
    }
    assert!(tree.discover().cpus().iter().all(|c| c.core_type.is_none()));
    tree.file(&format!("{CPU}/cpu3/cpu_capacity"), "512\n");
    let t = tree.discover();
    assert_eq!(
        t.cpu(0).and_then(|c| c.core_type.as_deref()),
        Some("capacity-1024")
    );
    assert_eq!(
        t.cpu(3).and_then(|c| c.core_type.as_deref()),
        Some("capacity-512")
    );
}

#[test]
fn isolated_and_nohz_full_accept_every_kernel_spelling_of_empty() {
    for nohz in ["", "\n", "\0\n", "              (null)\n"] {
        let tree = smt_machine();
        tree.file(&format!("{CPU}/nohz_full"), nohz)
            .file(&format!("{CPU}/isolated"), "\n");
        let t = tree.discover();
        assert!(t.nohz_full().is_empty(), "{nohz:?}");
        assert!(t.isolated().is_empty());
    }
    let tree = smt_machine();
    tree.file(&format!("{CPU}/nohz_full"), "1-3\n")
        .file(&format!("{CPU}/isolated"), "2-3\n");
    let t = tree.discover();
    assert_eq!(*t.nohz_full(), set("1-3"));
    assert_eq!(*t.isolated(), set("2-3"));
}

#[test]
fn trailing_nul_bytes_are_ignored() {
    let tree = smt_machine();
    tree.file(
        &format!("{CPU}/cpu0/topology/thread_siblings_list"),
        "0,2\n\0",
    );
    assert_eq!(tree.discover().num_cores(), 2);
}

#[test]
fn sockets_follow_package_cpus_or_core_siblings() {
    for group_file in ["package_cpus_list", "core_siblings_list"] {
        let tree = Tree::new();
        tree.file(&format!("{CPU}/online"), "0-3\n");
        for cpu in 0..4 {
            let (package, members) = if cpu % 2 == 0 {
                ("3", "0,2")
            } else {
                ("8", "1,3")
            };
            tree.cpu(cpu, &cpu.to_string(), package).file(
                &format!("{CPU}/cpu{cpu}/topology/{group_file}"),
                &format!("{members}\n"),
            );
        }
        let t = tree.discover();
        assert_eq!(
            groups(t.sockets()),
            vec![(3, "0,2".into()), (8, "1,3".into())],
            "{group_file}"
        );
    }
}

#[test]
fn arm_midr_parts_are_core_types_and_silence_capacity() {
    let tree = smt_machine();
    for cpu in 0..4 {
        let midr = if cpu < 2 {
            "0x00000000410fd871"
        } else {
            "0x00000000410fd851"
        };
        tree.file(
            &format!("{CPU}/cpu{cpu}/regs/identification/midr_el1"),
            midr,
        )
        .file(
            &format!("{CPU}/cpu{cpu}/cpu_capacity"),
            &format!("{}\n", 500 + cpu),
        );
    }
    let t = tree.discover();
    let kinds: Vec<Option<&str>> = t.cpus().iter().map(|c| c.core_type.as_deref()).collect();
    assert_eq!(
        kinds,
        vec![
            Some("arm-0x41-0xd87"),
            Some("arm-0x41-0xd87"),
            Some("arm-0x41-0xd85"),
            Some("arm-0x41-0xd85")
        ]
    );
    for cpu in 0..4 {
        tree.file(
            &format!("{CPU}/cpu{cpu}/regs/identification/midr_el1"),
            "0x00000000481fd010",
        );
    }
    assert!(
        tree.discover().cpus().iter().all(|c| c.core_type.is_none()),
        "one MIDR: homogeneous even though capacities differ"
    );
    tree.file(
        &format!("{CPU}/cpu0/regs/identification/midr_el1"),
        "garbage",
    );
    assert!(matches!(tree.error(), DiscoveryError::Malformed { .. }));
}
