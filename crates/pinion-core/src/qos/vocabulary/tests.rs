use super::*;
use crate::qos::{self, QosError, QosWarning, CPU_ENHANCEMENT_KEY};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// (level, numa_binding, numa_exclusive) as Pinion's plugins read them.
fn meaning(pairs: &[(&str, &str)]) -> (QosLevel, bool, bool, bool) {
    let r = qos::parse(&map(pairs)).expect("parses");
    (r.level, r.level_explicit, r.numa_binding, r.numa_exclusive)
}

#[test]
fn every_role_of_the_table_means_what_its_katalyst_annotations_mean() {
    // Each role against the katalyst annotations the examples
    // (`examples/scenarios/qrm-*.yaml`) write for the same pod.
    let dedicated = [(QOS_LEVEL_KEY, "dedicated_cores")];
    let cases: [(&str, Vec<(&str, &str)>); 7] = [
        (
            "online-micro_service",
            vec![(QOS_LEVEL_KEY, "shared_cores")],
        ),
        ("ETL", vec![(QOS_LEVEL_KEY, "reclaimed_cores")]),
        (
            "storage-service",
            vec![
                dedicated[0],
                (
                    MEMORY_ENHANCEMENT_KEY,
                    r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
                ),
            ],
        ),
        (
            "reranker",
            vec![
                dedicated[0],
                (MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#),
            ],
        ),
        (
            "numa-sharing && cpu-exclusive",
            vec![
                dedicated[0],
                (MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#),
            ],
        ),
        (
            "numa-sharing && cpu-execlusive",
            vec![
                dedicated[0],
                (MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#),
            ],
        ),
        (
            "numa-enhancement",
            vec![
                dedicated[0],
                (MEMORY_ENHANCEMENT_KEY, r#"{"numa_binding":"true"}"#),
            ],
        ),
    ];
    for (role, katalyst) in cases {
        let proposal = meaning(&[(POD_ROLE_ANNOTATION, role)]);
        assert_eq!(proposal, meaning(&katalyst), "role {role}");
        // Both vocabularies together, agreeing, mean the same again.
        let mut both = katalyst.clone();
        both.push((POD_ROLE_ANNOTATION, role));
        assert_eq!(
            meaning(&both),
            proposal,
            "role {role} with its katalyst twin"
        );
    }
    assert_eq!(ROLES.iter().map(|r| r.names.len()).sum::<usize>(), 7);
}

#[test]
fn role_names_are_matched_with_any_spacing_around_and() {
    assert!(role("numa-sharing&&cpu-exclusive").is_some());
    assert!(role("  numa-sharing &&   cpu-exclusive ").is_some());
    assert!(
        role("etl").is_none(),
        "the proposal's spelling, case included"
    );
    assert!(role("cpu-exclusive && numa-sharing").is_none());
}

#[test]
fn resource_type_terms_combine() {
    let cases = [
        (
            "cpu-exclusive",
            (QosLevel::DedicatedCores, true, false, false),
        ),
        ("cpu-sharing", (QosLevel::SharedCores, true, false, false)),
        (
            "numa-sharing && cpu-exclusive",
            (QosLevel::DedicatedCores, true, true, false),
        ),
        (
            "cpu-exclusive&&numa-exclusive",
            (QosLevel::DedicatedCores, true, true, true),
        ),
        ("numa-sharing", (QosLevel::SharedCores, false, true, false)),
        (
            "cpu-exclusive && cpu-exclusive",
            (QosLevel::DedicatedCores, true, false, false),
        ),
    ];
    for (value, want) in cases {
        assert_eq!(
            meaning(&[(RESOURCE_TYPE_ANNOTATION, value)]),
            want,
            "{value}"
        );
    }
}

#[test]
fn numa_exclusive_without_exclusive_cpus_is_ignored_as_katalysts_is() {
    let r = qos::parse(&map(&[(RESOURCE_TYPE_ANNOTATION, "numa-exclusive")])).expect("parses");
    assert!(r.numa_binding && !r.numa_exclusive);
    assert_eq!(
        r.warnings,
        [QosWarning::ExclusiveIgnored {
            level: QosLevel::SharedCores
        }]
    );
}

fn contradiction(pairs: &[(&str, &str)]) -> (String, String, String, String) {
    match qos::parse(&map(pairs)) {
        Err(QosError::Vocabulary(VocabularyError::Contradiction {
            first_key,
            first_value,
            second_key,
            second_value,
        })) => (first_key, first_value, second_key, second_value),
        other => panic!("{pairs:?}: expected a contradiction, got {other:?}"),
    }
}

fn owned(a: &str, b: &str, c: &str, d: &str) -> (String, String, String, String) {
    (a.into(), b.into(), c.into(), d.into())
}

#[test]
fn contradictions_name_both_keys_and_values() {
    let cases = [
        (
            "role against katalyst's level",
            vec![
                (POD_ROLE_ANNOTATION, "storage-service"),
                (QOS_LEVEL_KEY, "shared_cores"),
            ],
            owned(
                POD_ROLE_ANNOTATION,
                "storage-service",
                QOS_LEVEL_KEY,
                "shared_cores",
            ),
        ),
        (
            "role against the resource type",
            vec![
                (POD_ROLE_ANNOTATION, "ETL"),
                (RESOURCE_TYPE_ANNOTATION, "cpu-exclusive"),
            ],
            owned(
                POD_ROLE_ANNOTATION,
                "ETL",
                RESOURCE_TYPE_ANNOTATION,
                "cpu-exclusive",
            ),
        ),
        (
            "inside one resource type",
            vec![(RESOURCE_TYPE_ANNOTATION, "cpu-exclusive && cpu-sharing")],
            owned(
                RESOURCE_TYPE_ANNOTATION,
                "cpu-exclusive",
                RESOURCE_TYPE_ANNOTATION,
                "cpu-sharing",
            ),
        ),
        (
            "numa holding inside one resource type",
            vec![(RESOURCE_TYPE_ANNOTATION, "numa-sharing && numa-exclusive")],
            owned(
                RESOURCE_TYPE_ANNOTATION,
                "numa-sharing",
                RESOURCE_TYPE_ANNOTATION,
                "numa-exclusive",
            ),
        ),
        (
            "a sharing role against katalyst's numa_exclusive",
            vec![
                (POD_ROLE_ANNOTATION, "reranker"),
                (QOS_LEVEL_KEY, "dedicated_cores"),
                (
                    MEMORY_ENHANCEMENT_KEY,
                    r#"{"numa_binding":"true","numa_exclusive":"true"}"#,
                ),
            ],
            owned(
                POD_ROLE_ANNOTATION,
                "reranker",
                MEMORY_ENHANCEMENT_KEY,
                "numa_exclusive: true",
            ),
        ),
        (
            "a numa term against katalyst's numa_binding false",
            vec![
                (RESOURCE_TYPE_ANNOTATION, "numa-sharing"),
                (NUMA_BINDING_KEY, "false"),
            ],
            owned(
                RESOURCE_TYPE_ANNOTATION,
                "numa-sharing",
                NUMA_BINDING_KEY,
                "false",
            ),
        ),
    ];
    for (name, pairs, want) in cases {
        assert_eq!(contradiction(&pairs), want, "{name}");
    }
    let err = qos::parse(&map(&[
        (POD_ROLE_ANNOTATION, "storage-service"),
        (QOS_LEVEL_KEY, "shared_cores"),
    ]))
    .expect_err("contradiction");
    assert_eq!(
        err.to_string(),
        "contradictory pod metadata: kubernetes.io/pod-role: \"storage-service\" contradicts \
         katalyst.kubewharf.io/qos_level: \"shared_cores\""
    );
}

#[test]
fn unknown_terms_and_roles() {
    let err = qos::parse(&map(&[(RESOURCE_TYPE_ANNOTATION, "cpu-exclusive && gpu")]))
        .expect_err("unknown term");
    assert_eq!(
        err,
        QosError::Vocabulary(VocabularyError::UnknownTerm {
            value: "cpu-exclusive && gpu".into(),
            term: "gpu".into(),
        })
    );
    assert!(matches!(
        qos::parse(&map(&[(RESOURCE_TYPE_ANNOTATION, "cpu-exclusive &&")])),
        Err(QosError::Vocabulary(VocabularyError::UnknownTerm { term, .. })) if term.is_empty()
    ));
    // A role the table does not know keeps katalyst's meaning, with a word.
    let r = qos::parse(&map(&[
        (POD_ROLE_ANNOTATION, "video-transcoding"),
        (QOS_LEVEL_KEY, "reclaimed_cores"),
    ]))
    .expect("parses");
    assert_eq!(r.level, QosLevel::ReclaimedCores);
    assert_eq!(
        r.warnings,
        [QosWarning::UnknownRole {
            value: "video-transcoding".into()
        }]
    );
}

#[test]
fn consistent_duplicates_are_fine() {
    let r = qos::parse(&map(&[
        (POD_ROLE_ANNOTATION, "online-micro_service"),
        (RESOURCE_TYPE_ANNOTATION, "cpu-sharing"),
        (QOS_LEVEL_KEY, "shared_cores"),
        (CPU_ENHANCEMENT_KEY, r#"{"cpuset_pool":"web"}"#),
    ]))
    .expect("parses");
    assert_eq!(
        (r.level, r.cpuset_pool.as_str()),
        (QosLevel::SharedCores, "web")
    );
    assert!(r.warnings.is_empty());
}

#[test]
fn identity_takes_either_vocabulary_and_refuses_disagreement() {
    let role_label = map(&[(POD_ROLE_LABEL, "numa-enhancement")]);
    let cases = [
        (map(&[]), map(&[]), ("", "")),
        (
            role_label.clone(),
            map(&[(POD_TYPE_KEY, "online")]),
            ("numa-enhancement", "online"),
        ),
        (
            map(&[]),
            map(&[
                (POD_ROLE_ANNOTATION, "reranker"),
                (RESOURCE_TYPE_ANNOTATION, "cpu-exclusive"),
            ]),
            ("reranker", "cpu-exclusive"),
        ),
        // The abbreviation and the full name are one role.
        (
            role_label.clone(),
            map(&[(POD_ROLE_ANNOTATION, "numa-sharing && cpu-exclusive")]),
            ("numa-sharing && cpu-exclusive", ""),
        ),
        (
            map(&[]),
            map(&[
                (RESOURCE_TYPE_ANNOTATION, "numa-sharing&&cpu-exclusive"),
                (POD_TYPE_KEY, "numa-sharing && cpu-exclusive"),
            ]),
            ("", "numa-sharing&&cpu-exclusive"),
        ),
    ];
    for (labels, annotations, (role, kind)) in cases {
        let got = identity(&labels, &annotations).expect("identity");
        assert_eq!((got.pod_role.as_str(), got.pod_type.as_str()), (role, kind));
    }
    let refused = [
        (
            role_label.clone(),
            map(&[(POD_ROLE_ANNOTATION, "reranker")]),
            owned(
                POD_ROLE_ANNOTATION,
                "reranker",
                POD_ROLE_LABEL,
                "numa-enhancement",
            ),
        ),
        (
            map(&[(POD_ROLE_LABEL, "web")]),
            map(&[(POD_ROLE_ANNOTATION, "frontend")]),
            owned(POD_ROLE_ANNOTATION, "frontend", POD_ROLE_LABEL, "web"),
        ),
        (
            map(&[]),
            map(&[
                (RESOURCE_TYPE_ANNOTATION, "cpu-exclusive"),
                (POD_TYPE_KEY, "batch"),
            ]),
            owned(
                RESOURCE_TYPE_ANNOTATION,
                "cpu-exclusive",
                POD_TYPE_KEY,
                "batch",
            ),
        ),
        (
            map(&[]),
            map(&[
                (POD_ROLE_ANNOTATION, "ETL"),
                (QOS_LEVEL_KEY, "dedicated_cores"),
            ]),
            owned(POD_ROLE_ANNOTATION, "ETL", QOS_LEVEL_KEY, "dedicated_cores"),
        ),
    ];
    for (labels, annotations, want) in refused {
        match identity(&labels, &annotations) {
            Err(VocabularyError::Contradiction {
                first_key,
                first_value,
                second_key,
                second_value,
            }) => assert_eq!((first_key, first_value, second_key, second_value), want),
            other => panic!("{annotations:?}: expected a contradiction, got {other:?}"),
        }
    }
}
