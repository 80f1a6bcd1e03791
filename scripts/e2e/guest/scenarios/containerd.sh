# Pinion as the NRI plugin of a real containerd (1.7 from Debian), driven over
# CRI v1 by pinion-cri acting as kubelet. Runs on the host and in a guest
# (scripts/e2e-containerd.sh); needs containerd, containerd-shim-runc-v2 and
# ctr on PATH, E2E_RUNC (runc), E2E_IMAGES (pause.tar, busybox.tar: OCI
# archives) and pinion-cri ($PINION_CRI).
#
# With SMT the Guaranteed container asks for 2 CPUs and must get the two
# threads of one core; without SMT (the 2-CPU host) it asks for 1.

PINION_CRI=${PINION_CRI:-pinion-cri}
E2E_RUNC=${E2E_RUNC:-$(command -v runc)}
E2E_IMAGES=${E2E_IMAGES:-/e2e/images}
S=$E2E_STATE
CTRD_SOCK=$S/containerd.sock
NRI_SOCK=$S/nri.sock
POD_G=11111111-0000-4000-8000-00000000e2e1
POD_B=11111111-0000-4000-8000-00000000e2e2
POD_N=11111111-0000-4000-8000-00000000e2e3
POD_NG=11111111-0000-4000-8000-00000000e2e4
POD_R=11111111-0000-4000-8000-00000000e2e6
POD_L=11111111-0000-4000-8000-00000000e2e5
POD_P=11111111-0000-4000-8000-00000000e2e7
IMAGE=pinion.test/busybox:1
SLEEP="sleep 1000000"

cri() { "$PINION_CRI" --endpoint "$CTRD_SOCK" "$@"; }

# The root file system of an initramfs cannot be pivot_root'ed away from.
no_pivot=false
case $(awk '$2 == "/" { print $3; exit }' /proc/mounts) in
rootfs | ramfs | tmpfs) no_pivot=true ;;
esac
cat >"$S/containerd.toml" <<EOF
version = 2
root = "$S/root"
state = "$S/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.overlayfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$S/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "pinion.test/pause:1"
  disable_apparmor = true
  # Keeps oom_score_adj at or above containerd's own: a sandbox without
  # CAP_SYS_RESOURCE cannot lower it (kubelet asks -997 for Guaranteed).
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$E2E_RUNC"
        Root = "$S/runc"
        SystemdCgroup = false
        NoPivotRoot = $no_pivot
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$S/cni/bin"
    conf_dir = "$S/cni/conf"

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "$NRI_SOCK"
  plugin_path = "$S/nri-plugins"
  plugin_config_path = "$S/nri-conf"
  plugin_registration_timeout = "10s"
  plugin_request_timeout = "10s"
EOF
mkdir -p "$S/nri-plugins" "$S/nri-conf" "$S/cni/bin" "$S/cni/conf"

containerd_start() {
    containerd --config "$S/containerd.toml" >>"$S/containerd.log" 2>&1 &
    CTRD_PID=$!
    wait_for 120 cri version
}

containerd_stop() {
    kill -TERM "$CTRD_PID" 2>/dev/null
    wait "$CTRD_PID" 2>/dev/null
    return 0
}

# How many times the agent has synchronized with the runtime (its log).
synced() { grep -c 'nri synchronized' "$S/agent.log" 2>/dev/null || true; }
synced_more_than() { [ "$(synced)" -gt "$1" ]; }

# ctr_pid ID: the host pid of a container's process.
ctr_pid() { cri status "$1" | sed -n 's/.* pid=\([0-9]*\).*/\1/p'; }
ctr_state() { cri status "$1" | sed -n 's/^state=\([A-Z_]*\).*/\1/p'; }

# cfs_quota PID: the CFS quota of the process's cgroup (-1 = none).
cfs_quota() {
    if [ "$(cgroup_version)" = v2 ]; then
        q=$(cut -d' ' -f1 "$(cpuset_dir "$1")/cpu.max")
        [ "$q" = max ] && q=-1
        echo "$q"
    else
        path=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' "/proc/$1/cgroup")
        mount=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/self/mounts)
        cat "$mount$path/cpu.cfs_quota_us"
    fi
}

# What must not move: both containers' cpus, mems, quota and the checkpoint.
placements() {
    for c in "$G" "$B"; do
        pid=$(ctr_pid "$c")
        echo "$(proc_field "$pid" Cpus_allowed_list) $(proc_field "$pid" Mems_allowed_list) $(cfs_quota "$pid")"
    done
    durable_state
}

