package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// KubernetesVersion is the Kubernetes release whose binaries devcluster and
// the tests run. The Makefile's K8S_VERSION and the k8s.io/kubernetes
// requirement of hack/k8s/kubernetes/go.mod name the same release
// (TestKubernetesVersionAgrees checks it).
const KubernetesVersion = "v1.37.2"

// Component names: each is also the name of the binary and of its log file
// (<RunDir>/<name>.log).
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kwok                  = "kwok"
	Kubectl               = "kubectl"
)

// Binaries lists the files BinDir must hold.
var Binaries = []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kubectl, Kwok}

// Network ranges of the cluster. Both are large because benchmarks create a
// thousand Databases, each with a ClusterIP Service and pods.
const (
	serviceCIDR         = "10.96.0.0/16"
	kubernetesServiceIP = "10.96.0.1" // first address of serviceCIDR
	podCIDR             = "10.244.0.0/16"
)

// defaultStartTimeout bounds Start when its context has no deadline.
const defaultStartTimeout = 3 * time.Minute

// stopGrace is how long a component gets to exit after SIGTERM before its
// process group is killed.
const stopGrace = 10 * time.Second

// Options configure Start. The zero value is a one-node cluster in a new
// temporary directory on free ports.
type Options struct {
	// BinDir is the directory with the binaries (see Binaries). Default:
	// DefaultBinDir().
	BinDir string
	// RunDir holds certificates, kubeconfigs, etcd's data and the logs.
	// Default: a new temporary directory, removed by Stop unless
	// KeepRunDir. A given RunDir is created if needed and never removed;
	// reusing one keeps its certificates and etcd data.
	RunDir string
	// KeepRunDir keeps a temporary RunDir after Stop (or a failed Start).
	KeepRunDir bool
	// Nodes is the number of fake (kwok) nodes; default 1, or 0 with
	// RealNode, so that every pod runs on the real node. Pods may land on
	// either kind when both are asked for.
	Nodes int
	// RealNode adds a real node, RealNodeName: containerd and a kubelet
	// that run the pods' containers, a bridge network for pods, CoreDNS,
	// kube-proxy and the local-path provisioner as the default
	// StorageClass, the object store, and a Prometheus scraping the pods
	// (PrometheusURL). It needs root, the binaries of make node-tools and
	// the Debian packages of make host-packages.
	RealNode bool
	// NodeBinDir is the directory with the real node's binaries (see
	// NodeBinaries). Default: DefaultNodeBinDir().
	NodeBinDir string
	// ImagesDir holds the images the real node imports, listed in its
	// images.txt. Default: DefaultImagesDir().
	ImagesDir string
	// PrometheusConfigDir is the directory the real node's Prometheus is
	// configured from (podmonitor.yaml, monitor.yaml, rules/). Default:
	// config/prometheus of the checkout holding the working directory
	// (PrometheusConfigDir).
	PrometheusConfigDir string
	// APIServerProfiling serves kube-apiserver's /debug/pprof to the admin
	// (for the benchmark's profiles); off by default, as in production.
	APIServerProfiling bool
	// APIServerPort is kube-apiserver's port on 127.0.0.1; 0 picks a free one.
	APIServerPort int
	// EtcdPort is etcd's client port on 127.0.0.1; 0 picks a free one.
	EtcdPort int
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Cluster is a running local cluster. Its methods are safe for concurrent use.
type Cluster struct {
	// RunDir is the directory with the kubeconfigs, pki/, etcd/ and logs.
	RunDir string
	// Kubeconfig is the admin (system:masters) kubeconfig, <RunDir>/kubeconfig.
	Kubeconfig string
	// BinDir is the directory the binaries were run from.
	BinDir string
	// Config is the admin client configuration (QPS 100, burst 200).
	Config *rest.Config
	// Nodes are the names of the fake nodes.
	Nodes []string
	// RealNode is the name of the real node, or "" without one.
	RealNode string

	log       io.Writer
	ownRunDir bool // RunDir is a temporary directory Start made
	keepRun   bool
	profiling bool // APIServerProfiling
	pki       *pki
	ports     ports
	clientset kubernetes.Interface // from Config

	etcd, apiserver, controllerManager, scheduler, kwok *process.Process
	node                                                *realNode // nil without a real node

	exited chan error // unexpected component exits, for Wait

	mu      sync.Mutex
	stopped bool
}

type ports struct {
	etcdClient, etcdPeer, apiserver, controllerManager, scheduler int
}

// DefaultBinDir returns where the binaries are looked for by default:
// $KUBEBUILDER_ASSETS if set (the Makefile exports it), else
// <CacheDir>/k8s/<KubernetesVersion>, where make k8s-tools puts them.
func DefaultBinDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(CacheDir(), "k8s", KubernetesVersion)
}

// CacheDir returns the directory the make targets build the pinned binaries
// and images into, each in a directory of its own:
// ${XDG_CACHE_HOME:-$HOME/.cache}/dbkeeper, the Makefile's CACHE_DIR.
func CacheDir() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "dbkeeper")
}

