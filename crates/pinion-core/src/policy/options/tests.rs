use super::*;
use crate::topology::{synthetic, Shape};

fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn parse(
    pairs: &[(&str, &str)],
    gates: FeatureGates,
) -> Result<StaticPolicyOptions, PolicyOptionError> {
    StaticPolicyOptions::parse(&opts(pairs), gates)
}

#[test]
fn defaults_are_kubelets() {
    assert_eq!(
        FeatureGates::default(),
        FeatureGates {
            alpha: false,
            beta: true
        }
    );
    assert_eq!(
        parse(&[], FeatureGates::default()),
        Ok(StaticPolicyOptions::default())
    );
}

#[test]
fn every_option_sets_its_own_flag() {
    for (name, _) in KNOWN_OPTIONS {
        let parsed = parse(&[(name, "true")], FeatureGates::all()).unwrap();
        for (other, _) in KNOWN_OPTIONS {
            assert_eq!(parsed.get(other), Some(other == name), "{name} vs {other}");
        }
    }
    assert_eq!(StaticPolicyOptions::default().get("nope"), None);
}

#[test]
fn go_parse_bool_literals_only() {
    for text in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(parse_go_bool(text), Some(true), "{text}");
    }
    for text in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(parse_go_bool(text), Some(false), "{text}");
    }
    for text in ["tRuE", "yes", "", " true", "2", "on"] {
        assert_eq!(parse_go_bool(text), None, "{text}");
    }
}

#[test]
fn errors_have_kubelets_texts() {
    let gates = FeatureGates {
        alpha: false,
        beta: false,
    };
    let cases = [
        (vec![("Full-PCPUs-Only", "true")], "unknown CPU Manager Policy option: \"Full-PCPUs-Only\""),
        (vec![("align-by-socket", "false")], "CPU Manager Policy Alpha-level Options not enabled, but option \"align-by-socket\" provided"),
        (vec![("distribute-cpus-across-numa", "true")], "CPU Manager Policy Beta-level Options not enabled, but option \"distribute-cpus-across-numa\" provided"),
        (vec![("full-pcpus-only", "on")], "bad value for option \"full-pcpus-only\": strconv.ParseBool: parsing \"on\": invalid syntax"),
    ];
    for (pairs, text) in cases {
        assert_eq!(parse(&pairs, gates).unwrap_err().to_string(), text);
    }
}

#[test]
fn several_bad_options_report_the_first_by_name() {
    let err = parse(
        &[("zzz", "1"), ("full-pcpus-only", "maybe")],
        FeatureGates::all(),
    )
    .unwrap_err();
    assert!(matches!(err, PolicyOptionError::BadValue { ref name, .. } if name == FULL_PCPUS_ONLY));
}

#[test]
fn incompatible_pairs_in_kubelets_order() {
    let all_on: Vec<(&str, &str)> = KNOWN_OPTIONS.iter().map(|(n, _)| (*n, "true")).collect();
    let err = parse(&all_on, FeatureGates::all()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time"
    );
    let err = parse(
        &[
            (PREFER_ALIGN_CPUS_BY_UNCORECACHE, "1"),
            (DISTRIBUTE_CPUS_ACROSS_NUMA, "1"),
        ],
        FeatureGates::all(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        PolicyOptionError::Incompatible {
            first: PREFER_ALIGN_CPUS_BY_UNCORECACHE,
            second: DISTRIBUTE_CPUS_ACROSS_NUMA
        }
    );
}

#[test]
fn align_by_socket_machine_validation() {
    let shape = |sockets, numa_per_socket| Shape {
        sockets,
        numa_per_socket,
        cores_per_socket: 4,
        threads_per_core: 2,
        cores_per_uncore: 0,
    };
    let on = parse(&[(ALIGN_BY_SOCKET, "true")], FeatureGates::all()).unwrap();
    let snc = synthetic(shape(2, 2));
    assert_eq!(on.validate_machine(&snc, "restricted"), Ok(()));
    assert_eq!(
        on.validate_machine(&snc, "single-numa-node"),
        Err(PolicyOptionError::AlignBySocketWithSingleNumaNode)
    );
    assert!(on
        .validate_machine(&snc, "single-numa-node")
        .unwrap_err()
        .to_string()
        .starts_with("Topolgy manager"));
    assert_eq!(
        StaticPolicyOptions::default().validate_machine(&snc, "single-numa-node"),
        Ok(())
    );
    // Four sockets sharing two NUMA nodes.
    let mut spec = synthetic(shape(4, 1)).spec().clone();
    for cpu in &mut spec.cpus {
        cpu.numa = cpu.socket / 2;
    }
    spec.numa_nodes.clear();
    let wide = Topology::new(spec).unwrap();
    assert_eq!(
        on.validate_machine(&wide, "none"),
        Err(PolicyOptionError::AlignBySocketMoreSocketsThanNuma)
    );
}

#[test]
fn go_quoting_escapes_like_percent_q() {
    assert_eq!(GoQuoted("a\"b\\c").to_string(), r#""a\"b\\c""#);
    assert_eq!(GoQuoted("\n\t\u{1}\u{7f}").to_string(), r#""\n\t\x01\x7f""#);
    assert_eq!(GoQuoted("é").to_string(), "\"é\"");
}

/// Issue 28 item 6: `prefer-align-cpus-by-uncorecache` is stable in
/// kubelet v1.36 and v1.37; Pinion's table still had it at beta, so with
/// `CPUManagerPolicyBetaOptions: false` Pinion refused what kubelet takes.
#[test]
fn regression_uncorecache_alignment_is_ga_as_in_kubelet_v1_37() {
    let no_gates = FeatureGates {
        alpha: false,
        beta: false,
    };
    let parsed = parse(&[(PREFER_ALIGN_CPUS_BY_UNCORECACHE, "true")], no_gates)
        .expect("a stable option needs no gate");
    assert_eq!(parsed.get(PREFER_ALIGN_CPUS_BY_UNCORECACHE), Some(true));
    let maturities: Vec<(&str, Maturity)> = KNOWN_OPTIONS.to_vec();
    assert_eq!(
        maturities,
        [
            (FULL_PCPUS_ONLY, Maturity::Ga),
            (STRICT_CPU_RESERVATION, Maturity::Ga),
            (DISTRIBUTE_CPUS_ACROSS_NUMA, Maturity::Beta),
            (PREFER_ALIGN_CPUS_BY_UNCORECACHE, Maturity::Ga),
            (ALIGN_BY_SOCKET, Maturity::Alpha),
            (DISTRIBUTE_CPUS_ACROSS_CORES, Maturity::Alpha),
        ]
    );
}
