package main

import (
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/resourceplugin/v1alpha1"
)

// driveCPU: a NUMA-bound dedicated_cores pod and a shared_cores pod through
// hints → Allocate → topology-aware resources → reconcile → RemovePod.
func driveCPU(r *report, e *endpoint, m *machine) {
	nodes := m.nodeIDs()
	last := nodes[len(nodes)-1]

	var p problems
	res, err := allocatable(e, "cpu")
	if err != nil {
		r.fail("cpu allocatable", err)
	} else {
		capacity := perNode(res.TopologyAwareCapacityQuantityList)
		alloc := perNode(res.TopologyAwareAllocatableQuantityList)
		p.expect(res.AggregatedCapacityQuantity == float64(m.cpus), "aggregated capacity %v, machine has %d CPUs", res.AggregatedCapacityQuantity, m.cpus)
		for node, cpus := range m.nodes {
			p.expect(capacity[node] == float64(len(cpus)), "node %d capacity %v, has %d CPUs", node, capacity[node], len(cpus))
		}
		// One CPU reserved by default (the agent's and kubelet's default).
		p.expect(res.AggregatedAllocatableQuantity == float64(m.cpus-1), "aggregated allocatable %v, want %d (one reserved)", res.AggregatedAllocatableQuantity, m.cpus-1)
		p.expect(sum(alloc) == res.AggregatedAllocatableQuantity, "per-node allocatable %v does not add up to %v", alloc, res.AggregatedAllocatableQuantity)
		r.check("cpu allocatable", p, fmt.Sprintf("capacity %v per node %v, allocatable %v per node %v", res.AggregatedCapacityQuantity, capacity, res.AggregatedAllocatableQuantity, alloc))
	}

	// Presence of map values on the wire: an init container gets the nil
	// value (no preference), a request larger than the machine an empty list
	// (cannot be satisfied) — two different answers to a Go manager.
	p = nil
	dedicated := dedicatedNUMABound("dedicated-1")
	init := dedicated.request("cpu", 2, nil)
	init.ContainerName, init.ContainerType = "init", pluginapi.ContainerType_INIT
	list, present, err := hints(e, init)
	p.expect(err == nil, "init hints: %v", err)
	p.expect(present && list == nil, "init container: key present %v, value %v; want the key with a nil value", present, list)
	list, present, err = hints(e, dedicated.request("cpu", float64(m.cpus*2), nil))
	p.expect(err == nil, "oversized hints: %v", err)
	p.expect(present && list != nil && len(list.Hints) == 0, "oversized request: key present %v, value %v; want an empty list", present, list)
	r.check("cpu hint presence", p, "init container → {cpu: nil}; oversized → {cpu: []}")

	p = nil
	request := dedicated.request("cpu", 4, nil)
	list, present, err = hints(e, request)
	single := preferredSingleNodes(list)
	p.expect(err == nil, "GetTopologyHints: %v", err)
	p.expect(present && len(single) == len(nodes), "preferred single-node hints %v, want one per node %v (%v)", single, nodes, list)
	r.check("cpu hints", p, fmt.Sprintf("dedicated_cores numa_binding 4 CPUs: %v", list.GetHints()))

	p = nil
	request.Hint = &pluginapi.TopologyHint{Nodes: []uint64{last}, Preferred: true}
	info, resp, err := allocate(e, request)
	var dedicatedCPUs []int
	if err != nil {
		p.expect(false, "Allocate: %v", err)
	} else {
		p.expect(resp.PodUid == request.PodUid && resp.ContainerName == "app" && resp.ResourceName == "cpu", "answer names %q/%q/%q", resp.PodUid, resp.ContainerName, resp.ResourceName)
		p.expect(info.OciPropertyName == "CpusetCpus", "oci_property_name %q", info.OciPropertyName)
		dedicatedCPUs, err = parseCPUList(info.AllocationResult)
		p.expect(err == nil, "allocation_result: %v", err)
		p.expect(len(dedicatedCPUs) == 4, "cpuset %q has %d CPUs, want 4", info.AllocationResult, len(dedicatedCPUs))
		for _, c := range dedicatedCPUs {
			p.expect(m.nodeOf(c) == int64(last), "CPU %d is on node %d, the hint was %d", c, m.nodeOf(c), last)
		}
		p.expect(info.AllocatedQuantity == 4, "allocated_quantity %v", info.AllocatedQuantity)
	}
	if !r.check("cpu allocate dedicated", p, fmt.Sprintf("hint %v → CpusetCpus %s", request.Hint.Nodes, info.GetAllocationResult())) {
		return
	}

	p = nil
	shared := pod{uid: "shared-1", qosClass: "Burstable", annotations: map[string]string{pluginapi.KatalystQoSLevelAnnotationKey: pluginapi.KatalystQoSLevelSharedCores}}
	sharedInfo, _, err := allocate(e, shared.request("cpu", 2, nil))
	var sharedCPUs []int
	if err != nil {
		p.expect(false, "Allocate: %v", err)
	} else {
		sharedCPUs, err = parseCPUList(sharedInfo.AllocationResult)
		p.expect(err == nil, "allocation_result: %v", err)
		p.expect(len(sharedCPUs) >= 2, "shared pool %q smaller than the request", sharedInfo.AllocationResult)
		p.expect(!intersects(sharedCPUs, dedicatedCPUs), "shared pool %q overlaps the dedicated %v", sharedInfo.AllocationResult, dedicatedCPUs)
	}
	r.check("cpu allocate shared", p, fmt.Sprintf("shared_cores 2 CPUs → CpusetCpus %s", sharedInfo.GetAllocationResult()))

	p = nil
	aware, awareResp, err := topologyAware(e, dedicated.uid, "app", "cpu")
	if err != nil {
		p.expect(false, "GetTopologyAwareResources: %v", err)
	} else {
		byNode := perNode(aware.TopologyAwareQuantityList)
		p.expect(awareResp.PodUid == dedicated.uid, "pod_uid %q", awareResp.PodUid)
		p.expect(aware.AggregatedQuantity == 4, "aggregated_quantity %v", aware.AggregatedQuantity)
		p.expect(byNode[last] == 4 && len(byNode) == 1, "per node %v, want 4 on node %d", byNode, last)
		for _, q := range aware.TopologyAwareQuantityList {
			p.expect(q.TopologyLevel == pluginapi.TopologyLevel_NUMA, "level %v", q.TopologyLevel)
		}
	}
	r.check("cpu topology-aware resources", p, fmt.Sprintf("aggregated %v, per node %v", aware.GetAggregatedQuantity(), perNode(aware.GetTopologyAwareQuantityList())))

	p = nil
	all, err := allocations(e)
	if err != nil {
		p.expect(false, "GetResourcesAllocation: %v", err)
	} else {
		got := all[dedicated.uid].GetContainerResources()["app"].GetResourceAllocation()["cpu"]
		p.expect(got != nil && got.AllocationResult == info.AllocationResult, "dedicated pod in reconcile: %v, Allocate said %s", got, info.AllocationResult)
		sharedNow := all[shared.uid].GetContainerResources()["app"].GetResourceAllocation()["cpu"]
		p.expect(sharedNow != nil, "shared pod missing from %v", all)
	}
	r.check("cpu reconcile", p, fmt.Sprintf("GetResourcesAllocation lists %d pods", len(all)))

	p = nil
	p.expect(removePod(e, dedicated.uid) == nil, "RemovePod failed")
	all, err = allocations(e)
	p.expect(err == nil, "GetResourcesAllocation: %v", err)
	_, still := all[dedicated.uid]
	p.expect(!still, "removed pod still allocated: %v", all[dedicated.uid])
	p.expect(removePod(e, dedicated.uid) == nil, "a second RemovePod of the same pod failed (must be idempotent)")
	p.expect(removePod(e, "never-seen") == nil, "RemovePod of an unknown pod failed (must succeed)")
	// Its CPUs are free again: the same request gets them back.
	again := dedicatedNUMABound("dedicated-2").request("cpu", 4, &pluginapi.TopologyHint{Nodes: []uint64{last}, Preferred: true})
	infoAgain, _, err := allocate(e, again)
	p.expect(err == nil, "Allocate after RemovePod: %v", err)
	if err == nil {
		cpus, _ := parseCPUList(infoAgain.AllocationResult)
		p.expect(len(cpus) == 4, "after RemovePod: %q", infoAgain.AllocationResult)
	}
	r.check("cpu remove pod", p, "RemovePod forgets the pod (twice, and an unknown pod, succeed)")

	// RPCs the managers do not need: pod-level and associated-device calls
	// must say Unimplemented (the managers then treat them as unsupported),
	// PreStartContainer must succeed.
	p = nil
	ctx, cancel := call()
	defer cancel()
	podRequest := &pluginapi.PodResourceRequest{PodUid: "pod-level", ResourceName: "cpu"}
	_, err = e.client.GetPodTopologyHints(ctx, podRequest)
	p.expect(status.Code(err) == codes.Unimplemented, "GetPodTopologyHints: %v", err)
	_, err = e.client.AllocateForPod(ctx, podRequest)
	p.expect(status.Code(err) == codes.Unimplemented, "AllocateForPod: %v", err)
	_, err = e.client.GetAssociatedDeviceTopologyHints(ctx, &pluginapi.AssociatedDeviceRequest{})
	p.expect(status.Code(err) == codes.Unimplemented, "GetAssociatedDeviceTopologyHints: %v", err)
	_, err = e.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{PodUid: again.PodUid, ContainerName: "app"})
	p.expect(err == nil, "PreStartContainer: %v", err)
	r.check("cpu optional rpcs", p, "pod-level and associated-device RPCs: Unimplemented; PreStartContainer: OK")
}