containerd_cleanup() {
    [ -n "${NIC_PID:-}" ] && kill -TERM "$NIC_PID" 2>/dev/null
    if [ -n "${CTRD_PID:-}" ] && kill -0 "$CTRD_PID" 2>/dev/null; then
        cri remove-all >/dev/null 2>&1
        containerd_stop
    fi
    scenario_cleanup
    # Mounts the runtime may have left (sandbox /dev/shm, task root file systems).
    awk -v s="$S/" 'index($2, s) == 1 { print $2 }' /proc/self/mounts | sort -r |
        while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    # The pod cgroups runc created under kubepods (kubelet's job on a node).
    for mnt in $(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts); do
        for uid in "$POD_G" "$POD_B" "$POD_N" "$POD_NG" "$POD_L" "$POD_R" "$POD_P"; do
            for d in "$mnt/kubepods/pod$uid" "$mnt/kubepods/burstable/pod$uid"; do
                [ -d "$d" ] && rmdir "$d" 2>/dev/null
            done
        done
        rmdir "$mnt/kubepods/burstable" "$mnt/kubepods" 2>/dev/null
    done
    [ -n "${E2E_CGROUP_ROOT:-}" ] && rmdir "$E2E_CGROUP_ROOT" 2>/dev/null
    return 0
}
trap containerd_cleanup EXIT

# --- the runtime -------------------------------------------------------------

if containerd_start; then
    version=$(cri version)
    pass "containerd answers CRI v1 ($version)"
    check_contains "containerd is 1.7" " 1.7." " $version"
else
    fail "containerd starts" "$(tail -5 "$S/containerd.log")"
    exit 0
fi
for image in pause busybox; do
    out=$(ctr --address "$CTRD_SOCK" -n k8s.io images import --snapshotter native \
        "$E2E_IMAGES/$image.tar" 2>&1)
    check_true "image $image imported" test $? -eq 0 || note "$out"
done

# A short reconcile period: a cpuset changed by hand is repaired within one.
RECONCILE_PERIOD=2
printf 'cpuManagerReconcilePeriod: %ss\n' "$RECONCILE_PERIOD" >>"$E2E_STATE/config.yaml"
set --
[ -n "${E2E_CGROUP_ROOT:-}" ] && set -- --cgroup-root "$E2E_CGROUP_ROOT"
if agent_start --nri-socket "$NRI_SOCK" "$@" && wait_for 60 synced_more_than 0; then
    pass "nri handshake: the agent registered and synchronized"
else
    fail "nri handshake: the agent registered and synchronized" "$(tail -5 "$S/agent.log")"
fi
check_contains "containerd names the plugin" '90-pinion' "$(grep -i 'nri\|plugin' "$S/containerd.log" | grep 90-pinion | head -1)"

all=$(cat /sys/devices/system/cpu/online)
threads=$(set -- $(cpu_siblings 0); echo $#)
want=$threads

# --- Burstable first: the whole shared pool ---------------------------------

# Later checks need both pods: stop at the first failure to create one.
BP=$(cri runp --pod-name burstable --pod-uid "$POD_B" --qos burstable 2>"$S/cri.err") &&
    B=$(cri create --pod-id "$BP" --pod-name burstable --pod-uid "$POD_B" --qos burstable \
        --name web --image "$IMAGE" --cpu-request 250m -- $SLEEP 2>"$S/cri.err") &&
    cri start "$B" 2>"$S/cri.err" || {
    fail "burstable pod and container run" "$(cat "$S/cri.err")"
    exit 0
}
check_eq "burstable container on every cpu" "$(cpus_expand "$all")" \
    "$(cpus_expand "$(proc_field "$(ctr_pid "$B")" Cpus_allowed_list)")"

# --- Guaranteed: whole core(s), its node's memory, no CFS quota --------------

GP=$(cri runp --pod-name guaranteed --pod-uid "$POD_G" --qos guaranteed 2>"$S/cri.err") || {
    fail "guaranteed pod runs" "$(cat "$S/cri.err")"
    exit 0
}
if G=$(cri create --pod-id "$GP" --pod-name guaranteed --pod-uid "$POD_G" --qos guaranteed \
    --name app --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi -- $SLEEP 2>"$S/create-g.err") &&
    cri start "$G"; then
    pid=$(ctr_pid "$G")
    cpus=$(proc_field "$pid" Cpus_allowed_list)
    check_eq "guaranteed container: $want exclusive cpu(s)" "$want" "$(cpus_count "$cpus")"
    if [ "$threads" -gt 1 ]; then
        check_true "guaranteed container on sibling threads of one core ($cpus)" is_sibling_group "$cpus"
    fi
    check_eq "guaranteed container off the reserved cpu" "" "$(cpus_intersect "$cpus" "$RESERVED")"
    check_eq "guaranteed container: memory nodes left to the runtime (every node)" "$(memory_nodes)" \
        "$(cpus_expand "$(proc_field "$pid" Mems_allowed_list)")"
    check_eq "guaranteed container: no cfs quota" -1 "$(cfs_quota "$pid")"
    check_eq "checkpoint holds the container" "$(cpus_expand "$cpus")" \
        "$(cpus_expand "$(durable_state | sed -n 's/.*"app":"\([0-9,-]*\)".*/\1/p')")"
    bpid=$(ctr_pid "$B")
    shrunk() { [ -z "$(cpus_intersect "$(proc_field "$bpid" Cpus_allowed_list)" "$cpus")" ]; }
    wait_for 60 shrunk || true
    check_eq "burstable container shrinks to the rest" \
        "$(cpus_expand "$(for c in $(cpus_expand "$all"); do case " $(cpus_expand "$cpus") " in *" $c "*) ;; *) echo "$c" ;; esac; done | tr '\n' ',')")" \
        "$(cpus_expand "$(proc_field "$(ctr_pid "$B")" Cpus_allowed_list)")"
