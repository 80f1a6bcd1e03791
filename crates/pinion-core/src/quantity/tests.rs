use super::*;
use proptest::prelude::*;

fn q(text: &str) -> Quantity {
    Quantity::parse(text).unwrap_or_else(|err| panic!("{text:?} should parse: {err}"))
}

#[test]
fn cpu_quantities_read_as_millicores_like_kubelet() {
    let cases = [
        ("500m", 500),
        ("1.5", 1500),
        ("2", 2000),
        ("2000m", 2000),
        ("0.1", 100),
        ("1e3", 1_000_000),
        ("1.", 1000),
        (".5", 500),
        ("+3", 3000),
        ("0", 0),
        ("000", 0),
        ("-0", 0),
        ("1k", 1_000_000),
        ("100u", 1),
        ("1n", 1),
        ("0.0001", 1),
        ("1500000n", 2),
        ("1E-3", 1),
        ("1e+2", 100_000),
    ];
    for (text, millis) in cases {
        assert_eq!(q(text).milli_value(), millis, "{text}");
    }
}

#[test]
fn memory_quantities_read_as_bytes_rounded_up() {
    let cases = [
        ("1G", 1_000_000_000),
        ("64Mi", 64 << 20),
        ("1Ki", 1024),
        ("1.5Ki", 1536),
        ("1.5Gi", 3 << 29),
        ("1Ei", 1 << 60),
        ("1E", 1_000_000_000_000_000_000),
        ("1T", 1_000_000_000_000),
        ("12e6", 12_000_000),
        ("100m", 1),
        ("0.5", 1),
        ("1.1", 2),
        ("129M", 129_000_000),
        ("1.G", 1_000_000_000),
    ];
    for (text, bytes) in cases {
        assert_eq!(q(text).value(), bytes, "{text}");
    }
}

#[test]
fn finer_than_nano_rounds_up_to_one_nano() {
    assert_eq!(q("0.1n").milli_value(), 1);
    assert_eq!(q("1e-40").value(), 1);
    assert!(!q("0.1n").is_zero());
}

#[test]
fn integral_cpu_follows_kubelet_rule() {
    for text in ["1", "2", "2000m", "1e3", "3.000", "1k", "0"] {
        assert!(q(text).is_integral(), "{text} is integral");
    }
    for text in ["1500m", "2.5", "1001m", "977m", "0.0001", "1n", "500m"] {
        assert!(!q(text).is_integral(), "{text} is not integral");
    }
}

#[test]
fn equality_compares_values_and_display_keeps_text() {
    assert_eq!(q("1"), q("1000m"));
    assert_eq!(q("1Ki"), q("1024"));
    assert_ne!(q("1k"), q("1Ki"));
    assert_eq!(q("2000m").to_string(), "2000m");
}

#[test]
fn nonsense_quantities_are_errors_naming_the_text() {
    assert_eq!(Quantity::parse(""), Err(QuantityError::Empty));
    let bad = [
        "abc", "1x", "1.5.5", "1e", "1e+", "1ki", "1K", "1Mi5", "m", ".", "-", "1 ", " 1", "1m+",
        "1e--3", "Mi", "1eM5", "0x10",
    ];
    for text in bad {
        let err = Quantity::parse(text).expect_err(text);
        assert!(err.to_string().contains(&format!("{text:?}")), "{err}");
    }
    assert!(matches!(
        Quantity::parse("1mm"),
        Err(QuantityError::Suffix { suffix, .. }) if suffix == "mm"
    ));
    for suffix in ["Ee3", "eM5", "Ki3"] {
        assert!(
            matches!(
                Quantity::parse(&format!("1{suffix}")),
                Err(QuantityError::Suffix { .. })
            ),
            "{suffix}"
        );
    }
    assert!(matches!(
        Quantity::parse("-1"),
        Err(QuantityError::Negative { .. })
    ));
    for huge in ["1e40", "10E", "9Ei", "1e99999999999999999999"] {
        assert!(
            matches!(Quantity::parse(huge), Err(QuantityError::OutOfRange { .. })),
            "{huge}"
        );
    }
}

#[test]
fn serde_reads_strings_and_numbers() {
    let parsed: Vec<Quantity> = serde_json::from_str(r#"["500m", 2, 1.5]"#).unwrap();
    let millis: Vec<u128> = parsed.iter().map(Quantity::milli_value).collect();
    assert_eq!(millis, [500, 2000, 1500]);
    assert_eq!(serde_json::to_string(&parsed[0]).unwrap(), r#""500m""#);
    assert!(serde_json::from_str::<Quantity>(r#""lots""#).is_err());
}

proptest! {
    #[test]
    fn any_text_parses_or_errors_without_panicking(text in "[0-9.eEinumkKMGTP+\\-x ]{0,12}|\\PC{0,8}") {
        if let Ok(parsed) = Quantity::parse(&text) {
            prop_assert_eq!(parsed.to_string(), text);
            prop_assert!(parsed.milli_value() >= u128::from(parsed.value().saturating_sub(1)) * 1000);
        }
    }

    #[test]
    fn round_numbers_read_back_exactly(n in 0u64..1_000_000_000) {
        let units = q(&n.to_string());
        prop_assert_eq!(units.value(), n);
        prop_assert_eq!(units.milli_value(), u128::from(n) * 1000);
        prop_assert!(units.is_integral());
        prop_assert_eq!(&units, &Quantity::from_units(n));
        let millis = q(&format!("{n}m"));
        prop_assert_eq!(millis.milli_value(), u128::from(n));
        prop_assert_eq!(millis.is_integral(), n % 1000 == 0);
        prop_assert_eq!(millis.value(), n.div_ceil(1000));
        prop_assert_eq!(q(&format!("{n}Ki")).value(), n * 1024);
        prop_assert_eq!(q(&format!("{n}k")), q(&format!("{n}000")));
        prop_assert_eq!(q(&format!("{n}e3")), q(&format!("{n}k")));
    }

    #[test]
    fn decimal_fractions_match_their_millis(whole in 0u64..100_000, frac in 0u64..1000) {
        let text = format!("{whole}.{frac:03}");
        let parsed = q(&text);
        prop_assert_eq!(parsed.milli_value(), u128::from(whole * 1000 + frac));
        prop_assert_eq!(parsed.is_integral(), frac == 0);
    }
}

/// Regression (found by the `quantity` fuzz target): an exponent that parses
/// as `i64::MAX` overflowed the exponent arithmetic (a panic in debug
/// builds, a wrapped and wrong value in release builds).
#[test]
fn exponent_at_the_i64_limits_is_out_of_range_not_an_overflow() {
    assert!(Quantity::parse("00000000000000002E0009223372036854775807").is_err());
    assert!(Quantity::parse("1e9223372036854775807").is_err());
    // A hugely negative exponent rounds up to one nano unit, as Kubernetes does.
    let tiny = Quantity::parse("1e-9223372036854775808").expect("rounds up");
    assert_eq!(tiny.milli_value(), 1);
}

/// kubelet's resize errors print `Quantity.String()`: the decimal-SI
/// canonical form (values as in upstream's resize test expectations).
#[test]
fn canonical_form_is_kubernetes_decimal_si() {
    for (text, canonical) in [
        ("2000m", "2"),
        ("2", "2"),
        ("1500m", "1500m"),
        ("1.5", "1500m"),
        ("2100m", "2100m"),
        ("100m", "100m"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("0", "0"),
        ("0.5m", "500u"),
        ("1e3", "1k"),
    ] {
        assert_eq!(q(text).canonical(), canonical, "{text}");
    }
}
