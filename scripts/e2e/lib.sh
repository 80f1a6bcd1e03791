# Host-side helpers of the end-to-end scripts (scripts/e2e-vm.sh,
# scripts/e2e-containerd.sh); sourced, not run. See docs/testing.md.
#
# Results: every check prints one line `RESULT PASS|FAIL|SKIP <where>: <what>`
# (inside a guest it comes back over the serial console); `e2e_summary` counts
# them and prints `N passed, N failed, N skipped` as the last line.

E2E_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
E2E_LIB=$E2E_REPO/scripts/e2e
# Downloads (Debian packages) live outside the repository.
E2E_CACHE=${PINION_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pinion-e2e}
# Where the binaries come from: a cargo profile directory under target/.
E2E_PROFILE=${PINION_E2E_PROFILE:-release}
E2E_BIN_DIR=${PINION_E2E_BIN_DIR:-$E2E_REPO/target/$E2E_PROFILE}
E2E_RESULTS=""
E2E_DIAG=""

e2e_log() { printf '%s: %s\n' "${E2E_NAME:-e2e}" "$*" >&2; }

# Prints a skip notice and exits 0 (the machine cannot run these tests).
e2e_skip_all() {
    printf '%s: skipped: %s\n' "${E2E_NAME:-e2e}" "$*"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
}

e2e_die() {
    printf '%s: error: %s\n' "${E2E_NAME:-e2e}" "$*" >&2
    exit 1
}

# Root, and the Debian packages named (installed with apt-get when missing).
e2e_require() {
    if [ "$(id -u)" -ne 0 ]; then
        e2e_skip_all "needs root (qemu guests, cgroups, a container runtime); run it with sudo"
    fi
    local missing=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    e2e_log "installing ${missing[*]}"
    if ! command -v apt-get >/dev/null 2>&1; then
        e2e_skip_all "missing Debian packages ${missing[*]} and no apt-get to install them"
    fi
    # A stale or absent package list makes install fail: update once first.
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >"$E2E_WORK/apt-install.log" 2>&1; then
        apt-get update -q >>"$E2E_WORK/apt-install.log" 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}" >>"$E2E_WORK/apt-install.log" 2>&1 ||
            e2e_skip_all "cannot install ${missing[*]} (see the apt output below)
$(tail -5 "$E2E_WORK/apt-install.log")"
    fi
}

# Builds the binaries the tests run (a no-op when they are up to date).
# PINION_E2E_NO_BUILD=1 uses what is in $E2E_BIN_DIR as it is.
e2e_build() {
    if [ -z "${PINION_E2E_NO_BUILD:-}" ]; then
        local flags=(--workspace --bins --locked)
        [ "$E2E_PROFILE" = release ] && flags+=(--release)
        [ "$E2E_PROFILE" = debug ] || [ "$E2E_PROFILE" = release ] ||
            e2e_die "PINION_E2E_PROFILE must be debug or release, not '$E2E_PROFILE'"
        e2e_log "cargo build ${flags[*]}"
        (cd "$E2E_REPO" && cargo build -q "${flags[@]}") || e2e_die "cargo build failed"
    fi
    [ -x "$E2E_BIN_DIR/pinion" ] || e2e_die "no pinion binary in $E2E_BIN_DIR"
}

# Pinion's executables that exist (pinion, and pinion-agent where the agent
# has its own binary), one path a line.
e2e_pinion_bins() {
    local name
    for name in pinion pinion-agent "$@"; do
        [ -x "$E2E_BIN_DIR/$name" ] && echo "$E2E_BIN_DIR/$name"
    done
    return 0
}

# --- results ----------------------------------------------------------------

# Records the RESULT lines of a log (a guest's console or a local run), with
# an optional prefix naming where they ran, and echoes them.
e2e_collect() {
    local log=$1 prefix=${2:-}
    local line
    while IFS= read -r line; do
        line=${line%$'\r'}
        case $line in
        "RESULT "*)
            line="RESULT ${line#RESULT }"
            if [ -n "$prefix" ]; then
                local verdict=${line#RESULT }
                verdict=${verdict%% *}
                line="RESULT $verdict $prefix ${line#RESULT "$verdict" }"
            fi
            echo "$line"
            E2E_RESULTS+="$line"$'\n'
            ;;
        # What the guest printed of its daemons' logs (run-scenario, on a
        # failure): shown by e2e_summary when something failed, since the
        # console itself is gone with the work directory.
        "  "*"| "*) E2E_DIAG+="${prefix:+$prefix: }$line"$'\n' ;;
        esac
    done <"$log"
}

