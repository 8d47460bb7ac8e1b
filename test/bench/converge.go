package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// benchDatabase is the Database every phase creates: PostgreSQL 17 with one
// replica and every other field defaulted.
func benchDatabase(namespace string, i int) *dbv1.Database {
	return &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%05d", i), Namespace: namespace},
		Spec:       dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"},
	}
}

// floorObjects returns the children dbkeeper would make for a Database, as
// plain objects to create: the Secret, the Services and the StatefulSet,
// built by internal/desired from the defaulted Database, without owner
// references (there is no Database to own them).
func floorObjects(db *dbv1.Database, creds desired.Credentials, inst map[string][]byte) ([]client.Object, error) {
	secret := desired.Secret(db, creds)
	instSecret := desired.InstanceSecret(db, inst)
	sts := desired.StatefulSet(db, desired.Options{InstanceImage: desired.DefaultInstanceImage})
	secret.OwnerReferences = nil
	instSecret.OwnerReferences = nil
	sts.OwnerReferences = nil
	services := desired.Services(db)
	acs := make([]any, 0, len(services)+3)
	out := make([]client.Object, 0, len(services)+3)
	acs = append(acs, secret, instSecret)
	out = append(out, &corev1.Secret{}, &corev1.Secret{})
	for _, svc := range services {
		svc.OwnerReferences = nil
		acs = append(acs, svc)
		out = append(out, &corev1.Service{})
	}
	acs = append(acs, sts)
	out = append(out, &appsv1.StatefulSet{})
	for i, ac := range acs {
		data, err := json.Marshal(ac)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func randomPassword() (string, error) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b), nil
}

// floorConvergence creates the children of N Databases directly, as plain
// objects, and waits until every StatefulSet is ready: what the API server,
// the StatefulSet controller, the scheduler and kwok need anyway. It runs on
// a devcluster of its own, without dbkeeper.
func (b *bench) floorConvergence(ctx context.Context) error {
	n := b.opts.n
	defaulting := rules.Rules{Clock: clock.RealClock{}}
	objects := make([][]client.Object, n)
	names := make([]string, n)
	for i := range n {
		db := benchDatabase(nsFloor, i)
		defaulting.Default(db)
		// The instance Secret's passwords only: the fake nodes' pods
		// start no agent that would read its certificates.
		var creds desired.Credentials
		var superuser, replication string
		for _, v := range []*string{&creds.Password, &superuser, &replication} {
			var err error
			if *v, err = randomPassword(); err != nil {
				return err
			}
		}
		inst := map[string][]byte{
			desired.SecretKeySuperuserPassword:           []byte(superuser),
			desired.SecretKeyInstanceReplicationPassword: []byte(replication),
		}
		var err error
		if objects[i], err = floorObjects(db, creds, inst); err != nil {
			return err
		}
		names[i] = desired.StatefulSetName(db)
	}
	tr := b.watcher.track("StatefulSet", nsFloor, names, false)
	defer b.watcher.untrack(tr)
	before, err := b.apiMetrics(ctx)
	if err != nil {
		return err
	}
	cpuBefore := b.cpuByComponent()
	go b.saveAPIServerProfile(ctx, apiServerProfilePath(n), "apiserver-floor.pb.gz")
	b.logf("floor: creating %d × (Secret, 2 Services, StatefulSet) with %d clients", n, b.opts.concurrency)
	start := time.Now()
	stopProgress := b.progressEvery(10*time.Second, "floor", tr, n)
	err = b.forEach(ctx, n, func(ctx context.Context, i int) error {
		for _, obj := range objects[i] {
			if err := b.client.Create(ctx, obj); err != nil {
				return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
			}
		}
		return nil
	})
	created := time.Since(start)
	if err == nil {
		err = tr.wait(ctx, b.opts.timeout)
	}
	stopProgress()
	if err != nil {
		return err
	}
	cpuAfter := b.cpuByComponent()
	after, err := b.apiMetrics(ctx)
	if err != nil {
		return err
	}
	arm := &b.report.Convergence.Floor
	arm.CPUSeconds = cpuDelta(cpuBefore, cpuAfter)
	arm.Seconds = round3(tr.last().Sub(start).Seconds())
	arm.CreateSeconds = round3(created.Seconds())
	arm.Timeline = tr.timeline(start)
	b.report.Requests.Floor = apiRequestsPerDatabase(before, after, n)
	b.report.Requests.FloorReads = apiReadsPerDatabase(before, after, n)
	b.logf("floor: %d StatefulSets ready in %.1fs (creates took %.1fs)", n, arm.Seconds, arm.CreateSeconds)
	return nil
}

