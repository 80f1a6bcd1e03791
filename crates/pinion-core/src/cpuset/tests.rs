use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

fn list(text: &str) -> CpuSet {
    CpuSet::parse_list(text).expect("valid cpulist")
}

#[test]
fn cpulist_formats_runs_and_singletons() {
    let set: CpuSet = [0, 1, 2, 3, 8, 10, 11].into_iter().collect();
    assert_eq!(set.to_string(), "0-3,8,10-11");
    assert_eq!(CpuSet::new().to_string(), "");
}

#[test]
fn cpulist_parse_accepts_linux_forms() {
    assert_eq!(list("").len(), 0);
    assert_eq!(list("5"), [5].into_iter().collect());
    assert_eq!(list("0-3,8-11").len(), 8);
    assert_eq!(list("3,1,2-2"), [1, 2, 3].into_iter().collect());
    assert_eq!(list("8191").last(), Some(8191));
    // Ranges across word (64 CPUs) and inline/heap boundaries.
    for (text, written, len) in [
        ("63-64", "63-64", 2),
        ("0-127", "0-127", 128),
        ("200-260,60-70", "60-70,200-260", 72),
        ("0-8191", "0-8191", 8192),
        ("8128-8191,0,1-1", "0-1,8128-8191", 66),
    ] {
        let set = list(text);
        assert_eq!(set.to_string(), written, "{text}");
        assert_eq!(set.len(), len, "{text}");
    }
}

#[test]
fn cpulist_parse_rejects_malformed_text_naming_it() {
    for bad in [
        "5-3",
        "1-2-3",
        "1,,2",
        " 1",
        "1 ",
        "1, 2",
        "a",
        "-1",
        "1-",
        ",",
        "8192",
        "0x1",
        "99999999999999999999",
    ] {
        match CpuSet::parse_list(bad) {
            Err(CpuSetError::List { text, .. }) => assert_eq!(text, bad),
            other => panic!("{bad:?} parsed as {other:?}"),
        }
    }
}

#[test]
fn mask_parse_reads_sysfs_cpumap() {
    assert_eq!(
        CpuSet::parse_mask("00000000,0000ff0f")
            .expect("mask")
            .to_string(),
        "0-3,8-15"
    );
    assert_eq!(
        CpuSet::parse_mask("00000001,00000000")
            .expect("mask")
            .to_string(),
        "32"
    );
    assert_eq!(CpuSet::parse_mask("f").expect("mask").to_string(), "0-3");
    assert_eq!(CpuSet::parse_mask("00000000").expect("mask"), CpuSet::new());
}

#[test]
fn mask_parse_rejects_malformed_text_naming_it() {
    for bad in ["", "0000000g", "123456789", "00ff,,00ff", " ff", "ff\n"] {
        match CpuSet::parse_mask(bad) {
            Err(CpuSetError::Mask { text, .. }) => assert_eq!(text, bad),
            other => panic!("{bad:?} parsed as {other:?}"),
        }
    }
    // 257 groups of 32 bits reach past cpu 8191.
    let too_wide = std::iter::once("1")
        .chain(std::iter::repeat_n("00000000", 256))
        .collect::<Vec<_>>()
        .join(",");
    assert!(CpuSet::parse_mask(&too_wide).is_err());
}

#[test]
fn mask_format_pads_to_minimum_groups() {
    assert_eq!(list("0-3,8-15").to_mask(2), "00000000,0000ff0f");
    assert_eq!(list("").to_mask(1), "00000000");
    assert_eq!(list("32").to_mask(1), "00000001,00000000");
}

#[test]
fn large_ids_spill_to_heap_and_shrink_back() {
    let mut set = list("1,5000");
    assert!(set.contains(5000));
    assert_eq!(set.len(), 2);
    assert!(set.remove(5000));
    assert_eq!(set, list("1"));
    assert_eq!(set.last(), Some(1));
}

#[test]
fn insert_beyond_maximum_is_an_error() {
    assert_eq!(
        CpuSet::new().try_insert(8192),
        Err(CpuSetError::IdTooLarge { id: 8192 })
    );
}

#[test]
fn operators_on_references_match_methods() {
    let a = list("0-7");
    let b = list("4-11");
    assert_eq!(&a | &b, list("0-11"));
    assert_eq!(&a & &b, list("4-7"));
    assert_eq!(&a - &b, list("0-3"));
}

fn ids() -> impl Strategy<Value = BTreeSet<u32>> {
    prop_oneof![
        prop::collection::btree_set(0u32..200, 0..40),
        prop::collection::btree_set(0u32..=MAX_CPU_ID, 0..40),
    ]
}

