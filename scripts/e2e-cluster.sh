#!/usr/bin/env bash
# Pinion in a real cluster: a control plane on this machine (Debian
# trixie's etcd; kube-apiserver, kube-controller-manager and kube-scheduler
# built from the kubelet's k8s.io/kubernetes module; scheduler-plugins'
# scheduler with NodeResourceTopologyMatch as a second scheduler), TLS and
# credentials generated per run, and a kubelet node in a qemu guest with 2
# sockets, SMT and 2 NUMA nodes (Debian's containerd 1.7 with NRI, a pod
# network). deploy/'s manifests are applied with kubectl as a user applies
# them, through a kustomize overlay that only sets the agent's
# configuration; Pinion's image is built here (scripts/build-image.sh) and
# imported into the node's containerd, no registry. The checks: the
# DaemonSet's pod runs Pinion on the node, Pinion publishes the node's
# NodeResourceTopology object, pods the real scheduler sends are pinned,
# and the topology-aware scheduler sends no pod the node must refuse while
# the default scheduler does. Needs root, Go, qemu. Last line:
# `N passed, N failed, N skipped`; exits non-zero on a failure.
#
# Usage: sudo scripts/e2e-cluster.sh [--keep-running]
#        scripts/e2e-cluster.sh --peers-cached | --build-peers
#   --keep-running: leave the cluster up at the end (the admin kubeconfig
#   is printed) until Enter is pressed.
#   --peers-cached: exits 0 when every Go-built peer (the control plane,
#   scheduler-plugins, kubelet, NFD) is built and current, 1 when a run would
#   build one first; runs nothing (CI's time guard asks it).
#   --build-peers: builds them and runs nothing; exits 0 once all are built
#   (CI spends its time left on it when it skipped this bed for want of them).
# Environment: as scripts/e2e-vm.sh (PINION_E2E_*), PINION_E2E_CACHED_ONLY
# (skip, saying so, when a Go-built peer would have to be built first),
# PINION_E2E_API_PORT (16443), PINION_E2E_ETCD_PORT (12379),
# PINION_E2E_CLUSTER_TIMEOUT (seconds the node may take to join, 1200),
# PINION_E2E_PROBE_TIMEOUT (the agent's probes' timeoutSeconds on the
# emulated nodes, 30; deploy/ says 3).
set -uo pipefail
E2E_NAME=e2e-cluster
. "$(dirname "$0")/e2e/lib.sh"
. "$E2E_LIB/vm.sh"
. "$E2E_LIB/peers.sh"
. "$E2E_LIB/cluster.sh"

# The node: 2 sockets x 2 cores x 2 threads, 2 NUMA nodes (CPUs 0-3 and
# 4-7), 1.5 GiB a node; its uplink on qemu's user network.
GUEST_SHAPE=(2 2 2 2 10+21/21+10 1536)
NODE=pinion-smt
# The smallest machine: 2 CPUs, one NUMA node. 3 GiB: the guest's root file
# system is its initramfs in memory (about 300 MB of it; a tmpfs gets half
# the memory), and containerd's content store and snapshots are there too —
# each container a full copy of its image's layers. 1 GiB ran out of room
# while importing Pinion's image; 2 GiB ran out once creating the Burstable
# pod's container ("copy file range failed: no space left on device").
GUEST2_SHAPE=(1 2 1 1 10 3072)
NODE2=pinion-small
# Its Go-built peers (--peers-cached, --build-peers).
PEERS=(e2e_control_plane_build e2e_scheduler_plugins_build e2e_kubelet_build e2e_nfd_build)
KEEP_RUNNING=0
while [ $# -gt 0 ]; do
    case $1 in
    --keep-running) KEEP_RUNNING=1; shift ;;
    --peers-cached) e2e_peers_cached "${PEERS[@]}" ;;
    --build-peers) e2e_peers_build "${PEERS[@]}" ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) e2e_die "unknown argument '$1' (see --help)" ;;
    esac
done

