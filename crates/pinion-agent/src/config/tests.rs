use super::*;

fn defaults() -> DefaultPaths {
    DefaultPaths::for_user(true, None)
}

fn resolve_yaml(yaml: &str) -> Result<Config, ConfigError> {
    let file = FileConfig::parse(yaml, Path::new("test.yaml"))?;
    Config::resolve(file, &Overrides::default(), &defaults())
}

#[test]
fn kubelet_keys_are_read() {
    let config = resolve_yaml(
        "cpuManagerPolicy: static\n\
         cpuManagerPolicyOptions:\n  full-pcpus-only: true\n\
         kubeReserved:\n  cpu: 500m\n  memory: 1Gi\n\
         systemReserved:\n  cpu: 600m\n\
         cpuManagerReconcilePeriod: 5s\n\
         stateDir: /tmp/state\n",
    )
    .expect("valid");
    assert_eq!(config.policy.policy.as_deref(), Some("static"));
    assert_eq!(config.policy.options["full-pcpus-only"], "true");
    // ceil(0.5 + 0.6) = 2 reserved CPUs.
    assert_eq!(config.policy.num_reserved, Some(2));
    assert_eq!(config.reconcile_period, Duration::from_secs(5));
    assert_eq!(config.state_dir, PathBuf::from("/tmp/state"));
    assert_eq!(config.socket, PathBuf::from("/run/pinion/pinion.sock"));
}

#[test]
fn reserved_system_cpus_sets_the_count() {
    let config =
        resolve_yaml("cpuManagerPolicy: static\nreservedSystemCPUs: \"0,2\"\n").expect("valid");
    assert_eq!(config.policy.num_reserved, Some(2));
    assert_eq!(
        config.policy.reserved.as_ref().map(ToString::to_string),
        Some("0,2".to_string())
    );
}

/// Issue 27, item 2: with a file that set only
/// `qosResourceManager.builtinPlugins` (the example of `docs/qrm.md`) the
/// policy silently became kubelet's `none`, and the next start unpinned
/// running workloads. An absent key takes the same default as no file.
#[test]
fn regression_a_partial_file_keeps_the_defaults_of_no_file() {
    let embedded = Config::resolve(FileConfig::embedded(), &Overrides::default(), &defaults())
        .expect("embedded");
    assert_eq!(embedded.policy.policy.as_deref(), Some("static"));
    assert_eq!(embedded.policy.num_reserved, Some(1));
    assert_eq!(embedded.reconcile_period, DEFAULT_RECONCILE_PERIOD);
    for yaml in [
        "",
        "qosResourceManager:\n  enabled: true\n  builtinPlugins: [cpu]\n",
        "cpuManagerPolicy: static\n",
        "metricsAddr: 127.0.0.1:9999\n",
    ] {
        let config = resolve_yaml(yaml).expect(yaml);
        assert_eq!(config.policy.policy, embedded.policy.policy, "{yaml}");
        assert_eq!(config.policy.num_reserved, Some(1), "{yaml}");
        assert_eq!(config.migrate_on_start, embedded.migrate_on_start, "{yaml}");
    }
    // A reservation set anywhere replaces the default one.
    let config = resolve_yaml("kubeReserved: {cpu: \"2\"}\n").expect("reads");
    assert_eq!(config.policy.num_reserved, Some(2));
}

#[test]
fn flags_override_the_file() {
    let file = FileConfig::parse(
        "cpuManagerPolicy: none\nstateDir: /from/file\nsocket: /from/file.sock\nmetricsAddr: 127.0.0.1:1\n",
        Path::new("f"),
    )
    .expect("parse");
    let overrides = Overrides {
        state_dir: Some("/from/flag".into()),
        socket: Some("/flag.sock".into()),
        cgroup_root: Some("/sys/fs/cgroup/cpuset/x".into()),
        sysroot: Some("/host".into()),
        metrics_addr: Some("127.0.0.1:2".into()),
        config: None,
        nri: false,
        nri_socket: None,
        podresources_socket: None,
        kubelet: KubeletFlags::default(),
    };
    let config = Config::resolve(file, &overrides, &defaults()).expect("valid");
    assert_eq!(config.state_dir, PathBuf::from("/from/flag"));
    assert_eq!(
        config.pod_resources.socket,
        PathBuf::from("/from/flag/pod-resources/pinion.sock"),
        "the podresources socket follows the state directory"
    );
    assert_eq!(config.socket, PathBuf::from("/flag.sock"));
    assert_eq!(config.sysroot, PathBuf::from("/host"));
    assert_eq!(config.cgroup_root, Some("/sys/fs/cgroup/cpuset/x".into()));
    assert_eq!(config.metrics_addr.port(), 2);
}

