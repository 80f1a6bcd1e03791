package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/resourceplugin/v1alpha1"
)

// patience bounds every wait (not a timing assertion).
const patience = 30 * time.Second

// agentRun is Pinion's agent started for the plugin checks.
type agentRun struct {
	pinion, work, socket, podresources, state string
	cmd                                       *exec.Cmd
	exited                                    chan error
	log                                       string
}

const agentConfig = `cpuManagerPolicy: static
reservedSystemCPUs: "%s"
topologyManagerPolicy: best-effort
qosResourceManager:
  enabled: true
  reconcilePeriod: 1s
`

func startAgent(pinion, work, cgroupRoot, reserved string) (*agentRun, error) {
	a := &agentRun{
		pinion: pinion, work: work,
		socket:       filepath.Join(work, "pinion.sock"),
		podresources: filepath.Join(work, "podresources.sock"),
		state:        filepath.Join(work, "state"),
		log:          filepath.Join(work, "agent.log"),
	}
	config := filepath.Join(work, "config.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(agentConfig, reserved)), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	a.cmd = exec.Command(pinion, "agent", "--config", config, "--state-dir", a.state,
		"--socket", a.socket, "--cgroup-root", cgroupRoot, "--metrics-addr", "127.0.0.1:0",
		"--podresources-socket", a.podresources)
	a.cmd.Stdout, a.cmd.Stderr = logFile, logFile
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	a.exited = make(chan error, 1)
	go func() { a.exited <- a.cmd.Wait() }()
	deadline := time.Now().Add(patience)
	for {
		if _, err := os.Stat(a.socket); err == nil {
			return a, nil
		}
		select {
		case err := <-a.exited:
			text, _ := os.ReadFile(a.log)
			return nil, fmt.Errorf("agent exited (%v): %s", err, text)
		default:
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, fmt.Errorf("agent socket %s missing after %v", a.socket, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *agentRun) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(patience):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// pinionCmd runs `pinion SUBCOMMAND --socket <agent> ARGS…`.
func (a *agentRun) pinionCmd(sub string, args ...string) *exec.Cmd {
	return exec.Command(a.pinion, append([]string{sub, "--socket", a.socket}, args...)...)
}

// pluginState is the state `pinion plugins` shows for a resource.
func (a *agentRun) pluginState(resource string) string {
	out, err := a.pinionCmd("plugins", "-o", "json").Output()
	if err != nil {
		return fmt.Sprintf("(pinion plugins: %v)", err)
	}
	var plugins []struct {
		Resource string `json:"resource"`
		State    string `json:"state"`
	}
	var wrapped struct {
		Plugins *[]struct {
			Resource string `json:"resource"`
			State    string `json:"state"`
		} `json:"plugins"`
	}
	if json.Unmarshal(out, &plugins) != nil {
		if json.Unmarshal(out, &wrapped) != nil || wrapped.Plugins == nil {
			return fmt.Sprintf("(unreadable: %s)", out)
		}
		plugins = *wrapped.Plugins
	}
	for _, p := range plugins {
		if p.Resource == resource {
			return p.State
		}
	}
	return "absent"
}

// workloadPid is the pid of the one workload `pinion ps` lists (0: none).
func (a *agentRun) workloadPid() int {
	out, err := a.pinionCmd("ps", "-o", "json").Output()
	if err != nil {
		return 0
	}
	var snapshot struct {
		Workloads []struct {
			Pid int `json:"pid"`
		} `json:"workloads"`
	}
	if json.Unmarshal(out, &snapshot) != nil || len(snapshot.Workloads) != 1 {
		return 0
	}
	return snapshot.Workloads[0].Pid
}

func waitFor(what string, ok func() bool) error {
	deadline := time.Now().Add(patience)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, patience)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// allowedCPUs reads Cpus_allowed_list of a process.
func allowedCPUs(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if v, ok := strings.CutPrefix(scanner.Text(), "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

const bandwidth = "resource.katalyst.kubewharf.io/net_bandwidth"

// runPluginTest: two Go plugins on katalyst's wire hosted by Pinion's
// agent — `cpu` through the plugin watcher, net_bandwidth through
// Registration.Register — and containers admitted with `pinion run`.
func runPluginTest(args []string) int {
	fs := flag.NewFlagSet("plugin", flag.ExitOnError)
	pinion := fs.String("pinion", "pinion", "the pinion CLI (its pinion-agent beside it)")
	work := fs.String("work", "", "an empty work directory")
	cgroupRoot := fs.String("cgroup-root", "", "the agent's cgroup root (a new directory in a writable cpuset hierarchy)")
	reserved := fs.String("reserved", "0", "the agent's reservedSystemCPUs")
	cpus := fs.String("cpus", "1", "the cpuset the Go cpu plugin answers first")
	moved := fs.String("moved", "0-1", "the cpuset it answers after the change (reconcile)")
	_ = fs.Parse(args)
	if *work == "" || *cgroupRoot == "" {
		fmt.Fprintln(os.Stderr, "plugin: -work and -cgroup-root are required")
		return 2
	}
	r := &report{}
	agent, err := startAgent(*pinion, *work, *cgroupRoot, *reserved)
	if err != nil {
		r.fail("plugin agent", err)
		return r.finish()
	}
	defer agent.stop()
	checkHosted(r, agent, *cpus, *moved)
	return r.finish()
}

func checkHosted(r *report, agent *agentRun, cpus, moved string) {
	// 1. The plugin-watcher path, as katalyst's plugins register.
	cpu := newPlugin("cpu", "CpusetCpus", cpus, []uint64{0})
	if err := cpu.serve(filepath.Join(agent.state, "plugins_registry", "katalyst-peer-cpu.sock")); err != nil {
		r.fail("plugin watcher registration", err)
		return
	}
	defer cpu.stop()
	var p problems
	err := waitFor("NotifyRegistrationStatus", func() bool { return len(cpu.seen().registry) > 0 })
	p.expect(err == nil, "%v", err)
	seen := cpu.seen()
	p.expect(seen.calls["GetInfo"] > 0, "GetInfo never called")
	p.expect(seen.calls["GetResourcePluginOptions"] > 0, "GetResourcePluginOptions never called")
	for _, s := range seen.registry {
		p.expect(s.PluginRegistered && s.Error == "", "NotifyRegistrationStatus(%v, %q)", s.PluginRegistered, s.Error)
	}
	p.expect(waitFor("active", func() bool { return agent.pluginState("cpu") == "active" }) == nil, "pinion plugins: cpu %s", agent.pluginState("cpu"))
	r.check("plugin watcher registration", p, "GetInfo → GetResourcePluginOptions → NotifyRegistrationStatus(true); pinion plugins: cpu active")

	// 2. The device-plugin path: Registration.Register on the agent's socket.
	p = nil
	bw := newPlugin(bandwidth, "", "", []uint64{0})
	if err := bw.serve(filepath.Join(agent.state, "resource-plugins", "katalyst-peer-bandwidth.sock")); err != nil {
		r.fail("plugin Register", err)
		return
	}
	defer bw.stop()
	err = bw.registerWith(filepath.Join(agent.state, "resource-plugins", "kubelet.sock"))
	p.expect(err == nil, "Register: %v", err)
	p.expect(waitFor("active", func() bool { return agent.pluginState(bandwidth) == "active" }) == nil, "pinion plugins: %s %s", bandwidth, agent.pluginState(bandwidth))
	r.check("plugin Register", p, "Registration.Register accepted; pinion plugins: "+bandwidth+" active")

	// 3. One admission: hints, Allocate with the merged hint, the answers
	// in the container, RemovePod when it is gone.
	out, err := agent.pinionCmd("run", "--cpus", "1",
		"--annotation", pluginapi.KatalystQoSLevelAnnotationKey+"="+pluginapi.KatalystQoSLevelDedicatedCores,
		"--label", pluginapi.PodRoleLabelKey+"=interop",
		"--request", bandwidth+"=100",
		"--", "sh", "-c", "env; grep Cpus_allowed_list /proc/self/status").CombinedOutput()
	runOK := err == nil
	if !runOK {
		text, _ := os.ReadFile(agent.log)
		r.fail("plugin admission", fmt.Errorf("pinion run: %v: %s\nagent log: %s", err, out, text))
		return
	}
	cpuSeen, bwSeen := cpu.seen(), bw.seen()
	p = nil
	for _, s := range []struct {
		name     string
		seen     pluginSeen
		resource string
		quantity float64
	}{{"cpu", cpuSeen, "cpu", 1}, {"bandwidth", bwSeen, bandwidth, 100}} {
		p.expect(len(s.seen.hintReqs) == 1, "%s: %d GetTopologyHints calls", s.name, len(s.seen.hintReqs))
		p.expect(len(s.seen.allocReqs) == 1, "%s: %d Allocate calls", s.name, len(s.seen.allocReqs))
		if len(s.seen.allocReqs) != 1 || len(s.seen.hintReqs) != 1 {
			continue
		}
		for kind, req := range map[string]*pluginapi.ResourceRequest{"hints": s.seen.hintReqs[0], "allocate": s.seen.allocReqs[0]} {
			p.expect(req.PodUid != "" && req.PodName != "" && req.PodNamespace != "", "%s %s: pod %q/%q uid %q", s.name, kind, req.PodNamespace, req.PodName, req.PodUid)
			p.expect(req.ContainerName != "" && req.ContainerType == pluginapi.ContainerType_MAIN, "%s %s: container %q type %v", s.name, kind, req.ContainerName, req.ContainerType)
			p.expect(req.ResourceName == s.resource, "%s %s: resource_name %q", s.name, kind, req.ResourceName)
			p.expect(req.ResourceRequests[s.resource] == s.quantity, "%s %s: resource_requests %v, want %s=%v", s.name, kind, req.ResourceRequests, s.resource, s.quantity)
			p.expect(req.Annotations[pluginapi.KatalystQoSLevelAnnotationKey] == pluginapi.KatalystQoSLevelDedicatedCores, "%s %s: annotations %v", s.name, kind, req.Annotations)
			p.expect(req.Labels[pluginapi.PodRoleLabelKey] == "interop", "%s %s: labels %v", s.name, kind, req.Labels)
			p.expect(req.NativeQosClass == "Guaranteed", "%s %s: native_qos_class %q", s.name, kind, req.NativeQosClass)
		}
		hint := s.seen.allocReqs[0].Hint
		p.expect(hint != nil && len(hint.Nodes) == 1 && hint.Nodes[0] == 0 && hint.Preferred, "%s: Allocate hint %v, want the merged {[0], preferred}", s.name, hint)
		p.expect(s.seen.allocReqs[0].PodUid == s.seen.hintReqs[0].PodUid, "%s: Allocate for another pod than the hints", s.name)
	}
	if len(cpuSeen.allocReqs) == 1 && len(bwSeen.allocReqs) == 1 {
		p.expect(cpuSeen.allocReqs[0].PodUid == bwSeen.allocReqs[0].PodUid, "the two plugins saw different pods")
	}
	r.check("plugin requests", p, "GetTopologyHints and Allocate of both plugins carry the pod, container, quantities, annotations, labels, QoS class and the merged hint")

	p = nil
	env := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			env["Cpus_allowed_list"] = strings.TrimSpace(v)
		}
	}
	if len(cpuSeen.allocReqs) == 1 {
		req := cpuSeen.allocReqs[0]
		want := fmt.Sprintf("%s/%s/%s", req.PodNamespace, req.PodName, req.ContainerName)
		p.expect(env[cpu.envName()] == want, "%s=%q, want %q", cpu.envName(), env[cpu.envName()], want)
		p.expect(env[bw.envName()] == want, "%s=%q, want %q", bw.envName(), env[bw.envName()], want)
	}
	p.expect(env["Cpus_allowed_list"] == cpus, "Cpus_allowed_list %q, the cpu plugin answered %q", env["Cpus_allowed_list"], cpus)
	r.check("plugin answers land", p, fmt.Sprintf("env %s and %s set, Cpus_allowed_list %s", cpu.envName(), bw.envName(), env["Cpus_allowed_list"]))

	p = nil
	if len(cpuSeen.allocReqs) == 1 {
		uid := cpuSeen.allocReqs[0].PodUid
		removedBoth := func() bool {
			return contains(cpu.seen().removed, uid) && contains(bw.seen().removed, uid)
		}
		p.expect(waitFor("RemovePod", removedBoth) == nil, "RemovePod(%s): cpu saw %v, bandwidth saw %v", uid, cpu.seen().removed, bw.seen().removed)
	}
	r.check("plugin RemovePod", p, "both plugins told to forget the pod once its run ended")

	checkRunning(r, agent, cpu, bw, cpus, moved)

	// Last: the cpu plugin goes away; its endpoint is stopped and an
	// exclusive request fails with the reason instead of running shared.
	p = nil
	cpu.stop()
	p.expect(waitFor("stopped", func() bool { return agent.pluginState("cpu") == "stopped" }) == nil, "pinion plugins: cpu %s after its socket went", agent.pluginState("cpu"))
	out, err = agent.pinionCmd("run", "--cpus", "1", "--", "true").CombinedOutput()
	p.expect(err != nil && strings.Contains(string(out), "has been stopped"), "pinion run --cpus 1 with the cpu plugin gone: err %v, %s", err, out)
	r.check("plugin deregistration", p, "socket removed → endpoint stopped; an exclusive run is refused: "+strings.TrimSpace(lastLine(string(out))))
}

// checkRunning: a long run — podresources through katalyst's consumer
// wire, then the plugin changes its answer and reconcile moves the process.
func checkRunning(r *report, agent *agentRun, cpu, bw *qrmPlugin, cpus, moved string) {
	run := agent.pinionCmd("run", "--cpus", "1",
		"--annotation", pluginapi.KatalystQoSLevelAnnotationKey+"="+pluginapi.KatalystQoSLevelDedicatedCores,
		"--request", bandwidth+"=100", "--", "sleep", "1000")
	if err := run.Start(); err != nil {
		r.fail("plugin podresources", err)
		return
	}
	defer func() {
		_ = run.Process.Signal(syscall.SIGTERM)
		_ = run.Wait()
	}()
	var p problems
	// The launcher `pinion run` starts execs the command; its pid is the
	// workload's in `pinion ps`.
	pid := 0
	p.expect(waitFor("pinion ps", func() bool { pid = agent.workloadPid(); return pid > 0 }) == nil, "pinion ps lists no workload")
	p.expect(waitFor("cpuset", func() bool { return allowedCPUs(pid) == cpus }) == nil, "the run's Cpus_allowed_list %q, want %q", allowedCPUs(pid), cpus)

	var uid string
	if reqs := cpu.seen().allocReqs; len(reqs) > 0 {
		uid = reqs[len(reqs)-1].PodUid
	}
	conn, err := dial(agent.podresources)
	if err != nil {
		r.fail("plugin podresources", err)
		return
	}
	defer conn.Close()
	lister := podresourcesapi.NewPodResourcesListerClient(conn)
	ctx, cancel := call()
	list, err := lister.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	cancel()
	p.expect(err == nil, "List: %v", err)
	found := map[string]float64{}
	var cpuIDs []int64
	for _, pod := range list.GetPodResources() {
		for _, c := range pod.Containers {
			for _, res := range c.Resources {
				found[res.ResourceName] += res.AggregatedQuantity
			}
			cpuIDs = append(cpuIDs, c.CpuIds...)
		}
	}
	// A dedicated_cores container's CPUs are its own: cpu_ids name them,
	// for the topology exporters reading field 3.
	p.expect(fmt.Sprint(cpuIDs) == "["+strings.ReplaceAll(cpus, ",", " ")+"]", "List cpu_ids %v, the cpu plugin dedicated %s", cpuIDs, cpus)
	p.expect(found["cpu"] == 1 && found[bandwidth] == 100, "List resources %v, want cpu=1 and %s=100 (pod %s)", found, bandwidth, uid)
	// Pinion refreshes the plugins' allocatable resources every reconcile
	// period (1 s here): wait for the first refresh after registration.
	allocatable := map[string]float64{}
	readAllocatable := func() bool {
		ctx, cancel := call()
		defer cancel()
		alloc, err := lister.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
		if err != nil {
			allocatable = map[string]float64{"error: " + err.Error(): 0}
			return false
		}
		allocatable = map[string]float64{}
		for _, res := range alloc.GetResources() {
			allocatable[res.ResourceName] = res.AggregatedAllocatableQuantity
		}
		return allocatable["cpu"] == allocatableTotal && allocatable[bandwidth] == allocatableTotal
	}
	_ = waitFor("allocatable", readAllocatable)
	p.expect(allocatable["cpu"] == allocatableTotal && allocatable[bandwidth] == allocatableTotal, "GetAllocatableResources resources %v, want both plugins' %d", allocatable, allocatableTotal)
	r.check("plugin podresources", p, fmt.Sprintf("podresources v1 (kubewharf fields) List %v cpu_ids %v, allocatable %v", found, cpuIDs, allocatable))

	p = nil
	polls := cpu.seen().calls["GetResourcesAllocation"]
	cpu.setAnswer(moved)
	p.expect(waitFor("reconcile", func() bool { return allowedCPUs(pid) == moved }) == nil, "after the plugin's change the run is on %q, want %q", allowedCPUs(pid), moved)
	p.expect(cpu.seen().calls["GetResourcesAllocation"] > polls, "no GetResourcesAllocation since the change (%s)", cpu.seen())
	r.check("plugin reconcile", p, fmt.Sprintf("GetResourcesAllocation answer %s → the running process's Cpus_allowed_list %s", moved, allowedCPUs(pid)))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runServe: the Go plugin alone, in a plugin-watcher directory, until
// SIGTERM or SIGINT (for trying it by hand against an agent).
func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	dir := fs.String("socket-dir", "/var/lib/pinion/plugins_registry", "the manager's plugin-watcher directory")
	resource := fs.String("resource", "cpu", "the resource to serve")
	cpus := fs.String("cpus", "", "for -resource cpu: the cpuset to answer (CpusetCpus)")
	_ = fs.Parse(args)
	oci := ""
	if *resource == "cpu" {
		oci = "CpusetCpus"
	}
	p := newPlugin(*resource, oci, *cpus, []uint64{0})
	if err := p.serve(filepath.Join(*dir, "katalyst-peer-"+strings.ReplaceAll(*resource, "/", "_")+".sock")); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "serving %s on %s (%s)\n", *resource, p.socket, kubeletModule())
	stop := make(chan os.Signal, 1)
	signalNotify(stop)
	<-stop
	p.stop()
	return 0
}
