#!/usr/bin/env bash
# Pinion as the NRI plugin of a real containerd: Debian trixie's containerd
# 1.7 (fetched with `apt-get download` into a cache outside the repository,
# with a private apt configuration; extracted with dpkg-deb, never installed),
# NRI enabled, the machine's runc, images built from busybox-static as OCI
# archives, and pinion-cri acting as kubelet over CRI v1. The scenario
# (scripts/e2e/guest/scenarios/containerd.sh) runs on this host and in a qemu
# guest with SMT, two NUMA nodes and cgroup v2. Needs root; skips with a
# notice when it cannot install what it needs. Last line:
# `N passed, N failed, N skipped`; exits non-zero on a failure.
#
# Usage: sudo scripts/e2e-containerd.sh [--host-only | --guest-only] [--interactive]
# Environment: as scripts/e2e-vm.sh (PINION_E2E_*), and
# PINION_E2E_DEBIAN_MIRROR (default: this machine's Debian mirror).
set -uo pipefail
E2E_NAME=e2e-containerd
. "$(dirname "$0")/e2e/lib.sh"
. "$E2E_LIB/vm.sh"
. "$E2E_LIB/peers.sh"

SUITE=trixie
# The guest: 2 sockets x 2 cores x 2 threads, 2 NUMA nodes, cgroup v2, and
# a virtio-net NIC (no network backend) on NUMA node 1; it boots Debian
# trixie's 6.12 kernel (as the containerd it runs): remote cpuset partitions
# (`exclusiveCpus.partition`) need Linux 6.7, cpuset.cpus.isolated 6.8.
GUEST_SHAPE=(2 2 2 2 10+21/21+10 1024)
GUEST_NIC_NODE=1
GUEST_KERNEL=$SUITE

where=both E2E_INTERACTIVE=0
while [ $# -gt 0 ]; do
    case $1 in
    --host-only) where=host; shift ;;
    --guest-only) where=guest; shift ;;
    --interactive) where=guest E2E_INTERACTIVE=1; shift ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) e2e_die "unknown argument '$1' (see --help)" ;;
    esac
done
export E2E_INTERACTIVE

E2E_WORK=$(mktemp -d /tmp/pinion-e2e-ctrd.XXXXXX)
[ -n "${PINION_E2E_KEEP:-}" ] || trap 'rm -rf "$E2E_WORK"' EXIT
packages=(busybox-static runc)
[ "$where" = host ] || packages+=(qemu-system-x86 linux-image-cloud-amd64 cpio)
e2e_require "${packages[@]}"
e2e_build
[ -x "$E2E_BIN_DIR/pinion-cri" ] || e2e_die "no pinion-cri binary in $E2E_BIN_DIR"

CTRD=$(e2e_containerd_deb "$SUITE") ||
    e2e_skip_all "cannot fetch the containerd package of Debian $SUITE (see above)"
e2e_log "containerd: $("$CTRD/usr/bin/containerd" --version 2>&1)"
e2e_test_images "$E2E_WORK/images" || e2e_die "cannot build the OCI images"

# The DaemonSet's image (scripts/build-image.sh, no registry, no engine):
# imported by this containerd's ctr and run with runc — the image `deploy/`
# names is one a node accepts (issue 33).
image_check() {
    local dir=$E2E_WORK/image-check
    mkdir -p "$dir" && printf 'version = 2\n' >"$dir/config.toml" || return 1
    "$E2E_REPO/scripts/build-image.sh" --bin-dir "$E2E_BIN_DIR" --out "$dir/pinion.oci.tar" \
        >"$dir/build.log" 2>&1 || { tail -5 "$dir/build.log"; return 1; }
    PATH="$CTRD/usr/bin:$PATH" "$CTRD/usr/bin/containerd" --config "$dir/config.toml" \
        --root "$dir/root" --state "$dir/state" --address "$dir/sock" >"$dir/containerd.log" 2>&1 &
    local pid=$! waited=0
    while [ ! -S "$dir/sock" ] && [ "$waited" -lt 30 ]; do sleep 1; waited=$((waited + 1)); done
    local ctr=("$CTRD/usr/bin/ctr" --address "$dir/sock" -n k8s.io) out status=0
    timeout 120 "${ctr[@]}" images import "$dir/pinion.oci.tar" >"$dir/import.log" 2>&1 || status=1
    if [ "$status" -eq 0 ]; then
        out=$(PATH="$CTRD/usr/bin:$PATH" timeout 60 "${ctr[@]}" run --rm --runc-binary "${PINION_E2E_RUNC:-$(command -v runc)}" \
            docker.io/library/pinion:latest image-check /usr/local/bin/pinion --version 2>&1) || status=1
        echo "$out"
        case $out in "pinion "*) ;; *) status=1 ;; esac
    else
        tail -5 "$dir/import.log"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return "$status"
}
if out=$(image_check 2>&1); then
    e2e_result PASS "host image: scripts/build-image.sh's archive imports with ctr and runs ($out)"
