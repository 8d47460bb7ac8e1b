package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
)

// Namespaces of the run.
const (
	nsDbkeeper = "bench"
	nsFloor    = "bench-floor"
	nsWebhook  = "bench-webhook"
	nsNoise    = "bench-noise"
)

// bench is one run: a devcluster, the manager and the figures so far.
type bench struct {
	opts     options
	root     string
	work     string
	began    time.Time
	progress io.Writer

	cluster *devcluster.Cluster
	// cfg is the benchmark client's configuration: the admin user without
	// a client-side rate limit.
	cfg    *rest.Config
	scheme *runtime.Scheme
	client client.Client
	// apiHTTP reaches the API server as the admin user, for its /metrics.
	apiHTTP *http.Client
	// plain reaches the manager's metrics, probes and pprof.
	plain   *http.Client
	watcher *watcher

	mgrOpts   localrun.ManagerOptions
	mgr       *localrun.Manager
	pprofAddr string
	// prober is the spec-change probe, nil without probe Databases.
	prober *prober

	report *report
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "bench %6.1fs: %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

// run runs every phase in order: the floor on a devcluster of its own,
// then everything about dbkeeper on a second, fresh one, so that neither
// inherits the other's objects or the backlog of the cluster's controllers
// (kwok in particular keeps working on volumes well after the floor's
// StatefulSets are ready).
func (b *bench) run(ctx context.Context) error {
	t := time.Now()
	binary := filepath.Join(b.work, "dbkeeper")
	b.logf("building the manager")
	if err := localrun.Build(ctx, b.root, binary); err != nil {
		return err
	}
	b.report.Setup.BuildSeconds = round3(time.Since(t).Seconds())

	phases := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"floor cluster", func(ctx context.Context) error {
			return b.startCluster(ctx, "floor-cluster", map[string][]string{"StatefulSet": {nsFloor}}, nsFloor)
		}},
		{"floor convergence", b.floorConvergence},
		{"floor cluster stop", func(context.Context) error { return b.stopCluster() }},
		{"dbkeeper cluster", func(ctx context.Context) error { return b.setupDbkeeper(ctx, binary) }},
		{"idle memory", b.idleMemory},
		{"webhook overhead, quiet", b.webhookOverheadQuiet},
		{"probe Databases", b.probeSetup},
		{"dbkeeper convergence", b.dbkeeperConvergence},
		{"steady state", b.steadyState},
		{"unrelated Secrets", b.unrelatedSecrets},
		{"restart", b.restart},
		{"spec-change probe, quiet", b.probeQuiet},
		{"webhook overhead", b.webhookOverhead},
	}
	for _, p := range phases {
		t := time.Now()
		b.logf("== %s", p.name)
		if err := p.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		b.report.Phases = append(b.report.Phases, phaseTime{Name: p.name, Seconds: round3(time.Since(t).Seconds())})
	}
	return nil
}

// startCluster starts a devcluster in b.work/name, with the benchmark's
// clients, the namespaces and a watcher of the kinds and namespaces given.
func (b *bench) startCluster(ctx context.Context, name string, watch map[string][]string, namespaces ...string) error {
	b.logf("starting devcluster %s (%d node(s))", name, b.opts.nodes)
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cluster, err := devcluster.Start(startCtx, devcluster.Options{
		BinDir:             b.opts.binDir,
		RunDir:             filepath.Join(b.work, name),
		Nodes:              b.opts.nodes,
		APIServerProfiling: b.opts.profileDir != "",
		Log:                prefixWriter{b},
	})
	if err != nil {
		return err
	}
	b.cluster = cluster
	b.cfg = rest.CopyConfig(cluster.Config)
	b.cfg.QPS, b.cfg.Burst = -1, 0 // no client-side rate limit: measure the server side
	b.cfg.Timeout = time.Minute
	if b.client, err = client.New(b.cfg, client.Options{Scheme: b.scheme}); err != nil {
		return err
	}
	if b.apiHTTP, err = rest.HTTPClientFor(b.cfg); err != nil {
		return err
	}
	for _, ns := range namespaces {
		if err := b.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if watch != nil {
		b.watcher, err = startWatcher(ctx, b.cfg, b.scheme, watch)
	}
	return err
}

// stopCluster stops the manager, the watcher and the cluster, if running.
func (b *bench) stopCluster() error {
	var errs []error
	if b.prober != nil {
		b.prober.close()
		b.prober = nil
	}
	if b.watcher != nil {
		b.watcher.stop()
		b.watcher = nil
	}
	if b.mgr != nil {
		if err := b.mgr.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping the manager: %w", err))
		}
		b.mgr = nil
	}
	if b.cluster != nil {
		if err := b.cluster.Stop(); err != nil {
			errs = append(errs, err)
		}
		b.cluster = nil
	}
	return errors.Join(errs...)
}

