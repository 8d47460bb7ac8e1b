// Command benchreplication measures what a client of a 3-replica postgres
// Database sees when its primary goes away: pgbench in a pod on devcluster's
// real node writes through the Database's ClusterIP Service, as a user's
// client does (cluster DNS, kube-proxy), while the command injects a fault —
// a switchover, the primary's pod deleted, its postgres killed with SIGKILL,
// its network cut, its pod deleted while the operator converges a thousand
// other Databases on a fake node (load.go) — and, for each, reports the longest write pause, the
// timeline of the change of primary, the acknowledged transactions lost, and
// TPS before and after. It also compares pgbench through the Service with
// pgbench to the primary's pod IP. It writes the figures as JSON, a
// Markdown section and optionally the generated section of
// docs/benchmarks.md. It reports figures; it asserts nothing.
//
// It needs root, runc, the real node's binaries (make node-tools) and the
// engine images (make engine-images), like test/realnode.
//
//	go run ./test/benchreplication -runs 5 -clients 4 -out bin/bench-replication.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// defaultLoad is -load's default: the thousand Databases of issue 25.
const defaultLoad = 1000

// options are the command's flags.
type options struct {
	runs            int
	clients         int
	faults          []string
	before          time.Duration
	after           time.Duration
	segment         time.Duration
	failoverTimeout time.Duration
	dataPathRounds  int
	dataPathBlock   time.Duration
	synchronous     bool
	load            int
	out             string
	doc             string
	docPlot         string
	keep            bool
	timeout         time.Duration
	fromJSON        string
}

func parseFlags(args []string) (options, error) {
	var o options
	var faults string
	fs := flag.NewFlagSet("benchreplication", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: benchreplication [flags]\n\n"+
			"With the defaults (5 runs of 5 faults, 3 × 2 data path blocks, -load 1000) a run takes about 25 minutes on two idle cores:\n"+
			"1 to start devcluster and the Database, 2 for the data path, and 25 runs of 30 to 80 s.\n\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&o.runs, "runs", 5, "runs of each fault")
	fs.IntVar(&o.clients, "clients", 4, "pgbench clients (connections)")
	fs.StringVar(&faults, "faults", "", "faults to inject, comma separated: "+strings.Join(allFaults, ", ")+"; default: all, "+faultDeletePodUnderLoad+" only with -load")
	fs.DurationVar(&o.before, "before", 10*time.Second, "writes before each fault (TPS before)")
	fs.DurationVar(&o.after, "after", 15*time.Second, "writes after the writes are back (TPS after)")
	fs.DurationVar(&o.segment, "segment", 5*time.Second, "length of one pgbench invocation of the client loop (-T): the loop restarts pgbench after each, and after every lost connection")
	fs.DurationVar(&o.failoverTimeout, "failover-timeout", 10*time.Second, "the Database's spec.failoverTimeout")
	fs.IntVar(&o.dataPathRounds, "datapath-rounds", 3, "rounds of the data path comparison, each a Service block and a pod IP block; 0: none")
	fs.DurationVar(&o.dataPathBlock, "datapath-block", 15*time.Second, "length of one data path block")
	fs.IntVar(&o.load, "load", defaultLoad, "Databases on a fake node that the operator converges during the "+faultDeletePodUnderLoad+" runs; 0: no such runs")
	fs.BoolVar(&o.synchronous, "synchronous", false, "synchronous replication: the Database commits with spec.synchronous {standbys: 1} (ANY 1 of the two standbys)")
	fs.StringVar(&o.out, "out", "bin/bench-replication.json", "JSON file for the figures; empty: none")
	fs.StringVar(&o.doc, "doc", "", "also write the generated section of this Markdown page (e.g. docs/benchmarks.md)")
	fs.StringVar(&o.docPlot, "doc-plot", "", "image the section embeds, relative to the page (e.g. benchmarks-replication.png); empty: none")
	fs.DurationVar(&o.timeout, "timeout", 75*time.Minute, "give up, tearing everything down, after this long")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (manager log, cluster logs)")
	fs.StringVar(&o.fromJSON, "from-json", "", "run nothing: print the section (and write -doc) from the figures of an earlier run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if faults == "" {
		for _, f := range allFaults {
			if f != faultDeletePodUnderLoad || o.load > 0 {
				faults += f + ","
			}
		}
	}
	for f := range strings.SplitSeq(faults, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(allFaults, f) {
			return o, fmt.Errorf("-faults: unknown fault %q; the faults are %s", f, strings.Join(allFaults, ", "))
		}
		o.faults = append(o.faults, f)
	}
	switch {
	case o.load < 0:
		return o, errors.New("-load must not be negative")
	case o.load == 0 && slices.Contains(o.faults, faultDeletePodUnderLoad):
		return o, fmt.Errorf("-faults %s needs -load > 0", faultDeletePodUnderLoad)
	case o.runs < 0:
		return o, errors.New("-runs must not be negative")
	case o.clients < 1:
		return o, errors.New("-clients must be at least 1")
	case o.segment < time.Second:
		return o, errors.New("-segment must be at least 1s")
	case o.before < 3*time.Second || o.after < 3*time.Second:
		return o, errors.New("-before and -after must be at least 3s: the TPS windows leave out their first 2 s")
	case o.failoverTimeout < time.Second:
		return o, errors.New("-failover-timeout must be at least 1s")
	case o.dataPathRounds < 0 || o.dataPathBlock < 2*time.Second:
		return o, errors.New("-datapath-rounds must not be negative and -datapath-block must be at least 2s")
	}
	return o, nil
}

func main() {
	os.Exit(mainCode())
}

func mainCode() int {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "benchreplication:", err)
		return 2
	}
	if opts.fromJSON != "" {
		err = render(opts)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, opts.timeout)
		defer cancel()
		err = run(ctx, opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreplication:", err)
		return 1
	}
	return 0
}

// render prints the section of an earlier run's figures, and writes -doc.
func render(opts options) error {
	data, err := os.ReadFile(opts.fromJSON)
	if err != nil {
		return err
	}
	r := &report{}
	if err := json.Unmarshal(data, r); err != nil {
		return fmt.Errorf("reading %s: %w", opts.fromJSON, err)
	}
	return r.output(opts)
}

// output evaluates the figures, prints the section and writes -out and
// -doc.
func (r *report) output(opts options) error {
	r.evaluate()
	table := r.markdown()
	fmt.Println(table)
	if opts.out != "" && opts.fromJSON == "" {
		if err := r.writeJSON(opts.out); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "figures written to %s\n", opts.out)
	}
	if opts.doc != "" {
		if err := r.writeDoc(opts.doc, opts.docPlot, table); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "section written to %s\n", opts.doc)
	}
	return nil
}
