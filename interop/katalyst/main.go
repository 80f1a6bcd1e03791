// katalyst-peer: katalyst's own wire code (the kubewharf kubelet fork's
// generated resourceplugin/v1alpha1 and pluginregistration packages, as
// katalyst-core pins them) against Pinion, both ways:
//
//	katalyst-peer version                 the kubewharf module linked
//	katalyst-peer manager  [flags]        a QRM manager driving `pinion plugin serve cpu|memory|nic`
//	katalyst-peer plugin   [flags]        a resource plugin hosted by Pinion's agent, checked through `pinion run`
//	katalyst-peer serve    [flags]        the resource plugin alone (for trying it by hand)
//
// `manager` and `plugin` print one `RESULT PASS|FAIL name: detail` line per
// check and end with `N passed, N failed`; they exit 1 when a check failed.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: katalyst-peer version|manager|plugin|serve [flags] (-h for a subcommand's flags)")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "version":
		fmt.Println(kubeletModule())
	case "manager":
		os.Exit(runManager(args))
	case "plugin":
		os.Exit(runPluginTest(args))
	case "serve":
		os.Exit(runServe(args))
	default:
		usage()
	}
}

// kubeletModule names the module behind k8s.io/kubelet in this binary, e.g.
// `k8s.io/kubelet v0.24.6 => github.com/kubewharf/kubelet v1.24.6-kubewharf-pre.2`.
func kubeletModule() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "k8s.io/kubelet (no build information)"
	}
	for _, dep := range info.Deps {
		if dep.Path != "k8s.io/kubelet" {
			continue
		}
		if dep.Replace != nil {
			return fmt.Sprintf("%s %s => %s %s", dep.Path, dep.Version, dep.Replace.Path, dep.Replace.Version)
		}
		return dep.Path + " " + dep.Version
	}
	return "k8s.io/kubelet (not linked)"
}
