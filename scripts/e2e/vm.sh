# Host-side helpers for qemu guests (sourced after lib.sh): the guest image
# (an initramfs: busybox-static, Pinion's binaries and the libraries `ldd`
# lists, the scenario scripts, /init), the accelerator, and one guest run
# whose console is captured to a file. See docs/testing.md.

E2E_GUEST=$E2E_LIB/guest

# e2e_shape_kernel CHOICE: the kernel a shape boots: `host` (e2e_kernel) or
# a Debian suite (`trixie`: its cloud kernel, linux-image-6.12.*+deb13-cloud-amd64,
# fetched by e2e_debian_kernel into the cache). Prints the vmlinuz path.
e2e_shape_kernel() {
    case $1 in
    host) e2e_kernel ;;
    *)
        local tree
        tree=$(e2e_debian_kernel "$1") || return 1
        ls "$tree"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -1
        ;;
    esac
}

# The newest Debian cloud kernel (or any kernel) in /boot, or PINION_E2E_KERNEL.
e2e_kernel() {
    if [ -n "${PINION_E2E_KERNEL:-}" ]; then
        echo "$PINION_E2E_KERNEL"
        return
    fi
    local k
    k=$(ls /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -1)
    [ -n "$k" ] || k=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
    [ -n "$k" ] || e2e_die "no kernel in /boot (package linux-image-cloud-amd64)"
    echo "$k"
}

# The kernel modules every guest image carries, loaded by /init in this
# order's dependency closure: the NIC of e2e_nic_args (virtio-net behind a
# virtio PCI function; the Debian cloud kernel builds both as modules).
E2E_GUEST_MODULES=(virtio_pci virtio_net)

# e2e_kernel_release: the release of the guest kernel (E2E_GUEST_KERNEL, a
# shape's, else e2e_kernel; /boot/vmlinuz-RELEASE).
e2e_kernel_release() {
    local k
    k=$(basename "${E2E_GUEST_KERNEL:-$(e2e_kernel)}")
    echo "${k#vmlinuz-}"
}

# e2e_kernel_modules: the guest kernel's module directory: /lib/modules/RELEASE
# of this machine, or of the extracted Debian package a shape's kernel came
# from (e2e_debian_kernel ran depmod there).
e2e_kernel_modules() {
    local release tree
    release=$(e2e_kernel_release)
    tree=$(dirname "$(dirname "${E2E_GUEST_KERNEL:-/boot/x}")")
    if [ -n "${E2E_GUEST_KERNEL:-}" ] && [ -f "$tree/lib/modules/$release/modules.dep" ]; then
        echo "$tree/lib/modules/$release"
    else
        echo "/lib/modules/$release"
    fi
}

# image_add_modules ROOT MODULE...: copies each module that the guest kernel
# builds as a module, with what it depends on (modules.dep), under
# ROOT/lib/modules/RELEASE (decompressed: busybox's insmod takes plain .ko
# files) and lists them, dependencies first, in ROOT/e2e/modules for /init
# to insmod. A module the kernel has built in needs nothing; one it has
# neither way is an error.
image_add_modules() {
    local root=$1
    shift
    local release dir dest
    release=$(e2e_kernel_release)
    dir=$(e2e_kernel_modules)
    dest=/lib/modules/$release
    if [ ! -f "$dir/modules.dep" ]; then
        e2e_log "no $dir/modules.dep: the guest kernel gets no modules (${*})"
        return 0
    fi
    local order=() seen=" "
    _e2e_add_module() {
        local name=$1 line path deps i
        line=$(grep -E "(^|/)${name//[-_]/[-_]}\.ko(\.[a-z]+)?:" "$dir/modules.dep" | head -1)
        if [ -z "$line" ]; then
            grep -qE "(^|/)${name//[-_]/[-_]}\.ko\$" "$dir/modules.builtin" 2>/dev/null && return 0
            e2e_log "kernel $release has no module $name"
            return 1
        fi
        path=${line%%:*}
        read -ra deps <<<"${line#*:}"
        # modules.dep lists a module's dependencies users first: load them
        # from the end.
        for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
            _e2e_add_module_file "${deps[$i]}" || return 1
        done
        _e2e_add_module_file "$path"
    }
    _e2e_add_module_file() {
        case $seen in *" $1 "*) return 0 ;; esac
        local plain=${1%.xz}
        plain=${plain%.zst}
        mkdir -p "$root$dest/$(dirname "$1")" || return 1
        case $1 in
        *.xz) xz -dc "$dir/$1" >"$root$dest/$plain" ;;
        *.zst) zstd -qdc "$dir/$1" >"$root$dest/$plain" ;;
        *) cp "$dir/$1" "$root$dest/$plain" ;;
        esac || return 1
        seen+="$1 "
        order+=("$dest/$plain")
    }
    local name
    for name in "$@"; do
        _e2e_add_module "$name" || return 1
    done
    mkdir -p "$root/e2e"
    [ "${#order[@]}" -eq 0 ] || printf '%s\n' "${order[@]}" >"$root/e2e/modules"
}