else
    fail "guaranteed container runs" "$(cat "$S/create-g.err")"
    exit 0
fi

# --- Admission failure: kubelet's text through containerd --------------------

free=$(($(cpus_count "$all") - $(cpus_count "$RESERVED") - want))
err=$(cri create --pod-id "$GP" --pod-name guaranteed --pod-uid "$POD_G" --qos guaranteed \
    --name big --image "$IMAGE" --cpu-request "$((free + 1))" --memory-limit 64Mi -- $SLEEP 2>&1)
check_ne "a container asking for $((free + 1)) cpus is refused" 0 "$?"
check_contains "the refusal is ResourceExhausted" "code = ResourceExhausted" "$err"
check_contains "the refusal carries kubelet's text" \
    "container big: UnexpectedAdmissionError: Allocate failed due to not enough cpus available to satisfy request: requested=$((free + 1)), available=$free, which is unexpected" "$err"

# --- Restarts: nothing moves ---------------------------------------------------

before=$(placements)
n=$(synced)
agent_stop KILL
agent_start --nri-socket "$NRI_SOCK" "$@" && wait_for 60 synced_more_than "$n"
check_true "the restarted agent synchronized with containerd" synced_more_than "$n"
check_eq "agent SIGKILL + restart: nothing moved" "$before" "$(placements)"

n=$(synced)
gpid=$(ctr_pid "$G")
bpid=$(ctr_pid "$B")
containerd_stop
check_true "containers survive a containerd stop" kill -0 "$gpid" "$bpid"
containerd_start || fail "containerd restarts" "$(tail -5 "$S/containerd.log")"
wait_for 120 synced_more_than "$n" || true
check_true "the agent reconnected and synchronized after containerd restarted" synced_more_than "$n"
check_eq "containerd restart: nothing moved" "$before" "$(placements)"
check_eq "guaranteed container still running" CONTAINER_RUNNING "$(ctr_state "$G")"

# --- Drift: a cpuset changed by hand is repaired by the reconcile loop --------
#
# The agent reads the container's cgroup (NRI's linux.cgroups_path) at each
# reconcile pass and sends its placement again in an UpdateContainers;
# containerd applies it with runc update. Allowed: one reconcile period, plus
# what containerd and runc take to apply the update (seconds in a TCG guest).

gpid=$(ctr_pid "$G")
gcpus=$(proc_field "$gpid" Cpus_allowed_list)
gdir=$(cpuset_dir "$gpid")
if echo "$all" >"$gdir/cpuset.cpus" 2>"$S/drift.err"; then
    changed=$(date +%s)
    check_eq "drift: the guaranteed container's cpuset was changed by hand" "$(cpus_expand "$all")" \
        "$(cpus_expand "$(cat "$gdir/cpuset.cpus")")"
    repaired() { [ "$(cpus_expand "$(cat "$gdir/cpuset.cpus")")" = "$(cpus_expand "$gcpus")" ]; }
    wait_for $((RECONCILE_PERIOD + 10)) repaired || true
    note "drift repaired after $(($(date +%s) - changed)) s (reconcile period ${RECONCILE_PERIOD} s)"
    check_eq "drift: the reconcile loop gave the container its exclusive cpus back" \
        "$(cpus_expand "$gcpus")" "$(cpus_expand "$(cat "$gdir/cpuset.cpus")")"
    check_eq "drift: the process runs on them again" "$(cpus_expand "$gcpus")" \
        "$(cpus_expand "$(proc_field "$gpid" Cpus_allowed_list)")"
    check_contains "drift: the agent logged the foreign write and its repair" "writing Pinion's value back" \
        "$(grep 'foreign write: ' "$S/agent.log" | tail -1)"
else
    fail "drift: the guaranteed container's cpuset can be changed by hand" "$(cat "$S/drift.err")"
fi

# --- A pod recovered after containerd's restart ------------------------------
#
# Its container restarts on the same cpus (held between the two, as kubelet
# keeps an active pod's cpus; issue 28 item 3). containerd 1.7 never relays
# the stop of a pod it recovered after its own restart: the reconcile pass
# sees the pod's sandbox cgroup gone and releases what was held.

cri stop "$G" && cri rm "$G" || fail "guaranteed container removed" "CRI stop/remove failed"
check_eq "recovered pod: a stopped container's cpus stay held while its pod runs" "$(cpus_expand "$gcpus")" \
    "$(cpus_expand "$(durable_state | sed -n 's/.*"app":"\([0-9,-]*\)".*/\1/p')")"