#[test]
fn each_bad_field_is_named() {
    let cases = [
        ("cpuManagerPolicy: dynamic\n", "cpuManagerPolicy"),
        (
            "cpuManagerPolicy: static\nreservedSystemCPUs: \"0-\"\n",
            "reservedSystemCPUs",
        ),
        (
            "cpuManagerPolicy: static\nkubeReserved:\n  cpu: lots\n",
            "kubeReserved.cpu",
        ),
        (
            "cpuManagerPolicy: static\nsystemReserved:\n  cpu: -1\n",
            "systemReserved.cpu",
        ),
        (
            "cpuManagerPolicy: static\nsystemReserved: {cpu: \"1\"}\ncpuManagerPolicyOptions:\n  no-such-option: \"true\"\n",
            "cpuManagerPolicyOptions",
        ),
        (
            "cpuManagerPolicy: static\nsystemReserved: {cpu: \"1\"}\ncpuManagerPolicyOptions:\n  full-pcpus-only: maybe\n",
            "cpuManagerPolicyOptions",
        ),
        ("cpuManagerReconcilePeriod: 10\n", "cpuManagerReconcilePeriod"),
        ("cpuManagerReconcilePeriod: 0s\n", "cpuManagerReconcilePeriod"),
        ("metricsAddr: localhost\n", "metricsAddr"),
        ("featureGates:\n  NoSuchGate: true\n", "featureGates"),
        ("cgroupRoot: relative/dir\n", "cgroupRoot"),
        ("stateDir: \"\"\n", "stateDir"),
    ];
    for (yaml, field) in cases {
        let err = resolve_yaml(yaml).expect_err(yaml);
        assert_eq!(err.field(), Some(field), "{yaml}: {err}");
        assert!(err.to_string().contains(field), "{yaml}: {err}");
    }
}

#[test]
fn static_without_reservation_uses_kubelets_message() {
    // Only an explicit zero: an absent reservation takes Pinion's default.
    for yaml in [
        "cpuManagerPolicy: static\nsystemReserved: {cpu: \"0\"}\n",
        "cpuManagerPolicy: static\nkubeReserved: {cpu: \"0\"}\n",
    ] {
        let err = resolve_yaml(yaml).expect_err(yaml);
        assert!(matches!(err, ConfigError::NoReservation), "{yaml}: {err}");
        assert_eq!(
            err.to_string(),
            "[cpumanager] unable to determine reserved CPU resources for static policy"
        );
    }
}

#[test]
fn unknown_keys_and_bad_yaml_are_refused_with_the_key() {
    let err = resolve_yaml("cpuManagerPolicyy: static\n").expect_err("typo");
    assert!(matches!(err, ConfigError::Syntax { .. }));
    assert!(err.to_string().contains("cpuManagerPolicyy"), "{err}");
    let err = resolve_yaml("cpuManagerPolicy: [a\n").expect_err("yaml");
    assert!(matches!(err, ConfigError::Syntax { .. }));
}

#[test]
fn missing_config_file_names_the_path() {
    let overrides = Overrides {
        config: Some("/no/such/pinion.yaml".into()),
        ..Overrides::default()
    };
    let err = Config::load(&overrides, &defaults()).expect_err("missing");
    assert!(err.to_string().contains("/no/such/pinion.yaml"), "{err}");
}

#[test]
fn non_root_defaults_live_under_home() {
    let paths = DefaultPaths::for_user(false, Some(Path::new("/home/u")));
    assert_eq!(
        paths.state_dir,
        PathBuf::from("/home/u/.local/state/pinion")
    );
    assert_eq!(
        paths.socket,
        PathBuf::from("/home/u/.local/state/pinion/pinion.sock")
    );
}

#[test]
fn topology_manager_keys_are_read_with_kubelets_names() {
    let config = resolve_yaml(
        "cpuManagerPolicy: static\n\
         reservedSystemCPUs: \"0\"\n\
         topologyManagerPolicy: single-numa-node\n\
         topologyManagerScope: pod\n\
         topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: \"true\"\n",
    )
    .expect("valid");
    assert_eq!(
        config.policy.topology_manager_policy.as_deref(),
        Some("single-numa-node")
    );
    assert_eq!(config.policy.topology_manager_scope.as_deref(), Some("pod"));
    assert_eq!(
        config.policy.topology_manager_policy_options["prefer-closest-numa-nodes"],
        "true"
    );
}