// CheckBinaries returns an error naming every binary missing from dir, and
// how to build them; the error matches fs.ErrNotExist.
func CheckBinaries(dir string) error {
	var missing []string
	for _, name := range Binaries {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("devcluster: %s missing from %s; build them with `make k8s-tools`: %w",
		strings.Join(missing, ", "), dir, fs.ErrNotExist)
}

// Start starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and kwok, in that order, creates the fake nodes and the default
// StorageClass, and returns once every component is healthy and the nodes
// are Ready. If anything fails it stops whatever it started and returns an
// error that includes the tail of the failing component's log.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.BinDir == "" {
		opts.BinDir = DefaultBinDir()
	}
	if opts.Nodes <= 0 && !opts.RealNode {
		opts.Nodes = 1
	}
	if opts.RealNode {
		if opts.NodeBinDir == "" {
			opts.NodeBinDir = DefaultNodeBinDir()
		}
		if opts.NodeBinDir, err = filepath.Abs(opts.NodeBinDir); err != nil {
			return nil, err
		}
		if opts.ImagesDir == "" {
			opts.ImagesDir = DefaultImagesDir()
		}
		if err := CheckNodeBinaries(opts.NodeBinDir); err != nil {
			return nil, err
		}
		if opts.PrometheusConfigDir, err = PrometheusConfigDir(opts.PrometheusConfigDir); err != nil {
			return nil, err
		}
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	binDir, err := filepath.Abs(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if err := CheckBinaries(binDir); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := defaultStartTimeout
		if opts.RealNode {
			timeout += realNodeStartTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}

	defer func() {
		if err != nil && !strings.HasPrefix(err.Error(), "devcluster: ") {
			err = fmt.Errorf("devcluster: %w", err)
		}
	}()
	c := &Cluster{BinDir: binDir, log: opts.Log, keepRun: opts.KeepRunDir, profiling: opts.APIServerProfiling, exited: make(chan error, 16)}
	if opts.RunDir == "" {
		if c.RunDir, err = os.MkdirTemp("", "devcluster-"); err != nil {
			return nil, err
		}
		c.ownRunDir = true
	} else {
		if c.RunDir, err = filepath.Abs(opts.RunDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(c.RunDir, 0o755); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			if stopErr := c.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()

	began := time.Now()
	c.logf("run directory %s, binaries %s", c.RunDir, c.BinDir)
	if c.ports, err = pickPorts(opts); err != nil {
		return nil, err
	}
	if c.pki, err = ensurePKI(filepath.Join(c.RunDir, "pki")); err != nil {
		return nil, fmt.Errorf("devcluster: certificates: %w", err)
	}
	if err := c.writeConfigs(); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	c.defineProcesses()

	step := func(p *process.Process, ready func(context.Context) error) error {
		t := time.Now()
		if err := p.Start(); err != nil {
			return err
		}
		if err := c.waitReady(ctx, p, ready); err != nil {
			return err
		}
		c.logf("%s ready (pid %d, %.1fs)", p.Name, p.PID(), time.Since(t).Seconds())
		return nil
	}
	if err := step(c.etcd, c.etcdHealthy); err != nil {
		return nil, err
	}
	if err := step(c.apiserver, c.apiserverReady); err != nil {
		return nil, err
	}
	if err := c.createNodesAndStorageClass(ctx, opts.Nodes, opts.RealNode); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}

	// The controller manager, scheduler and kwok depend only on the API
	// server: start all three, then check them in order, so that their
	// start-up times overlap.
	t := time.Now()
	for _, p := range []*process.Process{c.controllerManager, c.scheduler, c.kwok} {
		if err := p.Start(); err != nil {
			return nil, err
		}
	}
	checks := []struct {
		p     *process.Process
		ready func(context.Context) error
		what  string
	}{
		{c.controllerManager, httpsHealthy(c.ports.controllerManager), "healthy"},
		{c.scheduler, httpsHealthy(c.ports.scheduler), "healthy"},
		{c.kwok, c.nodesReady, fmt.Sprintf("ready, %d node(s) Ready", len(c.Nodes))},
		{c.controllerManager, c.defaultServiceAccountExists, "made the default ServiceAccount"},
	}
	for _, check := range checks {
		if err := c.waitReady(ctx, check.p, check.ready); err != nil {
			return nil, err
		}
		c.logf("%s %s (pid %d, %.1fs)", check.p.Name, check.what, check.p.PID(), time.Since(t).Seconds())
	}
	if opts.RealNode {
		t := time.Now()
		if err := c.startRealNode(ctx, opts); err != nil {
			return nil, err
		}
		c.RealNode = RealNodeName
		c.logf("real node %s up (%.1fs)", RealNodeName, time.Since(t).Seconds())
	}
	for _, p := range c.processes() {
		if p.SetOnExit(c.componentExited) { // exited between its check and now
			c.componentExited(p, p.ExitErr())
		}
	}
	c.logf("cluster up in %.1fs; kubeconfig %s", time.Since(began).Seconds(), c.Kubeconfig)
	return c, nil
}

// Stop stops the real node, if any (its processes, then every container,
// mount, cgroup, iptables rule, bridge and sysctl it made; see
// nodehost.Host.Cleanup), kwok, the scheduler, the controller manager, the API
// server and etcd, in that order: SIGTERM to each process group, SIGKILL
// after 10s. It returns once every process has exited, and removes a
// temporary RunDir unless Options.KeepRunDir. Calling Stop again does
// nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()

	t := time.Now()
	var errs []error
	if c.node != nil {
		// The real node first, while the API server still answers.
		errs = append(errs, c.node.stop())
	}
	procs := c.processes()
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i] == nil {
			continue
		}
		if err := procs[i].Stop(stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	c.logf("stopped in %.1fs", time.Since(t).Seconds())
	if c.ownRunDir && !c.keepRun {
		if err := os.RemoveAll(c.RunDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StopAPIServer stops kube-apiserver, leaving etcd and the other components
// running (they retry until the API server is back). For fault tests.
func (c *Cluster) StopAPIServer() error {
	if err := c.apiserver.Stop(stopGrace); err != nil {
		return err
	}
	c.logf("%s stopped", KubeAPIServer)
	return nil
}

// StartAPIServer starts kube-apiserver again, with the same port, flags and
// certificates, and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	t := time.Now()
	// Under mu, so that Stop, which sets stopped first, either refuses
	// this start or stops the API server it started.
	c.mu.Lock()
	err := errors.New("devcluster: cluster is stopped")
	if !c.stopped {
		err = c.apiserver.Start()
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.waitReady(ctx, c.apiserver, c.apiserverReady); err != nil {
		return err
	}
	c.logf("%s ready again (pid %d, %.1fs)", KubeAPIServer, c.apiserver.PID(), time.Since(t).Seconds())
	return nil
}

// Wait blocks until ctx is done, returning nil, or until a component exits
// without having been stopped, returning an error naming it.
func (c *Cluster) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-c.exited:
		return err
	}
}

// Kubectl runs BinDir/kubectl with args and KUBECONFIG set to the admin
// kubeconfig, and returns its output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, Kubectl), args...)
	cmd.Env = append(envWithout(os.Environ(), "KUBECONFIG"), "KUBECONFIG="+c.Kubeconfig)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), err
}

