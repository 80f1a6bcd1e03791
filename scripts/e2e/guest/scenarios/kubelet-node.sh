# A real Kubernetes node: upstream kubelet (standalone: static pods from a
# manifest directory, no API server) on a real containerd, with Pinion as
# containerd's NRI plugin (scripts/e2e-kubelet.sh). Sourced by the scenarios
# kubelet-containerd1.sh and kubelet-containerd2.sh after they set CTRD_MAJOR
# (1 or 2); not a scenario of its own. Needs in the guest: kubelet and
# podresources-client (/usr/local/bin), containerd, its shim and ctr under
# /opt/containerd$CTRD_MAJOR/bin, runc, E2E_IMAGES (pause.tar, busybox.tar).
#
# The node: reservedSystemCPUs "0-1" (one whole core) with the
# strict-cpu-reservation option, the same in kubelet's and in Pinion's
# configuration. The same pod sequence runs twice in the same guest: once
# with kubelet's own static policy deciding, once with kubelet at `none` and
# Pinion deciding; in between, the node is migrated from the first to the
# second as docs/deployment.md says, with the pods running.

CTRD_BIN=/opt/containerd$CTRD_MAJOR/bin
export PATH="$CTRD_BIN:$PATH"
E2E_RUNC=${E2E_RUNC:-$(command -v runc)}
E2E_IMAGES=${E2E_IMAGES:-/e2e/images}
S=$E2E_STATE
CTRD_SOCK=$S/containerd.sock
NRI_SOCK=$S/nri.sock
MANIFESTS=$S/manifests
OUT=$S/pods  # ($S/out is the scenario's own output)
KROOT=$S/kubelet
PR_SOCK=$S/pod-resources/pinion.sock
RESERVED_CPUS=0-1
# The guest NIC's address (its /init), or the first non-loopback IPv4 one.
NODE_IP=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
IMAGE=pinion.test/busybox:1
mkdir -p "$MANIFESTS" "$OUT" "$KROOT" "$S/nri-plugins" "$S/nri-conf" "$S/pod-resources"

# The root file system of an initramfs cannot be pivot_root'ed away from.
no_pivot=false
case $(awk '$2 == "/" { print $3; exit }' /proc/mounts) in
rootfs | ramfs | tmpfs) no_pivot=true ;;
esac

# containerd_config NRI(true|false): containerd's configuration, version 2
# for containerd 1.7, version 3 for 2.x (the CRI plugin split into images
# and runtime); NRI on or off (1.7's default is off, 2.x's on).
containerd_config() {
    nri_disable=true
    [ "$1" = true ] && nri_disable=false
    if [ "$CTRD_MAJOR" = 1 ]; then
        cat <<EOF
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
  disable = $nri_disable
  disable_connections = false
  socket_path = "$NRI_SOCK"
  plugin_path = "$S/nri-plugins"
  plugin_config_path = "$S/nri-conf"
  plugin_registration_timeout = "10s"
  plugin_request_timeout = "10s"
EOF
    else
        cat <<EOF
version = 3
root = "$S/root"
state = "$S/state"
disabled_plugins = ["io.containerd.snapshotter.v1.overlayfs", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "$S/opt"

# The transfer service unpacks for overlayfs unless told otherwise; with
# overlayfs off it fails to load, and the CRI image service and the pod
# sandbox controller with it ("unknown service runtime.v1.RuntimeService").
[plugins.'io.containerd.transfer.v1.local']
  [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
    platform = "linux/amd64"
    snapshotter = "native"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "pinion.test/pause:1"

[plugins.'io.containerd.cri.v1.runtime']
  disable_apparmor = true
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      snapshotter = "native"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$E2E_RUNC"
        Root = "$S/runc"
        SystemdCgroup = false
        NoPivotRoot = $no_pivot
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$S/cni/bin"]
    conf_dir = "$S/cni/conf"

[plugins.'io.containerd.nri.v1.nri']
  disable = $nri_disable
  disable_connections = false
  socket_path = "$NRI_SOCK"
  plugin_path = "$S/nri-plugins"
  plugin_config_path = "$S/nri-conf"
  plugin_registration_timeout = "10s"
  plugin_request_timeout = "10s"
EOF
    fi
}
mkdir -p "$S/cni/bin" "$S/cni/conf"

containerd_start() {
    containerd_config "$1" >"$S/containerd.toml"
    containerd --config "$S/containerd.toml" >>"$S/containerd.log" 2>&1 &
    CTRD_PID=$!
    wait_for 120 ctr --address "$CTRD_SOCK" version
}

containerd_stop() {
    kill -TERM "$CTRD_PID" 2>/dev/null
    wait "$CTRD_PID" 2>/dev/null
    return 0
}

# kubelet_config POLICY [noquota]: a standalone kubelet (no kubeconfig:
# static pods only), cgroupfs like containerd's runc, the node's reservation
# and option; `noquota` (the latency diagnostic only): cpuCFSQuota false,
# no CFS quota on any pod, sandbox or container.
kubelet_config() {
    cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
enableServer: false
staticPodPath: $MANIFESTS
fileCheckFrequency: 1s
syncFrequency: 5s
containerRuntimeEndpoint: unix://$CTRD_SOCK
cgroupDriver: cgroupfs
failSwapOn: false
localStorageCapacityIsolation: false
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
  imagefs.inodesFree: "0%"
cpuManagerPolicy: $1
cpuManagerReconcilePeriod: 2s
reservedSystemCPUs: "$RESERVED_CPUS"
EOF
    if [ "$1" = static ]; then
        printf 'cpuManagerPolicyOptions:\n  strict-cpu-reservation: "true"\n'
    fi
    if [ "${2:-}" = noquota ]; then
        echo "cpuCFSQuota: false"
    fi
}

# kubelet_start POLICY [noquota]: kubelet started with kubelet_config's.
kubelet_start() {
    kubelet_config "$1" "${2:-}" >"$S/kubelet.yaml"
    KUBELET_POLICY=$1
    kubelet --config "$S/kubelet.yaml" --root-dir "$KROOT" --hostname-override e2e --node-ip "$NODE_IP" --v=2 \
        >>"$S/kubelet.log" 2>&1 &
    KUBELET_PID=$!
    if wait_for 120 wget -q -O /dev/null http://127.0.0.1:10248/healthz; then
        note "kubelet ($1) healthy"
        return 0
    fi
    grep '^E' "$S/kubelet.log" | tail -n 8 | cut -c1-400 | sed 's/^/  kubelet| /'
    return 1
}

kubelet_stop() {
    kill -TERM "$KUBELET_PID" 2>/dev/null
    wait "$KUBELET_PID" 2>/dev/null
    return 0
}

# Pinion's configuration: kubelet's reservation and option.
cat >"$E2E_STATE/config.yaml" <<EOF
cpuManagerPolicy: static
reservedSystemCPUs: "$RESERVED_CPUS"
cpuManagerPolicyOptions:
  strict-cpu-reservation: "true"
cpuManagerReconcilePeriod: 2s
EOF
# (read through cat: `grep -c` prints nothing for a missing file, and an
# empty count made the first wait fail after its whole 180 s)
synced() { cat "$S/agent.log" 2>/dev/null | grep -c 'nri synchronized' || true; }
synced_more_than() { [ "$(synced)" -gt "$1" ]; }
pinion_start() {
    n=$(synced)
    agent_start --nri-socket "$NRI_SOCK" --podresources-socket "$PR_SOCK" && wait_for 180 synced_more_than "$n"
}

# --- pods: static manifests ----------------------------------------------------

# pod_uid NAME: the UID the manifest sets (kubelet keeps a static pod's UID
# when the manifest has one).
pod_uid() {
    uid=000000000000$(printf '%s' "$1" | od -An -tx1 | tr -d ' \n')
    echo "11111111-0000-4000-8000-${uid#"${uid%????????????}"}"
}

# write_pod NAME KIND: writes the manifest of a pod of KIND (burstable, gN =
# Guaranteed with N whole CPUs, podlevel = Guaranteed by pod-level resources
# only) and records when (/proc/uptime, 10 ms). Its container writes the
# uptime when it starts to $OUT/NAME.started, and carries E2E_POD=NAME.
write_pod() {
    name=$1 kind=$2
    rm -f "$OUT/$name.started"
    case $kind in
    burstable) res='{"requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}' ;;
    g*) res="{\"requests\": {\"cpu\": \"${kind#g}\", \"memory\": \"64Mi\"}, \"limits\": {\"cpu\": \"${kind#g}\", \"memory\": \"64Mi\"}}" ;;
    podlevel) res='{}' ;;
    esac
    podres=""
    [ "$kind" = podlevel ] &&
        podres='"resources": {"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},'
    cat >"$S/$name.json.tmp" <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$name", "namespace": "default", "uid": "$(pod_uid "$name")"},
 "spec": {"hostNetwork": true, "terminationGracePeriodSeconds": 1, $podres
  "containers": [{"name": "app", "image": "$IMAGE", "imagePullPolicy": "Never",
   "command": ["/bin/sh", "-c", "cat /proc/uptime >>/out/$name.started; trap 'exit 0' TERM; while :; do sleep 1; done"],
   "env": [{"name": "E2E_POD", "value": "$name"}],
   "resources": $res,
   "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
  "volumes": [{"name": "out", "hostPath": {"path": "$OUT"}}]}}
EOF
    awk '{ print $1 }' /proc/uptime >"$OUT/$name.written"
    mv "$S/$name.json.tmp" "$MANIFESTS/$name.json"
}