#[test]
fn nri_settings_come_from_the_file_and_the_flags() {
    let config = resolve_yaml("").expect("empty");
    assert!(!config.nri.enabled);
    assert_eq!(config.nri.socket, PathBuf::from("/var/run/nri/nri.sock"));
    assert_eq!(config.nri.plugin_name, "pinion");
    assert_eq!(config.nri.plugin_index, "90");
    let config = resolve_yaml(
        "nri:\n  enabled: true\n  socket: /run/x.sock\n  pluginName: pin\n  pluginIndex: \"10\"\n",
    )
    .expect("valid");
    assert!(config.nri.enabled);
    assert_eq!(config.nri.socket, PathBuf::from("/run/x.sock"));
    assert_eq!(
        (
            config.nri.plugin_name.as_str(),
            config.nri.plugin_index.as_str()
        ),
        ("pin", "10")
    );
    let file =
        FileConfig::parse("nri:\n  socket: /run/file.sock\n", Path::new("f")).expect("parse");
    let overrides = Overrides {
        nri_socket: Some("/run/flag.sock".into()),
        ..Overrides::default()
    };
    let config = Config::resolve(file, &overrides, &defaults()).expect("valid");
    assert!(config.nri.enabled, "--nri-socket implies --nri");
    assert_eq!(config.nri.socket, PathBuf::from("/run/flag.sock"));
}

#[test]
fn bad_nri_settings_name_the_field() {
    for (yaml, field) in [
        ("nri:\n  pluginIndex: \"9\"\n", "nri.pluginIndex"),
        ("nri:\n  pluginName: \"a b\"\n", "nri.pluginName"),
        ("nri:\n  socket: \"\"\n", "nri.socket"),
    ] {
        let err = resolve_yaml(yaml).expect_err(yaml);
        assert_eq!(err.field(), Some(field), "{err}");
    }
    let err = resolve_yaml("nri:\n  enable: true\n").expect_err("typo");
    assert!(err.to_string().contains("enable"), "{err}");
}

#[test]
fn yaml_errors_name_the_field_line_and_column() {
    let cases = [
        (
            "cpuManagerPolicyy: static\n",
            "cpuManagerPolicyy",
            "line 1 column 1",
        ),
        (
            "cpuManagerPolicy: static\nnri:\n  enable: true\n",
            "nri: unknown field `enable`",
            "line 3 column 3",
        ),
        (
            "cpuManagerPolicy: [a\n",
            "cpuManagerPolicy: invalid type",
            "line 1 column 19",
        ),
        (
            "cpuManagerPolicy: static: x\n",
            "mapping values are not allowed",
            "line 1 column 25",
        ),
        (
            "featureGates:\n  CPUManagerPolicyAlphaOptions: sometimes\n",
            "featureGates",
            "line 2 column 33",
        ),
    ];
    for (yaml, field, position) in cases {
        let err = resolve_yaml(yaml).expect_err(yaml);
        assert!(matches!(err, ConfigError::Syntax { .. }), "{yaml}: {err}");
        let text = err.to_string();
        assert!(text.contains("test.yaml"), "{text}");
        assert!(text.contains(field), "{yaml}: {text}");
        assert!(text.contains(position), "{yaml}: {text}");
    }
}

#[test]
fn builtin_plugins_turn_the_manager_on_with_their_configuration() {
    let config = resolve_yaml(
        "qosResourceManager:\n  builtinPlugins: [cpu, memory]\n  plugins:\n    cpu:\n      pools:\n        reclaimMin: 2\n",
    )
    .expect("valid");
    assert!(config.qrm.enabled, "builtinPlugins implies the manager");
    let kinds: Vec<_> = config
        .qrm
        .builtin
        .iter()
        .map(|b| b.config.kind().name())
        .collect();
    assert_eq!(kinds, ["cpu", "memory"]);
    let pinion_plugins::builtin::Config::Cpu(cpu) = &config.qrm.builtin[0].config else {
        panic!("the cpu plugin first")
    };
    assert_eq!(cpu.pools.reclaim_min, 2);
    assert!(config.qrm.builtin[0].reservation_from_agent);

    let own = resolve_yaml(
        "qosResourceManager:\n  builtinPlugins: [cpu]\n  plugins:\n    cpu:\n      reservedCpus: 2\n",
    )
    .expect("valid");
    assert!(
        !own.qrm.builtin[0].reservation_from_agent,
        "it names its own reservation"
    );

    let none = resolve_yaml("qosResourceManager:\n  reconcilePeriod: 2s\n").expect("valid");
    assert!(!none.qrm.enabled && none.qrm.builtin.is_empty());
}

