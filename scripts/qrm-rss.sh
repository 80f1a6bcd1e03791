#!/usr/bin/env bash
# Idle RSS of the agent with three resource plugins registered (issue 11;
# docs/performance.md "QoS Resource Manager: idle RSS"). Two setups, each a
# fresh agent with a temporary config and state directory:
#   builtin   qosResourceManager.builtinPlugins: [cpu, memory, nic] (served
#             inside the agent, registered through its watcher)
#   external  qosResourceManager.enabled: true and the same three plugins as
#             `pinion plugin serve` processes beside it
# Once `pinion plugins` lists three active plugins the script waits SETTLE
# seconds (default 15: three reconcile periods of the default 5 s) and reads
# VmRSS and VmHWM from /proc/PID/status of the agent (and of the plugin
# processes), then stops everything. Needs root and a writable cgroup v1
# cpuset hierarchy at /sys/fs/cgroup/cpuset (as scripts/agent-figures.sh).
# Usage: cargo build --release -p pinion -p pinion-agent && sudo scripts/qrm-rss.sh [builtin|external|both]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/pinion}
SETTLE=${SETTLE:-15}
MODE=${1:-both}
PLUGINS=(cpu memory nic)

status() { awk -v k="$2" '$1 == k":" {print $2 " kB"}' "/proc/$1/status"; }

measure() {
    local mode=$1 work root sock agent pids=() i
    work=$(mktemp -d)
    root=/sys/fs/cgroup/cpuset/pinion-qrm-rss-$$
    sock=$work/pinion.sock
    {
        printf 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
        if [ "$mode" = builtin ]; then
            printf 'qosResourceManager:\n  builtinPlugins: [cpu, memory, nic]\n'
        else
            printf 'qosResourceManager:\n  enabled: true\n'
        fi
    } >"$work/config.yaml"
    "$BIN" agent --config "$work/config.yaml" --state-dir "$work/state" --socket "$sock" \
        --cgroup-root "$root" --metrics-addr 127.0.0.1:0 2>"$work/agent.log" &
    agent=$!
    # shellcheck disable=SC2317 # called by the trap
    cleanup() {
        kill -TERM "$agent" "${pids[@]}" 2>/dev/null || true
        wait "$agent" "${pids[@]}" 2>/dev/null || true
        rmdir "$root" 2>/dev/null || true
        rm -rf "$work"
    }
    trap cleanup EXIT
    for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || { cat "$work/agent.log" >&2; exit 1; }
    if [ "$mode" = external ]; then
        for plugin in "${PLUGINS[@]}"; do
            "$BIN" plugin serve "$plugin" --socket-dir "$work/state/plugins_registry" \
                --state-dir "$work/plugin-$plugin" 2>"$work/plugin-$plugin.log" &
            pids+=($!)
        done
    fi
    for i in $(seq 600); do
        [ "$("$BIN" plugins --socket "$sock" -o json | grep -o '"active"' | wc -l)" -ge 3 ] && break
        sleep 0.05
    done
    [ "$i" -lt 600 ] || { "$BIN" plugins --socket "$sock" >&2; cat "$work/agent.log" >&2; exit 1; }
    sleep "$SETTLE"
    "$BIN" plugins --socket "$sock"
    echo "$mode: agent VmRSS $(status "$agent" VmRSS), VmHWM $(status "$agent" VmHWM) (${SETTLE}s after three plugins were active)"
    for i in "${!pids[@]}"; do
        echo "$mode: pinion plugin serve ${PLUGINS[$i]}: VmRSS $(status "${pids[$i]}" VmRSS)"
    done
    cleanup
    trap - EXIT
}

case $MODE in
    builtin | external) measure "$MODE" ;;
    both) measure builtin && measure external ;;
    *) echo "usage: $0 [builtin|external|both]" >&2; exit 2 ;;
esac
