use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::checkpoint::{decode_verified, encode};

fn list(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("cpulist")
}

fn state(default: &str, assignments: &[(&str, &str, &str)]) -> State {
    let mut s = State {
        default: list(default),
        ..State::default()
    };
    for (pod, container, cpus) in assignments {
        s.assign(pod, container, list(cpus));
    }
    s
}

#[test]
fn records_encode_as_readable_json_and_decode_back() {
    let cases = [
        (
            Record::Assign {
                pod: "uid-1".into(),
                container: "app".into(),
                cpus: list("2-3,10"),
            },
            r#"{"op":"assign","pod":"uid-1","container":"app","cpus":"2-3,10"}"#,
        ),
        (
            Record::Unassign {
                pod: "uid-1".into(),
                container: "app".into(),
            },
            r#"{"op":"unassign","pod":"uid-1","container":"app"}"#,
        ),
        (
            Record::SetDefault { cpus: list("0-1") },
            r#"{"op":"set-default","cpus":"0-1"}"#,
        ),
        (
            Record::Side {
                kind: "qrm/memory".into(),
                key: "uid-1/app".into(),
                value: Some(json!({"nodes": [0]}).into()),
            },
            r#"{"op":"side","kind":"qrm/memory","key":"uid-1/app","value":{"nodes":[0]}}"#,
        ),
    ];
    for (record, text) in cases {
        assert_eq!(String::from_utf8(record.to_bytes()).expect("utf8"), text);
        assert_eq!(Record::from_bytes(text.as_bytes()), Ok(record));
    }
}

