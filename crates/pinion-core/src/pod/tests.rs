use super::*;

fn quantity(text: &str) -> Option<Quantity> {
    (!text.is_empty()).then(|| Quantity::parse(text).expect("valid quantity"))
}

/// A container with cpu request/limit and memory request/limit ("" = unset).
fn ctr(name: &str, cpu: (&str, &str), memory: (&str, &str)) -> Container {
    Container {
        name: name.to_owned(),
        cpu_request: quantity(cpu.0),
        cpu_limit: quantity(cpu.1),
        memory_request: quantity(memory.0),
        memory_limit: quantity(memory.1),
        restart_policy: None,
        ..Container::default()
    }
}

fn guaranteed(name: &str, cpu: &str) -> Container {
    ctr(name, (cpu, cpu), ("1G", "1G"))
}

fn sidecar(name: &str, cpu: &str) -> Container {
    Container {
        restart_policy: Some(RestartPolicy::Always),
        ..guaranteed(name, cpu)
    }
}

fn pod(init: Vec<Container>, apps: Vec<Container>) -> Pod {
    Pod {
        uid: "pod".to_owned(),
        init_containers: init,
        containers: apps,
        ..Pod::default()
    }
}

#[test]
fn container_qos_follows_the_per_container_rules() {
    let cases = [
        (ctr("c", ("", ""), ("", "")), QosClass::BestEffort),
        (ctr("c", ("0", "0"), ("0", "0")), QosClass::BestEffort),
        (ctr("c", ("1", "1"), ("1G", "1G")), QosClass::Guaranteed),
        (ctr("c", ("", "1"), ("", "1G")), QosClass::Guaranteed),
        (
            ctr("c", ("1000m", "1"), ("1000M", "1G")),
            QosClass::Guaranteed,
        ),
        (ctr("c", ("1", ""), ("1G", "1G")), QosClass::Burstable),
        (ctr("c", ("1", "2"), ("1G", "1G")), QosClass::Burstable),
        (ctr("c", ("1", "1"), ("", "")), QosClass::Burstable),
        (ctr("c", ("", ""), ("1G", "1G")), QosClass::Burstable),
    ];
    for (container, expected) in cases {
        assert_eq!(container.qos(), expected, "{container:?}");
    }
}

#[test]
fn pod_qos_is_burstable_when_containers_disagree() {
    let besteffort = ctr("b", ("", ""), ("", ""));
    assert_eq!(pod(vec![], vec![]).qos(), QosClass::BestEffort);
    assert_eq!(
        pod(vec![], vec![guaranteed("a", "2")]).qos(),
        QosClass::Guaranteed
    );
    let mixed = pod(vec![], vec![guaranteed("a", "2"), besteffort.clone()]);
    assert_eq!(mixed.qos(), QosClass::Burstable);
    assert_eq!(guaranteed_cpus(&mixed, &mixed.containers[0]), 0);
    let all_besteffort = pod(vec![besteffort.clone()], vec![besteffort]);
    assert_eq!(all_besteffort.qos(), QosClass::BestEffort);
    // Older kubelets summed over containers: 1/2 + 2/1 looked Guaranteed.
    let swapped = pod(
        vec![],
        vec![
            ctr("a", ("1", "2"), ("1G", "1G")),
            ctr("b", ("2", "1"), ("1G", "1G")),
        ],
    );
    assert_eq!(swapped.qos(), QosClass::Burstable);
}

#[test]
fn guaranteed_cpus_needs_an_integral_request() {
    for (cpu, expected) in [
        ("2", 2),
        ("2000m", 2),
        ("1500m", 0),
        ("2.5", 0),
        ("1001m", 0),
    ] {
        let p = pod(vec![], vec![guaranteed("c", cpu)]);
        assert_eq!(guaranteed_cpus(&p, &p.containers[0]), expected, "{cpu}");
    }
    let burstable = pod(vec![], vec![ctr("c", ("2", "4"), ("1G", "1G"))]);
    assert_eq!(guaranteed_cpus(&burstable, &burstable.containers[0]), 0);
}

#[test]
fn sidecars_are_eligible_and_count_in_the_pod_total() {
    let p = pod(
        vec![
            guaranteed("init", "5"),
            sidecar("s1", "1"),
            sidecar("s2", "2"),
        ],
        vec![guaranteed("app", "1")],
    );
    assert!(p.init_containers[1].is_restartable());
    assert!(!p.init_containers[0].is_restartable());
    assert_eq!(guaranteed_cpus(&p, &p.init_containers[1]), 1);
    assert_eq!(pod_guaranteed_cpus(&p), 5);
    assert_eq!(p.container("s2").map(|c| c.name.as_str()), Some("s2"));
}

#[test]
fn corpus_pod_entries_deserialise() {
    let json = r#"{"init_containers": [{"name": "i", "cpu_request": "4000m", "cpu_limit": "4000m",
        "memory_request": "1G", "memory_limit": "1G", "restart_policy": "Always"}],
        "containers": [{"name": "a", "cpu_request": null, "cpu_limit": "2",
        "memory_request": null, "memory_limit": "1G"}]}"#;
    let p: Pod = serde_json::from_str(json).unwrap();
    assert_eq!(p.qos(), QosClass::Guaranteed);
    assert_eq!(guaranteed_cpus(&p, &p.init_containers[0]), 4);
    assert_eq!(guaranteed_cpus(&p, &p.containers[0]), 2);
    let bad = r#"{"containers": [{"name": "a", "cpu_request": "two"}]}"#;
    let err = serde_json::from_str::<Pod>(bad).unwrap_err();
    assert!(err.to_string().contains("\"two\""), "{err}");
}
