// podfingerprint-oracle: the podfingerprint library's signature of pod sets,
// for Pinion's differential test of its own fingerprint
// (crates/pinion-core/tests/podfingerprint_oracle.rs).
//
// Input: one pod set per line, pods as NAMESPACE/NAME separated by spaces
// (an empty line is the empty set). Output: one signature per line.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/k8stopologyawareschedwg/podfingerprint"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		pods := strings.Fields(in.Text())
		fp := podfingerprint.NewFingerprint(len(pods))
		for _, pod := range pods {
			namespace, name, ok := strings.Cut(pod, "/")
			if !ok {
				fmt.Fprintf(os.Stderr, "pod %q is not NAMESPACE/NAME\n", pod)
				os.Exit(2)
			}
			if err := fp.Add(namespace, name); err != nil {
				fmt.Fprintf(os.Stderr, "pod %q: %v\n", pod, err)
				os.Exit(2)
			}
		}
		fmt.Fprintln(out, fp.Sign())
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "reading the input: %v\n", err)
		os.Exit(2)
	}
}
