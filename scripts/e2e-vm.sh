#!/usr/bin/env bash
# Pinion on real kernels: qemu guests with SMT, NUMA and cgroup v2 (and v1),
# each booted from an initramfs holding busybox-static, Pinion's binaries and
# the scenario scripts of scripts/e2e/guest/scenarios; the results come back
# over the serial console. Needs root; installs qemu-system-x86,
# linux-image-cloud-amd64, busybox-static and cpio when missing (skips with a
# notice when it cannot). Last line: `N passed, N failed, N skipped`; exits
# non-zero on a failure.
#
# Usage: sudo scripts/e2e-vm.sh [--shape NAME]... [--scenarios a,b] [--nic NODE] [--interactive] [--list]
# (--nic NODE: every guest gets a virtio-net NIC, no network backend, on NUMA
# node NODE, as the containerd guest has on node 1; see e2e_nic_args.)
# `--scenarios isolation` runs every scenarios/isolation-*.sh on the isolation
# shapes (ISOLATION_SHAPES: Debian trixie's 6.12 kernel with and without
# isolcpus/nohz_full, the 16-CPU guest, a cgroup v1 guest).
# Environment: PINION_E2E_ACCEL=tcg|kvm, PINION_E2E_PROFILE=release|debug,
# PINION_E2E_NO_BUILD=1, PINION_E2E_KERNEL=PATH, PINION_E2E_KEEP=1 (keep the
# work directory with the images and console logs), PINION_E2E_BOOT_LIMIT=S
# (a guest silent that long is booted once more; 180). See docs/testing.md.
set -uo pipefail
E2E_NAME=e2e-vm
. "$(dirname "$0")/e2e/lib.sh"
. "$E2E_LIB/vm.sh"

# The guest shapes. Columns: name, sockets, cores per socket, threads per
# core, NUMA nodes, distance matrix (rows '/', values '+'), cgroup version,
# memory per node (MiB), scenarios (scripts/e2e/guest/scenarios/NAME.sh;
# `isolation` stands for every isolation-*.sh), and optionally the kernel
# (`host`: /boot's, e2e_kernel; a Debian suite: its cloud kernel, fetched
# into the cache) and extra kernel command-line words ('+' between words,
# '-' for none).
SHAPES=(
    "smt-2s-2n  2 2 2 2 10+21/21+10 v2 512 cgroup2,discovery,siblings,exclusive,restart,offline,pools,quota-churn"
    "smt-1s-v1  1 4 2 1 10 v1 768 discovery,siblings,exclusive,restart,offline,quota-churn"
    "big-16c-4n 2 4 2 4 10+12+21+21/12+10+21+21/21+21+10+12/21+21+12+10 v2 512 discovery,siblings,exclusive"
)
# The isolation shapes (`--scenarios isolation`; issue 31): cgroup v2 cpuset
# partitions need Linux 6.7 (`cpuset.cpus.exclusive`) and 6.8
# (`cpuset.cpus.isolated`), so the v2 guests boot trixie's 6.12; trixie's
# kernel has no cgroup v1 cpuset (CONFIG_CPUSETS_V1 off), so the v1 guest,
# which checks the fallback, boots /boot's.
ISOLATION_SHAPES=(
    "iso-2s-2n-isolcpus 2 2 2 2 10+21/21+10 v2 512 isolation trixie isolcpus=6+nohz_full=6"
    "iso-2s-2n          2 2 2 2 10+21/21+10 v2 512 isolation trixie -"
    "iso-16c-4n         2 4 2 4 10+12+21+21/12+10+21+21/21+21+10+12/21+21+12+10 v2 512 isolation trixie -"
    "iso-1s-v1          1 4 2 1 10 v1 768 isolation host -"
)

# expand_scenarios LIST: LIST with `isolation` replaced by the names of
# every scenarios/isolation-*.sh.
expand_scenarios() {
    local out="" word file
    for word in ${1//,/ }; do
        if [ "$word" = isolation ]; then
            for file in "$E2E_LIB"/guest/scenarios/isolation-*.sh; do
                [ -e "$file" ] && out+="${out:+,}$(basename "$file" .sh)"
            done
        else
            out+="${out:+,}$word"
        fi
    done
    echo "$out"
}

only=() scenarios_override="" nic_node="" E2E_INTERACTIVE=0
while [ $# -gt 0 ]; do
    case $1 in
    --shape) only+=("$2"); shift 2 ;;
    --scenarios) scenarios_override=$2; shift 2 ;;
    --nic) nic_node=$2; shift 2 ;;
    --interactive) E2E_INTERACTIVE=1; shift ;;
    --list) printf '%s\n' "${SHAPES[@]}" "${ISOLATION_SHAPES[@]}"; exit 0 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) e2e_die "unknown argument '$1' (see --help)" ;;
    esac
