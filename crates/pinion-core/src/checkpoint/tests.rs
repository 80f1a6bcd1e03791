use super::*;
use proptest::prelude::*;

/// The two examples of kubelet's `state_checkpoint_test.go` (spec §7): facts
/// of the format, kept here as well as read from the shared corpus.
const SPEC_EMPTY: &str =
    r#"{"policyName": "none", "defaultCPUSet": "4-6", "entries": {}, "checksum": 354655845}"#;
const SPEC_EMPTY_TEXT: &str = "(*state.CPUManagerCheckpoint){PolicyName:(string)none \
    DefaultCPUSet:(string)4-6 Entries:(map[string]map[string]string)map[] \
    Checksum:(checksum.Checksum)0}";
const SPEC_POD: &str = r#"{"policyName": "none", "defaultCPUSet": "1-3", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}, "checksum": 3610638499}"#;
const SPEC_POD_TEXT: &str = "(*state.CPUManagerCheckpoint){PolicyName:(string)none \
    DefaultCPUSet:(string)1-3 Entries:(map[string]map[string]string)map[pod:map[container1:4-6 \
    container2:1-3]] Checksum:(checksum.Checksum)0}";

fn pods(items: &[(&str, &str, &str)]) -> PodEntries {
    let mut out = PodEntries::new();
    for (pod, container, cpus) in items {
        out.entry((*pod).to_string())
            .or_default()
            .insert((*container).to_string(), (*cpus).to_string());
    }
    out
}

#[path = "../../tests/common/shared.rs"]
mod shared;

fn shared_dir() -> Option<std::path::PathBuf> {
    shared::shared("conformance/kubelet")
}

#[test]
fn fnv1a_32_matches_the_published_test_vectors() {
    assert_eq!(fnv1a_32(b""), 0x811c_9dc5);
    assert_eq!(fnv1a_32(b"a"), 0xe40c_292c);
    assert_eq!(fnv1a_32(b"foobar"), 0xbf9c_f968);
}

#[test]
fn spec_vectors_hash_bit_exactly() {
    for (file, text, value) in [
        (SPEC_EMPTY, SPEC_EMPTY_TEXT, 354_655_845),
        (SPEC_POD, SPEC_POD_TEXT, 3_610_638_499),
    ] {
        let checkpoint = decode(file.as_bytes()).expect("spec vector decodes");
        assert_eq!(checkpoint.version(), Version::V2);
        assert_eq!(hashed_text(&checkpoint), text);
        assert_eq!(u64::from(fnv1a_32(text.as_bytes())), value);
        assert_eq!(checkpoint.computed_checksum(), value);
        assert_eq!(checkpoint.stored_checksum(), value);
        checkpoint.verify().expect("spec vector verifies");
    }
}

#[test]
fn corpus_vectors_hash_bit_exactly() {
    let Some(dir) = shared_dir() else { return };
    let text = std::fs::read_to_string(dir.join("checkpoint_checksum.json")).expect("corpus");
    let cases: Vec<serde_json::Value> = serde_json::from_str(&text).expect("corpus json");
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let file = case["file"].as_str().expect("file");
        let checkpoint = decode(file.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            hashed_text(&checkpoint),
            case["hashed_text"].as_str().expect("text"),
            "{name}"
        );
        assert_eq!(
            Some(checkpoint.computed_checksum()),
            case["fnv1a32"].as_u64(),
            "{name}"
        );
        assert_eq!(checkpoint.verify(), Ok(()), "{name}");
    }
}

#[test]
fn encode_writes_exactly_what_kubelet_writes() {
    let empty = encode("none", "4-6", &PodEntries::new());
    assert_eq!(
        String::from_utf8(empty).expect("utf8"),
        r#"{"policyName":"none","defaultCpuSet":"4-6","checksum":354655845}"#
    );
    let with_pod = pods(&[("pod", "container1", "4-6"), ("pod", "container2", "1-3")]);
    assert_eq!(
        String::from_utf8(encode("none", "1-3", &with_pod)).expect("utf8"),
        r#"{"policyName":"none","defaultCpuSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"1-3"}},"checksum":3610638499}"#
    );
}

