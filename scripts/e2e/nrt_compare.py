#!/usr/bin/env python3
"""Compares two NodeResourceTopology objects field by field: the one Pinion
publishes for a node and the one a real exporter (NFD's nfd-topology-updater)
publishes from Pinion's podresources socket for the same node
(scripts/e2e-cluster.sh, issue 32 item 5).

Usage: nrt_compare.py PINION.json EXPORTER.json KUBELET_POLICY KUBELET_SCOPE [PLUGIN_RESOURCES]

Prints one line per compared field: `same`, `differs (explained: WHY)` or
`DIFFERS`. Exits 1 when a field differs without an explanation below, 2 on
bad input. Quantities are compared as numbers ("1Gi" equals "1073741824").
Explained differences are the exporter's own rules, not Pinion's choices
to hide: each names the evidence it needs (KUBELET_POLICY/SCOPE are the
node's kubelet configuration, which the exporter reads; PLUGIN_RESOURCES,
comma-separated, the QoS Resource Manager's resources the node serves, which
podresources carries in kubewharf's `resources` field, not in `devices`).
"""

import json
import re
import sys

SUFFIXES = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}


def quantity(text):
    """A Kubernetes quantity as a number (milli-units as a fraction)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(m|[kMGTPE]i?|)", str(text).strip())
    if not match:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = match.groups()
    if suffix == "m":
        return float(number) / 1000
    value = float(number) * SUFFIXES[suffix]
    return int(value) if value.is_integer() else value


def attributes(items):
    return {a["name"]: a["value"] for a in items or []}


def zones(obj):
    out = {}
    for zone in obj.get("zones") or []:
        out[zone["name"]] = {
            "type": zone.get("type"),
            "costs": {c["name"]: c["value"] for c in zone.get("costs") or []},
            "resources": {
                r["name"]: tuple(quantity(r[k]) for k in ("capacity", "allocatable", "available"))
                for r in zone.get("resources") or []
            },
            "attributes": attributes(zone.get("attributes")),
        }
    return out


def main(argv):
    if len(argv) not in (5, 6):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            pinion = json.load(f)
        with open(argv[2]) as f:
            exporter = json.load(f)
        pz, ez = zones(pinion), zones(exporter)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"cannot read the objects: {e}", file=sys.stderr)
        return 2
    policy, scope = argv[3], argv[4]
    plugin_resources = set(filter(None, argv[5].split(","))) if len(argv) == 6 else set()
    unexplained = 0

    def report(field, ours, theirs, why=None):
        nonlocal unexplained
        if ours == theirs:
            print(f"same      {field}: {ours}")
        elif why:
            print(f"differs   {field}: pinion {ours}, exporter {theirs} (explained: {why})")
        else:
            unexplained += 1
            print(f"DIFFERS   {field}: pinion {ours}, exporter {theirs}")

    report("zones", sorted(pz), sorted(ez))
    for name in sorted(set(pz) & set(ez)):
        ours, theirs = pz[name], ez[name]
        report(f"{name}.type", ours["type"], theirs["type"])
        report(f"{name}.costs", ours["costs"], theirs["costs"])
        only_ours = set(ours["resources"]) - set(theirs["resources"])
        why = None
        if only_ours and only_ours <= plugin_resources:
            why = (f"{', '.join(sorted(only_ours))}: the QoS Resource Manager's, which podresources "
                   "carries in kubewharf's `resources` field (upstream exporters read `devices`); Pinion "
                   "publishes them from the plugins")
        report(f"{name}.resources", sorted(ours["resources"]), sorted(theirs["resources"]), why)
        for res in sorted(set(ours["resources"]) & set(theirs["resources"])):
            report(f"{name}.{res} (capacity, allocatable, available)",
                   ours["resources"][res], theirs["resources"][res])
        extension = {k: v for k, v in ours["attributes"].items() if k.startswith("pinion.io/")}
        rest = {k: v for k, v in ours["attributes"].items() if k not in extension}
        report(f"{name}.attributes", rest, theirs["attributes"])
        if extension:
            print(f"pinion    {name}.attributes (Pinion's extension, docs/nrt.md): {extension}")

    pa, ea = attributes(pinion.get("attributes")), attributes(exporter.get("attributes"))
    for key in ("topologyManagerPolicy", "topologyManagerScope"):
        theirs = ea.get(key)
        want = policy if key == "topologyManagerPolicy" else scope
        why = None
        if theirs == want:
            why = f"the exporter reads kubelet's configuration ({want}); Pinion publishes the policy that decides"
        report(f"attributes.{key}", pa.get(key), theirs, why)
    method = pa.get("nodeTopologyPodsFingerprintMethod")
    why = None
    if method == "with-exclusive-resources" and "nodeTopologyPodsFingerprintMethod" not in ea:
        why = ("the exporter signs every pod podresources lists (method all, no method attribute); "
               "Pinion signs the pods with exclusive resources, as the scheduler plugin counts them")
    report("attributes.nodeTopologyPodsFingerprint", pa.get("nodeTopologyPodsFingerprint"),
           ea.get("nodeTopologyPodsFingerprint"), why)
    report("attributes.nodeTopologyPodsFingerprintMethod", method,
           ea.get("nodeTopologyPodsFingerprintMethod"),
           why and "Pinion names its method, the exporter's default (all) needs none")
    known = {"topologyManagerPolicy", "topologyManagerScope",
             "nodeTopologyPodsFingerprint", "nodeTopologyPodsFingerprintMethod"}
    extension = {k: v for k, v in pa.items() if k not in known and k.startswith("pinion.io/")}
    report("attributes (others)", {k: v for k, v in pa.items() if k not in known and k not in extension},
           {k: v for k, v in ea.items() if k not in known})
    if extension:
        print(f"pinion    attributes (Pinion's extension, docs/nrt.md): {extension}")

    theirs = exporter.get("topologyPolicies")
    report("topologyPolicies (deprecated)", pinion.get("topologyPolicies"), theirs,
           "Pinion does not write the deprecated field (docs/nrt.md); the exporter derives it from kubelet's configuration"
           if pinion.get("topologyPolicies") is None else None)
    kinds = lambda o: sorted(r.get("kind") for r in o.get("metadata", {}).get("ownerReferences") or [])
    ours, theirs = kinds(pinion), kinds(exporter)
    report("metadata.ownerReferences (kinds)", ours, theirs,
           "Pinion's owner is the Node, as resource-topology-exporter's; NFD's is its Namespace"
           if ours == ["Node"] and theirs == ["Namespace"] else None)
    print(f"{unexplained} unexplained difference(s)")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