if G=$(cri create --pod-id "$GP" --pod-name guaranteed --pod-uid "$POD_G" --qos guaranteed \
    --name app --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi -- $SLEEP 2>"$S/cri.err") &&
    cri start "$G" 2>"$S/cri.err"; then
    check_eq "recovered pod: the restarted container runs on the same cpus" "$(cpus_expand "$gcpus")" \
        "$(cpus_expand "$(proc_field "$(ctr_pid "$G")" Cpus_allowed_list)")"
    cri stop "$G" && cri rm "$G" || fail "recovered pod: the container stops" "CRI stop/remove failed"
else
    fail "recovered pod: the restarted container runs" "$(cat "$S/cri.err")"
fi

# --- Removal: the shared pool grows back ---------------------------------------

stopped_at=$(date +%s)
cri stopp "$GP" && cri rmp "$GP" || fail "guaranteed pod removed" "CRI stop/remove failed"
grown() { [ "$(cpus_expand "$(proc_field "$bpid" Cpus_allowed_list)")" = "$(cpus_expand "$all")" ]; }
wait_for 60 grown || true
check_eq "burstable container back on every cpu" "$(cpus_expand "$all")" \
    "$(cpus_expand "$(proc_field "$bpid" Cpus_allowed_list)")"
note "released $(($(date +%s) - stopped_at)) s after the pod's unrelayed stop (reconcile period ${RECONCILE_PERIOD} s)"
check_eq "checkpoint released the container" "" \
    "$(durable_state | sed -n 's/.*"app":"\([0-9,-]*\)".*/\1/p')"

# --- Pod churn from parallel clients: containerd's NRI does not deadlock ------
#
# containerd 1.7 takes its two NRI locks in opposite orders for an event and
# for a plugin's unsolicited UpdateContainers (containerd/containerd#13733):
# an update that meets an event starting at that moment wedges containerd's
# NRI for good (no pod starts or stops until containerd restarts). Guaranteed
# pods started and removed by parallel clients, as a busy kubelet does, while
# two busy loops load the CPUs (they widen the race's window, as a loaded node
# does): before the fix the shared pool's updates went out unsolicited and
# this wedged containerd on the 2-CPU host within a dozen pods. Every CRI call
# must return and no UpdateContainers may go unanswered.
#
# E2E_CHURN=CLIENTSxROUNDSxBURNERS sets its size (scripts/e2e-containerd.sh):
# 6x12x2 on the host; 3x2x0 in the TCG guest, a slow node where every CRI
# call takes seconds and kubelet's calls for one pod come further apart than
# the agent's 2 s of quiet (there the full churn outlasts the guest's time
# budget). On the slow node the shared pool's growth after a pod's removal
# once went out unsolicited between two calls and wedged containerd.

