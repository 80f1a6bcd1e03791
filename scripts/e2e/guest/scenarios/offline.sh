# A CPU of a pinned workload taken offline
# (`echo 0 > /sys/devices/system/cpu/cpuN/online`).
#
# Certain today: the agent stays up and answers, the workload keeps running
# on its remaining CPUs. What Pinion then does with the assignment is the
# recovery issue's (#13) to define; when it lands, its assertion is one more
# line in offline_recovered below.

offline_recovered() {
    # The stronger check of #13 goes here, e.g.:
    # check_eq "the run is re-placed on a whole online core" ... ...
    :
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
        check_true "the workload's cpus are its own remaining ones ($left of $cpus)" cpus_subset "$left" "$cpus"
        offline_recovered
        echo 1 >"/sys/devices/system/cpu/cpu$victim/online" || note "cpu$victim did not come back online"
        check_true "the agent is still running after the cpu came back" agent_alive
    else
        skip "cpu offline" "cpu$victim cannot be taken offline in this guest"
    fi
else
    fail "pinned run starts" "$(cat "$E2E_STATE/pinned.log")"
fi