#[test]
fn encode_escapes_strings_like_go() {
    let bytes = encode(
        "a\"b\\c<>&\n\t\u{8}\u{c}\r\u{1}\u{2028}é",
        "",
        &PodEntries::new(),
    );
    let text = String::from_utf8(bytes.clone()).expect("utf8");
    assert!(
        text.starts_with(
            r#"{"policyName":"a\"b\\c\u003c\u003e\u0026\n\t\b\f\r\u0001\u2028é","defaultCpuSet":"""#
        ),
        "{text}"
    );
    let back = decode_verified(&bytes).expect("round trip");
    assert_eq!(
        back.policy_name(),
        "a\"b\\c<>&\n\t\u{8}\u{c}\r\u{1}\u{2028}é"
    );
}

#[test]
fn hashed_text_prints_strings_raw() {
    let checkpoint = Checkpoint::new("my policy", "0-1 x", pods(&[("p q", "c:d", " 1 ")]));
    assert_eq!(
        hashed_text(&checkpoint),
        "(*state.CPUManagerCheckpoint){PolicyName:(string)my policy DefaultCPUSet:(string)0-1 x \
         Entries:(map[string]map[string]string)map[p q:map[c:d: 1 ]] Checksum:(checksum.Checksum)0}"
    );
}

#[test]
fn hashed_text_sorts_keys_by_bytes() {
    let checkpoint = Checkpoint::new(
        "static",
        "0",
        pods(&[("b", "z", "1"), ("a", "y", "2"), ("B", "x", "3")]),
    );
    assert!(hashed_text(&checkpoint).contains("map[B:map[x:3] a:map[y:2] b:map[z:1]]"));
}

fn v1_file(checksum: u64) -> String {
    format!(
        r#"{{"policyName":"static","defaultCpuSet":"0","entries":{{"cid-2":"2-3","cid-1":"1"}},"checksum":{checksum}}}"#
    )
}

const V1_TEXT: &str = "(*state.CPUManagerCheckpoint){PolicyName:(string)static \
    DefaultCPUSet:(string)0 Entries:(map[string]string)map[cid-1:1 cid-2:2-3] \
    Checksum:(checksum.Checksum)0}";

#[test]
fn v1_file_is_read_and_verified_with_the_v1_entry_type() {
    let sum = u64::from(fnv1a_32(V1_TEXT.as_bytes()));
    let checkpoint = decode(v1_file(sum).as_bytes()).expect("v1 decodes");
    assert_eq!(checkpoint.version(), Version::V1);
    assert_eq!(hashed_text(&checkpoint), V1_TEXT);
    assert_eq!(checkpoint.verify(), Ok(()));
    let Entries::V1(by_id) = checkpoint.entries() else {
        panic!("v1 entries")
    };
    assert_eq!(by_id.get("cid-2").map(String::as_str), Some("2-3"));
    assert_eq!(checkpoint.to_state(), Err(CheckpointError::NeedsMigration));
    assert_eq!(checkpoint.to_bytes(), Err(CheckpointError::NeedsMigration));
}

#[test]
fn v1_file_with_zero_checksum_is_accepted_as_legacy() {
    let checkpoint = decode_verified(v1_file(0).as_bytes()).expect("legacy v1");
    assert_eq!(checkpoint.version(), Version::V1);
}

#[test]
fn tampered_v1_file_is_reported_corrupted() {
    let sum = u64::from(fnv1a_32(V1_TEXT.as_bytes()));
    let tampered = v1_file(sum).replace("2-3", "2-4");
    let checkpoint = decode(tampered.as_bytes()).expect("shape still decodes");
    assert_eq!(checkpoint.version(), Version::V1);
    let err = checkpoint.verify().expect_err("tampered");
    assert!(matches!(err, CheckpointError::Corrupted { stored, .. } if stored == sum));
    assert_eq!(err.to_string(), "checkpoint is corrupted");
}

#[test]
fn v1_migrates_to_v2_through_the_container_map() {
    let checkpoint = decode(v1_file(0).as_bytes()).expect("v1");
    let lookup = |id: &str| match id {
        "cid-1" => Some(("pod-a".to_string(), "app".to_string())),
        "cid-2" => Some(("pod-b".to_string(), "db".to_string())),
        _ => None,
    };
    let migrated = checkpoint.migrate_v1(lookup).expect("known ids");
    assert_eq!(migrated.version(), Version::V2);
    assert_eq!(migrated.verify(), Ok(()));
    let state = migrated.to_state().expect("parses");
    assert_eq!(state.assignments["pod-b"]["db"], CpuSet::range(2, 3));
    let err = checkpoint.migrate_v1(|_| None).expect_err("unknown id");
    assert!(matches!(err, CheckpointError::UnknownContainerId { .. }));
    assert!(err
        .to_string()
        .ends_with("containerID 'cid-1' not found in initial containers list"));
}

