package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// machine is the test machine `pinion plugin serve` runs on: a real
// machine's sysfs tree (../shared/topologies) copied into a work
// directory, with what the memory and NIC plugins read added (node meminfo,
// one PCI NIC per NUMA node).
type machine struct {
	root  string
	nodes map[uint64][]int // NUMA node → its CPUs
	cpus  int
}

const nodeMemory = uint64(16) << 30 // bytes per NUMA node in the added meminfo

func prepareMachine(topology, root string) (*machine, error) {
	if err := os.RemoveAll(root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return nil, err
	}
	// cp -a keeps the tree's relative symlinks (cpuN/nodeM, nodeN/cpuM).
	if out, err := exec.Command("cp", "-a", topology, root).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cp -a %s %s: %v: %s", topology, root, err, out)
	}
	m := &machine{root: root, nodes: map[uint64][]int{}}
	nodeDir := filepath.Join(root, "sys/devices/system/node")
	entries, err := os.ReadDir(nodeDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		id, err := strconv.ParseUint(strings.TrimPrefix(e.Name(), "node"), 10, 64)
		if err != nil || !strings.HasPrefix(e.Name(), "node") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(nodeDir, e.Name(), "cpulist"))
		if err != nil {
			return nil, err
		}
		cpus, err := parseCPUList(strings.TrimSpace(string(text)))
		if err != nil {
			return nil, fmt.Errorf("%s/cpulist: %v", e.Name(), err)
		}
		m.nodes[id] = cpus
		m.cpus += len(cpus)
		kib := nodeMemory / 1024
		meminfo := fmt.Sprintf("Node %d MemTotal: %d kB\nNode %d MemFree: %d kB\n", id, kib, id, kib)
		if err := os.WriteFile(filepath.Join(nodeDir, e.Name(), "meminfo"), []byte(meminfo), 0o644); err != nil {
			return nil, err
		}
		// eth<id>: a PCI NIC on this node, 25 Gb/s.
		device := filepath.Join(root, fmt.Sprintf("sys/devices/pci0000:00/0000:00:%02x.0", id))
		iface := filepath.Join(root, "sys/class/net", fmt.Sprintf("eth%d", id))
		for _, dir := range []string{device, iface} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
		}
		if err := os.WriteFile(filepath.Join(device, "numa_node"), []byte(fmt.Sprintf("%d\n", id)), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(iface, "speed"), []byte("25000\n"), 0o644); err != nil {
			return nil, err
		}
		if err := os.Symlink(device, filepath.Join(iface, "device")); err != nil {
			return nil, err
		}
	}
	if len(m.nodes) < 2 {
		return nil, fmt.Errorf("%s has %d NUMA node(s); the checks need 2 or more", topology, len(m.nodes))
	}
	return m, nil
}

// nodeOf is the NUMA node of a CPU (-1 when none).
func (m *machine) nodeOf(cpu int) int64 {
	for node, cpus := range m.nodes {
		for _, c := range cpus {
			if c == cpu {
				return int64(node)
			}
		}
	}
	return -1
}

func (m *machine) nodeIDs() []uint64 {
	ids := make([]uint64, 0, len(m.nodes))
	for id := range m.nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// parseCPUList reads the kernel's list format (`0-3,8,10-11`).
func parseCPUList(text string) ([]int, error) {
	var cpus []int
	if text == "" {
		return cpus, nil
	}
	for _, part := range strings.Split(text, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad cpu list %q", text)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				return nil, fmt.Errorf("bad cpu list %q", text)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func intersects(a, b []int) bool {
	seen := map[int]bool{}
	for _, c := range a {
		seen[c] = true
	}
	for _, c := range b {
		if seen[c] {
			return true
		}
	}
	return false
}
