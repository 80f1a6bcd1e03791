//! Runs one case of the `alloc` bench group `reps` times, for instruction
//! counts under callgrind (docs/performance.md):
//!
//!     cargo build --release -p pinion-core --example alloc_case
//!     valgrind --tool=callgrind target/release/examples/alloc_case 1024 uncore fragmented 8 1000
//!
//! Arguments: CPUs (384 or 1024), algorithm (packed, uncore,
//! distribute-numa), state (idle, fragmented), request, repetitions. The
//! machines and the fragmented state are those of `benches/alloc.rs`.

use std::process::ExitCode;

use pinion_core::alloc::{take_by_topology, Algorithm, CpuSortingStrategy};
use pinion_core::topology::{synthetic, Shape};
use pinion_core::CpuSet;

fn shape(cpus: &str) -> Option<Shape> {
    let (sockets, numa_per_socket, cores_per_socket) = match cpus {
        "384" => (2, 2, 96),
        "1024" => (4, 1, 128),
        _ => return None,
    };
    Some(Shape {
        sockets,
        numa_per_socket,
        cores_per_socket,
        threads_per_core: 2,
        cores_per_uncore: 8,
    })
}

fn algorithm(name: &str) -> Option<Algorithm> {
    let strategy = CpuSortingStrategy::Packed;
    match name {
        "packed" => Some(Algorithm::Packed {
            strategy,
            prefer_uncore: false,
        }),
        "uncore" => Some(Algorithm::Packed {
            strategy,
            prefer_uncore: true,
        }),
        "distribute-numa" => Some(Algorithm::Distributed {
            group_size: 1,
            strategy,
            align_by_socket: false,
        }),
        _ => None,
    }
}

/// 60 % of the CPUs, the same fixed-seed xorshift choice as the bench.
fn fragmented(all: &CpuSet) -> CpuSet {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    all.iter()
        .filter(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % 100 >= 40
        })
        .collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cpus, algo, state, n, reps] = args.as_slice() else {
        eprintln!("usage: alloc_case CPUS ALGORITHM idle|fragmented REQUEST REPS");
        return ExitCode::FAILURE;
    };
    let Some(shape) = shape(cpus) else {
        eprintln!("unknown machine {cpus:?} (384 or 1024)");
        return ExitCode::FAILURE;
    };
    let Some(algo) = algorithm(algo) else {
        eprintln!("unknown algorithm {algo:?} (packed, uncore, distribute-numa)");
        return ExitCode::FAILURE;
    };
    let (Ok(n), Ok(reps)) = (n.parse::<usize>(), reps.parse::<usize>()) else {
        eprintln!("request {n:?} and repetitions {reps:?} must be whole numbers");
        return ExitCode::FAILURE;
    };
    let topo = synthetic(shape);
    let free = match state.as_str() {
        "idle" => topo.all_cpus().clone(),
        "fragmented" => fragmented(topo.all_cpus()),
        _ => {
            eprintln!("unknown state {state:?} (idle, fragmented)");
            return ExitCode::FAILURE;
        }
    };
    let mut last = None;
    for _ in 0..reps {
        last = Some(take_by_topology(
            std::hint::black_box(&topo),
            std::hint::black_box(&free),
            n,
            algo,
        ));
    }
    match last {
        Some(Ok(cpus)) => println!("{cpus}"),
        Some(Err(err)) => println!("error: {err}"),
        None => {}
    }
    ExitCode::SUCCESS
}
