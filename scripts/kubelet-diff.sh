#!/usr/bin/env bash
# Differential testing of `pinion simulate` against kubelet's own CPU manager
# (issue 29). Builds the kubelet oracle (interop/kubelet-oracle, Go; module and
# build caches under $HOME, so warm runs only link) and the pinion CLI, then
# runs N random scenarios generated from SEED through both and compares them
# step by step (scripts/kubelet_diff.py).
#
#   scripts/kubelet-diff.sh [N] [SEED]        # default N=2000, SEED=1
#
# Prints the k8s.io/kubernetes version linked, one line per failing case with
# the path of a scenario file that replays with `pinion simulate`, and ends
# with `N passed, N failed`; exits non-zero on any failure.
# Failing cases land in target/kubelet-diff/fail-<id>.json.
set -euo pipefail

N="${1:-2000}"
SEED="${2:-1}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/target/kubelet-diff"
mkdir -p "$OUT"

(cd "$ROOT/interop/kubelet-oracle" && go build -o "$OUT/kubelet-oracle" .)
cargo build --quiet -p pinion --manifest-path "$ROOT/Cargo.toml"
PINION="${CARGO_TARGET_DIR:-$ROOT/target}/debug/pinion"

exec python3 "$ROOT/scripts/kubelet_diff.py" --n "$N" --seed "$SEED" \
    --oracle "$OUT/kubelet-oracle" --pinion "$PINION" --out "$OUT" \
    --topologies "${PINION_TOPOLOGIES:-$ROOT/../shared/topologies}"
