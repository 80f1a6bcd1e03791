// kubelet-oracle runs kubelet's own CPU manager static policy
// (k8s.io/kubernetes/pkg/kubelet/cm/cpumanager, linked from the module at the
// version in go.mod) over scenarios read as JSON lines on stdin, and prints
// one JSON line per scenario with kubelet's decision for every step.
//
// It is a test oracle for Pinion (scripts/kubelet-diff.sh), never shipped.
// See README.md for the input and output formats.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/utils/cpuset"
)

// CPU is one logical CPU of the machine, as Pinion's topology JSON gives it.
type CPU struct {
	ID     int `json:"id"`
	Core   int `json:"core"`
	Socket int `json:"socket"`
	NUMA   int `json:"numa"`
	Uncore int `json:"uncore"`
}

// Container is one container's resources (quantities in Kubernetes syntax).
type Container struct {
	Name          string `json:"name"`
	CPURequest    string `json:"cpu_request,omitempty"`
	CPULimit      string `json:"cpu_limit,omitempty"`
	MemoryRequest string `json:"memory_request,omitempty"`
	MemoryLimit   string `json:"memory_limit,omitempty"`
	RestartPolicy string `json:"restart_policy,omitempty"`
}

// Pod is one pod of the scenario.
type Pod struct {
	InitContainers []Container `json:"init_containers,omitempty"`
	Containers     []Container `json:"containers"`
	// Resources is the pod-level resources (spec.resources; Name unused).
	Resources *Container `json:"pod_resources,omitempty"`
}

// NUMANode is one NUMA node with its distances (node-id order), as Pinion's
// topology JSON gives them; nodes without CPUs (memory only) included.
type NUMANode struct {
	ID        int      `json:"id"`
	Distances []uint64 `json:"distances"`
}

