package realnode

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// suite is a devcluster with a real node and no fake ones, dbkeeper
// installed with its webhooks and its manager running.
type suite struct {
	t       testing.TB
	env     *e2eharness.Env
	client  client.Client
	manager *localrun.Manager
	logFile string
	runDir  string
	images  []devcluster.Image
	// failed names the subtests that failed, with what the Database said
	// then: the suite logs them last, after the dumps, so that the end of
	// a long output says what failed. Shared by the suite's copies that
	// run scenarios in parallel.
	failed *failures
	// plugin is kubectl-dbkeeper, built once for every scenario.
	plugin *pluginBuild
	// storeUsers counts the scenarios using devcluster's object store,
	// which a scenario stops only once no other uses it.
	storeUsers *users
}

// users counts the scenarios using a shared thing.
type users struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

// use counts one more user until t ends.
func (u *users) use(t testing.TB) {
	u.mu.Lock()
	u.n++
	u.mu.Unlock()
	t.Cleanup(func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.n--
		u.condition().Broadcast()
	})
}

// wait blocks until no user but the caller's own (mine) is left.
func (u *users) wait(mine int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for u.n > mine {
		u.condition().Wait()
	}
}

func (u *users) condition() *sync.Cond {
	if u.cond == nil {
		u.cond = sync.NewCond(&u.mu)
	}
	return u.cond
}

