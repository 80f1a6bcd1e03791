#!/usr/bin/env bash
# Speed ratios of Pinion's allocator against kubelet's own (issue 29 item 3):
# the cases of Pinion's allocator benchmark (crates/pinion-core/benches/alloc.rs,
# group `alloc`, 48 cases) timed with criterion, and the same cases through
# kubelet's takeByTopology* functions in the oracle (interop/kubelet-oracle
# --bench). Prints one table of ratios, the minimum and the geometric mean
# (docs/performance.md keeps it). Not run in CI: it measures, asserts nothing
# about time, and the release bench build takes minutes.
#
#   scripts/kubelet-speed.sh                 # builds and runs the bench, then the oracle
#   KUBELET_SPEED_SKIP_BENCH=1 scripts/kubelet-speed.sh   # reuse the last criterion run
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/kubelet-speed"
mkdir -p "$OUT"

(cd "$ROOT/interop/kubelet-oracle" && go build -o "$OUT/kubelet-oracle" .)
cargo build --quiet -p pinion --manifest-path "$ROOT/Cargo.toml"
if [ "${KUBELET_SPEED_SKIP_BENCH:-0}" != 1 ]; then
    (cd "$ROOT" && cargo bench -p pinion-core --bench alloc -- \
        --warm-up-time 1 --measurement-time 2 'alloc/' >"$OUT/criterion.log" 2>&1)
fi

exec python3 "$ROOT/scripts/kubelet_speed.py" --oracle "$OUT/kubelet-oracle" \
    --pinion "$TARGET/debug/pinion" --criterion "$TARGET/criterion"
