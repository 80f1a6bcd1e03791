# Issue 31 items 2 and 6 on a real kernel: a housekeeping cgroup named in
# the agent's config (`housekeeping.cgroups`) holds the shared pool — it
# shrinks when an exclusive run starts and grows back after the run ends —
# and a cpuset written by hand, into a pinned run's cgroup or into the
# housekeeping cgroup, is detected and reported (`pinion ps` mark, metric
# `pinion_foreign_writes_total`), repaired with `otherWriters: repair` and
# kept with `otherWriters: report`. Runs on cgroup v2 and v1 alike, with
# or without isolcpus on the command line (the shared pool is whatever the
# agent reports). docs/housekeeping.md.

HK_NAME=e2e-housekeeping
if [ "$(cgroup_version)" = v2 ]; then
    mnt=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
else
    mnt=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpuset(,|$)/ { print $2; exit }' /proc/self/mounts)
fi
hk=$mnt/$HK_NAME
mkdir -p "$hk"
if [ "$(cgroup_version)" = v1 ]; then
    # A v1 cpuset takes tasks once both files are set.
    cat "$mnt/cpuset.mems" >"$hk/cpuset.mems"
    cat "$mnt/cpuset.cpus" >"$hk/cpuset.cpus"
fi
base_config=$(cat "$E2E_STATE/config.yaml")
configure() {
    printf '%s\ncpuManagerReconcilePeriod: 1s\nhousekeeping:\n  cgroups: [/%s]\notherWriters: %s\n' \
        "$base_config" "$HK_NAME" "$1" >"$E2E_STATE/config.yaml"
}

hk_cpus() { cpus_expand "$(cat "$hk/cpuset.cpus")"; }
shared_pool() { cpus_expand "$(pinion_ps | sed -n 's/.*shared pool: \([0-9,-]*\).*/\1/p' | head -n 1)"; }
metrics_addr() { sed -n 's/.*metrics=\([0-9.]*:[0-9]*\).*/\1/p' "$E2E_STATE/agent.log" | tail -n 1; }
metric() { wget -q -O - "http://$(metrics_addr)/metrics" 2>/dev/null | awk -v m="$1" '$1 == m { print $2 }'; }
foreign_writes() { n=$(metric "pinion_foreign_writes_total{kind=\"$1\"}"); echo "${n:-0}"; }
# The cpuset.cpus file of a run's cgroup.
run_cpuset() { echo "$(cpuset_dir "$(run_pid "$1")")/cpuset.cpus"; }

configure repair
agent_start || fail "agent starts with housekeeping.cgroups [/$HK_NAME]" "no answer on $SOCK"
all=$(cpus_expand "$(cat /sys/devices/system/cpu/online)")
check_eq "housekeeping cgroup holds the shared pool at start" "$(shared_pool)" "$(hk_cpus)"
if [ "$(cgroup_version)" = v2 ]; then
    check_eq "+cpuset enabled above the housekeeping cgroup" cpuset \
        "$(tr ' ' '\n' <"$mnt/cgroup.subtree_control" | grep -x cpuset)"
fi
# A process of the housekeeping cgroup (a system daemon's stand-in).
sleep 1000000 &
daemon=$!
echo "$daemon" >"$hk/cgroup.procs"

