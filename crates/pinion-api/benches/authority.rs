//! What the `:authority` repair of the gRPC servers costs
//! (`pinion_api::authority`, docs/decisions/005-grpc-authority-on-unix-sockets.md):
//!
//! * `rewrite/first_request`: a new connection's preface, SETTINGS, and
//!   Python grpcio's first request (HEADERS with the percent-encoded path
//!   as `:authority`, and its DATA) through a fresh `Rewriter`;
//! * `rewrite/next_request`: a request on a connection whose HPACK table is
//!   warm (the client refers to its table by index);
//! * `rewrite/worst_huffman_block_64k`: the costliest block a client can
//!   send (64 KiB of one-byte Huffman-coded names and values), refused;
//! * `rewrite/data_64k`: one 64 KiB DATA frame passing through;
//! * `unary_call/{plain,fixed}`: a `GetInfo` call over a unix socket from a
//!   tonic client (whose h2 Huffman-codes its strings) on an open channel, the server reading its connection
//!   directly (`plain`) or through `AuthorityFix` (`fixed`, as Pinion's
//!   servers do).
//!
//!     cargo bench -p pinion-api --bench authority

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use pinion_api::authority::frames::{Rewriter, MAX_BLOCK, PREFACE};
use pinion_api::plugin::Identity;
use pinion_api::pluginregistration as pr;

/// The HEADERS block Python `grpcio` 1.85.3 sends for its first call
/// (captured; the same bytes as the unit tests' `grpcio_block`).
const GRPCIO_BLOCK: &[u8] = b"@\x05:path\x1b/v1.PodResourcesLister/List@\n:authority\x1atmp%2Fwtgrpc-py%2Fcap.sock\x83\x86@\x0ccontent-type\x10application/grpc@\x02te\x08trailers@\x14grpc-accept-encoding\x17identity, deflate, gzip@\x0cgrpc-timeout\x051500m@\nuser-agent0grpc-python/1.85.3 grpc-c/58.0.0 (linux; chttp2)";
/// grpcio's next call: every field by index into its dynamic table.
const GRPCIO_NEXT: &[u8] = &[
    0x80 | 68,
    0x80 | 67,
    0x83,
    0x86,
    0x80 | 66,
    0x80 | 65,
    0x80 | 64,
    0x80 | 63,
    0x80 | 62,
];

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("length").to_be_bytes();
    let mut out = vec![length[1], length[2], length[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn rewrite(c: &mut Criterion) {
    let mut first = PREFACE.to_vec();
    first.extend(frame(0x4, 0, 0, &[0, 2, 0, 0, 0, 0]));
    first.extend(frame(0x1, 0x4, 1, GRPCIO_BLOCK));
    first.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0]));
    let mut out = Vec::with_capacity(4096);
    c.bench_function("rewrite/first_request", |b| {
        b.iter(|| {
            out.clear();
            Rewriter::new()
                .feed(black_box(&first), &mut out)
                .expect("rewrite");
        });
    });

    let mut warm = Rewriter::new();
    warm.feed(&first, &mut out).expect("warm up");
    let mut next = frame(0x1, 0x4, 3, GRPCIO_NEXT);
    next.extend(frame(0x0, 0x1, 3, &[0, 0, 0, 0, 0]));
    c.bench_function("rewrite/next_request", |b| {
        b.iter(|| {
            out.clear();
            warm.feed(black_box(&next), &mut out).expect("rewrite");
        });
    });

    // The worst block for the HPACK decoder: the largest allowed, of
    // fields whose name and value are one Huffman-coded byte each.
    let field = [0x00, 0x81, 0x1f, 0x81, 0x1f];
    let fields: Vec<u8> = field
        .iter()
        .copied()
        .cycle()
        .take(field.len() * (MAX_BLOCK / field.len()))
        .collect();
    let mut worst = PREFACE.to_vec();
    for (i, chunk) in fields.chunks(16_384).enumerate() {
        let kind = if i == 0 { 0x1 } else { 0x9 };
        let last = (i + 1) * 16_384 >= fields.len();
        worst.extend(frame(kind, if last { 0x4 } else { 0 }, 1, chunk));
    }
    c.bench_function("rewrite/worst_huffman_block_64k", |b| {
        b.iter(|| {
            out.clear();
            let refused = Rewriter::new().feed(black_box(&worst), &mut out);
            assert!(refused.is_err(), "over the header list limit");
        });
    });

    let data = frame(0x0, 0, 1, &vec![7; 64 * 1024]);
    let mut big = Vec::with_capacity(data.len());
    c.bench_function("rewrite/data_64k", |b| {
        b.iter(|| {
            big.clear();
            warm.feed(black_box(&data), &mut big).expect("rewrite");
        });
    });
}

fn unary_call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, fixed) in [("unary_call/fixed", true), ("unary_call/plain", false)] {
        let socket = dir.path().join(format!("{fixed}.sock"));
        let _ = std::fs::remove_file(&socket);
        let server = {
            let socket = socket.clone();
            rt.spawn(async move {
                let service =
                    pr::registration_server::RegistrationServer::new(Identity::new("widget"));
                let builder = tonic::transport::Server::builder().add_service(service);
                let served = if fixed {
                    builder
                        .serve_with_incoming(
                            pinion_api::uds::bind_grpc(&socket, 0o600).expect("bind"),
                        )
                        .await
                } else {
                    builder
                        .serve_with_incoming(pinion_api::uds::bind(&socket, 0o600).expect("bind"))
                        .await
                };
                served.expect("serve");
            })
        };
        let mut client = rt.block_on(async {
            while !socket.exists() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let channel = pinion_api::uds::connect(&socket, Duration::from_secs(5))
                .await
                .expect("connect");
            pr::registration_client::RegistrationClient::new(channel)
        });
        c.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(client.get_info(pr::InfoRequest {}))
                    .expect("GetInfo")
            });
        });
        server.abort();
    }
}

criterion_group!(benches, rewrite, unary_call);
criterion_main!(benches);