churn_size=${E2E_CHURN:-}
CHURN_CLIENTS=${churn_size%%x*} churn_rest=${churn_size#*x}
CHURN_ROUNDS=${churn_rest%%x*} CHURN_BURNERS=${churn_rest#*x}
case "$CHURN_CLIENTS:$CHURN_ROUNDS:$CHURN_BURNERS" in
*[!0-9:]* | :* | *::* | *:) churn_size= ;;
esac
if [ -z "$churn_size" ]; then
    skip "pod churn from parallel clients" "E2E_CHURN is not CLIENTSxROUNDSxBURNERS: '${E2E_CHURN:-}'"
else
: >"$S/churn.hung"
# A call that pinion-cri gives up on (its own deadline) or that outlives
# 120 s hung.
churn_call() {
    local err=$S/churn-$client.err rc
    timeout 120 "$PINION_CRI" --endpoint "$CTRD_SOCK" "$@" 2>"$err"
    rc=$?
    if [ "$rc" -eq 124 ] || grep -q 'Timeout expired\|DeadlineExceeded' "$err"; then
        echo "client $client round $round: $1 hung $(head -c 200 "$err")" >>"$S/churn.hung"
    fi
    return "$rc"
}
churn() {
    local client=$1 round uid p c
    for round in $(seq 1 "$CHURN_ROUNDS"); do
        uid=$(printf '11111111-0000-4000-8000-0000000c%02x%02x' "$client" "$round")
        p=$(churn_call runp --pod-name "churn-$client-$round" --pod-uid "$uid" --qos guaranteed) || return
        # A refusal (no free cpu while another client's pod holds it) is fine.
        if c=$(churn_call create --pod-id "$p" --pod-name "churn-$client-$round" --pod-uid "$uid" \
            --qos guaranteed --name app --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi \
            -- $SLEEP); then
            churn_call start "$c" >/dev/null || return
            churn_call stop "$c" >/dev/null || return
        elif [ -s "$S/churn.hung" ]; then
            return
        fi
        churn_call stopp "$p" >/dev/null || return
        if [ -n "$c" ]; then churn_call rm "$c" >/dev/null || return; fi
        churn_call rmp "$p" >/dev/null || return
    done
}
churn_started=$(date +%s)
# Unsolicited UpdateContainers, each a chance to meet an event (containerd
# logs one line per request).
unsolicited() { grep -c 'requested container updates' "$S/containerd.log" 2>/dev/null || echo 0; }
unsolicited_before=$(unsolicited)
agent_lines_before=$(wc -l <"$S/agent.log")
burners=""
for _ in $(seq 1 "$CHURN_BURNERS"); do
    (while :; do :; done) &
    burners="$burners $!"
done
churn_pids=""
for client in $(seq 1 "$CHURN_CLIENTS"); do
    churn "$client" &
    churn_pids="$churn_pids $!"
done
for pid in $churn_pids; do wait "$pid"; done
if [ -n "$burners" ]; then
    kill $burners 2>/dev/null
    wait $burners 2>/dev/null
fi
check_eq "pod churn ($CHURN_CLIENTS clients x $CHURN_ROUNDS guaranteed pods, $CHURN_BURNERS busy loops): no CRI call hung" "" "$(cat "$S/churn.hung")"
check_eq "pod churn: every UpdateContainers was answered" 0 "$(grep -c 'UpdateContainers got no reply' "$S/agent.log")"
note "pod churn took $(($(date +%s) - churn_started)) s; $(($(unsolicited) - unsolicited_before)) unsolicited updates during it"
# What the agent sent unsolicited, and what it did just before.
tail -n "+$((agent_lines_before + 1))" "$S/agent.log" |
    grep -B6 'sending queued container updates unsolicited' | cut -c1-240 |
    while IFS= read -r line; do note "pod churn: agent: $line"; done
wait_for 60 grown || true
check_eq "pod churn: the burstable container is back on every cpu" "$(cpus_expand "$all")" \
    "$(cpus_expand "$(proc_field "$bpid" Cpus_allowed_list)")"
check_eq "pod churn: the checkpoint holds none of the churned pods" "" \
    "$(durable_state | grep -o '11111111-0000-4000-8000-0000000c[0-9a-f]*' | head -3)"
fi

# --- A container restarted in its pod keeps its cpus --------------------------
#
# As kubelet restarts a container that ended (a new container of the same
# name in the same pod): its cpus stay held between the two, the new one
# gets them again, and the pod's stop gives them back.

if RP=$(cri runp --pod-name restart --pod-uid "$POD_R" --qos guaranteed 2>"$S/cri.err") &&
    R=$(cri create --pod-id "$RP" --pod-name restart --pod-uid "$POD_R" --qos guaranteed \
        --name again --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi -- $SLEEP 2>"$S/cri.err") &&
    cri start "$R" 2>"$S/cri.err"; then
    rcpus=$(proc_field "$(ctr_pid "$R")" Cpus_allowed_list)
    cri stop "$R" && cri rm "$R" || fail "restart: the container stops" "CRI stop/remove failed"
    check_eq "restart: a stopped container's cpus stay held while its pod runs" "$(cpus_expand "$rcpus")" \
        "$(cpus_expand "$(durable_state | sed -n 's/.*"again":"\([0-9,-]*\)".*/\1/p')")"
    if R=$(cri create --pod-id "$RP" --pod-name restart --pod-uid "$POD_R" --qos guaranteed \
        --name again --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi -- $SLEEP 2>"$S/cri.err") &&
        cri start "$R" 2>"$S/cri.err"; then
        check_eq "restart: the new container runs on the same cpus" "$(cpus_expand "$rcpus")" \
            "$(cpus_expand "$(proc_field "$(ctr_pid "$R")" Cpus_allowed_list)")"
    else
        fail "restart: the new container runs" "$(cat "$S/cri.err")"
    fi
    cri stop "$R" && cri rm "$R" && cri stopp "$RP" && cri rmp "$RP" ||
        fail "restart: pod removed" "CRI stop/remove failed"
    check_eq "restart: the pod's stop released its cpus" "" \
        "$(durable_state | sed -n 's/.*"again":"\([0-9,-]*\)".*/\1/p')"
else
    fail "restart: a guaranteed pod runs" "$(cat "$S/cri.err")"
fi

# --- A Guaranteed container created while the agent was stopped ---------------
#
# containerd creates it without the plugin (fail-open): it runs on every cpu.
# The agent's next Synchronize admits it and gives it exclusive cpus by an
# update, as kubelet's reconcile would; the shared pool shrinks around them.

n=$(synced)
agent_stop TERM
if LP=$(cri runp --pod-name late --pod-uid "$POD_L" --qos guaranteed 2>"$S/cri.err") &&
    L=$(cri create --pod-id "$LP" --pod-name late --pod-uid "$POD_L" --qos guaranteed \
        --name late --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi -- $SLEEP 2>"$S/cri.err") &&
    cri start "$L" 2>"$S/cri.err"; then
    lpid=$(ctr_pid "$L")
    check_eq "late: created while the agent was stopped, it runs on every cpu" "$(cpus_expand "$all")" \
        "$(cpus_expand "$(proc_field "$lpid" Cpus_allowed_list)")"
    agent_start --nri-socket "$NRI_SOCK" "$@" && wait_for 60 synced_more_than "$n"
    check_true "late: the restarted agent synchronized" synced_more_than "$n"
    pinned() { [ "$(cpus_count "$(proc_field "$lpid" Cpus_allowed_list)")" = "$want" ]; }
    wait_for 60 pinned || true
    lcpus=$(proc_field "$lpid" Cpus_allowed_list)
    check_eq "late: admitted at synchronize with $want exclusive cpu(s)" "$want" "$(cpus_count "$lcpus")"
    if [ "$threads" -gt 1 ]; then
        check_true "late: on sibling threads of one core ($lcpus)" is_sibling_group "$lcpus"
    fi
    check_eq "late: off the reserved cpu" "" "$(cpus_intersect "$lcpus" "$RESERVED")"
    check_eq "late: no cfs quota" -1 "$(cfs_quota "$lpid")"
    check_eq "late: the checkpoint holds it" "$(cpus_expand "$lcpus")" \
        "$(cpus_expand "$(durable_state | sed -n 's/.*"late":"\([0-9,-]*\)".*/\1/p')")"
    apart() { [ -z "$(cpus_intersect "$(proc_field "$bpid" Cpus_allowed_list)" "$lcpus")" ]; }
    wait_for 60 apart || true
    check_eq "late: the burstable container left its cpus" "" \
        "$(cpus_intersect "$(proc_field "$bpid" Cpus_allowed_list)" "$lcpus")"
    cri stop "$L" && cri rm "$L" && cri stopp "$LP" && cri rmp "$LP" ||
        fail "late pod removed" "CRI stop/remove failed"
    wait_for 60 grown || true
    check_eq "late: the burstable container back on every cpu" "$(cpus_expand "$all")" \
        "$(cpus_expand "$(proc_field "$bpid" Cpus_allowed_list)")"
else
    fail "late: a guaranteed pod created while the agent was stopped runs" "$(cat "$S/cri.err")"
    agent_start --nri-socket "$NRI_SOCK" "$@" && wait_for 60 synced_more_than "$n"
fi

# --- Exclusive CPUs as an isolated cpuset partition ----------------------------
#
# The agent restarts with `exclusiveCpus.partition: isolated` (from here on).
# A Guaranteed container's cgroup (NRI's linux.cgroups_path) becomes an
# isolated remote partition once containerd created its task (NRI
# StartContainer): it reads `isolated`, its CPUs are listed in the root's
# cpuset.cpus.isolated and are out of the burstable container's effective
# cpuset; its stop takes the partition apart: the pod's cgroup claims
# nothing any more, and kubepods claims what an administrator listed there
# before (every CPU but the first, written here before the pod), as it did
# before Pinion came. A kernel without cpuset.cpus.exclusive (before 6.7)
# or cgroup v1: the container runs all the same and `pinion ps` marks the
# fallback.

printf 'exclusiveCpus:\n  partition: isolated\n' >>"$E2E_STATE/config.yaml"
n=$(synced)
agent_stop TERM
agent_start --nri-socket "$NRI_SOCK" "$@" && wait_for 60 synced_more_than "$n"
check_true "partition: the agent restarts with exclusiveCpus.partition isolated" synced_more_than "$n"
root_isolated=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)/cpuset.cpus.isolated
kubepods=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)/kubepods
kubepods_was=
admin_claim=
if [ "$(cgroup_version)" = v2 ] && [ -f "$kubepods/cpuset.cpus.exclusive" ]; then
    kubepods_was=$(cat "$kubepods/cpuset.cpus.exclusive")
    admin_claim=$(cpus_expand "$all" | cut -d' ' -f2- | tr ' ' ',')
    echo "$admin_claim" >"$kubepods/cpuset.cpus.exclusive" ||
        fail "partition: an administrator's claim on kubepods ($admin_claim) is written" "refused"
