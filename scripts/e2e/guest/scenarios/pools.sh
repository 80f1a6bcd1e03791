# Pinion's CPU plugin inside the agent (qosResourceManager.builtinPlugins)
# on a real kernel: an online shared_cores pod, an offline reclaimed_cores
# pod and a dedicated pod; CPU burners in the online pod's cgroup make its
# pool grow (taking CPUs from the offline pod, never from the dedicated or
# the reserved ones), and the pool gives them back when they stop.

printf 'qosResourceManager:\n  builtinPlugins: [cpu]\n  reconcilePeriod: 1s\n' >>"$E2E_STATE/config.yaml"
agent_start || { fail "agent starts with the built-in cpu plugin" "$(tail -5 "$E2E_STATE/agent.log")"; exit 0; }
check_contains "the cpu plugin registered" "active" "$("$PINION" plugins --socket "$SOCK" | grep '^cpu ')"

# run_with NAME ARGS...: `pinion run ARGS -- sleep` in the background.
run_with() {
    name=$1
    shift
    rm -f "$E2E_STATE/$name.pid"
    "$PINION" run --socket "$SOCK" "$@" -- \
        sh -c "echo \$\$ >$E2E_STATE/$name.tmp && mv $E2E_STATE/$name.tmp $E2E_STATE/$name.pid && exec sleep 1000000" \
        >>"$E2E_STATE/$name.log" 2>&1 &
    echo $! >"$E2E_STATE/$name.parent"
    wait_for 120 test -s "$E2E_STATE/$name.pid"
}
QOS=katalyst.kubewharf.io/qos_level
run_with online --cpus 500m --annotation "$QOS=shared_cores" ||
    { fail "online pod runs" "$(cat "$E2E_STATE/online.log")"; exit 0; }
run_with offline --cpus 500m --annotation "$QOS=reclaimed_cores" ||
    { fail "offline pod runs" "$(cat "$E2E_STATE/offline.log")"; exit 0; }
run_with dedicated --cpus 2 --annotation "$QOS=dedicated_cores" ||
    { fail "dedicated pod runs" "$(cat "$E2E_STATE/dedicated.log")"; exit 0; }

pools() { "$PINION" pools --socket "$SOCK" -o wide; }
share_size() { pools | awk '$1 == "share" { print $3 }'; }
share_cpus() { pools | awk '$1 == "share" { print $2 }'; }
dedicated=$(run_cpus dedicated)
note "pools before the load:"
pools | sed 's/^/  /'
check_eq "the dedicated pod holds 2 cpus" 2 "$(cpus_count "$dedicated")"
# The pool may change between the manager's polls (the idle pool shrinks
# after its cooldown, the loaded one grows): the run follows at the next
# one. Each condition is judged once, in the wait that sees it hold — a
# second look could fall between a pool change and the pass that follows it.
follows() { [ "$(cpus_expand "$(share_cpus)")" = "$(cpus_expand "$(run_cpus online)")" ]; }
check_true "the online pod runs on the share pool" wait_for 30 follows
offline_off() { [ -z "$(cpus_intersect "$(run_cpus offline)" "$(share_cpus)")" ]; }
check_true "the offline pod runs off the share pool" wait_for 30 offline_off
initial=$(share_size)

# Four burners in the online pod's cgroup.
dir=$(cpuset_dir "$(run_pid online)")
burners=""
for i in 1 2 3 4; do
    sh -c 'while :; do :; done' &
    echo $! >"$dir/cgroup.procs"
    burners="$burners $!"
done
grown() { [ "$(share_size)" -ge $((initial + 2)) ]; }
wait_for 120 grown || true
note "pools under load:"
pools | sed 's/^/  /'
check_true "the online pool grows under load (from $initial cpus)" grown
# The loop reads the members' cpu.pressure (PSI) besides the load on the
# pool's cpus; column 8 of `pinion pools -o wide` is the PSI part ("-": not read).
if [ -r /proc/pressure/cpu ]; then
    check_ne "the online pod's cpu pressure (PSI) is read" "-" "$(pools | awk '$1 == "share" { print $8 }')"
else
    skip "PSI of the online pod" "the guest kernel has no /proc/pressure/cpu"
fi
# The run follows at the manager's next reconcile (the pool may grow again
# meanwhile): judged once, when both agree.
check_true "the online pod follows its pool" wait_for 30 follows
share=$(share_cpus)
check_true "the offline pod gave those cpus up" wait_for 30 offline_off
check_eq "the pool never takes a dedicated cpu" "" "$(cpus_intersect "$share" "$dedicated")"
check_eq "the pool never takes the reserved cpu" "" "$(cpus_intersect "$share" "$RESERVED")"
check_eq "the dedicated pod did not move" "$dedicated" "$(run_cpus dedicated)"

kill $burners 2>/dev/null
wait $burners 2>/dev/null
shrunk() { [ "$(share_size)" -le "$initial" ]; }
wait_for 120 shrunk || true
note "pools after the load:"
pools | sed 's/^/  /'
check_true "the idle pool gives its cpus back" shrunk
check_eq "the dedicated pod still did not move" "$dedicated" "$(run_cpus dedicated)"
for r in online offline dedicated; do run_stop "$r"; done
