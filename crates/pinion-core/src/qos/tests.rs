use super::*;

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

fn ids(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("list")
}

/// One table row: annotations → what the request must say.
struct Case {
    name: &'static str,
    annotations: &'static [(&'static str, &'static str)],
    check: fn(&QosRequest),
}

#[test]
fn annotations_become_a_typed_request() {
    let cases = [
        Case {
            name: "no annotation is shared_cores in the share pool",
            annotations: &[],
            check: |r| {
                assert_eq!(r.level, QosLevel::SharedCores);
                assert!(!r.level_explicit);
                assert_eq!(r.cpuset_pool, "share");
                assert!(!r.numa_binding && !r.numa_exclusive);
                assert!(r.warnings.is_empty());
            },
        },
        Case {
            name: "each level is read",
            annotations: &[(QOS_LEVEL_KEY, "reclaimed_cores")],
            check: |r| {
                assert_eq!(r.level, QosLevel::ReclaimedCores);
                assert!(r.level_explicit);
                assert_eq!(r.cpuset_pool, "");
            },
        },
        Case {
            name: "named shared pool",
            annotations: &[
                (QOS_LEVEL_KEY, "shared_cores"),
                (CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool":"batch"}"#),
            ],
            check: |r| {
                assert_eq!(r.cpuset_pool, "batch");
                assert_eq!(r.cpu_enhancement["cpuset_pool"], "batch");
            },
        },
        Case {
            name: "dedicated with numa binding and exclusivity",
            annotations: &[
                (QOS_LEVEL_KEY, "dedicated_cores"),
                (
                    MEMORY_ENHANCEMENT_KEY,
                    r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
                ),
            ],
            check: |r| {
                assert_eq!(r.level, QosLevel::DedicatedCores);
                assert!(r.numa_binding && r.numa_exclusive);
                assert!(r.warnings.is_empty());
            },
        },
        Case {
            name: "exclusivity without binding is ignored with a warning",
            annotations: &[
                (QOS_LEVEL_KEY, "dedicated_cores"),
                (MEMORY_ENHANCEMENT_KEY, r#"{"numa_exclusive":"true"}"#),
            ],
            check: |r| {
                assert!(!r.numa_exclusive);
                assert_eq!(
                    r.warnings,
                    vec![QosWarning::ExclusiveIgnored {
                        level: QosLevel::DedicatedCores
                    }]
                );
            },
        },
        Case {
            name: "exclusivity on shared_cores is ignored",
            annotations: &[(
                MEMORY_ENHANCEMENT_KEY,
                r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
            )],
            check: |r| {
                assert!(r.numa_binding);
                assert!(!r.numa_exclusive);
                assert_eq!(r.warnings.len(), 1);
            },
        },
        Case {
            name: "flags must be exactly \"true\"",
            annotations: &[(MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"True"}"#)],
            check: |r| assert!(!r.numa_binding),
        },
        Case {
            name: "the older top-level numa_binding annotation counts",
            annotations: &[(NUMA_BINDING_KEY, "true")],
            check: |r| assert!(r.numa_binding),
        },
        Case {
            name: "malformed enhancement is empty with a warning",
            annotations: &[(CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool": 3}"#)],
            check: |r| {
                assert!(r.cpu_enhancement.is_empty());
                assert_eq!(r.cpuset_pool, "share");
                assert!(matches!(
                    &r.warnings[..],
                    [QosWarning::MalformedEnhancement { key, .. }] if key == CPU_ENHANCEMENT_KEY
                ));
            },
        },
        Case {
            name: "not json at all",
            annotations: &[(NETWORK_ENHANCEMENT_KEY, "namespace_type=host_ns")],
            check: |r| {
                assert!(r.network_enhancement.is_empty());
                assert_eq!(r.warnings.len(), 1);
            },
        },
        Case {
            name: "numa ids in cpulist syntax",
            annotations: &[(NUMA_IDS_KEY, "0-1,3")],
            check: |r| assert_eq!(r.numa_ids, Some(ids("0-1,3"))),
        },
        Case {
            name: "numa ids win over numa number",
            annotations: &[(NUMA_IDS_KEY, "1"), (NUMA_NUMBER_KEY, "2")],
            check: |r| {
                assert_eq!(r.numa_ids, Some(ids("1")));
                assert_eq!(r.numa_number, None);
                assert_eq!(r.warnings, vec![QosWarning::NumaNumberIgnored { value: 2 }]);
            },
        },
        Case {
            name: "numa number alone",
            annotations: &[(NUMA_NUMBER_KEY, " 2 ")],
            check: |r| assert_eq!(r.numa_number, Some(2)),
        },
        Case {
            name: "namespace type",
            annotations: &[(
                NETWORK_ENHANCEMENT_KEY,
                r#"{"namespace_type":"anti_host_ns_preferred"}"#,
            )],
            check: |r| assert_eq!(r.namespace_type, NamespaceType::AntiHostNsPreferred),
        },
        Case {
            name: "unknown namespace type is any with a warning",
            annotations: &[(NETWORK_ENHANCEMENT_KEY, r#"{"namespace_type":"elsewhere"}"#)],
            check: |r| {
                assert_eq!(r.namespace_type, NamespaceType::Any);
                assert_eq!(r.warnings.len(), 1);
            },
        },
        Case {
            name: "main container name",
            annotations: &[(MAIN_CONTAINER_KEY, "server")],
            check: |r| assert_eq!(r.main_container.as_deref(), Some("server")),
        },
        Case {
            name: "system_cores keeps the pool name as given",
            annotations: &[
                (QOS_LEVEL_KEY, "system_cores"),
                (CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool":"reserve"}"#),
            ],
            check: |r| assert_eq!(r.cpuset_pool, "reserve"),
        },
    ];
    for case in cases {
        let request = parse(&annotations(case.annotations))
            .unwrap_or_else(|err| panic!("{}: {err}", case.name));
        (case.check)(&request);
    }
}

#[test]
fn invalid_values_are_errors_naming_the_value() {
    type Row = (
        &'static str,
        &'static [(&'static str, &'static str)],
        QosError,
    );
    let cases: [Row; 6] = [
        (
            "unknown level",
            &[(QOS_LEVEL_KEY, "best_effort")],
            QosError::InvalidLevel {
                value: "best_effort".into(),
            },
        ),
        (
            "empty level",
            &[(QOS_LEVEL_KEY, "")],
            QosError::InvalidLevel { value: "".into() },
        ),
        (
            "numa number not a number",
            &[(NUMA_NUMBER_KEY, "two")],
            QosError::InvalidNumaNumber {
                value: "two".into(),
            },
        ),
        (
            "negative numa number",
            &[(NUMA_NUMBER_KEY, "-1")],
            QosError::InvalidNumaNumber { value: "-1".into() },
        ),
        (
            "pool name with a space",
            &[(CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool":"my pool"}"#)],
            QosError::InvalidPoolName {
                value: "my pool".into(),
                reason: "only letters, digits, '_', '-' and '.' are allowed",
            },
        ),
        (
            "empty numa ids",
            &[(NUMA_IDS_KEY, " ")],
            QosError::InvalidNumaIds {
                value: " ".into(),
                reason: "no numa id".into(),
            },
        ),
    ];
    for (name, pairs, expected) in cases {
        assert_eq!(parse(&annotations(pairs)), Err(expected), "{name}");
    }
    let err = parse(&annotations(&[(NUMA_IDS_KEY, "1-a")])).expect_err("bad list");
    assert!(matches!(err, QosError::InvalidNumaIds { ref value, .. } if value == "1-a"));
    assert!(err.to_string().contains("\"1-a\""), "{err}");
    let err = parse(&annotations(&[(QOS_LEVEL_KEY, "gold")])).expect_err("bad level");
    assert!(err.to_string().contains("\"gold\""), "{err}");
}

#[test]
fn levels_round_trip_through_their_names() {
    for level in [
        QosLevel::DedicatedCores,
        QosLevel::SharedCores,
        QosLevel::ReclaimedCores,
        QosLevel::SystemCores,
    ] {
        assert_eq!(level.as_str().parse::<QosLevel>(), Ok(level));
        assert_eq!(
            serde_json::to_string(&level).expect("json"),
            format!("\"{level}\"")
        );
    }
}

#[test]
fn arbitrary_text_never_panics() {
    let texts = [
        "",
        "{",
        "[]",
        "null",
        "{\"a\":null}",
        "\u{0}",
        "{\"a\":\"b\"}",
    ];
    for key in [
        QOS_LEVEL_KEY,
        CPU_ENHANCEMENT_KEY,
        MEMORY_ENHANCEMENT_KEY,
        NETWORK_ENHANCEMENT_KEY,
        NUMA_IDS_KEY,
        NUMA_NUMBER_KEY,
    ] {
        for text in texts {
            let _ = parse(&annotations(&[(key, text)]));
        }
    }
}
