package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"google.golang.org/grpc"
	watcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/resourceplugin/v1alpha1"
)

// The manager: katalyst's QRM manager side (the kubelet fork's plugin
// watcher handler and endpoint calls), driving each of Pinion's plugins
// served by `pinion plugin serve` on a real machine's topology.
func runManager(args []string) int {
	fs := flag.NewFlagSet("manager", flag.ExitOnError)
	pinion := fs.String("pinion", "pinion", "the pinion CLI")
	topology := fs.String("topology", "", "a machine's sysfs tree (../shared/topologies/<machine>), 2 NUMA nodes or more")
	work := fs.String("work", "", "an empty work directory")
	_ = fs.Parse(args)
	if *topology == "" || *work == "" {
		fmt.Fprintln(os.Stderr, "manager: -topology and -work are required")
		return 2
	}
	r := &report{}
	m, err := prepareMachine(*topology, filepath.Join(*work, "sysroot"))
	if err != nil {
		r.fail("manager machine", err)
		return r.finish()
	}
	for _, kind := range []string{"cpu", "memory", "nic"} {
		served, err := servePlugin(*pinion, kind, m.root, *work)
		if err != nil {
			r.fail(kind+" serve", err)
			continue
		}
		driveServed(r, kind, served, m)
		served.stop(r)
	}
	return r.finish()
}

// served is one `pinion plugin serve KIND` process.
type served struct {
	kind   string
	cmd    *exec.Cmd
	socket string
	log    string
}