fi
if PP=$(cri runp --pod-name isolated --pod-uid "$POD_P" --qos guaranteed 2>"$S/cri.err") &&
    P=$(cri create --pod-id "$PP" --pod-name isolated --pod-uid "$POD_P" --qos guaranteed \
        --name solo --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi -- $SLEEP 2>"$S/cri.err") &&
    cri start "$P" 2>"$S/cri.err"; then
    ppid=$(ctr_pid "$P")
    pcpus=$(proc_field "$ppid" Cpus_allowed_list)
    pdir=$(cpuset_dir "$ppid")
    out=$(pinion_ps)
    check_eq "partition: the guaranteed container holds $want exclusive cpu(s)" "$want" "$(cpus_count "$pcpus")"
    if [ "$(cgroup_version)" = v2 ] && [ -f "$pdir/cpuset.cpus.exclusive" ]; then
        check_eq "partition: the guaranteed container's cgroup reads isolated" isolated \
            "$(cat "$pdir/cpuset.cpus.partition")"
        echo "ISOLATED with the container: '$(cat "$root_isolated")' (its cpus $pcpus)"
        check_true "partition: the root's cpuset.cpus.isolated lists its cpus ($pcpus)" \
            cpus_subset "$pcpus" "$(cat "$root_isolated")"
        check_eq "partition: the burstable container's effective cpuset excludes them" "" \
            "$(cpus_intersect "$(cat "$(cpuset_dir "$bpid")/cpuset.cpus.effective")" "$pcpus")"
        check_contains "partition: pinion ps marks it [isolated]" "[isolated]" "$out"
        poddir=$(dirname "$pdir")
        cri stop "$P" && cri rm "$P" && cri stopp "$PP" && cri rmp "$PP" ||
            fail "partition: pod removed" "CRI stop/remove failed"
        echo "ISOLATED after the container: '$(cat "$root_isolated")'"
        check_eq "partition: after its removal cpuset.cpus.isolated no longer lists its cpus" "" \
            "$(cpus_intersect "$(cat "$root_isolated")" "$pcpus")"
        if [ -d "$poddir" ]; then
            check_eq "partition: the pod's cgroup gave its cpus back" "" \
                "$(cpus_intersect "$(cat "$poddir/cpuset.cpus.exclusive")" "$pcpus")"
        fi
        check_eq "partition: kubepods' cpuset.cpus.exclusive is the administrator's claim again ($admin_claim; cpus $pcpus)" \
            "$(cpus_expand "$admin_claim")" "$(cpus_expand "$(cat "$kubepods/cpuset.cpus.exclusive")")"
    else
        check_contains "partition: without cpuset.cpus.exclusive pinion ps marks the fallback" "[member!]" "$out"
        cri stop "$P" && cri rm "$P" && cri stopp "$PP" && cri rmp "$PP" ||
            fail "partition: pod removed" "CRI stop/remove failed"
    fi
    [ -n "$admin_claim" ] && printf '%s\n' "$kubepods_was" >"$kubepods/cpuset.cpus.exclusive"
    wait_for 60 grown || true
    check_eq "partition: the burstable container back on every cpu" "$(cpus_expand "$all")" \
        "$(cpus_expand "$(proc_field "$bpid" Cpus_allowed_list)")"