// dbkeeperConvergence creates N Databases and waits until all are Ready,
// sampling the manager's work queue depth and RSS meanwhile.
func (b *bench) dbkeeperConvergence(ctx context.Context) error {
	n := b.opts.n
	dbs := make([]*dbv1.Database, n)
	names := make([]string, n)
	for i := range n {
		dbs[i] = benchDatabase(nsDbkeeper, i)
		names[i] = dbs[i].Name
	}
	tr := b.watcher.track("Database", nsDbkeeper, names, false)
	defer b.watcher.untrack(tr)
	stsCreated := b.watcher.track("StatefulSet", nsDbkeeper, names, true)
	defer b.watcher.untrack(stsCreated)
	stsReady := b.watcher.track("StatefulSet", nsDbkeeper, names, false)
	defer b.watcher.untrack(stsReady)
	before, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	cpuBefore := b.cpuByComponent()
	if b.opts.profileDir != "" {
		// As long as the floor took, which is most of the convergence, up
		// to five minutes.
		seconds := min(300, max(10, int(b.report.Convergence.Floor.Seconds)))
		go b.saveProfile(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), "cpu-convergence.pb.gz")
	}
	go b.saveAPIServerProfile(ctx, apiServerProfilePath(n), "apiserver-dbkeeper.pb.gz")
	sampler := b.startSampler(ctx)
	b.logf("dbkeeper: creating %d Databases with %d clients", n, b.opts.concurrency)
	start := time.Now()
	stopProgress := b.progressEvery(10*time.Second, "dbkeeper", tr, n)
	stopProbe := func() (probeFigures, error) { return probeFigures{}, nil }
	if b.prober != nil && b.opts.probeSamples > 0 {
		stopProbe = b.prober.converging(ctx, b.opts.probeInterval, b.opts.probeSamples, b.logf)
	}
	err = b.forEach(ctx, n, func(ctx context.Context, i int) error {
		if err := b.client.Create(ctx, dbs[i].DeepCopy()); err != nil {
			return fmt.Errorf("creating Database %s: %w", dbs[i].Name, err)
		}
		return nil
	})
	created := time.Since(start)
	if err == nil {
		err = tr.wait(ctx, b.opts.timeout)
	}
	stopProgress()
	probe, probeErr := stopProbe()
	samples := sampler.stop()
	if err := errors.Join(err, probeErr); err != nil {
		return err
	}
	if b.prober != nil && b.opts.probeSamples > 0 {
		b.report.SpecChange.Converging = probe
		b.logf("spec change while converging: %d seen (%d not within %s, %d ticks skipped), p50 %.3fs p99 %.3fs max %.3fs",
			probe.Samples, probe.Unseen, probeTimeout, probe.Skipped, probe.P50, probe.P99, probe.Max)
	}
	cpuAfter := b.cpuByComponent()
	after, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	arm := &b.report.Convergence.Dbkeeper
	arm.CPUSeconds = cpuDelta(cpuBefore, cpuAfter)
	arm.Seconds = round3(tr.last().Sub(start).Seconds())
	arm.CreateSeconds = round3(created.Seconds())
	arm.Timeline = tr.timeline(start)
	arm.StatefulSetsCreatedSeconds = round3(stsCreated.last().Sub(start).Seconds())
	arm.StatefulSetsReadySeconds = round3(stsReady.last().Sub(start).Seconds())
	arm.StatefulSetsReadyTimeline = stsReady.timeline(start)
	if f := b.report.Convergence.Floor.Seconds; f > 0 {
		b.report.Convergence.Ratio = round3(arm.Seconds / f)
	}
	b.report.Requests.Dbkeeper = apiRequestsPerDatabase(before.api, after.api, n)
	b.report.Requests.DbkeeperReads = apiReadsPerDatabase(before.api, after.api, n)
	b.report.Requests.Manager = managerConvergence(before, after, n)
	b.report.Reconcile = reconcileCost(before.mgr, after.mgr, samples)
	b.report.Memory.PeakConvergingRSSBytes = samples.peakRSS
	b.logf("dbkeeper: %d Databases Ready in %.1fs (creates took %.1fs); floor %.1fs", n, arm.Seconds, arm.CreateSeconds, b.report.Convergence.Floor.Seconds)
	return nil
}

