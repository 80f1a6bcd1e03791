# Host-side helpers for the real peers of the end-to-end scripts (sourced
# after lib.sh): containerd 1.7 from Debian, containerd 2.x and kubelet built
# from their Go modules, the test images. Downloads, module and build caches
# and the binaries live outside the repository (E2E_CACHE, Go's caches under
# $HOME); a second run reuses the binaries. See docs/testing.md.

# e2e_deb_tree SUITE PACKAGE FILE: Debian SUITE's PACKAGE, fetched
# (e2e_fetch_deb) and extracted once into the cache; prints the directory.
# FILE (a path inside the package) tells an extraction is complete. On
# failure it says why on stderr and returns 1.
e2e_deb_tree() {
    local suite=$1 package=$2 file=$3 deb dir
    deb=$(e2e_fetch_deb "$suite" "$package") && [ -n "$deb" ] || return 1
    dir=$E2E_CACHE/$(basename "$deb" .deb)
    if [ ! -e "$dir/$file" ]; then
        rm -rf "$dir.tmp" && dpkg-deb -x "$deb" "$dir.tmp" && rm -rf "$dir" && mv "$dir.tmp" "$dir" || {
            e2e_log "cannot extract $deb"
            return 1
        }
    fi
    echo "$dir"
}

# e2e_containerd_deb SUITE: Debian SUITE's containerd package (e2e_deb_tree;
# usr/bin/containerd, containerd-shim-runc-v2, ctr under it).
e2e_containerd_deb() { e2e_deb_tree "$1" containerd usr/bin/containerd; }

# e2e_test_images DIR: the sandbox (pause) and workload images as OCI
# archives, DIR/pause.tar (pinion.test/pause:1) and DIR/busybox.tar
# (pinion.test/busybox:1), from busybox-static; no registry.
e2e_test_images() {
    mkdir -p "$1" &&
        e2e_oci_image "$1/pause.tar" pinion.test/pause:1 /bin/sleep 1000000000 &&
        e2e_oci_image "$1/busybox.tar" pinion.test/busybox:1 /bin/sh
}

# _e2e_not_cached NAME: true (after saying so) when PINION_E2E_CACHED_ONLY
# is set: a build function then returns instead of building NAME (CI runs a
# bed only when its Go-built peers are already cached: .ci/run).
_e2e_not_cached() {
    [ -n "${PINION_E2E_CACHED_ONLY:-}" ] || return 1
    e2e_log "$1 is not built yet (PINION_E2E_CACHED_ONLY is set)"
}

# e2e_peers_cached 'BUILD [ARG]'...: exits 0 when every Go-built peer that
# the build functions BUILD make is cached and current, 1 when one would have
# to be built first; builds nothing (a bed's --peers-cached, for CI's time
# guard).
e2e_peers_cached() {
    command -v go >/dev/null 2>&1 || exit 1
    local build
    for build in "$@"; do
        # shellcheck disable=SC2086 # a function and its arguments
        PINION_E2E_CACHED_ONLY=1 $build >/dev/null 2>&1 || exit 1
    done
    exit 0
}

# e2e_peers_build 'BUILD [ARG]'...: builds every Go-built peer that the
# build functions BUILD make and runs nothing; exits 0 once all are built and
# current, 1 at the first that cannot be built (a bed's --build-peers: CI
# spends the time it has left on it when a bed was skipped for want of
# them, so that a later run finds them cached). Stopped midway, a build
# leaves no stamp, and Go's build cache keeps what it compiled.
e2e_peers_build() {
    local build
    for build in "$@"; do
        # shellcheck disable=SC2086 # a function and its arguments
        PINION_E2E_CACHED_ONLY='' $build >/dev/null || exit 1
    done
    exit 0
}

