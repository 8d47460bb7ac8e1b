package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// watcher follows Databases and the floor's StatefulSets with informers and
// tells trackers when each becomes ready.
type watcher struct {
	cache  cache.Cache
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	trackers  []*tracker
	observers map[int]func(client.Object, time.Time)
	nextID    int
}

// subscribe calls fn with every object the watcher sees added or updated,
// and when; the returned function stops it. fn must not block.
func (w *watcher) subscribe(fn func(client.Object, time.Time)) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.observers == nil {
		w.observers = map[int]func(client.Object, time.Time){}
	}
	id := w.nextID
	w.nextID++
	w.observers[id] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.observers, id)
	}
}

// startWatcher watches the kinds (Database, StatefulSet) in the namespaces
// given.
func startWatcher(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, watch map[string][]string) (*watcher, error) {
	byObject := map[client.Object]cache.ByObject{}
	var objects []client.Object
	for kind, namespaces := range watch {
		var obj client.Object
		switch kind {
		case "Database":
			obj = &dbv1.Database{}
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		default:
			return nil, fmt.Errorf("cannot watch %s", kind)
		}
		ns := map[string]cache.Config{}
		for _, n := range namespaces {
			ns[n] = cache.Config{}
		}
		byObject[obj] = cache.ByObject{Namespaces: ns}
		objects = append(objects, obj)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: byObject})
	if err != nil {
		return nil, err
	}
	w := &watcher{cache: c, done: make(chan struct{})}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj) },
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	}
	for _, obj := range objects {
		inf, err := c.GetInformer(runCtx, obj)
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() {
		defer close(w.done)
		_ = c.Start(runCtx)
	}()
	syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
	defer cancelSync()
	if !c.WaitForCacheSync(syncCtx) {
		w.stop()
		return nil, fmt.Errorf("the benchmark's informers did not sync")
	}
	return w, nil
}

func (w *watcher) stop() {
	w.cancel()
	<-w.done
}

func (w *watcher) observe(obj any) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	var ready bool
	kind := ""
	switch x := obj.(type) {
	case *dbv1.Database:
		ready, kind = databaseReady(x), "Database"
	case *appsv1.StatefulSet:
		ready, kind = statefulSetReady(x), "StatefulSet"
	}
	now := time.Now()
	w.mu.Lock()
	trackers := append([]*tracker(nil), w.trackers...)
	observers := make([]func(client.Object, time.Time), 0, len(w.observers))
	for _, fn := range w.observers {
		observers = append(observers, fn)
	}
	w.mu.Unlock()
	for _, fn := range observers {
		fn(o, now)
	}
	for _, t := range trackers {
		if t.kind == kind && (ready || t.existence) {
			t.ready(o.GetNamespace(), o.GetName(), now)
		}
	}
}

// databaseReady: the Ready condition is True for the current generation.
func databaseReady(db *dbv1.Database) bool {
	c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == db.Generation
}

// statefulSetReady is the test of dbkeeper's StatefulSetReady condition:
// the controller observed the current generation, the rollout is
// complete and every replica is ready.
func statefulSetReady(sts *appsv1.StatefulSet) bool {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	s := sts.Status
	return s.ObservedGeneration >= sts.Generation &&
		(s.UpdateRevision == "" || s.CurrentRevision == s.UpdateRevision) &&
		s.UpdatedReplicas >= want && s.Replicas == want && s.ReadyReplicas >= want
}

// track returns a tracker of the objects of kind (Database, StatefulSet)
// named by names in namespace becoming ready or, if existence, being seen.
func (w *watcher) track(kind, namespace string, names []string, existence bool) *tracker {
	t := &tracker{kind: kind, existence: existence, namespace: namespace, want: map[string]bool{}, readyAt: map[string]time.Time{}, all: make(chan struct{})}
	for _, n := range names {
		t.want[n] = true
	}
	w.mu.Lock()
	w.trackers = append(w.trackers, t)
	w.mu.Unlock()
	return t
}

func (w *watcher) untrack(t *tracker) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, x := range w.trackers {
		if x == t {
			w.trackers = append(w.trackers[:i], w.trackers[i+1:]...)
			return
		}
	}
}

// tracker records when each of a set of objects first became ready.
type tracker struct {
	kind      string
	existence bool
	namespace string
	mu        sync.Mutex
	want      map[string]bool
	readyAt   map[string]time.Time
	all       chan struct{}
}

func (t *tracker) ready(namespace, name string, at time.Time) {
	if namespace != t.namespace {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.want[name] {
		return
	}
	if _, seen := t.readyAt[name]; seen {
		return
	}
	t.readyAt[name] = at
	if len(t.readyAt) == len(t.want) {
		close(t.all)
	}
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.readyAt)
}

// wait waits until every object is ready, or timeout.
func (t *tracker) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-t.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("only %d of %d ready after %s", t.count(), len(t.want), timeout)
	}
}

// timeline returns the number of ready objects over time since start, one
// point per object, in order.
func (t *tracker) timeline(start time.Time) []point {
	t.mu.Lock()
	defer t.mu.Unlock()
	times := make([]time.Time, 0, len(t.readyAt))
	for _, at := range t.readyAt {
		times = append(times, at)
	}
	sortTimes(times)
	out := make([]point, 0, len(times)+1)
	out = append(out, point{Seconds: 0, Ready: 0})
	for i, at := range times {
		out = append(out, point{Seconds: round3(at.Sub(start).Seconds()), Ready: i + 1})
	}
	return out
}

// last returns the time the last object became ready.
func (t *tracker) last() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last time.Time
	for _, at := range t.readyAt {
		if at.After(last) {
			last = at
		}
	}
	return last
}
