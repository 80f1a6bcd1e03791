# The test bed itself: CPU quotas set and removed again and again while every
# vCPU is busy, the way pods and containers with CPU limits come and go in the
# Kubernetes guests, must not stall the guest. Each first and last quota
# switches the kernel's CFS-bandwidth static key, whose code patching stalls
# a guest under multi-threaded TCG; /init holds the key on (E2E_CFS_HOLD, the
# comment there says why). Booted with E2E_CFS_HOLD=off, this scenario hangs
# an 8-vCPU guest (multi-threaded TCG) within its first few hundred switches.

SWITCHES=2000

if [ -n "${E2E_CFS_HOLD:-}" ]; then
    held=$(cat "$E2E_CFS_HOLD")
    # No quota reads "max ..." (v2) or "-1" (v1).
    case $held in
    max* | -1 | '') fail "/init holds the CFS-bandwidth key on" "no quota in $E2E_CFS_HOLD: '$held'" ;;
    *) pass "/init holds the CFS-bandwidth key on (a quota in $E2E_CFS_HOLD: $held)" ;;
    esac
else
    fail "/init holds the CFS-bandwidth key on" "no hold (E2E_CFS_HOLD empty: see the E2E-NOTE at boot)"
fi

if [ "$(cgroup_version)" = v2 ]; then
    churn=/sys/fs/cgroup/e2e-quota-churn
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
    mkdir -p "$churn"
    quota_on() { echo "50000 100000" >"$churn/cpu.max"; }
    quota_off() { echo "max 100000" >"$churn/cpu.max"; }
else
    churn=/sys/fs/cgroup/cpu,cpuacct/e2e-quota-churn
    mkdir -p "$churn"
    quota_on() { echo 50000 >"$churn/cpu.cfs_quota_us"; }
    quota_off() { echo -1 >"$churn/cpu.cfs_quota_us"; }
fi

# The load: a spinning shell per vCPU and two that fork, so that every vCPU
# runs the scheduler's accounting while the quotas switch.
load=""
for _ in $(seq "$(nproc)"); do
    sh -c 'while :; do :; done' &
    load="$load $!"
done
for _ in 1 2; do
    sh -c 'while :; do /bin/true; done' &
    load="$load $!"
done

n=0
failed=""
while [ "$n" -lt "$SWITCHES" ]; do
    quota_on || { failed="setting the quota, switch $n"; break; }
    quota_off || { failed="removing the quota, switch $n"; break; }
    n=$((n + 1))
done
kill $load 2>/dev/null
wait 2>/dev/null
rmdir "$churn"

check_eq "$SWITCHES quotas set and removed under load on $(nproc) busy vCPUs, the guest running on${failed:+ ($failed)}" "$SWITCHES" "$n"
if [ -n "${E2E_CFS_HOLD:-}" ]; then
    check_eq "the hold's quota is still in place after the churn" "$held" "$(cat "$E2E_CFS_HOLD")"
fi