// progressEvery logs how many objects are ready every interval until the
// returned function is called.
func (b *bench) progressEvery(interval time.Duration, what string, tr *tracker, n int) func() {
	done := make(chan struct{})
	var once sync.Once
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				b.logf("%s: %d of %d ready", what, tr.count(), n)
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// samples is what the sampler saw while the Databases converged.
type samples struct {
	peakDepth float64
	peakRSS   int64
	count     int
}

type sampler struct {
	cancel context.CancelFunc
	done   chan samples
}

// samplePeriod is how often the sampler scrapes the manager while the
// Databases converge. Each scrape costs the manager a little CPU (the
// dbkeeper_databases collector lists every Database from its cache).
const samplePeriod = time.Second

// startSampler scrapes the manager's work queue depth and reads its RSS
// every samplePeriod.
func (b *bench) startSampler(ctx context.Context) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel, done: make(chan samples, 1)}
	go func() {
		var out samples
		tick := time.NewTicker(samplePeriod)
		defer tick.Stop()
		for {
			if m, err := b.managerMetrics(ctx); err == nil {
				out.peakDepth = max(out.peakDepth, m.sum("workqueue_depth", labelIs("name", "database")))
				out.count++
			}
			if rss, err := readRSS(b.mgr.PID()); err == nil {
				out.peakRSS = max(out.peakRSS, rss)
			}
			select {
			case <-ctx.Done():
				s.done <- out
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() samples {
	s.cancel()
	return <-s.done
}

// mutatingVerbs are the verbs of apiserver_request_total that change
// objects (APPLY is a server-side apply PATCH).
var mutatingVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// resourceKey names a resource as group/resource/subresource, "" group
// being core.
func resourceKey(l map[string]string) string {
	r := l["resource"]
	if g := l["group"]; g != "" {
		r += "." + g
	}
	if s := l["subresource"]; s != "" {
		r += "/" + s
	}
	return r
}

// apiRequestsPerDatabase returns the mutating requests the API server
// served between two scrapes, by verb and resource, divided by n. The API
// server does not tell clients apart: this counts every component's writes,
// including the background (node leases and status).
func apiRequestsPerDatabase(before, after metrics, n int) []requestCount {
	return apiRequests(before, after, n, func(l map[string]string) bool { return mutatingVerbs[l["verb"]] && l["dry_run"] == "" })
}

// apiReadsPerDatabase is apiRequestsPerDatabase for GET, LIST and WATCH.
func apiReadsPerDatabase(before, after metrics, n int) []requestCount {
	return apiRequests(before, after, n, func(l map[string]string) bool { return !mutatingVerbs[l["verb"]] })
}

func apiRequests(before, after metrics, n int, sel match) []requestCount {
	key := func(l map[string]string) string { return l["verb"] + " " + resourceKey(l) }
	d := delta(before.by("apiserver_request_total", sel, key), after.by("apiserver_request_total", sel, key))
	out := make([]requestCount, 0, len(d))
	for k, v := range d {
		verb, resource, _ := strings.Cut(k, " ")
		out = append(out, requestCount{Verb: verb, Resource: resource, Total: v, PerDatabase: round3(v / float64(n))})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Resource != out[j].Resource {
			return out[i].Resource < out[j].Resource
		}
		return out[i].Verb < out[j].Verb
	})
	return out
}

// managerConvergence returns the manager's own requests while the
// Databases converged.
func managerConvergence(before, after snapshot, n int) managerRequestFigures {
	byMethod := delta(managerRequests(before.mgr), managerRequests(after.mgr))
	byCode := delta(
		before.mgr.by("rest_client_requests_total", nil, func(l map[string]string) string { return l["method"] + " " + l["code"] }),
		after.mgr.by("rest_client_requests_total", nil, func(l map[string]string) string { return l["method"] + " " + l["code"] }))
	childWrites := delta(
		before.mgr.by("dbkeeper_child_writes_total", nil, func(l map[string]string) string { return l["kind"] + " " + l["operation"] }),
		after.mgr.by("dbkeeper_child_writes_total", nil, func(l map[string]string) string { return l["kind"] + " " + l["operation"] }))
	statusSel := func(l map[string]string) bool {
		return l["resource"] == "databases" && l["subresource"] == "status" && mutatingVerbs[l["verb"]]
	}
	status := after.api.sum("apiserver_request_total", statusSel) - before.api.sum("apiserver_request_total", statusSel)
	conflictSel := func(l map[string]string) bool { return statusSel(l) && l["code"] == "409" }
	conflicts := after.api.sum("apiserver_request_total", conflictSel) - before.api.sum("apiserver_request_total", conflictSel)
	children := 0.0
	for _, v := range childWrites {
		children += v
	}
	mutating := sumMethods(byMethod, mutatingMethods...)
	f := managerRequestFigures{
		ByMethod:           byMethod,
		ByMethodAndCode:    byCode,
		ChildWrites:        childWrites,
		Mutating:           mutating,
		MutatingPerDB:      round3(mutating / float64(n)),
		ChildWritesPerDB:   round3(children / float64(n)),
		StatusWritesPerDB:  round3(status / float64(n)),
		StatusConflicts:    conflicts,
		OtherWritesPerDB:   round3((mutating - children - status) / float64(n)),
		Reads:              byMethod["GET"],
		ReadsPerDB:         round3(byMethod["GET"] / float64(n)),
		CPUSeconds:         round3(after.mgr.sum("process_cpu_seconds_total", nil) - before.mgr.sum("process_cpu_seconds_total", nil)),
		ConvergenceSeconds: round3(after.at.Sub(before.at).Seconds()),
	}
	f.CPUMillisPerDB = round3(f.CPUSeconds * 1000 / float64(n))
	return f
}

// reconcileCost returns the controller's figures while the Databases
// converged.
func reconcileCost(before, after metrics, s samples) reconcileFigures {
	db := labelIs("controller", "database")
	q := labelIs("name", "database")
	results := delta(
		before.by("controller_runtime_reconcile_total", db, func(l map[string]string) string { return l["result"] }),
		after.by("controller_runtime_reconcile_total", db, func(l map[string]string) string { return l["result"] }))
	total := 0.0
	for _, v := range results {
		total += v
	}
	rt := after.histogram("controller_runtime_reconcile_time_seconds", db).minus(before.histogram("controller_runtime_reconcile_time_seconds", db))
	qd := after.histogram("workqueue_queue_duration_seconds", q).minus(before.histogram("workqueue_queue_duration_seconds", q))
	return reconcileFigures{
		Total:             total,
		ByResult:          results,
		Errors:            after.sum("controller_runtime_reconcile_errors_total", db) - before.sum("controller_runtime_reconcile_errors_total", db),
		TimeMeanSeconds:   round6(rt.mean()),
		TimeP50Seconds:    round6(rt.quantile(0.5)),
		TimeP99Seconds:    round6(rt.quantile(0.99)),
		DepthPeak:         s.peakDepth,
		DepthSamples:      s.count,
		QueueWaitP50:      round6(qd.quantile(0.5)),
		QueueWaitP99:      round6(qd.quantile(0.99)),
		QueueWaitMean:     round6(qd.mean()),
		QueueWaitNative:   qd.native != nil,
		ReconcileTimeNote: "classic buckets (5ms, 10ms, 25ms, 50ms, 100ms, …), linear interpolation",
	}
}

// steadyState waits until the manager is quiet, then counts its requests
// in a window where nothing changes, then measures its memory at N.
func (b *bench) steadyState(ctx context.Context) error {
	waited, err := b.waitQuiet(ctx, 5*time.Second, time.Minute)
	if err != nil {
		return err
	}
	b.logf("manager quiet after %.1fs; steady-state window of %s", waited.Seconds(), b.opts.steady)
	before, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.opts.steady):
	}
	after, err := b.snapshot(ctx)
	if err != nil {
		return err
	}
	byMethod := delta(managerRequests(before.mgr), managerRequests(after.mgr))
	db := labelIs("controller", "database")
	st := &b.report.Requests.Steady
	st.Seconds = round3(after.at.Sub(before.at).Seconds())
	st.SettleSeconds = round3(waited.Seconds())
	st.ManagerByMethod = byMethod
	st.ManagerMutating = sumMethods(byMethod, mutatingMethods...)
	st.ManagerReads = byMethod["GET"]
	st.Reconciles = after.mgr.sum("controller_runtime_reconcile_total", db) - before.mgr.sum("controller_runtime_reconcile_total", db)
	st.APIServerMutating = apiRequestsPerDatabase(before.api, after.api, 1)
	b.logf("steady state: manager made %.0f mutating and %.0f GET requests in %.0fs", st.ManagerMutating, st.ManagerReads, st.Seconds)

	mem, err := b.measureMemory(ctx)
	if err != nil {
		return err
	}
	b.report.Memory.AtN = mem
	b.logf("memory at %d Ready: RSS %s (anon %s, file %s), heap in use %s", b.opts.n, mib(mem.RSSBytes), mib(mem.RSSAnonBytes), mib(mem.RSSFileBytes), mib(mem.HeapInuseBytes))
	b.saveProfile(ctx, "/debug/pprof/heap", "heap-at-n.pb.gz")
	return nil
}

