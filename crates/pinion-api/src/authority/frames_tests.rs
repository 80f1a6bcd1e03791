use loona_hpack::Encoder;
use proptest::prelude::*;

use super::tests_support::{decode_stream, frame, frames, grpcio_block, Frame};
use super::*;

const DATA: u8 = 0x0;
const SETTINGS: u8 = 0x4;
const WINDOW_UPDATE: u8 = 0x8;

fn request(authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/v1.PodResourcesLister/List"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .iter()
    .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
    .collect()
}

/// Encodes `fields` as a client with an indexing encoder would.
fn encode(encoder: &mut Encoder<'_>, fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    encoder.encode(fields.iter().map(|(n, v)| (&n[..], &v[..])))
}

fn strings(fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

fn with_authority(fields: &[(Vec<u8>, Vec<u8>)], authority: &str) -> Vec<(String, String)> {
    let mut expected = strings(fields);
    for (name, value) in &mut expected {
        if name == ":authority" {
            *value = authority.to_string();
        }
    }
    expected
}

fn rewrite(input: &[u8]) -> Result<Vec<u8>, FramesError> {
    let mut out = Vec::new();
    Rewriter::new().feed(input, &mut out)?;
    Ok(out)
}

fn stream_of(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut stream = PREFACE.to_vec();
    for frame in frames {
        stream.extend_from_slice(frame);
    }
    stream
}

#[test]
fn grpcio_percent_encoded_path_authority_becomes_localhost() {
    let stream = stream_of(&[frame(HEADERS, END_HEADERS, 1, &grpcio_block())]);
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    rewriter.feed(&stream, &mut out).expect("rewrite");
    assert_eq!(rewriter.replaced(), 1);
    let fields = decode_stream(&out);
    assert_eq!(
        fields[0],
        (":path".into(), "/v1.PodResourcesLister/List".into())
    );
    assert_eq!(fields[1], (":authority".into(), "localhost".into()));
    assert_eq!(fields[2], (":method".into(), "POST".into()));
    assert_eq!(fields.len(), 9);
    assert!(!is_authority(b"tmp%2Fwtgrpc-py%2Fcap.sock"));
}

#[test]
fn raw_socket_path_authority_becomes_localhost_and_valid_ones_stay() {
    for (sent, seen) in [
        ("/run/pinion/podresources.sock", "localhost"),
        ("%2Frun%2Fpinion%2Fpodresources.sock", "localhost"),
        ("", "localhost"),
        ("localhost", "localhost"),
        ("pinion.invalid", "pinion.invalid"),
        ("127.0.0.1:10250", "127.0.0.1:10250"),
    ] {
        let fields = request(sent);
        let block = encode(&mut Encoder::new(), &fields);
        let out = rewrite(&stream_of(&[frame(HEADERS, END_HEADERS, 1, &block)])).expect("rewrite");
        assert_eq!(
            decode_stream(&out),
            with_authority(&fields, seen),
            "{sent:?}"
        );
    }
}

/// The client's dynamic table is followed across blocks: grpcio's first
/// block adds its fields to the table (literals with incremental indexing),
/// its next call on the connection refers to them by index, and the server
/// (whose table is never used) reads both right.
#[test]
fn blocks_referring_to_the_clients_dynamic_table_decode_right() {
    // Newest entry first: user-agent 62, grpc-timeout 63,
    // grpc-accept-encoding 64, te 65, content-type 66, :authority 67,
    // :path 68; 0x83 and 0x86 are static (:method POST, :scheme http).
    let second = [0x80 | 68, 0x80 | 67, 0x83, 0x86, 0x80 | 66, 0x80 | 65];
    let mut rewriter = Rewriter::new();
    let mut out = Vec::new();
    let stream = stream_of(&[
        frame(HEADERS, END_HEADERS, 1, &grpcio_block()),
        frame(HEADERS, END_HEADERS | END_STREAM, 3, &second),
    ]);
    rewriter.feed(&stream, &mut out).expect("rewrite");
    assert_eq!(rewriter.replaced(), 2);
    let fields = decode_stream(&out);
    let expected: Vec<(String, String)> = [
        (":path", "/v1.PodResourcesLister/List"),
        (":authority", "localhost"),
        (":method", "POST"),
        (":scheme", "http"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_string(), (*v).to_string()))
    .collect();
    assert_eq!(fields[9..], expected);
    for frame in frames(&out) {
        // Literal without indexing, new name: the first byte of every field.
        assert_eq!(frame.payload[0], 0x00);
    }
    assert_eq!(frames(&out)[1].flags, END_HEADERS | END_STREAM);
}

#[test]
fn other_frames_pass_unchanged() {
    let others = [
        frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]),
        frame(WINDOW_UPDATE, 0, 0, &[0, 1, 0, 0]),
        frame(DATA, END_STREAM, 1, &[0, 0, 0, 0, 2, 8, 1]),
        frame(SETTINGS, 1, 0, &[]),
    ];
    let stream = stream_of(&others);
    assert_eq!(rewrite(&stream).expect("rewrite"), stream);
}

