# Discovery: `pinion topology` sees the shape qemu was given (sockets, NUMA
# nodes, cores, threads, distances), and groups threads as sysfs does.

"$PINION" topology -o json >"$E2E_STATE/topology.json" 2>"$E2E_STATE/topology.err" ||
    fail "pinion topology" "$(cat "$E2E_STATE/topology.err")"

# One "cpu socket core numa" line per CPU from the pretty-printed JSON.
awk '
    /"cpus": \[/ { in_cpus = 1; next }
    /"numa_nodes": \[/ { in_cpus = 0 }
    in_cpus && /"id":/ { gsub(/[^0-9]/, "", $2); id = $2 }
    in_cpus && /"core":/ { gsub(/[^0-9]/, "", $2); core = $2 }
    in_cpus && /"socket":/ { gsub(/[^0-9]/, "", $2); socket = $2 }
    in_cpus && /"numa":/ { gsub(/[^0-9]/, "", $2); print id, socket, core, $2 }
' "$E2E_STATE/topology.json" >"$E2E_STATE/cpus"

expected_cpus=$((E2E_SOCKETS * E2E_CORES * E2E_THREADS))
check_eq "cpus" "$expected_cpus" "$(wc -l <"$E2E_STATE/cpus" | tr -d ' ')"
check_eq "sockets" "$E2E_SOCKETS" "$(awk '{ print $2 }' "$E2E_STATE/cpus" | sort -u | wc -l | tr -d ' ')"
check_eq "numa nodes" "$E2E_NODES" "$(awk '{ print $4 }' "$E2E_STATE/cpus" | sort -u | wc -l | tr -d ' ')"
check_eq "cores" "$((E2E_SOCKETS * E2E_CORES))" "$(awk '{ print $2 "/" $3 }' "$E2E_STATE/cpus" | sort -u | wc -l | tr -d ' ')"
check_eq "threads per core" "$E2E_THREADS" \
    "$(awk '{ n[$2 "/" $3]++ } END { for (c in n) print n[c] }' "$E2E_STATE/cpus" | sort -u | tr '\n' ' ' | sed 's/ $//')"

# Per CPU: Pinion's core = sysfs thread siblings, Pinion's node = sysfs node.
bad_core="" bad_node=""
while read -r cpu socket core numa; do
    mine=$(awk -v s="$socket" -v c="$core" '$2 == s && $3 == c { print $1 }' "$E2E_STATE/cpus" | sort -n | tr '\n' ' ' | sed 's/ $//')
    [ "$mine" = "$(cpu_siblings "$cpu")" ] || bad_core="$bad_core cpu$cpu:pinion[$mine]/sysfs[$(cpu_siblings "$cpu")]"
    [ "$numa" = "$(cpu_node "$cpu")" ] || bad_node="$bad_node cpu$cpu:pinion$numa/sysfs$(cpu_node "$cpu")"
done <"$E2E_STATE/cpus"
check_eq "every core's threads are the sysfs thread siblings" "" "$bad_core"
check_eq "every cpu's numa node is its sysfs node" "" "$bad_node"

# Distances: the matrix qemu was given, as Pinion reports it.
actual=$(awk '
    /"distances": \[/ { in_d = 1; row = ""; next }
    in_d && /\]/ { in_d = 0; rows = rows (rows == "" ? "" : ";") row; next }
    in_d { gsub(/[^0-9]/, ""); row = row (row == "" ? "" : " ") $0 }
    END { print rows }
' "$E2E_STATE/topology.json")
check_eq "numa distances" "$E2E_DISTANCES" "$actual"