E2E_WORK=$(mktemp -d /tmp/pinion-e2e-cluster.XXXXXX)
W=$E2E_WORK
cleanup() {
    pkill -f "qemu-system-x86_64.*$W/" 2>/dev/null
    e2e_control_plane_stop "$W"
    [ -n "${PINION_E2E_KEEP:-}" ] || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
e2e_require busybox-static runc qemu-system-x86 linux-image-cloud-amd64 cpio openssl
if ! command -v go >/dev/null 2>&1; then
    [ -n "${CI:-}" ] && e2e_die "go is not installed (the control plane and kubelet are built from Go modules)"
    e2e_skip_all "go is not installed (the control plane and kubelet are built from Go modules)"
fi
e2e_build

# --- the peers -----------------------------------------------------------------
start=$(date +%s)
CP=$(e2e_control_plane_build); e2e_peer "the control plane" $?
SP=$(e2e_scheduler_plugins_build); e2e_peer scheduler-plugins $?
ETCD=$(e2e_etcd_deb) || e2e_die "cannot fetch Debian trixie's etcd-server (see above)"
KUBELET_DIR=$(e2e_kubelet_build); e2e_peer kubelet $?
CTRD1=$(e2e_containerd_deb trixie) || e2e_die "cannot fetch Debian trixie's containerd (see above)"
CNI=$(e2e_deb_tree trixie containernetworking-plugins usr/lib/cni/ipvlan) || e2e_die "cannot fetch the CNI plugins (see above)"
CRD=$(e2e_nrt_crd) || e2e_die "cannot download the NodeResourceTopology CRD (see above)"
NFD=$(e2e_nfd_build); e2e_peer "NFD's nfd-topology-updater" $?
kube_version=$("$CP/kube-apiserver" --version 2>&1)
e2e_log "control plane: $kube_version; etcd $("$ETCD/usr/bin/etcd" --version 2>&1 | head -1); $("$SP/kube-scheduler" --version 2>&1 | head -1) (sigs.k8s.io/scheduler-plugins $(cd "$E2E_REPO/interop/scheduler-plugins" && go list -m -f '{{.Version}}' sigs.k8s.io/scheduler-plugins))"
e2e_log "node: $("$KUBELET_DIR/kubelet" --version 2>&1), containerd $("$CTRD1/usr/bin/containerd" --version 2>&1 | awk '{ print $3 }'); exporter: $("$NFD/nfd-topology-updater" -version 2>&1 | tail -1) (sigs.k8s.io/node-feature-discovery)"
e2e_log "peers ready in $(($(date +%s) - start)) s"

mkdir -p "$W/images"
e2e_test_images "$W/images" || e2e_die "cannot build the test images"
"$E2E_REPO/scripts/build-image.sh" --bin-dir "$E2E_BIN_DIR" --out "$W/images/pinion.tar" --tag pinion:latest >&2 ||
    e2e_die "cannot build Pinion's image"

# --- the control plane -----------------------------------------------------------
e2e_cluster_pki "$W/pki" "$NODE" "$NODE2" || e2e_die "cannot generate the cluster's certificates"
start=$(date +%s)
e2e_control_plane_start "$W" "$CP" "$SP" "$ETCD" || e2e_die "the control plane did not start (logs in $W)"
K() { "$CP/kubectl" --kubeconfig "$W/admin.kubeconfig" "$@"; }
server=$(K version -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p' | tail -1)
kubelet_v=$("$KUBELET_DIR/kubelet" --version 2>&1 | awk '{ print $2 }')
if [ -n "$server" ] && [ "$server" = "$kubelet_v" ]; then
    e2e_result PASS "control plane: the API server ($server, the kubelet's release) is ready in $(($(date +%s) - start)) s, etcd over TLS"
else
    e2e_result FAIL "control plane: API server version '$server', kubelet '$kubelet_v'"
fi

# The NodeResourceTopology CRD, from its API module; the topology-aware
# scheduler may read the objects (the role scheduler-plugins' manifests
# give it, written here).
if K apply -f "$CRD" >/dev/null &&
    K wait --for condition=established --timeout 60s crd/noderesourcetopologies.topology.node.k8s.io >/dev/null; then
    e2e_result PASS "control plane: the NodeResourceTopology CRD ($NRT_API_MODULE $NRT_API_VERSION) is established"
else
    e2e_result FAIL "control plane: the NodeResourceTopology CRD is not established"
fi
# grant NAME USER: a ClusterRole NAME with the rules read from stdin (YAML
# list items), bound to the user USER (a client certificate's CN).
grant() {
    {
        printf 'apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: %s}\nrules:\n' "$1"
        cat
        printf -- '---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: %s}\n' "$1"
        printf 'roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %s}\n' "$1"
        printf 'subjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %s}\n' "$2"
    } | K apply -f - >/dev/null
}
grant e2e-topology-aware-scheduler system:kube-scheduler <<EOF
- apiGroups: ["topology.node.k8s.io"]
  resources: ["noderesourcetopologies"]
  verbs: ["get", "list", "watch"]
EOF
# NFD's topology-updater on $NODE (its own certificate): what its
# deployment's ClusterRole grants it, for the rules it uses here.
grant e2e-nfd-topology-updater pinion-e2e-nfd-topology-updater <<EOF
- apiGroups: ["topology.node.k8s.io"]
  resources: ["noderesourcetopologies"]
  verbs: ["get", "create", "update"]
- apiGroups: [""]
  resources: ["pods", "namespaces"]
  verbs: ["get"]
EOF

# deploy/ as a user applies it: a kustomize overlay over deploy/ that sets
# the agent's configuration (this node's policy: single-numa-node) and,
# for the emulated nodes only, the probes' timeouts: under TCG on 2 host
# cores `runc exec` of an exec probe alone can take longer than deploy/'s
# 3 s, and kubelet then restarted the agent in a loop (each restart a new
# NRI connection, pods created meanwhile not pinned) — a limit of the test
# bed, not of the agent, whose answer the probes still check.
mkdir -p "$W/overlay"
E2E_PROBE_TIMEOUT=${PINION_E2E_PROBE_TIMEOUT:-30}
[[ $E2E_PROBE_TIMEOUT =~ ^[1-9][0-9]{0,3}$ ]] ||
    e2e_die "PINION_E2E_PROBE_TIMEOUT must be a whole number of seconds (1-9999), not '$E2E_PROBE_TIMEOUT'"
sed -n '/^  pinion.yaml: |$/,/^---$/p' "$E2E_REPO/deploy/kubernetes/pinion-daemonset.yaml" | sed '1d;$d' |
    sed 's/^    topologyManagerPolicy: none$/    topologyManagerPolicy: single-numa-node/' >"$W/pinion.yaml"
grep -q 'topologyManagerPolicy: single-numa-node' "$W/pinion.yaml" || e2e_die "deploy/'s config has no topologyManagerPolicy line to set"
# The QoS Resource Manager, for the example plugin's widgets on $NODE
# (its node resource reaches the Node's status through the same token).
printf '    qosResourceManager:\n      enabled: true\n' >>"$W/pinion.yaml"
{
    echo "resources: [\"$(realpath --relative-to="$W/overlay" "$E2E_REPO/deploy")\"]"
    echo "patches:"
    echo "- patch: |-"
    echo "    apiVersion: v1"
    echo "    kind: ConfigMap"
    echo "    metadata: {name: pinion-config, namespace: pinion-system}"
    echo "    data:"
    echo "      pinion.yaml: |"
    sed 's/^    /        /' "$W/pinion.yaml"
    echo "- patch: |-"
    echo "    apiVersion: apps/v1"
    echo "    kind: DaemonSet"
    echo "    metadata: {name: pinion, namespace: pinion-system}"
    echo "    spec:"
    echo "      template:"
    echo "        spec:"
    echo "          containers:"
    echo "          - name: pinion"
    echo "            startupProbe: {timeoutSeconds: $E2E_PROBE_TIMEOUT, periodSeconds: 30, failureThreshold: 40}"
    echo "            livenessProbe: {timeoutSeconds: $E2E_PROBE_TIMEOUT, periodSeconds: 30}"
    echo "            readinessProbe: {timeoutSeconds: $E2E_PROBE_TIMEOUT, periodSeconds: 10}"
} >"$W/overlay/kustomization.yaml"
if out=$(K apply -k "$W/overlay" 2>&1); then
    e2e_result PASS "deploy/: applied with kubectl apply -k (overlay: the agent's config, probe timeouts ${E2E_PROBE_TIMEOUT} s): $(echo "$out" | wc -l) objects"
else
    e2e_result FAIL "deploy/: kubectl apply -k: $out"
fi

# --- the nodes ---------------------------------------------------------------------
# One image for both nodes: each finds its kubeconfig by its name.
E2E_GUEST_MODULES+=(ipvlan)
images=("$KUBELET_DIR/kubelet:/usr/local/bin/kubelet"
    "$(command -v runc):/usr/sbin/runc"
    "$W/pki/ca.crt:/e2e/cluster/ca.crt"
    "$W/images:/e2e/images"
    "$E2E_BIN_DIR/widget-plugin:/usr/local/bin/widget-plugin"
    "$NFD/nfd-topology-updater:/usr/local/bin/nfd-topology-updater"
    "$W/nfd.kubeconfig:/e2e/cluster/nfd.kubeconfig")
e2e_kubeconfig "$W/nfd.kubeconfig" "https://10.0.2.2:$CLUSTER_API_PORT" "$W/pki/ca.crt" \
    "$W/pki/nfd.crt" "$W/pki/nfd.key" || e2e_die "cannot write the exporter's kubeconfig"
for node in "$NODE" "$NODE2"; do
    e2e_kubeconfig "$W/$node.kubeconfig" "https://10.0.2.2:$CLUSTER_API_PORT" "$W/pki/ca.crt" \
        "$W/pki/node-$node.crt" "$W/pki/node-$node.key" || e2e_die "cannot write $node's kubeconfig"
    images+=("$W/$node.kubeconfig:/e2e/cluster/$node.kubeconfig")
done
for bin in containerd containerd-shim-runc-v2 ctr; do
    images+=("$CTRD1/usr/bin/$bin:/opt/containerd1/bin/$bin")
done
for bin in ipvlan host-local loopback; do
    images+=("$CNI/usr/lib/cni/$bin:/opt/cni/bin/$bin")
done
e2e_guest_image "$W/initrd" "${images[@]}" || e2e_die "cannot build the guest image"
# The pods' way to the API server (the kubernetes service address, 10.0.2.1:443,
# forwarded by qemu to this command, one per connection): the API server,
# or — while $W/api-down exists — a connection that is accepted and never
# answered, a hung API server as the agent sees it. kubelet talks to
# 10.0.2.2 directly, so the node itself never loses the API server.
cat >"$W/api-forward" <<EOF
#!/bin/sh
[ -e "$W/api-down" ] && exec sleep 3600
exec busybox nc 127.0.0.1 $CLUSTER_API_PORT
EOF
chmod +x "$W/api-forward"
timeout=${PINION_E2E_CLUSTER_TIMEOUT:-1200}
# boot_node NAME APPEND SHAPE...: boots a node in the background (APPEND:
# more of the kernel command line); its console is $W/NAME.console, its qemu
# job's pid in GUEST_PIDS.
GUEST_PIDS=()
declare -A GUEST_PID
boot_node() {
    local name=$1 append=$2 shape_args
    shift 2
    mapfile -t shape_args < <(e2e_shape_args "$@")
    # qemu's user network: the guest reaches this machine at 10.0.2.2.
    shape_args+=(-netdev "user,id=up,net=10.0.2.0/24,guestfwd=tcp:10.0.2.1:443-cmd:$W/api-forward"
        -device "virtio-net-pci,netdev=up,mac=52:54:00:e2:e0:02")
    e2e_run_guest "$W/$name.console" "$W/initrd" $((timeout + 3600)) \
        "E2E_SHAPE=cluster E2E_CGROUP=v2 E2E_SCENARIOS=cluster-node E2E_SCENARIO_TIMEOUT=$((timeout + 3600)) E2E_NODE_NAME=$name $append" \
        "${shape_args[@]}" &
    GUEST_PIDS+=($!)
    GUEST_PID[$name]=$!
}
e2e_log "booting nodes $NODE and $NODE2 ($(e2e_accel)); image $(du -h "$W/initrd" | cut -f1)"
start=$(date +%s)
WIDGETS=2
boot_node "$NODE" "E2E_WIDGETS=$WIDGETS E2E_NFD=1" "${GUEST_SHAPE[@]}"
boot_node "$NODE2" "" "${GUEST2_SHAPE[@]}"
console=$W/$NODE.console

# guests_alive: every node the bed still needs runs (GUEST_PIDS; the small
# node leaves it when the bed stops it). A wait ends at once when a node's
# guest is gone: the checks wait on both nodes' objects, and a dead node's
# never come (CI, 2026-12-04: pinion-smt hung before its /init and every
# later wait ran out its limit, 30 minutes in all).
guests_alive() {
    local pid
    for pid in "${GUEST_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || return 1; done
    return 0
}
wait_until() { # SECONDS COMMAND...: true once COMMAND is, polling every 2 s
    local limit=$1 t0=$SECONDS
    shift
    while [ $((SECONDS - t0)) -lt "$limit" ]; do
        "$@" && return 0
        guests_alive || return 1
        sleep 2
    done
    "$@"
}
# node_ready NAME: Ready — or its guest is gone (then no longer worth a wait).
node_ready() {
    [ "$(K get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] ||
        ! kill -0 "${GUEST_PID[$1]}" 2>/dev/null
}
agent_ready() {
    [ "$(K -n pinion-system get pods -l app.kubernetes.io/name=pinion --field-selector "spec.nodeName=$1" \
        -o jsonpath='{.items[0].status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
nrt_of() { K get noderesourcetopologies.topology.node.k8s.io "$1" -o json 2>/dev/null; }
nrt() { nrt_of "$NODE"; }
nrt_exists() { nrt_of "$1" >/dev/null; }
for node in "$NODE" "$NODE2"; do
    wait_until "$timeout" node_ready "$node"
    if kill -0 "${GUEST_PID[$node]}" 2>/dev/null && node_ready "$node"; then
        e2e_result PASS "node: $node registered and Ready after $(($(date +%s) - start)) s ($(K get node "$node" -o jsonpath='{.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}, capacity cpu {.status.capacity.cpu}, allocatable cpu {.status.allocatable.cpu}'))"
    else
        e2e_result FAIL "node: $node is not Ready after $(($(date +%s) - start)) s: $(K get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>&1 | head -c 300)"
        tr -d '\r' <"$W/$node.console" | grep -v '^E2E-CPUS' | tail -n 8 | cut -c1-300 | sed "s/^/  $node| /" >&2
    fi
    # The opt-in of deploy/'s DaemonSet, as its comment tells the user.
    K label node "$node" pinion.dev/enabled=true >/dev/null
done
for node in "$NODE" "$NODE2"; do
    t0=$(date +%s)
    if wait_until 900 agent_ready "$node"; then
        e2e_result PASS "deploy/: the DaemonSet's pod runs Pinion on $node and is Ready ($(K -n pinion-system get pods --field-selector "spec.nodeName=$node" -o jsonpath='{.items[0].metadata.name}, pod IP {.items[0].status.podIP}, {.items[0].status.containerStatuses[0].restartCount} restarts'))"
    else
        e2e_result FAIL "deploy/: the DaemonSet's pod is not Ready on $node: $(K -n pinion-system get pods -o wide --field-selector "spec.nodeName=$node" 2>&1 | tail -n +2 | head -3)"
        K -n pinion-system get events --sort-by=.lastTimestamp 2>&1 | tail -n 8 | cut -c1-300 | sed 's/^/  events| /' >&2
        tr -d '\r' <"$W/$node.console" | grep '^E2E-LOG ' | tail -n 15 | cut -c1-400 | sed 's/^/  pinion| /' >&2
    fi
    # Registered with the node's containerd over NRI (its own log line).
    if wait_until 120 grep -q '^E2E-LOG pinion-system/[^ ]*/pinion: .*nri plugin synchronized' "$W/$node.console"; then
        e2e_result PASS "nri: Pinion's pod registered with $node's containerd ($(tr -d '\r' <"$W/$node.console" | grep -m1 'nri runtime configured' | grep -o 'runtime=.*' | head -c 80))"
    else
        e2e_result FAIL "nri: no 'nri plugin synchronized' in the log of Pinion's pod on $node"
    fi
done

# The nodes' NodeResourceTopology objects, as Pinion publishes them.
for node in "$NODE" "$NODE2"; do
    want_zones="node-0 node-1"
    [ "$node" = "$NODE2" ] && want_zones=node-0
    if wait_until 300 nrt_exists "$node"; then
        obj=$(nrt_of "$node")
        K get noderesourcetopologies.topology.node.k8s.io "$node" -o yaml >"$W/nrt-$node.yaml"
        zones=$(echo "$obj" | python3 -c 'import json,sys; o=json.load(sys.stdin); print(" ".join(z["name"] for z in o["zones"]))')
        owner=$(echo "$obj" | python3 -c 'import json,sys; o=json.load(sys.stdin); r=o["metadata"].get("ownerReferences",[]); print(",".join(x["kind"]+"/"+x["name"]+"/"+x["uid"] for x in r))')
        node_uid=$(K get node "$node" -o jsonpath='{.metadata.uid}')
        policy=$(echo "$obj" | python3 -c 'import json,sys; o=json.load(sys.stdin); print({a["name"]: a["value"] for a in o.get("attributes",[])}.get("topologyManagerPolicy",""))')
        if [ "$zones" = "$want_zones" ] && [ "$owner" = "Node/$node/$node_uid" ] && [ "$policy" = single-numa-node ]; then
            e2e_result PASS "nrt: Pinion publishes $node's NodeResourceTopology: zones $zones, owner the Node, topologyManagerPolicy $policy"
        else
            e2e_result FAIL "nrt: $node's object has zones '$zones' (want '$want_zones'), owner '$owner' (Node uid $node_uid), topologyManagerPolicy '$policy'"
        fi
    else
        e2e_result FAIL "nrt: no NodeResourceTopology object for $node after 300 s"
    fi
done
e2e_log "the NodeResourceTopology object of $NODE:"
sed 's/^/  | /' "$W/nrt-$NODE.yaml" >&2



# --- pods the real schedulers send ------------------------------------------------
# apply_pod NAME REQUESTS LIMITS: a pod whose one container `app` (busybox's
# sh, waiting for TERM) asks REQUESTS and LIMITS (YAML flow maps). From the
# caller's environment, all optional: SCHEDULER (default-scheduler),
# ON_NODE (a nodeSelector on that node), ANNOTATIONS (a YAML flow map),
# SAY (shell the container runs first: what it prints to its log).
apply_pod() {
    local annotations=${ANNOTATIONS:-"{}"} selector=""
    [ -n "${ON_NODE:-}" ] && selector="nodeSelector: {kubernetes.io/hostname: $ON_NODE}"
    K apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
  labels: {e2e: workload}
  annotations: $annotations
spec:
  schedulerName: ${SCHEDULER:-default-scheduler}
  $selector
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
  - name: app
    image: pinion.test/busybox:1
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "${SAY:-}trap 'exit 0' TERM; while :; do sleep 1; done"]
    resources:
      requests: $2
      limits: $3
EOF
}
# pod NAME CPUS SCHEDULER [NODE]: a Guaranteed pod of CPUS whole CPUs (on
# NODE when given).
pod() {
    SCHEDULER=$3 ON_NODE=${4:-} apply_pod "$1" "{cpu: \"$2\", memory: 32Mi}" "{cpu: \"$2\", memory: 32Mi}"
}
# state NAME: running | unscheduled | refused (bound, its container not
# created: CreateContainerError and the like) | waiting
state() {
    local phase bound reason sched
    phase=$(K get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null)
    bound=$(K get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null)
    reason=$(K get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}' 2>/dev/null)
    sched=$(K get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].status}' 2>/dev/null)
    if [ "$phase" = Running ]; then
        echo running
    elif [ -z "$bound" ] && [ "$sched" = False ]; then
        echo unscheduled
    elif [ -n "$bound" ] && case $reason in *Error | *BackOff) true ;; *) false ;; esac then
        echo refused
    else
        echo waiting
    fi
}
settled() { [ "$(state "$1")" != waiting ]; }
# pod_cpus NAME: the cpuset of the pod's container (the one running `sh`,
# not the sandbox) as the node's kernel has it (the console's latest
# E2E-CPUS block).
pod_cpus() {
    local uid node
    uid=$(K get pod "$1" -o jsonpath='{.metadata.uid}' 2>/dev/null)
    node=$(K get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null)
    [ -n "$uid" ] && [ -f "$W/$node.console" ] || return 0
    tr -d '\r' <"$W/$node.console" | awk -v uid="$uid" '
        /^E2E-CPUS-BEGIN/ { last = "" }
        /^E2E-CPUS / && index($0, "pod=" uid " ") && $0 ~ /procs=([^ ]*,)?sh(,|$)/ { for (i = 1; i <= NF; i++) if ($i ~ /^cpus=/) last = substr($i, 6) }
        END { print last }'
}
has_cpus() { [ -n "$(pod_cpus "$1")" ]; }
# nodes_of LIST: the NUMA nodes of a cpuset list (CPUs 0-3 are node 0,
# 4-7 node 1 in this shape).
nodes_of() {
    local part a b c
    for part in ${1//,/ }; do
        a=${part%-*} b=${part#*-}
        for ((c = a; c <= b; c++)); do echo $((c / 4)); done
    done | sort -u | tr '\n' ' ' | sed 's/ $//'
}
count_of() { # LIST: how many CPUs
    local part a b n=0
    for part in ${1//,/ }; do
        a=${part%-*} b=${part#*-}
        n=$((n + b - a + 1))
    done
    echo "$n"
}
# nrt_available ZONE: the zone's available cpu in the published object (nothing
# when there is none yet: a missing object is not a Python traceback).
nrt_available() {
    local obj
    obj=$(nrt) || return 0
    echo "$obj" | python3 -c 'import json, sys
o = json.load(sys.stdin)
for z in o["zones"]:
    if z["name"] == sys.argv[1]:
        for r in z.get("resources", []):
            if r["name"] == "cpu": print(r["available"])' "$1"
}
available_is() { [ "$(nrt_available "$1" 2>/dev/null)" = "$2" ]; }

# The workload: two Guaranteed pods, of 1 and then 5 whole CPUs. The node
# has 7 allocatable CPUs (CPU 0 reserved): 3 on NUMA node 0 and 4 on node
# 1; Pinion's own pod requests 50m of them. Under single-numa-node the
# first pod takes a CPU of node 0 (2 left there, 4 on node 1); the second
# fits the node's 5.95 free CPUs but no NUMA node: a NUMA-blind scheduler
# sends it and the node must refuse it, a scheduler reading the published
# NodeResourceTopology leaves it Pending. Records one line per pod in
# $W/workload-PREFIX.
workload() { # SCHEDULER PREFIX
    local scheduler=$1 prefix=$2 name cpus i=0 t0 got
    : >"$W/workload-$prefix"
    for cpus in 1 5; do
        i=$((i + 1))
        name=$prefix-$i
        t0=$SECONDS
        pod "$name" "$cpus" "$scheduler"
        wait_until 600 settled "$name"
        case $(state "$name") in
        running)
            wait_until 60 has_cpus "$name"
            got=$(pod_cpus "$name")
            e2e_log "$scheduler: $name ($cpus CPUs) runs after $((SECONDS - t0)) s on CPUs $got (NUMA node $(nodes_of "$got"))"
            echo "$name running $got $(nodes_of "$got")" >>"$W/workload-$prefix"
            ;;
        refused)
            e2e_log "$scheduler: $name ($cpus CPUs) was bound to $(K get pod "$name" -o jsonpath='{.spec.nodeName}') and refused there: $(K get pod "$name" -o jsonpath='{.status.containerStatuses[0].state.waiting.message}' | head -c 400)"
            echo "$name refused" >>"$W/workload-$prefix"
            ;;
        unscheduled)
            e2e_log "$scheduler: $name ($cpus CPUs) stays Pending: $(K get pod "$name" -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' | head -c 400)"
            echo "$name unscheduled" >>"$W/workload-$prefix"
            ;;
        *)
            e2e_log "$scheduler: $name ($cpus CPUs) neither runs, nor is refused, nor unscheduled after 600 s"
            echo "$name waiting" >>"$W/workload-$prefix"
            ;;
        esac
        # The next pod is scheduled with the object as Pinion has it now.
        [ "$(state "$name")" = running ] && sleep 3
    done
}

# Pinning: a Guaranteed pod of 2 CPUs the default scheduler sends is pinned
# to 2 CPUs of one NUMA node, and the published object follows: the lag
# from the pod running to the object showing its CPUs taken.
pod pinned 2 default-scheduler
t0=$SECONDS
wait_until 600 settled pinned
if [ "$(state pinned)" = running ] && wait_until 60 has_cpus pinned; then
    ran=$SECONDS
    got=$(pod_cpus pinned)
    if [ "$(count_of "$got")" = 2 ] && [ "$(nodes_of "$got" | wc -w)" = 1 ]; then
        e2e_result PASS "pinning: a 2-CPU pod sent by kube-scheduler runs $((ran - t0)) s after it was created, pinned by Pinion to CPUs $got of NUMA node $(nodes_of "$got")"
    else
        e2e_result FAIL "pinning: the 2-CPU pod runs on CPUs '$got' (NUMA nodes '$(nodes_of "$got")')"
    fi
    zone=node-$(nodes_of "$got" | cut -d' ' -f1)
    before=$([ "$zone" = node-0 ] && echo 3 || echo 4)
    if wait_until 60 available_is "$zone" $((before - 2)); then
        e2e_result PASS "nrt: the object shows the pod's 2 CPUs taken on $zone (at most $((SECONDS - ran)) s after the node's cgroup had them, polled every 2 s)"
    else
        e2e_result FAIL "nrt: $zone's available cpu is '$(nrt_available "$zone")' 60 s after the pod ran, not $((before - 2))"
    fi
else
    e2e_result FAIL "pinning: the 2-CPU pod is $(state pinned) after $((SECONDS - t0)) s: $(K get pod pinned -o jsonpath='{.status.containerStatuses[0].state}' | head -c 300)"
fi

# The real exporter (NFD's nfd-topology-updater, the other exporter kubelet
# users run; resource-topology-exporter's module is not served here) reads
# Pinion's podresources socket on $NODE and publishes $NODE-nfd: with the
# pinned pod running, both objects must agree field by field, but for the
# exporter's own documented rules (scripts/e2e/nrt_compare.py).
nfd_agrees() {
    nrt_of "$NODE" >"$W/nrt-pinion.json" && nrt_of "$NODE-nfd" >"$W/nrt-nfd.json" &&
        python3 "$E2E_LIB/nrt_compare.py" "$W/nrt-pinion.json" "$W/nrt-nfd.json" none container example.com/widget >"$W/nrt-compare.txt" 2>&1
}
t0=$SECONDS
if wait_until 300 nfd_agrees; then
    e2e_result PASS "nrt: NFD's nfd-topology-updater, reading Pinion's podresources, publishes $NODE-nfd equal to Pinion's $NODE field by field ($(grep -c '^same' "$W/nrt-compare.txt") fields the same, $(grep -c '^differs' "$W/nrt-compare.txt") explained differences; after $((SECONDS - t0)) s)"
else
    e2e_result FAIL "nrt: NFD's object $NODE-nfd and Pinion's $NODE differ after 300 s: $(grep '^DIFFERS' "$W/nrt-compare.txt" 2>/dev/null | head -3 | tr '\n' ';' | head -c 600)"
    tr -d '\r' <"$console" | grep '^E2E-NFD ' | tail -n 8 | cut -c1-300 | sed 's/^/  nfd| /' >&2
fi
[ -f "$W/nrt-compare.txt" ] && sed 's/^/  nrt vs nfd| /' "$W/nrt-compare.txt" >&2
K delete pod pinned --wait=true --timeout=300s >/dev/null 2>&1
t0=$SECONDS
if wait_until 120 available_is node-0 3 && available_is node-1 4; then
    e2e_result PASS "nrt: the object shows the pod's CPUs free again $((SECONDS - t0)) s after the pod was deleted"
else
    e2e_result FAIL "nrt: available cpu node-0 '$(nrt_available node-0)', node-1 '$(nrt_available node-1)' 120 s after the pod was deleted, not 3 and 4"
fi

# The smallest node: 2 CPUs, 1 reserved, so 1 allocatable — and Pinion's
# own pod requests 50m of it: no Guaranteed pod of a whole CPU fits there
# (the scheduler says Insufficient cpu). A Burstable pod runs on the shared
# pool Pinion gives it (both CPUs: the static policy's shared pool keeps the
# reserved CPU without strict-cpu-reservation).
ON_NODE=$NODE2 apply_pod small "{cpu: 250m, memory: 32Mi}" "{cpu: 500m, memory: 64Mi}"
if wait_until 600 settled small && [ "$(state small)" = running ] && wait_until 60 has_cpus small; then
    got=$(pod_cpus small)
    if [ "$got" = 0-1 ]; then
        e2e_result PASS "pinning: on $NODE2 (2 CPUs, 1 reserved) a Burstable pod runs on Pinion's shared pool, CPUs $got"
    else
        e2e_result FAIL "pinning: on $NODE2 the Burstable pod runs on CPUs '$got', not the shared pool 0-1"
    fi
else
    e2e_result FAIL "pinning: the Burstable pod on $NODE2 is $(state small): $(K get pod small -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message} {.status.containerStatuses[0].state}' | head -c 300)"
fi
K delete pod small --wait=true --timeout=300s >/dev/null 2>&1

# The rest runs on $NODE alone: the small node's guest is stopped (an idle
# emulated guest still takes host CPU from the other) and its Node deleted.
e2e_collect "$W/$NODE2.console" "$NODE2"
kill "${GUEST_PID[$NODE2]}" 2>/dev/null
GUEST_PIDS=("${GUEST_PID[$NODE]}")
pkill -f "qemu-system-x86_64.*E2E_NODE_NAME=$NODE2" 2>/dev/null
K delete node "$NODE2" --wait=false >/dev/null 2>&1
NODE2_COLLECTED=1

# The QoS Resource Manager's node resources (issue 32 item 6): the example
# plugin on $NODE declares $WIDGETS widgets; Pinion puts them in the Node's
# status, the scheduler places a pod asking one, kubelet admits it, and
# Pinion gives it the plugin's environment and an exclusive CPU. A pod
# asking more widgets than are left stays Pending.
widgets_in_status() {
    [ "$(K get node "$NODE" -o jsonpath='{.status.capacity.example\.com/widget}/{.status.allocatable.example\.com/widget}' 2>/dev/null)" = "$WIDGETS/$WIDGETS" ]
}
if wait_until 180 widgets_in_status; then
    e2e_result PASS "node status: $NODE's capacity and allocatable show the plugin's $WIDGETS example.com/widget (written by Pinion; kubelet's own resources untouched: cpu $(K get node "$NODE" -o jsonpath='{.status.allocatable.cpu}'))"
else
    e2e_result FAIL "node status: $NODE shows example.com/widget '$(K get node "$NODE" -o jsonpath='{.status.capacity.example\.com/widget}/{.status.allocatable.example\.com/widget}')', not $WIDGETS/$WIDGETS"
    tr -d '\r' <"$W/$NODE.console" | grep '^E2E-LOG pinion-system' | grep -i 'node status\|widget\|plugin' | tail -n 8 | cut -c1-300 | sed 's/^/  pinion| /' >&2
fi
# widget_pod NAME WIDGETS: a Guaranteed 1-CPU pod asking WIDGETS widgets,
# in its resources only, as for kubelet: NRI does not carry extended
# resources, and Pinion reads them from the pod the API server has
# (nodeResourceTopology.podRequests, with the DaemonSet's token).
widget_pod() {
    SAY='echo WIDGET_ID=$WIDGET_ID; grep Cpus_allowed_list /proc/self/status; ' \
        apply_pod "$1" "{cpu: \"1\", memory: 32Mi, example.com/widget: \"$2\"}" \
        "{cpu: \"1\", memory: 32Mi, example.com/widget: \"$2\"}"
}
widget_pod widget-1 1
if wait_until 600 settled widget-1 && [ "$(state widget-1)" = running ] && wait_until 60 has_cpus widget-1; then
    uid=$(K get pod widget-1 -o jsonpath='{.metadata.uid}')
    got=$(pod_cpus widget-1)
    wait_until 60 grep -q "^E2E-LOG default/widget-1/app: Cpus_allowed_list" "$W/$NODE.console"
    env_line=$(tr -d '\r' <"$W/$NODE.console" | grep -m1 '^E2E-LOG default/widget-1/app: WIDGET_ID=' | sed 's/^E2E-LOG default\/widget-1\/app: //')
    seen=$(tr -d '\r' <"$W/$NODE.console" | grep -m1 '^E2E-LOG default/widget-1/app: Cpus_allowed_list' | awk '{ print $NF }')
    if [ "$env_line" = "WIDGET_ID=$uid/app" ] && [ "$(count_of "$got")" = 1 ] && [ "$seen" = "$got" ]; then
        e2e_result PASS "qrm: a pod asking 1 example.com/widget is scheduled to $(K get pod widget-1 -o jsonpath='{.spec.nodeName}'), admitted by kubelet, and gets the plugin's $env_line and exclusive CPU $got from Pinion"
    else
        e2e_result FAIL "qrm: widget-1 runs with '$env_line' (want WIDGET_ID=$uid/app), cgroup CPUs '$got', its own Cpus_allowed_list '$seen'"
    fi
else
    e2e_result FAIL "qrm: the pod asking 1 widget is $(state widget-1): $(K get pod widget-1 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message} {.status.containerStatuses[0].state}' | head -c 300)"
fi
widget_pod widget-2 $WIDGETS
wait_until 120 settled widget-2
reason=$(K get pod widget-2 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
if [ "$(state widget-2)" = unscheduled ] && echo "$reason" | grep -q 'Insufficient example.com/widget'; then
    e2e_result PASS "qrm: a pod asking $WIDGETS widgets while 1 is left stays Pending: $reason"
else
    e2e_result FAIL "qrm: the pod asking $WIDGETS widgets is $(state widget-2): '$reason'"
fi
K delete pods -l e2e=workload --wait=true --timeout=300s >/dev/null 2>&1

# Admissions while the API server hangs for the agents: the same pods on
# $NODE with the agents' API server reachable, then hung (accepted, never
# answered): the time from the pod's creation to its container running,
# which Pinion's NRI answer is part of, must not grow; and once the API
# server answers again, the published object must catch up.
startup() { # NAME: creates a 1-CPU pod on $NODE, prints ms until it runs
    local t0 t1
    t0=$(date +%s%N)
    pod "$1" 1 default-scheduler "$NODE"
    wait_until 600 settled "$1"
    t1=$(date +%s%N)
    [ "$(state "$1")" = running ] && echo $(((t1 - t0) / 1000000))
}
latencies() { # LABEL: three pods, one after the other; prints their start-up times
    local i ms out=""
    for i in 1 2 3; do
        ms=$(startup "lat-$1-$i")
        out+="${ms:-none} "
    done
    K delete pods -l e2e=workload --wait=true --timeout=300s >/dev/null 2>&1
    echo "$out"
}
mean() { echo "$*" | awk '{ s = 0; n = 0; for (i = 1; i <= NF; i++) if ($i != "none") { s += $i; n++ } if (n == NF && n > 0) printf "%d", s / n; else print "none" }'; }
up=$(latencies up)
: >"$W/api-down"
# Publishing now hangs: the next update's connection is never answered.
down=$(latencies down)
rm -f "$W/api-down"
t0=$SECONDS
caught_up() { available_is node-0 3 && available_is node-1 4; }
e2e_log "start-up (pod created -> running, ms) with the API server up: $up; hung for the agents: $down"
# (The figures go to the note and docs/performance.md; the check is that no
# admission waits for the API server: every pod runs.)
if [ "$(mean $up)" != none ] && [ "$(mean $down)" != none ]; then
    e2e_result PASS "admission: every pod starts while the API server hangs for the agents (start-up mean $(mean $down) ms; with it up $(mean $up) ms)"
else
    e2e_result FAIL "admission: with the API server hung for the agents the pods' start-up is '$down' ms (up: '$up')"
fi
if wait_until 600 caught_up; then
    e2e_result PASS "nrt: the object catches up $((SECONDS - t0)) s after the API server answers again"
else
    e2e_result FAIL "nrt: 600 s after the API server answers again the object shows node-0 '$(nrt_available node-0)', node-1 '$(nrt_available node-1)' available, not 3 and 4"
fi

workload default-scheduler default
B=$(grep -c ' refused$' "$W/workload-default")
K delete pods -l e2e=workload --wait=true --timeout=300s >/dev/null 2>&1
wait_until 120 available_is node-0 3
workload topology-aware aware
A=$(grep -c ' refused$' "$W/workload-aware")
P=2
line="topology-aware scheduling: $A of $P pods refused at admission (default scheduler: $B refused)"
echo "$line"
if [ "$A" = 0 ] && [ "$B" -gt 0 ] && grep -q '^aware-2 unscheduled$' "$W/workload-aware"; then
    e2e_result PASS "$line; the 5-CPU pod stays Pending under the topology-aware scheduler"
else
    e2e_result FAIL "$line; want 0 and more than 0, and aware-2 Pending: $(tr '\n' ';' <"$W/workload-aware")"
fi
K delete pods -l e2e=workload --wait=false >/dev/null 2>&1

if [ "$KEEP_RUNNING" = 1 ]; then
    e2e_log "the cluster is up: KUBECONFIG=$W/admin.kubeconfig $CP/kubectl get nodes; the nodes' consoles: $W/*.console. Press Enter to stop."
    read -r _
fi
pkill -f "qemu-system-x86_64.*$W/" 2>/dev/null
wait "${GUEST_PIDS[@]}" 2>/dev/null
e2e_collect "$W/$NODE.console" "$NODE"
[ -n "${NODE2_COLLECTED:-}" ] || e2e_collect "$W/$NODE2.console" "$NODE2"
e2e_summary