# Records one result from the host side.
e2e_result() {
    local verdict=$1 what=$2
    echo "RESULT $verdict $what"
    E2E_RESULTS+="RESULT $verdict $what"$'\n'
}

# Prints the failures again and the counts; exits non-zero on any failure
# (or when nothing ran at all).
e2e_summary() {
    local passed failed skipped
    passed=$(printf '%s' "$E2E_RESULTS" | grep -c '^RESULT PASS ' || true)
    failed=$(printf '%s' "$E2E_RESULTS" | grep -c '^RESULT FAIL ' || true)
    skipped=$(printf '%s' "$E2E_RESULTS" | grep -c '^RESULT SKIP ' || true)
    if [ "$failed" -gt 0 ]; then
        if [ -n "${E2E_DIAG:-}" ]; then
            echo "what the guests printed of their daemons' logs (the last 200 lines):"
            printf '%s' "$E2E_DIAG" | tail -n 200
        fi
        echo "failures:"
        printf '%s' "$E2E_RESULTS" | grep '^RESULT FAIL ' | sed 's/^RESULT FAIL /  /'
    fi
    echo "$passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}

# --- Debian packages from another release, without touching apt's config ---

# The machine's Debian mirror (the archive its own release comes from), or
# PINION_E2E_DEBIAN_MIRROR.
e2e_debian_mirror() {
    if [ -n "${PINION_E2E_DEBIAN_MIRROR:-}" ]; then
        echo "$PINION_E2E_DEBIAN_MIRROR"
        return
    fi
    local codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null |
        awk -v rel="$codename" '$2 == rel && $3 == "main" { print $1; exit }'
}

# e2e_debian_apt SUITE: a private apt configuration and state for Debian
# SUITE in the cache (the machine's sources, lists and package database stay
# untouched), its package lists fetched once; prints the APT_CONFIG file. On
# failure it says why on stderr and returns 1.
e2e_debian_apt() {
    local suite=$1
    local dir=$E2E_CACHE/apt-$suite
    if [ -f "$dir/apt.conf" ] && compgen -G "$dir/lists/*_Packages*" >/dev/null; then
        echo "$dir/apt.conf"
        return 0
    fi
    local mirror
    mirror=$(e2e_debian_mirror)
    if [ -z "$mirror" ]; then
        e2e_log "cannot find this machine's Debian mirror in its apt sources (set PINION_E2E_DEBIAN_MIRROR)"
        return 1
    fi
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/debs" "$dir/empty"
    cat >"$dir/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main
EOF
    cat >"$dir/apt.conf" <<EOF
Dir::State "$dir";
Dir::State::Lists "$dir/lists";
Dir::State::status "/dev/null";
Dir::Cache "$dir/cache";
Dir::Etc::SourceList "$dir/sources.list";
Dir::Etc::SourceParts "$dir/empty";
Dir::Etc::Parts "$dir/empty";
Dir::Etc::Preferences "$dir/empty/preferences";
Dir::Etc::PreferencesParts "$dir/empty";
Acquire::Languages "none";
APT::Sandbox::User "root";
EOF
    e2e_log "fetching Debian $suite's package lists ($mirror)"
    if ! APT_CONFIG=$dir/apt.conf apt-get -q update >"$dir/update.log" 2>&1; then
        e2e_log "apt-get update for $suite failed: $(tail -3 "$dir/update.log")"
        return 1
    fi
    echo "$dir/apt.conf"
}

# Downloads the .deb of PACKAGE from Debian SUITE into the cache, with the
# private apt configuration of e2e_debian_apt; prints its path. On failure it
# says why on stderr and returns 1.
e2e_fetch_deb() {
    local suite=$1 package=$2
    local dir=$E2E_CACHE/apt-$suite
    local existing
    existing=$(find "$dir/debs" -maxdepth 1 -name "${package}_*.deb" 2>/dev/null | sort | tail -1)
    if [ -n "$existing" ]; then
        echo "$existing"
        return 0
    fi
    local conf
    conf=$(e2e_debian_apt "$suite") || return 1
    e2e_log "fetching $package from Debian $suite"
    if ! (cd "$dir/debs" && APT_CONFIG=$conf apt-get -q download "$package") >"$dir/download.log" 2>&1; then
        e2e_log "apt-get download $package from $suite failed: $(tail -3 "$dir/download.log")"
        return 1
    fi
    find "$dir/debs" -maxdepth 1 -name "${package}_*.deb" | sort | tail -1
}

# e2e_debian_kernel SUITE: Debian SUITE's cloud kernel (the package its
# metapackage linux-image-cloud-amd64 depends on, e.g.
# linux-image-6.12.117+deb13-cloud-amd64), fetched with e2e_fetch_deb and
# extracted once into the cache; prints the extracted tree (boot/vmlinuz-*,
# lib/modules/RELEASE). On failure it says why on stderr and returns 1.
e2e_debian_kernel() {
    local suite=$1
    local conf package deb tree
    conf=$(e2e_debian_apt "$suite") || return 1
    package=$(APT_CONFIG=$conf apt-cache depends linux-image-cloud-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-cloud-amd64$/ { print $2; exit }')
    if [ -z "$package" ]; then
        e2e_log "Debian $suite's linux-image-cloud-amd64 names no kernel package"
        return 1
    fi
    deb=$(e2e_fetch_deb "$suite" "$package") && [ -n "$deb" ] || return 1
    tree=$E2E_CACHE/$(basename "$deb" .deb)
    if [ ! -d "$tree" ]; then
        if ! { rm -rf "$tree.tmp" && dpkg-deb -x "$deb" "$tree.tmp" && mv "$tree.tmp" "$tree"; }; then
            e2e_log "cannot extract $deb"
            return 1
        fi
    fi
    # The package ships no modules.dep (its postinst runs depmod): made here,
    # for the guest image's modules (vm.sh, image_add_modules). trixie keeps
    # the modules in usr/lib/modules; depmod looks in lib/modules.
    local release
    release=$(basename "$(ls "$tree"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)")
    release=${release#vmlinuz-}
    if [ -n "$release" ] && [ ! -f "$tree/lib/modules/$release/modules.dep" ]; then
        [ -e "$tree/lib" ] || [ ! -d "$tree/usr/lib/modules" ] || ln -s usr/lib "$tree/lib"
        depmod -b "$tree" "$release" 2>/dev/null ||
            e2e_log "depmod of $release failed: the guest gets no modules of it"
    fi
    echo "$tree"
}

# --- OCI images from busybox-static ------------------------------------------

# Writes an OCI image archive (image layout as a tar) holding busybox-static
# as /bin/busybox with the applets ENTRY needs, named NAME (e.g.
# pinion.test/busybox:1), whose default command is CMD... .
e2e_oci_image() {
    local out=$1 name=$2
    shift 2
    local dir
    dir=$(mktemp -d "$E2E_WORK/oci.XXXXXX")
    mkdir -p "$dir/root/bin" "$dir/root/etc" "$dir/root/tmp" "$dir/root/proc" \
        "$dir/root/sys" "$dir/root/dev" "$dir/layout/blobs/sha256"
    cp /bin/busybox "$dir/root/bin/busybox"
    local applet
    for applet in sh sleep cat grep sed awk echo ls true env; do
        ln -s busybox "$dir/root/bin/$applet"
    done
    echo 'root:x:0:0:root:/:/bin/sh' >"$dir/root/etc/passwd"
    echo 'root:x:0:' >"$dir/root/etc/group"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
        -C "$dir/root" -cf "$dir/layer.tar" . || return 1
    local layer_digest layer_size
    layer_digest=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
    layer_size=$(stat -c %s "$dir/layer.tar")
    mv "$dir/layer.tar" "$dir/layout/blobs/sha256/$layer_digest"
    local cmd_json="" arg
    for arg in "$@"; do
        cmd_json+="${cmd_json:+,}\"$arg\""
    done
    printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":[%s],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
        "$cmd_json" "$layer_digest" >"$dir/config.json"
    local config_digest config_size
    config_digest=$(sha256sum "$dir/config.json" | cut -d' ' -f1)
    config_size=$(stat -c %s "$dir/config.json")
    mv "$dir/config.json" "$dir/layout/blobs/sha256/$config_digest"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
        "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$dir/manifest.json"
    local manifest_digest manifest_size
    manifest_digest=$(sha256sum "$dir/manifest.json" | cut -d' ' -f1)
    manifest_size=$(stat -c %s "$dir/manifest.json")
    mv "$dir/manifest.json" "$dir/layout/blobs/sha256/$manifest_digest"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$dir/layout/oci-layout"
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
        "$manifest_digest" "$manifest_size" "$name" "${name##*:}" >"$dir/layout/index.json"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
        -C "$dir/layout" -cf "$out" . || return 1
    rm -rf "$dir"
}
