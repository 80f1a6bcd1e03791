// podresources-client asks a podresources v1 socket (kubelet's or Pinion's)
// what kubelet's own consumers ask, through kubelet's own client code
// (k8s.io/kubernetes/pkg/kubelet/apis/podresources.GetV1Client), and prints
// one line per container and one for the node:
//
//	container NAMESPACE/POD CONTAINER cpus=LIST
//	allocatable cpus=LIST
//
// LIST is the CPU ids sorted, comma-separated ("-" when empty). Exit status 1
// on any error, with the error on stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
)

func cpuList(ids []int64) string {
	if len(ids) == 0 {
		return "-"
	}
	sorted := append([]int64(nil), ids...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	parts := make([]string, len(sorted))
	for i, id := range sorted {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, ",")
}

func main() {
	socket := flag.String("socket", "unix:///var/lib/kubelet/pod-resources/kubelet.sock", "podresources endpoint (unix://PATH)")
	timeout := flag.Duration("timeout", 10*time.Second, "connection and call timeout")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "podresources-client: unexpected argument %q (only -socket and -timeout)\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// 16 MiB: what kubelet's consumers (e.g. resource-topology-exporter) allow.
	client, conn, err := podresources.GetV1Client(ctx, *socket, *timeout, 16*1024*1024)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources-client: %v\n", err)
		os.Exit(1)
	}
	defer conn.Close()
	list, err := client.List(ctx, &v1.ListPodResourcesRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources-client: List on %s: %v\n", *socket, err)
		os.Exit(1)
	}
	var lines []string
	for _, pod := range list.GetPodResources() {
		for _, c := range pod.GetContainers() {
			lines = append(lines, fmt.Sprintf("container %s/%s %s cpus=%s",
				pod.GetNamespace(), pod.GetName(), c.GetName(), cpuList(c.GetCpuIds())))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	alloc, err := client.GetAllocatableResources(ctx, &v1.AllocatableResourcesRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources-client: GetAllocatableResources on %s: %v\n", *socket, err)
		os.Exit(1)
	}
	fmt.Printf("allocatable cpus=%s\n", cpuList(alloc.GetCpuIds()))
}