done
export E2E_INTERACTIVE

E2E_WORK=$(mktemp -d /tmp/pinion-e2e-vm.XXXXXX)
[ -n "${PINION_E2E_KEEP:-}" ] || trap 'rm -rf "$E2E_WORK"' EXIT
e2e_require qemu-system-x86 linux-image-cloud-amd64 busybox-static cpio
e2e_build
e2e_guest_image "$E2E_WORK/initrd" || e2e_die "cannot build the guest image"
e2e_log "accelerator: $(e2e_accel); kernel: $(e2e_kernel); image $(du -h "$E2E_WORK/initrd" | cut -f1)"

# `--scenarios isolation` (alone) runs on the isolation shapes; --shape
# picks from both tables.
shapes=("${SHAPES[@]}")
if [ "${#only[@]}" -gt 0 ]; then
    shapes+=("${ISOLATION_SHAPES[@]}")
elif [ "$scenarios_override" = isolation ]; then
    shapes=("${ISOLATION_SHAPES[@]}")
fi
ran=0
for shape in "${shapes[@]}"; do
    read -r name sockets cores threads nodes distances cgroup mem scenarios kernel cmdline <<<"$shape"
    if [ "${#only[@]}" -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then
        continue
    fi
    ran=1
    [ -n "$scenarios_override" ] && scenarios=$scenarios_override
    scenarios=$(expand_scenarios "$scenarios")
    if [ -z "$scenarios" ]; then
        e2e_result FAIL "$name: no scenario to run (no scripts/e2e/guest/scenarios/isolation-*.sh?)"
        continue
    fi
    E2E_GUEST_KERNEL=$(e2e_shape_kernel "${kernel:-host}") && [ -n "$E2E_GUEST_KERNEL" ] ||
        e2e_die "shape $name: no ${kernel:-host} kernel (see the messages above)"
    export E2E_GUEST_KERNEL
    extra=""
    [ -n "${cmdline:-}" ] && [ "$cmdline" != - ] && extra=" ${cmdline//+/ }"
    log=$E2E_WORK/$name.console
    mapfile -t shape_args < <(e2e_shape_args "$sockets" "$cores" "$threads" "$nodes" "$distances" "$mem"
        [ -z "$nic_node" ] || e2e_nic_args "$nic_node")
    nic_append=""
    if [ -n "$nic_node" ]; then
        [ "$nic_node" -lt "$nodes" ] 2>/dev/null || e2e_die "--nic $nic_node: shape $name has $nodes node(s)"
        nic_append=" E2E_NIC_NODE=$nic_node"
    fi
    e2e_log "guest $name: ${sockets}s x ${cores}c x ${threads}t, $nodes node(s), cgroup $cgroup, kernel $(basename "$E2E_GUEST_KERNEL")$extra: $scenarios"
    start=$(date +%s)
    e2e_run_guest "$log" "$E2E_WORK/initrd" 900 \
        "E2E_SHAPE=$name E2E_SOCKETS=$sockets E2E_CORES=$cores E2E_THREADS=$threads E2E_NODES=$nodes E2E_DISTANCES=$distances E2E_CGROUP=$cgroup E2E_SCENARIOS=$scenarios$nic_append$extra" \
        "${shape_args[@]}"
    status=$?
    [ "$E2E_INTERACTIVE" = 1 ] && continue
    e2e_collect "$log" "$name"
    grep -E '^(E2E-NIC|ISOLATED) ' "$log" | tr -d '\r' | sed "s/^/e2e-vm: $name: /" >&2
    if ! grep -q '^E2E-END' "$log"; then
        e2e_result FAIL "$name: the guest did not finish (qemu status $status); console and qemu output end with:"
        tail -n 20 "$log" "$log.qemu" | sed 's/^/  | /'
    fi
    e2e_log "guest $name done in $(($(date +%s) - start)) s"
done
[ "$ran" = 1 ] || e2e_die "no shape named ${only[*]} (see --list)"
[ "$E2E_INTERACTIVE" = 1 ] && exit 0
e2e_summary
