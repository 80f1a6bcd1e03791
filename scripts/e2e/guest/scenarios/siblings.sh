# Placement: `pinion run --cpus 2` gets the two threads of one core (its
# memory nodes left as they are, as kubelet's static policy does); a shared-pool run loses those CPUs while they are
# held and gets them back when they are released.

agent_start || fail "agent starts" "no answer on $SOCK"

run_start shared || fail "shared run starts" "$(cat "$E2E_STATE/shared.log")"
all=$(cat /sys/devices/system/cpu/online)
check_eq "shared run before: every cpu" "$(cpus_expand "$all")" "$(cpus_expand "$(run_cpus shared)")"

if run_start pinned 2; then
    cpus=$(run_cpus pinned)
    pid=$(run_pid pinned)
    dir=$(cpuset_dir "$pid")
    check_eq "two cpus" 2 "$(cpus_count "$cpus")"
    check_true "the two cpus are sibling threads of one core ($cpus)" is_sibling_group "$cpus"
    check_eq "reserved cpu not used" "" "$(cpus_intersect "$cpus" "$RESERVED")"
    check_eq "cgroup cpuset.cpus" "$(cpus_expand "$cpus")" "$(cpus_expand "$(cat "$dir/cpuset.cpus")")"
    check_eq "process Mems_allowed_list: every memory node, as kubelet leaves it" "$(memory_nodes)" \
        "$(cpus_expand "$(proc_field "$pid" Mems_allowed_list)")"
    check_eq "pinion ps shows the run's cpus" "$(cpus_expand "$cpus")" "$(cpus_expand "$(ps_cpus_of_pid "$pid")")"
    moved() { [ -z "$(cpus_intersect "$(run_cpus shared)" "$cpus")" ]; }
    wait_for 60 moved || true
    check_eq "shared run no longer on the pinned cpus" "" "$(cpus_intersect "$(run_cpus shared)" "$cpus")"
    run_stop pinned
    back() { [ "$(cpus_expand "$(run_cpus shared)")" = "$(cpus_expand "$all")" ]; }
    wait_for 60 back || true
    check_eq "shared run after release: every cpu again" "$(cpus_expand "$all")" "$(cpus_expand "$(run_cpus shared)")"
else
    fail "pinned run starts" "$(cat "$E2E_STATE/pinned.log")"
fi
