# Exclusivity under concurrency: as many `pinion run --cpus 2` as there are
# free whole cores, started at once, all hold their cores at the same time;
# the sets are whole cores, pairwise disjoint, never the reserved CPU; one
# more request is refused with the allocator's reason.

agent_start || fail "agent starts" "no answer on $SOCK"
online=$(cpus_count "$(cat /sys/devices/system/cpu/online)")
k=$(((online - $(cpus_count "$RESERVED")) / 2))
i=1
while [ "$i" -le "$k" ]; do
    "$PINION" run --socket "$SOCK" --cpus 2 -- sh -c \
        "grep Cpus_allowed_list /proc/self/status >$E2E_STATE/r$i.tmp; mv $E2E_STATE/r$i.tmp $E2E_STATE/r$i.cpus; while [ ! -e $E2E_STATE/go ]; do sleep 0.1; done" \
        >"$E2E_STATE/r$i.log" 2>&1 &
    echo $! >"$E2E_STATE/r$i.parent"
    i=$((i + 1))
done
all_in() { [ "$(ls "$E2E_STATE"/r*.cpus 2>/dev/null | wc -l)" -ge "$k" ]; }
if wait_for 300 all_in; then
    pass "$k concurrent runs of 2 cpus all admitted"
else
    fail "$k concurrent runs of 2 cpus all admitted" "$(cat "$E2E_STATE"/r*.log)"
fi
seen="" overlap="" notcore=""
for f in "$E2E_STATE"/r*.cpus; do
    [ -e "$f" ] || continue
    cpus=$(sed 's/^[^:]*:[[:space:]]*//' "$f")
    [ -n "$(cpus_intersect "$cpus" "${seen:-none}")" ] && overlap="$overlap [$cpus]"
    is_sibling_group "$cpus" && [ "$(cpus_count "$cpus")" = 2 ] || notcore="$notcore [$cpus]"
    seen="$seen${seen:+,}$cpus"
done
check_eq "no two concurrent runs share a cpu" "" "$overlap"
check_eq "every run holds one whole core" "" "$notcore"
check_eq "no run on the reserved cpu" "" "$(cpus_intersect "${seen:-none}" "$RESERVED")"

out=$("$PINION" run --socket "$SOCK" --cpus 2 -- true 2>&1)
status=$?
check_eq "one more run of 2 cpus is refused (exit 125)" 125 "$status"
check_contains "the refusal names the allocator's reason" "not enough cpus available to satisfy request: requested=2" "$out"

touch "$E2E_STATE/go"
for f in "$E2E_STATE"/r*.parent; do wait "$(cat "$f")" 2>/dev/null; done
released() { [ -z "$(ps_rows)" ]; }
wait_for 60 released || true
check_eq "all runs released when they end" "" "$(ps_rows)"
rm -f "$E2E_STATE"/r*.parent