func driveMemory(r *report, e *endpoint, m *machine) {
	nodes := m.nodeIDs()
	last := nodes[len(nodes)-1]
	var p problems
	res, err := allocatable(e, "memory")
	if err != nil {
		r.fail("memory allocatable", err)
	} else {
		capacity := perNode(res.TopologyAwareCapacityQuantityList)
		p.expect(res.AggregatedCapacityQuantity == float64(nodeMemory)*float64(len(nodes)), "aggregated capacity %v, want %d × %d", res.AggregatedCapacityQuantity, len(nodes), nodeMemory)
		for _, n := range nodes {
			p.expect(capacity[n] == float64(nodeMemory), "node %d capacity %v", n, capacity[n])
		}
		p.expect(sum(perNode(res.TopologyAwareAllocatableQuantityList)) == res.AggregatedAllocatableQuantity, "per-node allocatable does not add up")
		r.check("memory allocatable", p, fmt.Sprintf("capacity %v, allocatable %v", res.AggregatedCapacityQuantity, res.AggregatedAllocatableQuantity))
	}

	p = nil
	bytes := float64(2 << 30)
	dedicated := dedicatedNUMABound("mem-dedicated-1")
	request := dedicated.request("memory", bytes, nil)
	list, present, err := hints(e, request)
	p.expect(err == nil, "GetTopologyHints: %v", err)
	single := preferredSingleNodes(list)
	p.expect(present && len(single) == len(nodes), "preferred single-node hints %v, want one per node", single)
	request.Hint = &pluginapi.TopologyHint{Nodes: []uint64{last}, Preferred: true}
	info, _, err := allocate(e, request)
	if err != nil {
		p.expect(false, "Allocate: %v", err)
	} else {
		p.expect(info.OciPropertyName == "CpusetMems", "oci_property_name %q", info.OciPropertyName)
		p.expect(info.AllocationResult == strconv.FormatUint(last, 10), "CpusetMems %q, hint was %d", info.AllocationResult, last)
		p.expect(info.AllocatedQuantity == bytes, "allocated_quantity %v, want %v", info.AllocatedQuantity, bytes)
		p.expect(info.TopologyAssignments[last] == uint64(bytes), "topology_assignments %v", info.TopologyAssignments)
	}
	r.check("memory allocate", p, fmt.Sprintf("numa_binding 2 GiB, hint %d → %+v", last, info))

	p = nil
	all, err := allocations(e)
	p.expect(err == nil, "GetResourcesAllocation: %v", err)
	got := all[dedicated.uid].GetContainerResources()["app"].GetResourceAllocation()["memory"]
	p.expect(got != nil && info != nil && got.AllocationResult == info.AllocationResult, "reconcile answer %v", got)
	p.expect(removePod(e, dedicated.uid) == nil, "RemovePod failed")
	all, err = allocations(e)
	p.expect(err == nil, "GetResourcesAllocation: %v", err)
	_, still := all[dedicated.uid]
	p.expect(!still, "removed pod still allocated")
	r.check("memory reconcile and remove", p, "GetResourcesAllocation lists the pod, RemovePod forgets it")
}

