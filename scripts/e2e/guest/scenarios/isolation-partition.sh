# Exclusive CPUs as cgroup v2 cpuset partitions (issue 31 item 1; agent
# config `exclusiveCpus.partition: isolated`). On cgroup v2 (trixie's 6.12):
# an exclusive run's cgroup reads `isolated`, the root's
# `cpuset.cpus.isolated` lists its CPUs during the run and is back to the
# boot isolcpus after it, and neither a shared-pool burner nor a process
# Pinion does not manage ever runs there. On cgroup v1: the run is admitted
# all the same, and the fallback is reported by `pinion ps` and the metric.
# The root's `cpuset.cpus.isolated` before, during and after the run is
# printed as `ISOLATED <when>: <list>` lines.

printf 'exclusiveCpus:\n  partition: isolated\n' >>"$E2E_STATE/config.yaml"

CG=/sys/fs/cgroup
ROOT_ISOLATED=$CG/cpuset.cpus.isolated

# The boot's isolcpus list (the CPUs after the flags), empty without.
boot_isolcpus() {
    for word in $(cat /proc/cmdline); do
        case $word in
        isolcpus=*)
            list=${word#isolcpus=}
            echo "${list##*,[a-z]*,}" | sed 's/^[a-z_]*,//'
            ;;
        esac
    done
}

# Reads the root's cpuset.cpus.isolated (or says it has none).
isolated_now() { cat "$ROOT_ISOLATED" 2>/dev/null || echo "(no $ROOT_ISOLATED)"; }

# The metric's value from the agent's /metrics (address from its log).
metric() {
    addr=$(sed 's/\x1b\[[0-9;]*m//g' "$E2E_STATE/agent.log" | sed -n 's/.*metrics=\([0-9.]*:[0-9]*\).*/\1/p' | tail -1)
    busybox wget -q -O - "http://$addr/metrics" 2>/dev/null | awk -v m="$1" '$1 == m { print $2 }'
}

# The cgroup directory of the run whose process is PID.
cgroup_of() { sed -n 's/^0::\(.*\)$/\1/p' "/proc/$1/cgroup"; }

# sample_psrs SAMPLES STAT_FILE...: every 0.2 s, the CPU (field 39 of
# /proc/PID/stat) each busy process is on, as `PID CPU` lines in
# $E2E_STATE/psr; psrs_of PID: the CPUs that process was seen on.
sample_psrs() {
    samples=$1
    shift
    : >"$E2E_STATE/psr.raw"
    n=0
    while [ "$n" -lt "$samples" ]; do
        cat "$@" 2>/dev/null >>"$E2E_STATE/psr.raw"
        sleep 0.2
        n=$((n + 1))
    done
    awk '{ print $1, $39 }' "$E2E_STATE/psr.raw" >"$E2E_STATE/psr"
}
psrs_of() { awk -v pid="$1" '$1 == pid { print $2 }' "$E2E_STATE/psr" | sort -un | tr '\n' ',' | sed 's/,$//'; }

agent_start || fail "agent starts" "no answer on $SOCK"
boot=$(boot_isolcpus)

if [ ! -f "$CG/cgroup.controllers" ]; then
    # cgroup v1: no partitions; the run is a member, reported, never refused.
    if run_start ex 2; then
        pass "cgroup v1: an exclusive run is admitted although no partition can be made"
    else
        fail "cgroup v1: an exclusive run is admitted although no partition can be made" "$(cat "$E2E_STATE/ex.log")"
    fi
    out=$(pinion_ps)
    check_contains "cgroup v1: pinion ps marks the run's partition fallback" "[member!]" "$out"
    check_contains "cgroup v1: pinion ps gives the fallback's reason" "cpuset partition: member (fallback: cgroup v1 has no cpuset partitions" "$out"
    check_eq "cgroup v1: metric pinion_partition_fallbacks_total counts it" 1 "$(metric pinion_partition_fallbacks_total)"
    check_eq "cgroup v1: the run holds its 2 exclusive cpus" 2 "$(cpus_count "$(run_cpus ex)")"
    run_stop ex
    agent_stop TERM
    check_true "cgroup v1: the agent ran to the end" test -z "$(grep -i panick "$E2E_STATE/agent.log")"
    return 0 2>/dev/null || exit 0