// watchStatus runs `kubectl dbkeeper status name` about every second until
// t ends or the returned func is called, which stops it and returns the
// first screen that held want ("" if none did).
func (s *suite) watchStatus(t testing.TB, name, want string) func() string {
	t.Helper()
	dir := s.pluginDir(t)
	stop, done := make(chan struct{}), make(chan string, 1)
	go func() {
		found := ""
		defer func() { done <- found }()
		for {
			cmd := exec.Command(filepath.Join(testenv.BinDir(), "kubectl"), "dbkeeper", "status", name, "-n", ns)
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "KUBECONFIG="+s.env.Cluster.Kubeconfig)
			if out, _ := cmd.Output(); strings.Contains(string(out), want) {
				found = string(out)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	var once sync.Once
	var screen string
	result := func() string {
		once.Do(func() {
			close(stop)
			screen = <-done
		})
		return screen
	}
	t.Cleanup(func() { result() })
	return result
}

// pluginBuild is kubectl-dbkeeper built from the checkout into dir on
// first use (kubectlDbkeeper).
type pluginBuild struct {
	once sync.Once
	dir  string
	err  error
}

// pluginDir returns the directory of kubectl-dbkeeper, built from the
// checkout on first use.
func (s *suite) pluginDir(t testing.TB) string {
	t.Helper()
	p := s.plugin
	p.once.Do(func() {
		build := exec.Command("go", "build", "-o", filepath.Join(p.dir, "kubectl-dbkeeper"), "./cmd/kubectl-dbkeeper")
		build.Dir = testenv.ProjectRoot()
		if out, err := build.CombinedOutput(); err != nil {
			p.err = fmt.Errorf("building kubectl-dbkeeper: %w\n%s", err, out)
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.dir
}

// kubectlDbkeeper runs `kubectl dbkeeper args...` as a user types it, with
// the plugin built from the checkout on PATH, and returns its standard
// output (and its standard error, after it).
func (s *suite) kubectlDbkeeper(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(testenv.BinDir(), "kubectl"), append([]string{"dbkeeper"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+s.pluginDir(t)+":"+os.Getenv("PATH"), "KUBECONFIG="+s.env.Cluster.Kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return string(out) + stderr.String(), err
}

// failures are the failed subtests' lines, appended from parallel scenarios.
type failures struct {
	mu    sync.Mutex
	lines []string
}

func (f *failures) add(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = append(f.lines, line)
}

func (f *failures) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lines)
}

// setup starts the suite. It skips the test, saying what is missing, only
// where the machine cannot run containers (no runc) or the images are not
// built; make test builds the node's binaries and .ci/run the images.
func setup(t testing.TB) *suite {
	t.Helper()
	e2eharness.RequireBinaries(t)
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed, so this machine cannot run containers: `apt-get install -y runc containernetworking-plugins iptables conntrack` (.ci/run does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (containers, mounts, a bridge, iptables rules)")
	}
	images, err := devcluster.ReadImages(devcluster.DefaultImagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("the engine images are not built: run `make engine-images` (.ci/run does): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := devcluster.CheckNodeBinaries(devcluster.DefaultNodeBinDir()); err != nil {
		t.Fatalf("%v (make test builds them)", err)
	}

	ctx := context.Background()
	runDir := t.TempDir()
	began := time.Now()
	env, err := e2eharness.Start(ctx, runDir, devcluster.Options{RealNode: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("devcluster with a real node up in %.1fs (the manager built meanwhile)", time.Since(began).Seconds())
	s := &suite{t: t, env: env, client: env.Client, images: images, logFile: filepath.Join(runDir, "manager.log"), runDir: runDir, failed: &failures{}, plugin: &pluginBuild{dir: t.TempDir()}, storeUsers: &users{}}
	// Registered first, so run last.
	t.Cleanup(func() {
		if failed := s.failed.all(); len(failed) > 0 {
			t.Logf("failed subtests, what they said and the conditions then (the dumps are above):\n  %s", strings.Join(failed, "\n  "))
		}
	})
	t.Cleanup(func() {
		if s.manager != nil {
			_ = s.manager.Stop()
		}
		if t.Failed() {
			env.LogState(t, "db,sts,pods,pvc,pv,events", s.logFile, 300)
		}
		if err := env.Stop(); err != nil {
			t.Errorf("stopping devcluster: %v", err)
		}
	})
	s.manager, err = localrun.StartManager(ctx, s.managerOptions(env.Binary, env.Cluster.InstanceImage(), s.logFile))
	if err != nil {
		t.Fatal(err)
	}
	// The real node's Prometheus scrapes it (plain HTTP: --metrics-secure=false).
	if err := env.Cluster.ScrapeManager(s.manager.MetricsAddr, false); err != nil {
		t.Fatal(err)
	}
	return s
}

// managerOptions are the suite's manager's, with the given binary, instance
// image and log file: the upgrade test runs an earlier release's.
func (s *suite) managerOptions(binary, instanceImage, logFile string) localrun.ManagerOptions {
	opts := s.env.ManagerOptions(s.env.Cluster.Kubeconfig, logFile,
		"--metrics-secure=false", "--backoff-base=200ms", "--backoff-max=10s", "--zap-log-level=info")
	opts.Binary, opts.InstanceImage = binary, instanceImage
	return opts
}

// restartManager stops the running manager and starts one with opts.
func (s *suite) restartManager(t testing.TB, opts localrun.ManagerOptions) {
	t.Helper()
	if s.manager != nil {
		if err := s.manager.Stop(); err != nil {
			t.Errorf("stopping the manager: %v", err)
		}
		s.manager = nil
	}
	m, err := localrun.StartManager(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	s.manager = m
	secure := !slices.Contains(opts.Args, "--metrics-secure=false")
	if err := s.env.Cluster.ScrapeManager(m.MetricsAddr, secure); err != nil {
		t.Fatal(err)
	}
}

// run runs f as a subtest of t and records its failure with what it said
// and the conditions of the Database named db ("" for none) at that
// moment. The suite's helpers fail the subtest meanwhile: a FailNow on the
// parent from the subtest's goroutine would abort the whole test binary.
func (s *suite) run(t *testing.T, title, db string, f func(t subtest)) {
	t.Run(title, func(tt *testing.T) {
		t := subtest{T: tt, said: new([]string)}
		parent := s.t
		s.t = t
		defer func() { s.t = parent }()
		t.Cleanup(func() {
			if !t.Failed() {
				return
			}
			for _, f := range s.failed.all() {
				if strings.HasPrefix(f, t.Name()+"/") {
					return // a subtest of it said why
				}
			}
			line := t.Name()
			for _, said := range *t.said {
				line += "\n    error: " + said
			}
			if db != "" {
				var got dbv1.Database
				if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: db}, &got); err == nil {
					for _, c := range got.Status.Conditions {
						line += fmt.Sprintf("\n    %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
					}
				}
			}
			s.failed.add(line)
		})
		f(t)
	})
}

// parallel runs f as a subtest of t (TestRealNode) that runs beside the
// other parallel scenarios once TestRealNode's body has returned, on a
// copy of the suite whose current test is f's own: a scenario's helpers
// fail its subtest, never another's. Scenarios that run in parallel use
// Databases of their own names in the namespace and nothing the others
// change (the manager, the object store); most of their time is waiting
// for servers, failovers and restores, which overlaps.
//
// At most scenarioSlots run at once, and they start in the order they
// were declared (go test's own -parallel releases them in no set order):
// the longest come first, so that the suite lasts about as long as its
// longest scenario.
func (s *suite) parallel(t *testing.T, title, db string, f func(s *suite, t subtest)) {
	g := *s
	g.run(t, title, db, func(t subtest) {
		// Taken before t.Parallel, while the scenarios that -run selects
		// are declared one after another.
		turn := slots.take()
		t.Parallel()
		slots.wait(turn)
		defer slots.done()
		f(&g, t)
	})
}

// scenarioSlots is how many parallel scenarios run at once (-parallel
// sets it; make test passes 2, hack/test.sh's REALNODE_SCENARIOS): they
// wait far more than they compute (three at a time kept two fast cores
// about 40 % busy), but two slow cores running four 3-replica Databases
// at once miss their timeouts.
var scenarioSlots = 4

// slots lets the parallel scenarios start in the order they were
// declared, scenarioSlots at a time.
var slots orderedSlots

type orderedSlots struct {
	mu      sync.Mutex
	cond    *sync.Cond
	tickets int // handed out, in declaration order
	next    int // the next ticket allowed to start
	running int
}

// take returns the next ticket.
func (o *orderedSlots) take() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tickets++
	return o.tickets - 1
}

// wait blocks until every earlier ticket has started and a slot is free.
func (o *orderedSlots) wait(ticket int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cond == nil {
		o.cond = sync.NewCond(&o.mu)
	}
	for ticket != o.next || o.running >= scenarioSlots {
		o.cond.Wait()
	}
	o.next++
	o.running++
	o.cond.Broadcast()
}

// done frees a slot.
func (o *orderedSlots) done() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running--
	o.cond.Broadcast()
}

// TestMain takes -parallel as the number of scenarios at once
// (scenarioSlots, 4 unless set) and lets go test release them all, to
// start in order (suite.parallel).
func TestMain(m *testing.M) {
	flag.Parse()
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
				scenarioSlots = n
			}
		}
	})
	_ = flag.Set("test.parallel", "64")
	os.Exit(m.Run())
}

// subtest is the testing.TB a step and the suite's helpers fail: a
// subtest that keeps what each failure said, so that the suite can repeat
// it after the dumps, where the end of a long output shows it.
type subtest struct {
	*testing.T
	said *[]string
}

// keep records a failure's message, cut to its first line and 300 bytes.
func (t subtest) keep(msg string) {
	msg, _, _ = strings.Cut(msg, "\n")
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	*t.said = append(*t.said, msg)
}

func (t subtest) Error(args ...any) { t.Helper(); t.keep(fmt.Sprint(args...)); t.T.Error(args...) }
func (t subtest) Fatal(args ...any) { t.Helper(); t.keep(fmt.Sprint(args...)); t.T.Fatal(args...) }
func (t subtest) Errorf(format string, args ...any) {
	t.Helper()
	t.keep(fmt.Sprintf(format, args...))
	t.T.Errorf(format, args...)
}
func (t subtest) Fatalf(format string, args ...any) {
	t.Helper()
	t.keep(fmt.Sprintf(format, args...))
	t.T.Fatalf(format, args...)
}

// image returns the newest listed image whose name starts with prefix.
func (s *suite) image(prefix string) string {
	s.t.Helper()
	best := ""
	for _, img := range s.images {
		if strings.HasPrefix(img.Name, prefix) && (best == "" || versionLess(best, img.Name)) {
			best = img.Name
		}
	}
	if best == "" {
		s.t.Fatalf("no image %s* among the engine images; rebuild them with `make engine-images`", prefix)
	}
	return best
}

// versionLess compares the tags of two image names numerically, part by part.
func versionLess(a, b string) bool {
	pa := strings.Split(a[strings.LastIndexByte(a, ':')+1:], ".")
	pb := strings.Split(b[strings.LastIndexByte(b, ':')+1:], ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		var x, y int
		_, _ = fmt.Sscan(pa[i], &x)
		_, _ = fmt.Sscan(pb[i], &y)
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}

// kubectl runs the real kubectl and returns its combined output.
func (s *suite) kubectl(args ...string) (string, error) { return s.env.Kubectl(args...) }

func (s *suite) mustKubectl(args ...string) string {
	s.t.Helper()
	return s.env.MustKubectl(s.t, args...)
}

// apply applies a manifest given as text.
func (s *suite) apply(manifest string) {
	s.t.Helper()
	// In the suite's directory: kubectl -f splits a path at its commas,
	// which a subtest's TempDir (named after its title) may hold.
	f := filepath.Join(s.runDir, fmt.Sprintf("manifest-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", f)
}

// secret returns the data of a Secret of the test namespace.
func (s *suite) secret(name string) map[string]string {
	s.t.Helper()
	var sec corev1.Secret
	if err := s.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range sec.Data {
		out[k] = string(v)
	}
	return out
}

// waitReady runs kubectl wait for the Ready condition of a Database in the
// test namespace and returns how long it took.
func (s *suite) waitReady(name string, timeout time.Duration) time.Duration {
	s.t.Helper()
	t := time.Now()
	s.mustKubectl("wait", "-n", ns, "--for=condition=Ready", "database/"+name, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	return time.Since(t)
}
