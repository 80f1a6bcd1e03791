#!/usr/bin/env bash
# Durability figures (issue 14; docs/performance.md "Durability"): in one run
# on one file system, a bare 4 KiB fdatasync, standalone admissions one at a
# time and in bursts of 10 and 100, and NRI CreateContainer through the fake
# runtime. The last line is
#   admission p99 X ms, fdatasync p99 Y ms, ratio Z, burst-100 total T ms
# Usage: scripts/durability-figures.sh [DIR]   (DIR: the file system to
# measure; default the cargo target directory's tmp; /dev/shm for tmpfs)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-}
cargo build --release -p pinion-agent --example durability >/dev/null
exec target/release/examples/durability ${dir:+"$dir"}
