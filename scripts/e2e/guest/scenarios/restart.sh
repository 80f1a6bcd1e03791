# Agent SIGKILL and restart: no CPU of a running workload moves; the agent
# finds its runs again from the checkpoint and the cgroups.

agent_start || fail "agent starts" "no answer on $SOCK"
run_start pinned 2 || fail "pinned run starts" "$(cat "$E2E_STATE/pinned.log")"
run_start shared || fail "shared run starts" "$(cat "$E2E_STATE/shared.log")"
snapshot() {
    for r in pinned shared; do
        pid=$(run_pid "$r")
        echo "$r $(proc_field "$pid" Cpus_allowed_list) $(proc_field "$pid" Mems_allowed_list) $(cat "$(cpuset_dir "$pid")/cpuset.cpus")"
    done
    durable_state
}
before=$(snapshot)
ps_before=$(ps_rows | awk '{ print $3, $4, $(NF-2), $(NF-1) }' | sort)

agent_stop KILL
check_true "workloads survive the agent's SIGKILL" kill -0 "$(run_pid pinned)"
agent_start || fail "agent restarts" "no answer on $SOCK"
check_eq "cpus, mems, cgroups and checkpoint unchanged" "$before" "$(snapshot)"
check_eq "pinion ps lists the same workloads" "$ps_before" "$(ps_rows | awk '{ print $3, $4, $(NF-2), $(NF-1) }' | sort)"

run_stop pinned
released() { ! ps_rows | grep -q exclusive; }
wait_for 60 released || true
check_true "the restarted agent releases the pinned run when it ends" released
