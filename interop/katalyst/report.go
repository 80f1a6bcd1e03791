package main

import (
	"fmt"
	"strings"
)

// report collects the checks of one run.
type report struct {
	passed, failed int
}

// check prints `RESULT PASS|FAIL name: detail`; problems empty = pass.
func (r *report) check(name string, problems []string, detail string) bool {
	if len(problems) == 0 {
		r.passed++
		fmt.Printf("RESULT PASS %s: %s\n", name, detail)
		return true
	}
	r.failed++
	fmt.Printf("RESULT FAIL %s: %s\n", name, strings.Join(problems, "; "))
	return false
}

// fail records a check that could not run at all.
func (r *report) fail(name string, err error) {
	r.check(name, []string{err.Error()}, "")
}

// finish prints the closing line and returns the exit code.
func (r *report) finish() int {
	fmt.Printf("%d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		return 1
	}
	return 0
}

// problems is a list of failed expectations of one check.
type problems []string

func (p *problems) expect(ok bool, format string, args ...any) {
	if !ok {
		*p = append(*p, fmt.Sprintf(format, args...))
	}
}
