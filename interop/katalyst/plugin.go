package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc"
	watcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/resourceplugin/v1alpha1"
)

// qrmPlugin is a resource plugin written as katalyst's are (one socket
// serving pluginregistration.Registration and resourceplugin.v1alpha1,
// katalyst-api's skeleton layout), on the fork's generated servers. It
// answers every container with the same allocation, which the test can
// change; it records what the manager sent.
type qrmPlugin struct {
	pluginapi.UnimplementedResourcePluginServer
	resource string
	oci      string // the OCI property it sets ("" = none)
	nodes    []uint64

	mu        sync.Mutex
	answer    string // the OCI property's value (a cpuset)
	quantity  map[string]float64
	registry  []*watcherapi.RegistrationStatus
	calls     map[string]int
	hintReqs  []*pluginapi.ResourceRequest
	allocReqs []*pluginapi.ResourceRequest
	removed   []string
	// pod uid → container → the request it was allocated with
	containers map[string]map[string]*pluginapi.ResourceRequest

	server *grpc.Server
	socket string
}

func newPlugin(resource, oci, answer string, nodes []uint64) *qrmPlugin {
	return &qrmPlugin{
		resource: resource, oci: oci, answer: answer, nodes: nodes,
		calls:      map[string]int{},
		containers: map[string]map[string]*pluginapi.ResourceRequest{},
	}
}

// envName is the variable this plugin sets: KATALYST_PEER_<RESOURCE>.
func (p *qrmPlugin) envName() string {
	name := p.resource[strings.LastIndex(p.resource, "/")+1:]
	return "KATALYST_PEER_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(name))
}

// serve listens on socket (a stale file removed first, as katalyst's
// skeleton does) and serves both services.
func (p *qrmPlugin) serve(socket string) error {
	_ = os.Remove(socket)
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return err
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	p.socket = socket
	p.server = grpc.NewServer()
	watcherapi.RegisterRegistrationServer(p.server, p)
	pluginapi.RegisterResourcePluginServer(p.server, p)
	go func() { _ = p.server.Serve(lis) }()
	return nil
}

// stop ends the server and removes the socket (the watcher's de-registration).
func (p *qrmPlugin) stop() {
	if p.server != nil {
		p.server.Stop()
	}
	_ = os.Remove(p.socket)
}

// registerWith is the device-plugin-style registration: dial the manager's
// Registration socket and name our socket, relative to its directory.
func (p *qrmPlugin) registerWith(managerSocket string) error {
	conn, err := dial(managerSocket)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := call()
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.socket),
		ResourceName: p.resource,
		Options:      p.options(),
	})
	return err
}

func (p *qrmPlugin) count(method string) {
	p.mu.Lock()
	p.calls[method]++
	p.mu.Unlock()
}

func (p *qrmPlugin) setAnswer(answer string) {
	p.mu.Lock()
	p.answer = answer
	p.mu.Unlock()
}

func (p *qrmPlugin) options() *pluginapi.ResourcePluginOptions {
	return &pluginapi.ResourcePluginOptions{WithTopologyAlignment: true, NeedReconcile: true}
}

// GetInfo: what katalyst-api's PluginRegistrationWrapper answers.
func (p *qrmPlugin) GetInfo(context.Context, *watcherapi.InfoRequest) (*watcherapi.PluginInfo, error) {
	p.count("GetInfo")
	return &watcherapi.PluginInfo{
		Type:              watcherapi.ResourcePlugin,
		Name:              p.resource,
		SupportedVersions: []string{pluginapi.Version},
	}, nil
}

func (p *qrmPlugin) NotifyRegistrationStatus(_ context.Context, status *watcherapi.RegistrationStatus) (*watcherapi.RegistrationStatusResponse, error) {
	p.mu.Lock()
	p.calls["NotifyRegistrationStatus"]++
	p.registry = append(p.registry, status)
	p.mu.Unlock()
	return &watcherapi.RegistrationStatusResponse{}, nil
}

func (p *qrmPlugin) GetResourcePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.ResourcePluginOptions, error) {
	p.count("GetResourcePluginOptions")
	return p.options(), nil
}