proptest! {
    #[test]
    fn set_algebra_matches_btreeset(a in ids(), b in ids()) {
        let sa: CpuSet = a.iter().copied().collect();
        let sb: CpuSet = b.iter().copied().collect();
        let set = |s: &CpuSet| s.iter().collect::<BTreeSet<u32>>();
        prop_assert_eq!(set(&sa.union(&sb)), a.union(&b).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(set(&sa.intersection(&sb)), a.intersection(&b).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(set(&sa.difference(&sb)), a.difference(&b).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(sa.is_subset(&sb), a.is_subset(&b));
        prop_assert_eq!(sa.is_disjoint(&sb), a.is_disjoint(&b));
        prop_assert_eq!(sa.intersection_len(&sb), a.intersection(&b).count());
        prop_assert_eq!(sa.len(), a.len());
        prop_assert_eq!(sa.first(), a.first().copied());
        prop_assert_eq!(sa.last(), a.last().copied());
        for id in a.iter().chain(b.iter()) {
            prop_assert_eq!(sa.contains(*id), a.contains(id));
        }
        // Equality is structural regardless of how a set was built.
        let rebuilt = sa.union(&sb).difference(&sb.difference(&sa));
        prop_assert_eq!(rebuilt, sa.clone());
        prop_assert_eq!(sa.cmp(&sb), a.iter().cmp(b.iter()));
    }

    #[test]
    fn insert_remove_match_btreeset(ops in prop::collection::vec((any::<bool>(), 0u32..=MAX_CPU_ID), 0..60)) {
        let mut model = BTreeSet::new();
        let mut set = CpuSet::new();
        for (add, id) in ops {
            if add {
                prop_assert_eq!(set.insert(id), model.insert(id));
            } else {
                prop_assert_eq!(set.remove(id), model.remove(&id));
            }
        }
        prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.into_iter().collect::<Vec<_>>());
    }

    /// A list's ranges are set a word at a time: any ranges, overlapping,
    /// out of order, across word and inline/heap boundaries, give the set
    /// of their ids one by one.
    #[test]
    fn a_cpulists_ranges_parse_to_their_ids(
        ranges in prop::collection::vec((0u32..=MAX_CPU_ID, 0u32..300), 1..6),
    ) {
        let mut model = BTreeSet::new();
        let items: Vec<String> = ranges
            .iter()
            .map(|&(lo, span)| {
                let hi = lo.saturating_add(span).min(MAX_CPU_ID);
                model.extend(lo..=hi);
                if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") }
            })
            .collect();
        let set = CpuSet::parse_list(&items.join(",")).expect("valid cpulist");
        prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
        prop_assert_eq!(set.len(), model.len());
        // Structurally equal to the set built an id at a time (trimmed alike).
        prop_assert_eq!(set, model.into_iter().collect::<CpuSet>());
    }

    #[test]
    fn cpulist_round_trips(a in ids()) {
        let set: CpuSet = a.iter().copied().collect();
        let text = set.to_string();
        prop_assert_eq!(CpuSet::parse_list(&text).expect("own output parses"), set);
    }

    /// The cpulist writer (digits by hand, issue 30) against the ranges
    /// written with `format!`, and its JSON form against a plain string's.
    #[test]
    fn cpulist_text_matches_ranges_written_with_format(a in ids()) {
        let set: CpuSet = a.iter().copied().collect();
        let ids: Vec<u32> = a.iter().copied().collect();
        let mut expected = Vec::new();
        let mut i = 0;
        while i < ids.len() {
            let mut j = i;
            while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
                j += 1;
            }
            expected.push(if i == j {
                format!("{}", ids[i])
            } else {
                format!("{}-{}", ids[i], ids[j])
            });
            i = j + 1;
        }
        let expected = expected.join(",");
        prop_assert_eq!(set.to_string(), expected.clone());
        prop_assert_eq!(
            serde_json::to_string(&set).expect("encodes"),
            serde_json::to_string(&expected).expect("encodes")
        );
    }

    #[test]
    fn mask_round_trips(a in ids(), pad in 0usize..10) {
        let set: CpuSet = a.iter().copied().collect();
        let text = set.to_mask(pad);
        prop_assert_eq!(CpuSet::parse_mask(&text).expect("own output parses"), set);
    }

    #[test]
    fn parsers_never_panic(text in "[0-9a-fx, -]{0,24}") {
        let _ = CpuSet::parse_list(&text);
        let _ = CpuSet::parse_mask(&text);
    }
}