#[test]
fn a_stream_that_is_not_http2_passes_unchanged() {
    for stream in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PRI * HTTP/1.1\r\n",
        b"\x00\x00\x04\x01\x04\x00\x00\x00\x01abcd",
    ] {
        assert_eq!(rewrite(stream).expect("rewrite"), stream);
    }
}

#[test]
fn continuation_frames_are_one_block() {
    let fields = request("/run/x.sock");
    let block = encode(&mut Encoder::new(), &fields);
    let (a, rest) = block.split_at(7);
    let (b, c) = rest.split_at(20);
    let out = rewrite(&stream_of(&[
        frame(HEADERS, END_STREAM, 5, a),
        frame(CONTINUATION, 0, 5, b),
        frame(CONTINUATION, END_HEADERS, 5, c),
    ]))
    .expect("rewrite");
    let frames = frames(&out);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].flags, END_STREAM | END_HEADERS);
    assert_eq!(decode_stream(&out), with_authority(&fields, "localhost"));
}

#[test]
fn padding_is_dropped_and_priority_kept() {
    let fields = request("/run/x.sock");
    let block = encode(&mut Encoder::new(), &fields);
    let priority = [0x80, 0, 0, 3, 15];
    let mut payload = vec![4];
    payload.extend_from_slice(&priority);
    payload.extend_from_slice(&block);
    payload.extend_from_slice(&[0; 4]);
    let out = rewrite(&stream_of(&[frame(
        HEADERS,
        END_HEADERS | PADDED | PRIORITY,
        7,
        &payload,
    )]))
    .expect("rewrite");
    let frames = frames(&out);
    assert_eq!(frames[0].flags, END_HEADERS | PRIORITY);
    assert_eq!(frames[0].payload[..5], priority);
    assert_eq!(decode_stream(&out), with_authority(&fields, "localhost"));
}

#[test]
fn padding_longer_than_the_frame_is_refused() {
    for (flags, payload) in [
        (PADDED, vec![]),
        (PADDED, vec![9, 0x82]),
        (PRIORITY, vec![0, 0]),
        (PADDED | PRIORITY, vec![0, 0, 0, 0, 0]),
    ] {
        let err = rewrite(&stream_of(&[frame(
            HEADERS,
            END_HEADERS | flags,
            1,
            &payload,
        )]))
        .expect_err("bad padding");
        assert!(
            matches!(err, FramesError::BadPadding { stream: 1, .. }),
            "{err}"
        );
    }
}

/// A small block that decodes to more than one frame's worth (a large
/// field indexed once, then referred to again) leaves as HEADERS +
/// CONTINUATION frames within the smallest frame size.
#[test]
fn a_large_block_is_split_within_the_smallest_frame_size() {
    let mut fields = request("/run/x.sock");
    fields.push((b"x-big".to_vec(), vec![b'a'; 3_000]));
    let mut block = encode(&mut Encoder::new(), &fields);
    assert!(block.len() < MAX_BLOCK);
    // x-big is the newest entry of the client's table (index 62).
    block.extend_from_slice(&[0x80 | 62; 10]);
    for _ in 0..10 {
        fields.push((b"x-big".to_vec(), vec![b'a'; 3_000]));
    }
    let out = rewrite(&stream_of(&[frame(HEADERS, END_HEADERS, 1, &block)])).expect("rewrite");
    let kinds: Vec<u8> = frames(&out).iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [HEADERS, CONTINUATION, CONTINUATION]);
    assert_eq!(decode_stream(&out), with_authority(&fields, "localhost"));
}

#[test]
fn huge_blocks_are_refused() {
    let big = frame(HEADERS, END_HEADERS, 1, &vec![0; MAX_BLOCK + 1]);
    assert!(matches!(
        rewrite(&stream_of(&[big])),
        Err(FramesError::FrameTooLarge { stream: 1, length, limit: MAX_BLOCK }) if length == MAX_BLOCK + 1
    ));

    let mut parts = vec![frame(HEADERS, 0, 1, &[0; 10_000])];
    parts.push(frame(CONTINUATION, 0, 1, &[0; 10_000]));
    assert!(matches!(
        rewrite(&stream_of(&parts)),
        Err(FramesError::BlockTooLarge { stream: 1, .. })
    ));

    // A small block that indexes a 4000-byte table entry again and again.
    let mut block = vec![0x40, 5];
    block.extend_from_slice(b"x-big");
    encode_integer_into(4000, 7, 0, &mut block).expect("vec");
    block.extend(std::iter::repeat_n(b'a', 4000));
    block.extend(std::iter::repeat_n(0x80 | 62, 100));
    let err = rewrite(&stream_of(&[frame(HEADERS, END_HEADERS, 3, &block)]))
        .expect_err("header list bomb");
    assert!(
        matches!(
            err,
            FramesError::HeaderListTooLarge {
                stream: 3,
                limit: MAX_HEADER_LIST
            }
        ),
        "{err}"
    );
}

