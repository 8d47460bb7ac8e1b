package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
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

	// failures are the failed tests and packages, with the last lines
	// each said, for the digest at the end of the table (a long output's
	// end is what a reader sees first).
	failures []failure
	// pkgTail is the last lines each package printed outside its tests.
	pkgTail map[string][]string
}

// failure is a failed test, or a package that failed outside any test
// (a panic, a timeout, TestMain), with the last lines it said.
type failure struct {
	pkg, test string
	running   bool // still running when its package ended
	said      []string
}

// saidLines is how many of a failure's last lines the digest shows.
const saidLines = 3

func newSummary(out io.Writer, module string, scenarios []string) *summary {
	return &summary{out: out, module: module, scenarios: scenarios, buffered: map[string][]string{}, pkgTail: map[string][]string{}}
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
		s.failures = append(s.failures, failure{pkg: e.Package, test: e.Test, said: lastMessages(s.buffered[k], saidLines)})
		s.flush(k)
		s.failed = true
		s.recordTest(e, "FAIL")
	}
}

// messageLine matches the first line of a test's message (t.Log, t.Error):
// indented, a Go file and line.
var messageLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// lastMessages returns the first lines of the last n messages in a test's
// output.
func lastMessages(lines []string, n int) []string {
	return lastMatching(lines, n, messageLine.MatchString)
}

// lastLines returns the last n lines of a test's output that are not go
// test's own (=== RUN and the like): what a test still running when its
// package ended (a timeout, a panic) said.
func lastLines(lines []string, n int) []string {
	return lastMatching(lines, n, func(l string) bool {
		t := strings.TrimSpace(l)
		return t != "" && !strings.HasPrefix(t, "=== ")
	})
}

// lastMatching returns the last n lines that keep accepts, in order,
// trimmed and cut to 240 bytes.
func lastMatching(lines []string, n int, keep func(string) bool) []string {
	var out []string
	for _, l := range slices.Backward(lines) {
		if len(out) == n {
			break
		}
		if keep(l) {
			out = append(out, cut(l))
		}
	}
	slices.Reverse(out)
	return out
}

// cut trims a line and cuts it to 240 bytes.
func cut(l string) string {
	l = strings.TrimSpace(l)
	if len(l) > 240 {
		l = l[:240] + "…"
	}
	return l
}

func (s *summary) handlePackage(e event) {
	switch e.Action {
	case "output":
		if e.Output != "PASS\n" {
			fmt.Fprint(s.out, e.Output)
		}
		if l := strings.TrimSpace(e.Output); l != "" {
			s.pkgTail[e.Package] = append(s.pkgTail[e.Package], cut(l))
			if tail := s.pkgTail[e.Package]; len(tail) > saidLines+1 {
				s.pkgTail[e.Package] = tail[len(tail)-saidLines-1:]
			}
		}
	case "pass", "fail":
		if e.Action == "fail" {
			s.failed = true
			// A package that ends with tests still running (a timeout,
			// a panic) shows what they said.
			testFailed := slices.ContainsFunc(s.failures, func(f failure) bool { return f.pkg == e.Package })
			for _, k := range slices.Clone(s.order) {
				if test, ok := strings.CutPrefix(k, e.Package+"\x00"); ok {
					if _, running := s.buffered[k]; running {
						s.failures = append(s.failures, failure{pkg: e.Package, test: test, running: true, said: lastLines(s.buffered[k], saidLines)})
						testFailed = true
					}
					s.flush(k)
				}
			}
			if !testFailed {
				s.failures = append(s.failures, failure{pkg: e.Package, said: s.pkgTail[e.Package]})
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
	s.scenarioTable(w)
	s.digest(w)
}

// scenarioTable writes the scenarios' times, grouped by package and
// top-level test, in the order they ended.
func (s *summary) scenarioTable(w io.Writer) {
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

// digest lists the failed tests that have no failed subtest, and the
// packages that failed outside their tests, each with the last lines it
// said: the end of the output, where a reader of a long run looks first.
func (s *summary) digest(w io.Writer) {
	var leaves []failure
	for _, f := range s.failures {
		parent := f.test != "" && slices.ContainsFunc(s.failures, func(g failure) bool {
			return g.pkg == f.pkg && strings.HasPrefix(g.test, f.test+"/")
		})
		if !parent {
			leaves = append(leaves, f)
		}
	}
	if len(leaves) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFailed (the last lines each said; the whole output is above):\n")
	for _, f := range leaves {
		name := f.test
		switch {
		case name == "":
			name = "(outside its tests)"
		case f.running:
			name += " (still running when its package ended)"
		}
		fmt.Fprintf(w, "  %s  %s\n", s.short(f.pkg), name)
		for _, l := range f.said {
			fmt.Fprintf(w, "      %s\n", l)
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