func (p *qrmPlugin) hints() *pluginapi.ListOfTopologyHints {
	list := &pluginapi.ListOfTopologyHints{}
	for _, n := range p.nodes {
		list.Hints = append(list.Hints, &pluginapi.TopologyHint{Nodes: []uint64{n}, Preferred: true})
	}
	return list
}

func (p *qrmPlugin) GetTopologyHints(_ context.Context, req *pluginapi.ResourceRequest) (*pluginapi.ResourceHintsResponse, error) {
	p.mu.Lock()
	p.calls["GetTopologyHints"]++
	p.hintReqs = append(p.hintReqs, req)
	p.mu.Unlock()
	return &pluginapi.ResourceHintsResponse{
		PodUid: req.PodUid, PodNamespace: req.PodNamespace, PodName: req.PodName,
		ContainerName: req.ContainerName, ContainerType: req.ContainerType, ContainerIndex: req.ContainerIndex,
		PodRole: req.PodRole, PodType: req.PodType, ResourceName: p.resource,
		ResourceHints: map[string]*pluginapi.ListOfTopologyHints{p.resource: p.hints()},
		Labels:        req.Labels, Annotations: req.Annotations, NativeQosClass: req.NativeQosClass,
	}, nil
}

// info is the answer for one container, under the lock.
func (p *qrmPlugin) info(req *pluginapi.ResourceRequest) *pluginapi.ResourceAllocationInfo {
	info := &pluginapi.ResourceAllocationInfo{
		OciPropertyName:   p.oci,
		IsNodeResource:    p.oci != "",
		IsScalarResource:  true,
		AllocatedQuantity: req.ResourceRequests[p.resource],
		Envs: map[string]string{
			p.envName(): fmt.Sprintf("%s/%s/%s", req.PodNamespace, req.PodName, req.ContainerName),
		},
		Annotations:   map[string]string{"katalyst-peer.pinion.example/" + p.envName(): "allocated"},
		ResourceHints: p.hints(),
	}
	if p.oci != "" {
		info.AllocationResult = p.answer
	}
	return info
}

func (p *qrmPlugin) Allocate(_ context.Context, req *pluginapi.ResourceRequest) (*pluginapi.ResourceAllocationResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls["Allocate"]++
	p.allocReqs = append(p.allocReqs, req)
	if p.containers[req.PodUid] == nil {
		p.containers[req.PodUid] = map[string]*pluginapi.ResourceRequest{}
	}
	p.containers[req.PodUid][req.ContainerName] = req
	return &pluginapi.ResourceAllocationResponse{
		PodUid: req.PodUid, PodNamespace: req.PodNamespace, PodName: req.PodName,
		ContainerName: req.ContainerName, ContainerType: req.ContainerType, ContainerIndex: req.ContainerIndex,
		PodRole: req.PodRole, PodType: req.PodType, ResourceName: p.resource,
		AllocationResult: &pluginapi.ResourceAllocation{
			ResourceAllocation: map[string]*pluginapi.ResourceAllocationInfo{p.resource: p.info(req)},
		},
		Labels: req.Labels, Annotations: req.Annotations, NativeQosClass: req.NativeQosClass,
	}, nil
}

func (p *qrmPlugin) GetResourcesAllocation(context.Context, *pluginapi.GetResourcesAllocationRequest) (*pluginapi.GetResourcesAllocationResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls["GetResourcesAllocation"]++
	resp := &pluginapi.GetResourcesAllocationResponse{PodResources: map[string]*pluginapi.ContainerResources{}}
	for uid, containers := range p.containers {
		cr := &pluginapi.ContainerResources{ContainerResources: map[string]*pluginapi.ResourceAllocation{}}
		for name, req := range containers {
			cr.ContainerResources[name] = &pluginapi.ResourceAllocation{
				ResourceAllocation: map[string]*pluginapi.ResourceAllocationInfo{p.resource: p.info(req)},
			}
		}
		resp.PodResources[uid] = cr
	}
	return resp, nil
}