fi

before=$(isolated_now)
echo "ISOLATED before: '${before}' (boot isolcpus '${boot}')"
check_eq "cpuset.cpus.isolated before an exclusive run is the boot isolcpus" "$(cpus_expand "$boot")" "$(cpus_expand "$before")"

run_start ex 2 || fail "an exclusive run of 2 cpus starts" "$(cat "$E2E_STATE/ex.log")"
cpus=$(run_cpus ex)
pid=$(run_pid ex)
dir=$CG$(cgroup_of "$pid")
part=${dir#"$CG"/}
is_isolated() { [ "$(cat "$dir/cpuset.cpus.partition" 2>/dev/null)" = isolated ]; }
wait_for 60 is_isolated || true
check_eq "cpuset.cpus.partition of $part reads isolated (isolated partition $part, cpus $cpus)" isolated "$(cat "$dir/cpuset.cpus.partition" 2>/dev/null)"
check_eq "cpuset.cpus.exclusive.effective of $part is the run's cpus" "$(cpus_expand "$cpus")" "$(cpus_expand "$(cat "$dir/cpuset.cpus.exclusive.effective" 2>/dev/null)")"
during=$(isolated_now)
echo "ISOLATED during: '${during}' (run cpus $cpus, cgroup $part)"
check_eq "cpuset.cpus.isolated during the run is its cpus and the boot isolcpus" \
    "$(cpus_expand "$cpus${boot:+,$boot}")" "$(cpus_expand "$during")"
check_contains "pinion ps marks the run's cpus as an isolated partition" "exclusive [isolated]" "$(pinion_ps)"
check_contains "pinion ps shows the root's cpuset.cpus.isolated" "isolated cpus (cgroup root's cpuset.cpus.isolated): $during" "$(pinion_ps)"
check_eq "metric pinion_partitions_made_total counts the partition" 1 "$(metric pinion_partitions_made_total)"

# Burners: one in the shared pool, one Pinion does not manage (in the root
# cgroup, allowed every cpu the root still has).
"$PINION" run --socket "$SOCK" -- sh -c 'while :; do :; done' >"$E2E_STATE/burner.log" 2>&1 &
echo $! >"$E2E_STATE/burner.parent"
sh -c 'while :; do :; done' &
loose=$!
shared_burner() { [ -n "$(ps_rows | awk '$4 == "shared" { print $NF }')" ]; }
wait_for 60 shared_burner || true
burner=$(ps_rows | awk '$4 == "shared" { print $NF }' | tail -1)
sample_psrs 25 "/proc/$burner/stat" "/proc/$loose/stat"
seen_shared=$(psrs_of "$burner")
seen_loose=$(psrs_of "$loose")
echo "burners: shared-pool pid $burner ran on $seen_shared; unmanaged pid $loose ran on $seen_loose"
check_eq "a shared-pool burner never runs on the isolated partition's cpus ($cpus)" "" "$(cpus_intersect "${seen_shared:-none}" "$cpus")"
check_ne "the shared-pool burner was sampled" "" "$seen_shared"
check_eq "a process Pinion does not manage never runs on the isolated partition's cpus ($cpus)" "" "$(cpus_intersect "${seen_loose:-none}" "$cpus")"
check_eq "the unmanaged process's affinity leaves the partition out" "" "$(cpus_intersect "$(proc_field "$loose" Cpus_allowed_list)" "$cpus")"
kill "$loose" "$burner" 2>/dev/null
wait "$(cat "$E2E_STATE/burner.parent")" 2>/dev/null
rm -f "$E2E_STATE/burner.parent"

run_stop ex
rm -f "$E2E_STATE/ex.parent"
released() { [ -z "$(ps_rows | grep ' exclusive')" ] && [ "$(cpus_expand "$(isolated_now)")" = "$(cpus_expand "$boot")" ]; }
wait_for 60 released || true
after=$(isolated_now)
echo "ISOLATED after: '${after}'"
check_eq "cpuset.cpus.isolated after the release is the boot isolcpus again" "$(cpus_expand "$boot")" "$(cpus_expand "$after")"
check_eq "Pinion's root claims no exclusive cpus after the release" "" "$(tr -d '\n' <"$CG/pinion/cpuset.cpus.exclusive")"
agent_stop TERM
