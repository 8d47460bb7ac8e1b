package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/rules"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := dbv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// writeCounter records the manager's requests about children: writes to
// Secrets, Services and StatefulSets, reads of one of them (not lists or
// watches) with the answer's status code, and Event writes.
type writeCounter struct {
	mu     sync.Mutex
	writes []string
	reads  []string
	events []string
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		path := req.URL.Path
		c.mu.Lock()
		defer c.mu.Unlock()
		if strings.HasSuffix(path, "/events") && req.Method != http.MethodGet {
			c.events = append(c.events, req.Method+" "+path)
		}
		for _, resource := range []string{"/secrets", "/services", "/statefulsets"} {
			switch {
			case !strings.Contains(path, resource):
			case req.Method != http.MethodGet:
				c.writes = append(c.writes, req.Method+" "+path)
			case strings.Contains(path, resource+"/") && err == nil:
				c.reads = append(c.reads, fmt.Sprintf("GET %s %d", path, resp.StatusCode))
			}
		}
		return resp, err
	})
}

func (c *writeCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes, c.reads, c.events = nil, nil, nil
}

// get returns the writes to children.
func (c *writeCounter) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.writes)
}

// getReads returns the reads of children.
func (c *writeCounter) getReads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reads)
}

// getEvents returns the Event writes.
func (c *writeCounter) getEvents() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// env is a namespace of the package's API server, a client for the test,
// and a way to run the manager against that namespace alone.
type env struct {
	t         *testing.T
	cfg       *rest.Config
	namespace string
	client    client.Client
	counter   *writeCounter
	logs      *logBuffer
	stop      func()
	// impersonate, when set, is the identity the manager acts as (the
	// namespaced install's tests); otherwise it is the API server's admin.
	impersonate *rest.ImpersonationConfig
}

// newEnv creates a namespace on the package's API server for one test:
// base, or base-2, base-3... when the test runs again (-count).
func newEnv(t *testing.T, base string) *env {
	t.Helper()
	cfg := controller.APIServer.Config(t)
	logs := &logBuffer{}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(logs)))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("manager log:\n%s", logs.String())
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	f := &env{t: t, cfg: cfg, client: c, counter: &writeCounter{}, logs: logs}
	t.Cleanup(func() {
		if f.stop != nil {
			f.stop()
		}
	})
	for i := 1; f.namespace == ""; i++ {
		ns := &corev1.Namespace{}
		ns.Name = base
		if i > 1 {
			ns.Name = fmt.Sprintf("%s-%d", base, i)
		}
		switch err := c.Create(context.Background(), ns); {
		case err == nil:
			f.namespace = ns.Name
		case !apierrors.IsAlreadyExists(err):
			t.Fatal(err)
		}
	}
	return f
}

// startManager starts the manager with the Database controller, stopping a
// running one first, as a restart of the operator would. It sees only the
// test's namespace.
func (f *env) startManager(opts controller.Options) {
	f.t.Helper()
	if f.stop != nil {
		f.stop()
	}
	cfg := rest.CopyConfig(f.cfg)
	cfg.Wrap(f.counter.wrap)
	if f.impersonate != nil {
		cfg.Impersonate = *f.impersonate
	}
	if opts.AgentKeysNamespace == "" {
		opts.AgentKeysNamespace = f.keysNamespace()
	}
	cacheOptions := controller.CacheOptions(opts.AgentKeysNamespace, f.namespace)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cacheOptions,
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 2
	}
	if opts.BackoffBase == 0 {
		opts.BackoffBase, opts.BackoffMax = 100*time.Millisecond, 2*time.Second
	}
	r := &controller.DatabaseReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("dbkeeper"),
		Rules:     rules.Rules{Clock: clock.RealClock{}},
	}
	if err := r.SetupWithManager(mgr, opts); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			f.t.Errorf("manager: %v", err)
		}
	}()
	f.stop = func() {
		cancel()
		<-done
		f.stop = nil
	}
}