func driveNIC(r *report, e *endpoint, m *machine) {
	nodes := m.nodeIDs()
	last := nodes[len(nodes)-1]
	var p problems
	shared := pod{uid: "nic-1", qosClass: "Burstable", annotations: map[string]string{pluginapi.KatalystQoSLevelAnnotationKey: pluginapi.KatalystQoSLevelSharedCores}}
	request := shared.request(nicResource, 1000, nil)
	list, present, err := hints(e, request)
	p.expect(err == nil, "GetTopologyHints: %v", err)
	single := preferredSingleNodes(list)
	p.expect(present && len(single) == len(nodes), "preferred single-node hints %v, want one per node (a NIC on each)", single)
	request.Hint = &pluginapi.TopologyHint{Nodes: []uint64{last}, Preferred: true}
	info, _, err := allocate(e, request)
	want := fmt.Sprintf("eth%d", last)
	if err != nil {
		p.expect(false, "Allocate: %v", err)
	} else {
		p.expect(info.Envs["AFFINITY_NIC_NAME"] == want, "AFFINITY_NIC_NAME %q, want %s (the hint's node)", info.Envs["AFFINITY_NIC_NAME"], want)
		p.expect(info.OciPropertyName == "", "oci_property_name %q, want none", info.OciPropertyName)
	}
	r.check("nic allocate", p, fmt.Sprintf("hint %d → envs %v", last, info.GetEnvs()))

	p = nil
	res, err := allocatable(e, nicResource)
	p.expect(err == nil, "GetTopologyAwareAllocatableResources: %v", err)
	if err == nil {
		p.expect(len(res.TopologyAwareCapacityQuantityList) >= len(nodes), "capacity list %v, want a NIC per node", res.TopologyAwareCapacityQuantityList)
	}
	p.expect(removePod(e, shared.uid) == nil, "RemovePod failed")
	r.check("nic allocatable and remove", p, fmt.Sprintf("allocatable %v", res.GetTopologyAwareCapacityQuantityList()))
}
