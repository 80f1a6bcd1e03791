#!/usr/bin/env bash
# katalyst's own wire code against Pinion (issue 29, item 5). Builds
# interop/katalyst (Go; the kubewharf kubelet fork katalyst-core pins, module
# and build caches under $HOME so a second run only links) and the pinion
# CLI and agent (debug; `cargo build --workspace --bins`), then runs both directions:
#
# * manager: katalyst-peer plays the fork's plugin watcher and QRM manager
#   against `pinion plugin serve cpu|memory|nic` on a real machine's
#   topology (../shared/topologies, PINION_KATALYST_TOPOLOGY);
# * plugin: katalyst-peer's Go resource plugins registered with Pinion's
#   agent (plugin watcher and Registration.Register), containers admitted
#   with `pinion run`. Needs root and a writable cpuset cgroup hierarchy;
#   elsewhere it says why it skipped, and under CI (CI=true or
#   PINION_REQUIRE_SHARED=1) that is a failure.
#
#   scripts/interop-katalyst.sh
#
# Prints the kubewharf module linked, one `RESULT PASS|FAIL name` line per
# check, and ends with `N passed, N failed`; exits non-zero on a failure.
# Work files (logs, the agent's state) stay in target/interop-katalyst/.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$ROOT/target/interop-katalyst"
TOPOLOGY="${PINION_KATALYST_TOPOLOGY:-$ROOT/../shared/topologies/x86-2s-intel-xeon-silver-4108-ht}"
strict=0
if [ "${CI:-}" = true ] || [ "${PINION_REQUIRE_SHARED:-}" = 1 ]; then strict=1; fi
passed=0 failed=0

# One part's RESULT lines pass through; its counts are added to ours.
tally() {
    local line
    while IFS= read -r line; do
        case $line in
        "RESULT PASS "*) passed=$((passed + 1)); echo "$line" ;;
        "RESULT FAIL "*) failed=$((failed + 1)); echo "$line" ;;
        *" passed, "*" failed") ;;
        *) echo "$line" ;;
        esac
    done
}
# part NAME COMMAND…: runs one part, passes its lines through, and counts a
# failure when it exits non-zero without a failed check of its own (a crash).
part() {
    local name=$1 rc before=$failed
    shift
    "$@" >"$OUT/$name.out" 2>&1
    rc=$?
    tally <"$OUT/$name.out"
    if [ "$rc" -ne 0 ] && [ "$failed" -eq "$before" ]; then
        fail "$name" "exited with $rc (output: $OUT/$name.out)"
    fi
}
fail() { echo "RESULT FAIL $1: $2"; failed=$((failed + 1)); }
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

rm -rf "$OUT" && mkdir -p "$OUT"
if ! command -v go >/dev/null 2>&1; then
    fail "build" "go is missing"
    finish
fi
start=$SECONDS
if ! (cd "$ROOT/interop/katalyst" && go build -o "$OUT/katalyst-peer" .); then
    fail "build" "go build of interop/katalyst failed"
    finish
fi
echo "katalyst-peer built in $((SECONDS - start)) s"
echo "linked: $("$OUT/katalyst-peer" version)"
# The workspace's binaries, as .ci/run's end-to-end block builds them (the
# same features, so neither build redoes the other's work).
if ! cargo build --quiet --locked --workspace --bins --manifest-path "$ROOT/Cargo.toml"; then
    fail "build" "cargo build of the workspace binaries failed"
    finish
fi
PINION="$TARGET/debug/pinion"

# The manager side: on a copy of a real machine's sysfs tree.
if [ -d "$TOPOLOGY/sys/devices/system/node" ]; then
    part manager "$OUT/katalyst-peer" manager -pinion "$PINION" -topology "$TOPOLOGY" \
        -work "$OUT/manager"
else
    if [ "$strict" = 1 ]; then
        fail "manager" "no topology at $TOPOLOGY (../shared/topologies)"
    else
        echo "skipped: manager checks: no topology at $TOPOLOGY"
    fi
fi

# The plugin side: the real agent on a cpuset cgroup of this machine.
cgroup_mount=
if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    cgroup_mount=/sys/fs/cgroup/cpuset
elif grep -qw cpuset /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cgroup_mount=/sys/fs/cgroup
fi
why=
if [ "$(id -u)" -ne 0 ]; then
    why="needs root (the agent writes cgroups)"
elif [ -z "$cgroup_mount" ]; then
    why="no cpuset cgroup hierarchy"
elif [ "$(nproc --all)" -lt 2 ]; then
    why="needs 2 CPUs or more"
fi
if [ -z "$why" ]; then
    cgroup_root="$cgroup_mount/pinion-katalyst-$$"
    mkdir -p "$OUT/plugin"
    part plugin "$OUT/katalyst-peer" plugin -pinion "$PINION" -work "$OUT/plugin" \
        -cgroup-root "$cgroup_root"
    # Whatever the agent left in its cgroup roots (every hierarchy), deepest first.
    for mount in /sys/fs/cgroup /sys/fs/cgroup/*; do
        [ -d "$mount/pinion-katalyst-$$" ] &&
            find "$mount/pinion-katalyst-$$" -depth -type d -exec rmdir {} + 2>/dev/null
    done
elif [ "$strict" = 1 ]; then
    fail "plugin" "$why"
else
    echo "skipped: plugin checks: $why"
fi
finish
