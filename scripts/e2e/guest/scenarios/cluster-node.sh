# A Kubernetes node of a real cluster (scripts/e2e-cluster.sh): Debian
# trixie's containerd 1.7 with NRI on, a pod network (the ipvlan CNI plugin
# on the guest's uplink, qemu's user network), and upstream kubelet joined
# to the API server on the host. Pinion is not started here: the host
# applies deploy/'s DaemonSet, whose pod runs Pinion from the image this
# guest imported. The scenario then reports, until the host stops the
# guest, every container's cpuset (`E2E-CPUS` lines) for the host's checks.
#
# Kernel command line: E2E_NODE_NAME. Files: /e2e/cluster/NAME.kubeconfig (each
# node's client certificate), /e2e/cluster/ca.crt, /e2e/images/*.tar, the CNI
# plugins in /opt/cni/bin, containerd under /opt/containerd1/bin.

export PATH="/opt/containerd1/bin:$PATH"
S=$E2E_STATE
E2E_RUNC=$(command -v runc)
NODE=${E2E_NODE_NAME:?E2E_NODE_NAME is not set}
# kubelet's reservation, the same as deploy/kubelet/kubelet-config.snippet.yaml
# and the agent's config in deploy/ (ceil(500m + 500m) = 1 CPU).
UPLINK_MAC=52:54:00:e2:e0:02

