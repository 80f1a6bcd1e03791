# A CPU of a pinned workload taken offline
# (`echo 0 > /sys/devices/system/cpu/cpuN/online`), then back online.
#
# The agent stays up and answers, the workload keeps running on online
# CPUs; the reconcile loop (every second here) notices the change (#13):
# the run is re-placed so that it holds as many online CPUs as it asked
# for (it keeps its remaining one), `pinion ps` says so, and when the CPU
# comes back online it is in the shared pool.

printf 'cpuManagerReconcilePeriod: 1s\n' >>"$E2E_STATE/config.yaml"

shared_pool() { pinion_ps | sed -n '1s/.*shared pool: //p'; }

# The run holds as many cpus as it asked for, none of them the victim.
replaced() {
    now=$(run_cpus pinned)
    [ "$(cpus_count "$now")" = "$(cpus_count "$cpus")" ] && [ -z "$(cpus_intersect "$now" "$victim")" ]
}

victim_shared() { [ -n "$(cpus_intersect "$(shared_pool)" "$victim")" ]; }

offline_recovered() {
    wait_for 60 replaced || true
    now=$(run_cpus pinned)
    kept=$(cpus_expand "$cpus" | tr ' ' '\n' | grep -vx "$victim" | tr '\n' ',' | sed 's/,$//')
    check_eq "the run is re-placed on as many online cpus as it asked for ($now)" "$(cpus_count "$cpus")" "$(cpus_count "$now")"
    check_eq "the re-placed run is off the offline cpu" "" "$(cpus_intersect "$now" "$victim")"
    check_true "the run keeps its online cpus ($kept of $cpus within $now)" cpus_subset "$kept" "$now"
    check_eq "the agent says the run holds what it runs on" "$(cpus_expand "$now")" "$(cpus_expand "$(ps_cpus_of_pid "$pid")")"
    check_contains "pinion ps reports the offline cpu" "cpu hot-plug: cpus $victim went offline" "$(pinion_ps)"
    check_eq "the offline cpu is not in the shared pool" "" "$(cpus_intersect "$(shared_pool)" "$victim")"
}

online_recovered() {
    wait_for 60 victim_shared || true
    check_true "cpu$victim back online is in the shared pool ($(shared_pool))" victim_shared
    check_eq "the run does not move when it comes back" "$(cpus_expand "$now")" "$(cpus_expand "$(run_cpus pinned)")"
}

# Every cpu of the run offline at once. A cgroup v1 kernel empties the
# run's cpuset and moves its processes to Pinion's root; the agent gives
# the run online cpus and moves them back instead of releasing it (found
# from outside, session 44). v2 leaves them in place.
run_back() {
    now=$(run_cpus pinned)
    [ "$(cpus_count "$now")" = "$(cpus_count "$cpus")" ] &&
        [ -z "$(cpus_intersect "$now" "$all")" ] &&
        [ "$(cpuset_dir "$pid")" = "$dir" ]
}

all_offline() {
    all=$(run_cpus pinned)
    dir=$(cpuset_dir "$pid")
    taken=""
    for cpu in $(cpus_expand "$all"); do
        if [ -w "/sys/devices/system/cpu/cpu$cpu/online" ] && echo 0 >"/sys/devices/system/cpu/cpu$cpu/online"; then
            taken="$taken $cpu"
        fi
    done
    if [ "$(echo $taken | wc -w)" != "$(cpus_count "$all")" ]; then
        skip "all cpus of a run offline" "only cpus$taken of $all could be taken offline"
    else
        note "cpus $all offline (all of the run's)"
        wait_for 60 run_back || true
        now=$(run_cpus pinned)
        check_true "the workload is still running with all its cpus offline" kill -0 "$pid"
        check_eq "the workload is back in its own cgroup ($(cgroup_version))" "$dir" "$(cpuset_dir "$pid")"
        check_eq "the run holds as many online cpus as it asked for ($now)" "$(cpus_count "$cpus")" "$(cpus_count "$now")"
        check_eq "none of them offline" "" "$(cpus_intersect "$now" "$all")"
        check_eq "pinion ps still shows the run on what it runs on" "$(cpus_expand "$now")" "$(cpus_expand "$(ps_cpus_of_pid "$pid")")"
        check_true "the agent is still running with all of the run's cpus offline" agent_alive
    fi
    for cpu in $taken; do
        echo 1 >"/sys/devices/system/cpu/cpu$cpu/online" || note "cpu$cpu did not come back online"
    done
}

agent_start || fail "agent starts" "no answer on $SOCK"
if run_start pinned 2; then
    cpus=$(run_cpus pinned)
    pid=$(run_pid pinned)
    victim=$(cpus_expand "$cpus" | awk '{ print $NF }')
    if [ -w "/sys/devices/system/cpu/cpu$victim/online" ] && echo 0 >"/sys/devices/system/cpu/cpu$victim/online"; then
        note "cpu$victim offline (run held $cpus)"
        pass "cpu$victim of the pinned run taken offline"
        check_true "the agent is still running" agent_alive
        check_true "the agent answers pinion ps" pinion_ps
        check_true "the workload is still running" kill -0 "$pid"
        left=$(proc_field "$pid" Cpus_allowed_list)
        check_ne "the workload has cpus left" "" "$left"
        check_eq "the workload runs only on online cpus" "" "$(cpus_intersect "$left" "$victim")"
        offline_recovered
        if echo 1 >"/sys/devices/system/cpu/cpu$victim/online"; then
            online_recovered
        else
            note "cpu$victim did not come back online"
        fi
        check_true "the agent is still running after the cpu came back" agent_alive
        all_offline
    else
        skip "cpu offline" "cpu$victim cannot be taken offline in this guest"
    fi
else
    fail "pinned run starts" "$(cat "$E2E_STATE/pinned.log")"
fi
