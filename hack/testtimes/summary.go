package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	Test       string
	ImportPath string // of build-output and build-fail
	Elapsed    float64
	Output     string
}

// timing is the outcome and duration of a package or a test.
type timing struct {
	pkg, test string
	result    string // ok, FAIL or skip
	seconds   float64
}

// summary turns a stream of events into go test's plain output and the
// tables of times.
type summary struct {
	out       io.Writer
	module    string
	scenarios []string

	// buffered is each running test's output, kept until it fails (then
	// printed) or passes (then dropped), as go test without -v does.
	buffered map[string][]string
	order    []string // keys of buffered, in the order the tests started

	packages []timing
	tests    []timing
	first    time.Time
	last     time.Time
	failed   bool
}

func newSummary(out io.Writer, module string, scenarios []string) *summary {
	return &summary{out: out, module: module, scenarios: scenarios, buffered: map[string][]string{}}
}

func key(pkg, test string) string { return pkg + "\x00" + test }

// short is a package's path in the module, or pkg where it is outside.
func (s *summary) short(pkg string) string {
	if rest, ok := strings.CutPrefix(pkg, s.module+"/"); ok {
		return rest
	}
	return pkg
}

// isScenarioPackage reports whether the tests of pkg are listed.
func (s *summary) isScenarioPackage(pkg string) bool {
	return slices.Contains(s.scenarios, pkg) || slices.Contains(s.scenarios, s.short(pkg))
}

// read consumes the events. Lines that are not JSON (a test binary's
// direct writes to its standard error, a panic before test2json) are
// passed through.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(s.out, "%s\n", line)
			continue
		}
		s.handle(e)
	}
	return sc.Err()
}

func (s *summary) handle(e event) {
	if !e.Time.IsZero() {
		if s.first.IsZero() || e.Time.Before(s.first) {
			s.first = e.Time
		}
		if e.Time.After(s.last) {
			s.last = e.Time
		}
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.out, e.Output)
		return
	case "build-fail":
		s.failed = true
		return
	}
	if e.Test == "" {
		s.handlePackage(e)
		return
	}
	k := key(e.Package, e.Test)
	switch e.Action {
	case "run":
		if _, ok := s.buffered[k]; !ok {
			s.buffered[k] = nil
			s.order = append(s.order, k)
		}
	case "output":
		if _, ok := s.buffered[k]; !ok {
			s.order = append(s.order, k)
		}
		s.buffered[k] = append(s.buffered[k], e.Output)
	case "pass", "skip":
		delete(s.buffered, k)
		s.recordTest(e, map[string]string{"pass": "ok", "skip": "skip"}[e.Action])
	case "fail":
		s.flush(k)
		s.failed = true
		s.recordTest(e, "FAIL")
	}
}

func (s *summary) handlePackage(e event) {
	switch e.Action {
	case "output":
		if e.Output != "PASS\n" {
			fmt.Fprint(s.out, e.Output)
		}
	case "pass", "fail":
		if e.Action == "fail" {
			s.failed = true
			// A package that ends with tests still running (a timeout,
			// a panic) shows what they said.
			for _, k := range slices.Clone(s.order) {
				if strings.HasPrefix(k, e.Package+"\x00") {
					s.flush(k)
				}
			}
		}
		s.packages = append(s.packages, timing{pkg: e.Package, result: map[string]string{"pass": "ok", "fail": "FAIL"}[e.Action], seconds: e.Elapsed})
	}
}

// flush prints a test's buffered output.
func (s *summary) flush(k string) {
	for _, line := range s.buffered[k] {
		fmt.Fprint(s.out, line)
	}
	delete(s.buffered, k)
}

// recordTest keeps the time of a top-level test, or of a subtest one level
// under it, of a scenario package.
func (s *summary) recordTest(e event, result string) {
	if !s.isScenarioPackage(e.Package) || strings.Count(e.Test, "/") > 1 {
		return
	}
	s.tests = append(s.tests, timing{pkg: e.Package, test: e.Test, result: result, seconds: e.Elapsed})
}

// table writes the packages' times, slowest first, then the scenarios'
// grouped by package and top-level test, in the order they ended.
func (s *summary) table(w io.Writer) {
	if len(s.packages) == 0 {
		return
	}
	pkgs := slices.Clone(s.packages)
	slices.SortStableFunc(pkgs, func(a, b timing) int {
		switch {
		case a.seconds > b.seconds:
			return -1
		case a.seconds < b.seconds:
			return 1
		}
		return strings.Compare(a.pkg, b.pkg)
	})
	var sum float64
	for _, p := range pkgs {
		sum += p.seconds
	}
	fmt.Fprintf(w, "\nTime per package, slowest first (%.0f s in all packages; %.0f s from the first to the last):\n",
		sum, s.last.Sub(s.first).Seconds())
	for _, p := range pkgs {
		fmt.Fprintf(w, "  %7.1f s  %-4s  %s\n", p.seconds, p.result, s.short(p.pkg))
	}
	if len(s.tests) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTime per scenario (subtests that run in parallel overlap):\n")
	for _, pkg := range s.scenarioPackagesSeen() {
		fmt.Fprintf(w, "  %s\n", s.short(pkg))
		for _, top := range s.tests {
			if top.pkg != pkg || strings.Contains(top.test, "/") {
				continue
			}
			fmt.Fprintf(w, "    %7.1f s  %-4s  %s\n", top.seconds, top.result, top.test)
			for _, sub := range s.tests {
				if name, ok := strings.CutPrefix(sub.test, top.test+"/"); ok && sub.pkg == pkg {
					fmt.Fprintf(w, "    %7.1f s  %-4s    %s\n", sub.seconds, sub.result, strings.ReplaceAll(name, "_", " "))
				}
			}
		}
	}
}

// scenarioPackagesSeen returns the scenario packages that ran tests, in
// the order their first test ended.
func (s *summary) scenarioPackagesSeen() []string {
	var out []string
	for _, t := range s.tests {
		if !slices.Contains(out, t.pkg) {
			out = append(out, t.pkg)
		}
	}
	return out
}