func (p *qrmPlugin) RemovePod(_ context.Context, req *pluginapi.RemovePodRequest) (*pluginapi.RemovePodResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls["RemovePod"]++
	p.removed = append(p.removed, req.PodUid)
	delete(p.containers, req.PodUid)
	return &pluginapi.RemovePodResponse{}, nil
}

func (p *qrmPlugin) quantityOnNodes(total float64) []*pluginapi.TopologyAwareQuantity {
	var list []*pluginapi.TopologyAwareQuantity
	for _, n := range p.nodes {
		list = append(list, &pluginapi.TopologyAwareQuantity{ResourceValue: total / float64(len(p.nodes)), Node: n, TopologyLevel: pluginapi.TopologyLevel_NUMA})
	}
	return list
}

// GetTopologyAwareResources errs for a container it does not know, as
// katalyst's plugins do.
func (p *qrmPlugin) GetTopologyAwareResources(_ context.Context, req *pluginapi.GetTopologyAwareResourcesRequest) (*pluginapi.GetTopologyAwareResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls["GetTopologyAwareResources"]++
	alloc := p.containers[req.PodUid][req.ContainerName]
	if alloc == nil {
		return nil, fmt.Errorf("pod: %s, container: %s is not show up in %s plugin state", req.PodUid, req.ContainerName, p.resource)
	}
	q := alloc.ResourceRequests[p.resource]
	return &pluginapi.GetTopologyAwareResourcesResponse{
		PodUid: req.PodUid, PodName: alloc.PodName, PodNamespace: alloc.PodNamespace,
		ContainerTopologyAwareResources: &pluginapi.ContainerTopologyAwareResources{
			ContainerName: req.ContainerName,
			AllocatedResources: map[string]*pluginapi.TopologyAwareResource{p.resource: {
				IsNodeResource: p.oci != "", IsScalarResource: true,
				AggregatedQuantity: q, OriginalAggregatedQuantity: q,
				TopologyAwareQuantityList:         p.quantityOnNodes(q),
				OriginalTopologyAwareQuantityList: p.quantityOnNodes(q),
			}},
		},
	}, nil
}

// allocatableTotal is what GetTopologyAwareAllocatableResources reports.
const allocatableTotal = 64

func (p *qrmPlugin) GetTopologyAwareAllocatableResources(context.Context, *pluginapi.GetTopologyAwareAllocatableResourcesRequest) (*pluginapi.GetTopologyAwareAllocatableResourcesResponse, error) {
	p.count("GetTopologyAwareAllocatableResources")
	return &pluginapi.GetTopologyAwareAllocatableResourcesResponse{
		AllocatableResources: map[string]*pluginapi.AllocatableTopologyAwareResource{p.resource: {
			IsNodeResource: p.oci != "", IsScalarResource: true,
			AggregatedAllocatableQuantity:        allocatableTotal,
			TopologyAwareAllocatableQuantityList: p.quantityOnNodes(allocatableTotal),
			AggregatedCapacityQuantity:           allocatableTotal,
			TopologyAwareCapacityQuantityList:    p.quantityOnNodes(allocatableTotal),
		}},
	}, nil
}

// snapshot copies what the manager sent so far.
type pluginSeen struct {
	calls     map[string]int
	registry  []*watcherapi.RegistrationStatus
	hintReqs  []*pluginapi.ResourceRequest
	allocReqs []*pluginapi.ResourceRequest
	removed   []string
}

func (p *qrmPlugin) seen() pluginSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := map[string]int{}
	for k, v := range p.calls {
		calls[k] = v
	}
	return pluginSeen{
		calls:     calls,
		registry:  append([]*watcherapi.RegistrationStatus(nil), p.registry...),
		hintReqs:  append([]*pluginapi.ResourceRequest(nil), p.hintReqs...),
		allocReqs: append([]*pluginapi.ResourceRequest(nil), p.allocReqs...),
		removed:   append([]string(nil), p.removed...),
	}
}

func (s pluginSeen) String() string {
	keys := make([]string, 0, len(s.calls))
	for k := range s.calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, s.calls[k]))
	}
	return strings.Join(parts, " ")
}
