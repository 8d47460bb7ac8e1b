// Command devcluster runs a local Kubernetes cluster (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok's fake nodes) in the
// foreground, for make run, e2e tests and benchmarks:
//
//	devcluster up [--nodes N] [--run-dir DIR] [--apiserver-port P] [--bin-dir DIR] [--keep-run-dir]
//
// It prints the admin kubeconfig path and stops every process it started on
// Ctrl-C or SIGTERM, or when a component exits by itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dbkeeper/dbkeeper/internal/devcluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err) // errors name devcluster already
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, `usage: devcluster up [flags]

Runs a local Kubernetes %s cluster until interrupted. Flags:
`, devcluster.KubernetesVersion)
}

func run(args []string) error {
	fs := flag.NewFlagSet("devcluster up", flag.ContinueOnError)
	fs.Usage = func() { usage(); fs.PrintDefaults() }
	var opts devcluster.Options
	fs.IntVar(&opts.Nodes, "nodes", 1, "number of fake (kwok) nodes")
	fs.StringVar(&opts.RunDir, "run-dir", "", "directory for certificates, kubeconfigs, etcd data and logs (default: a new temporary directory, removed on exit)")
	fs.BoolVar(&opts.KeepRunDir, "keep-run-dir", false, "keep the temporary run directory on exit")
	fs.IntVar(&opts.APIServerPort, "apiserver-port", 0, "kube-apiserver port on 127.0.0.1 (0: a free port)")
	fs.IntVar(&opts.EtcdPort, "etcd-port", 0, "etcd client port on 127.0.0.1 (0: a free port)")
	fs.StringVar(&opts.BinDir, "bin-dir", devcluster.DefaultBinDir(), "directory with the Kubernetes binaries (make k8s-tools)")
	if len(args) == 0 || args[0] != "up" {
		fs.Usage()
		return errors.New(`devcluster: expected the subcommand "up"`)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("devcluster: %w", err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("devcluster: unexpected arguments: %q", fs.Args())
	}
	opts.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cluster, err := devcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("kubeconfig: %s\nexport KUBECONFIG=%s\n", cluster.Kubeconfig, cluster.Kubeconfig)
	fmt.Fprintln(os.Stderr, "devcluster: running; press Ctrl-C to stop")

	waitErr := cluster.Wait(ctx)
	stop() // a second Ctrl-C now kills this process; the children die with it
	if waitErr == nil {
		fmt.Fprintln(os.Stderr, "devcluster: stopping")
	}
	return errors.Join(waitErr, cluster.Stop())
}