#[test]
fn frames_out_of_order_around_continuation_are_refused() {
    let start = frame(HEADERS, 0, 1, &[0x82]);
    let err = rewrite(&stream_of(&[start.clone(), frame(DATA, 0, 1, &[1])]))
        .expect_err("data inside a block");
    assert!(matches!(
        err,
        FramesError::ContinuationExpected {
            stream: 1,
            frame_type: DATA,
            got: 1
        }
    ));
    let err = rewrite(&stream_of(&[
        start,
        frame(CONTINUATION, END_HEADERS, 3, &[0x82]),
    ]))
    .expect_err("another stream's continuation");
    assert!(matches!(
        err,
        FramesError::ContinuationExpected {
            stream: 1,
            got: 3,
            ..
        }
    ));
    let err = rewrite(&stream_of(&[frame(CONTINUATION, END_HEADERS, 1, &[0x82])]))
        .expect_err("lonely continuation");
    assert!(matches!(
        err,
        FramesError::UnexpectedContinuation { stream: 1 }
    ));
}

#[test]
fn malformed_hpack_and_oversized_table_updates_are_refused() {
    for block in [
        vec![0x80],                               // index 0
        vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // integer too long
        vec![0x3f, 0xe2, 0x1f, 0x82],             // table size 4096 + 1
        vec![0x00, 0x05, b'a'],                   // string shorter than its length
    ] {
        let err =
            rewrite(&stream_of(&[frame(HEADERS, END_HEADERS, 1, &block)])).expect_err("bad hpack");
        assert!(
            matches!(err, FramesError::Hpack { stream: 1, .. }),
            "{block:?}: {err}"
        );
    }
}

/// Connections where the client sent two requests, a ping and data.
fn sample_stream() -> Vec<u8> {
    let mut client = Encoder::new();
    let first = encode(&mut client, &request("/run/x.sock"));
    let second = encode(&mut client, &request("pinion.invalid"));
    let (a, b) = first.split_at(10);
    stream_of(&[
        frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]),
        frame(HEADERS, PADDED, 1, &[[2].as_slice(), a, &[0, 0]].concat()),
        frame(CONTINUATION, END_HEADERS, 1, b),
        frame(DATA, END_STREAM, 1, &[0, 0, 0, 0, 0]),
        frame(0x6, 0, 0, &[7; 8]),
        frame(HEADERS, END_HEADERS, 3, &second),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// However the bytes are cut into reads, the server reads the same.
    #[test]
    fn splitting_the_input_into_reads_changes_nothing(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let stream = sample_stream();
        let whole = rewrite(&stream).expect("rewrite");
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len())).collect();
        points.push(stream.len());
        points.sort_unstable();
        let mut rewriter = Rewriter::new();
        let mut out = Vec::new();
        let mut from = 0;
        for to in points {
            rewriter.feed(&stream[from..to], &mut out).expect("rewrite piece");
            from = to;
        }
        prop_assert_eq!(&out, &whole);
        prop_assert_eq!(rewriter.replaced(), 1);
    }

    /// Arbitrary bytes after the preface, or a valid stream with bytes
    /// flipped: an error or output, never a panic, never unbounded output.
    #[test]
    fn garbage_never_panics(garbage in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let stream = stream_of(std::slice::from_ref(&garbage));
        if let Ok(out) = rewrite(&stream) {
            prop_assert!(out.len() <= stream.len() + 16 * MAX_HEADER_LIST);
        }
        let _ = rewrite(&garbage);
    }

    #[test]
    fn flipped_bytes_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut stream = sample_stream();
        for (at, byte) in flips {
            let at = at.index(stream.len() - PREFACE.len()) + PREFACE.len();
            stream[at] = byte;
        }
        let _ = rewrite(&stream);
    }

    /// What the client's encoder says, the server's decoder reads, with
    /// only an invalid `:authority` changed.
    #[test]
    fn fields_survive_the_rewrite(
        extra in proptest::collection::vec(("x-[a-z]{1,8}", "[ -~]{0,40}"), 0..8),
        authority in "[ -~]{0,40}",
    ) {
        let mut fields = request(&authority);
        fields.extend(extra.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())));
        let mut client = Encoder::new();
        let a = encode(&mut client, &fields);
        let b = encode(&mut client, &fields);
        let out = rewrite(&stream_of(&[frame(HEADERS, END_HEADERS, 1, &a), frame(HEADERS, END_HEADERS, 3, &b)])).expect("rewrite");
        let seen = if is_authority(authority.as_bytes()) { authority.as_str() } else { "localhost" };
        let mut expected = with_authority(&fields, seen);
        expected.extend(with_authority(&fields, seen));
        prop_assert_eq!(decode_stream(&out), expected);
    }
}

#[test]
fn frame_support_round_trips() {
    let out = stream_of(&[frame(SETTINGS, 1, 0, &[])]);
    assert_eq!(
        frames(&out),
        [Frame {
            kind: SETTINGS,
            flags: 1,
            stream: 0,
            payload: vec![]
        }]
    );
}