#[test]
fn each_bad_builtin_plugin_setting_is_named() {
    for (yaml, field, value) in [
        (
            "builtinPlugins: [gpu]",
            "qosResourceManager.builtinPlugins",
            "gpu",
        ),
        (
            "builtinPlugins: [cpu, cpu]",
            "qosResourceManager.builtinPlugins",
            "cpu",
        ),
        (
            "builtinPlugins: [cpu]\n  plugins:\n    nic: {}",
            "qosResourceManager.plugins",
            "nic",
        ),
        (
            "builtinPlugins: [cpu]\n  plugins:\n    cpu:\n      reservdCpus: 1",
            "qosResourceManager.plugins.cpu",
            "reservdCpus",
        ),
        (
            "enabled: false\n  builtinPlugins: [memory]",
            "qosResourceManager.enabled",
            "false",
        ),
    ] {
        let err = resolve_yaml(&format!("qosResourceManager:\n  {yaml}\n"))
            .expect_err(&format!("{yaml} is refused"));
        let text = err.to_string();
        assert!(
            text.contains(field) && text.contains(value),
            "{yaml}: {text}"
        );
    }
}

#[test]
fn pod_resources_default_under_the_state_dir_with_kubelets_rate_limit() {
    let config = resolve_yaml("").expect("valid");
    assert_eq!(
        config.pod_resources.socket,
        PathBuf::from("/var/lib/pinion/pod-resources/pinion.sock")
    );
    assert_eq!(
        (config.pod_resources.qps, config.pod_resources.burst),
        (100, 10)
    );
    let config = resolve_yaml("podResources:\n  socket: /run/pr.sock\n  qps: 5\n  burst: 2\n")
        .expect("valid");
    assert_eq!(config.pod_resources.socket, PathBuf::from("/run/pr.sock"));
    assert_eq!(
        (config.pod_resources.qps, config.pod_resources.burst),
        (5, 2)
    );
    let flag = Overrides {
        podresources_socket: Some("/tmp/flag.sock".into()),
        ..Overrides::default()
    };
    let file = FileConfig::parse("podResources:\n  socket: /run/pr.sock\n", Path::new("t"))
        .expect("parse");
    let config = Config::resolve(file, &flag, &defaults()).expect("valid");
    assert_eq!(config.pod_resources.socket, PathBuf::from("/tmp/flag.sock"));
    let err = resolve_yaml("podResources:\n  qps: 0\n").expect_err("zero qps");
    assert_eq!(err.field(), Some("podResources.qps"));
}

#[test]
fn migrate_on_start_defaults_to_if_nothing_moves_and_is_read() {
    use crate::controller::MigrateOnStart;
    let read = |yaml: &str| resolve_yaml(yaml).expect("ok").migrate_on_start;
    assert_eq!(
        read("cpuManagerPolicy: none\n"),
        MigrateOnStart::IfNothingMoves
    );
    assert_eq!(read("migrateOnStart: true\n"), MigrateOnStart::Always);
    assert_eq!(read("migrateOnStart: false\n"), MigrateOnStart::Never);
    let err = resolve_yaml("migrateOnStart: sometimes\n").expect_err("not a bool");
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err}");
    assert!(err.to_string().contains("migrateOnStart"), "{err}");
}

#[test]
fn the_newest_kubelet_feature_gates_are_off_by_default_and_read() {
    let off = resolve_yaml("cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n").expect("valid");
    assert_eq!(off.features, Features::default());
    assert!(!off.features.in_place_resize_exclusive_cpus);
    assert!(!off.features.pod_level_resource_managers);
    let on = resolve_yaml(
        "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nfeatureGates:\n  \
         InPlacePodVerticalScalingExclusiveCPUs: true\n  PodLevelResourceManagers: true\n  \
         CPUManagerPolicyAlphaOptions: false\n",
    )
    .expect("valid");
    assert!(on.features.in_place_resize_exclusive_cpus);
    assert!(on.features.pod_level_resource_managers);
    assert_eq!(on.policy.feature_gates.map(|g| g.alpha), Some(false));
    let err = resolve_yaml("featureGates:\n  InPlacePodVerticalScaling: true\n")
        .expect_err("unknown gate");
    assert_eq!(err.field(), Some("featureGates"));
    assert!(
        err.to_string()
            .contains("InPlacePodVerticalScalingExclusiveCPUs"),
        "the known gates are listed: {err}"
    );
}

