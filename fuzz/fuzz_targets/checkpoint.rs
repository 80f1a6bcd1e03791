//! The checkpoint decoder on arbitrary bytes: never panics; whatever decodes
//! can be verified, hashed and parsed without panicking; a v2 checkpoint
//! re-encoded decodes to the same content with a valid checksum; salvaging
//! never panics and, for a file that decodes, finds no error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinion_core::checkpoint::{self, Entries};

fuzz_target!(|data: &[u8]| {
    let salvaged = checkpoint::salvage(data);
    let _ = salvaged.computed_checksum();
    let Ok(decoded) = checkpoint::decode(data) else {
        return;
    };
    assert_eq!(salvaged.error, None, "a file that decodes salvages whole");
    let _ = decoded.verify();
    let _ = checkpoint::hashed_text(&decoded);
    let _ = decoded.to_state();
    let Entries::V2(pods) = decoded.entries() else {
        return;
    };
    let bytes = checkpoint::encode(decoded.policy_name(), decoded.default_cpu_set(), pods);
    let again = checkpoint::decode_verified(&bytes).expect("our own output decodes and verifies");
    assert_eq!(again.policy_name(), decoded.policy_name());
    assert_eq!(again.default_cpu_set(), decoded.default_cpu_set());
    match again.entries() {
        Entries::V2(back) => assert_eq!(back, pods),
        // Only an empty map can also read as v1 (if the v1 hash happens to match).
        Entries::V1(back) => assert!(back.is_empty() && pods.is_empty()),
    }
});