# e2e_nic_args NODE: the qemu options of a NIC on NUMA node NODE: a PCI
# expander bridge (`pxb`, qemu's default `pc` machine) whose ACPI proximity
# domain is NODE, and a virtio-net function on it. The NIC has no network
# backend: whatever the guest would send goes nowhere (the guest's /init
# keeps its link down anyway). Needs the node in the shape (-numa).
e2e_nic_args() {
    printf '%s\n' -device "pxb,id=pxb1,bus_nr=32,numa_node=$1,bus=pci.0" \
        -device "virtio-net-pci,bus=pxb1,addr=0x2,mac=52:54:00:e2:e0:01"
}

# image_add_binary ROOT FILE [DEST]: copies an executable (stripped) and
# every library `ldd` lists for it, at the same paths.
image_add_binary() {
    local root=$1 file=$2 dest=${3:-/usr/local/bin/$(basename "$2")}
    mkdir -p "$root$(dirname "$dest")" || return 1
    strip -o "$root$dest" "$file" 2>/dev/null || cp "$file" "$root$dest" || return 1
    chmod 0755 "$root$dest"
    local lib
    for lib in $(ldd "$file" 2>/dev/null | grep -o '/[^ ]*'); do
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib" || return 1
    done
}

# e2e_guest_image OUT [SRC:DEST ...]: the initramfs with Pinion's binaries,
# the scenario scripts and the extra files given.
e2e_guest_image() {
    local out=$1
    shift
    local root
    root=$(mktemp -d "$E2E_WORK/root.XXXXXX")
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,proc,sys,dev,run,tmp,var/tmp,root,etc,e2e}
    cp /bin/busybox "$root/bin/busybox"
    echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
    echo 'root:x:0:' >"$root/etc/group"
    # What a container runtime copies into host-network pods.
    echo '127.0.0.1 localhost' >"$root/etc/hosts"
    : >"$root/etc/resolv.conf"
    echo e2e >"$root/etc/hostname"
    install -m 0755 "$E2E_GUEST/init" "$root/init"
    cp "$E2E_GUEST/check.sh" "$E2E_GUEST/pinion.sh" "$E2E_GUEST/run-scenario" "$root/e2e/"
    cp -r "$E2E_GUEST/scenarios" "$root/e2e/scenarios"
    image_add_modules "$root" "${E2E_GUEST_MODULES[@]}" || return 1
    local bin
    for bin in $(e2e_pinion_bins); do
        image_add_binary "$root" "$bin" || return 1
    done
    local pair
    for pair in "$@"; do
        local src=${pair%%:*} dest=${pair#*:}
        if [ -x "$src" ] && [ ! -d "$src" ] && file_is_elf "$src"; then
            image_add_binary "$root" "$src" "$dest" || return 1
        else
            mkdir -p "$root$(dirname "$dest")" && cp -r "$src" "$root$dest" || return 1
        fi
    done
    (cd "$root" && find . | cpio -o -H newc --quiet) >"$out" || return 1
    rm -rf "$root"
}

