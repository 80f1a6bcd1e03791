#!/usr/bin/env bash
# A real Kubernetes node: upstream kubelet, built from its Go module
# (interop/kubelet-node: `go build k8s.io/kubernetes/cmd/kubelet`), running
# standalone (static pods from a manifest directory, no API server) in a
# qemu guest with 2 sockets, SMT, 2 NUMA nodes and cgroup v2, with Pinion as
# containerd's NRI plugin. It runs on Debian trixie's containerd 1.7 and on
# containerd 2.x built from the Go module github.com/containerd/containerd/v2
# (scenarios kubelet-containerd1 and kubelet-containerd2, both
# scripts/e2e/guest/scenarios/kubelet-node.sh): the same pod sequence with
# kubelet's static policy deciding and with kubelet `none` + Pinion deciding,
# the migration of docs/deployment.md between them with the pods running,
# restarts, podresources through kubelet's own client, reservedSystemCPUs,
# and the pods' start-up latency under both. Needs root and Go (binaries and
# Go's caches outside the repository: a second run reuses them). Last line:
# `N passed, N failed, N skipped`; exits non-zero on a failure.
#
# Usage: sudo scripts/e2e-kubelet.sh [--containerd 1|2|both] [--latency-only] [--interactive]
#        scripts/e2e-kubelet.sh --peers-cached | --build-peers
# --peers-cached: exits 0 when kubelet and containerd 2.x are built and
# current, 1 when a run would build one first (about 5 minutes on an idle
# 2-core machine); runs nothing (CI's time guard asks it).
# --build-peers: builds them and runs nothing; exits 0 once both are built
# (CI spends its time left on it when it skipped this bed for want of them).
# --latency-only: the start-up latency blocks alone (no sequence, migration
# or restarts) in a smaller guest of 4 vCPUs (1 socket x 2 cores x 2
# threads, 2 NUMA nodes): the latency measurement with less contention for
# the host's cores than the 8-vCPU guest's.
# Environment: as scripts/e2e-vm.sh (PINION_E2E_*), PINION_E2E_CACHED_ONLY
# (as scripts/e2e-cluster.sh: skip when kubelet or containerd 2.x would have
# to be built), PINION_E2E_CONTAINERD2_VERSION (default below),
# PINION_E2E_DEBIAN_MIRROR, PINION_E2E_LATENCY_PODS (pods started alone a
# side for the start-up latency, default 8; 0 leaves the comparison to the
# sequence's pods), PINION_E2E_LATENCY_SETTLE (seconds the restarted daemons
# settle before each latency block, default 10), PINION_E2E_LATENCY_ROUNDS
# (rounds of four blocks, static, Pinion, Pinion, static, default 1),
# PINION_E2E_LATENCY_BOTH and PINION_E2E_LATENCY_NOQUOTA (1: two diagnostic
# blocks more a round, described where they are read below).
set -uo pipefail
E2E_NAME=e2e-kubelet
. "$(dirname "$0")/e2e/lib.sh"
. "$E2E_LIB/vm.sh"
. "$E2E_LIB/peers.sh"

SUITE=trixie
# The newest containerd 2.x the Go module proxy served when this was written.
CONTAINERD2_VERSION=${PINION_E2E_CONTAINERD2_VERSION:-v2.4.2}
# The guest: 2 sockets x 2 cores x 2 threads, 2 NUMA nodes, cgroup v2,
# 1.5 GiB a node (kubelet, containerd and the agent run in an initramfs), and
# a virtio-net NIC (no network backend, link down) whose documentation
# address the guest's /init sets is kubelet's node IP (kubelet refuses a
# loopback one).
GUEST_SHAPE=(2 2 2 2 10+21/21+10 1536)
GUEST_NIC_NODE=1
# Its Go-built peers (--peers-cached, --build-peers).
PEERS=(e2e_kubelet_build "e2e_containerd2_build $CONTAINERD2_VERSION")

which=both E2E_INTERACTIVE=0 latency_only=0
while [ $# -gt 0 ]; do
    case $1 in
    --containerd)
        which=${2:-}
        case $which in 1 | 2 | both) ;; *) e2e_die "--containerd takes 1, 2 or both, not '$which'" ;; esac
        shift 2
        ;;
    --latency-only) latency_only=1; shift ;;
    --interactive) E2E_INTERACTIVE=1; shift ;;
    --peers-cached) e2e_peers_cached "${PEERS[@]}" ;;
    --build-peers) e2e_peers_build "${PEERS[@]}" ;;
    -h | --help) sed -n '2,37p' "$0"; exit 0 ;;
    *) e2e_die "unknown argument '$1' (see --help)" ;;
    esac