func servePlugin(pinion, kind, sysroot, work string) (*served, error) {
	sockets := filepath.Join(work, "sockets")
	state := filepath.Join(work, "state-"+kind)
	for _, dir := range []string{sockets, state} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(work, "serve-"+kind+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(pinion, "plugin", "serve", kind,
		"--socket-dir", sockets, "--sysroot", sysroot, "--state-dir", state)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &served{kind: kind, cmd: cmd, socket: filepath.Join(sockets, "pinion-"+kind+"-plugin.sock"), log: logPath}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(s.socket); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			text, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("no socket %s after 30 s: %s", s.socket, text)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM, as an operator stops it: the socket must go at once
// (the plugin watcher's de-registration) and the process exit 0.
func (s *served) stop(r *report) {
	var p problems
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		p.expect(err == nil, "exited with %v", err)
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
		p.expect(false, "still running 20 s after SIGTERM")
	}
	_, err := os.Stat(s.socket)
	p.expect(os.IsNotExist(err), "socket %s left behind", s.socket)
	r.check(s.kind+" deregistration", p, "SIGTERM removed the socket, exit 0")
}

// endpoint is a registered plugin, as the manager's endpoint table holds it.
type endpoint struct {
	conn    *grpc.ClientConn
	client  pluginapi.ResourcePluginClient
	options *pluginapi.ResourcePluginOptions
}

// register does what the fork's plugin watcher and its ResourcePlugin
// handler do with a new socket: GetInfo (1 s), type and version checks,
// GetResourcePluginOptions, NotifyRegistrationStatus.
func register(r *report, kind, socket, resource string) *endpoint {
	conn, err := dial(socket)
	if err != nil {
		r.fail(kind+" registration", fmt.Errorf("dial %s: %v", socket, err))
		return nil
	}
	var p problems
	watcher := watcherapi.NewRegistrationClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	info, err := watcher.GetInfo(ctx, &watcherapi.InfoRequest{})
	cancel()
	if err != nil {
		r.fail(kind+" registration", fmt.Errorf("GetInfo: %v", err))
		conn.Close()
		return nil
	}
	p.expect(info.Type == watcherapi.ResourcePlugin, "GetInfo type %q, want %q", info.Type, watcherapi.ResourcePlugin)
	p.expect(info.Name == resource, "GetInfo name %q, want %q", info.Name, resource)
	p.expect(info.Endpoint == "", "GetInfo endpoint %q, want empty (the socket itself)", info.Endpoint)
	supported := false
	for _, v := range info.SupportedVersions {
		supported = supported || v == pluginapi.Version
	}
	p.expect(supported, "supported versions %v lack %s", info.SupportedVersions, pluginapi.Version)
	client := pluginapi.NewResourcePluginClient(conn)
	ctx, cancel = call()
	options, err := client.GetResourcePluginOptions(ctx, &pluginapi.Empty{})
	cancel()
	p.expect(err == nil, "GetResourcePluginOptions: %v", err)
	status := &watcherapi.RegistrationStatus{PluginRegistered: len(p) == 0}
	if len(p) > 0 {
		status.Error = fmt.Sprintf("RegisterPlugin error -- plugin validation failed with err: %v", p)
	}
	ctx, cancel = call()
	_, err = watcher.NotifyRegistrationStatus(ctx, status)
	cancel()
	p.expect(err == nil, "NotifyRegistrationStatus: %v", err)
	if !r.check(kind+" registration", p, fmt.Sprintf("GetInfo %s/%s versions %v, options %v", info.Type, info.Name, info.SupportedVersions, options)) {
		conn.Close()
		return nil
	}
	return &endpoint{conn: conn, client: client, options: options}
}

func driveServed(r *report, kind string, s *served, m *machine) {
	resource := map[string]string{"cpu": "cpu", "memory": "memory", "nic": nicResource}[kind]
	e := register(r, kind, s.socket, resource)
	if e == nil {
		return
	}
	defer e.conn.Close()
	var p problems
	p.expect(e.options.WithTopologyAlignment, "with_topology_alignment false")
	p.expect(e.options.NeedReconcile == (kind != "nic"), "need_reconcile %v", e.options.NeedReconcile)
	p.expect(!e.options.PreStartRequired, "pre_start_required true")
	r.check(kind+" options", p, fmt.Sprintf("%+v", *e.options))
	switch kind {
	case "cpu":
		driveCPU(r, e, m)
	case "memory":
		driveMemory(r, e, m)
	case "nic":
		driveNIC(r, e, m)
	}
}

const nicResource = "resource.katalyst.kubewharf.io/net_bandwidth"

// pod is a test pod's request builder: katalyst's annotations, a Guaranteed
// or Burstable QoS class, one MAIN container `app`.
type pod struct {
	uid         string
	annotations map[string]string
	qosClass    string
}

func (p pod) request(resource string, quantity float64, hint *pluginapi.TopologyHint) *pluginapi.ResourceRequest {
	return &pluginapi.ResourceRequest{
		PodUid:           p.uid,
		PodNamespace:     "katalyst",
		PodName:          "pod-" + p.uid,
		ContainerName:    "app",
		ContainerType:    pluginapi.ContainerType_MAIN,
		ContainerIndex:   0,
		ResourceName:     resource,
		Hint:             hint,
		ResourceRequests: map[string]float64{resource: quantity},
		Labels:           map[string]string{pluginapi.PodRoleLabelKey: "interop"},
		Annotations:      p.annotations,
		NativeQosClass:   p.qosClass,
	}
}

func dedicatedNUMABound(uid string) pod {
	return pod{uid: uid, qosClass: "Guaranteed", annotations: map[string]string{
		pluginapi.KatalystQoSLevelAnnotationKey:          pluginapi.KatalystQoSLevelDedicatedCores,
		pluginapi.KatalystMemoryEnhancementAnnotationKey: `{"numa_binding":"true"}`,
	}}
}

// hints calls GetTopologyHints and returns the value under resource and
// whether the key was there; nil = no preference (the map's nil value).
func hints(e *endpoint, req *pluginapi.ResourceRequest) (*pluginapi.ListOfTopologyHints, bool, error) {
	ctx, cancel := call()
	defer cancel()
	resp, err := e.client.GetTopologyHints(ctx, req)
	if err != nil {
		return nil, false, err
	}
	list, ok := resp.ResourceHints[req.ResourceName]
	return list, ok, nil
}

func preferredSingleNodes(list *pluginapi.ListOfTopologyHints) []uint64 {
	var nodes []uint64
	for _, h := range list.GetHints() {
		if h.Preferred && len(h.Nodes) == 1 {
			nodes = append(nodes, h.Nodes[0])
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
	return nodes
}

func allocate(e *endpoint, req *pluginapi.ResourceRequest) (*pluginapi.ResourceAllocationInfo, *pluginapi.ResourceAllocationResponse, error) {
	ctx, cancel := call()
	defer cancel()
	resp, err := e.client.Allocate(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	info := resp.GetAllocationResult().GetResourceAllocation()[req.ResourceName]
	if info == nil {
		return nil, resp, fmt.Errorf("allocation_result has no %q: %+v", req.ResourceName, resp.AllocationResult)
	}
	return info, resp, nil
}

func allocations(e *endpoint) (map[string]*pluginapi.ContainerResources, error) {
	ctx, cancel := call()
	defer cancel()
	resp, err := e.client.GetResourcesAllocation(ctx, &pluginapi.GetResourcesAllocationRequest{})
	if err != nil {
		return nil, err
	}
	return resp.PodResources, nil
}

func removePod(e *endpoint, uid string) error {
	ctx, cancel := call()
	defer cancel()
	_, err := e.client.RemovePod(ctx, &pluginapi.RemovePodRequest{PodUid: uid})
	return err
}

func allocatable(e *endpoint, resource string) (*pluginapi.AllocatableTopologyAwareResource, error) {
	ctx, cancel := call()
	defer cancel()
	resp, err := e.client.GetTopologyAwareAllocatableResources(ctx, &pluginapi.GetTopologyAwareAllocatableResourcesRequest{})
	if err != nil {
		return nil, err
	}
	res := resp.AllocatableResources[resource]
	if res == nil {
		return nil, fmt.Errorf("no %q in %v", resource, resp.AllocatableResources)
	}
	return res, nil
}

func topologyAware(e *endpoint, uid, container, resource string) (*pluginapi.TopologyAwareResource, *pluginapi.GetTopologyAwareResourcesResponse, error) {
	ctx, cancel := call()
	defer cancel()
	resp, err := e.client.GetTopologyAwareResources(ctx, &pluginapi.GetTopologyAwareResourcesRequest{PodUid: uid, ContainerName: container})
	if err != nil {
		return nil, nil, err
	}
	res := resp.GetContainerTopologyAwareResources().GetAllocatedResources()[resource]
	if res == nil {
		return nil, resp, fmt.Errorf("no %q in %+v", resource, resp.ContainerTopologyAwareResources)
	}
	return res, resp, nil
}

// perNode sums a quantity list by node.
func perNode(list []*pluginapi.TopologyAwareQuantity) map[uint64]float64 {
	sums := map[uint64]float64{}
	for _, q := range list {
		sums[q.Node] += q.ResourceValue
	}
	return sums
}

func sum(values map[uint64]float64) float64 {
	total := 0.0
	for _, v := range values {
		total += v
	}
	return total
}
