// Command testtimes reads `go test -json` on stdin and writes what a plain
// `go test` would (each package's ok or FAIL line, the output of failed
// tests only, build errors), then a table of the time each package took,
// slowest first, and of each scenario of the packages named by -scenarios:
// their top-level tests and the subtests one level under them, so that the
// budget of the suite is visible on every run. It exits 1 when any test or
// package failed, or its input was not go test's.
//
//	go test -json ./... | go run ./hack/testtimes -scenarios test/realnode,test/userpath
//
// hack/test.sh runs two go test commands at once, each through testtimes
// with -save and -table=false, then the saved events of both through
// testtimes -output=false for one table.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	scenarios := flag.String("scenarios", "", "comma-separated packages (relative to the module, or full import paths) whose tests' times are listed too")
	module := flag.String("module", "github.com/dbkeeper/dbkeeper", "the module path, trimmed from package names in the table")
	save := flag.String("save", "", "also append the events read to this file, for a later table of several runs")
	output := flag.Bool("output", true, "write go test's plain output (false: only the table)")
	table := flag.Bool("table", true, "write the table of times at the end")
	flag.Parse()
	var pkgs []string
	for p := range strings.SplitSeq(*scenarios, ",") {
		if p = strings.TrimSpace(p); p != "" {
			pkgs = append(pkgs, p)
		}
	}
	var out io.Writer = os.Stdout
	if !*output {
		out = io.Discard
	}
	s := newSummary(out, *module, pkgs)
	var in io.Reader = os.Stdin
	if *save != "" {
		f, err := os.OpenFile(*save, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtimes: %v\n", err)
			os.Exit(1)
		}
		in = io.TeeReader(os.Stdin, f)
		err = s.read(in)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtimes: %v\n", err)
			os.Exit(1)
		}
	} else if err := s.read(in); err != nil {
		fmt.Fprintf(os.Stderr, "testtimes: %v\n", err)
		os.Exit(1)
	}
	if *table {
		s.table(os.Stdout)
	}
	if s.failed {
		os.Exit(1)
	}
}
