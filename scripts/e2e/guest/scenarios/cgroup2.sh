# cgroup v2 specifics: Pinion enables +cpuset itself where it is not enabled
# in cgroup.subtree_control (from the mount down to its root, here nested two
# levels deep), and +cpu and +memory where offered (the OCI settings of
# resource plugins become cpu.max, cpu.weight, memory.max in a run's
# cgroup), leaves the other controllers alone, and its run cgroups show
# the placement in cpuset.cpus.effective (cpuset.mems left to the parent), as plain
# domain cgroups with the partition file present and untouched.

if [ "$(cgroup_version)" != v2 ]; then
    skip "cgroup v2" "this guest runs cgroup v1"
    exit 0
fi
mnt=/sys/fs/cgroup
root=$mnt/e2e/nested/pinion
# (Run first in a guest: an earlier scenario's agent enables cpuset at the mount.)
if tr ' ' '\n' <"$mnt/cgroup.subtree_control" | grep -qx cpuset; then
    note "cpuset was already enabled at the mount (by an earlier scenario)"
fi
mkdir -p "$mnt/e2e/nested"
check_eq "cpuset not enabled in the new subtree before the agent" "" \
    "$(tr ' ' '\n' <"$mnt/e2e/cgroup.subtree_control" | grep -x cpuset)"
check_eq "cpuset not enabled in the parent of pinion's root before the agent" "" \
    "$(tr ' ' '\n' <"$mnt/e2e/nested/cgroup.subtree_control" | grep -x cpuset)"

agent_start --cgroup-root "$root" || fail "agent starts with --cgroup-root $root" "no answer on $SOCK"
for d in "$mnt" "$mnt/e2e" "$mnt/e2e/nested" "$root"; do
    check_eq "+cpuset enabled in $d/cgroup.subtree_control" cpuset \
        "$(tr ' ' '\n' <"$d/cgroup.subtree_control" | grep -x cpuset)"
done
for c in cpu memory; do
    if tr ' ' '\n' <"$root/cgroup.controllers" | grep -qx "$c"; then
        check_eq "+$c enabled under pinion's root (it is offered)" "$c" \
            "$(tr ' ' '\n' <"$root/cgroup.subtree_control" | grep -x "$c")"
    fi
done
check_eq "other controllers left alone under pinion's root" "" \
    "$(tr ' ' '\n' <"$root/cgroup.subtree_control" | grep -vx -e cpuset -e cpu -e memory -e '')"

if run_start pinned 2; then
    pid=$(run_pid pinned)
    cpus=$(run_cpus pinned)
    dir=$(cpuset_dir "$pid")
    case $dir in
    "$root"/*) pass "the run's cgroup is under pinion's root" ;;
    *) fail "the run's cgroup is under pinion's root" "$dir" ;;
    esac
    check_eq "cpuset.cpus.effective" "$(cpus_expand "$cpus")" "$(cpus_expand "$(cat "$dir/cpuset.cpus.effective")")"
    # Regression: the run's memory nodes were narrowed to its CPUs' node
    # (kubelet's static policy leaves them; v2 migrates memory on attach).
    check_eq "cpuset.mems not written" "" "$(cat "$dir/cpuset.mems")"
    check_eq "cpuset.mems.effective: every memory node" "$(memory_nodes)" "$(cpus_expand "$(cat "$dir/cpuset.mems.effective")")"
    check_eq "cgroup.type" domain "$(cat "$dir/cgroup.type")"
    check_eq "cpuset.cpus.partition" member "$(cat "$dir/cpuset.cpus.partition" 2>&1)"
    check_eq "pinion's root is a plain domain" domain "$(cat "$root/cgroup.type")"
    check_eq "pinion's root holds no process (v2 leaf rule)" "" "$(cat "$root/cgroup.procs")"
else
    fail "pinned run starts" "$(cat "$E2E_STATE/pinned.log")"
fi

# What Pinion's executor does when a plugin's memory nodes are taken back
# from a run (`reset_mems`, v2), on a cgroup with a process bound to one
# node: an empty cpuset.mems is no way back (the kernel refuses it: ENOSPC),
# the parent's cpuset.mems.effective written as a list is.
probe=$mnt/e2e/nested/mems-probe
if mkdir "$probe" 2>/dev/null; then
    sleep 60 &
    sleeper=$!
    echo "$sleeper" >"$probe/cgroup.procs"
    first=$(memory_nodes | cut -d' ' -f1)
    echo "$first" >"$probe/cpuset.mems"
    check_eq "a populated cgroup bound to node $first" "$first" "$(cat "$probe/cpuset.mems.effective")"
    if echo >"$probe/cpuset.mems" 2>"$E2E_STATE/mems-probe.err"; then
        note "this kernel lets a populated cgroup empty its cpuset.mems"
    else
        note "emptying cpuset.mems refused: $(cat "$E2E_STATE/mems-probe.err")"
    fi
    if cat "$mnt/e2e/nested/cpuset.mems.effective" >"$probe/cpuset.mems" 2>"$E2E_STATE/mems-probe.err"; then
        pass "a populated cgroup takes its parent's effective memory nodes"
    else
        fail "a populated cgroup takes its parent's effective memory nodes" "$(cat "$E2E_STATE/mems-probe.err")"
    fi
    check_eq "then its cpuset.mems.effective is every memory node" "$(memory_nodes)" \
        "$(cpus_expand "$(cat "$probe/cpuset.mems.effective")")"
    kill "$sleeper"
    wait "$sleeper" 2>/dev/null
    rmdir "$probe"
else
    fail "the memory-node probe cgroup is made" "$probe"
fi

# What the executor writes when a plugin's OCI settings are taken back from
# a run (`resources::plan`, v2): a fresh cgroup's values, which a cgroup
# with a process takes, and which then read as a fresh sibling's.
# (Beside pinion's root: its parent enables cpu and memory for it.)
fresh=$mnt/e2e/nested/settings-fresh
probe=$mnt/e2e/nested/settings-probe
if tr ' ' '\n' <"$mnt/e2e/nested/cgroup.subtree_control" | grep -qx cpu &&
    tr ' ' '\n' <"$mnt/e2e/nested/cgroup.subtree_control" | grep -qx memory &&
    mkdir "$fresh" "$probe" 2>/dev/null; then
    sleep 60 &
    sleeper=$!
    echo "$sleeper" >"$probe/cgroup.procs"
    echo "50000 200000" >"$probe/cpu.max"
    echo 20 >"$probe/cpu.weight"
    echo 268435456 >"$probe/memory.max"
    echo 943718400 >"$probe/memory.high"
    check_eq "a plugin's quota in a populated cgroup" "50000 200000" "$(cat "$probe/cpu.max")"
    failed=""
    for write in "cpu.max:max 100000" "cpu.weight:100" "memory.max:max" "memory.high:max"; do
        file=${write%%:*}
        echo "${write#*:}" >"$probe/$file" 2>>"$E2E_STATE/settings-probe.err" || failed="$failed $file"
    done
    check_eq "the fresh values are taken by a populated cgroup" "" "$failed"
    for file in cpu.max cpu.weight memory.max memory.high; do
        check_eq "$file taken back reads as a fresh cgroup's" "$(cat "$fresh/$file")" "$(cat "$probe/$file")"
    done
    kill "$sleeper"
    wait "$sleeper" 2>/dev/null
    rmdir "$probe" "$fresh"
else
    fail "the settings probe cgroups are made with cpu and memory enabled" "$(cat "$mnt/e2e/nested/cgroup.subtree_control")"
fi
