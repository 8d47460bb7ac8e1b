// Command bench measures dbkeeper on devcluster beside the floor, what the
// API server and the Kubernetes controllers need anyway for the same
// children: convergence of N Databases, API requests per Database and at
// steady state, webhook overhead, the manager's memory, start-up time and
// reconcile cost. It prints a Markdown table, writes the figures as JSON and
// optionally the page docs/benchmarks.md. It reports figures; it asserts
// nothing.
//
//	go run ./test/bench -n 1000 -concurrency 16 -steady 2m -out bin/bench.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
)

// options are the command's flags.
type options struct {
	n              int
	concurrency    int
	steady         time.Duration
	out            string
	doc            string
	docPlot        string
	secrets        int
	secretSize     int
	webhookSamples int
	webhookRounds  int
	nodes          int
	timeout        time.Duration
	binDir         string
	profileDir     string
	managerArgs    string
	keep           bool
	fromJSON       string
	// The spec-change probe (probe.go).
	probeInterval     time.Duration
	probeSamples      int
	probeQuietSamples int
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 1000, "number of Databases (and of floor StatefulSets)")
	fs.IntVar(&o.concurrency, "concurrency", 16, "clients creating objects at once")
	fs.DurationVar(&o.steady, "steady", 2*time.Minute, "steady-state window with nothing changing")
	fs.StringVar(&o.out, "out", "bin/bench.json", "JSON file for the figures; empty: none")
	fs.StringVar(&o.doc, "doc", "", "also write this Markdown page (e.g. docs/benchmarks.md) with the table, the machine and the command")
	fs.StringVar(&o.docPlot, "doc-plot", "", "image the page embeds, relative to it (e.g. benchmarks.png); empty: none")
	fs.IntVar(&o.secrets, "secrets", 10000, "unrelated Secrets created to check that the manager's cache ignores them")
	fs.IntVar(&o.secretSize, "secret-size", 32<<10, "bytes of data in each unrelated Secret")
	fs.IntVar(&o.webhookSamples, "webhook-samples", 300, "Database creates timed with, and as many without, the webhooks")
	fs.IntVar(&o.webhookRounds, "webhook-rounds", 3, "alternations of with/without webhook blocks the samples are split into")
	fs.IntVar(&o.nodes, "nodes", 1, "fake nodes of devcluster")
	fs.DurationVar(&o.timeout, "timeout", 40*time.Minute, "longest wait for one convergence")
	fs.StringVar(&o.binDir, "bin-dir", devcluster.DefaultBinDir(), "directory of the pinned Kubernetes binaries (make k8s-tools)")
	fs.StringVar(&o.profileDir, "profile-dir", "", "write the manager's CPU profile of the convergence and heap profiles, and the API server's CPU profile of the first part of each convergence, here; empty: none")
	fs.StringVar(&o.managerArgs, "manager-args", "", "extra manager flags, space separated")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (manager log, cluster logs)")
	fs.StringVar(&o.fromJSON, "from-json", "", "run nothing: print the table (and write -doc) from the figures of an earlier run")
	fs.DurationVar(&o.probeInterval, "probe-interval", 5*time.Second, "spec-change probe while the Databases converge: one probe Database's spec changed this often")
	fs.IntVar(&o.probeSamples, "probe-samples", 100, "spec-change probe: at most this many changes while the Databases converge; 0: no probe then")
	fs.IntVar(&o.probeQuietSamples, "probe-quiet-samples", 10, "spec-change probe: changes one after another on the quiet manager after the convergence; 0: none")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.n < 1:
		return o, errors.New("-n must be at least 1")
	case o.concurrency < 1:
		return o, errors.New("-concurrency must be at least 1")
	case o.webhookRounds < 1:
		return o, errors.New("-webhook-rounds must be at least 1")
	case o.steady < 0 || o.secrets < 0 || o.webhookSamples < 0 || o.secretSize < 0:
		return o, errors.New("-steady, -secrets, -secret-size and -webhook-samples must not be negative")
	case o.probeSamples < 0 || o.probeQuietSamples < 0:
		return o, errors.New("-probe-samples and -probe-quiet-samples must not be negative")
	case o.probeInterval <= 0:
		return o, errors.New("-probe-interval must be positive, e.g. 5s")
	}
	return o, nil
}

func main() {
	os.Exit(mainCode())
}

// mainCode runs the command and returns its exit code, after every deferred
// clean-up has run.
func mainCode() int {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	// controller-runtime's client logs through this; keep it quiet.
	log.SetLogger(zap.New(zap.WriteTo(io.Discard)))

	if opts.fromJSON != "" {
		if err := render(opts); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, opts options) (err error) {
	root, err := projectRoot()
	if err != nil {
		return err
	}
	if err := devcluster.CheckBinaries(opts.binDir); err != nil {
		return err
	}
	b := &bench{opts: opts, root: root, began: time.Now(), progress: os.Stderr}
	b.work, err = os.MkdirTemp("", "dbkeeper-bench-")
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := b.teardown(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		// Kept when asked, or after a failure for its logs; not after an
		// interruption.
		if opts.keep || (err != nil && ctx.Err() == nil) {
			b.logf("work directory kept: %s (manager.log, cluster/*.log)", b.work)
			return
		}
		if rmErr := os.RemoveAll(b.work); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
	}()
	b.report = newReport(opts, root)
	b.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(b.scheme); err != nil {
		return err
	}
	if err := dbv1.AddToScheme(b.scheme); err != nil {
		return err
	}
	// No gzip: compressing every scrape would cost the manager CPU the
	// benchmark would then measure.
	b.plain = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	if err := b.run(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		if b.cluster != nil {
			fmt.Fprintf(os.Stderr, "component logs:\n%s\n", b.cluster.Logs())
		}
		return err
	}
	b.report.finish()
	table := b.report.markdown()
	fmt.Println(table)
	if opts.out != "" {
		if err := b.report.writeJSON(opts.out); err != nil {
			return err
		}
		b.logf("figures written to %s", opts.out)
	}
	if opts.doc != "" {
		if err := b.report.writeDoc(opts.doc, opts.docPlot, table); err != nil {
			return err
		}
		b.logf("page written to %s", opts.doc)
	}
	return nil
}

// render prints the table of an earlier run's figures, and writes -doc.
func render(opts options) error {
	data, err := os.ReadFile(opts.fromJSON)
	if err != nil {
		return err
	}
	r := &report{}
	if err := json.Unmarshal(data, r); err != nil {
		return fmt.Errorf("reading %s: %w", opts.fromJSON, err)
	}
	r.evaluate()
	table := r.markdown()
	fmt.Println(table)
	if opts.doc != "" {
		return r.writeDoc(opts.doc, opts.docPlot, table)
	}
	return nil
}

// projectRoot finds the checkout from the working directory: the nearest
// directory upwards holding go.mod and config/crd.
func projectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "config", "crd", "bases")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from the dbkeeper checkout: no go.mod with config/crd/bases above the working directory")
		}
		dir = parent
	}
}

// splitArgs splits the -manager-args flag.
func splitArgs(s string) []string { return strings.Fields(s) }
