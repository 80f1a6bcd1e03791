#!/usr/bin/env python3
"""Differential testing of `pinion simulate` against kubelet's own CPU manager.

Driven by scripts/kubelet-diff.sh (which builds both programs); stdlib only.

Generates N random scenarios deterministically from SEED, runs every one
through the kubelet oracle (interop/kubelet-oracle: kubelet's static policy
linked from k8s.io/kubernetes) and through `pinion simulate -o json`
(one batch), and compares them step by step: the construction error, and for
each step the error text, the container's exclusive CPUs (add steps) and the
shared pool afterwards.

A difference passes only when it belongs to a documented difference class: a
named predicate below that cites its row of docs/differences-from-kubelet.md.
Every other difference fails; the case is written to OUT/fail-<id>.json, a
self-contained scenario that replays with `pinion simulate` (machines of
../shared/topologies are referenced in place by absolute `sysroot`), with
kubelet's answer under the key `kubelet` (ignored by Pinion).
"""

import argparse
import json
import os
import random
import subprocess
import sys

TOPOLOGIES = ""  # ../shared/topologies of the checkout, from --topologies
# Real machines read in place (sysfs roots); each is discovered once by
# `pinion topology` so that the oracle gets the same CPUs as Pinion.
SYSROOT_MACHINES = [
    "x86-1s-intel-skylake-x-10c-ht",
    "x86-1s-intel-i7-1165g7-4c-ht",
    "x86-2s-intel-xeon-gold-6230-ht-snc2",
    "x86-2s-intel-xeon-silver-4108-ht",
    "x86-2s-amd-epyc-7451-ht-16ccx-8numa",
    "x86-1s-amd-ryzen5-1600-ht-2ccx-nopossible",
    "x86-2s-intel-xeon-e5345-no-l3",
    "x86-2s-intel-xeon-e5-2680-noht",
    "x86-1s-intel-alderlake-p-hybrid-12c",
    "x86-1s-intel-i7-1370p-hybrid",
    "x86-4s-amd-opteron-6134-8numa",
    "arm64-2s-hisilicon-kunpeng920-128c-4numa",
]

OPTIONS = [
    ("full-pcpus-only", "stable"),
    ("distribute-cpus-across-numa", "beta"),
    ("align-by-socket", "alpha"),
    ("distribute-cpus-across-cores", "alpha"),
    ("strict-cpu-reservation", "stable"),
    ("prefer-align-cpus-by-uncorecache", "stable"),
]
INCOMPATIBLE = [
    {"full-pcpus-only", "distribute-cpus-across-cores"},
    {"distribute-cpus-across-numa", "distribute-cpus-across-cores"},
    {"prefer-align-cpus-by-uncorecache", "distribute-cpus-across-cores"},
    {"prefer-align-cpus-by-uncorecache", "distribute-cpus-across-numa"},
]


# --------------------------------------------------------------------------
# machines