if run_start pinned 2; then
    cpus=$(cpus_expand "$(run_cpus pinned)")
    check_eq "housekeeping cgroup shrinks to the shared pool while an exclusive run holds cpus" \
        "$(shared_pool)" "$(hk_cpus)"
    check_eq "housekeeping cgroup gave up the run's cpus ($cpus)" "" \
        "$(cpus_intersect "$(hk_cpus | tr ' ' ',')" "$(echo "$cpus" | tr ' ' ',')")"
    check_eq "a process of the housekeeping cgroup no longer runs on the run's cpus" "" \
        "$(cpus_intersect "$(proc_field "$daemon" Cpus_allowed_list)" "$(echo "$cpus" | tr ' ' ',')")"
    check_contains "pinion ps shows the housekeeping cgroup kept" "housekeeping: /$HK_NAME cpus" "$(pinion_ps)"

    # A cpuset written by hand into the pinned run's cgroup.
    file=$(run_cpuset pinned)
    online=$(cat /sys/devices/system/cpu/online)
    echo "$online" >"$file"
    wait_for 60 sh -c "wget -q -O - http://$(metrics_addr)/metrics | grep -q 'pinion_foreign_writes_total{kind=\"container\"} [1-9]' && [ \"\$(cat $file)\" != \"$online\" ]"
    check_eq "a hand-written cpuset in a pinned run's cgroup is repaired (otherWriters: repair)" \
        "$cpus" "$(cpus_expand "$(cat "$file")")"
    check_eq "the foreign write is counted (pinion_foreign_writes_total{kind=\"container\"})" 1 \
        "$(foreign_writes container)"
    check_contains "pinion ps marks the run (foreign write)" "(foreign write)" "$(ps_rows)"
    check_contains "pinion ps tells from, to and what Pinion did" \
        "-> cpus $online (repaired)" "$(pinion_ps)"

    # A cpuset written by hand into the housekeeping cgroup.
    want=$(hk_cpus)
    first=$(echo "$want" | cut -d' ' -f1)
    echo "$first" >"$hk/cpuset.cpus"
    wait_for 60 sh -c "wget -q -O - http://$(metrics_addr)/metrics | grep -q 'pinion_foreign_writes_total{kind=\"housekeeping\"} [1-9]'"
    wait_for 30 sh -c "[ \"\$(cat $hk/cpuset.cpus)\" != \"$first\" ]"
    check_eq "a hand-written housekeeping cpuset is reported and repaired" "1 $want" \
        "$(foreign_writes housekeeping) $(hk_cpus)"
    run_stop pinned
    hk_missing_run_cpus() { for c in $cpus; do hk_cpus | tr ' ' '\n' | grep -qx "$c" || echo "$c"; done; }
    hk_grown() { [ -z "$(hk_missing_run_cpus)" ]; }
    wait_for 30 hk_grown
    check_eq "housekeeping cgroup takes the run's cpus back after the run ends" "" "$(hk_missing_run_cpus)"
    check_eq "housekeeping cgroup grows back to the shared pool after the run ends" \
        "$(shared_pool)" "$(hk_cpus)"
    check_eq "the shared pool holds the run's cpus again" "" \
        "$(for c in $cpus; do echo "$(shared_pool)" | tr ' ' '\n' | grep -qx "$c" || echo "$c"; done)"
else
    fail "pinned run starts" "$(cat "$E2E_STATE/pinned.log")"
fi
agent_stop TERM

# otherWriters: report — the other writer's value is kept and reported once.
configure report
agent_start || fail "agent starts with otherWriters: report" "no answer on $SOCK"
if run_start kept 1; then
    cpus=$(cpus_expand "$(run_cpus kept)")
    file=$(run_cpuset kept)
    online=$(cat /sys/devices/system/cpu/online)
    echo "$online" >"$file"
    wait_for 60 sh -c "wget -q -O - http://$(metrics_addr)/metrics | grep -q 'pinion_foreign_writes_total{kind=\"container\"} [1-9]'"
    check_eq "with otherWriters: report the foreign write is counted once and kept" \
        "1 $(cpus_expand "$online")" "$(foreign_writes container) $(cpus_expand "$(cat "$file")")"
    check_contains "pinion ps says the value was kept" "(kept, otherWriters: report)" "$(pinion_ps)"
    run_stop kept
else
    fail "run starts under otherWriters: report" "$(cat "$E2E_STATE/kept.log")"
fi
kill "$daemon" 2>/dev/null
wait "$daemon" 2>/dev/null || true
