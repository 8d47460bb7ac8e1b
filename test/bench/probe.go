package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// The spec-change probe (issue 25): a user's edit of one Database must
// reach its StatefulSet within seconds even while the controller converges
// N others, because a Database whose generation moved is enqueued ahead of
// routine work. A handful of probe Databases, created and Ready before the
// N, take turns: each sample patches one's spec.resources.requests.cpu to
// a value no earlier sample used, which the reconciler copies into the
// StatefulSet's pod template, and times from the PATCH's response until
// the benchmark's watch of StatefulSets delivers one whose database
// container requests that value.

// probeDatabases is how many probe Databases take turns: a sample goes to
// one whose previous change was seen, so that two changes of one Database
// never overlap.
const probeDatabases = 4

// probeTimeout is how long a sample waits for its change before it counts
// as unseen.
const probeTimeout = time.Minute

// probeQuietPause is the pause between two samples of the quiet probe.
const probeQuietPause = 500 * time.Millisecond

func probeName(i int) string { return fmt.Sprintf("probe-%d", i) }

// probeStatefulSet is the name of the probe Database's StatefulSet.
func probeStatefulSet(name string) string {
	db := &dbv1.Database{}
	db.Name = name
	return desired.StatefulSetName(db)
}

// probeNames are the names of every probe Database.
func probeNames() []string {
	names := make([]string, probeDatabases)
	for i := range names {
		names[i] = probeName(i)
	}
	return names
}

// prober patches probe Databases and matches the watch's StatefulSets
// against the changes it waits for.
type prober struct {
	client client.Client

	// timeout is how long a sample waits for its change: probeTimeout.
	timeout time.Duration

	mu   sync.Mutex
	next int64 // millicores of the next change
	// pending is the change each probe Database waits for, by the name
	// of its StatefulSet.
	pending map[string]*probeChange
	remove  func()
}

type probeChange struct {
	cpu  resource.Quantity
	seen chan time.Time
}

// newProber registers the prober with the watcher; close unregisters it.
func (b *bench) newProber() (*prober, error) {
	cfg := rest.CopyConfig(b.cfg)
	// The webhook warns that a change of spec.resources restarts the pods;
	// the probe means it.
	cfg.WarningHandler = rest.NoWarnings{}
	c, err := client.New(cfg, client.Options{Scheme: b.scheme})
	if err != nil {
		return nil, err
	}
	// Above the default request (100m) so that every sample changes it.
	p := newProberWith(c)
	p.remove = b.watcher.subscribe(p.observe)
	return p, nil
}

// newProberWith returns a prober patching through c, to be fed the
// watched StatefulSets by observe.
func newProberWith(c client.Client) *prober {
	return &prober{client: c, timeout: probeTimeout, next: 101, pending: map[string]*probeChange{}, remove: func() {}}
}

func (p *prober) close() { p.remove() }

// observe is the watcher's callback for every Database and StatefulSet it
// sees added or updated.
func (p *prober) observe(obj client.Object, at time.Time) {
	sts, ok := obj.(*appsv1.StatefulSet)
	if !ok || sts.Namespace != nsDbkeeper {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.pending[sts.Name]
	if ch == nil || !requestsCPU(sts, ch.cpu) {
		return
	}
	delete(p.pending, sts.Name)
	ch.seen <- at
}

// requestsCPU reports whether the StatefulSet's database container requests
// cpu.
func requestsCPU(sts *appsv1.StatefulSet, cpu resource.Quantity) bool {
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == string(dbv1.EnginePostgres) {
			got, ok := c.Resources.Requests[corev1.ResourceCPU]
			return ok && got.Cmp(cpu) == 0
		}
	}
	return false
}

// reserveFree registers the next change for a probe Database no change is
// pending for, starting at from, and returns its name and change; "" when
// every one has a change pending. Registering under the same lock as the
// choice keeps two samples from picking one Database: the sample's
// goroutine may start long after the next tick on a busy machine.
func (p *prober) reserveFree(from int) (string, *probeChange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range probeDatabases {
		name := probeName((from + k) % probeDatabases)
		if p.pending[probeStatefulSet(name)] == nil {
			return name, p.register(name)
		}
	}
	return "", nil
}