def synthetic(rng):
    """A synthetic machine: (description, cpu list). Regular SMT machines with
    several NUMA nodes per socket and several uncore caches per NUMA node,
    machines without an L3 (uncore = socket, what cAdvisor/kubelet fall back
    to), and hybrid parts (P-cores with 2 threads beside 1-thread E-cores)."""
    kind = rng.choice(["regular", "regular", "no-l3", "hybrid", "large"])
    cpus = []
    if kind == "hybrid":
        p, e = rng.choice([(2, 8), (4, 4), (6, 8), (8, 8), (1, 4)])
        ecluster = rng.choice([4, 8, 0])  # E-cores per uncore group; 0 = one L3
        nid = 0
        for i in range(p):
            for _t in range(2):
                cpus.append({"id": nid, "core": 2 * i, "socket": 0, "numa": 0, "uncore": 0,
                             "core_type": "intel_core"})
                nid += 1
        base = nid
        for j in range(e):
            unc = 0 if ecluster == 0 else 1 + j // ecluster
            cpus.append({"id": nid, "core": base + j, "socket": 0, "numa": 0, "uncore": unc,
                         "core_type": "intel_atom"})
            nid += 1
        return "hybrid-%dp-%de-u%d" % (p, e, ecluster), cpus, numa_nodes(cpus)
    if kind == "large":
        # up to 1,024 CPUs; 16 NUMA nodes need max-allowable-numa-nodes
        sockets, numa_per, cores_per_numa, threads, uncore_per_numa = rng.choice([
            (2, 4, 64, 2, 8), (2, 2, 48, 2, 4), (4, 4, 32, 2, 4), (1, 4, 32, 2, 4),
            (2, 1, 96, 2, 12), (8, 2, 32, 2, 4), (2, 4, 16, 1, 2)])
    else:
        sockets = rng.choice([1, 2, 2, 4])
        numa_per = rng.choice([1, 1, 2])
        cores_per_numa = rng.choice([2, 3, 4, 6, 8])
        threads = rng.choice([1, 2, 2])
        uncore_per_numa = 1 if kind == "no-l3" else rng.choice([1, 1, 2])
    if cores_per_numa % uncore_per_numa:
        uncore_per_numa = 1
    ncores = sockets * numa_per * cores_per_numa
    # Linux numbering: thread t of core c is CPU c + t * ncores.
    for s in range(sockets):
        for n in range(numa_per):
            numa = s * numa_per + n
            for k in range(cores_per_numa):
                c = numa * cores_per_numa + k
                if kind == "no-l3":
                    unc = s
                else:
                    unc = numa * uncore_per_numa + k // (cores_per_numa // uncore_per_numa)
                for t in range(threads):
                    cpus.append({"id": c + t * ncores, "core": c, "socket": s, "numa": numa,
                                 "uncore": unc})
    cpus.sort(key=lambda x: x["id"])
    return "%s-%ds-%dn-%dc-%dt-%du" % (kind, sockets, numa_per, cores_per_numa, threads,
                                       uncore_per_numa), cpus, numa_nodes(cpus)


def numa_nodes(cpus):
    """Distances as firmware gives them: 10 local, 12 within a socket, 21
    across sockets, 31 across two socket hops (socket ids differing by > 1)."""
    socket_of = {}
    for c in cpus:
        socket_of[c["numa"]] = c["socket"]
    ids = sorted(socket_of)
    out = []
    for a in ids:
        d = []
        for b in ids:
            if a == b:
                d.append(10)
            elif socket_of[a] == socket_of[b]:
                d.append(12)
            else:
                d.append(21 if abs(socket_of[a] - socket_of[b]) == 1 else 31)
        out.append({"id": a, "distances": d})
    return out