else
    e2e_result FAIL "host image: scripts/build-image.sh's archive: $(echo "$out" | tail -3 | tr '\n' ' ')"
fi

if [ "$where" != guest ]; then
    if [ -d /sys/fs/cgroup/cpuset ]; then cpuset_mount=/sys/fs/cgroup/cpuset; else cpuset_mount=/sys/fs/cgroup; fi
    e2e_log "host: containerd with pinion agent --nri"
    start=$(date +%s)
    mkdir -p "$E2E_WORK/host"
    env PATH="$CTRD/usr/bin:$PATH" PINION="$E2E_BIN_DIR/pinion" PINION_CRI="$E2E_BIN_DIR/pinion-cri" \
        E2E_RUNC="${PINION_E2E_RUNC:-$(command -v runc)}" E2E_IMAGES="$E2E_WORK/images" E2E_STATE="$E2E_WORK/host" \
        E2E_CGROUP_ROOT="$cpuset_mount/pinion-e2e-ctrd-$$" E2E_CHURN=6x12x2 SCENARIO=containerd \
        timeout 600 sh -c ". '$E2E_GUEST/check.sh'; . '$E2E_GUEST/pinion.sh'; . '$E2E_GUEST/scenarios/containerd.sh'" \
        >"$E2E_WORK/host.out" 2>"$E2E_WORK/host.err"
    status=$?
    e2e_collect "$E2E_WORK/host.out" host
    if [ "$status" -ne 0 ] || ! grep -q '^RESULT ' "$E2E_WORK/host.out"; then
        e2e_result FAIL "host containerd: scenario script: exit status $status"
    fi
    if [ "$status" -ne 0 ] || grep -q '^RESULT FAIL' "$E2E_WORK/host.out"; then
        echo "host logs:"
        tail -n 15 "$E2E_WORK/host.err" | sed 's/^/  | /'
        tail -n 15 "$E2E_WORK/host/agent.log" 2>/dev/null | sed 's/^/  agent| /'
        grep -i 'error\|nri' "$E2E_WORK/host/containerd.log" 2>/dev/null | tail -n 15 | sed 's/^/  containerd| /'
    fi
    e2e_log "host done in $(($(date +%s) - start)) s"
fi

if [ "$where" != host ]; then
    E2E_GUEST_KERNEL=$(e2e_shape_kernel "$GUEST_KERNEL") && [ -n "$E2E_GUEST_KERNEL" ] ||
        e2e_die "no Debian $GUEST_KERNEL kernel for the guest (see the messages above)"
    export E2E_GUEST_KERNEL
    e2e_log "guest: building the image with containerd (kernel $(basename "$E2E_GUEST_KERNEL"))"
    e2e_guest_image "$E2E_WORK/initrd" \
        "$CTRD/usr/bin/containerd:/usr/bin/containerd" \
        "$CTRD/usr/bin/containerd-shim-runc-v2:/usr/bin/containerd-shim-runc-v2" \
        "$CTRD/usr/bin/ctr:/usr/bin/ctr" \
        "$(command -v runc):/usr/sbin/runc" \
        "$E2E_BIN_DIR/pinion-cri:/usr/local/bin/pinion-cri" \
        "$E2E_WORK/images:/e2e/images" || e2e_die "cannot build the guest image"
    e2e_log "accelerator: $(e2e_accel); image $(du -h "$E2E_WORK/initrd" | cut -f1)"
    start=$(date +%s)
    mapfile -t shape_args < <(e2e_shape_args "${GUEST_SHAPE[@]}"; e2e_nic_args "$GUEST_NIC_NODE")
    log=$E2E_WORK/guest.console
    e2e_run_guest "$log" "$E2E_WORK/initrd" 900 \
        "E2E_SHAPE=containerd-smt E2E_CGROUP=v2 E2E_NIC_NODE=$GUEST_NIC_NODE E2E_SCENARIOS=containerd E2E_SCENARIO_TIMEOUT=800 E2E_CHURN=${PINION_E2E_GUEST_CHURN:-3x2x0}" \
        "${shape_args[@]}"
    status=$?
    [ "$E2E_INTERACTIVE" = 1 ] && exit 0
    e2e_collect "$log" guest-smt
    grep '^E2E-NIC ' "$log" | tr -d '\r' | sed 's/^/e2e-containerd: guest /' >&2
    if ! grep -q '^E2E-END' "$log"; then
        e2e_result FAIL "guest-smt: the guest did not finish (qemu status $status); console and qemu output end with:"
        tail -n 20 "$log" "$log.qemu" | sed 's/^/  | /'
    fi
    e2e_log "guest done in $(($(date +%s) - start)) s"
fi
e2e_summary
