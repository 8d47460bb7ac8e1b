package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
)

// otherWriter is the field manager of the client that fights dbkeeper.
const otherWriter = "other-writer"

// Fields the other writer adds, which are its own and must be kept.
const (
	otherLabel      = "other.example/touched"
	otherAnnotation = "other.example/note"
	otherPortName   = "metrics"
	otherPort       = 9187
)

// edit is one change of a child by the other writer.
type edit struct {
	name string
	// own is true when the edit adds a field of the other writer's own,
	// which dbkeeper must keep; false when it changes a field dbkeeper owns,
	// which dbkeeper must restore.
	own bool
	do  func(ctx context.Context, h *harness, ns, db string, n int) error
}

// edits are what the other writer does to a Database's children.
var edits = []edit{
	{"label the StatefulSet", true, func(ctx context.Context, h *harness, ns, db string, n int) error {
		return h.mergePatch(ctx, &appsv1.StatefulSet{}, ns, db, fmt.Sprintf(`{"metadata":{"labels":{%q:"%d"}}}`, otherLabel, n))
	}},
	{"annotate the client Service", true, func(ctx context.Context, h *harness, ns, db string, n int) error {
		return h.mergePatch(ctx, &corev1.Service{}, ns, db, fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, otherAnnotation, n))
	}},
	{"add a port to the client Service", true, func(ctx context.Context, h *harness, ns, db string, _ int) error {
		patch := fmt.Sprintf(`{"spec":{"ports":[{"name":%q,"port":%d,"protocol":"TCP","targetPort":%d}]}}`, otherPortName, otherPort, otherPort)
		return h.patch(ctx, &corev1.Service{}, ns, db, types.StrategicMergePatchType, patch)
	}},
	{"scale the StatefulSet", false, func(ctx context.Context, h *harness, ns, db string, n int) error {
		return h.mergePatch(ctx, &appsv1.StatefulSet{}, ns, db, fmt.Sprintf(`{"spec":{"replicas":%d}}`, 4+n%3))
	}},
	{"relabel the StatefulSet's component", false, func(ctx context.Context, h *harness, ns, db string, n int) error {
		return h.mergePatch(ctx, &appsv1.StatefulSet{}, ns, db, fmt.Sprintf(`{"metadata":{"labels":{%q:"hijacked-%d"}}}`, desired.LabelComponent, n))
	}},
	{"take the StatefulSet out of dbkeeper's cache (managed-by label)", false, func(ctx context.Context, h *harness, ns, db string, _ int) error {
		return h.mergePatch(ctx, &appsv1.StatefulSet{}, ns, db, fmt.Sprintf(`{"metadata":{"labels":{%q:"someone-else"}}}`, desired.LabelManagedBy))
	}},
	{"change the Secret's username", false, func(ctx context.Context, h *harness, ns, db string, n int) error {
		return h.mergePatch(ctx, &corev1.Secret{}, ns, db+"-credentials", fmt.Sprintf(`{"stringData":{%q:"intruder%d"}}`, desired.SecretKeyUsername, n))
	}},
	{"take the headless Service out of dbkeeper's cache (managed-by label)", false, func(ctx context.Context, h *harness, ns, db string, _ int) error {
		return h.mergePatch(ctx, &corev1.Service{}, ns, db+"-headless", fmt.Sprintf(`{"metadata":{"labels":{%q:"someone-else"}}}`, desired.LabelManagedBy))
	}},
	{"take the Secret out of dbkeeper's cache (managed-by label)", false, func(ctx context.Context, h *harness, ns, db string, _ int) error {
		return h.mergePatch(ctx, &corev1.Secret{}, ns, db+"-credentials", fmt.Sprintf(`{"metadata":{"labels":{%q:"someone-else"}}}`, desired.LabelManagedBy))
	}},
	{"change the target port of the client Service", false, func(ctx context.Context, h *harness, ns, db string, n int) error {
		svc := &corev1.Service{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, svc); err != nil {
			return err
		}
		for i, p := range svc.Spec.Ports {
			if p.Name != otherPortName {
				patch := fmt.Sprintf(`[{"op":"test","path":"/spec/ports/%d/name","value":%q},{"op":"replace","path":"/spec/ports/%d/targetPort","value":%d}]`, i, p.Name, i, 10000+n)
				return h.patch(ctx, &corev1.Service{}, ns, db, types.JSONPatchType, patch)
			}
		}
		return nil
	}},
	{"change the port number of the client Service", false, func(ctx context.Context, h *harness, ns, db string, n int) error {
		svc := &corev1.Service{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, svc); err != nil {
			return err
		}
		for i, p := range svc.Spec.Ports {
			if p.Name != otherPortName {
				patch := fmt.Sprintf(`[{"op":"test","path":"/spec/ports/%d/name","value":%q},{"op":"replace","path":"/spec/ports/%d/port","value":%d}]`, i, p.Name, i, 20000+n)
				return h.patch(ctx, &corev1.Service{}, ns, db, types.JSONPatchType, patch)
			}
		}
		return nil
	}},
}