// keysNamespace returns the namespace of the agent keys Secrets, the
// operator's own, which it creates unless it exists: one for every test,
// since the Secrets' names hold the Databases' namespaces.
func (f *env) keysNamespace() string {
	f.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dbkeeper-system"}}
	if err := f.client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		f.t.Fatal(err)
	}
	return ns.Name
}

// eventually waits until check returns "".
func (f *env) eventually(what string, check func() string) {
	f.t.Helper()
	testenv.Eventually(f.t, waitTimeout, what, check)
}

// eventuallyDeleted waits until the object key names is gone; obj is of
// its kind.
func (f *env) eventuallyDeleted(what string, key client.ObjectKey, obj client.Object) {
	f.t.Helper()
	f.eventually(what+" deleted", func() string {
		err := f.client.Get(context.Background(), key, obj)
		switch {
		case apierrors.IsNotFound(err):
			return ""
		case err != nil:
			return err.Error()
		}
		return "it still exists"
	})
}

// eventuallyEvent waits until dbkeeper has recorded an Event about the
// object named regarding whose note contains note.
func (f *env) eventuallyEvent(what, regarding, note string) {
	f.t.Helper()
	f.eventually(what, func() string {
		events := &eventsv1.EventList{}
		if err := f.client.List(context.Background(), events, client.InNamespace(f.namespace)); err != nil {
			return err.Error()
		}
		for _, e := range events.Items {
			if e.ReportingController == "dbkeeper" && e.Regarding.Name == regarding && strings.Contains(e.Note, note) {
				return ""
			}
		}
		return "no Event of " + regarding + " says " + note
	})
}

// markStatefulSetReady sets the StatefulSet status as the StatefulSet
// controller would once every replica runs the current revision, since
// envtest runs no controller-manager.
func (f *env) markStatefulSetReady(key client.ObjectKey) {
	f.t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := f.client.Get(context.Background(), key, sts); err != nil {
		f.t.Fatal(err)
	}
	n := *sts.Spec.Replicas
	sts.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: sts.Generation, Replicas: n, ReadyReplicas: n, AvailableReplicas: n,
		CurrentReplicas: n, UpdatedReplicas: n, CurrentRevision: "rev", UpdateRevision: "rev",
	}
	if err := f.client.Status().Update(context.Background(), sts); err != nil {
		f.t.Fatal(err)
	}
}

func (f *env) database(key client.ObjectKey) *dbv1.Database {
	f.t.Helper()
	db := &dbv1.Database{}
	if err := f.client.Get(context.Background(), key, db); err != nil {
		f.t.Fatal(err)
	}
	return db
}

// editDatabase applies edit to the Database as last read and updates it,
// again on a conflict: the controller writes the Database too (its
// finalizers, its annotations), and an Update of a copy read before that
// write is refused. It returns the Database as updated.
func (f *env) editDatabase(key client.ObjectKey, edit func(*dbv1.Database)) (*dbv1.Database, error) {
	db := &dbv1.Database{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.client.Get(context.Background(), key, db); err != nil {
			return err
		}
		edit(db)
		return f.client.Update(context.Background(), db)
	})
	return db, err
}

// reconciles returns how many reconciles of Databases the managers of this
// process have finished, from controller-runtime's metric.
func (f *env) reconciles() int {
	f.t.Helper()
	// The counter is controller-runtime's; dbkeeper's own collectors read
	// the last manager's cache, which may be between a stop and a start
	// here, and then fail alone: Gather returns the other families.
	families, err := metrics.Registry.Gather()
	if err != nil && len(families) == 0 {
		f.t.Fatal(err)
	}
	total := 0.0
	for _, family := range families {
		if family.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range family.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "database" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(total)
}

// awaitReconciles waits until n reconciles have finished since the count
// was since: a reconcile that had anything to write has written it then.
// It polls every 10ms, so that the time it returns at is that of the
// reconcile within 10ms.
func (f *env) awaitReconciles(since, n int) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		return f.reconciles()-since >= n, nil
	})
	if err != nil {
		f.t.Fatalf("%d reconciles of %d after %s", f.reconciles()-since, n, waitTimeout)
	}
}

// logBuffer keeps the manager's log and prints it when the test fails.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
