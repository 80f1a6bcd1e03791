# Helpers to drive the Pinion agent and `pinion run` in a scenario (sourced
# after check.sh). State, socket and logs live in $E2E_STATE.

PINION=${PINION:-pinion}
E2E_STATE=${E2E_STATE:-/run/e2e/$SCENARIO}
SOCK=$E2E_STATE/pinion.sock
RESERVED=${E2E_RESERVED:-0}
mkdir -p "$E2E_STATE"
printf 'cpuManagerPolicy: static\nreservedSystemCPUs: "%s"\n' "$RESERVED" >"$E2E_STATE/config.yaml"

pinion_ps() { "$PINION" ps --socket "$SOCK" "$@"; }

# The durable state: kubelet's cpu_manager_state with Pinion's journal
# replayed (the file itself is only rewritten at compaction).
durable_state() { "$PINION" state inspect "$E2E_STATE/state/cpu_manager_state" --effective; }

# agent_start [ARGS...]: starts the agent (through `pinion agent`, which
# also works where the daemon has its own binary) and waits until it answers.
agent_start() {
    "$PINION" agent --config "$E2E_STATE/config.yaml" --state-dir "$E2E_STATE/state" \
        --socket "$SOCK" --metrics-addr 127.0.0.1:0 "$@" >>"$E2E_STATE/agent.log" 2>&1 &
    AGENT_PID=$!
    wait_for 120 pinion_ps
}

agent_alive() { kill -0 "$AGENT_PID" 2>/dev/null; }

# agent_stop [SIGNAL]: stops the agent (TERM by default) and reaps it.
agent_stop() {
    kill "-${1:-TERM}" "$AGENT_PID" 2>/dev/null
    wait "$AGENT_PID" 2>/dev/null
    return 0
}

# run_start NAME [CPUS]: `pinion run [--cpus CPUS] -- sleep` in the
# background; waits until the command runs. Its pid: run_pid NAME.
run_start() {
    name=$1
    rm -f "$E2E_STATE/$name.pid"
    if [ -n "${2:-}" ]; then set -- --cpus "$2"; else set --; fi
    "$PINION" run --socket "$SOCK" "$@" -- \
        sh -c "echo \$\$ >$E2E_STATE/$name.tmp && mv $E2E_STATE/$name.tmp $E2E_STATE/$name.pid && exec sleep 1000000" \
        >>"$E2E_STATE/$name.log" 2>&1 &
    echo $! >"$E2E_STATE/$name.parent"
    wait_for 120 test -s "$E2E_STATE/$name.pid"
}

run_pid() { cat "$E2E_STATE/$1.pid" 2>/dev/null; }
run_cpus() { proc_field "$(run_pid "$1")" Cpus_allowed_list; }

# run_stop NAME: ends the command; its `pinion run` parent releases the CPUs.
run_stop() {
    kill "$(run_pid "$1")" 2>/dev/null
    parent=$(cat "$E2E_STATE/$1.parent" 2>/dev/null)
    [ -n "$parent" ] && wait "$parent" 2>/dev/null
    return 0
}

# The workloads the agent reports, one
# `POD CONTAINER FRONTEND POOL [(pending)] CPUS MEMS PID` line each.
ps_rows() { pinion_ps | sed -n '3,$p'; }

# ps_cpus_of_pid PID: the CPUs the agent says the run with that pid holds.
ps_cpus_of_pid() { ps_rows | awk -v pid="$1" '$NF == pid { print $(NF-2) }'; }

# All runs and the agent end with the scenario.
scenario_cleanup() {
    for parent in "$E2E_STATE"/*.parent; do
        [ -e "$parent" ] || continue
        run_stop "$(basename "$parent" .parent)"
    done
    [ -n "${AGENT_PID:-}" ] && agent_stop TERM
    return 0
}
trap scenario_cleanup EXIT