# pod_pid NAME: the pid of the pod's container (its shell).
# The container's shell, not one of the `sleep 1` it starts every second:
# once pids wrap around (pid_max 32768, and this scenario forks tens of
# thousands of processes in its 40 minutes) a `sleep` can have a lower pid
# than its shell, and it is gone before its status is read (empty cpus).
# The pid found is kept in $S/pid-NAME and checked first, and it is looked
# for among the processes of the pod's own cgroups (kubelet's cgroupfs
# layout: kubepods[/QOS]/podUID/CONTAINER): a walk of all of /proc forks
# twice per process, 10-20 s of CPU under TCG, twice per pod — until the
# twentieth session that made the test bed's shell the guest's largest CPU
# user (about half its busy time while the latency pods ran). The walk is
# left for a node without kubelet's cgroups.
pod_pid() {
    kept=$(cat "$S/pid-$1" 2>/dev/null)
    if [ -n "$kept" ] && is_pod_shell "$kept" "$1"; then
        echo "$kept"
        return 0
    fi
    if [ -d /sys/fs/cgroup/kubepods ]; then
        uid=$(pod_uid "$1")
        candidates=$(cat /sys/fs/cgroup/kubepods/pod"$uid"/*/cgroup.procs \
            /sys/fs/cgroup/kubepods/*/pod"$uid"/*/cgroup.procs 2>/dev/null)
    else
        candidates=$(cd /proc && echo [0-9]*)
    fi
    found=$(for p in $candidates; do is_pod_shell "$p" "$1" && echo "$p"; done | sort -n | head -1)
    if [ -n "$found" ]; then echo "$found" >"$S/pid-$1"; else rm -f "$S/pid-$1"; fi
    echo "$found"
}
# is_pod_shell PID NAME: whether PID is the shell of pod NAME's container.
is_pod_shell() {
    { tr '\0' '\n' <"/proc/$1/environ"; } 2>/dev/null | grep -qx "E2E_POD=$2" &&
        { tr '\0' ' ' <"/proc/$1/cmdline"; } 2>/dev/null | grep -q 'proc/uptime'
}
pod_cpus() { cpus_expand "$(proc_field "$(pod_pid "$1")" Cpus_allowed_list)"; }
pod_running() { [ -s "$OUT/$1.started" ] && [ -n "$(pod_pid "$1")" ]; }
pod_gone() { [ -z "$(pod_pid "$1")" ]; }

pod_started() { [ -s "$OUT/$1.started" ]; }

# start_pod NAME KIND: writes the manifest, waits until the container runs;
# records the start-up latency (ms) in $S/latency-$PHASE. It waits for the
# container's own start record first (a file test), and only then looks
# for its process (a walk of /proc, heavy under TCG), so that the waiting
# does not load the guest while kubelet starts the pod; the file is looked
# at once a second (wait_quietly): the latency is read from the container's
# own start record, so the polling only delays the next step.
start_pod() {
    log_marks=$(log_sizes)
    write_pod "$1" "$2"
    if wait_quietly "${POD_WAIT:-180}" pod_started "$1" && wait_for 30 pod_running "$1"; then
        ms=$(awk -v a="$(cat "$OUT/$1.written")" -v b="$(head -n 1 "$OUT/$1.started" | cut -d' ' -f1)" \
            'BEGIN { printf "%d", (b - a) * 1000 + 0.5 }')
        echo "$1 $ms" >>"$S/latency-$PHASE"
        echo "$1 $(pod_phases "$1" "$log_marks")" >>"$S/phases-$PHASE"
        note "$PHASE: pod $1 runs on cpus $(pod_cpus "$1" | tr ' ' ',') (${ms} ms after its manifest; its pod cgroup's cpu.max: $(pod_quota "$1"))"
        [ "$ms" -gt "${SLOW_POD_MS:-12000}" ] && slow_pod_notes "$1" "$log_marks"
        return 0
    fi
    note "$PHASE: pod $1 does not run; kubelet's log about it and containerd's errors end with:"
    grep -v 'cri_stats_provider\|eviction_manager\|Creating a mirror pod\|kubelet_node_status' "$S/kubelet.log" |
        tail -n 25 | cut -c1-500 | sed 's/^/  kubelet| /'
    ls -l "$OUT" | sed 's/^/  out| /'
    ps -o pid,args | grep -v ' \[' | tail -n 15 | sed 's/^/  ps| /'
    grep 'level=error' "$S/containerd.log" | tail -n 5 | cut -c1-400 | sed 's/^/  containerd| /'
    return 1
}

# clock_offset: wall-clock seconds (UTC, of the day) minus /proc/uptime,
# to within a few ms: read at the turn of a second (`date` has no finer
# resolution here). containerd's log is in wall-clock time, the pods' start
# records in uptime.
clock_offset() {
    s0=$(date -u +%s)
    while [ "$(date -u +%s)" = "$s0" ]; do :; done
    awk -v s="$s0" '{ printf "%.3f", (s + 1) % 86400 - $1 }' /proc/uptime
}
# Read once: the guest has no clock adjustment, and pod_phases runs in a
# command substitution, where a value it set would not be kept.
CLOCK_OFFSET=$(clock_offset)

# oci_resources NAME: the `linux.resources` object of the OCI spec that
# containerd gave pod NAME's running container (its bundle's config.json,
# compact JSON): what runc wrote to its cgroup. Empty when not found.
oci_resources() {
    spec=$(grep -l "E2E_POD=$1\"" "$S"/state/io.containerd.runtime.v2.task/k8s.io/*/config.json 2>/dev/null | head -n 1)
    [ -n "$spec" ] || return 0
    awk '{
        at = index($0, "\"linux\":{"); if (!at) exit
        s = substr($0, at); at = index(s, "\"resources\":{"); if (!at) exit
        s = substr(s, at + 12); depth = 0
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (c == "{") depth++
            else if (c == "}" && --depth == 0) { print substr(s, 1, i); exit }
        }
    }' "$spec"
}

