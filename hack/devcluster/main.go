// Command devcluster runs a local Kubernetes cluster (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok's fake nodes) in the
// foreground, for make run, e2e tests and benchmarks:
//
//	devcluster up  [--nodes N] [--real-node] [--run-dir DIR] [--apiserver-port P] [--bin-dir DIR] [--keep-run-dir]
//	devcluster run [the same flags] [--webhook-port P] [--probe-port P] [--metrics-port P]
//
// --real-node adds a real node (containerd and a kubelet running the pods'
// containers, with pod networking, cluster DNS, Services and volumes; it
// needs root, make node-tools, make engine-images and make host-packages)
// with an object store and a Prometheus, whose address run and up print,
// and makes the fake nodes default to none.
//
// up runs the cluster alone. run also builds the dbkeeper manager from the
// checkout in the working directory, installs its CRD and webhook
// configurations (trusted through a locally generated CA) and runs it with
// its webhooks on: this is `make run`. Both print the admin kubeconfig path
// and stop every process they started on Ctrl-C or SIGTERM, when a
// component exits by itself, or, started by make (make run), when make gets
// a signal that it does not pass on (a SIGINT to make's PID alone) or exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err) // errors name devcluster already
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, `usage: devcluster up|run [flags]

up runs a local Kubernetes %s cluster until interrupted; run also runs
dbkeeper on it with its webhooks. Flags:
`, devcluster.KubernetesVersion)
}

func run(args []string) error {
	fs := flag.NewFlagSet("devcluster", flag.ContinueOnError)
	fs.Usage = func() { usage(); fs.PrintDefaults() }
	var opts devcluster.Options
	fs.IntVar(&opts.Nodes, "nodes", 0, "number of fake (kwok) nodes (default 1, or 0 with --real-node; pods may land on either kind when both run)")
	fs.BoolVar(&opts.RealNode, "real-node", false, "also run a real node (containerd + kubelet, root only) that runs the pods' containers")
	fs.StringVar(&opts.NodeBinDir, "node-bin-dir", devcluster.DefaultNodeBinDir(), "directory with the real node's binaries (make node-tools)")
	fs.StringVar(&opts.ImagesDir, "images-dir", devcluster.DefaultImagesDir(), "directory with the images the real node imports, listed in images.txt (make engine-images)")
	fs.StringVar(&opts.RunDir, "run-dir", "", "directory for certificates, kubeconfigs, etcd data and logs (default: a new temporary directory, removed on exit)")
	fs.BoolVar(&opts.KeepRunDir, "keep-run-dir", false, "keep the temporary run directory on exit")
	fs.IntVar(&opts.APIServerPort, "apiserver-port", 0, "kube-apiserver port on 127.0.0.1 (0: a free port)")
	fs.IntVar(&opts.EtcdPort, "etcd-port", 0, "etcd client port on 127.0.0.1 (0: a free port)")
	fs.StringVar(&opts.BinDir, "bin-dir", devcluster.DefaultBinDir(), "directory with the Kubernetes binaries (make k8s-tools)")
	var webhookPort, probePort, metricsPort int
	fs.IntVar(&webhookPort, "webhook-port", 9443, "run: the manager's webhook port on 127.0.0.1")
	fs.IntVar(&probePort, "probe-port", 8081, "run: the manager's health probe port on 127.0.0.1")
	fs.IntVar(&metricsPort, "metrics-port", 8443, "run: the manager's metrics port on 127.0.0.1 (HTTPS)")
	if len(args) == 0 || (args[0] != "up" && args[0] != "run") {
		fs.Usage()
		return errors.New(`devcluster: expected the subcommand "up" or "run"`)
	}
	withManager := args[0] == "run"
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

	// controller-runtime's clients (the CRD installer) log through its
	// global logger, which prints a stack trace of its own when it was
	// never set.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.ConsoleEncoder()))

	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A signal to make's PID alone reaches devcluster only through this
	// watch (parent.go).
	ctx, cancelOnMake := context.WithCancel(sigCtx)
	defer cancelOnMake()
	if made := watchMakeParent(ctx); made != nil {
		go func() {
			select {
			case why := <-made:
				fmt.Fprintf(os.Stderr, "devcluster: %s; stopping\n", why)
				cancelOnMake()
			case <-ctx.Done():
			}
		}()
	}

	cluster, err := devcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	var manager *localrun.Manager
	if withManager {
		manager, err = runDBKeeper(ctx, cluster, webhookPort, probePort, metricsPort)
		if err != nil {
			return errors.Join(err, cluster.Stop())
		}
	}
	fmt.Printf("kubeconfig: %s\nexport KUBECONFIG=%s\n", cluster.Kubeconfig, cluster.Kubeconfig)
	if withManager && opts.RealNode {
		// The next steps of README.md's "A real database locally": on a
		// real node the pods run real servers, so the hint ends in psql.
		fmt.Printf(`
dbkeeper is running with its webhooks (manager log: %s) and a real node, %s,
whose pods run real database servers. In another shell:

  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl create namespace shop
  IMAGE=$(awk '/postgres:17/ {print $1}' %s)
  echo "{apiVersion: dbkeeper.io/v1alpha1, kind: Database, metadata: {name: orders}, spec: {engine: postgres, version: '17', image: $IMAGE, storage: {size: 1Gi}}}" | kubectl apply -n shop -f -
  kubectl wait -n shop --for=condition=Ready db/orders --timeout=5m  # a real PostgreSQL 17 starts
  URI=$(kubectl get secret -n shop orders-credentials -o jsonpath='{.data.uri}' | base64 -d)
  kubectl exec -n shop -it orders-0 -c postgres -- psql "$URI&sslrootcert=/etc/dbkeeper/tls/ca.crt"

README.md's "A real database locally" goes on: MySQL, failover with replicas: 3,
backups to the object store below.
`, manager.LogFile, devcluster.RealNodeName, cluster.Kubeconfig, cluster.BinDir,
			filepath.Join(opts.ImagesDir, devcluster.ImagesListFile))
	} else if withManager {
		fmt.Printf(`
dbkeeper is running with its webhooks (manager log: %s). In another shell:

  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl apply -f config/samples/postgres.yaml            # a PostgreSQL Database
  kubectl wait --for=condition=Ready db/orders --timeout=2m  # kwok's pods and volumes only pretend
  kubectl get db                                            # VERSION, PHASE, PRIMARY, READY
  kubectl apply -f config/samples/invalid/many-errors.yaml  # refused: see the validation answer
`, manager.LogFile, cluster.Kubeconfig, cluster.BinDir)
	}
	if url := cluster.PrometheusURL(); url != "" {
		if manager != nil {
			if err := cluster.ScrapeManager(manager.MetricsAddr, true); err != nil {
				return errors.Join(err, manager.Stop(), cluster.Stop())
			}
		}
		fmt.Printf("\nPrometheus: %s (the pods as config/prometheus's PodMonitor selects them, the manager, and the alert rules: %s/alerts)\n", url, url)
	}
	if cluster.ObjectStoreAddr() != "" {
		fmt.Fprintf(os.Stderr, "devcluster: object store for backups at %s (bucket %s; Secrets %s and %s in default), as config/samples/postgres-backup.yaml names them\n",
			devcluster.ObjectStoreEndpoint, devcluster.ObjectStoreBucket, devcluster.ObjectStoreCredentialsSecret, devcluster.ObjectStoreCASecret)
		if cluster.BackupImage() == "" {
			fmt.Fprintf(os.Stderr, "devcluster: images.txt lists no %s image, so no pod with spec.backup can start: run `make engine-images`\n", devcluster.BackupImageRepository)
		}
	}
	fmt.Fprintln(os.Stderr, "devcluster: running; press Ctrl-C to stop")

	var managerExited <-chan struct{}
	if manager != nil {
		managerExited = manager.Done()
	}
	waitCtx, cancelWait := context.WithCancel(ctx)
	go func() {
		select {
		case <-managerExited:
			fmt.Fprintln(os.Stderr, "devcluster: the manager exited; see its log")
			cancelWait()
		case <-waitCtx.Done():
		}
	}()
	waitErr := cluster.Wait(waitCtx)
	cancelWait()
	stop() // a second Ctrl-C now kills this process; the children die with it
	cancelOnMake()
	if waitErr == nil {
		fmt.Fprintln(os.Stderr, "devcluster: stopping")
	}
	var managerErr error
	if manager != nil {
		managerErr = manager.Stop()
	}
	return errors.Join(waitErr, managerErr, cluster.Stop())
}