func (h *harness) mergePatch(ctx context.Context, obj client.Object, ns, name, patch string) error {
	return h.patch(ctx, obj, ns, name, types.MergePatchType, patch)
}

func (h *harness) patch(ctx context.Context, obj client.Object, ns, name string, pt types.PatchType, patch string) error {
	obj.SetNamespace(ns)
	obj.SetName(name)
	return h.Client.Patch(ctx, obj, client.RawPatch(pt, []byte(patch)), client.FieldOwner(otherWriter))
}

// TestConflictingWriters lets another client edit the children of three
// Databases for a while (labels, annotations, StatefulSet replicas, Service
// ports, and labels that take a child out of dbkeeper's cache). dbkeeper must
// restore its own fields, keep the other writer's, keep every password, and
// not hot-loop: once the other writer stops, the reconcile counter and the
// child writes must stand still, and the fight must not flood the log with
// errors.
func TestConflictingWriters(t *testing.T) {
	h := env(t)
	const ns = "conflict"
	h.createNamespace(t, ns)
	rnd := newRand(t)
	duration, quietFor := 15*time.Second, 5*time.Second
	if long() {
		duration, quietFor = 60*time.Second, 10*time.Second
	}
	ctx := context.Background()
	m := h.startManager(t, "conflict")
	names := []string{"alpha", "beta", "gamma"}
	for i, name := range names {
		db := newDatabase(ns, name, []dbv1.Engine{dbv1.EnginePostgres, dbv1.EngineMySQL}[i%2], dbv1.DeletionPolicyRetain)
		if i == 0 {
			// Grown below, so that its claim template no longer matches
			// the spec: applying over it blindly would be refused.
			db.Spec.Storage.Size = ptr.To(resource.MustParse("1Gi"))
		}
		if _, err := h.createDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	h.waitReady(t, ns, 90*time.Second)
	if _, err := h.patchDatabase(ctx, ns, names[0], `{"spec":{"storage":{"size":"2Gi"}}}`); err != nil {
		t.Fatal(err)
	}
	h.waitReady(t, ns, 90*time.Second)
	h.waitChildren(t, expectation{namespace: ns}, 30*time.Second)
	quiet(t, m, 3*time.Second, 30*time.Second)

	before := mustScrape(t, m)
	_, logOffset, err := logLevels(m.LogFile, ns, 0)
	if err != nil {
		t.Fatal(err)
	}

	// The other writer.
	var (
		mu      sync.Mutex
		done    = map[string]int{}
		failed  = map[string]int{}
		ownDone = map[string]map[string]bool{} // edit name -> Databases
		total   int
	)
	began := time.Now()
	for n := 0; time.Since(began) < duration; n++ {
		e := edits[rnd.IntN(len(edits))]
		db := names[rnd.IntN(len(names))]
		err := e.do(ctx, h, ns, db, n)
		mu.Lock()
		total++
		if err != nil {
			failed[e.name]++
			t.Logf("edit %q of %s: %v", e.name, db, err)
		} else {
			done[e.name]++
			if e.own {
				if ownDone[e.name] == nil {
					ownDone[e.name] = map[string]bool{}
				}
				ownDone[e.name][db] = true
			}
		}
		mu.Unlock()
		time.Sleep(time.Duration(100+rnd.IntN(200)) * time.Millisecond)
	}
	fought := time.Since(began)
	during := mustScrape(t, m)
	levels, _, err := logLevels(m.LogFile, ns, logOffset)
	if err != nil {
		t.Fatal(err)
	}

	// Convergence: every field dbkeeper owns restored.
	settled := time.Now()
	h.waitReady(t, ns, 90*time.Second)
	h.waitChildren(t, expectation{namespace: ns}, 60*time.Second)
	converge := time.Since(settled)

	// The other writer's own fields are kept.
	for db := range ownDone["label the StatefulSet"] {
		sts := &appsv1.StatefulSet{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, sts); err != nil {
			t.Fatal(err)
		}
		if _, ok := sts.Labels[otherLabel]; !ok {
			t.Errorf("StatefulSet %s lost the other writer's label %s", db, otherLabel)
		}
	}
	for db := range ownDone["annotate the client Service"] {
		svc := &corev1.Service{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, svc); err != nil {
			t.Fatal(err)
		}
		if _, ok := svc.Annotations[otherAnnotation]; !ok {
			t.Errorf("Service %s lost the other writer's annotation %s", db, otherAnnotation)
		}
	}
	for db := range ownDone["add a port to the client Service"] {
		svc := &corev1.Service{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, svc); err != nil {
			t.Fatal(err)
		}
		if !hasPort(svc, otherPortName, otherPort) {
			t.Errorf("Service %s lost the other writer's port %s: %+v", db, otherPortName, svc.Spec.Ports)
		}
	}

	// No hot loop: once the fight is over, the reconcile counter stands
	// still (other tests' namespaces, still being deleted, may move it for
	// a while), and nothing is written.
	rest := mustScrape(t, m)
	quiet(t, m, quietFor, 90*time.Second)
	after := mustScrape(t, m)
	restReconciles := reconciles(after) - reconciles(rest)
	restWrites := metric(after, "dbkeeper_child_writes_total") - metric(rest, "dbkeeper_child_writes_total")
	if restWrites != 0 {
		t.Errorf("at rest after the fight: %.0f child writes; want none (hot loop)", restWrites)
	}
	fightReconciles := reconciles(during) - reconciles(before)
	fightWrites := metric(during, "dbkeeper_child_writes_total") - metric(before, "dbkeeper_child_writes_total")
	fightErrors := reconcileErrors(during) - reconcileErrors(before)
	// Each edit sets off the reconcile of its own event, of dbkeeper's
	// restoring write, and of the pods and claims a scale-up makes: a few
	// dozen at most. A hot loop would be thousands.
	if limit := float64(30 * total); fightReconciles > limit {
		t.Errorf("%.0f reconciles for %d edits: more than %.0f (hot loop)", fightReconciles, total, limit)
	}
	if fightWrites > float64(2*total) {
		t.Errorf("%.0f child writes for %d edits: dbkeeper wrote more than twice per edit", fightWrites, total)
	}
	if levels["error"] > total {
		t.Errorf("%d error lines about %s in the manager log for %d edits (flood)", levels["error"], ns, total)
	}
	if n, names := h.rec.passwordChanges(ns); n > 0 {
		t.Errorf("passwords changed %d times: %v", n, names)
	}
	summary := make([]string, 0, len(edits))
	for _, e := range edits {
		summary = append(summary, fmt.Sprintf("%s: %d (%d failed)", e.name, done[e.name], failed[e.name]))
	}
	t.Logf("FIGURES conflicting writers: %d edits in %s (%s); dbkeeper during the fight: %.0f reconciles (%.0f errors, any namespace), %.0f child writes, log lines about the namespace by level %v; converged %s after; then no reconcile for %s (%.0f reconciles, %.0f writes until then)",
		total, fought.Round(time.Second), strings.Join(summary, "; "), fightReconciles, fightErrors, fightWrites, levels, converge.Round(100*time.Millisecond), quietFor, restReconciles, restWrites)
	h.deleteNamespace(t, ns)
}

func hasPort(svc *corev1.Service, name string, port int32) bool {
	for _, p := range svc.Spec.Ports {
		if p.Name == name && p.Port == port {
			return true
		}
	}
	return false
}

// reconcileErrors returns the Database controller's failed reconciles.
func reconcileErrors(text string) float64 {
	return metric(text, "controller_runtime_reconcile_total", `controller="database"`, `result="error"`)
}

// quiet waits until the manager's reconcile counter has not moved for
// window, or fails after timeout.
func quiet(t *testing.T, m *localrun.Manager, window, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := reconciles(mustScrape(t, m))
	since := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		now := reconciles(mustScrape(t, m))
		if now != last {
			last, since = now, time.Now()
			continue
		}
		if time.Since(since) >= window {
			return
		}
	}
	t.Fatalf("the manager kept reconciling for %s", timeout)
}
