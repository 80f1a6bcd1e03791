# Issue 31 items 3 and 4 on a real kernel (docs/isolcpus-and-whole-uncore.md): CPUs the
# kernel isolates at boot stay out of the shared pool and are handed out on
# request (`pinion run --isolated require|prefer`), and `--uncore exclusive`
# takes whole L3 groups that nothing else shares.
#
# Which checks run depends on the boot, never reported as skipped: the
# isolcpus checks in a boot with `isolcpus=` on the kernel command line,
# the "no isolated CPUs" checks in a boot without it, and the whole-uncore
# checks where the guest has at least two L3 groups (qemu gives one L3 per
# socket) one of which the reserved CPU does not touch.

agent_start || fail "agent starts" "no answer on $SOCK"

SYS=/sys/devices/system/cpu
sys_isolated=$(tr -d " \0\n" <"$SYS/isolated" 2>/dev/null)
sys_nohz=$(tr -d " \0\n" <"$SYS/nohz_full" 2>/dev/null)
[ "$sys_nohz" = "(null)" ] && sys_nohz=""
topology=$("$PINION" topology 2>&1)

# iso_run NAME ARGS...: `pinion run ARGS -- sleep` in the background; waits
# until the command runs or `pinion run` ends (refused). Its cpus: run_cpus.
iso_run() {
    name=$1
    shift
    rm -f "$E2E_STATE/$name.pid" "$E2E_STATE/$name.status"
    ("$PINION" run --socket "$SOCK" "$@" -- \
        sh -c "echo \$\$ >$E2E_STATE/$name.tmp && mv $E2E_STATE/$name.tmp $E2E_STATE/$name.pid && exec sleep 1000000" \
        >"$E2E_STATE/$name.log" 2>&1
    echo $? >"$E2E_STATE/$name.status") &
    echo $! >"$E2E_STATE/$name.parent"
    started() { test -s "$E2E_STATE/$name.pid" || test -s "$E2E_STATE/$name.status"; }
    wait_for 120 started
}

# shared_cpus: where a shared-pool run lands.
shared_cpus() {
    "$PINION" run --socket "$SOCK" -- sh -c 'grep Cpus_allowed_list /proc/self/status' |
        sed 's/^[^:]*:[[:space:]]*//'
}

if grep -qw 'isolcpus=[^ ]*' /proc/cmdline && [ -n "$sys_isolated" ]; then
    note "isolcpus boot: isolated $sys_isolated, nohz_full ${sys_nohz:-none}; $(grep -o 'isolcpus=[^ ]*' /proc/cmdline)"
    check_contains "pinion topology shows the kernel's isolated cpus ($sys_isolated)" \
        "isolated ($sys_isolated)" "$topology"
    if [ -n "$sys_nohz" ]; then
        check_contains "pinion topology shows the nohz_full cpus ($sys_nohz)" "nohz_full $sys_nohz" "$topology"
    fi
    pool=$(shared_cpus)
    check_eq "the shared pool ($pool) holds no isolated cpu" "" "$(cpus_intersect "$pool" "$sys_isolated")"

    online=$(cpus_count "$(cat "$SYS/online")")
    ordinary=$((online - $(cpus_count "$RESERVED") - $(cpus_count "$sys_isolated")))
    iso_run plain --cpus "$ordinary"
    plain=$(run_cpus plain)
    check_eq "a plain run of every ordinary cpu ($ordinary) gets no isolated cpu (got $plain)" \
        "" "$(cpus_intersect "${plain:-none}" "$sys_isolated")"
    run_stop plain

    n_isolated=$(cpus_count "$sys_isolated")
    iso_run rt --cpus "$n_isolated" --isolated require
    rt=$(run_cpus rt)
    check_eq "--isolated require gets the isolated cpus" "$(cpus_expand "$sys_isolated")" "$(cpus_expand "${rt:-none}")"
    check_eq "pinion ps agrees" "$(cpus_expand "$sys_isolated")" \
        "$(cpus_expand "$(ps_cpus_of_pid "$(run_pid rt)")")"
    out=$("$PINION" run --socket "$SOCK" --cpus 1 --isolated require -- true 2>&1)
    status=$?
    check_eq "one more --isolated require is refused (exit 125)" 125 "$status"
    check_contains "the refusal names the shortfall" "1 short" "$out"
    run_stop rt
    pool=$(shared_cpus)
    check_eq "released isolated cpus do not join the shared pool ($pool)" "" \
        "$(cpus_intersect "$pool" "$sys_isolated")"

    iso_run pref --cpus $((n_isolated + 1)) --isolated prefer
    pref=$(run_cpus pref)
    check_true "--isolated prefer takes the isolated cpus first ($pref)" cpus_subset "$sys_isolated" "${pref:-none}"
    check_eq "--isolated prefer fills up with one ordinary cpu" $((n_isolated + 1)) "$(cpus_count "${pref:-}")"
    run_stop pref
elif ! grep -qw 'isolcpus=[^ ]*' /proc/cmdline; then
    check_contains "without isolcpus= pinion topology lists no isolated cpu" "0 isolated" "$topology"
    out=$("$PINION" run --socket "$SOCK" --cpus 1 --isolated require -- true 2>&1)
    status=$?
    check_eq "--isolated require without isolated cpus is refused (exit 125)" 125 "$status"
    check_contains "the refusal says the machine isolates none" "boot-isolated cpus: none" "$out"
fi

# Whole uncore: the L3 groups as the kernel reports them.
l3_groups=$(cat "$SYS"/cpu*/cache/index3/shared_cpu_list 2>/dev/null | sort -u)
free_groups=""
for g in $l3_groups; do
    [ -z "$(cpus_intersect "$g" "$RESERVED")" ] && [ -z "$(cpus_intersect "$g" "${sys_isolated:-none}")" ] &&
        free_groups="$free_groups $g"
done
set -- $free_groups
if [ "$(echo "$l3_groups" | wc -w)" -ge 2 ] && [ $# -ge 1 ]; then
    group=$1
    size=$(cpus_count "$group")
    note "L3 groups: $(echo $l3_groups); free of the reserved cpu: $free_groups"
    iso_run whole --cpus "$size" --uncore exclusive
    whole=$(run_cpus whole)
    is_group=no
    for g in $l3_groups; do [ "$(cpus_expand "$g")" = "$(cpus_expand "${whole:-none}")" ] && is_group=yes; done
    check_eq "--uncore exclusive --cpus $size holds one whole L3 group (got $whole)" yes "$is_group"
    pool=$(shared_cpus)
    check_eq "the shared pool ($pool) shares no cpu of that L3" "" "$(cpus_intersect "$pool" "${whole:-none}")"
    out=$("$PINION" run --socket "$SOCK" --cpus $((size / 2)) --uncore exclusive -- true 2>&1)
    check_contains "an unaligned --uncore exclusive is refused naming the group size" \
        "not a whole number of uncore caches of $size cpus" "$out"
    if [ $# -eq 1 ]; then
        out=$("$PINION" run --socket "$SOCK" --cpus 1 --uncore exclusive --uncore-round-up -- true 2>&1)
        check_contains "with no whole L3 left, a rounded-up request is refused" "wholly free" "$out"
    else
        iso_run round --cpus 1 --uncore exclusive --uncore-round-up
        check_eq "--uncore-round-up rounds 1 cpu up to a whole L3 of $size" "$size" "$(cpus_count "$(run_cpus round)")"
        run_stop round
    fi
    run_stop whole
fi