# pod_quota NAME: the `cpu.max` of pod NAME's own cgroup (kubelet's
# cgroupfs layout, any QoS class): kubelet's `static` policy creates the
# cgroup of a pod with exclusive CPUs without quota, Pinion lifts it.
pod_quota() {
    uid=$(pod_uid "$1")
    cat /sys/fs/cgroup/kubepods/pod"$uid"/cpu.max /sys/fs/cgroup/kubepods/*/pod"$uid"/cpu.max 2>/dev/null | head -n 1
}

# pod_phases NAME MARKS: where pod NAME's start-up time went, from
# containerd's log (MARKS: log_sizes before its manifest), ms:
# "kubelet=" manifest written -> RunPodSandbox asked, "sandbox=" the
# sandbox's start, "kubelet2=" sandbox ready -> CreateContainer asked,
# "create=" CreateContainer (NRI's CreateContainer inside), "kubelet3=" ->
# StartContainer asked, "start=" StartContainer (NRI's StartContainer and
# runc's start inside), "running=" its answer -> the container's own start
# record. -1 for a step not found in the log.
pod_phases() {
    set -- "$1" $2
    tail -c +"$(($3 + 1))" "$S/containerd.log" | awk -v pod="$1-" -v off="$CLOCK_OFFSET" \
        -v written="$(cat "$OUT/$1.written")" -v started="$(head -n 1 "$OUT/$1.started" | cut -d' ' -f1)" '
        function t(line,    s, h) {
            s = line; sub(/^time="[0-9-]*T/, "", s); sub(/Z".*$/, "", s); split(s, h, ":")
            return h[1] * 3600 + h[2] * 60 + h[3]
        }
        function id(line, after,    s) { s = line; sub(".*" after " \\\\\"", "", s); sub(/\\".*/, "", s); return s }
        function ms(a, b,    d) {
            if (a == "" || b == "") return -1
            d = b - a; if (d < -43200) d += 86400
            return int(d * 1000 + 0.5)
        }
        # containerd 2.x: "connecting to shim ID" (the sandbox id first: its
        # shim started, before the pause container is created).
        index($0, "connecting to shim ") { s = $0; sub(/.*connecting to shim /, "", s); sub(/[" ].*/, "", s); shim[s] = t($0); next }
        # 1.7 prints the sandbox as "&PodSandboxMetadata{Name:NAME-NODE,…",
        # 2.x as "name:\"NAME-NODE\" …".
        index($0, "RunPodSandbox for ") && (index($0, "{Name:" pod) || index($0, "name:\\\"" pod)) {
            if (index($0, "returns sandbox id")) { sb_end = t($0); sb = id($0, "returns sandbox id") } else sb_start = t($0)
            next
        }
        sb != "" && index($0, "CreateContainer within sandbox \\\"" sb "\\\"") {
            if (index($0, "returns container id")) { cr_end = t($0); ctr = id($0, "returns container id") } else cr_start = t($0)
            next
        }
        ctr != "" && index($0, "StartContainer for \\\"" ctr "\\\"") {
            if (index($0, "returns successfully")) st_end = t($0); else st_start = t($0)
        }
        END {
            w = (written + off) % 86400; r = (started + off) % 86400
            printf "kubelet=%d sandbox=%d sandbox.shim=%d sandbox.pause=%d kubelet2=%d create=%d kubelet3=%d start=%d running=%d\n",
                ms(w, sb_start), ms(sb_start, sb_end), ms(sb_start, shim[sb]), ms(shim[sb], sb_end),
                ms(sb_end, cr_start), ms(cr_start, cr_end), ms(cr_end, st_start), ms(st_start, st_end), ms(st_end, r)
        }'
}

# log_sizes: the sizes in bytes of the logs of kubelet, containerd and the
# agent now ("KUBELET CONTAINERD AGENT"; 0 for a missing one): taken before
# every pod, so stat'ed rather than read.
log_sizes() {
    for log in kubelet containerd agent; do
        printf '%s ' "$(stat -c %s "$S/$log.log" 2>/dev/null || echo 0)"
    done
}

# log_digest LABEL MARKS: what the daemons logged since MARKS (log_sizes),
# as notes: the lines per level of each, and the commonest warnings and
# errors (their first 100 characters after the time stamp) — whatever a
# daemon keeps doing or retrying while the pods start.
log_digest() {
    label=$1
    set -- $2
    tail -c +"$(($3 + 1))" "$S/agent.log" 2>/dev/null >"$S/digest-agent"
    tail -c +"$(($2 + 1))" "$S/containerd.log" 2>/dev/null >"$S/digest-containerd"
    tail -c +"$(($1 + 1))" "$S/kubelet.log" 2>/dev/null >"$S/digest-kubelet"
    note "$label: lines logged: agent $(awk '{ n[$2]++ } END { for (l in n) printf "%s=%d ", l, n[l] }' "$S/digest-agent")containerd $(grep -o 'level=[a-z]*' "$S/digest-containerd" | sort | uniq -c | awk '{ printf "%s=%d ", substr($2, 7), $1 }')kubelet $(cut -c1 "$S/digest-kubelet" | grep '^[IWEF]' | sort | uniq -c | awk '{ printf "%s=%d ", $2, $1 }')"
    {
        awk '$2 == "WARN" || $2 == "ERROR" { $1 = ""; print "agent|" substr($0, 1, 100) }' "$S/digest-agent"
        grep 'level=warn\|level=error' "$S/digest-containerd" | sed 's/^time="[^"]*" //' | cut -c1-100 | sed 's/^/containerd|/'
        awk '/^[EW][0-9]/ { $1 = $2 = $3 = $4 = ""; sub(/^ */, ""); print "kubelet|" substr($0, 1, 100) }' "$S/digest-kubelet"
    } | sort | uniq -c | sort -rn | head -n 8 | sed "s/^/  /" | while IFS= read -r line; do note "$label: $line"; done
    rm -f "$S/digest-agent" "$S/digest-containerd" "$S/digest-kubelet"
}

# slow_pod_notes NAME MARKS: what the daemons logged while pod NAME took
# longer than $SLOW_POD_MS to start (MARKS: log_sizes before its manifest):
# kubelet's lines about the pod, containerd's and the agent's about
# containers and NRI — to tell who the time went to.
slow_pod_notes() {
    set -- "$1" $2
    note "$PHASE: pod $1 was slow; what the daemons logged meanwhile:"
    tail -c +"$(($2 + 1))" "$S/kubelet.log" | grep -F "$1" | grep -v 'cri_stats_provider\|eviction_manager' |
        head -n 20 | cut -c1-300 | sed 's/^/  kubelet| /'
    tail -c +"$(($3 + 1))" "$S/containerd.log" | grep -i 'nri\|container\|sandbox\|update\|level=warn\|level=error' |
        head -n 40 | cut -c1-300 | sed 's/^/  containerd| /'
    tail -c +"$(($4 + 1))" "$S/agent.log" 2>/dev/null | head -n 40 | cut -c1-300 | sed 's/^/  agent| /'
}

delete_pod() {
    rm -f "$MANIFESTS/$1.json"
    wait_for 120 pod_gone "$1"
}

# entries JSON: the exclusive assignments of a checkpoint in kubelet's
# format, "UID/CONTAINER=CPUS" lines, sorted.
entries() {
    printf '%s' "$1" | tr -d ' \n' | grep -o '"[0-9a-f-]\{36\}":{[^}]*}' |
        sed 's/^"\([0-9a-f-]*\)":{\(.*\)}$/\1 \2/' |
        while read -r uid rest; do
            echo "$rest" | grep -o '"[^"]*":"[^"]*"' | sed "s|^\"\([^\"]*\)\":\"\([^\"]*\)\"$|$uid/\1=\2|"
        done | sort
}
kubelet_entries() { entries "$(cat "$KROOT/cpu_manager_state" 2>/dev/null)"; }
pinion_entries() { entries "$(durable_state 2>/dev/null)"; }

podres() { podresources-client -socket "unix://$1" 2>&1; }

# shared CPUs: every online CPU but the reserved ones and the exclusive ones
# given (strict-cpu-reservation keeps the shared pool off the reserved CPUs).
shared_without() {
    excl=" $(cpus_expand "$RESERVED_CPUS") $* "
    for c in $(cpus_expand "$(cat /sys/devices/system/cpu/online)"); do
        case $excl in *" $c "*) ;; *) echo "$c" ;; esac
    done | tr '\n' ' ' | sed 's/ $//'
}

