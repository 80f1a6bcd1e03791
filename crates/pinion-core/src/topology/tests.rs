use super::*;

fn cpu(id: u32, core: u32, socket: u32, numa: u32, uncore: u32) -> CpuInfo {
    CpuInfo {
        id,
        core,
        socket,
        numa,
        uncore,
        llc: None,
        die: None,
        core_type: None,
    }
}

fn spec(cpus: Vec<CpuInfo>) -> TopologySpec {
    TopologySpec {
        cpus,
        ..TopologySpec::default()
    }
}

/// kubelet's topoDualSocketHT: 12 CPUs, core = id mod 6, socket = core mod 2.
fn dual_socket_ht() -> Topology {
    let cpus = (0..12)
        .map(|id| cpu(id, id % 6, (id % 6) % 2, (id % 6) % 2, 0))
        .collect();
    Topology::new(spec(cpus)).expect("valid")
}

#[test]
fn derived_counts_follow_kubelet_integer_division() {
    let topo = dual_socket_ht();
    assert_eq!(topo.num_cpus(), 12);
    assert_eq!(topo.num_cores(), 6);
    assert_eq!(topo.num_sockets(), 2);
    assert_eq!(topo.num_numa_nodes(), 2);
    assert_eq!(topo.num_uncore_caches(), 1);
    assert_eq!(topo.cpus_per_core(), 2);
    assert_eq!(topo.cpus_per_socket(), 6);
    assert_eq!(topo.cpus_per_uncore(), 12);
    assert_eq!(topo.sockets()[&0].to_string(), "0,2,4,6,8,10");
    assert_eq!(topo.cores()[&1].to_string(), "1,7");
    assert_eq!(
        topo.core_siblings(&CpuSet::from_iter([1, 2])).to_string(),
        "1-2,7-8"
    );
}

#[test]
fn constructor_rejects_duplicate_cpu() {
    let err = Topology::new(spec(vec![cpu(0, 0, 0, 0, 0), cpu(0, 0, 0, 0, 0)])).unwrap_err();
    assert_eq!(err, TopologyError::DuplicateCpu { id: 0 });
}

#[test]
fn constructor_rejects_empty_and_huge_ids() {
    assert_eq!(
        Topology::new(spec(vec![])).unwrap_err(),
        TopologyError::NoCpus
    );
    assert_eq!(
        Topology::new(spec(vec![cpu(9000, 0, 0, 0, 0)])).unwrap_err(),
        TopologyError::CpuIdTooLarge { id: 9000 }
    );
}

#[test]
fn constructor_rejects_numa_inconsistencies() {
    let node = |id, distances: Vec<u32>| NumaNode {
        id,
        distances,
        memory_bytes: None,
    };
    let mut s = spec(vec![cpu(0, 0, 0, 1, 0)]);
    s.numa_nodes = vec![node(0, vec![])];
    assert_eq!(
        Topology::new(s.clone()).unwrap_err(),
        TopologyError::UnknownNumaNode { cpu: 0, numa: 1 }
    );
    s.numa_nodes = vec![node(0, vec![10, 20]), node(1, vec![20])];
    assert_eq!(
        Topology::new(s.clone()).unwrap_err(),
        TopologyError::DistanceCount {
            node: 1,
            expected: 2,
            got: 1
        }
    );
    s.numa_nodes = vec![node(1, vec![]), node(1, vec![])];
    assert_eq!(
        Topology::new(s).unwrap_err(),
        TopologyError::DuplicateNumaNode { id: 1 }
    );
}

#[test]
fn constructor_rejects_offline_cpu_that_is_online() {
    let mut s = spec(vec![cpu(0, 0, 0, 0, 0), cpu(1, 1, 0, 0, 0)]);
    s.offline = CpuSet::from_iter([1, 2]);
    assert_eq!(
        Topology::new(s).unwrap_err(),
        TopologyError::OfflineOverlapsOnline {
            cpus: "1".to_string()
        }
    );
}

#[test]
fn constructor_rejects_die_spanning_sockets() {
    let mut a = cpu(0, 0, 0, 0, 0);
    let mut b = cpu(1, 1, 1, 0, 0);
    a.die = Some(0);
    b.die = Some(0);
    assert_eq!(
        Topology::new(spec(vec![a, b])).unwrap_err(),
        TopologyError::DieSpansSockets {
            die: 0,
            first: 0,
            second: 1
        }
    );
}

#[test]
fn memory_only_numa_nodes_are_kept() {
    let mut s = spec(vec![cpu(0, 0, 0, 0, 0)]);
    s.numa_nodes = vec![
        NumaNode {
            id: 0,
            distances: vec![10, 20],
            memory_bytes: None,
        },
        NumaNode {
            id: 3,
            distances: vec![20, 10],
            memory_bytes: Some(1 << 30),
        },
    ];
    let topo = Topology::new(s).expect("valid");
    assert_eq!(topo.cpuless_numa_nodes(), vec![3]);
    assert_eq!(topo.num_numa_nodes(), 1);
    assert_eq!(topo.numa_distance(0, 3), Some(20));
}

#[test]
fn json_form_reads_corpus_shape_and_round_trips() {
    let text = r#"{"cpus":[{"id":1,"core":1,"socket":0,"numa":0,"uncore":0},
        {"id":0,"core":0,"socket":0,"numa":0,"uncore":0}], "declared_counts": {"NumCPUs": 4}}"#;
    let topo: Topology = serde_json::from_str(text).expect("corpus shape loads");
    assert_eq!(topo.cpus()[0].id, 0);
    let again: Topology =
        serde_json::from_str(&serde_json::to_string(&topo).expect("ser")).expect("de");
    assert_eq!(again, topo);
    let bad = r#"{"cpus":[{"id":0,"core":0,"socket":0,"numa":0,"uncore":0},{"id":0,"core":0,"socket":0,"numa":0,"uncore":0}]}"#;
    let err = serde_json::from_str::<Topology>(bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cpu 0 appears more than once"), "{err}");
}

#[test]
fn synthetic_uses_linux_numbering() {
    let topo = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 2,
        cores_per_socket: 96,
        threads_per_core: 2,
        cores_per_uncore: 8,
    });
    assert_eq!(topo.num_cpus(), 384);
    assert_eq!(topo.num_numa_nodes(), 4);
    assert_eq!(topo.num_uncore_caches(), 24);
    assert_eq!(topo.cores()[&5].to_string(), "5,197");
    assert_eq!(topo.cpu(197).map(|c| c.socket), Some(0));
    assert_eq!(topo.cpu(300).map(|c| (c.socket, c.numa)), Some((1, 2)));
}

#[test]
fn numa_nodes_of_lists_the_nodes_touched() {
    let topo = synthetic(Shape {
        sockets: 2,
        numa_per_socket: 2,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    });
    assert_eq!(
        topo.numa_nodes_of(&CpuSet::from_iter([0, 9, 15])),
        vec![0, 3]
    );
    assert!(topo.numa_nodes_of(&CpuSet::new()).is_empty());
}
