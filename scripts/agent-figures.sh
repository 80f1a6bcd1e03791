#!/usr/bin/env bash
# Figures of docs/performance.md "Agent": `pinion run` wall time end to end,
# and the agent's RSS idle and with 500 managed processes. Needs root and a
# writable cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset.
# Usage: cargo build --release -p pinion -p pinion-agent && sudo scripts/agent-figures.sh
# API_SERVER=up|hung: the agent also publishes its NodeResourceTopology, to
# a stand-in API server that answers every request at once (`up`: the Node's
# GET, the object's PATCH echoed) or that accepts every connection and never
# answers (`hung`), so the admissions can be compared on the same machine
# (issue 32: an API server that hangs must not slow an admission). Default:
# none, no publishing.
set -euo pipefail
BIN=${BIN:-target/release/pinion}
RUNS=${RUNS:-200}
MANAGED=${MANAGED:-500}
WORK=$(mktemp -d)
ROOT=/sys/fs/cgroup/cpuset/pinion-figures-$$
SOCK=$WORK/pinion.sock
printf 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\ncpuManagerReconcilePeriod: 1s\n' >"$WORK/config.yaml"
STANDIN=""
case ${API_SERVER:-none} in
hung)
    # Accepts, reads nothing, answers nothing; prints its port first.
    python3 -u -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1024)
print(s.getsockname()[1]); held = []
while True: held.append(s.accept()[0])' >"$WORK/api.port" &
    ;;
up)
    # Answers at once: the Node for a GET, the body back for a PATCH.
    python3 -u -c 'import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def answer(self, body):
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        self.answer(json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "figures", "uid": "figures-uid"}}).encode())
    def do_PATCH(self):
        self.answer(self.rfile.read(int(self.headers.get("Content-Length", 0))))
    def log_message(self, *_): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H); print(s.server_address[1]); s.serve_forever()' >"$WORK/api.port" &
    ;;
none) ;;
*)
    echo "API_SERVER is none, up or hung, not '$API_SERVER'" >&2
    exit 2
    ;;
esac
if [ "${API_SERVER:-none}" != none ]; then
    STANDIN=$!
    until [ -s "$WORK/api.port" ]; do sleep 0.05; done
    scheme=https
    [ "$API_SERVER" = up ] && scheme=http
    cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: standin, cluster: {server: "$scheme://127.0.0.1:$(cat "$WORK/api.port")", insecure-skip-tls-verify: true}}]
users: [{name: standin, user: {token: figures}}]
contexts: [{name: standin, context: {cluster: standin, user: standin}}]
current-context: standin
EOF
    printf 'nodeResourceTopology:\n  publish: true\n  kubeconfig: %s\n  nodeName: figures\n' "$WORK/kubeconfig" >>"$WORK/config.yaml"
fi
"$BIN" agent --config "$WORK/config.yaml" --state-dir "$WORK/state" --socket "$SOCK" \
    --cgroup-root "$ROOT" --metrics-addr 127.0.0.1:0 2>"$WORK/agent.log" &
AGENT=$!
cleanup() {
    [ -z "$STANDIN" ] || kill "$STANDIN" 2>/dev/null || true
    kill -TERM "$AGENT" 2>/dev/null || true
    wait "$AGENT" 2>/dev/null || true
    for dir in "$ROOT"/*/; do [ -d "$dir" ] && rmdir "$dir" 2>/dev/null || true; done
    rmdir "$ROOT" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
until [ -S "$SOCK" ]; do sleep 0.05; done
sleep 1
rss() { awk '/VmRSS/ {print $2 " kB"}' "/proc/$AGENT/status"; }
echo "agent idle RSS: $(rss)"

for _ in $(seq "$RUNS"); do
    start=$(date +%s%N)
    "$BIN" run --socket "$SOCK" --cpus 1 -- true
    end=$(date +%s%N)
    echo $(((end - start) / 1000))
done | sort -n >"$WORK/latency"
p() { sed -n "$(($(wc -l <"$WORK/latency") * $1 / 100))p" "$WORK/latency"; }
echo "pinion run --cpus 1 -- true (wall, us, $RUNS runs, API server: ${API_SERVER:-none}): p50 $(p 50) p99 $(p 99)"
if [ -n "$STANDIN" ]; then
    echo "the stand-in API server's descriptors: $(ls /proc/"$STANDIN"/fd | wc -l); the agent: $("$BIN" nrt --socket "$SOCK" 2>&1 | head -1)"
fi

# Managed processes: launchers started directly (no waiting parent), shared pool.
pids=()
for i in $(seq "$MANAGED"); do
    "$BIN" run --socket "$SOCK" --exec-as "pinion-run-figures-$i" -- sleep 600 &
    pids+=($!)
done
until [ "$("$BIN" ps --socket "$SOCK" -o json | grep -c '"pod"')" -ge "$MANAGED" ]; do sleep 0.2; done
echo "agent RSS with $MANAGED managed processes: $(rss)"
kill "${pids[@]}"
wait "${pids[@]}" 2>/dev/null || true
until [ "$("$BIN" ps --socket "$SOCK" -o json | grep -c '"pod"')" -eq 0 ]; do sleep 0.2; done
echo "all released by reconcile; agent RSS after: $(rss)"