// register records the next change for name's StatefulSet, before the
// PATCH, so that no event is missed. p.mu is held.
func (p *prober) register(name string) *probeChange {
	ch := &probeChange{cpu: *resource.NewMilliQuantity(p.next, resource.DecimalSI), seen: make(chan time.Time, 1)}
	p.next++
	p.pending[probeStatefulSet(name)] = ch
	return ch
}

// sample changes the probe Database name and returns the seconds from the
// PATCH's response until the watch saw the StatefulSet carry the change,
// or ok false if it did not within probeTimeout.
func (p *prober) sample(ctx context.Context, name string) (seconds float64, ok bool, err error) {
	p.mu.Lock()
	if p.pending[probeStatefulSet(name)] != nil {
		p.mu.Unlock()
		return 0, false, fmt.Errorf("probe Database %s already has a change pending", name)
	}
	ch := p.register(name)
	p.mu.Unlock()
	return p.await(ctx, name, ch)
}

// await sends the change ch, registered for the probe Database name, and
// waits for the watch to see it, as sample does.
func (p *prober) await(ctx context.Context, name string, ch *probeChange) (seconds float64, ok bool, err error) {
	sts := probeStatefulSet(name)
	forget := func() {
		p.mu.Lock()
		if p.pending[sts] == ch {
			delete(p.pending, sts)
		}
		p.mu.Unlock()
	}

	patch := fmt.Appendf(nil, `{"spec":{"resources":{"requests":{"cpu":%q}}}}`, ch.cpu.String())
	db := &dbv1.Database{}
	db.Namespace, db.Name = nsDbkeeper, name
	if err := p.client.Patch(ctx, db, client.RawPatch(types.MergePatchType, patch)); err != nil {
		forget()
		return 0, false, fmt.Errorf("patching spec.resources.requests.cpu of probe Database %s: %w", name, err)
	}
	answered := time.Now()
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	select {
	case at := <-ch.seen:
		// The watch may deliver the StatefulSet before the client has
		// read the PATCH's response.
		return max(0, at.Sub(answered).Seconds()), true, nil
	case <-timer.C:
		forget()
		return 0, false, nil
	case <-ctx.Done():
		forget()
		return 0, false, ctx.Err()
	}
}

// probeRun collects the samples of one window.
type probeRun struct {
	logf      func(format string, args ...any)
	mu        sync.Mutex
	latencies []float64
	unseen    int
	failed    int
	skipped   int
	errs      []error
}

// add records a sample. A PATCH the API server failed is a figure, logged,
// not the end of the run; an interruption is.
func (r *probeRun) add(seconds float64, ok bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		r.errs = append(r.errs, err)
	case err != nil:
		r.failed++
		r.logf("spec-change probe: %v", err)
	case ok:
		r.latencies = append(r.latencies, seconds)
	default:
		r.unseen++
	}
}

func (r *probeRun) figures(interval time.Duration) probeFigures {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := summarizeProbe(r.latencies, r.unseen)
	f.Failed, f.Skipped = r.failed, r.skipped
	f.IntervalSeconds = round3(interval.Seconds())
	f.TimeoutSeconds = probeTimeout.Seconds()
	return f
}

// converging samples every interval, up to max samples, until stop is
// called; stop waits for the samples under way and returns the figures.
func (p *prober) converging(ctx context.Context, interval time.Duration, maxSamples int, logf func(string, ...any)) (stop func() (probeFigures, error)) {
	tickCtx, cancel := context.WithCancel(ctx)
	run := &probeRun{logf: logf}
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		turn := 0
		for issued := 0; issued < maxSamples; {
			select {
			case <-tickCtx.Done():
				return
			case <-tick.C:
			}
			name, ch := p.reserveFree(turn)
			if name == "" {
				run.mu.Lock()
				run.skipped++
				run.mu.Unlock()
				continue
			}
			turn++
			issued++
			wg.Go(func() {
				// ctx, not tickCtx: a sample under way when
				// the convergence ends is still waited for.
				run.add(p.await(ctx, name, ch))
			})
		}
	}()
	return func() (probeFigures, error) {
		cancel()
		<-done
		wg.Wait()
		return run.figures(interval), errors.Join(run.errs...)
	}
}