/// Issue 28, item 6: operators who copy kubelet's command line pass its
/// CPU and Topology Manager flags; each overrides its key in the file.
#[test]
fn kubelets_flags_override_the_file() {
    let file = FileConfig::parse(
        "cpuManagerPolicy: none\ntopologyManagerPolicy: none\n",
        Path::new("f"),
    )
    .expect("parse");
    let overrides = Overrides {
        kubelet: KubeletFlags {
            cpu_manager_policy: Some("static".into()),
            cpu_manager_policy_options: Some(
                "full-pcpus-only=true,strict-cpu-reservation=true".into(),
            ),
            reserved_cpus: Some("0,4".into()),
            topology_manager_policy: Some("single-numa-node".into()),
            topology_manager_scope: Some("pod".into()),
        },
        ..Overrides::default()
    };
    let config = Config::resolve(file, &overrides, &defaults()).expect("valid");
    assert_eq!(config.policy.policy.as_deref(), Some("static"));
    assert_eq!(config.policy.options["full-pcpus-only"], "true");
    assert_eq!(config.policy.options["strict-cpu-reservation"], "true");
    assert_eq!(
        config.policy.reserved,
        Some(CpuSet::parse_list("0,4").expect("cpus"))
    );
    assert_eq!(
        config.policy.topology_manager_policy.as_deref(),
        Some("single-numa-node")
    );
    assert_eq!(config.policy.topology_manager_scope.as_deref(), Some("pod"));
    let bad = Overrides {
        kubelet: KubeletFlags {
            cpu_manager_policy_options: Some("full-pcpus-only".into()),
            ..KubeletFlags::default()
        },
        ..Overrides::default()
    };
    let err = Config::resolve(FileConfig::default(), &bad, &defaults()).expect_err("no value");
    assert_eq!(err.field(), Some("--cpu-manager-policy-options"), "{err}");
    assert!(err.to_string().contains("full-pcpus-only"), "{err}");
}

/// Issue 28, items 4 and 6: kubelet's `CPUManagerPolicyOptions` gate is
/// accepted (locked to true, as in kubelet) and the proposal's
/// `QoSResourceManager` gate is the manager's switch; the proposal's
/// reconcile period is the default.
#[test]
fn the_options_gate_and_the_qrm_gate_are_accepted() {
    let config = resolve_yaml("featureGates:\n  CPUManagerPolicyOptions: true\n").expect("ok");
    assert!(!config.qrm.enabled);
    let err =
        resolve_yaml("featureGates:\n  CPUManagerPolicyOptions: false\n").expect_err("locked");
    assert!(
        err.to_string().contains(
            "cannot set feature gate CPUManagerPolicyOptions to false, feature is locked to true"
        ),
        "{err}"
    );
    let config = resolve_yaml("featureGates:\n  QoSResourceManager: true\n").expect("ok");
    assert!(config.qrm.enabled);
    assert_eq!(config.qrm.reconcile_period, Duration::from_secs(3));
    let err = resolve_yaml(
        "featureGates:\n  QoSResourceManager: false\nqosResourceManager:\n  enabled: true\n",
    )
    .expect_err("contradiction");
    assert_eq!(
        err.field(),
        Some("featureGates.QoSResourceManager"),
        "{err}"
    );
}

#[test]
fn exclusive_cpus_partition_defaults_to_member_and_takes_root_and_isolated() {
    use pinion_core::partition::PartitionMode;
    assert_eq!(
        resolve_yaml("").unwrap().exclusive_cpus.partition,
        PartitionMode::Member
    );
    for (text, mode) in [
        ("member", PartitionMode::Member),
        ("root", PartitionMode::Root),
        ("isolated", PartitionMode::Isolated),
    ] {
        let config = resolve_yaml(&format!("exclusiveCpus:\n  partition: {text}\n")).unwrap();
        assert_eq!(config.exclusive_cpus.partition, mode);
    }
}

