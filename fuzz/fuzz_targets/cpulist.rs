//! `CpuSet::parse_list` on arbitrary text: never panics, and what parses
//! prints back to a cpulist that parses to the same set.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinion_core::CpuSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(set) = CpuSet::parse_list(text) {
        let printed = set.to_string();
        assert_eq!(CpuSet::parse_list(&printed).as_ref(), Ok(&set), "{printed}");
    }
});