// Step is an admission (`add`) or a removal (`remove`) of one container.
type Step struct {
	Op        string `json:"op"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

// Scenario is one input line.
type Scenario struct {
	ID          string            `json:"id"`
	CPUs        []CPU             `json:"cpus"`
	Options     map[string]string `json:"options"`
	Gates       map[string]bool   `json:"gates"`
	NumReserved int               `json:"num_reserved"`
	Reserved    string            `json:"reserved"`
	TMPolicy    string            `json:"topology_manager_policy"`
	// TMScope is kubelet's topologyManagerScope (container, the default, or pod).
	TMScope string `json:"topology_manager_scope"`
	// TMOptions is kubelet's topologyManagerPolicyOptions.
	TMOptions map[string]string `json:"topology_manager_policy_options"`
	NUMANodes []NUMANode        `json:"numa_nodes"`
	Pods      map[string]Pod    `json:"pods"`
	Steps     []Step            `json:"steps"`
	// Checkpoint: keep the state in kubelet's checkpoint file (a temporary
	// directory) and answer its bytes after the last step.
	Checkpoint bool `json:"checkpoint"`
	// InitialState is loaded before Start, as kubelet's tests mock a
	// restored checkpoint: the shared pool and "<pod>/<container>" → CPUs.
	InitialState *struct {
		Default     string            `json:"default"`
		Assignments map[string]string `json:"assignments"`
	} `json:"initial_state"`
}

// StepResult is kubelet's answer to one step.
type StepResult struct {
	Op        string  `json:"op"`
	Pod       string  `json:"pod"`
	Container string  `json:"container"`
	CPUs      *string `json:"cpus"`
	Error     *string `json:"error"`
	Default   string  `json:"default"`
}

// Result is one output line.
type Result struct {
	ID         string       `json:"id"`
	Kubernetes string       `json:"kubernetes"`
	Error      *string      `json:"error"`
	Reserved   string       `json:"reserved,omitempty"`
	Steps      []StepResult `json:"steps"`
	// Checkpoint is cpu_manager_state after the last step (when asked).
	Checkpoint *string `json:"checkpoint,omitempty"`
	Panic      string  `json:"panic,omitempty"`
	// Hung: kubelet's Allocate did not return within allocateTimeout; the
	// last step's error is hangError and the oracle exits (status 3) after
	// this line, so the caller restarts it for the remaining scenarios.
	Hung bool `json:"hung,omitempty"`
}

// checkpointName is kubelet's file name for the CPU manager's checkpoint.
const checkpointName = "cpu_manager_state"

const hangError = "oracle: kubelet's Allocate did not return"

// allocateTimeout bounds one Allocate (normally well under a millisecond).
var allocateTimeout = 5 * time.Second

// machineInfo builds cAdvisor's MachineInfo from the CPU list: cores grouped
// by (NUMA node, core id), each core with its socket and one uncore cache
// (the CPU's uncore id), so that topology.Discover — kubelet's own code —
// yields the CPUTopology kubelet would compute from cAdvisor.
func machineInfo(cpus []CPU, numaNodes []NUMANode) *cadvisorapi.MachineInfo {
	type coreKey struct{ numa, core int }
	nodes := map[int]*cadvisorapi.Node{}
	cores := map[coreKey]*cadvisorapi.Core{}
	var coreOrder []coreKey
	sockets := map[int]bool{}
	for _, n := range numaNodes {
		nodes[n.ID] = &cadvisorapi.Node{Id: n.ID, Distances: n.Distances}
	}
	for _, c := range cpus {
		sockets[c.Socket] = true
		if _, ok := nodes[c.NUMA]; !ok {
			nodes[c.NUMA] = &cadvisorapi.Node{Id: c.NUMA}
		}
		k := coreKey{c.NUMA, c.Core}
		core, ok := cores[k]
		if !ok {
			core = &cadvisorapi.Core{Id: c.Core, SocketID: c.Socket,
				UncoreCaches: []cadvisorapi.Cache{{Id: c.Uncore, Level: 3, Type: "Unified"}}}
			cores[k] = core
			coreOrder = append(coreOrder, k)
		}
		core.Threads = append(core.Threads, c.ID)
	}
	sort.Slice(coreOrder, func(i, j int) bool {
		if coreOrder[i].numa != coreOrder[j].numa {
			return coreOrder[i].numa < coreOrder[j].numa
		}
		return coreOrder[i].core < coreOrder[j].core
	})
	for _, k := range coreOrder {
		nodes[k.numa].Cores = append(nodes[k.numa].Cores, *cores[k])
	}
	var ids []int
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	mi := &cadvisorapi.MachineInfo{NumCores: len(cpus), NumSockets: len(sockets)}
	for _, id := range ids {
		mi.Topology = append(mi.Topology, *nodes[id])
	}
	return mi
}

func quantityList(cpuReq, cpuLim, memReq, memLim string) (v1.ResourceList, v1.ResourceList, error) {
	req, lim := v1.ResourceList{}, v1.ResourceList{}
	for _, e := range []struct {
		list v1.ResourceList
		name v1.ResourceName
		val  string
	}{{req, v1.ResourceCPU, cpuReq}, {lim, v1.ResourceCPU, cpuLim}, {req, v1.ResourceMemory, memReq}, {lim, v1.ResourceMemory, memLim}} {
		if e.val == "" {
			continue
		}
		q, err := resource.ParseQuantity(e.val)
		if err != nil {
			return nil, nil, err
		}
		e.list[e.name] = q
	}
	return req, lim, nil
}

func toV1Container(c Container) (v1.Container, error) {
	req, lim, err := quantityList(c.CPURequest, c.CPULimit, c.MemoryRequest, c.MemoryLimit)
	if err != nil {
		return v1.Container{}, fmt.Errorf("container %s: %w", c.Name, err)
	}
	out := v1.Container{Name: c.Name, Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
	if c.RestartPolicy != "" {
		rp := v1.ContainerRestartPolicy(c.RestartPolicy)
		out.RestartPolicy = &rp
	}
	return out, nil
}

func toV1Pod(uid string, p Pod) (*v1.Pod, error) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}}
	if r := p.Resources; r != nil {
		req, lim, err := quantityList(r.CPURequest, r.CPULimit, r.MemoryRequest, r.MemoryLimit)
		if err != nil {
			return nil, fmt.Errorf("pod %s: pod_resources: %w", uid, err)
		}
		pod.Spec.Resources = &v1.ResourceRequirements{Requests: req, Limits: lim}
	}
	for _, c := range p.InitContainers {
		vc, err := toV1Container(c)
		if err != nil {
			return nil, err
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, vc)
	}
	for _, c := range p.Containers {
		vc, err := toV1Container(c)
		if err != nil {
			return nil, err
		}
		pod.Spec.Containers = append(pod.Spec.Containers, vc)
	}
	return pod, nil
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

func strp(s string) *string { return &s }

// setGates applies the scenario's feature gates; kubelet's defaults otherwise.
func setGates(gates map[string]bool) error {
	m := map[string]bool{
		string(features.CPUManagerPolicyAlphaOptions): false,
		string(features.CPUManagerPolicyBetaOptions):  true,
		string(features.PodLevelResourceManagers):     false,
	}
	for k, v := range gates {
		m[k] = v
	}
	return utilfeature.DefaultMutableFeatureGate.SetFromMap(m)
}

func run(sc Scenario, logger klog.Logger, version string) (res Result) {
	res = Result{ID: sc.ID, Kubernetes: version, Steps: []StepResult{}}
	defer func() {
		if r := recover(); r != nil {
			res.Panic = fmt.Sprintf("%v\n%s", r, debug.Stack())
		}
	}()
	if err := setGates(sc.Gates); err != nil {
		res.Error = strp("oracle: feature gates: " + err.Error())
		return res
	}
	mi := machineInfo(sc.CPUs, sc.NUMANodes)
	topo, err := topology.Discover(logger, mi)
	if err != nil {
		res.Error = strp(err.Error())
		return res
	}
	reserved, err := cpuset.Parse(sc.Reserved)
	if err != nil {
		res.Error = strp("oracle: reserved: " + err.Error())
		return res
	}
	tmName := sc.TMPolicy
	if tmName == "" {
		tmName = topologymanager.PolicyNone
	}
	tmScope := sc.TMScope
	if tmScope == "" {
		tmScope = topologymanager.ContainerTopologyScope
	}
	// kubelet's container manager builds the Topology Manager first, over
	// cAdvisor's NUMA nodes, then the CPU manager with it as affinity store.
	tm, err := topologymanager.NewManager(logger, mi.Topology, tmName, tmScope, sc.TMOptions)
	if err != nil {
		res.Error = strp(err.Error())
		return res
	}
	options := sc.Options
	if options == nil {
		options = map[string]string{}
	}
	policy, err := cpumanager.NewStaticPolicy(logger, topo, sc.NumReserved, reserved, tm, options)
	if err != nil {
		res.Error = strp(err.Error())
		return res
	}
	var st state.State = state.NewMemoryState(logger)
	if sc.Checkpoint {
		dir, err := os.MkdirTemp("", "kubelet-oracle-")
		if err != nil {
			res.Error = strp("oracle: " + err.Error())
			return res
		}
		defer os.RemoveAll(dir)
		st, err = state.NewCheckpointState(logger, dir, checkpointName, policy.Name(), containermap.ContainerMap{})
		if err != nil {
			res.Error = strp(err.Error())
			return res
		}
		defer func() {
			if b, err := os.ReadFile(filepath.Join(dir, checkpointName)); err == nil {
				res.Checkpoint = strp(string(b))
			}
		}()
	}
	if is := sc.InitialState; is != nil {
		def, err := cpuset.Parse(is.Default)
		if err != nil {
			res.Error = strp("oracle: initial_state: " + err.Error())
			return res
		}
		st.SetDefaultCPUSet(def)
		for key, list := range is.Assignments {
			pod, container, ok := strings.Cut(key, "/")
			cs, err := cpuset.Parse(list)
			if !ok || err != nil {
				res.Error = strp("oracle: initial_state: bad assignment " + key)
				return res
			}
			st.SetCPUSet(pod, container, cs)
		}
	}
	if err := policy.Start(logger, st); err != nil {
		res.Error = strp(err.Error())
		return res
	}
	res.Reserved = topo.CPUDetails.CPUs().Difference(policy.GetAllocatableCPUs(st)).String()
	pods := map[string]*v1.Pod{}
	prov := &cpuProvider{policy: policy, st: st, full: pods}
	tm.AddHintProvider(logger, prov)
	podScope := tmName != topologymanager.PolicyNone && tmScope == topologymanager.PodTopologyScope
	admitted := map[string]bool{}
	for uid, p := range sc.Pods {
		vp, err := toV1Pod(uid, p)
		if err != nil {
			res.Error = strp("oracle: " + err.Error())
			return res
		}
		pods[uid] = vp
	}
	for _, step := range sc.Steps {
		sr := StepResult{Op: step.Op, Pod: step.Pod, Container: step.Container}
		switch step.Op {
		case "add":
			pod, ok := pods[step.Pod]
			var c *v1.Container
			if ok {
				c = findContainer(pod, step.Container)
			}
			if c == nil {
				sr.Error = strp(fmt.Sprintf("oracle: unknown container %s/%s", step.Pod, step.Container))
				break
			}
			done := make(chan error, 1)
			go func() { done <- admit(logger, tm, prov, policy, st, pod, c, podScope, admitted) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(allocateTimeout):
				// kubelet's allocation never returns (a known upstream hang);
				// the goroutine cannot be stopped: answer and let main exit.
				sr.Error = strp(hangError)
				sr.Default = st.GetDefaultCPUSet().String()
				res.Steps = append(res.Steps, sr)
				res.Hung = true
				return res
			}
			if err != nil {
				sr.Error = strp(err.Error())
			} else if cs, ok := st.GetCPUSet(step.Pod, step.Container); ok {
				sr.CPUs = strp(cs.String())
			}
		case "remove":
			if err := policy.RemoveContainer(logger, st, step.Pod, step.Container); err != nil {
				sr.Error = strp(err.Error())
			}
		default:
			sr.Error = strp("oracle: unknown op " + step.Op)
		}
		sr.Default = st.GetDefaultCPUSet().String()
		res.Steps = append(res.Steps, sr)
	}
	return res
}

// cpuProvider is the CPU manager as the Topology Manager's hint provider:
// what kubelet's cpumanager.manager does (GetTopologyHints,
// GetPodTopologyHints, Allocate, AllocatePod delegate to the policy with its
// state), without the stale-state sweep. Admissions run one container per
// step: Allocate acts for `target` only (the other containers of a pod the
// pod scope admits at once are allocated at their own steps, with the hint
// kubelet's scope stored for them), and the providers always see the whole
// pod (`full`, by UID) even when the scope is handed a pod with one container.
type cpuProvider struct {
	policy cpumanager.Policy
	st     state.State
	full   map[string]*v1.Pod
	target string
	// err is the CPU manager's own error of the step (kubelet's admission
	// wraps it; the oracle reports the policy's text, as without the
	// Topology Manager).
	err error
}

func (p *cpuProvider) pod(pod *v1.Pod) *v1.Pod {
	if f, ok := p.full[string(pod.UID)]; ok {
		return f
	}
	return pod
}

func (p *cpuProvider) GetTopologyHints(logger klog.Logger, pod *v1.Pod, c *v1.Container, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	full := p.pod(pod)
	if fc := findContainer(full, c.Name); fc != nil {
		c = fc
	}
	return p.policy.GetTopologyHints(logger, p.st, full, c, op)
}

func (p *cpuProvider) GetPodTopologyHints(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	return p.policy.GetPodTopologyHints(logger, p.st, p.pod(pod), op)
}

func (p *cpuProvider) AllocatePod(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) error {
	err := p.policy.AllocatePod(logger, p.st, p.pod(pod), op)
	if err != nil {
		p.err = err
	}
	return err
}

func (p *cpuProvider) Allocate(ctx context.Context, pod *v1.Pod, c *v1.Container, op lifecycle.Operation) error {
	if c.Name != p.target {
		return nil
	}
	full := p.pod(pod)
	if fc := findContainer(full, c.Name); fc != nil {
		c = fc
	}
	err := p.policy.Allocate(klog.FromContext(ctx), p.st, full, c, op)
	if err != nil {
		p.err = err
	}
	return err
}

// onlyContainer is pod with one of its containers (in its own list): what
// the container scope admits at one step.
func onlyContainer(pod *v1.Pod, c *v1.Container) *v1.Pod {
	out := pod.DeepCopy()
	out.Spec.InitContainers, out.Spec.Containers = nil, nil
	if isInit(pod, c.Name) {
		out.Spec.InitContainers = []v1.Container{*c}
	} else {
		out.Spec.Containers = []v1.Container{*c}
	}
	return out
}

func isInit(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return true
		}
	}
	return false
}

// admit is one `add` step through kubelet's Topology Manager: its
// Admit (the scope's hint merge, the policy's admit, the stored hint, then
// the providers' Allocate). In the pod scope the pod is admitted once, at
// its first container's step; its later containers are allocated with the
// hint the scope stored for them. The error is the CPU manager's own, else
// the admission's message (kubelet's TopologyAffinityError text).
func admit(logger klog.Logger, tm topologymanager.Manager, prov *cpuProvider, policy cpumanager.Policy,
	st state.State, pod *v1.Pod, c *v1.Container, podScope bool, admitted map[string]bool) error {
	uid := string(pod.UID)
	podLevel := utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResourceManagers) &&
		pod.Spec.Resources != nil
	if podScope && admitted[uid] {
		if podLevel {
			return nil // AllocatePod gave every container its CPUs at admission
		}
		return policy.Allocate(logger, st, pod, c, lifecycle.AddOperation)
	}
	prov.target, prov.err = c.Name, nil
	arg := pod
	if !podScope {
		arg = onlyContainer(pod, c)
	}
	r := tm.Admit(klog.NewContext(context.Background(), logger),
		&lifecycle.PodAdmitAttributes{Pod: arg, Operation: lifecycle.AddOperation})
	if r.Admit {
		admitted[uid] = true
		return nil
	}
	if prov.err != nil {
		return prov.err
	}
	return fmt.Errorf("%s", r.Message)
}

func kubernetesVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/kubernetes" {
				return d.Path + " " + d.Version
			}
		}
	}
	return "k8s.io/kubernetes (unknown)"
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(kubernetesVersion())
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "--restore" {
		// kubelet restoring DIR/cpu_manager_state (policy static), as at its
		// start: prints the restored state, or kubelet's error (exit 1).
		klog.SetOutput(io.Discard)
		klog.LogToStderr(false)
		st, err := state.NewCheckpointState(klog.Background(), os.Args[2], checkpointName, "static", containermap.ContainerMap{})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("restored: default %s, assignments %v\n", st.GetDefaultCPUSet(), st.GetCPUAssignments())
		return
	}
	// kubelet logs every allocation at V(0); keep stdout for answers.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	if len(os.Args) == 2 && os.Args[1] == "--bench" {
		runBench()
		return
	}
	logger := klog.Background()
	version := kubernetesVersion()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		var sc Scenario
		if err := json.Unmarshal(line, &sc); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle: bad input line: %v\n", err)
			os.Exit(2)
		}
		res := run(sc, logger, version)
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle: %v\n", err)
			os.Exit(2)
		}
		if res.Hung {
			out.Flush()
			os.Exit(3)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-oracle: reading stdin: %v\n", err)
		os.Exit(2)
	}
}