// idleMemory measures the manager's memory before any Database exists.
func (b *bench) idleMemory(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Second):
	}
	mem, err := b.measureMemory(ctx)
	if err != nil {
		return err
	}
	b.report.Memory.Idle = mem
	if pm, err := readProcMemory(b.mgr.PID()); err == nil {
		b.logf("idle memory after the forced GC and heap profile: RSS %s (anon %s, file %s)", mib(pm.rss), mib(pm.anon), mib(pm.file))
	}
	b.logf("idle memory: RSS %s (anon %s, file %s), heap in use %s", mib(mem.RSSBytes), mib(mem.RSSAnonBytes), mib(mem.RSSFileBytes), mib(mem.HeapInuseBytes))
	return nil
}

// unrelatedSecrets creates Secrets the manager must not cache, then
// measures its memory again.
func (b *bench) unrelatedSecrets(ctx context.Context) error {
	if b.opts.secrets == 0 {
		return nil
	}
	blob := make([]byte, b.opts.secretSize)
	if _, err := rand.Read(blob); err != nil {
		return err
	}
	b.logf("creating %d unrelated Secrets of %d bytes", b.opts.secrets, b.opts.secretSize)
	start := time.Now()
	err := b.forEach(ctx, b.opts.secrets, func(ctx context.Context, i int) error {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("noise-%05d", i), Namespace: nsNoise, Labels: map[string]string{"app.kubernetes.io/name": "noise"}},
			Data:       map[string][]byte{"blob": blob},
		}
		return b.client.Create(ctx, s)
	})
	if err != nil {
		return err
	}
	b.report.Memory.SecretsCreateSeconds = round3(time.Since(start).Seconds())
	if _, err := b.waitQuiet(ctx, 5*time.Second, 30*time.Second); err != nil {
		return err
	}
	mem, err := b.measureMemory(ctx)
	if err != nil {
		return err
	}
	m := &b.report.Memory
	m.AfterSecrets = mem
	m.SecretsRSSGrowthPct = round3(growth(m.AtN.RSSBytes, mem.RSSBytes))
	m.SecretsHeapGrowthPct = round3(growth(m.AtN.HeapInuseBytes, mem.HeapInuseBytes))
	b.logf("after %d Secrets (%.1fs): RSS %s (%+.1f%%), heap in use %s (%+.1f%%)", b.opts.secrets, m.SecretsCreateSeconds,
		mib(mem.RSSBytes), m.SecretsRSSGrowthPct, mib(mem.HeapInuseBytes), m.SecretsHeapGrowthPct)
	return nil
}

