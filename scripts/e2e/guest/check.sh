# Checks for the end-to-end scenarios; sourced by the scenario scripts, in a
# qemu guest (busybox sh) or on the host (POSIX sh). Every check prints one
# `RESULT PASS|FAIL|SKIP <scenario>: <what>[: <why>]` line; the host counts them.
# Set SCENARIO before checking. No check measures time: waits are bounded
# only so that a hang ends as a failure instead of a stuck run.

SCENARIO=${SCENARIO:-unnamed}

pass() { echo "RESULT PASS $SCENARIO: $1"; }
fail() { echo "RESULT FAIL $SCENARIO: $1: $2"; }
skip() { echo "RESULT SKIP $SCENARIO: $1: $2"; }
note() { echo "note $SCENARIO: $*"; }

# check_eq WHAT EXPECTED ACTUAL
check_eq() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "expected '$2', got '$3'"; fi
}

# check_ne WHAT UNEXPECTED ACTUAL
check_ne() {
    if [ "$2" != "$3" ]; then pass "$1"; else fail "$1" "got '$3'"; fi
}

# check_contains WHAT NEEDLE HAYSTACK
check_contains() {
    case $3 in
    *"$2"*) pass "$1" ;;
    *) fail "$1" "'$2' not in '$3'" ;;
    esac
}

# check_true WHAT COMMAND... : passes when the command succeeds.
check_true() {
    what=$1
    shift
    if "$@" >/dev/null 2>&1; then pass "$what"; else fail "$what" "'$*' failed"; fi
}

# wait_for SECONDS COMMAND... : polls until the command succeeds (0) or
# SECONDS of wall-clock time have passed (1).
wait_for() {
    deadline=$(($(date +%s) + $1))
    shift
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        [ "$(date +%s)" -ge "$deadline" ] && return 1
        sleep 0.2
    done
}

# wait_quietly SECONDS CMD...: as wait_for, checking once a second and
# without reading the clock: a `date` and a `sleep` forked five times a
# second cost a TCG guest a fifth of a CPU, taken from what is being timed
# (SECONDS is counted in checks, so it is at least SECONDS).
wait_quietly() {
    left=$1
    shift
    while :; do
        "$@" >/dev/null 2>&1 && return 0
        [ "$left" -le 0 ] && return 1
        left=$((left - 1))
        sleep 1
    done
}

# cpus_expand LIST: "0-2,5" -> "0 1 2 5" (sorted, one space apart).
cpus_expand() {
    echo "$1" | tr ',' '\n' | while IFS=- read -r lo hi; do
        [ -z "$lo" ] && continue
        [ -z "$hi" ] && hi=$lo
        i=$lo
        while [ "$i" -le "$hi" ]; do
            echo "$i"
            i=$((i + 1))
        done
    done | sort -n | tr '\n' ' ' | sed 's/ $//'
}

# cpus_count LIST
cpus_count() {
    set -- $(cpus_expand "$1")
    echo $#
}

# cpus_intersect A B: the CPUs in both lists (expanded).
cpus_intersect() {
    for c in $(cpus_expand "$1"); do
        for d in $(cpus_expand "$2"); do
            [ "$c" = "$d" ] && echo "$c"
        done
    done | tr '\n' ' ' | sed 's/ $//'
}

# cpus_subset A B: every CPU of A is in B.
cpus_subset() {
    [ "$(cpus_intersect "$1" "$2")" = "$(cpus_expand "$1")" ]
}

# proc_field PID FIELD: a field of /proc/PID/status (e.g. Cpus_allowed_list).
proc_field() {
    sed -n "s/^$2:[[:space:]]*//p" "/proc/$1/status" 2>/dev/null
}

# The sysfs view of a CPU.
cpu_siblings() { cpus_expand "$(cat "/sys/devices/system/cpu/cpu$1/topology/thread_siblings_list")"; }
cpu_node() {
    for n in /sys/devices/system/cpu/cpu"$1"/node*; do
        [ -e "$n" ] && echo "${n##*/node}" && return
    done
    echo 0
}

# memory_nodes: every NUMA node with memory (expanded; 0 without NUMA
# information), what a cpuset nobody narrowed holds.
memory_nodes() {
    cpus_expand "$(cat /sys/devices/system/node/has_memory 2>/dev/null || echo 0)"
}

# nodes_of_cpus LIST: the NUMA nodes of the CPUs (expanded).
nodes_of_cpus() {
    for c in $(cpus_expand "$1"); do cpu_node "$c"; done | sort -nu | tr '\n' ' ' | sed 's/ $//'
}

# is_sibling_group LIST: the CPUs are exactly the threads of whole cores
# (every CPU's siblings are in the list).
is_sibling_group() {
    for c in $(cpus_expand "$1"); do
        cpus_subset "$(cpu_siblings "$c" | tr ' ' ',')" "$1" || return 1
    done
}

# The cgroup v1 cpuset mount or the cgroup2 mount, and the version.
cgroup_version() {
    if grep -q ' cgroup2 ' /proc/self/mounts && [ -e /sys/fs/cgroup/cgroup.controllers ]; then
        echo v2
    else
        echo v1
    fi
}

# cpuset_dir PID: the directory of the process's cpuset cgroup.
cpuset_dir() {
    if [ "$(cgroup_version)" = v2 ]; then
        path=$(sed -n 's/^0::\(.*\)/\1/p' "/proc/$1/cgroup")
        mount=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
    else
        path=$(awk -F: '$2 ~ /(^|,)cpuset(,|$)/ { print $3 }' "/proc/$1/cgroup")
        mount=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpuset(,|$)/ { print $2; exit }' /proc/self/mounts)
    fi
    echo "$mount$path"
}