# The uplink: the NIC with that address, on qemu's user network (the host is
# 10.0.2.2, the API server's service address 10.0.2.1 is forwarded to it).
uplink=""
for dev in /sys/class/net/*; do
    [ "$(cat "$dev/address" 2>/dev/null)" = "$UPLINK_MAC" ] && uplink=$(basename "$dev")
done
if [ -z "$uplink" ]; then
    fail "uplink" "no NIC with address $UPLINK_MAC"
    exit 0
fi
ip link set "$uplink" up && ip addr add 10.0.2.15/24 dev "$uplink" && ip route add default via 10.0.2.2
NODE_IP=10.0.2.15

no_pivot=false
case $(awk '$2 == "/" { print $3; exit }' /proc/mounts) in
rootfs | ramfs | tmpfs) no_pivot=true ;;
esac

# Pods get addresses of the user network through ipvlan (no bridge, no NAT:
# qemu routes them as it routes the guest's own).
mkdir -p /etc/cni/net.d /var/run/nri /etc/nri/conf.d /opt/nri/plugins /var/lib/kubelet
cat >/etc/cni/net.d/10-e2e.conflist <<EOF
{"cniVersion": "0.4.0", "name": "e2e",
 "plugins": [{"type": "ipvlan", "master": "$uplink", "mode": "l2",
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.0.2.0/24",
     "rangeStart": "10.0.2.64", "rangeEnd": "10.0.2.127", "gateway": "10.0.2.2"}]],
     "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF

# containerd 1.7 with NRI on, at its default paths: the DaemonSet's hostPath
# is /var/run/nri (deploy/containerd/config.toml.snippet).
cat >"$S/containerd.toml" <<EOF
version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.overlayfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

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
        SystemdCgroup = false
        NoPivotRoot = $no_pivot
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "/var/run/nri/nri.sock"
  plugin_path = "/opt/nri/plugins"
  plugin_config_path = "/etc/nri/conf.d"
  # 10 s, not the default 2 s of deploy/containerd/config.toml.snippet:
  # this node is an emulated (TCG) guest many times slower than hardware,
  # where an answer took more than 2 s and containerd dropped the plugin and
  # created the container without Pinion's cpuset (fail-open).
  plugin_registration_timeout = "10s"
  plugin_request_timeout = "10s"
EOF
containerd --config "$S/containerd.toml" >>"$S/containerd.log" 2>&1 &
if ! wait_for 120 ctr version; then
    fail "containerd runs" "$(tail -n 5 "$S/containerd.log")"
    exit 0
fi
for image in /e2e/images/*.tar; do
    out=$(ctr -n k8s.io images import --snapshotter native "$image" 2>&1) ||
        { fail "image $(basename "$image") imported" "$out"; exit 0; }
done
pass "containerd 1.7 with NRI, images imported ($(ctr -n k8s.io images ls -q | grep -v '^sha256:' | tr '\n' ' '))"

cat >"$S/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: /e2e/cluster/ca.crt
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
failSwapOn: false
localStorageCapacityIsolation: false
syncFrequency: 5s
nodeStatusUpdateFrequency: 5s
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
  imagefs.inodesFree: "0%"
imageGCHighThresholdPercent: 100
cpuManagerPolicy: none
topologyManagerPolicy: none
kubeReserved:
  cpu: 500m
systemReserved:
  cpu: 500m
EOF
kubelet --config "$S/kubelet.yaml" --kubeconfig "/e2e/cluster/$NODE.kubeconfig" \
    --hostname-override "$NODE" --node-ip "$NODE_IP" --v=2 >>"$S/kubelet.log" 2>&1 &
if ! wait_for 180 wget -q -O /dev/null http://127.0.0.1:10248/healthz; then
    fail "kubelet runs" "$(grep '^E' "$S/kubelet.log" | tail -n 5 | cut -c1-300)"
    exit 0
fi
pass "kubelet runs as node $NODE of the cluster (API server at 10.0.2.2)"
# E2E_WIDGETS=N: the example resource plugin (pinion-e2e's widget-plugin)
# serves N widgets, example.com/widget, to the QoS Resource Manager of the
# agent in Pinion's pod, registering in the directory of its hostPath.
if [ -n "${E2E_WIDGETS:-}" ]; then
    mkdir -p /var/lib/pinion/plugins_registry
    widget-plugin --socket-dir /var/lib/pinion/plugins_registry --count "$E2E_WIDGETS" >>"$S/widget.log" 2>&1 &
    note "widget-plugin serves $E2E_WIDGETS widgets"
fi
# E2E_NFD=1: NFD's nfd-topology-updater, a real NodeResourceTopology
# exporter that reads podresources, run as its users run it beside kubelet
# but against Pinion's podresources socket (deploy/'s hostPath), publishing
# the object NODE-nfd every 10 s with its own credentials; the host compares
# it with Pinion's NODE field by field. It exits while the socket is not
# there yet (Pinion's pod starts later), so it is started again. Its log
# reaches the console as E2E-NFD lines, less the per-pod scanning lines.
if [ -n "${E2E_NFD:-}" ]; then
    (while :; do
        NODE_NAME=$NODE-nfd KUBERNETES_NAMESPACE=default nfd-topology-updater \
            -kubeconfig /e2e/cluster/nfd.kubeconfig \
            -podresources-socket /var/lib/pinion/pod-resources/pinion.sock \
            -kubelet-config-uri "file://$S/kubelet.yaml" -kubelet-state-dir "" -config "" \
            -sleep-interval 10s -metrics 0 -grpc-health 0 2>&1 |
            while IFS= read -r line; do
                case $line in *'scanning pod'* | *'podFingerprint calculated'*) ;; *) echo "E2E-NFD $line" ;; esac
            done
        sleep 5
    done) &
    note "nfd-topology-updater publishes $NODE-nfd from Pinion's podresources"
fi
echo "E2E-NODE-UP $NODE"

# Until the host stops the guest: every container's cpuset and memory
# nodes, as the kernel has them, whenever they change; the log lines of
# the containers of namespace pinion-system (Pinion's own pod) and of the
# pods named widget-* as they come (the API server cannot reach this
# kubelet for `kubectl logs`); and containerd's warnings and errors
# (`E2E-CTRD` lines: why it refused a plugin's update or dropped the
# plugin, which Pinion's log cannot tell).
last=""
ctrd_seen=0
mkdir -p "$S/logs-seen"
while :; do
    ctrd_total=$(wc -l <"$S/containerd.log")
    if [ "$ctrd_total" -gt "$ctrd_seen" ]; then
        tail -n +"$((ctrd_seen + 1))" "$S/containerd.log" | head -n "$((ctrd_total - ctrd_seen))" |
            grep 'level=warn\|level=error' | cut -c1-600 | sed 's/^/E2E-CTRD /'
        ctrd_seen=$ctrd_total
    fi
    for f in /var/log/pods/pinion-system_*/*/*.log /var/log/pods/default_widget-*/*/*.log; do
        [ -f "$f" ] || continue
        key=$(echo "$f" | tr '/' '_')
        seen=$(cat "$S/logs-seen/$key" 2>/dev/null || echo 0)
        total=$(wc -l <"$f")
        if [ "$total" -gt "$seen" ]; then
            # /var/log/pods/NAMESPACE_POD_UID/CONTAINER/N.log -> NAMESPACE/POD/CONTAINER
            label=$(echo "$f" | sed 's|^/var/log/pods/\([^_]*\)_\([^_]*\)_[^/]*/\([^/]*\)/.*|\1/\2/\3|')
            tail -n +"$((seen + 1))" "$f" | head -n "$((total - seen))" |
                sed "s|^[^ ]* [a-z]* [FP] |E2E-LOG $label: |"
            echo "$total" >"$S/logs-seen/$key"
        fi
    done
    now=$(for d in /sys/fs/cgroup/kubepods*/pod* /sys/fs/cgroup/kubepods*/*/pod*; do
        [ -d "$d" ] || continue
        for c in "$d"/*/; do
            [ -f "$c/cpuset.cpus.effective" ] || continue
            # procs: the commands in it (the sandbox is the pause image's
            # `sleep`, the test pods' containers run `sh`).
            procs=$(for pid in $(cat "$c/cgroup.procs"); do cat "/proc/$pid/comm" 2>/dev/null; done | sort -u | tr '\n' ',' | sed 's/,$//')
            echo "E2E-CPUS node=$NODE pod=${d##*/pod} container=$(basename "$c") cpus=$(cat "$c/cpuset.cpus.effective") mems=$(cat "$c/cpuset.mems.effective") procs=$procs"
        done
    done | sort)
    if [ "$now" != "$last" ]; then
        echo "E2E-CPUS-BEGIN $NODE $(cut -d' ' -f1 /proc/uptime)"
        [ -n "$now" ] && echo "$now"
        echo "E2E-CPUS-END $NODE"
        last=$now
    fi
    sleep 3
done
