# Host-side helpers of scripts/e2e-cluster.sh (sourced after lib.sh and
# peers.sh): a real Kubernetes control plane on this machine — Debian
# trixie's etcd, kube-apiserver, kube-controller-manager and kube-scheduler
# built from the same k8s.io/kubernetes module as the kubelet
# (interop/kubelet-node), scheduler-plugins' scheduler with
# NodeResourceTopologyMatch (interop/scheduler-plugins) — with TLS and
# credentials generated per run. Binaries and Go's caches live outside the
# repository (E2E_CACHE); a second run reuses them. See docs/testing.md.

# The API server's port on this machine; a guest reaches it at 10.0.2.2
# (qemu's user network).
CLUSTER_API_PORT=${PINION_E2E_API_PORT:-16443}
CLUSTER_ETCD_PORT=${PINION_E2E_ETCD_PORT:-12379}
# The service range starts at 10.0.2.1: the kubernetes service's address,
# which the guests' user network forwards to the API server (a cluster
# without kube-proxy still reaches it; scripts/e2e-cluster.sh).
CLUSTER_SERVICE_CIDR=10.0.2.0/28
# The NodeResourceTopology CRD's module (the version scheduler-plugins
# v0.30.6 requires); the CRD is read from it at run time, never committed.
NRT_API_MODULE=github.com/k8stopologyawareschedwg/noderesourcetopology-api
NRT_API_VERSION=v0.1.2

# _e2e_k8s_build MODULE_DIR OUT_DIR BIN...: `go build` of
# k8s.io/kubernetes/cmd/BIN for every BIN, stamped with the module's
# k8s.io/kubernetes version (as upstream's build stamps it).
_e2e_k8s_build() {
    local mod=$1 out=$2
    shift 2
    local version minor bin
    version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes) || return 1
    minor=${version#v1.}
    minor=${minor%%.*}
    for bin in "$@"; do
        e2e_log "go build k8s.io/kubernetes/cmd/$bin ($version) in $mod"
        (cd "$mod" && CGO_ENABLED=0 go build -trimpath -o "$out/$bin" \
            -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
            "k8s.io/kubernetes/cmd/$bin") >&2 || return 1
    done
}

# e2e_control_plane_build: kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl from interop/kubelet-node (the kubelet's
# module, so the same release), into E2E_CACHE/control-plane; prints it.
e2e_control_plane_build() {
    local mod=$E2E_REPO/interop/kubelet-node out=$E2E_CACHE/control-plane
    local bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl) stamp b ok=1
    stamp=$(_e2e_go_stamp "$mod/go.mod" "$mod/go.sum")
    for b in "${bins[@]}"; do [ -x "$out/$b" ] || ok=0; done
    if [ "$ok" = 1 ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "$out"
        return 0
    fi
    _e2e_not_cached "the control plane" && return 2
    mkdir -p "$out" && rm -f "$out/stamp"
    _e2e_k8s_build "$mod" "$out" "${bins[@]}" || {
        e2e_log "building the control plane failed"
        return 1
    }
    echo "$stamp" >"$out/stamp"
    echo "$out"
}