func growth(from, to int64) float64 {
	if from == 0 {
		return 0
	}
	return 100 * float64(to-from) / float64(from)
}

// restart stops the manager and starts it again with the N Databases
// present, measures its start-up, and checks that reconciling every
// Database again writes nothing.
func (b *bench) restart(ctx context.Context) error {
	if err := b.mgr.Stop(); err != nil {
		return err
	}
	b.mgr = nil
	st, err := b.startManager(ctx)
	if err != nil {
		return err
	}
	st.Databases = b.opts.n
	b.report.Startup.WithN = st
	b.logf("manager ready with %d Databases in %.2fs (readyz %.2fs, webhook %.2fs, caches synced %.2fs)",
		b.opts.n, st.ReadySeconds, st.ReadyzSeconds, st.WebhookSeconds, st.CachesSyncedSeconds)

	// Every Database is reconciled once after the start; none may write.
	db := labelIs("controller", "database")
	deadline := time.Now().Add(b.opts.timeout)
	for {
		m, err := b.managerMetrics(ctx)
		if err != nil {
			return err
		}
		if m.sum("controller_runtime_reconcile_total", db) >= float64(b.opts.n) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the restarted manager reconciled only %.0f of %d Databases", m.sum("controller_runtime_reconcile_total", db), b.opts.n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := b.waitQuiet(ctx, 3*time.Second, time.Minute); err != nil {
		return err
	}
	m, err := b.managerMetrics(ctx)
	if err != nil {
		return err
	}
	byMethod := managerRequests(m)
	r := &b.report.Requests.Restart
	r.ByMethod = byMethod
	r.Mutating = sumMethods(byMethod, mutatingMethods...)
	r.Reads = byMethod["GET"]
	r.Reconciles = m.sum("controller_runtime_reconcile_total", db)
	b.logf("after the restart: %.0f reconciles, %.0f mutating and %.0f GET requests", r.Reconciles, r.Mutating, r.Reads)
	mem, err := b.measureMemory(ctx)
	if err != nil {
		return err
	}
	b.report.Memory.AfterRestart = mem
	return nil
}

func cpuDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if b, ok := before[k]; ok {
			out[k] = round3(v - b)
		}
	}
	return out
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func sortTimes(ts []time.Time) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
}

// apiServerProfilePath is the API server's CPU profile of the first part of
// a convergence of n objects, the same window in both arms (n/8 seconds,
// 10 to 180): the floor converges in about n/3 seconds on two cores.
func apiServerProfilePath(n int) string {
	return fmt.Sprintf("/debug/pprof/profile?seconds=%d", min(180, max(10, n/8)))
}