// Logs returns the last 50 lines of every component's log, each under a
// header naming the file.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, p := range c.processes() {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "==> %s <==\n%s", p.LogPath, p.Tail(50))
	}
	return b.String()
}

// PIDs returns the process id of every component started, keyed by
// component name, whether or not it still runs.
func (c *Cluster) PIDs() map[string]int {
	pids := map[string]int{}
	for _, p := range c.processes() {
		if p != nil && p.PID() != 0 {
			pids[p.Name] = p.PID()
		}
	}
	return pids
}

// processes returns the components in start order, the real node's last.
func (c *Cluster) processes() []*process.Process {
	return append([]*process.Process{c.etcd, c.apiserver, c.controllerManager, c.scheduler, c.kwok}, c.node.processes()...)
}

// componentExited reports a component that exited by itself.
func (c *Cluster) componentExited(p *process.Process, err error) {
	if err == nil {
		err = errors.New("exited with status 0")
	}
	err = fmt.Errorf("devcluster: %s (pid %d) exited unexpectedly: %w\n%s", p.Name, p.PID(), err, p.Tail(30))
	c.logf("%s exited unexpectedly; see %s", p.Name, p.LogPath)
	select {
	case c.exited <- err:
	default:
	}
}

// waitReady polls ready every 100ms until it succeeds, p exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, p *process.Process, ready func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		_, done, running := p.Running()
		if !running {
			return fmt.Errorf("devcluster: %s exited during start-up: %w\n%s", p.Name, p.ExitErr(), p.Tail(30))
		}
		probeCtx, cancel := context.WithTimeout(ctx, probeTimeout)
		last = ready(probeCtx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devcluster: %s not ready: %w (last check: %w)\n%s", p.Name, ctx.Err(), last, p.Tail(30))
		case <-done:
		case <-tick.C:
		}
	}
}

func (c *Cluster) logf(format string, args ...any) {
	fmt.Fprintf(c.log, "devcluster: "+format+"\n", args...)
}

// pickPorts returns the given ports and free ones for the rest. All free
// ports are held open together so they differ; another process may still
// take one before the component binds it, which then fails start-up.
func pickPorts(opts Options) (ports, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	free := func(given int) (int, error) {
		if given != 0 {
			return given, nil
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("devcluster: find a free port: %w", err)
		}
		ls = append(ls, l)
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	var p ports
	var err error
	for _, f := range []struct {
		dst   *int
		given int
	}{
		{&p.etcdClient, opts.EtcdPort},
		{&p.etcdPeer, 0},
		{&p.apiserver, opts.APIServerPort},
		{&p.controllerManager, 0},
		{&p.scheduler, 0},
	} {
		if *f.dst, err = free(f.given); err != nil {
			return ports{}, err
		}
	}
	return p, nil
}