done
export E2E_INTERACTIVE
[ "$latency_only" = 1 ] && GUEST_SHAPE=(1 2 2 2 10+21/21+10 1536)

E2E_WORK=$(mktemp -d /tmp/pinion-e2e-kubelet.XXXXXX)
[ -n "${PINION_E2E_KEEP:-}" ] || trap 'rm -rf "$E2E_WORK"' EXIT
e2e_require busybox-static runc qemu-system-x86 linux-image-cloud-amd64 cpio
if ! command -v go >/dev/null 2>&1; then
    [ -n "${CI:-}" ] && e2e_die "go is not installed (kubelet and containerd 2.x are built from Go modules)"
    e2e_skip_all "go is not installed (kubelet and containerd 2.x are built from Go modules)"
fi
e2e_build

start=$(date +%s)
KUBELET_DIR=$(e2e_kubelet_build); e2e_peer kubelet $?
e2e_log "kubelet: $("$KUBELET_DIR/kubelet" --version 2>&1) (k8s.io/kubernetes $(cd "$E2E_REPO/interop/kubelet-node" && go list -m -f '{{.Version}}' k8s.io/kubernetes))"
images=("$KUBELET_DIR/kubelet:/usr/local/bin/kubelet"
    "$KUBELET_DIR/podresources-client:/usr/local/bin/podresources-client"
    "$(command -v runc):/usr/sbin/runc")
scenarios=()
if [ "$which" != 2 ]; then
    CTRD1=$(e2e_containerd_deb "$SUITE") || e2e_die "cannot fetch Debian $SUITE's containerd (see above)"
    e2e_log "containerd 1.x: $("$CTRD1/usr/bin/containerd" --version 2>&1)"
    for bin in containerd containerd-shim-runc-v2 ctr; do
        images+=("$CTRD1/usr/bin/$bin:/opt/containerd1/bin/$bin")
    done
    scenarios+=(kubelet-containerd1)
fi
if [ "$which" != 1 ]; then
    CTRD2=$(e2e_containerd2_build "$CONTAINERD2_VERSION"); e2e_peer "containerd $CONTAINERD2_VERSION" $?
    e2e_log "containerd 2.x: $("$CTRD2/containerd" --version 2>&1)"
    for bin in containerd containerd-shim-runc-v2 ctr; do
        images+=("$CTRD2/$bin:/opt/containerd2/bin/$bin")
    done
    scenarios+=(kubelet-containerd2)
fi
e2e_log "peers ready in $(($(date +%s) - start)) s"
e2e_test_images "$E2E_WORK/images" || e2e_die "cannot build the OCI images"
images+=("$E2E_WORK/images:/e2e/images")

