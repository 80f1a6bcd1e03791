#!/usr/bin/env bash
# Builds the DaemonSet's image (deploy/kubernetes/pinion-daemonset.yaml names
# `image: pinion:latest`) from the built `pinion` and `pinion-agent`, with no
# registry and no container engine: the root filesystem is the two binaries
# plus the shared libraries they link (as `ldd` lists them) and a minimal
# /etc, packed as one layer of an OCI image layout, written as a tarball
# that `ctr -n k8s.io images import` (containerd) and `podman load` accept.
#
#   scripts/build-image.sh [--profile release|debug|NAME] [--bin-dir DIR]
#                          [--out FILE] [--tag NAME:TAG] [--no-build]
#
# Defaults: the release profile (built here unless --no-build), the output
# target/pinion-image.oci.tar, the tag pinion:latest. --bin-dir takes the
# binaries from DIR instead (no build). On the node:
#   ctr -n k8s.io images import target/pinion-image.oci.tar
# Needs: bash, tar, gzip, sha256sum, ldd (glibc's), coreutils. Reproducible
# for the same binaries: file times are SOURCE_DATE_EPOCH (default 0).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
bin_dir=
out=target/pinion-image.oci.tar
tag=pinion:latest
build=1
while [ $# -gt 0 ]; do
    case "$1" in
    --profile) profile=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; build=0; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for tool in tar gzip sha256sum; do
    command -v "$tool" >/dev/null || { echo "build-image: $tool is missing" >&2; exit 1; }
done
if [ -z "$bin_dir" ]; then
    bin_dir=target/$profile
    [ "$profile" = dev ] && bin_dir=target/debug
    if [ "$build" = 1 ]; then
        if [ "$profile" = debug ] || [ "$profile" = dev ]; then
            cargo build --locked -p pinion -p pinion-agent
        else
            cargo build --locked --profile "$profile" -p pinion -p pinion-agent
        fi
    fi
fi
for bin in pinion pinion-agent; do
    [ -x "$bin_dir/$bin" ] || { echo "build-image: $bin_dir/$bin is missing (build it, or give --bin-dir)" >&2; exit 1; }
done

name=${tag%:*}
version=${tag##*:}
[ "$name" = "$tag" ] && version=latest
case "$name" in
*/*) full=$name ;;
*) full=docker.io/library/$name ;;
esac
epoch=${SOURCE_DATE_EPOCH:-0}
arch=$(uname -m)
case "$arch" in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
layout=$work/layout
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/run" \
    "$rootfs/var/lib" "$layout/blobs/sha256"
chmod 1777 "$rootfs/tmp"
install -m 0755 "$bin_dir/pinion" "$bin_dir/pinion-agent" "$rootfs/usr/local/bin/"
# The shared libraries the binaries link, at the paths the loader expects.
# (A statically linked binary lists none: `ldd` says so and fails.)
for bin in pinion pinion-agent; do
    { ldd "$bin_dir/$bin" 2>/dev/null || true; } | grep -o '/[^ ]*' | while read -r lib; do
        [ -e "$rootfs$lib" ] && continue
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
done
printf 'root:x:0:0:root:/:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"

# The layer: a deterministic tar (sorted, fixed owner and time), gzipped.
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$rootfs" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -9 <"$work/layer.tar" >"$work/layer.tar.gz"

# Stores a file as a blob; prints its digest.
blob() {
    local digest
    digest=$(sha256sum "$1" | cut -d' ' -f1)
    cp "$1" "$layout/blobs/sha256/$digest"
    echo "$digest"
}
size() { stat -c %s "$1"; }

layer_digest=$(blob "$work/layer.tar.gz")
layer_size=$(size "$work/layer.tar.gz")
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
cat >"$work/config.json" <<JSON
{"architecture":"$arch","os":"linux","created":"$created","config":{"Entrypoint":["/usr/local/bin/pinion"],"Cmd":["agent"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created":"$created","created_by":"scripts/build-image.sh"}]}
JSON
config_digest=$(blob "$work/config.json")
config_size=$(size "$work/config.json")
cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config_digest","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer_digest","size":$layer_size}]}
JSON
manifest_digest=$(blob "$work/manifest.json")
manifest_size=$(size "$work/manifest.json")
cat >"$layout/index.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest_digest","size":$manifest_size,"platform":{"architecture":"$arch","os":"linux"},"annotations":{"io.containerd.image.name":"$full:$version","org.opencontainers.image.ref.name":"$version"}}]}
JSON
printf '{"imageLayoutVersion":"1.0.0"}\n' >"$layout/oci-layout"

mkdir -p "$(dirname "$out")"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$layout" -cf "$out" .
echo "build-image: $out ($full:$version, manifest sha256:$manifest_digest, $(size "$out") bytes)"