kubelet_cleanup() {
    rm -f "$MANIFESTS"/*.json
    if [ -n "${KUBELET_PID:-}" ] && kill -0 "$KUBELET_PID" 2>/dev/null; then
        for p in $(ls "$OUT" | sed -n 's/\.started$//p'); do wait_for 30 pod_gone "$p"; done
        kubelet_stop
    fi
    [ -n "${CTRD_PID:-}" ] && containerd_stop
    scenario_cleanup
    awk -v s="$S/" 'index($2, s) == 1 { print $2 }' /proc/self/mounts | sort -r |
        while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    return 0
}
trap kubelet_cleanup EXIT

# placements NAME...: what must not move: each pod's cpus, mems and CFS quota.
placements() {
    for name in "$@"; do
        pid=$(pod_pid "$name")
        echo "$name cpus=$(proc_field "$pid" Cpus_allowed_list) mems=$(proc_field "$pid" Mems_allowed_list) quota=$(cut -d' ' -f1 "$(cpuset_dir "$pid")/cpu.max" 2>/dev/null)"
    done
}

# The pod sequence both deciders run: NAME:KIND (see write_pod). Their
# requests (0.25 + 2 + 0.5 + 1 + 2 CPUs) fit the node's allocatable 6: kubelet
# admits a pod only within it.
SEQ="b:burstable g1:g2 pl:podlevel g2:g1 g3:g2"
# exclusive NAME...: the CPUs of the named pods that hold exclusive ones.
exclusive() {
    for item in $SEQ; do
        name=${item%%:*} kind=${item#*:}
        case " $* " in *" $name "*) ;; *) continue ;; esac
        # One line per pod: pod_cpus ends without a newline, and two pods'
        # lists run together otherwise ("2 3" "4" read as "2 34").
        case $kind in g*) echo "$(pod_cpus "$name")" ;; esac
    done | tr ' ' '\n' | grep . | sort -n | tr '\n' ' ' | sed 's/ $//'
}
b_is() { [ "$(pod_cpus b)" = "$1" ]; }

# run_sequence NAME...: starts the pods of $SEQ named, in order; after each,
# waits until the burstable pod b holds the shared pool (kubelet's static
# policy updates it at its next reconcile, Pinion at once) and records in
# $S/seq-$PHASE every pod's CPUs and b's after each step.
run_sequence() {
    started=""
    for item in $SEQ; do
        name=${item%%:*} kind=${item#*:}
        case " $* " in *" $name "*) ;; *) continue ;; esac
        if ! start_pod "$name" "$kind"; then
            fail "$PHASE: pod $name ($kind) runs" "see the notes above"
            return 1
        fi
        started="$started $name"
        want=$(shared_without $(exclusive $started))
        wait_for 30 b_is "$want" || true
        echo "after-$name b=$(pod_cpus b | tr ' ' ',')" >>"$S/seq-$PHASE"
    done
    for name in $started; do
        echo "$name=$(pod_cpus "$name" | tr ' ' ',')" >>"$S/seq-$PHASE"
        oci_resources "$name" >"$S/oci-$PHASE-$name"
        pod_quota "$name" >"$S/podquota-$PHASE-$name"
        starts=$(wc -l <"$OUT/$name.started" 2>/dev/null || echo 0)
        [ "$starts" -gt 1 ] && note "$PHASE: pod $name's container started $starts times (kubelet restarted it)"
    done
    return 0
}

# no_tasks: containerd runs no task (no container, no sandbox's pause).
no_tasks() { [ -z "$(ctr --address "$CTRD_SOCK" -n k8s.io tasks ls -q 2>/dev/null)" ]; }

# latency_pods [FIRST]: the start-up latency of pods started alone, the
# same on both sides: $E2E_LATENCY_PODS (8) Guaranteed 1-CPU pods, named
# latFIRST (1) on, each started on an otherwise empty node and deleted
# before the next (recorded in $S/latency-$PHASE; the sequence's pods
# differ in kind and in what runs beside them, so they are reported
# apart). Each side runs two blocks (latency_block, at the end of the
# scenario).
latency_pods() {
    lat_n=${E2E_LATENCY_PODS:-8} lat_first=${1:-1}
    [ "$lat_n" -gt 0 ] || return 0
    cpu_before=$(daemons_cpu)
    guest_before=$(guest_cpu)
    i=$lat_first
    while [ "$i" -lt "$((lat_first + lat_n))" ]; do
        if ! start_pod "lat$i" g1; then
            fail "$PHASE: latency pod lat$i runs" "see the notes above"
            return 1
        fi
        delete_pod "lat$i" || note "$PHASE: latency pod lat$i still runs 120 s after its manifest was removed"
        # Its sandbox stopped too (the pause process and the shims gone), so
        # that the next pod does not start beside its teardown.
        wait_quietly 60 no_tasks || note "$PHASE: containerd still runs tasks 60 s after lat$i was deleted: $(ctr --address "$CTRD_SOCK" -n k8s.io tasks ls 2>&1 | tr '\n' ';')"
        i=$((i + 1))
    done
    # What the node's daemons took of the guest's CPUs meanwhile (under TCG
    # every guest CPU second is taken from the pods starting).
    echo "E2E-CPU containerd$CTRD_MAJOR $PHASE-$(((lat_first - 1) / lat_n + 1)) $(daemons_cpu | awk -v before="$cpu_before" '
        BEGIN { split(before, b, " "); for (i in b) { split(b[i], f, "="); ms[f[1]] = f[2] } }
        { for (i = 1; i <= NF; i++) { split($i, f, "="); printf "%s%s=%d", (i > 1 ? " " : ""), f[1], f[2] - ms[f[1]] } }')"
    # And the whole guest's: busy and idle CPU time, and the commands that
    # took the most (live processes, their reaped children included).
    echo "E2E-GUESTCPU containerd$CTRD_MAJOR $PHASE-$(((lat_first - 1) / lat_n + 1)) $(printf '%s\n%s\n' "$guest_before" "$(guest_cpu)" | awk '
        NR == 1 { n = split($0, a, " "); for (i = 1; i <= n; i++) { split(a[i], f, "="); was[f[1]] = f[2] } next }
        { n = split($0, a, " "); for (i = 1; i <= n; i++) { split(a[i], f, "="); d[f[1]] = f[2] - was[f[1]] } }
        END {
            printf "busy=%dms idle=%dms pages-migrated=%d top:", d["BUSY"], d["IDLE"], d["MIGRATED"]
            for (k = 0; k < 8; k++) {
                best = ""; for (c in d) if (c != "BUSY" && c != "IDLE" && c != "MIGRATED" && d[c] > 0 && (best == "" || d[c] > d[best])) best = c
                if (best == "") break
                printf " %s=%d", best, d[best]; delete d[best]
            }
            print ""
        }')"
}

# guest_cpu: one line, "BUSY=MS IDLE=MS MIGRATED=PAGES COMM=MS ...": the
# guest's busy and idle CPU time (/proc/stat), the pages the kernel has
# migrated between NUMA nodes (/proc/vmstat: a write of `cpuset.mems`, or a
# process joining a cgroup with fewer memory nodes, moves its memory) and,
# per command, what its live processes have used (user + system, their
# reaped children's included).
guest_cpu() {
    {
        head -n 1 /proc/stat
        grep '^pgmigrate_success ' /proc/vmstat
        cat /proc/[0-9]*/stat 2>/dev/null
    } | awk '
        NR == 1 { busy = ($2 + $3 + $4 + $7 + $8 + $9) * 10; idle = ($5 + $6) * 10; next }
        $1 == "pgmigrate_success" { migrated = $2; next }
        {
            c = $0; sub(/^[^(]*\(/, "", c); sub(/\).*$/, "", c); gsub(/[ =]/, "_", c)
            r = $0; sub(/^.*\) /, "", r); split(r, f, " ")
            ms[c] += (f[12] + f[13] + f[14] + f[15]) * 10
        }
        END { printf "BUSY=%d IDLE=%d MIGRATED=%d", busy, idle, migrated; for (c in ms) printf " %s=%d", c, ms[c]; print "" }'
}