// quiet takes samples one after another, each once the previous one was
// seen.
func (p *prober) quiet(ctx context.Context, samples int, logf func(string, ...any)) (probeFigures, error) {
	run := &probeRun{logf: logf}
	for i := range samples {
		if i > 0 {
			select {
			case <-ctx.Done():
				return probeFigures{}, ctx.Err()
			case <-time.After(probeQuietPause):
			}
		}
		run.add(p.sample(ctx, probeName(i%probeDatabases)))
		if len(run.errs) > 0 {
			return probeFigures{}, errors.Join(run.errs...)
		}
	}
	return run.figures(probeQuietPause), nil
}

// summarizeProbe returns the figures of the seconds seen and the number of
// changes never seen.
func summarizeProbe(latencies []float64, unseen int) probeFigures {
	f := probeFigures{Samples: len(latencies), Unseen: unseen, Seconds: make([]float64, len(latencies))}
	for i, s := range latencies {
		f.Seconds[i] = round3(s)
	}
	if len(latencies) == 0 {
		return f
	}
	sorted := slices.Sorted(slices.Values(latencies))
	sum := 0.0
	for _, s := range sorted {
		sum += s
	}
	f.P50 = round3(nearestRank(sorted, 0.5))
	f.P99 = round3(nearestRank(sorted, 0.99))
	f.Max = round3(sorted[len(sorted)-1])
	f.Mean = round3(sum / float64(len(sorted)))
	return f
}

// nearestRank is the q-quantile of sorted values by the nearest-rank
// method: the smallest value at least q of the values are not above. With
// fewer than 100 values p99 is the maximum.
func nearestRank(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// probeSetup creates the probe Databases and waits until they are Ready,
// before the N Databases are created.
func (b *bench) probeSetup(ctx context.Context) error {
	if b.opts.probeSamples == 0 && b.opts.probeQuietSamples == 0 {
		return nil
	}
	names := probeNames()
	tr := b.watcher.track("Database", nsDbkeeper, names, false)
	defer b.watcher.untrack(tr)
	for _, name := range names {
		db := benchDatabase(nsDbkeeper, 0)
		db.Name = name
		if err := b.client.Create(ctx, db); err != nil {
			return fmt.Errorf("creating probe Database %s: %w", name, err)
		}
	}
	if err := tr.wait(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("probe Databases: %w", err)
	}
	var err error
	b.prober, err = b.newProber()
	if err != nil {
		return err
	}
	b.logf("%d probe Databases Ready", probeDatabases)
	// Their last status writes and pod labels belong to no figure of the
	// convergence.
	_, err = b.waitQuiet(ctx, 2*time.Second, 30*time.Second)
	return err
}

// probeQuiet is the baseline: the same probe on a quiet manager, after the
// convergence and the restart. It then waits until the probe Databases are
// Ready again and the manager is quiet, for the phases after it.
func (b *bench) probeQuiet(ctx context.Context) error {
	if b.prober == nil || b.opts.probeQuietSamples == 0 {
		return nil
	}
	if _, err := b.waitQuiet(ctx, 3*time.Second, time.Minute); err != nil {
		return err
	}
	f, err := b.prober.quiet(ctx, b.opts.probeQuietSamples, b.logf)
	if err != nil {
		return err
	}
	b.report.SpecChange.Quiet = f
	b.logf("spec change, quiet: %d seen (%d not within %s), p50 %.3fs p99 %.3fs max %.3fs", f.Samples, f.Unseen, probeTimeout, f.P50, f.P99, f.Max)
	names := probeNames()
	tr := b.watcher.track("Database", nsDbkeeper, names, false)
	defer b.watcher.untrack(tr)
	// The tracker sees a Database only when it changes: list them once.
	for _, name := range names {
		db := &dbv1.Database{}
		if err := b.watcher.cache.Get(ctx, client.ObjectKey{Namespace: nsDbkeeper, Name: name}, db); err == nil && databaseReady(db) {
			tr.ready(nsDbkeeper, name, time.Now())
		}
	}
	if err := tr.wait(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("probe Databases after the quiet probe: %w", err)
	}
	_, err = b.waitQuiet(ctx, 3*time.Second, time.Minute)
	return err
}