file_is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# The accelerator: PINION_E2E_ACCEL (kvm or tcg), else KVM when a probe guest
# boots with it, else TCG (nested KVM can fail mid-boot with an emulation
# error, so /dev/kvm existing is not enough). A failing probe hangs until its
# 60 s timeout, and callers ask in subshells (`$(e2e_accel)`, once per guest),
# so the answer is kept in the cache for this boot of the machine
# (/proc/sys/kernel/random/boot_id): every later guest, bed and run on the same
# boot reads it instead of probing again.
e2e_accel() {
    if [ -n "${E2E_ACCEL:-}" ]; then
        echo "$E2E_ACCEL"
        return
    fi
    E2E_ACCEL=${PINION_E2E_ACCEL:-}
    if [ -z "$E2E_ACCEL" ]; then
        local boot kept=""
        boot=$(tr -cd '0-9a-f-' </proc/sys/kernel/random/boot_id 2>/dev/null)
        [ -n "$boot" ] && kept=$E2E_CACHE/accel-$boot
        if [ -n "$kept" ] && [ -f "$kept" ]; then
            E2E_ACCEL=$(cat "$kept")
            case $E2E_ACCEL in
            kvm | tcg) ;;
            *) E2E_ACCEL="" ;;
            esac
        fi
    fi
    if [ -z "$E2E_ACCEL" ]; then
        E2E_ACCEL=tcg
        if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
            local probe=$E2E_WORK/kvm-probe
            mkdir -p "$probe/root/bin"
            cp /bin/busybox "$probe/root/bin/busybox"
            printf '#!/bin/busybox sh\n/bin/busybox echo E2E-KVM-OK\n/bin/busybox poweroff -f\n' >"$probe/root/init"
            chmod 0755 "$probe/root/init"
            (cd "$probe/root" && find . | cpio -o -H newc --quiet) >"$probe/initrd"
            timeout 60 qemu-system-x86_64 -accel kvm -cpu host -smp 2 -m 256 \
                -nodefaults -no-user-config -display none -no-reboot \
                -serial "file:$probe/console" -kernel "$(e2e_kernel)" -initrd "$probe/initrd" \
                -append "console=ttyS0 panic=-1 quiet" >"$probe/qemu.log" 2>&1 || true
            grep -q E2E-KVM-OK "$probe/console" 2>/dev/null && E2E_ACCEL=kvm
            e2e_log "KVM probe: $E2E_ACCEL${kept:+ (kept for this boot in $kept)}"
        fi
        if [ -n "$kept" ] && mkdir -p "$E2E_CACHE" && echo "$E2E_ACCEL" >"$kept.tmp.$$"; then
            mv -f "$kept.tmp.$$" "$kept"
        fi
    fi
    echo "$E2E_ACCEL"
}