#[test]
fn keys_match_case_insensitively_like_go() {
    // U+017F (long s) folds to S and U+212A (Kelvin sign) to K in Go.
    let file = "{\"POLICYNAME\":\"none\",\"DefaultCPUSET\":\"4-6\",\"ENTRIES\":{},\
                \"che\u{212a}\u{17f}um\":354655845}";
    let checkpoint = decode_verified(file.as_bytes()).expect("folded keys");
    assert_eq!(checkpoint.policy_name(), "none");
    assert_eq!(checkpoint.default_cpu_set(), "4-6");
    // Dotted capital I does not fold to I in Go: the key is unknown.
    let unknown = decode(r#"{"pol\u0130cyName":"none"}"#.as_bytes()).expect("decodes");
    assert_eq!(unknown.policy_name(), "");
}

#[test]
fn unknown_keys_are_ignored_and_last_duplicate_wins() {
    let file = r#"{"extra":[1,{"a":null}],"policyName":"x","policyname":"none","defaultCPUSet":"4-6","entries":{},"checksum":354655845,"podEntries":{}}"#;
    let checkpoint = decode_verified(file.as_bytes()).expect("decodes");
    assert_eq!(checkpoint.policy_name(), "none");
}

#[test]
fn repeated_entries_objects_merge_like_go() {
    let file =
        r#"{"entries":{"p1":{"c":"1"}},"entries":{"p2":{"c":"2"}},"entries":{"p1":{"d":"3"}}}"#;
    let checkpoint = decode(file.as_bytes()).expect("decodes");
    assert_eq!(
        checkpoint.entries(),
        &Entries::V2(pods(&[("p1", "d", "3"), ("p2", "c", "2")]))
    );
}

#[test]
fn null_maps_hash_as_go_nil_maps() {
    let nil_entries =
        "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)0 \
        Entries:(map[string]map[string]string)<nil> Checksum:(checksum.Checksum)0}";
    let sum = fnv1a_32(nil_entries.as_bytes());
    let file =
        format!(r#"{{"policyName":"none","defaultCpuSet":"0","entries":null,"checksum":{sum}}}"#);
    let checkpoint = decode_verified(file.as_bytes()).expect("nil entries verify");
    assert_eq!(hashed_text(&checkpoint), nil_entries);

    let nil_pod = "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)0 \
        Entries:(map[string]map[string]string)map[p:<nil> q:map[c:]] Checksum:(checksum.Checksum)0}";
    let sum = fnv1a_32(nil_pod.as_bytes());
    let file = format!(
        r#"{{"policyName":"none","defaultCpuSet":"0","entries":{{"p":null,"q":{{"c":null}}}},"checksum":{sum}}}"#
    );
    let checkpoint = decode_verified(file.as_bytes()).expect("nil pod verifies");
    assert_eq!(hashed_text(&checkpoint), nil_pod);
}

#[test]
fn null_scalars_leave_fields_unchanged() {
    let file = r#"{"policyName":"none","policyName":null,"checksum":null}"#;
    let checkpoint = decode(file.as_bytes()).expect("decodes");
    assert_eq!(checkpoint.policy_name(), "none");
    assert_eq!(checkpoint.stored_checksum(), 0);
}

#[test]
fn tampered_file_is_corrupted_with_kubelets_text() {
    let tampered = SPEC_POD.replace("\"4-6\"", "\"4-7\"");
    let checkpoint = decode(tampered.as_bytes()).expect("still decodes");
    let err = checkpoint.verify().expect_err("tampered");
    assert_eq!(err.to_string(), "checkpoint is corrupted");
    assert!(matches!(
        err,
        CheckpointError::Corrupted { stored: 3_610_638_499, computed } if computed != 3_610_638_499
    ));
    assert!(decode_verified(tampered.as_bytes()).is_err());
}

#[test]
fn every_truncation_is_an_error() {
    for len in 0..SPEC_POD.len() {
        let err = decode(&SPEC_POD.as_bytes()[..len]).expect_err("truncated");
        assert!(
            matches!(
                err,
                CheckpointError::Truncated { .. } | CheckpointError::Syntax { .. }
            ),
            "prefix {len}: {err:?}"
        );
    }
    assert!(matches!(
        decode(b""),
        Err(CheckpointError::Truncated { .. })
    ));
    assert!(matches!(
        decode(b"{\"policyName\":\"no"),
        Err(CheckpointError::Truncated { .. })
    ));
}

#[test]
fn garbage_is_a_clear_error() {
    let cases: [(&str, &[u8]); 9] = [
        ("not json", b"hello"),
        ("trailing data", br#"{"policyName":"none"} x"#),
        ("invalid utf-8", b"{\"policyName\":\"\xff\"}"),
        ("array", b"[]"),
        ("null", b"null"),
        ("number policy", br#"{"policyName":5}"#),
        ("negative checksum", br#"{"checksum":-1}"#),
        ("fractional checksum", br#"{"checksum":1.5}"#),
        ("entries of numbers", br#"{"entries":{"p":5}}"#),
    ];
    for (name, bytes) in cases {
        let err = decode(bytes).expect_err(name);
        assert!(
            matches!(
                err,
                CheckpointError::Syntax { .. } | CheckpointError::Layout { .. }
            ),
            "{name}: {err:?}"
        );
        assert!(err.to_string().starts_with("checkpoint "), "{name}: {err}");
    }
}

#[test]
fn documented_differences_from_go() {
    let cases: [(&str, &[u8]); 3] = [
        ("lone surrogate", br#"{"policyName":"\ud800"}"#),
        ("invalid utf-8", b"{\"policyName\":\"\xc3\"}"),
        ("null document", b"null"),
    ];
    for (name, bytes) in cases {
        assert!(decode(bytes).is_err(), "{name}");
    }
    // Go refuses nesting deeper than 10000; an unknown value is skipped here
    // whatever its depth.
    let deep = format!(r#"{{"x":{}{}}}"#, "[".repeat(20_000), "]".repeat(20_000));
    assert!(decode(deep.as_bytes()).is_ok());
}

#[test]
fn to_state_parses_cpusets_with_kubelets_texts() {
    let good = Checkpoint::new("static", "0,6", pods(&[("pod", "c", "1-5,7-11")]));
    let state = good.to_state().expect("valid");
    assert_eq!(
        state.default_cpu_set,
        CpuSet::from_ids([0, 6]).expect("ids")
    );
    assert_eq!(state.assignments["pod"]["c"].len(), 10);

    let bad_default = Checkpoint::new("static", "0-x", PodEntries::new());
    let err = bad_default.to_state().expect_err("bad default");
    assert!(
        err.to_string()
            .starts_with("could not parse default cpu set \"0-x\": "),
        "{err}"
    );

    let bad_container = Checkpoint::new("static", "0", pods(&[("pod", "c", "3-1")]));
    let err = bad_container.to_state().expect_err("bad container");
    assert!(
        err.to_string()
            .starts_with("could not parse cpuset \"3-1\" for container \"c\" in pod \"pod\": "),
        "{err}"
    );
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9-]{0,12}",
        "[0-9]{1,3}(-[0-9]{1,3})?(,[0-9]{1,3})*",
        any::<String>(),
    ]
}

fn entries() -> impl Strategy<Value = PodEntries> {
    prop::collection::btree_map(
        text(),
        prop::collection::btree_map(text(), text(), 0..4),
        0..4,
    )
}

proptest! {
    #[test]
    fn encode_then_decode_returns_the_same_content(
        policy in text(),
        default in text(),
        entries in entries(),
    ) {
        let bytes = encode(&policy, &default, &entries);
        let back = decode_verified(&bytes).expect("own output decodes and verifies");
        prop_assert_eq!(back.policy_name(), policy.as_str());
        prop_assert_eq!(back.default_cpu_set(), default.as_str());
        prop_assert_eq!(back.entries(), &Entries::V2(entries.clone()));
        prop_assert_eq!(back.to_bytes().expect("v2"), bytes);
    }
}