// setupDbkeeper starts the second devcluster, installs the CRD and the
// webhooks and starts the manager.
func (b *bench) setupDbkeeper(ctx context.Context, binary string) error {
	if err := b.startCluster(ctx, "cluster", nil, nsDbkeeper, nsWebhook, nsNoise); err != nil {
		return err
	}
	webhookPort, err := localrun.FreePort()
	if err != nil {
		return err
	}
	certDir := filepath.Join(b.work, "certs")
	if err := localrun.Install(ctx, b.cluster.Config, b.root, certDir, webhookPort); err != nil {
		return err
	}
	watch := map[string][]string{"Database": {nsDbkeeper, nsWebhook}, "StatefulSet": {nsDbkeeper}}
	if b.watcher, err = startWatcher(ctx, b.cfg, b.scheme, watch); err != nil {
		return err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = localrun.FreePort(); err != nil {
			return err
		}
	}
	b.pprofAddr = "127.0.0.1:" + strconv.Itoa(ports[2])
	b.mgrOpts = localrun.ManagerOptions{
		Binary:      binary,
		Kubeconfig:  b.cluster.Kubeconfig,
		CertDir:     certDir,
		WebhookPort: webhookPort,
		ProbePort:   ports[0],
		MetricsPort: ports[1],
		LogFile:     filepath.Join(b.work, "manager.log"),
		// kwok's pods have no agent, and their addresses are not here.
		AgentUnreachable: b.cluster.FakePodCIDR(),
		Args: append([]string{
			"--metrics-secure=false",
			"--pprof-bind-address=" + b.pprofAddr,
		}, splitArgs(b.opts.managerArgs)...),
	}
	start, err := b.startManager(ctx)
	if err != nil {
		return err
	}
	b.report.Startup.Empty = start
	b.logf("manager ready with no Database in %.2fs (pid %d)", start.ReadySeconds, b.mgr.PID())
	return nil
}

// teardown stops whatever still runs.
func (b *bench) teardown() error {
	if b.cluster != nil {
		b.logf("stopping devcluster")
	}
	return b.stopCluster()
}

// prefixWriter forwards devcluster's progress lines to the bench log.
type prefixWriter struct{ b *bench }

func (w prefixWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.b.logf("%s", line)
	}
	return len(p), nil
}

// managerMetrics scrapes the manager's /metrics.
func (b *bench) managerMetrics(ctx context.Context) (metrics, error) {
	return scrape(ctx, b.plain, "http://"+b.mgr.MetricsAddr+"/metrics")
}

// apiMetrics scrapes the API server's /metrics as the admin user.
func (b *bench) apiMetrics(ctx context.Context) (metrics, error) {
	return scrape(ctx, b.apiHTTP, strings.TrimRight(b.cfg.Host, "/")+"/metrics")
}

// snapshot is both scrapes at one moment.
type snapshot struct {
	at       time.Time
	api, mgr metrics
}

func (b *bench) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{at: time.Now()}
	var err error
	if s.mgr, err = b.managerMetrics(ctx); err != nil {
		return s, err
	}
	s.api, err = b.apiMetrics(ctx)
	return s, err
}

// forEach calls fn for 0..n-1 from b.opts.concurrency goroutines and returns
// the first error.
func (b *bench) forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range min(b.opts.concurrency, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					select {
					case errc <- err:
					default:
					}
					cancel()
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return ctx.Err()
	}
}

// cpuSeconds returns the CPU time a process has used, from /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command may contain spaces: fields start after its ")".
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (utime + stime) / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on Linux.
const clockTicks = 100

// cpuByComponent returns the CPU seconds used so far by every cluster
// component, the manager (when running) and this process.
func (b *bench) cpuByComponent() map[string]float64 {
	out := map[string]float64{}
	pids := map[string]int{}
	if b.cluster != nil {
		pids = b.cluster.PIDs()
	}
	if b.mgr != nil {
		pids["dbkeeper"] = b.mgr.PID()
	}
	pids["bench (clients)"] = os.Getpid()
	for name, pid := range pids {
		if s, err := cpuSeconds(pid); err == nil {
			out[name] = s
		}
	}
	return out
}

// procMemory is a process's resident memory from /proc/PID/status.
type procMemory struct {
	rss, anon, file int64
}

// readRSS returns a process's resident set size from /proc/PID/status.
func readRSS(pid int) (int64, error) {
	m, err := readProcMemory(pid)
	return m.rss, err
}

func readProcMemory(pid int) (procMemory, error) {
	var m procMemory
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	fields := map[string]*int64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file}
	for _, line := range strings.Split(string(data), "\n") {
		for prefix, dst := range fields {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				f := strings.Fields(rest)
				if len(f) == 2 && f[1] == "kB" {
					kb, err := strconv.ParseInt(f[0], 10, 64)
					if err != nil {
						return m, err
					}
					*dst = kb << 10
				}
			}
		}
	}
	if m.rss == 0 {
		return m, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
	}
	return m, nil
}