e2e_guest_image "$E2E_WORK/initrd" "${images[@]}" || e2e_die "cannot build the guest image"
e2e_log "accelerator: $(e2e_accel); image $(du -h "$E2E_WORK/initrd" | cut -f1)"
start=$(date +%s)
mapfile -t shape_args < <(e2e_shape_args "${GUEST_SHAPE[@]}"; e2e_nic_args "$GUEST_NIC_NODE")
log=$E2E_WORK/guest.console
list=$(IFS=,; echo "${scenarios[*]}")
# One scenario took over 900 s under TCG on a loaded 2-core host (load
# average 10-15): kubelet starts in 30-60 s there, a pod in 8-40 s; at
# load 17 the whole sequence needed more than 1,800 s
# (PINION_E2E_KUBELET_TIMEOUT, seconds per scenario).
per=${PINION_E2E_KUBELET_TIMEOUT:-3000}
# Pods started alone a side for the start-up latency (PINION_E2E_LATENCY_PODS).
latency_pods=${PINION_E2E_LATENCY_PODS:-8}
case $latency_pods in '' | *[!0-9]*) e2e_die "PINION_E2E_LATENCY_PODS must be a whole number, not '$latency_pods'" ;; esac
latency_settle=${PINION_E2E_LATENCY_SETTLE:-10}
case $latency_settle in '' | *[!0-9]*) e2e_die "PINION_E2E_LATENCY_SETTLE must be a whole number of seconds, not '$latency_settle'" ;; esac
# PINION_E2E_LATENCY_BOTH=1: two more blocks, kubelet `static` deciding with
# Pinion connected too (a diagnostic: Pinion's presence against kubelet `none`).
latency_both=${PINION_E2E_LATENCY_BOTH:-0}
case $latency_both in 0 | 1) ;; *) e2e_die "PINION_E2E_LATENCY_BOTH must be 0 or 1, not '$latency_both'" ;; esac
# PINION_E2E_LATENCY_NOQUOTA=1: two more blocks, Pinion deciding with kubelet
# at `none` and cpuCFSQuota false (a diagnostic: the cost of the CFS quota
# kubelet `none` gives a pod's cgroup and sandbox, against Pinion's own).
latency_noquota=${PINION_E2E_LATENCY_NOQUOTA:-0}
case $latency_noquota in 0 | 1) ;; *) e2e_die "PINION_E2E_LATENCY_NOQUOTA must be 0 or 1, not '$latency_noquota'" ;; esac
latency_rounds=${PINION_E2E_LATENCY_ROUNDS:-1}
case $latency_rounds in '' | *[!0-9]* | 0) e2e_die "PINION_E2E_LATENCY_ROUNDS must be a whole number above 0, not '$latency_rounds'" ;; esac
[ "$latency_only" = 1 ] && [ "$latency_pods" = 0 ] && e2e_die "--latency-only needs PINION_E2E_LATENCY_PODS above 0"
e2e_run_guest "$log" "$E2E_WORK/initrd" $((per * ${#scenarios[@]} + 300)) \
    "E2E_SHAPE=kubelet-smt E2E_CGROUP=v2 E2E_NIC_NODE=$GUEST_NIC_NODE E2E_SCENARIOS=$list E2E_SCENARIO_TIMEOUT=$per E2E_LATENCY_PODS=$latency_pods E2E_LATENCY_SETTLE=$latency_settle E2E_LATENCY_BOTH=$latency_both E2E_LATENCY_NOQUOTA=$latency_noquota E2E_LATENCY_ROUNDS=$latency_rounds E2E_LATENCY_ONLY=$latency_only" \
    "${shape_args[@]}"
status=$?
[ "$E2E_INTERACTIVE" = 1 ] && exit 0
e2e_collect "$log" guest-smt
if ! grep -q '^E2E-END' "$log"; then
    e2e_result FAIL "guest-smt: the guest did not finish (qemu status $status); console and qemu output end with:"
    tail -n 20 "$log" "$log.qemu" | sed 's/^/  | /'
fi
e2e_log "guest done in $(($(date +%s) - start)) s"

# What ran, and the start-up latency (manifest written -> container running)
# under kubelet's static policy and under Pinion: the pods started alone
# (the comparison: the same pod, each on an empty node) and the sequence's
# pods (differing in kind and in what runs beside them). Median and mean
# each; "Pinion adds" compares the medians.
tr -d '\r' <"$log" | sed -n 's/^E2E-CONTAINERD \([12]\) /containerd \1.x: /p' | sed 's/^/e2e-kubelet: ran on /' >&2
# median(list): the median of a space-separated list of numbers.
AWK_MEDIAN='
    function median(list,    v, n, i, j, t) {
        n = split(list, v, " ")
        for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
'
tr -d '\r' <"$log" | grep '^E2E-LATENCY ' | awk "$AWK_MEDIAN"'
    # resample(list): as many values drawn from list with replacement.
    function resample(list,    v, n, i, out) {
        n = split(list, v, " "); out = ""
        for (i = 1; i <= n; i++) out = out " " v[int(rand() * n) + 1]
        return out
    }
    # interval(a, b): the 95 % bootstrap interval of median(b) - median(a),
    # 2,000 resamples of each side (a fixed seed: the same pods print the
    # same interval).
    function interval(a, b,    r, d, i, j, t, R) {
        R = 2000; srand(29)
        for (r = 1; r <= R; r++) d[r] = median(resample(b)) - median(resample(a))
        for (i = 2; i <= R; i++) for (j = i; j > 1 && d[j - 1] > d[j]; j--) { t = d[j]; d[j] = d[j - 1]; d[j - 1] = t }
        return sprintf("[%+.0f, %+.0f]", d[int(R * 0.025) + 1], d[int(R * 0.975)])
    }
    { k = $2 " " $3; rt[$2] = 1; ms[k] = ""; s = 0; n = 0; detail[k] = ""
      for (i = 4; i < NF; i += 2) { ms[k] = ms[k] " " $(i + 1); s += $(i + 1); n++; detail[k] = detail[k] " " $i "=" $(i + 1) }
      mean[k] = n ? s / n : 0; count[k] = n }
    END {
      for (r in rt) for (w = 1; w <= 2; w++) {
        side = (w == 1 ? "-alone" : ""); what = (w == 1 ? "pods started alone" : "the sequence")
        a = r " static" side; b = r " pinion" side
        if (!(a in ms) || !(b in ms)) continue
        ma = median(ms[a]); mb = median(ms[b])
        printf "e2e-kubelet: start-up latency on %s, %s (ms, manifest written -> container running): kubelet static median %.0f mean %.0f of %d (%s ), kubelet none + Pinion median %.0f mean %.0f of %d (%s ); Pinion adds %+.0f ms (%+.1f %%) at the median, 95 %% interval %s\n", r, what, ma, mean[a], count[a], detail[a], mb, mean[b], count[b], detail[b], mb - ma, (ma > 0 ? (mb - ma) * 100 / ma : 0), interval(ms[a], ms[b])
      }
      # The diagnostic arms (PINION_E2E_LATENCY_BOTH=1,
      # PINION_E2E_LATENCY_NOQUOTA=1) against kubelet static.
      arm["both-alone"] = "kubelet static with Pinion connected too"
      arm["noquota-alone"] = "kubelet none (cpuCFSQuota false) + Pinion"
      for (r in rt) for (d in arm) {
        a = r " static-alone"; b = r " " d
        if (!(a in ms) || !(b in ms)) continue
        ma = median(ms[a]); mb = median(ms[b])
        printf "e2e-kubelet: diagnostic on %s, pods started alone (ms): kubelet static median %.0f, %s median %.0f mean %.0f of %d (%s ); %+.0f ms (%+.1f %%), 95 %% interval %s\n", r, ma, arm[d], mb, mean[b], count[b], detail[b], mb - ma, (ma > 0 ? (mb - ma) * 100 / ma : 0), interval(ms[a], ms[b])
      }
    }' >&2
# Where the pods' start-up went, step by step (containerd's log of each pod
# against its manifest and its start record; the guest's pod_phases), the
# median of each step a side.
tr -d '\r' <"$log" | grep '^E2E-PHASES ' | awk "$AWK_MEDIAN"'
    {
        if ($3 ~ /^(both|noquota)/) next
        side = ($3 ~ /^pinion/ ? "pinion" : "static") ($3 ~ /-alone$/ ? " alone" : " sequence")
        rt[$2] = 1
        for (i = 5; i <= NF; i++) {
            split($i, f, "="); if (f[2] < 0) continue
            if (!((f[1]) in rank)) { rank[f[1]] = ++steps; name[steps] = f[1] }
            v[$2 " " side " " f[1]] = v[$2 " " side " " f[1]] " " f[2]
        }
    }
    END {
        for (r in rt) for (w = 1; w <= 2; w++) {
            kind = (w == 1 ? "alone" : "sequence"); line = ""
            for (k = 1; k <= steps; k++) {
                a = r " static " kind " " name[k]; b = r " pinion " kind " " name[k]
                if (!(a in v) || !(b in v)) continue
                line = line sprintf(" %s=%.0f/%.0f", name[k], median(v[a]), median(v[b]))
            }
            if (line != "") printf "e2e-kubelet: where the start-up went on %s, pods %s (ms, medians, kubelet static/Pinion):%s\n", r, (w == 1 ? "started alone" : "of the sequence"), line
        }
    }' >&2
# Pinion's own share: what its NRI handlers took to answer the runtime for
# those pods (its pinion_nri_request_duration_seconds, read in the guest
# before and after), per pod and by method.
tr -d '\r' <"$log" | sed -n 's/^E2E-NRI \([^ ]*\) \([^ ]*\) /e2e-kubelet: the NRI handlers of Pinion, \1 \2: /p' >&2
# The CPU time (ms) the node's daemons used while the pods started alone
# ran, a side (the guest's CPUs are the pods' too).
tr -d '\r' <"$log" | sed -n 's/^E2E-CPU \([^ ]*\) \([^ ]*\) /e2e-kubelet: daemons'"'"' CPU time (ms), \1 \2: /p' >&2
tr -d '\r' <"$log" | sed -n 's/^E2E-GUESTCPU \([^ ]*\) \([^ ]*\) /e2e-kubelet: guest CPU time, \1 \2: /p' >&2
e2e_summary