#[test]
fn malformed_records_are_errors_naming_the_problem() {
    for bad in [
        &b"{"[..],
        br#"{"op":"grow","cpus":"1"}"#,
        br#"{"op":"assign","pod":"p","container":"c","cpus":"3-1"}"#,
        br#"{"op":"set-default","cpus":"1","extra":true}"#,
        br#"{"op":"assign","pod":"p","container":"c"}"#,
        br#"{"op":"unassign","pod":"p","container":"c","cpus":"1"}"#,
        br#"{"op":"side","key":"k","value":1}"#,
    ] {
        let err = Record::from_bytes(bad).expect_err("refused");
        assert!(!err.reason.is_empty());
        assert!(err
            .to_string()
            .starts_with("record is not a valid decision: "));
    }
    let named = |bad: &[u8]| Record::from_bytes(bad).expect_err("refused").reason;
    assert!(named(br#"{"op":"grow","cpus":"1"}"#).contains("unknown op `grow`"));
    assert!(named(br#"{"op":"assign","pod":"p","container":"c"}"#).contains("`cpus`"));
    assert!(
        named(br#"{"op":"unassign","pod":"p","container":"c","cpus":"1"}"#)
            .contains("field `cpus` does not belong to op `unassign`")
    );
    assert!(named(br#"{"op":"set-default","cpus":"1","extra":true}"#).contains("`extra`"));
}

#[test]
fn an_admission_and_a_release_as_records() {
    let before = state("0-7", &[]);
    let after = state("0-1,4-7", &[("p", "c", "2-3")]);
    let admit = diff(&before, &after);
    assert_eq!(
        admit,
        vec![
            Record::Assign {
                pod: "p".into(),
                container: "c".into(),
                cpus: list("2-3")
            },
            Record::SetDefault {
                cpus: list("0-1,4-7")
            },
        ]
    );
    let release = diff(&after, &before);
    assert_eq!(
        release,
        vec![
            Record::Unassign {
                pod: "p".into(),
                container: "c".into()
            },
            Record::SetDefault { cpus: list("0-7") },
        ]
    );
    assert!(diff(&after, &after).is_empty());
}

#[test]
fn side_records_add_replace_and_remove_entries() {
    let mut side = SideData::new();
    let mut s = State::default();
    let set = |value| Record::Side {
        kind: "k".into(),
        key: "a".into(),
        value,
    };
    set(Some(json!(1).into())).apply(&mut s, &mut side);
    set(Some(json!(2).into())).apply(&mut s, &mut side);
    assert_eq!(side["k"]["a"], json!(2).into());
    set(None).apply(&mut s, &mut side);
    assert!(side.is_empty(), "an empty kind is dropped");
    set(None).apply(&mut s, &mut side);
    assert_eq!(
        s,
        State::default(),
        "side records leave the CPU state alone"
    );
}

#[test]
fn checkpoint_without_state_records_comes_back_verbatim() {
    let bytes = br#"{"policyName":"static","defaultCpuSet":"0-3","checksum":0}"#;
    let checkpoint = crate::checkpoint::decode(bytes).expect("decode");
    let side_only = [Record::Side {
        kind: "k".into(),
        key: "a".into(),
        value: None,
    }];
    let back = replay_onto_checkpoint(Some(&checkpoint), "static", &side_only).expect("replay");
    assert_eq!(back.as_ref(), Some(&checkpoint));
    assert_eq!(back.expect("some").stored_checksum(), 0);
}

#[test]
fn records_without_a_checkpoint_start_from_an_empty_state() {
    let records = [Record::SetDefault { cpus: list("0-3") }];
    let back = replay_onto_checkpoint(None, "static", &records)
        .expect("replay")
        .expect("a checkpoint");
    assert_eq!(back.policy_name(), "static");
    assert_eq!(back.default_cpu_set(), "0-3");
    back.verify().expect("fresh checksum");
}

#[test]
fn a_v1_checkpoint_cannot_take_records() {
    let v1 = br#"{"policyName":"static","defaultCpuSet":"0","entries":{"abc":"1"},"checksum":0}"#;
    let checkpoint = crate::checkpoint::decode(v1).expect("decode");
    let records = [Record::SetDefault { cpus: list("0") }];
    assert_eq!(
        replay_onto_checkpoint(Some(&checkpoint), "static", &records),
        Err(CheckpointError::NeedsMigration)
    );
}

fn arb_state() -> impl Strategy<Value = State> {
    (
        prop::collection::btree_set(0u32..16, 0..16),
        prop::collection::vec(
            (0u8..4, 0u8..3, prop::collection::btree_set(0u32..16, 1..4)),
            0..6,
        ),
    )
        .prop_map(|(default, assignments)| {
            let mut s = State {
                default: default.into_iter().collect(),
                ..State::default()
            };
            for (pod, container, cpus) in assignments {
                s.assign(
                    &format!("pod-{pod}"),
                    &format!("c{container}"),
                    cpus.into_iter().collect(),
                );
            }
            s
        })
}

fn arb_side() -> impl Strategy<Value = SideData> {
    prop::collection::vec((0u8..2, 0u8..3, 0u32..5), 0..4).prop_map(|entries| {
        let mut side = SideData::new();
        for (kind, key, value) in entries {
            side.entry(format!("kind-{kind}"))
                .or_default()
                .insert(format!("key-{key}"), json!(value).into());
        }
        side
    })
}

proptest! {
    /// Checkpoint of the first state + replay of the records of every later
    /// state == the last state, through kubelet's bytes.
    #[test]
    fn checkpoint_plus_replay_is_the_state_that_produced_the_records(
        states in prop::collection::vec((arb_state(), arb_side()), 1..8),
    ) {
        let (first, first_side) = &states[0];
        let mut records = crate::record::diff_side(&SideData::new(), first_side);
        for pair in states.windows(2) {
            records.extend(diff(&pair[0].0, &pair[1].0));
            records.extend(diff_side(&pair[0].1, &pair[1].1));
        }
        let (last, last_side) = states.last().expect("one state");

        let bytes = encode("static", &first.default.to_string(), &checkpoint_entries(first));
        let checkpoint = decode_verified(&bytes).expect("kubelet's bytes verify");
        let replayed = replay_onto_checkpoint(Some(&checkpoint), "static", &records)
            .expect("replays")
            .expect("a checkpoint");
        let parsed = replayed.to_state().expect("parses");
        prop_assert_eq!(&parsed.default_cpu_set, &last.default);
        prop_assert_eq!(&parsed.assignments, &last.assignments);
        replayed.verify().expect("checksum");

        // Through the bytes of each record, too.
        let mut state = first.clone();
        let mut side = SideData::new();
        for record in &records {
            let back = Record::from_bytes(&record.to_bytes()).expect("decodes");
            prop_assert_eq!(&back, record);
            back.apply(&mut state, &mut side);
        }
        prop_assert_eq!(&state, last);
        prop_assert_eq!(&side, last_side);
    }

    /// Absolute writes: replaying any suffix of the history again on the
    /// state it produced changes nothing (what makes a crash between a
    /// checkpoint rewrite and the journal reset harmless).
    #[test]
    fn replaying_a_suffix_again_changes_nothing(
        states in prop::collection::vec(arb_state(), 2..8),
        cut in 0usize..64,
    ) {
        let mut records = Vec::new();
        for pair in states.windows(2) {
            records.extend(diff(&pair[0], &pair[1]));
        }
        let last = states.last().expect("one state");
        let mut again = last.clone();
        let from = cut % (records.len() + 1);
        replay(&records[from..], &mut again, &mut SideData::new());
        prop_assert_eq!(&again, last);
    }

    /// A scope over the pods that changed gives exactly the whole-state
    /// diff (the controller records admissions and releases that way).
    #[test]
    fn a_scope_over_the_changed_pods_diffs_like_the_whole_state(
        before in arb_state(),
        after in arb_state(),
    ) {
        let pods: std::collections::BTreeSet<&str> = before
            .assignments
            .keys()
            .chain(after.assignments.keys())
            .map(String::as_str)
            .collect();
        let scope = Scope::of(&before, pods.iter().copied());
        let mut scoped = scope.diff(&after);
        let mut whole = diff(&before, &after);
        let key = |r: &Record| format!("{r:?}");
        scoped.sort_by_key(key);
        whole.sort_by_key(key);
        prop_assert_eq!(scoped, whole);
    }
}

#[test]
fn a_side_records_length_bound_is_never_below_its_encoding() {
    let side = |kind: &str, key: &str, value: Option<serde_json::Value>| Record::Side {
        kind: kind.into(),
        key: key.into(),
        value: value.map(SideValue::from),
    };
    let cases = [
        side("qrm-allocations", "uid-1/app", Some(json!({"cpu": "0-3"}))),
        side("", "", None),
        side("k\u{1}\u{1f}\"\\", "\n\t\u{7f}é", Some(json!("\u{0}"))),
        side("plugin-state/cpu", "rest", Some(json!([1, 2, {"a": null}]))),
    ];
    for record in cases {
        let bound = record.side_len_at_most().expect("a side record");
        let len = record.to_bytes().len();
        assert!(bound >= len, "{record:?}: bound {bound} < {len}");
    }
    let assign = Record::Unassign {
        pod: "p".into(),
        container: "c".into(),
    };
    assert_eq!(assign.side_len_at_most(), None, "only side records");
}

proptest! {
    #[test]
    fn the_side_length_bound_holds_for_any_kind_key_and_text(
        kind in "\\PC{0,12}|[\\x00-\\x1f\"\\\\]{0,12}",
        key in "\\PC{0,12}|[\\x00-\\x1f\"\\\\]{0,12}",
        text in ".{0,24}",
    ) {
        let record = Record::Side {
            kind,
            key,
            value: Some(SideValue::from(serde_json::Value::String(text))),
        };
        let bound = record.side_len_at_most().expect("a side record");
        prop_assert!(bound >= record.to_bytes().len());
    }
}
