#!/usr/bin/env python3
"""Speed ratios of Pinion's allocator against kubelet's, case by case.

Driven by scripts/kubelet-speed.sh; stdlib only. The cases are the `alloc`
group of Pinion's allocator benchmark (crates/pinion-core/benches/alloc.rs):
the 384- and 1024-CPU machines of `topology::synthetic`, packed, uncore and
distribute-numa (group size 1), all CPUs free ("idle") and 60 % free chosen by
the bench's xorshift ("fragmented"), requests 1, 8, 64 and half the machine.

kubelet: the oracle's --bench mode (kubelet's takeByTopology* functions in
process, median of 5 rounds). Pinion: criterion's median of the same bench
case (target/criterion/alloc/.../new/estimates.json). Before timing, every
case runs through `pinion alloc` and must choose the CPUs kubelet chooses
(the same case on both sides). Timing is measured, never asserted.
"""

import argparse
import glob
import json
import math
import os
import subprocess
import sys

from kubelet_diff import cpulist  # the same cpulist text as the differential test

MACHINES = [  # name, sockets, numa per socket, cores per socket, threads, cores per uncore
    ("384", 2, 2, 96, 2, 8),
    ("1024", 4, 1, 128, 2, 8),
]
ALGORITHMS = ["packed", "uncore", "distribute-numa"]
MASK = (1 << 64) - 1


def synthetic(sockets, numa_per_socket, cores_per_socket, threads, cores_per_uncore):
    """pinion_core::topology::try_synthetic: thread t of core c is CPU
    t * #cores + c."""
    total = sockets * cores_per_socket
    per_numa = cores_per_socket // numa_per_socket
    return [{"id": t * total + c, "core": c, "socket": c // cores_per_socket,
             "numa": c // per_numa, "uncore": c // cores_per_uncore}
            for t in range(threads) for c in range(total)]


def fragmented(ids):
    """The bench's `fragmented`: 60 % of the CPUs, fixed-seed xorshift."""
    state = 0x9E3779B97F4A7C15
    out = []
    for i in sorted(ids):
        state ^= (state << 13) & MASK
        state ^= state >> 7
        state ^= (state << 17) & MASK
        if state % 100 >= 40:
            out.append(i)
    return out


def cases():
    out = []
    for name, *shape in MACHINES:
        cpus = synthetic(*shape)
        ids = [c["id"] for c in cpus]
        states = [("idle", ids), ("fragmented", fragmented(ids))]
        for algo in ALGORITHMS:
            for state, free in states:
                for n in [1, 8, 64, len(ids) // 2]:
                    out.append({"id": "%s/%s/%s/%d" % (name, algo, state, n), "cpus": cpus,
                                "available": cpulist(free), "request": n, "algorithm": algo})
    return out


def criterion_medians(root):
    """full_id -> median ns of every alloc/ bench criterion has recorded."""
    out = {}
    for path in glob.glob(os.path.join(root, "alloc", "*", "*", "new", "benchmark.json")):
        with open(path) as f:
            full_id = json.load(f)["full_id"]
        with open(os.path.join(os.path.dirname(path), "estimates.json")) as f:
            out[full_id] = json.load(f)["median"]["point_estimate"]
    return out


def fmt_ns(ns):
    if ns >= 1e6:
        return "%.3f ms" % (ns / 1e6)
    if ns >= 1e3:
        return "%.2f µs" % (ns / 1e3)
    return "%.0f ns" % ns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", required=True)
    ap.add_argument("--pinion", required=True, help="the pinion CLI (cross-check of the CPUs)")
    ap.add_argument("--criterion", required=True, help="target/criterion of the bench run")
    args = ap.parse_args()

    version = subprocess.run([args.oracle, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    print("kubelet allocator: %s (in process, median of 5 rounds)" % version)
    all_cases = cases()

    # the same case on both sides: Pinion's CPUs must be kubelet's
    alloc_cases = []
    for c in all_cases:
        ac = {"kind": "take", "name": c["id"], "topology": {"cpus": c["cpus"]},
              "available": c["available"], "request": c["request"], "algorithm": c["algorithm"]}
        if c["algorithm"] == "distribute-numa":
            ac["cpu_group_size"] = 1
        alloc_cases.append(ac)
    pres = subprocess.run([args.pinion, "alloc", "-", "-o", "json"], capture_output=True,
                          text=True, input=json.dumps(alloc_cases))
    if pres.returncode != 0:
        print("pinion alloc failed: " + pres.stderr, file=sys.stderr)
        return 2
    pinion_cpus = [json.loads(line) for line in pres.stdout.splitlines() if line.strip()]

    oin = "".join(json.dumps(c) + "\n" for c in all_cases)
    kres = subprocess.run([args.oracle, "--bench"], input=oin, capture_output=True, text=True)
    if kres.returncode != 0:
        print("oracle failed: " + kres.stderr, file=sys.stderr)
        return 2
    kube = [json.loads(line) for line in kres.stdout.splitlines()]
    medians = criterion_medians(args.criterion)

    rows, mismatched = [], 0
    for c, k, p in zip(all_cases, kube, pinion_cpus):
        same = (p.get("cpus") or "") == (k["cpus"] or "")
        if not same:
            mismatched += 1
            print("DIFFERENT CPUS %s: kubelet %s, pinion %s" % (c["id"], k["cpus"], p.get("cpus")),
                  file=sys.stderr)
        pin = medians.get("alloc/" + c["id"])
        rows.append((c["id"], k["ns_per_call"], pin, same))

    print()
    print("| case (CPUs/algorithm/state/request) | kubelet | Pinion | ratio |")
    print("|---|---|---|---|")
    ratios = []
    for case_id, kns, pns, same in rows:
        if pns is None:
            print("| %s | %s | (no criterion figure) | — |" % (case_id, fmt_ns(kns)))
            continue
        r = kns / pns
        ratios.append((r, case_id))
        print("| %s | %s | %s | %s× |" % (case_id, fmt_ns(kns), fmt_ns(pns),
                                          format(round(r), ",")))
    if ratios:
        geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
        low = min(ratios)
        print()
        print("cases: %d timed, min %s× (%s), geometric mean %s×"
              % (len(ratios), format(round(low[0]), ","), low[1], format(round(geo), ",")))
        print("targets: >= 100x every case: %s; >= 3,000x geometric mean: %s"
              % ("met" if low[0] >= 100 else "MISSED", "met" if geo >= 3000 else "MISSED"))
    print("%d cases with the same CPUs on both sides, %d different" % (len(rows) - mismatched,
                                                                       mismatched))
    return 1 if mismatched or len(ratios) < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