#[test]
fn a_bad_exclusive_cpus_partition_is_named_with_its_value() {
    let err = resolve_yaml("exclusiveCpus:\n  partition: Isolated\n").unwrap_err();
    assert_eq!(err.field(), Some("exclusiveCpus.partition"));
    assert!(err.to_string().contains("\"Isolated\""), "{err}");
    let err = resolve_yaml("exclusiveCpus:\n  partitions: isolated\n").unwrap_err();
    assert!(err.to_string().contains("partitions"), "{err}");
}

#[test]
fn the_node_resource_topology_section_is_read_with_its_defaults() {
    let config = resolve_yaml("{}").expect("defaults");
    assert_eq!(config.nrt, NrtConfig::default());
    assert_eq!(
        config.nrt.method,
        pinion_core::nrt::Method::WithExclusiveResources
    );
    let config = resolve_yaml(
        "nodeResourceTopology:\n  publish: true\n  kubeconfig: /etc/pinion/kubeconfig\n  nodeName: worker-1\n  podsFingerprintMethod: all\n  resyncPeriod: 30s\n  updateDelay: 50ms\n  nodeStatus: false\n  nodeStatusCheckPeriod: 1m\n  podRequests: false\n",
    )
    .expect("section");
    assert_eq!(config.nrt.publish, Some(true));
    assert_eq!(
        config.nrt.kubeconfig.as_deref(),
        Some(Path::new("/etc/pinion/kubeconfig"))
    );
    assert_eq!(config.nrt.node_name.as_deref(), Some("worker-1"));
    assert_eq!(config.nrt.method, pinion_core::nrt::Method::All);
    assert_eq!(config.nrt.resync_period, Duration::from_secs(30));
    assert_eq!(config.nrt.update_delay, Duration::from_millis(50));
    assert_eq!(config.nrt.node_status, Some(false));
    assert_eq!(config.nrt.node_status_check_period, Duration::from_secs(60));
    assert_eq!(config.nrt.pod_requests, Some(false));
    let defaults = NrtConfig::default();
    assert_eq!(defaults.pod_requests, None);
    assert_eq!(defaults.node_status, None);
    assert_eq!(defaults.node_status_check_period, Duration::from_secs(10));
}

#[test]
fn bad_node_resource_topology_values_are_named() {
    for (yaml, field, value) in [
        (
            "nodeResourceTopology: {podsFingerprintMethod: exclusive}",
            "nodeResourceTopology.podsFingerprintMethod",
            "exclusive",
        ),
        (
            "nodeResourceTopology: {resyncPeriod: soon}",
            "nodeResourceTopology.resyncPeriod",
            "soon",
        ),
        (
            "nodeResourceTopology: {nodeStatusCheckPeriod: '10'}",
            "nodeResourceTopology.nodeStatusCheckPeriod",
            "10",
        ),
        (
            "nodeResourceTopology: {nodeName: Worker_1}",
            "nodeResourceTopology.nodeName",
            "Worker_1",
        ),
    ] {
        let err = resolve_yaml(yaml).expect_err(yaml);
        assert_eq!(err.field(), Some(field), "{yaml}");
        assert!(err.to_string().contains(value), "{err}");
    }
    let err = resolve_yaml("nodeResourceTopology: {kubeConfig: /x}").expect_err("unknown");
    assert!(err.to_string().contains("kubeConfig"), "{err}");
}

/// Found from outside (thirty-third session): under the Topology Manager's
/// `none` policy any scope was accepted (`--topology-manager-scope pods`)
/// and published in the NodeResourceTopology object; kubelet's
/// configuration check refuses it whatever the policy.
#[test]
fn regression_an_invalid_topology_manager_scope_is_refused_under_policy_none() {
    for yaml in [
        "topologyManagerScope: pods\n",
        "topologyManagerPolicy: none\ntopologyManagerScope: banana\n",
    ] {
        let err = resolve_yaml(yaml).expect_err("kubelet refuses it");
        assert_eq!(err.field(), Some("topologyManagerScope"), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("must be one of: \"container\", or \"pod\""),
            "{text}"
        );
    }
    let overrides = Overrides {
        kubelet: KubeletFlags {
            topology_manager_scope: Some("pods".into()),
            ..KubeletFlags::default()
        },
        ..Overrides::default()
    };
    let file =
        FileConfig::parse("cpuManagerPolicy: static\n", Path::new("test.yaml")).expect("yaml");
    let err = Config::resolve(file, &overrides, &defaults()).expect_err("the flag too");
    assert!(err.to_string().contains("\"pods\""), "{err}");
    assert!(resolve_yaml("topologyManagerScope: pod\n").is_ok());
}