# e2e_peer NAME STATUS: a Go-built peer's build ended with STATUS: 0 goes
# on; 2 (not cached under PINION_E2E_CACHED_ONLY, CI's budget) skips the
# whole script, saying which peer; anything else dies.
e2e_peer() {
    [ "$2" = 0 ] && return 0
    [ "$2" = 2 ] && e2e_skip_all "$1 is not built yet and PINION_E2E_CACHED_ONLY is set: run scripts/$E2E_NAME.sh once without it, or with --build-peers"
    e2e_die "cannot build $1 (see above)"
}

# _e2e_go_stamp FILE...: a digest of what a Go build depends on here (the go
# version and the named files), to tell a cached binary is current.
_e2e_go_stamp() {
    { go version; cat "$@"; } | sha256sum | cut -d' ' -f1
}

# e2e_kubelet_build: kubelet (`go build k8s.io/kubernetes/cmd/kubelet`) and
# podresources-client from the module interop/kubelet-node, into
# E2E_CACHE/kubelet-node; prints that directory. Rebuilds only when go.mod,
# go.sum, the client's source or the go version changed (then Go's build
# cache under $HOME leaves only the link). The version kubelet reports is
# the module's k8s.io/kubernetes version.
e2e_kubelet_build() {
    local mod=$E2E_REPO/interop/kubelet-node out=$E2E_CACHE/kubelet-node
    local stamp version
    command -v go >/dev/null 2>&1 || {
        e2e_log "go is not installed"
        return 1
    }
    stamp=$(_e2e_go_stamp "$mod/go.mod" "$mod/go.sum" "$mod"/podresources-client/*.go)
    if [ -x "$out/kubelet" ] && [ -x "$out/podresources-client" ] &&
        [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "$out"
        return 0
    fi
    _e2e_not_cached kubelet && return 2
    version=$(cd "$mod" && go list -m -f '{{.Version}}' k8s.io/kubernetes) || return 1
    local minor=${version#v1.}
    minor=${minor%%.*}
    mkdir -p "$out" && rm -f "$out/stamp"
    e2e_log "go build k8s.io/kubernetes/cmd/kubelet ($version) and podresources-client in $mod"
    (cd "$mod" && CGO_ENABLED=0 go build -trimpath -o "$out/kubelet" \
        -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
        k8s.io/kubernetes/cmd/kubelet &&
        CGO_ENABLED=0 go build -trimpath -o "$out/podresources-client" ./podresources-client) >&2 || {
        e2e_log "building kubelet failed"
        return 1
    }
    echo "$stamp" >"$out/stamp"
    echo "$out"
}

# e2e_containerd2_build VERSION: containerd VERSION (2.x) from the Go module
# github.com/containerd/containerd/v2 (`go install …/cmd/containerd@VERSION`,
# with the shim and ctr; no cgo: btrfs is left out, as upstream does without
# cgo), into E2E_CACHE/containerd-VERSION/bin; prints that directory.
e2e_containerd2_build() {
    local version=$1 out=$E2E_CACHE/containerd-$1/bin
    if [ -x "$out/containerd" ] && [ -x "$out/containerd-shim-runc-v2" ] && [ -x "$out/ctr" ]; then
        echo "$out"
        return 0
    fi
    command -v go >/dev/null 2>&1 || {
        e2e_log "go is not installed"
        return 1
    }
    _e2e_not_cached "containerd $version" && return 2
    local m=github.com/containerd/containerd/v2
    e2e_log "go install $m/cmd/{containerd,containerd-shim-runc-v2,ctr}@$version"
    mkdir -p "$out.tmp" &&
        (cd "$E2E_CACHE" && GOBIN=$out.tmp CGO_ENABLED=0 go install -trimpath \
            -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
            -ldflags "-s -w -X $m/version.Version=$version" \
            "$m/cmd/containerd@$version" "$m/cmd/containerd-shim-runc-v2@$version" "$m/cmd/ctr@$version") >&2 &&
        rm -rf "$out" && mv "$out.tmp" "$out" || {
        e2e_log "building containerd $version failed"
        return 1
    }
    echo "$out"
}