# cpu_ms PID: the CPU time (user + system, ms) process PID has used.
cpu_ms() {
    awk '{ print int(($14 + $15) * 10) }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# switches PID: how often the threads of process PID have been switched
# out, voluntarily or not (each a sleep and a wake-up, which a TCG guest
# pays for on every vCPU it happens on).
switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# daemons_cpu: "kubelet=MS containerd=MS agent=MS" and the daemons' thread
# switches (the agent's 0 when it does not run).
daemons_cpu() {
    agent=0 agent_switches=0
    if [ -n "${AGENT_PID:-}" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
        agent=$(cpu_ms "$AGENT_PID") agent_switches=$(switches "$AGENT_PID")
    fi
    echo "kubelet=$(cpu_ms "$KUBELET_PID") containerd=$(cpu_ms "$CTRD_PID") agent=$agent" \
        "kubelet.switches=$(switches "$KUBELET_PID") containerd.switches=$(switches "$CTRD_PID") agent.switches=$agent_switches"
}

# nri_times: the agent's NRI request times so far (its /metrics,
# pinion_nri_request_duration_seconds), "METHOD COUNT SUM" lines.
nri_times() {
    addr=$(grep -o 'metrics=[0-9.]*:[0-9]*' "$S/agent.log" 2>/dev/null | tail -1 | cut -d= -f2)
    [ -n "$addr" ] || return 0
    wget -q -O - "http://$addr/metrics" 2>/dev/null | awk '
        /^pinion_nri_request_duration_seconds_(count|sum)\{/ {
            m = $1; sub(/.*method="/, "", m); sub(/".*/, "", m)
            if ($1 ~ /_count\{/) count[m] = $2; else sum[m] = $2
        }
        END { for (m in count) print m, count[m], sum[m] }' | sort
}

# nri_share LABEL PODS BEFORE AFTER: Pinion's time on the runtime's side of
# PODS pods between BEFORE and AFTER (nri_times), per pod and by method, as
# an E2E-NRI line.
nri_share() {
    printf '%s\n' "$4" | awk -v label="$1" -v pods="$2" -v before="$3" '
        BEGIN { n = split(before, l, "\n"); for (i = 1; i <= n; i++) { split(l[i], f, " "); c0[f[1]] = f[2]; s0[f[1]] = f[3] } }
        { dc = $2 - c0[$1]; ds = $3 - s0[$1]; if (dc <= 0) next
          total += ds; detail = detail sprintf(" %s=%d/%.1f", $1, dc, ds * 1000 / dc) }
        END { if (pods > 0) printf "E2E-NRI %s pods=%d pinion_ms_per_pod=%.1f (method=requests/mean ms:%s)\n", label, pods, total * 1000 / pods, detail }'
}

# The podresources answer without the shared containers (no cpu_ids).
podres_exclusive() { podres "$1" | grep -v 'cpus=-$'; }

# --- start-up latency: four blocks on the emptied node ------------------------------

# latency_block SIDE FIRST: one block of latency pods (latFIRST on) with
# SIDE (static: kubelet's own policy; pinion: kubelet `none` + Pinion)
# deciding; `both` (a diagnostic, E2E_LATENCY_BOTH=1): kubelet `static`
# deciding with Pinion connected to the runtime as well — on an empty node
# both give a lone 1-CPU pod the same CPU, so it tells the cost of Pinion
# being there from the cost of kubelet at `none`; `noquota` (a diagnostic,
# E2E_LATENCY_NOQUOTA=1): Pinion deciding with kubelet at `none` and
# cpuCFSQuota false — kubelet `none` gives the pod's cgroup and its sandbox
# the pod's CPU limit as CFS quota, which kubelet `static` leaves off for a
# pod with exclusive CPUs and Pinion can lift only once its first container
# is created, after the sandbox started; this arm tells that quota's cost
# from Pinion's.
# Every block starts from the same point on both sides: the node empty,
# kubelet, the agent and containerd stopped, the other policy's checkpoint
# set aside (kubelet refuses it), containerd started with NRI on (with no
# plugin on kubelet's side), the agent on Pinion's, kubelet, and
# $E2E_LATENCY_SETTLE (10) seconds to settle. So neither side's pods start
# beside daemons that have lived through more pods, restarts or the
# migration than the other's.
latency_block() {
    side=$1 first=$2
    kubelet_stop
    agent_stop TERM
    containerd_stop
    if [ -f "$KROOT/cpu_manager_state" ]; then
        mv "$KROOT/cpu_manager_state" "$KROOT/cpu_manager_state.before-$side-$first"
    fi
    if ! containerd_start true; then
        fail "latency block $side (lat$first on): containerd starts" "$(tail -5 "$S/containerd.log")"
        return 1
    fi
    policy=static quota=""
    case $side in pinion) policy=none ;; noquota) policy=none quota=noquota ;; esac
    if [ "$side" != static ]; then
        if ! pinion_start; then
            fail "latency block $side (lat$first on): the agent starts" "$(tail -5 "$S/agent.log")"
            return 1
        fi
    fi
    if ! kubelet_start "$policy" $quota; then
        fail "latency block $side (lat$first on): kubelet starts with cpuManagerPolicy $policy" "$(tail -5 "$S/kubelet.log" | cut -c1-300)"
        return 1
    fi
    sleep "${E2E_LATENCY_SETTLE:-10}"
    # What the earlier blocks left in containerd (kubelet relists every
    # container and sandbox it keeps, once a second): a count that grows
    # from block to block makes the later blocks slower on either side.
    note "latency block $side (lat$first on): containerd keeps $(ctr --address "$CTRD_SOCK" -n k8s.io containers ls -q 2>/dev/null | wc -l) containers, $(ctr --address "$CTRD_SOCK" -n k8s.io snapshots --snapshotter native ls 2>/dev/null | tail -n +2 | wc -l) snapshots"
    PHASE=$side-alone
    before=$(nri_times)
    block_marks=$(log_sizes)
    latency_pods "$first" || return 1
    log_digest "latency block $side (lat$first on)" "$block_marks"
    if [ "$side" != static ]; then
        nri_share "containerd$CTRD_MAJOR $side-alone-$(((first - 1) / ${E2E_LATENCY_PODS:-8} + 1))" \
            "${E2E_LATENCY_PODS:-8}" "$before" "$(nri_times)"
    fi
}

# pinion_holds_nothing: Pinion's checkpoint holds no exclusive assignment.
pinion_holds_nothing() { [ -z "$(pinion_entries)" ]; }

# latency_blocks: $E2E_LATENCY_ROUNDS (1) rounds of four blocks (two more
# with each of E2E_LATENCY_BOTH=1 and E2E_LATENCY_NOQUOTA=1) on the emptied
# node, each round in the order static, Pinion, (both, (noquota, noquota,)
# both,) Pinion, static, so that a drift over the run weighs on every side
# alike; none when E2E_LATENCY_PODS is 0.
latency_blocks() {
    lat_per=${E2E_LATENCY_PODS:-8}
    [ "$lat_per" -gt 0 ] || return 0
    round=0
    while [ "$round" -lt "${E2E_LATENCY_ROUNDS:-1}" ]; do
        # Each side runs twice a round: its first and its second block
        # of the round, numbered on from the side's earlier rounds.
        inner=""
        [ "${E2E_LATENCY_NOQUOTA:-0}" = 1 ] && inner="noquota:1 noquota:2"
        [ "${E2E_LATENCY_BOTH:-0}" = 1 ] && inner="both:1 $inner both:2"
        order="static:1 pinion:1 $inner pinion:2 static:2"
        for block in $order; do
            latency_block "${block%:*}" $(((2 * round + ${block#*:} - 1) * lat_per + 1)) || return 1
        done
        round=$((round + 1))
    done
}

# --- start-up latency: manifest written -> container running ------------------------

# latency_report: the E2E-LATENCY and E2E-PHASES lines the host reads.
latency_report() {
    for phase in static pinion static-alone pinion-alone both-alone noquota-alone; do
        [ -s "$S/latency-$phase" ] || continue
        echo "E2E-LATENCY containerd$CTRD_MAJOR $phase $(tr '\n' ' ' <"$S/latency-$phase")"
        sed "s/^/E2E-PHASES containerd$CTRD_MAJOR $phase /" "$S/phases-$phase" 2>/dev/null
    done
}

# --- the runtime; kubelet's own static policy -----------------------------------

if containerd_start false; then
    version=$(containerd --version 2>&1)
    pass "containerd runs ($version)"
    case $version in
    *" v$CTRD_MAJOR."* | *" $CTRD_MAJOR."*) pass "containerd is $CTRD_MAJOR.x" ;;
    *) fail "containerd is $CTRD_MAJOR.x" "$version" ;;
    esac
    echo "E2E-CONTAINERD $CTRD_MAJOR $version"
else
    fail "containerd $CTRD_MAJOR starts" "$(tail -5 "$S/containerd.log")"
    exit 0
fi
# ctr 2.x imports through containerd's transfer service by default;
# --local imports in ctr itself, as 1.7's ctr always does (the same path on
# both lines).
import_local=""
[ "$CTRD_MAJOR" = 2 ] && import_local=--local
for image in pause busybox; do
    out=$(ctr --address "$CTRD_SOCK" -n k8s.io images import $import_local --snapshotter native \
        "$E2E_IMAGES/$image.tar" 2>&1) || { fail "image $image imported" "$out"; exit 0; }
done
note "kubelet: $(kubelet --version 2>&1)"
# E2E_LATENCY_ONLY=1 (scripts/e2e-kubelet.sh --latency-only): the start-up
# latency blocks alone, without the sequence, the migration and the restarts.
if [ "${E2E_LATENCY_ONLY:-0}" = 1 ]; then
    if latency_blocks; then
        pass "start-up latency: $((${E2E_LATENCY_PODS:-8} * 2 * ${E2E_LATENCY_ROUNDS:-1})) pods a side started alone"
    fi
    latency_report
    exit 0
fi
PHASE=static
if ! kubelet_start static; then
    fail "kubelet starts standalone (cpuManagerPolicy static)" "$(tail -5 "$S/kubelet.log" | cut -c1-300)"
    exit 0
fi
PHASE=static
run_sequence b g1 pl g2 g3 || exit 0
pass "kubelet static: pods b g1 pl g2 g3 run ($(tr '\n' ' ' <"$S/seq-static"))"
podres_exclusive "$KROOT/pod-resources/kubelet.sock" >"$S/podres-static"
note "kubelet's podresources: $(tr '\n' ';' <"$S/podres-static")"
g3_static=$(pod_cpus g3)
delete_pod g3
no_g3() { ! kubelet_entries | grep -q "^$(pod_uid g3)/"; }
wait_for 30 no_g3 || true
wait_for 30 b_is "$(shared_without $(exclusive g1 g2))" || true

# --- the migration of docs/deployment.md, pods running ---------------------------

RUNNING="b g1 pl g2"
before=$(placements $RUNNING)
# Step 3: NRI on in the runtime, restarted; kubelet still in charge.
containerd_stop
containerd_start true || fail "migration: containerd restarts with NRI" "$(tail -5 "$S/containerd.log")"
# Step 4: stop kubelet; 5: copy its checkpoint; 6: verify it with Pinion's config.
kubelet_stop
mkdir -p "$E2E_STATE/state"
cp -p "$KROOT/cpu_manager_state" "$E2E_STATE/state/cpu_manager_state"
out=$("$PINION" state verify "$E2E_STATE/state/cpu_manager_state" --config "$E2E_STATE/config.yaml" 2>&1)
check_true "migration: pinion state verify accepts kubelet's checkpoint ($(echo "$out" | tail -1))" test $? -eq 0
# 7: kubelet's file aside; 8: kubelet at none; 9: Pinion.
mv "$KROOT/cpu_manager_state" "$KROOT/cpu_manager_state.static"
PHASE=none
kubelet_start none || fail "migration: kubelet starts with cpuManagerPolicy none" "$(tail -5 "$S/kubelet.log" | cut -c1-300)"
pinion_start || fail "migration: the agent registered and synchronized" "$(tail -5 "$S/agent.log")"
# 10: nothing moved. Let kubelet sync its pods and Pinion reconcile first.
sleep 5
# Regression: Pinion narrowed cpuset.mems to the nodes of a container's
# CPUs at its first reconcile (kubelet's static policy leaves every node),
# migrating the running containers' memory.
check_eq "migration: no running container's cpus, memory nodes or quota changed" \
    "$before" "$(placements $RUNNING)"
check_eq "migration: Pinion holds kubelet's assignments" \
    "$(entries "$(cat "$KROOT/cpu_manager_state.static")")" "$(pinion_entries)"
PHASE=migrated
if start_pod g3 g2; then
    check_eq "migration: the next pod (g3) gets what kubelet's static policy gave it" \
        "$g3_static" "$(pod_cpus g3)"
else
    fail "migration: the next pod (g3) runs" "$(tail -3 "$S/agent.log")"
fi
check_eq "podresources: Pinion's socket answers kubelet's client as kubelet's did" \
    "$(cat "$S/podres-static")" "$(podres_exclusive "$PR_SOCK")"

# --- restarts: nothing moves --------------------------------------------------------

RUNNING="b g1 pl g2 g3"
before=$(placements $RUNNING; pinion_entries)
kubelet_stop
kubelet_start none || fail "kubelet restarts" "$(tail -5 "$S/kubelet.log" | cut -c1-300)"
sleep 5
check_eq "kubelet restart: nothing moved" "$before" "$(placements $RUNNING; pinion_entries)"
n=$(synced)
containerd_stop
containerd_start true || fail "containerd restarts" "$(tail -5 "$S/containerd.log")"
wait_for 120 synced_more_than "$n" || true
check_eq "containerd restart: nothing moved" "$before" "$(placements $RUNNING; pinion_entries)"
agent_stop KILL
pinion_start || fail "the agent restarts" "$(tail -5 "$S/agent.log")"
check_eq "Pinion SIGKILL + restart: nothing moved" "$before" "$(placements $RUNNING; pinion_entries)"
kubelet_stop
agent_stop TERM
containerd_stop
containerd_start true || fail "containerd restarts (all three)" "$(tail -5 "$S/containerd.log")"
pinion_start || fail "the agent restarts (all three)" "$(tail -5 "$S/agent.log")"
kubelet_start none || fail "kubelet restarts (all three)" "$(tail -5 "$S/kubelet.log" | cut -c1-300)"
sleep 5
check_eq "kubelet, containerd and Pinion restarted: nothing moved" "$before" "$(placements $RUNNING; pinion_entries)"

# --- deleting returns the CPUs; the same sequence with Pinion deciding --------------

# Every pod's container runs again before its CPUs are read (after the
# restarts kubelet may still be recreating one: its pid is missing then).
for name in $RUNNING; do wait_for 60 pod_running "$name" || true; done
g3_cpus=$(pod_cpus g3)
delete_pod g3
wait_for 30 b_is "$(shared_without $(exclusive g1 g2))" || true
if ! b_is "$(shared_without $(exclusive g1 g2))"; then
    # Every process of every pod (a lower pid of an earlier container
    # would be read as the pod's), and what the agent did.
    for p in /proc/[0-9]*; do
        pod=$({ tr '\0' '\n' <"$p/environ"; } 2>/dev/null | sed -n 's/^E2E_POD=//p')
        [ -n "$pod" ] && note "g3 deleted: pod $pod pid ${p#/proc/} cpus $(proc_field "${p#/proc/}" Cpus_allowed_list) cgroup $(sed -n 's/^0:://p' "$p/cgroup" 2>/dev/null)"
    done
    grep -E 'admitted|released|held|synchroniz' "$S/agent.log" | tail -n 25 | cut -c1-250 |
        while IFS= read -r line; do note "g3 deleted: agent: $line"; done
fi
held=$(exclusive g1 g2)
check_eq "deleting g3 returns its cpus ($g3_cpus) to the shared pool (g1 and g2 hold $held)" \
    "$(shared_without $held)" "$(pod_cpus b)"
check_eq "deleting g3 releases it in Pinion's checkpoint" "" "$(pinion_entries | grep "^$(pod_uid g3)/")"
for name in g2 pl g1 b; do delete_pod "$name"; done
# A pod's CPUs are released when the runtime reports its container
# stopped or removed, which may come after its process is gone (what
# delete_pod waits for): kubelet's `static` policy releases them later still.
wait_for 60 pinion_holds_nothing || true
check_eq "every pod deleted: Pinion's checkpoint holds no assignment" "" "$(pinion_entries)"

PHASE=pinion
before=$(nri_times)
if run_sequence b g1 pl g2 g3; then
    after=$(nri_times)
    nri_share "containerd$CTRD_MAJOR pinion" 5 "$before" "$after"
    created=$(printf '%s\n' "$after" | awk '$1 == "CreateContainer" { print $2 }')
    check_true "Pinion's /metrics times the runtime's NRI requests (CreateContainer answered ${created:-0} times since the agent started)" \
        test "${created:-0}" -ge 5
    while IFS= read -r line; do
        got=$(grep -x "${line%%=*}=.*" "$S/seq-pinion")
        check_eq "kubelet static and Pinion agree: ${line%%=*}" "$line" "$got"
    done <"$S/seq-static"
    # What runc was told to write besides the CPUs (quota, shares, memory,
    # memory nodes, devices): kubelet's values, whoever decided the CPUs.
    for name in b g1 pl g2 g3; do
        static_oci=$(cat "$S/oci-static-$name" 2>/dev/null)
        if [ -z "$static_oci" ]; then
            fail "kubelet static and Pinion: the same OCI resources for $name" "no config.json of its container found under $S/state"
            continue
        fi
        check_eq "kubelet static and Pinion: the same OCI resources for $name" "$static_oci" "$(cat "$S/oci-pinion-$name" 2>/dev/null)"
        check_eq "kubelet static and Pinion: the same CFS quota of pod $name's cgroup" \
            "$(cat "$S/podquota-static-$name")" "$(cat "$S/podquota-pinion-$name")"
    done
    note "Pinion: g1's OCI resources: $(cat "$S/oci-pinion-g1" 2>/dev/null)"
    g1=$(pod_cpus g1)
    check_true "Pinion: Guaranteed g1 (2 cpus) on the sibling threads of one core ($g1)" is_sibling_group "$(echo "$g1" | tr ' ' ',')"
    check_eq "Pinion: the burstable pod shrank to the shared pool" \
        "$(shared_without $(exclusive g1 g2 g3))" "$(pod_cpus b)"
    check_eq "pod-level resources: pod pl runs in the shared pool, as under kubelet" "$(pod_cpus b)" "$(pod_cpus pl)"
    all_cpus=$(for n in b g1 pl g2 g3; do pod_cpus "$n"; done | tr ' ' '\n' | sort -nu | tr '\n' ',')
    check_eq "reservedSystemCPUs $RESERVED_CPUS: no pod runs on them (strict-cpu-reservation)" "" \
        "$(cpus_intersect "$all_cpus" "$RESERVED_CPUS")"
    check_eq "reservedSystemCPUs $RESERVED_CPUS: podresources' allocatable cpus are the rest" \
        "allocatable cpus=$(shared_without | tr ' ' ',')" "$(podres "$PR_SOCK" | grep '^allocatable')"
    delete_pod g1
    wait_for 30 b_is "$(shared_without $(exclusive g2 g3))" || true
    check_eq "Pinion: deleting g1 grows the burstable pod by its cpus" \
        "$(shared_without $(exclusive g2 g3))" "$(pod_cpus b)"
fi

# --- start-up latency on the emptied node -------------------------------------------

for name in b pl g2 g3; do delete_pod "$name"; done
wait_for 60 pinion_holds_nothing || note "latency blocks: Pinion still holds $(pinion_entries | tr '\n' ' ')"
latency_blocks
latency_report
