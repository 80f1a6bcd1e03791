//! `pinion_api::authority::Rewriter` (the `:authority` repair of gRPC
//! servers on unix sockets) on an arbitrary client byte stream after the
//! HTTP/2 preface, fed whole and cut in two at a point the first byte
//! chooses: never panics, the output stays bounded, and where both succeed
//! the cut changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinion_api::authority::frames::{Rewriter, MAX_HEADER_LIST, PREFACE};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut stream = PREFACE.to_vec();
    stream.extend_from_slice(rest);
    let mut whole = Vec::new();
    let whole_ok = Rewriter::new().feed(&stream, &mut whole).is_ok();
    assert!(whole.len() <= stream.len() + 16 * MAX_HEADER_LIST);

    let at = usize::from(cut) * stream.len() / 256;
    let mut rewriter = Rewriter::new();
    let mut pieces = Vec::new();
    let pieces_ok = rewriter.feed(&stream[..at], &mut pieces).is_ok()
        && rewriter.feed(&stream[at..], &mut pieces).is_ok();
    assert_eq!(whole_ok, pieces_ok);
    if whole_ok {
        assert_eq!(whole, pieces);
    }
});