else
    fail "partition: a guaranteed pod runs" "$(cat "$S/cri.err")"
fi

# --- A resource plugin: Pinion's NIC plugin as its own process -----------------
#
# The agent restarts with the QoS Resource Manager on and the Topology
# Manager's best-effort policy (under `none`, the default, no plugin is asked
# for hints, so nothing aligns CPUs to a NIC); `pinion plugin serve nic`
# registers through the watched directory; a pod asking for NIC bandwidth
# (pinion.dev/requests) gets the plugin's environment variables through NRI,
# and a Guaranteed one with whole CPUs gets them on the NIC's NUMA node: the
# plugin's hints prefer that node, the CPU manager's prefer every node that
# can hold the CPUs, the merge keeps the NIC's. Needs a NIC with a device
# (not virtual): the guest has one on node $E2E_NIC_NODE (a virtio-net
# function behind a PCI expander bridge of that node, no network backend,
# link down); on the host it is whatever the machine has.

nic=""
for dev in /sys/class/net/*; do
    [ -e "$dev/device" ] && { nic=$(basename "$dev"); break; }
done

# nic_node NAME: the NIC's NUMA node as the plugin reads it: device/numa_node,
# else the nearest ancestor's (3 levels at most, inside /sys); -1 = none.
nic_node() {
    d=$(readlink -f "/sys/class/net/$1/device")
    hops=0
    while [ -n "$d" ] && [ "$hops" -le 3 ]; do
        if [ -f "$d/numa_node" ]; then
            cat "$d/numa_node"
            return
        fi
        d=$(dirname "$d")
        case $d in /sys/?*) ;; *) break ;; esac
        hops=$((hops + 1))
    done
    echo -1
}

# env_of CONTAINER NAME: a variable of the container's process environment.
env_of() { tr '\0' '\n' <"/proc/$(ctr_pid "$1")/environ" | sed -n "s/^$2=//p"; }
# released POD: the NIC plugin's state no longer names the pod.
released() { ! grep -q "$1" "$S/nic-plugin/"*.json; }
NIC_REQUEST='pinion.dev/requests={"net":{"resource.katalyst.kubewharf.io/net_bandwidth":"100"}}'

if [ -z "$nic" ] && [ -n "${E2E_NIC_NODE:-}" ]; then
    fail "a resource plugin sets envs through NRI" \
        "the guest was given a NIC on node $E2E_NIC_NODE but has no interface with a device: $(ls /sys/class/net | tr '\n' ' ')"
elif [ -z "$nic" ]; then
    skip "a resource plugin sets envs through NRI" "no NIC with a device on this machine"
else
    node=$(nic_node "$nic")
    note "NIC $nic: device $(readlink -f "/sys/class/net/$nic/device"), numa node $node"
    if [ -n "${E2E_NIC_NODE:-}" ]; then
        check_eq "the guest's NIC $nic is on numa node $E2E_NIC_NODE (sysfs)" "$E2E_NIC_NODE" "$node"
    fi
    printf 'topologyManagerPolicy: best-effort\nqosResourceManager:\n  enabled: true\n  reconcilePeriod: 1s\n' \
        >>"$E2E_STATE/config.yaml"
    n=$(synced)
    agent_stop TERM
    agent_start --nri-socket "$NRI_SOCK" "$@" && wait_for 60 synced_more_than "$n"
    check_true "the agent restarts with the QoS Resource Manager on" synced_more_than "$n"
    "$PINION" plugin serve nic --socket-dir "$E2E_STATE/state/plugins_registry" \
        --state-dir "$S/nic-plugin" >>"$S/nic-plugin.log" 2>&1 &
    NIC_PID=$!
    nic_active() { "$PINION" plugins --socket "$SOCK" | grep net_bandwidth | grep -q active; }
    wait_for 60 nic_active || true
    check_true "pinion plugin serve nic registered with the agent" nic_active
    v4=$(ip -4 -o addr show dev "$nic" 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
    NP=$(cri runp --pod-name nic-user --pod-uid "$POD_N" --qos burstable \
        --pod-annotation "$NIC_REQUEST" 2>"$S/cri.err") &&
        N=$(cri create --pod-id "$NP" --pod-name nic-user --pod-uid "$POD_N" --qos burstable \
            --name net --image "$IMAGE" --cpu-request 100m -- $SLEEP 2>"$S/cri.err") &&
        cri start "$N" 2>"$S/cri.err"
    if [ $? -eq 0 ]; then
        check_eq "the plugin's AFFINITY_NIC_NAME reaches the container" "$nic" "$(env_of "$N" AFFINITY_NIC_NAME)"
        if [ -n "$v4" ]; then
            check_eq "the plugin's AFFINITY_NIC_ADDR_IPV4 is the NIC's address" "$v4" "$(env_of "$N" AFFINITY_NIC_ADDR_IPV4)"
        fi
        check_contains "the plugin holds the pod" "$POD_N" "$(cat "$S/nic-plugin/"*.json 2>/dev/null)"
        cri stop "$N" && cri rm "$N" && cri stopp "$NP" && cri rmp "$NP" ||
            fail "nic pod removed" "CRI stop/remove failed"
        wait_for 60 released "$POD_N" || true
        check_true "the plugin heard RemovePod when the pod went" released "$POD_N"
    else
        fail "a pod asking for NIC bandwidth runs" "$(cat "$S/cri.err")"
    fi

    # A Guaranteed pod with whole CPUs and NIC bandwidth: its CPUs and memory
    # follow the NIC's node. A NIC without a node (-1) counts for every
    # node: on a machine of one node that is node 0, on more nothing says
    # which.
    nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
    want_node=$node
    what="the nic's numa node $node"
    if [ "$node" = -1 ] && [ "$nodes" -le 1 ]; then
        want_node=0 what="the only numa node (the nic has none)"
    fi
    GNP=$(cri runp --pod-name nic-guaranteed --pod-uid "$POD_NG" --qos guaranteed \
        --pod-annotation "$NIC_REQUEST" 2>"$S/cri.err") &&
        GN=$(cri create --pod-id "$GNP" --pod-name nic-guaranteed --pod-uid "$POD_NG" --qos guaranteed \
            --name net --image "$IMAGE" --cpu-request "$want" --memory-limit 64Mi -- $SLEEP 2>"$S/cri.err") &&
        cri start "$GN" 2>"$S/cri.err"
    if [ $? -eq 0 ]; then
        pid=$(ctr_pid "$GN")
        cpus=$(proc_field "$pid" Cpus_allowed_list)
        check_eq "guaranteed pod with nic bandwidth: the plugin's AFFINITY_NIC_NAME reaches it" "$nic" "$(env_of "$GN" AFFINITY_NIC_NAME)"
        check_eq "guaranteed pod with nic bandwidth: $want exclusive cpu(s)" "$want" "$(cpus_count "$cpus")"
        if [ "$want_node" = -1 ]; then
            skip "guaranteed pod with nic bandwidth: cpus on the nic's numa node" \
                "the NIC $nic has no numa node (numa_node -1) on a machine of $nodes nodes"
        else
            check_eq "guaranteed pod with nic bandwidth: cpus ($cpus) on $what" "$want_node" "$(nodes_of_cpus "$cpus")"
            check_eq "guaranteed pod with nic bandwidth: memory nodes left to the runtime (every node)" \
                "$(memory_nodes)" "$(cpus_expand "$(proc_field "$pid" Mems_allowed_list)")"
        fi
        cri stop "$GN" && cri rm "$GN" && cri stopp "$GNP" && cri rmp "$GNP" ||
            fail "guaranteed nic pod removed" "CRI stop/remove failed"
        wait_for 60 released "$POD_NG" || true
        check_true "the plugin heard RemovePod when the guaranteed pod went" released "$POD_NG"
    else
        fail "a guaranteed pod asking for NIC bandwidth runs" "$(cat "$S/cri.err")"
    fi
    kill -TERM "$NIC_PID" 2>/dev/null
    wait "$NIC_PID" 2>/dev/null
    check_true "the plugin's socket goes with it" test ! -e "$E2E_STATE/state/plugins_registry/pinion-nic-plugin.sock"
fi