# _e2e_interop_build DIR MODULE PACKAGE BINARY [VERSION_VAR]: go build of
# PACKAGE in the module interop/DIR into E2E_CACHE/DIR/BINARY, static,
# MODULE's version stamped into VERSION_VAR when given; prints that
# directory. A second run with the same go.mod, go.sum and Go builds nothing.
_e2e_interop_build() {
    local dir=$1 module=$2 package=$3 binary=$4 version_var=${5:-}
    local mod=$E2E_REPO/interop/$dir out=$E2E_CACHE/$dir stamp version ldflags="-s -w"
    stamp=$(_e2e_go_stamp "$mod/go.mod" "$mod/go.sum")
    if [ -x "$out/$binary" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "$out"
        return 0
    fi
    _e2e_not_cached "$package" && return 2
    version=$(cd "$mod" && go list -m -f '{{.Version}}' "$module") || return 1
    [ -z "$version_var" ] || ldflags+=" -X $version_var=$version"
    mkdir -p "$out" && rm -f "$out/stamp"
    e2e_log "go build $package ($version) in $mod"
    (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$binary" "$package") >&2 || {
        e2e_log "building $package failed"
        return 1
    }
    echo "$stamp" >"$out/stamp"
    echo "$out"
}

# e2e_scheduler_plugins_build: scheduler-plugins' kube-scheduler
# (sigs.k8s.io/scheduler-plugins/cmd/scheduler, interop/scheduler-plugins)
# into E2E_CACHE/scheduler-plugins; prints that directory.
e2e_scheduler_plugins_build() {
    _e2e_interop_build scheduler-plugins sigs.k8s.io/scheduler-plugins \
        sigs.k8s.io/scheduler-plugins/cmd/scheduler kube-scheduler
}

# e2e_nfd_build: NFD's nfd-topology-updater, a NodeResourceTopology exporter
# that reads podresources (interop/nfd-topology-updater), into
# E2E_CACHE/nfd-topology-updater; prints that directory.
e2e_nfd_build() {
    _e2e_interop_build nfd-topology-updater sigs.k8s.io/node-feature-discovery \
        sigs.k8s.io/node-feature-discovery/cmd/nfd-topology-updater nfd-topology-updater \
        sigs.k8s.io/node-feature-discovery/pkg/version.version
}

# e2e_etcd_deb: Debian trixie's etcd-server (e2e_deb_tree; usr/bin/etcd).
e2e_etcd_deb() { e2e_deb_tree trixie etcd-server usr/bin/etcd; }

# e2e_nrt_crd: the NodeResourceTopology CRD file of the API module (Go's
# module cache; downloaded the first time).
e2e_nrt_crd() {
    local dir
    dir=$(cd "$E2E_REPO/interop/scheduler-plugins" &&
        go mod download -json "$NRT_API_MODULE@$NRT_API_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || return 1
    [ -f "$dir/manifests/crd.yaml" ] || {
        e2e_log "$NRT_API_MODULE@$NRT_API_VERSION has no manifests/crd.yaml"
        return 1
    }
    echo "$dir/manifests/crd.yaml"
}

# _e2e_cert DIR NAME SUBJECT [SAN]: a key and a certificate signed by
# DIR/ca, for a client (no SAN) or a server (SAN given).
_e2e_cert() {
    local dir=$1 name=$2 subject=$3 san=${4:-}
    local ext=$dir/$name.ext
    if [ -n "$san" ]; then
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$san" >"$ext"
    else
        printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$ext"
    fi
    openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -subj "$subject" \
        -out "$dir/$name.csr" 2>/dev/null &&
        openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null
}

# e2e_cluster_pki DIR: this run's CA, the servers' certificates (etcd, the
# API server for 127.0.0.1, 10.0.2.2 and the kubernetes service), the
# clients' (admin, scheduler, controller manager, API server to etcd and to
# kubelets, NFD's topology-updater, one per node named in NODES) and the
# service-account key pair.
e2e_cluster_pki() {
    local dir=$1
    shift
    mkdir -p "$dir" || return 1
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$dir/ca.key" -days 2 \
        -subj "/CN=pinion-e2e-ca" -out "$dir/ca.crt" 2>/dev/null || return 1
    _e2e_cert "$dir" etcd "/CN=etcd" "IP:127.0.0.1,DNS:localhost" &&
        _e2e_cert "$dir" apiserver "/CN=kube-apiserver" \
            "IP:127.0.0.1,IP:10.0.2.1,IP:10.0.2.2,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" &&
        _e2e_cert "$dir" apiserver-etcd "/CN=kube-apiserver-etcd-client" &&
        _e2e_cert "$dir" apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client" &&
        _e2e_cert "$dir" admin "/O=system:masters/CN=pinion-e2e-admin" &&
        _e2e_cert "$dir" scheduler "/CN=system:kube-scheduler" &&
        _e2e_cert "$dir" controller-manager "/CN=system:kube-controller-manager" &&
        _e2e_cert "$dir" nfd "/CN=pinion-e2e-nfd-topology-updater" || return 1
    local node
    for node in "$@"; do
        _e2e_cert "$dir" "node-$node" "/O=system:nodes/CN=system:node:$node" || return 1
    done
    openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null &&
        openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
}

# e2e_kubeconfig OUT SERVER CA CERT KEY: a kubeconfig with the files'
# contents embedded (it can travel into a guest).
e2e_kubeconfig() {
    local out=$1 server=$2 ca=$3 cert=$4 key=$5
    cat >"$out" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$ca")
users:
- name: e2e
  user:
    client-certificate-data: $(base64 -w0 "$cert")
    client-key-data: $(base64 -w0 "$key")
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
EOF
}

# e2e_control_plane_start DIR CP SP ETCD: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler (profile default-scheduler) and
# scheduler-plugins' scheduler (profile topology-aware, with
# NodeResourceTopologyMatch) as background processes logging into DIR;
# their pids in DIR/pids. Waits (bounded) until the API server is ready.
# DIR/admin.kubeconfig is the cluster's admin.
e2e_control_plane_start() {
    local dir=$1 cp=$2 sp=$3 etcd=$4 pki=$1/pki
    local api=https://127.0.0.1:$CLUSTER_API_PORT
    local port holder
    for port in "$CLUSTER_API_PORT" "$CLUSTER_ETCD_PORT" "$((CLUSTER_ETCD_PORT + 1))"; do
        holder=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'users:.*' | head -1)
        if [ -n "$holder" ]; then
            e2e_log "port $port is taken ($holder): another cluster still running? (PINION_E2E_API_PORT and PINION_E2E_ETCD_PORT choose others)"
            return 1
        fi
    done
    mkdir -p "$dir/etcd" && chmod 700 "$dir/etcd" && : >"$dir/pids" || return 1
    "$etcd/usr/bin/etcd" --name e2e --data-dir "$dir/etcd" \
        --listen-client-urls "https://127.0.0.1:$CLUSTER_ETCD_PORT" \
        --advertise-client-urls "https://127.0.0.1:$CLUSTER_ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$((CLUSTER_ETCD_PORT + 1))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((CLUSTER_ETCD_PORT + 1))" \
        --initial-cluster "e2e=http://127.0.0.1:$((CLUSTER_ETCD_PORT + 1))" \
        --cert-file "$pki/etcd.crt" --key-file "$pki/etcd.key" \
        --client-cert-auth --trusted-ca-file "$pki/ca.crt" \
        --unsafe-no-fsync >"$dir/etcd.log" 2>&1 &
    echo $! >>"$dir/pids"
    "$cp/kube-apiserver" --bind-address 0.0.0.0 --secure-port "$CLUSTER_API_PORT" \
        --advertise-address 10.0.2.2 \
        --etcd-servers "https://127.0.0.1:$CLUSTER_ETCD_PORT" --etcd-cafile "$pki/ca.crt" \
        --etcd-certfile "$pki/apiserver-etcd.crt" --etcd-keyfile "$pki/apiserver-etcd.key" \
        --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
        --client-ca-file "$pki/ca.crt" \
        --kubelet-client-certificate "$pki/apiserver-kubelet.crt" \
        --kubelet-client-key "$pki/apiserver-kubelet.key" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$pki/sa.pub" \
        --service-account-signing-key-file "$pki/sa.key" \
        --service-cluster-ip-range "$CLUSTER_SERVICE_CIDR" \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --allow-privileged=true >"$dir/kube-apiserver.log" 2>&1 &
    echo $! >>"$dir/pids"
    e2e_kubeconfig "$dir/admin.kubeconfig" "$api" "$pki/ca.crt" "$pki/admin.crt" "$pki/admin.key" &&
        e2e_kubeconfig "$dir/scheduler.kubeconfig" "$api" "$pki/ca.crt" "$pki/scheduler.crt" "$pki/scheduler.key" &&
        e2e_kubeconfig "$dir/controller-manager.kubeconfig" "$api" "$pki/ca.crt" "$pki/controller-manager.crt" "$pki/controller-manager.key" ||
        return 1
    local i
    for i in $(seq 1 180); do
        "$cp/kubectl" --kubeconfig "$dir/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1 && break
        sleep 1
    done
    "$cp/kubectl" --kubeconfig "$dir/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1 || {
        e2e_log "the API server is not ready after 180 s; its log ends with:"
        tail -n 15 "$dir/kube-apiserver.log" >&2
        return 1
    }
    "$cp/kube-controller-manager" --kubeconfig "$dir/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
        --use-service-account-credentials \
        --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
        --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
        --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
        >"$dir/kube-controller-manager.log" 2>&1 &
    echo $! >>"$dir/pids"
    "$cp/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
        --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
        --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
        --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
        >"$dir/kube-scheduler.log" 2>&1 &
    echo $! >>"$dir/pids"
    # The second scheduler: scheduler-plugins' binary, one profile with the
    # NodeResourceTopologyMatch filter and score (its default, the
    # LeastAllocated strategy), pods opt in with schedulerName.
    cat >"$dir/topology-aware.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: $dir/scheduler.kubeconfig
profiles:
- schedulerName: topology-aware
  plugins:
    filter:
      enabled:
      - name: NodeResourceTopologyMatch
    score:
      enabled:
      - name: NodeResourceTopologyMatch
  pluginConfig:
  - name: NodeResourceTopologyMatch
    args:
      scoringStrategy:
        type: LeastAllocated
EOF
    "$sp/kube-scheduler" --config "$dir/topology-aware.yaml" \
        --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
        --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 0 >"$dir/topology-aware.log" 2>&1 &
    echo $! >>"$dir/pids"
}

# e2e_control_plane_stop DIR: stops what e2e_control_plane_start started,
# the clients first and etcd last; what has not exited 15 s after its
# SIGTERM (the API server waits on requests, and on etcd once it is gone)
# gets SIGKILL.
e2e_control_plane_stop() {
    local pid i
    [ -f "$1/pids" ] || return 0
    for pid in $(tac "$1/pids"); do
        kill "$pid" 2>/dev/null
        for i in $(seq 1 15); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        kill -9 "$pid" 2>/dev/null
    done
    rm -f "$1/pids"
}
