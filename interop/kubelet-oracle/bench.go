// The timing mode (--bench): kubelet's own allocator functions
// (takeByTopologyNUMAPacked, takeByTopologyNUMADistributed, unexported in
// pkg/kubelet/cm/cpumanager and reached with go:linkname) called in-process
// on allocation cases, each timed as a median of rounds. Used by
// scripts/kubelet-speed.sh; see README.md.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"
	_ "unsafe" // go:linkname

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/utils/cpuset"
)

//go:linkname takeByTopologyNUMAPacked k8s.io/kubernetes/pkg/kubelet/cm/cpumanager.takeByTopologyNUMAPacked
func takeByTopologyNUMAPacked(logger klog.Logger, topo *topology.CPUTopology, availableCPUs cpuset.CPUSet, numCPUs int, cpuSortingStrategy cpumanager.CPUSortingStrategy, preferAlignByUncoreCache bool) (cpuset.CPUSet, error)

//go:linkname takeByTopologyNUMADistributed k8s.io/kubernetes/pkg/kubelet/cm/cpumanager.takeByTopologyNUMADistributed
func takeByTopologyNUMADistributed(logger klog.Logger, topo *topology.CPUTopology, availableCPUs cpuset.CPUSet, numCPUs int, cpuGroupSize int, cpuSortingStrategy cpumanager.CPUSortingStrategy, alignBySocket bool) (cpuset.CPUSet, error)

// BenchCase is one allocation: the machine, the free CPUs, the request and
// the algorithm (packed, uncore = packed + prefer-align-cpus-by-uncorecache,
// distribute-numa = the distributed allocator with group size 1).
type BenchCase struct {
	ID        string `json:"id"`
	CPUs      []CPU  `json:"cpus"`
	Available string `json:"available"`
	Request   int    `json:"request"`
	Algorithm string `json:"algorithm"`
}

// BenchResult is the median time per call and the CPUs kubelet chose.
type BenchResult struct {
	ID        string  `json:"id"`
	NsPerCall float64 `json:"ns_per_call"`
	Rounds    []int64 `json:"rounds_ns"`
	CPUs      string  `json:"cpus"`
	Error     *string `json:"error"`
}

// benchRounds rounds of at least benchRound each; the median per-call time.
const benchRounds = 5

var benchRound = 200 * time.Millisecond

func benchCase(logger klog.Logger, bc BenchCase) (BenchResult, error) {
	res := BenchResult{ID: bc.ID}
	topo, err := topology.Discover(logger, machineInfo(bc.CPUs, nil))
	if err != nil {
		return res, err
	}
	free, err := cpuset.Parse(bc.Available)
	if err != nil {
		return res, fmt.Errorf("available %q: %w", bc.Available, err)
	}
	var call func() (cpuset.CPUSet, error)
	switch bc.Algorithm {
	case "packed", "uncore":
		uncore := bc.Algorithm == "uncore"
		call = func() (cpuset.CPUSet, error) {
			return takeByTopologyNUMAPacked(logger, topo, free, bc.Request, cpumanager.CPUSortingStrategyPacked, uncore)
		}
	case "distribute-numa":
		call = func() (cpuset.CPUSet, error) {
			return takeByTopologyNUMADistributed(logger, topo, free, bc.Request, 1, cpumanager.CPUSortingStrategyPacked, false)
		}
	default:
		return res, fmt.Errorf("unknown algorithm %q (packed, uncore, distribute-numa)", bc.Algorithm)
	}
	got, err := call()
	if err != nil {
		res.Error = strp(err.Error())
	}
	res.CPUs = got.String()
	for r := 0; r < benchRounds; r++ {
		n := 0
		start := time.Now()
		for time.Since(start) < benchRound {
			_, _ = call()
			n++
		}
		res.Rounds = append(res.Rounds, time.Since(start).Nanoseconds()/int64(n))
	}
	sorted := append([]int64(nil), res.Rounds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	res.NsPerCall = float64(sorted[len(sorted)/2])
	return res, nil
}

// runBench answers every case of stdin (JSON lines) with a BenchResult line.
func runBench() {
	// A logger that drops everything before formatting: kubelet's log calls
	// cost only their V-level checks (spec kubelet-cpumanager.md §12 timed
	// the allocator with logging removed).
	logger := logr.Discard()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		var bc BenchCase
		if err := json.Unmarshal(in.Bytes(), &bc); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle --bench: bad input line: %v\n", err)
			os.Exit(2)
		}
		res, err := benchCase(logger, bc)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle --bench: case %s: %v\n", bc.ID, err)
			os.Exit(2)
		}
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle --bench: %v\n", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-oracle --bench: reading stdin: %v\n", err)
		os.Exit(2)
	}
}