// runDBKeeper builds the manager from the checkout in the working
// directory, installs the CRD and webhook configurations, and starts it.
func runDBKeeper(ctx context.Context, cluster *devcluster.Cluster, webhookPort, probePort, metricsPort int) (*localrun.Manager, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "config", "webhook", "manifests.yaml")); err != nil {
		return nil, fmt.Errorf("devcluster run: start it from the dbkeeper checkout: %w", err)
	}
	binary := filepath.Join(root, "bin", "dbkeeper")
	fmt.Fprintln(os.Stderr, "devcluster: building the manager into", binary)
	if err := localrun.Build(ctx, root, binary); err != nil {
		return nil, err
	}
	certDir := filepath.Join(cluster.RunDir, "webhook-certs")
	fmt.Fprintln(os.Stderr, "devcluster: installing the CRD and the webhook configurations")
	if err := localrun.Install(ctx, cluster.Config, root, certDir, webhookPort); err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "devcluster: starting the manager")
	return localrun.StartManager(ctx, localrun.ManagerOptions{
		Binary: binary, Kubeconfig: cluster.Kubeconfig, CertDir: certDir,
		WebhookPort: webhookPort, ProbePort: probePort, MetricsPort: metricsPort,
		LogFile:          filepath.Join(cluster.RunDir, "dbkeeper.log"),
		InstanceImage:    cluster.InstanceImage(),
		BackupImage:      cluster.BackupImage(),
		AgentUnreachable: cluster.FakePodCIDR(),
		Output:           os.Stdout,
	})
}