def discover(pinion, name):
    out = subprocess.run([pinion, "topology", "--sysroot", os.path.join(TOPOLOGIES, name),
                          "-o", "json"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    topo = json.loads(out.stdout)
    return ([{k: c[k] for k in ("id", "core", "socket", "numa", "uncore")} for c in topo["cpus"]],
            topo.get("numa_nodes") or [])


# --------------------------------------------------------------------------
# scenarios

def quantity_cpu(rng, n):
    return str(n)


def gen_container(rng, name, ncpus, qos):
    """qos: G (guaranteed, integral), F (guaranteed, fractional), B, E."""
    mem = rng.choice(["128Mi", "1Gi", "2Gi"])
    if qos == "G":
        r = rng.random()
        if r < 0.7:
            n = rng.choice([1, 1, 2, 2, 3, 4, 4, 5, 6, 8])
        elif r < 0.9:  # a sizeable share of the machine: spans cores, caches, NUMA nodes
            n = max(1, rng.choice([ncpus // 8, ncpus // 4, ncpus // 3, ncpus // 2]) + rng.choice([-1, 0, 0, 1]))
        else:
            n = rng.randint(1, max(1, ncpus))
        return {"name": name, "cpu_request": str(n), "cpu_limit": str(n),
                "memory_request": mem, "memory_limit": mem}
    if qos == "F":
        m = rng.choice(["500m", "1500m", "250m"])
        return {"name": name, "cpu_request": m, "cpu_limit": m, "memory_request": mem,
                "memory_limit": mem}
    if qos == "B":
        return {"name": name, "cpu_request": rng.choice(["100m", "1", "2"]),
                "memory_request": mem}
    return {"name": name}


def gen_pod(rng, ncpus):
    """A pod; its QoS class comes from all of its containers."""
    r = rng.random()
    pod_qos = "G" if r < 0.7 else ("B" if r < 0.9 else "E")
    ninit = rng.choice([0, 0, 0, 1, 1, 2])
    napp = rng.choice([1, 1, 1, 2, 2, 3])
    inits, apps = [], []
    for i in range(ninit):
        q = pod_qos if pod_qos != "G" else ("G" if rng.random() < 0.85 else "F")
        c = gen_container(rng, "init%d" % i, ncpus, q)
        if rng.random() < 0.25:
            c["restart_policy"] = "Always"  # a sidecar (restartable init container)
        inits.append(c)
    for i in range(napp):
        q = pod_qos if pod_qos != "G" else ("G" if rng.random() < 0.85 else "F")
        apps.append(gen_container(rng, "app%d" % i, ncpus, q))
    if pod_qos == "B" and all(("cpu_request" not in c and "memory_request" not in c)
                              for c in inits + apps):
        apps[0] = gen_container(rng, "app0", ncpus, "B")
    return {"init_containers": inits, "containers": apps}


def gen_options(rng, cpus):
    opts = {}
    for name, _level in OPTIONS:
        if rng.random() < 0.3:
            opts[name] = "true" if rng.random() < 0.92 else "false"
    if rng.random() < 0.9:
        # mostly combinations kubelet accepts; a few incompatible pairs stay.
        for pair in INCOMPATIBLE:
            if pair <= {k for k, v in opts.items() if v == "true"}:
                opts.pop(rng.choice(sorted(pair)))
    gates = {"CPUManagerPolicyAlphaOptions": True, "CPUManagerPolicyBetaOptions": True}
    if rng.random() < 0.08:
        gates = {"CPUManagerPolicyAlphaOptions": False, "CPUManagerPolicyBetaOptions": True}
        off = {"alpha"}
        if rng.random() < 0.5:
            # Both gates off: a stable option needs none, a beta one is refused.
            gates["CPUManagerPolicyBetaOptions"] = False
            off.add("beta")
        # at most one option that the gates refuse: with several, the one kubelet
        # reports depends on Go map order (documented difference, avoided here).
        refused = [k for k in opts if dict(OPTIONS)[k] in off]
        for k in refused[1:]:
            opts.pop(k)
    return opts, gates


def gen_reserved(rng, cpus):
    ids = [c["id"] for c in cpus]
    n = rng.choice([1, 1, 2, 2, 3, 4])
    n = min(n, max(1, len(ids) // 4))
    if rng.random() < 0.5:
        return n, ""
    if rng.random() < 0.5:
        picked = sorted(rng.sample(ids, n))
    else:  # whole cores from the top or the bottom, as admins usually do
        by_core = {}
        for c in cpus:
            by_core.setdefault(c["core"], []).append(c["id"])
        cores = sorted(by_core)
        if rng.random() < 0.5:
            cores.reverse()
        picked = []
        for core in cores:
            if len(picked) >= n:
                break
            picked += by_core[core]
        picked = sorted(picked)
    return len(picked), cpulist(picked)


def cpulist(ids):
    ids = sorted(ids)
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else "%d-%d" % (ids[i], ids[j]))
        i = j + 1
    return ",".join(out)


def gen_pod_level(rng, ncpus):
    """A pod with pod-level resources (spec.resources): Guaranteed at the pod
    level; its containers without resources or with integral CPUs that fit."""
    n = rng.choice([1, 2, 2, 3, 4, 4, 6, 8])
    n = min(n, max(1, ncpus // 2))
    mem = rng.choice(["1Gi", "2Gi"])
    if rng.random() < 0.15:  # Burstable at the pod level
        res = {"cpu_request": str(n), "memory_request": mem}
    else:
        res = {"cpu_request": str(n), "cpu_limit": str(n), "memory_request": mem,
               "memory_limit": mem}
    inits, apps = [], []
    left = n
    for i in range(rng.choice([0, 0, 1])):
        c = {"name": "init%d" % i}
        if rng.random() < 0.3:
            c["restart_policy"] = "Always"
        inits.append(c)
    for i in range(rng.choice([1, 1, 2, 3])):
        c = {"name": "app%d" % i}
        if left > 1 and rng.random() < 0.4:
            k = rng.randint(1, left - 1)
            left -= k
            c.update({"cpu_request": str(k), "cpu_limit": str(k), "memory_request": "128Mi",
                      "memory_limit": "128Mi"})
        apps.append(c)
    return {"init_containers": inits, "containers": apps, "pod_resources": res}


def gen_topology_manager(rng, nodes):
    """kubelet's Topology Manager configuration: every policy with both
    scopes, its options (valid ones mostly)."""
    policy = rng.choice(["none", "none", "best-effort", "restricted", "single-numa-node"])
    if len(nodes) > 8:
        # kubelet's hint generation visits every NUMA-node mask (2^16 here) for
        # every CPU count: seconds per admission, beyond the oracle's timeout.
        policy = "none"
    scope = rng.choice(["container", "pod"])
    opts = {}
    if rng.random() < 0.3:
        opts["prefer-closest-numa-nodes"] = rng.choice(["true", "true", "false"])
    if len(nodes) > 8:
        if rng.random() < 0.9:
            opts["max-allowable-numa-nodes"] = str(len(nodes) + rng.choice([0, 0, 4]))
    elif rng.random() < 0.05:
        opts["max-allowable-numa-nodes"] = rng.choice(["8", "12"])
    if rng.random() < 0.02:  # kubelet's option errors
        opts[rng.choice(["max-allowable-numa-nodes", "prefer-closest-numa-nodes",
                         "no-such-option"])] = rng.choice(["4", "x"])
    return policy, scope, opts


def gen_steps(rng, pods, grouped=False):
    """Adds follow each pod's order (init containers first); pods interleave;
    removals of containers added earlier (an exited init container, a
    finished pod) happen at random points. `grouped` (a Topology Manager
    policy other than none): a pod's adds are consecutive and its containers
    are removed only once all of them are added, as kubelet admits a pod's
    containers together."""
    queues = {uid: [c["name"] for c in p["init_containers"]] + [c["name"] for c in p["containers"]]
              for uid, p in pods.items()}
    added = []
    steps = []
    current = None
    while any(queues.values()):
        if grouped and current is not None and queues[current]:
            uid = current  # kubelet admits a pod's containers together
        else:
            uid = rng.choice(sorted(u for u, q in queues.items() if q))
        current = uid
        steps.append({"op": "add", "pod": uid, "container": queues[uid].pop(0)})
        added.append((uid, steps[-1]["container"]))
        removable = [i for i, (u, _c) in enumerate(added) if not grouped or not queues[u]]
        if removable and rng.random() < 0.2:
            u, c = added.pop(rng.choice(removable))
            steps.append({"op": "remove", "pod": u, "container": c})
    if rng.random() < 0.3:
        for u, c in rng.sample(added, min(len(added), rng.randint(1, 3))):
            steps.append({"op": "remove", "pod": u, "container": c})
    return steps


def gen_case(rng, index, machines):
    mname, sysroot, cpus, nodes = rng.choice(machines)
    opts, gates = gen_options(rng, cpus)
    if len(nodes) > 8:
        # kubelet's distributed allocator tries NUMA-node combinations: on 16
        # nodes one admission takes longer than the oracle's timeout.
        opts.pop("distribute-cpus-across-numa", None)
    num_reserved, reserved = gen_reserved(rng, cpus)
    npods = rng.randint(1, 6) if rng.random() < 0.7 else rng.randint(6, 12)
    tm, scope, tm_opts = gen_topology_manager(rng, nodes)
    pod_level = rng.random() < 0.1
    if pod_level:
        gates = dict(gates, PodLevelResourceManagers=rng.random() < 0.8)
    pods = {}
    for i in range(npods):
        if pod_level and rng.random() < 0.6:
            pods["pod%d" % i] = gen_pod_level(rng, len(cpus))
        else:
            pods["pod%d" % i] = gen_pod(rng, len(cpus))
    steps = gen_steps(rng, pods, grouped=tm != "none")
    return {"id": "c%05d" % index, "machine": mname, "sysroot": sysroot, "cpus": cpus,
            "numa_nodes": nodes, "options": opts, "gates": gates, "num_reserved": num_reserved,
            "reserved": reserved, "topology_manager_policy": tm, "topology_manager_scope": scope,
            "topology_manager_policy_options": tm_opts, "pods": pods, "steps": steps}


def oracle_input(case):
    return {k: case[k] for k in ("id", "cpus", "numa_nodes", "options", "gates", "num_reserved",
                                 "reserved", "topology_manager_policy",
                                 "topology_manager_scope", "topology_manager_policy_options",
                                 "pods", "steps")}


def pinion_scenario(case):
    sc = {"name": case["id"] + " " + case["machine"]}
    if case["sysroot"]:
        sc["sysroot"] = case["sysroot"]
    else:
        sc["topology"] = {"cpus": case["cpus"], "numa_nodes": case["numa_nodes"]}
    sc["options"] = case["options"]
    sc["feature_gates"] = {"alpha": case["gates"]["CPUManagerPolicyAlphaOptions"],
                           "beta": case["gates"]["CPUManagerPolicyBetaOptions"]}
    sc["num_reserved"] = case["num_reserved"]
    if case["reserved"]:
        sc["reserved"] = case["reserved"]
    sc["topologyManagerPolicy"] = case["topology_manager_policy"]
    sc["topologyManagerScope"] = case["topology_manager_scope"]
    if case["topology_manager_policy_options"]:
        sc["topologyManagerPolicyOptions"] = case["topology_manager_policy_options"]
    if "PodLevelResourceManagers" in case["gates"]:
        sc["features"] = {"PodLevelResourceManagers": case["gates"]["PodLevelResourceManagers"]}
    sc["pods"] = {uid: {k: v for k, v in p.items() if k != "pod_resources"}
                  for uid, p in case["pods"].items()}
    pod_res = {uid: p["pod_resources"] for uid, p in case["pods"].items() if "pod_resources" in p}
    if pod_res:
        sc["pod_resources"] = pod_res
    sc["steps"] = [{"op": "start"}] + case["steps"]
    return sc


# --------------------------------------------------------------------------
# documented difference classes (docs/differences-from-kubelet.md)

def diff_strict_reservation_empties_shared_pool(case, kube, pin, where):
    """Row "`strict-cpu-reservation` and an allocation ... that would take the
    last shared CPU": kubelet allows it, Pinion refuses (shared pool never empty)."""
    if case["options"].get("strict-cpu-reservation") != "true":
        return False
    i = where
    if i is None:
        return False
    ks, ps = kube["steps"][i], pin["steps"][i + 1]
    return (ks["error"] is None and ps.get("error") is not None
            and "would leave the shared pool empty" in ps["error"] and ks["default"] == "")


def diff_distributed_full_pcpus_hang(case, kube, pin, where):
    """Row "`full-pcpus-only` + `distribute-cpus-across-numa` with odd free
    counts per NUMA node": kubelet's admission never returns (the oracle
    gives up after a timeout), Pinion answers. Steps before the hang agree
    (compare() stopped at the first difference, the hanging step)."""
    opts = case["options"]
    return (kube.get("hung") is True and where == len(kube["steps"]) - 1
            and opts.get("full-pcpus-only") == "true"
            and opts.get("distribute-cpus-across-numa") == "true")


def uneven_cores_or_sockets(cpus):
    """Cores with different thread counts, or sockets with different CPU
    counts: kubelet's CPUsPerCore()/CPUsPerSocket() averages match no real
    core or socket."""
    cores, sockets = {}, {}
    for c in cpus:
        cores[c["core"]] = cores.get(c["core"], 0) + 1
        sockets[c["socket"]] = sockets.get(c["socket"], 0) + 1
    return len(set(cores.values())) > 1 or len(set(sockets.values())) > 1


def diff_hybrid_free_core_rule(case, kube, pin, where):
    """Section "Hybrid machines": Pinion follows kubernetes/kubernetes PR
    #140498 (a core / socket is free when all of its own CPUs are), which the
    linked kubelet does not have when its isCoreFree still compares with the
    machine-wide average (checked by the oracle's version: v1.37.x). Any
    difference on a machine with uneven cores or sockets falls here."""
    return uneven_cores_or_sockets(case["cpus"]) and not KUBELET_HAS_PR_140498


def kubelet_gave_busy_cpu(case, kube, pin, where):
    """Sub-class of the hybrid one, counted for information: at the first
    differing step kubelet handed out a reserved CPU or one another pod's
    container holds (issue #140495's symptom: a half-used P-core taken whole)."""
    if where is None or kube["steps"][where]["cpus"] is None:
        return False
    step = kube["steps"][where]
    cpus = set(parse_cpulist(step["cpus"]))
    reserved = set(parse_cpulist(kube.get("reserved") or ""))
    if cpus & reserved:
        return True
    if where == 0:
        return False
    free = set(parse_cpulist(kube["steps"][where - 1]["default"]))
    held = {}  # CPUs each pod's containers hold before the step
    for s in kube["steps"][:where]:
        key = (s["pod"], s["container"])
        if s["op"] == "add" and s["cpus"]:
            held[key] = set(parse_cpulist(s["cpus"]))
        elif s["op"] == "remove":
            held.pop(key, None)
    same_pod = set().union(*[c for (p, _), c in held.items() if p == step["pod"]] or [set()])
    return bool(cpus - free - same_pod)


def parse_cpulist(text):
    out = []
    for part in filter(None, (text or "").split(",")):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


# KUBELET_DIFF_NO_EXCUSES=1: every difference fails (to look at the
# documented ones too).
NO_EXCUSES = os.environ.get("KUBELET_DIFF_NO_EXCUSES") == "1"

# Whether the linked kubelet has PR #140498 (isCoreFree by the core's own
# CPUs); set in main() from the Go module cache's cpu_assignment.go.
KUBELET_HAS_PR_140498 = False


DOCUMENTED = [
    ("differences-from-kubelet.md, Hybrid machines: PR #140498 rule (not in the linked kubelet)",
     diff_hybrid_free_core_rule),
    ("differences-from-kubelet.md: full-pcpus-only + distribute-cpus-across-numa, kubelet never returns",
     diff_distributed_full_pcpus_hang),
    ("differences-from-kubelet.md: strict-cpu-reservation never empties the shared pool",
     diff_strict_reservation_empties_shared_pool),
]

# The text each class's listing in docs/differences-from-kubelet.md must hold
# (its row or section and its reason: the upstream link or Pinion's rule); a
# class whose listing is missing excuses nothing.
LISTINGS = {
    diff_hybrid_free_core_rule: ["## Hybrid machines", "140498"],
    diff_distributed_full_pcpus_hang: [
        "| `full-pcpus-only` + `distribute-cpus-across-numa` with odd free counts per NUMA node"
        " | admission never returns |"],
    diff_strict_reservation_empties_shared_pool: [
        "| `strict-cpu-reservation` and an allocation (or an in-place grow) that would take the"
        " last shared CPU |", "the shared pool is never empty"],
}


def check_listings(doc_path):
    """Drops from DOCUMENTED every class whose listing the doc lacks; returns
    the names dropped."""
    try:
        text = open(doc_path).read()
    except OSError:
        text = ""
    missing = [name for name, pred in DOCUMENTED
               if not all(needle in text for needle in LISTINGS.get(pred, [None]) if needle)
               or pred not in LISTINGS]
    DOCUMENTED[:] = [(n, p) for n, p in DOCUMENTED if n not in missing]
    return missing


# --------------------------------------------------------------------------
# comparison

def norm(s):
    return s if s not in (None, "") else ""


def compare(case, kube, pin):
    """Returns None when equal, else (step index or None, description)."""
    if kube.get("panic"):
        return None, "kubelet panicked: " + kube["panic"].splitlines()[0]
    kerr, perr = kube.get("error"), pin.get("error") if "steps" not in pin else None
    if kerr is not None or perr is not None:
        if kerr != perr:
            return None, "construction: kubelet %r, pinion %r" % (kerr, perr)
        return None
    psteps = pin["steps"]
    if len(psteps) != len(kube["steps"]) + 1 and not kube.get("hung"):
        return None, "step count: kubelet %d, pinion %d" % (len(kube["steps"]), len(psteps) - 1)
    if pin.get("reserved") is not None and kube.get("reserved") is not None \
            and norm(pin["reserved"]) != norm(kube["reserved"]):
        return None, "reserved: kubelet %r, pinion %r" % (kube["reserved"], pin["reserved"])
    for i, ks in enumerate(kube["steps"]):
        ps = psteps[i + 1]
        what = "step %d %s %s/%s" % (i + 1, ks["op"], ks["pod"], ks["container"])
        if ks["error"] != ps.get("error"):
            return i, "%s: error: kubelet %r, pinion %r" % (what, ks["error"], ps.get("error"))
        if ks["op"] == "add" and norm(ks["cpus"]) != norm(ps.get("cpus")):
            return i, "%s: cpus: kubelet %r, pinion %r" % (what, ks["cpus"], ps.get("cpus"))
        if norm(ks["default"]) != norm(ps.get("default")):
            return i, "%s: shared pool: kubelet %r, pinion %r" % (what, ks["default"],
                                                                  ps.get("default"))
    return None


def has_pr_140498(version):
    """Reads the linked kubelet's isCoreFree from the Go module cache."""
    mod, ver = version.split()
    gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True,
                                text=True).stdout.strip()
    path = os.path.join(gomodcache, "%s@%s" % (mod, ver),
                        "pkg/kubelet/cm/cpumanager/cpu_assignment.go")
    try:
        src = open(path).read()
    except OSError:
        return True  # unknown: do not excuse hybrid differences
    return "a.details.CPUsInCores(coreID).Size() == a.topo.CPUsPerCore()" not in src


def pred_of(cls):
    return dict(DOCUMENTED)[cls]


def run_oracle(oracle, cases):
    """kubelet's answers, in order. The oracle exits with status 3 right after
    a scenario whose Allocate never returned; it is restarted for the rest."""
    kube = []
    while len(kube) < len(cases):
        rest = cases[len(kube):]
        oin = "".join(json.dumps(oracle_input(c)) + "\n" for c in rest)
        kres = subprocess.run([oracle], input=oin, capture_output=True, text=True)
        got = [json.loads(line) for line in kres.stdout.splitlines()]
        if kres.returncode not in (0, 3) or not got:
            print("oracle failed (status %d): %s" % (kres.returncode, kres.stderr), file=sys.stderr)
            return None
        kube += got
    return kube


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--oracle", required=True)
    ap.add_argument("--pinion", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--topologies", required=True,
                    help="../shared/topologies (machines read in place; missing = synthetic only)")
    args = ap.parse_args()
    global TOPOLOGIES
    TOPOLOGIES = os.path.abspath(args.topologies)
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.startswith("fail-") and f.endswith(".json"):
            os.remove(os.path.join(args.out, f))

    version = subprocess.run([args.oracle, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    print("kubelet oracle: %s" % version)
    global KUBELET_HAS_PR_140498
    KUBELET_HAS_PR_140498 = has_pr_140498(version)

    doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs",
                       "differences-from-kubelet.md")
    for name in check_listings(doc):
        print("warning: not listed in docs/differences-from-kubelet.md, excuses nothing: "
              + name, file=sys.stderr)

    rng = random.Random(args.seed)
    machines = []
    for name in SYSROOT_MACHINES if os.path.isdir(TOPOLOGIES) else []:
        found = discover(args.pinion, name)
        if found is None:
            print("warning: pinion cannot discover %s; skipped" % name, file=sys.stderr)
            continue
        machines.append((name, os.path.join(TOPOLOGIES, name)) + found)
    synth_rng = random.Random(args.seed * 7919 + 1)
    for _ in range(len(machines)):
        name, cpus, nodes = synthetic(synth_rng)
        machines.append((name, None, cpus, nodes))

    cases = [gen_case(rng, i, machines) for i in range(args.n)]

    kube = run_oracle(args.oracle, cases)
    if kube is None:
        return 2

    batch = os.path.join(args.out, "batch.json")
    with open(batch, "w") as f:
        json.dump([pinion_scenario(c) for c in cases], f)
    pres = subprocess.run([args.pinion, "simulate", batch, "-o", "json"],
                          capture_output=True, text=True)
    if pres.returncode != 0:
        print("pinion simulate failed: " + pres.stderr, file=sys.stderr)
        return 2
    pin = [json.loads(line) for line in pres.stdout.splitlines()]
    if len(pin) != len(cases) or len(kube) != len(cases):
        print("answer count mismatch: %d cases, kubelet %d, pinion %d"
              % (len(cases), len(kube), len(pin)), file=sys.stderr)
        return 2

    passed = failed = 0
    documented = {}
    for case, k, p in zip(cases, kube, pin):
        d = compare(case, k, p)
        if d is None:
            passed += 1
            continue
        where, text = d
        cls = None if NO_EXCUSES else next(
            (name for name, pred in DOCUMENTED if pred(case, k, p, where)), None)
        if cls is not None:
            documented[cls] = documented.get(cls, 0) + 1
            if pred_of(cls) is diff_hybrid_free_core_rule and kubelet_gave_busy_cpu(case, k, p, where):
                sub = "  of which kubelet handed out a reserved or busy CPU (issue #140495)"
                documented[cls + "\n" + sub] = documented.get(cls + "\n" + sub, 0) + 1
            passed += 1
            continue
        failed += 1
        path = os.path.join(args.out, "fail-%s.json" % case["id"])
        sc = pinion_scenario(case)
        sc["kubelet"] = {"version": version, "answer": k}
        with open(path, "w") as f:
            json.dump(sc, f, indent=1)
        print("FAIL %s (%s): %s -> %s" % (case["id"], case["machine"], text, path))
    for name, count in sorted(documented.items()):
        if "\n" in name:
            print("%s: %d" % (name.split("\n")[1], count))
        else:
            print("documented difference (%d cases): %s" % (count, name))
    steps = sum(len(k["steps"]) for k in kube)
    exclusive = sum(1 for k in kube for st in k["steps"] if st["cpus"])
    errors = sum(1 for k in kube for st in k["steps"] if st["error"])
    refused = sum(1 for k in kube if k.get("error"))
    print("compared: %d steps (%d exclusive allocations, %d step errors), %d configurations "
          "kubelet refused" % (steps, exclusive, errors, refused))
    cover = {}
    for c in cases:
        key = "%s/%s" % (c["topology_manager_policy"], c["topology_manager_scope"])
        cover[key] = cover.get(key, 0) + 1
    print("topology manager (policy/scope: cases): " + ", ".join(
        "%s: %d" % kv for kv in sorted(cover.items())))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
