//! `CpuSet::parse_mask` on arbitrary text: never panics, and what parses
//! prints back to a mask that parses to the same set.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinion_core::CpuSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(set) = CpuSet::parse_mask(text) {
        let printed = set.to_mask(1);
        assert_eq!(CpuSet::parse_mask(&printed).as_ref(), Ok(&set), "{printed}");
    }
});