# The qemu options of a shape: SOCKETS CORES THREADS NODES DISTANCES MEM_MB
# (memory per node). Cores are spread evenly over the nodes, in order.
e2e_shape_args() {
    local sockets=$1 cores=$2 threads=$3 nodes=$4 distances=$5 mem=$6
    local args=(-smp "$((sockets * cores * threads)),sockets=$sockets,cores=$cores,threads=$threads"
        -m "$((mem * nodes))M")
    local n s c
    for ((n = 0; n < nodes; n++)); do
        args+=(-object "memory-backend-ram,id=m$n,size=${mem}M" -numa "node,nodeid=$n,memdev=m$n")
    done
    for ((s = 0; s < sockets; s++)); do
        for ((c = 0; c < cores; c++)); do
            args+=(-numa "cpu,node-id=$(((s * cores + c) * nodes / (sockets * cores))),socket-id=$s,core-id=$c")
        done
    done
    # DISTANCES: rows separated by '/', values by '+' (as on the kernel command line).
    local i=0 j row
    IFS=/ read -ra rows <<<"$distances"
    for row in "${rows[@]}"; do
        IFS=+ read -ra vals <<<"$row"
        for ((j = i + 1; j < ${#vals[@]}; j++)); do
            args+=(-numa "dist,src=$i,dst=$j,val=${vals[$j]}")
        done
        i=$((i + 1))
    done
    printf '%s\n' "${args[@]}"
}

# e2e_save_vcpus MONITOR: prints each vCPU's state and instruction pointer,
# twice, 2 s apart, asked of qemu's QMP socket MONITOR (`info cpus`, `info
# registers -a`): vCPUs at the same kernel address twice point at a kernel
# spinning there, vCPUs in the idle loop at a guest waiting on something.
e2e_save_vcpus() {
    python3 - "$1" <<'PY'
import json, re, socket, sys, time
monitor = sys.argv[1]
def ask(command):
    # qemu's QMP socket: the greeting, capabilities, then one HMP command.
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(monitor)
    f = s.makefile("rw")
    f.readline()
    for request in ({"execute": "qmp_capabilities"},
                    {"execute": "human-monitor-command",
                     "arguments": {"command-line": command}}):
        f.write(json.dumps(request) + "\n")
        f.flush()
        while True:
            answer = json.loads(f.readline())
            if "return" in answer or "error" in answer:
                break
    s.close()
    return answer.get("return", str(answer.get("error")))
for round in (1, 2):
    print(f"-- look {round}")
    print(ask("info cpus").strip())
    cpu = 0
    for rip in re.findall(r"[RE]IP=([0-9a-f]+)", ask("info registers -a")):
        print(f"vCPU {cpu}: IP {rip}")
        cpu += 1
    time.sleep(2)
PY
}

# e2e_report_vcpus MONITOR FILE TAG HEADER: HEADER and e2e_save_vcpus in
# FILE, and on stderr as `  TAG | ` lines (a run that removes its work
# directory, CI, keeps them).
e2e_report_vcpus() {
    {
        echo "$4"
        e2e_save_vcpus "$1"
    } >"$2" 2>&1
    sed "s/^/  $3 | /" "$2" >&2
}

# e2e_watch_silence LOG PID LIMIT: while qemu PID runs, stops it once LOG
# has not grown for LIMIT seconds, after writing LOG.stall: the vCPUs' state
# and instruction pointers from qemu's QMP socket LOG.monitor, twice.
e2e_watch_silence() {
    local log=$1 pid=$2 limit=$3 size=-1 now quiet=0
    while kill -0 "$pid" 2>/dev/null; do
        sleep 10
        now=$(stat -c %s "$log" 2>/dev/null || echo 0)
        if [ "$now" != "$size" ]; then
            size=$now quiet=0
            continue
        fi
        quiet=$((quiet + 10))
        [ "$quiet" -ge "$limit" ] || continue
        e2e_report_vcpus "$log.monitor" "$log.stall" stall \
            "guest console silent for $quiet s at $(date -u +%FT%TZ); qemu's vCPUs:"
        e2e_log "guest console silent for $quiet s: vCPUs saved in $log.stall, qemu stopped"
        kill "$pid" 2>/dev/null
        return
    done
}

# e2e_reached_init LOG PID LIMIT: waits until LOG has a line of the guest's
# /init (they all begin `E2E-`) (0), or qemu PID ended (0: its status
# tells), or LIMIT seconds passed (1). The kernel's own lines do not count:
# at PINION_E2E_LOGLEVEL=4 it prints warnings within its first half second
# (`RETBleed: WARNING: …` under TCG's Skylake-Server), and a guest that hung
# after them was taken for booted and left to the silence watch (CI,
# 2026-12-04: the cluster bed's pinion-smt, 15 minutes, the bed failed).
e2e_reached_init() {
    local log=$1 pid=$2 limit=$3 waited=0
    while [ "$waited" -lt "$limit" ]; do
        grep -q 'E2E-' "$log" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 1
        waited=$((waited + 1))
    done
    grep -q 'E2E-' "$log" 2>/dev/null
}

# e2e_tcg_threads QEMU_ARGS...: TCG's thread mode for a guest of the -smp
# in QEMU_ARGS. Multi-threaded TCG runs a host thread per vCPU: a guest with
# more than four vCPUs per host CPU (the 16-vCPU guest on a 2-core machine)
# then spins in kernel locks whose holder's thread the host does not run,
# and once stalled for over 10 minutes (soft lockups in a cpuset write) on
# a busy host. Single-threaded TCG runs the vCPUs in turn on one thread, where
# a lock holder always gets its turn; it took 198 s against 160 s for that
# guest here.
#
# Under multi-threaded TCG a vCPU can run a stale translation of kernel code
# another vCPU has just patched: trixie's 6.12 kernel died of it in CI twice
# ("Oops: int3", 2026-11-28, then 2026-11-29 in enqueue_entity), and a
# kubelet guest on /boot's 6.1 stalled whole (2026-12-01). The guests' /init
# now keeps the key behind the stall, and most likely the oopses too (CFS
# bandwidth, switched by every first and last CPU quota), from being
# switched (scripts/e2e/guest/init, the quota-churn scenario). Guests
# booting another kernel than /boot's (E2E_GUEST_KERNEL: trixie's 6.12)
# still run single-threaded: tried multi-threaded with the hold, the
# containerd guest once ended early with its console file gone, unexplained;
# when it passed, it saved about a minute (docs/testing.md).
# PINION_E2E_TCG_THREAD=single|multi overrides.
e2e_tcg_threads() {
    if [ -n "${PINION_E2E_TCG_THREAD:-}" ]; then
        echo "$PINION_E2E_TCG_THREAD"
        return
    fi
    if [ -n "${E2E_GUEST_KERNEL:-}" ] && [ "$E2E_GUEST_KERNEL" != "$(e2e_kernel)" ]; then
        echo single
        return
    fi
    local vcpus=0
    while [ $# -gt 0 ]; do
        if [ "$1" = -smp ] && [ $# -gt 1 ]; then
            vcpus=${2%%,*}
        fi
        shift
    done
    if [ "$vcpus" -gt $((4 * $(nproc))) ]; then echo single; else echo multi; fi
}

# e2e_run_guest LOG IMAGE TIMEOUT APPEND QEMU_ARGS...: boots the image and
# captures the serial console in LOG; returns when the guest powers off
# (qemu's status) or after TIMEOUT seconds. It returns 124 for a guest it
# stopped: at TIMEOUT, before its /init twice, or by the silence watch.
# E2E_INTERACTIVE=1 puts the console on the terminal.
# The kernel is E2E_GUEST_KERNEL when set (a shape's, e2e_shape_kernel),
# else e2e_kernel.
#
# A guest's init writes its first line within seconds of the boot. Under TCG
# a guest with many vCPUs on a loaded host has, rarely, hung before init and
# stayed silent until TIMEOUT: a guest whose /init wrote no line within
# PINION_E2E_BOOT_LIMIT seconds (default 180; the kernel's own lines before
# it do not count, e2e_reached_init) is stopped and booted once more, with a
# line in the log saying so, its console kept as LOG.noinitN and, when qemu
# has a monitor (PINION_E2E_SILENT_LIMIT), its vCPUs in LOG.bootN.
#
# Under multi-threaded TCG the guest boots with maxcpus=1 and its /init
# brings the other CPUs online first thing: the kernel's late initcalls
# patch code every idle vCPU runs (the __sched_clock_stable key), and with
# them up a guest hung before its /init, 2 boots in 30 on a loaded host
# (scripts/e2e/guest/init says more).
#
# Under multi-threaded TCG the guest kernel has, rarely, died of its own
# code patching: "Oops: int3" in a kernel function while a static key was
# switched, then "Kernel panic" (a vCPU ran a stale translation of the
# patched code; seen once in CI with the 6.12 kernel in the containerd
# guest). A guest whose console shows a kernel panic is booted once more,
# with a line in the log and the first console kept as LOG.panic; a second
# panic is the guest's result.
#
# PINION_E2E_LOGLEVEL (default 3) is the guest console's loglevel: 4 adds the
# kernel's errors — hung-task, RCU-stall and lockup reports among them.
# PINION_E2E_SILENT_LIMIT (seconds, default 0: off) stops a guest whose
# console stayed silent that long, after saving where its vCPUs were (qemu's
# QMP socket: each vCPU's instruction pointer twice, 2 s apart) in LOG.stall:
# a guest that stalled as a whole then tells a kernel spinning in one place
# from vCPUs idle in the halt loop. The guest boots with nokaslr, so the
# addresses are the kernel's own: /proc/kallsyms of the same kernel booted
# with nokaslr names them (Debian's System.map is a placeholder).
e2e_run_guest() {
    local log=$1 image=$2 limit=$3 append=$4
    shift 4
    local accel_args one_cpu=""
    if [ "$(e2e_accel)" = kvm ]; then
        accel_args=(-accel kvm -cpu host)
    else
        local threads
        threads=$(e2e_tcg_threads "$@")
        accel_args=(-accel "tcg,thread=$threads" -cpu Skylake-Server)
        # Multi-threaded TCG: the kernel's initcalls run on one CPU, the
        # guest's /init brings the others online (the hang it avoids is
        # told there).
        [ "$threads" = multi ] && one_cpu=maxcpus=1
    fi
    local common=(-nodefaults -no-user-config -display none -no-reboot
        -kernel "${E2E_GUEST_KERNEL:-$(e2e_kernel)}" -initrd "$image")
    if [ "${E2E_INTERACTIVE:-0}" = 1 ]; then
        # On the terminal, without `timeout` (which would keep qemu off the tty).
        qemu-system-x86_64 "${accel_args[@]}" "$@" "${common[@]}" -serial mon:stdio \
            -append "console=ttyS0 panic=-1 quiet loglevel=3 $one_cpu $append E2E_INTERACTIVE=1"
        return
    fi
    local boot_limit=${PINION_E2E_BOOT_LIMIT:-180} attempt pid
    local loglevel=${PINION_E2E_LOGLEVEL:-3} silent=${PINION_E2E_SILENT_LIMIT:-0}
    case $loglevel in [0-8]) ;; *) e2e_die "PINION_E2E_LOGLEVEL must be a console loglevel from 0 to 8, not '$loglevel'" ;; esac
    case $silent in '' | *[!0-9]*) e2e_die "PINION_E2E_SILENT_LIMIT must be a whole number of seconds, not '$silent'" ;; esac
    local watch_args=() kaslr=""
    if [ "$silent" -gt 0 ]; then
        watch_args=(-qmp "unix:$log.monitor,server=on,wait=off")
        kaslr=nokaslr
    fi
    for attempt in 1 2; do
        : >"$log"
        rm -f "$log.monitor" "$log.stall"
        timeout "$limit" qemu-system-x86_64 "${accel_args[@]}" "$@" "${common[@]}" "${watch_args[@]}" \
            -serial "file:$log" -append "console=ttyS0 panic=-1 quiet loglevel=$loglevel $kaslr $one_cpu $append" \
            2>"$log.qemu" &
        pid=$!
        if e2e_reached_init "$log" "$pid" "$boot_limit"; then
            local status=0 watcher=""
            if [ "$silent" -gt 0 ]; then
                e2e_watch_silence "$log" "$pid" "$silent" &
                watcher=$!
            fi
            wait "$pid" || status=$?
            [ -n "$watcher" ] && { kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null; }
            # qemu ends with 0 on the watch's SIGTERM: a stopped guest is
            # not one that powered off.
            [ -e "$log.stall" ] && status=124
            if [ "$attempt" = 1 ] && grep -q 'Kernel panic - not syncing' "$log"; then
                cp "$log" "$log.panic"
                e2e_log "guest boot $attempt: the guest kernel panicked ($(grep -m1 -o 'Oops: [^[]*\|Kernel panic - not syncing: .*' "$log" | head -1)), console kept in $log.panic; booted once more"
                continue
            fi
            return "$status"
        fi
        # Its console's last lines and, when qemu has a monitor
        # (PINION_E2E_SILENT_LIMIT), where its vCPUs were; on stderr too, as
        # a run that removes its work directory (CI) would lose them.
        cp "$log" "$log.noinit$attempt"
        tr -d '\r' <"$log" | tail -n 5 | cut -c1-200 | sed 's/^/  no init | /' >&2
        local where=""
        if [ -S "$log.monitor" ]; then
            e2e_report_vcpus "$log.monitor" "$log.boot$attempt" "no init" \
                "guest boot $attempt: no line of /init within $boot_limit s at $(date -u +%FT%TZ); qemu's vCPUs:"
            where="; vCPUs saved in $log.boot$attempt"
        fi
        kill "$pid" 2>/dev/null
        wait "$pid"
        e2e_log "guest boot $attempt: no line of /init on the console within $boot_limit s ($(e2e_accel); $(wc -l <"$log.noinit$attempt") kernel lines before, kept in $log.noinit$attempt$where), qemu stopped"
    done
    return 124
}
