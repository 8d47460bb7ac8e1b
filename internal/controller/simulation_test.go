package controller

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// The simulation drives the real replication reconcile
// ((*DatabaseReconciler).reconcileReplication) against the model agents
// of sim_agent_test.go, on a virtual clock, with faults from a seeded
// random schedule, and checks after every step:
//
//  1. at most one server accepts writes;
//  2. at most one pod is labelled primary;
//  3. no two servers were ever writable on the same timeline (two
//     promotions from one timeline: Patroni #1251), and no agent was told
//     to re-clone (a wipe without a proven fork). Acknowledged commits a
//     promoted standby never received are lost by design (asynchronous
//     replication): they are counted, not failed on;
//  4. status.term never decreases, and no agent accepts a Spec of a term
//     above the persisted status.term;
//  5. liveness: once the faults of a run end (heal), writes resume, on the
//     Database's current primary with no change of primary under way,
//     within livenessBound.
//
// Every run is reproducible from its seed: DBKEEPER_SIM_SEED=<n> reruns
// one and logs its whole trace (with -v when it passes).

// Environment of the simulation.
const (
	simSeedsEnv = "DBKEEPER_SIM_SEEDS"
	simStepsEnv = "DBKEEPER_SIM_STEPS"
	simSeedEnv  = "DBKEEPER_SIM_SEED"
	simLongEnv  = "DBKEEPER_FAULTS"
)

// simHarness is one run: the API state in a fake client, the model
// agents, the controller (and, after a restart, the previous one for a
// few steps).
type simHarness struct {
	t     testing.TB
	seed  uint64
	rng   *rand.Rand
	c     client.Client
	key   client.ObjectKey
	r     *DatabaseReconciler
	old   *DatabaseReconciler
	rec   *events.FakeRecorder
	w     *simWorld
	n     int
	step  int
	start time.Time
	// oldUntil is the last step the previous controller still reconciles.
	oldUntil int
	// downUntil, readyAt: per ordinal, the step its deleted pod comes
	// back, and the step a recreated pod turns ready.
	downUntil, readyAt map[int]int

	trace      []string
	violations []string
	// acked are the acknowledged commits, by record id.
	acked map[int]string
	// lost are the acknowledged commits a promotion left behind.
	lost map[int]bool
	// owner is, per timeline, the ordinal first writable on it.
	owner    map[uint32]int
	lastTerm int64
	// term is the persisted status.term.
	term int64
	// calls is how many of w.calls were traced.
	calls int
	// counts are what happened, for the summary: promotions, faults.
	counts map[string]int
	// synchronous makes a lost acknowledged commit a violation.
	synchronous bool
	// orderedReady: simOptions.orderedReady.
	orderedReady bool
}

// simOptions shape a run.
type simOptions struct {
	replicas int
	faults   bool
	// promoteDelay is a fixed promotion time; 0 draws 0-8 s.
	promoteDelay time.Duration
	// promoteInstantly makes every promotion finish as it is asked for.
	promoteInstantly bool
	// failoverTimeout is spec.failoverTimeout; 0 leaves the default.
	failoverTimeout time.Duration
	// synchronous is spec.synchronous.standbys, 0 for asynchronous
	// replication. With it, an acknowledged commit that a promoted server
	// lacks is a violation; clients write only to a primary that runs
	// with the quorum (the Database's first commits, before its first
	// primary spec, are asynchronous: not modelled).
	synchronous int32
	// orderedReady models the StatefulSet's pod management OrderedReady
	// of earlier releases: a deleted pod is recreated only once every
	// lower ordinal's pod exists and is ready. By default, Parallel: as
	// soon as the StatefulSet controller sees it gone.
	orderedReady bool
}

func newSimHarness(t testing.TB, seed uint64, o simOptions) *simHarness {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// A plain object tracker: the default one manages fields at every
	// write, which takes most of a step's time.
	tracker := clienttesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	h := &simHarness{}
	// The persisted status.term, as every status write leaves it.
	written := func(obj client.Object, err error) error {
		if db, ok := obj.(*dbv1.Database); ok && err == nil {
			h.term = db.Status.Term
		}
		return err
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjectTracker(tracker).WithStatusSubresource(&dbv1.Database{}, &corev1.Pod{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				return written(obj, c.SubResource(sub).Update(ctx, obj, opts...))
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				return written(obj, c.SubResource(sub).Patch(ctx, obj, patch, opts...))
			},
		}).Build()
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace("sim")))
	db.Spec.Replicas = ptr.To(int32(o.replicas))
	db.UID = ""
	if o.failoverTimeout > 0 {
		db.Spec.FailoverTimeout = &metav1.Duration{Duration: o.failoverTimeout}
	}
	if o.synchronous > 0 {
		db.Spec.Synchronous = &dbv1.SynchronousReplication{Standbys: o.synchronous}
	}
	ctx := context.Background()
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	createInstanceSecret(t, ctx, c, db)
	*h = simHarness{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), c: c, key: client.ObjectKeyFromObject(db), n: o.replicas,
		start: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), downUntil: map[int]int{}, readyAt: map[int]int{},
		acked: map[int]string{}, lost: map[int]bool{}, owner: map[uint32]int{1: 0}, counts: map[string]int{},
		synchronous: o.synchronous > 0, orderedReady: o.orderedReady,
	}
	w := &simWorld{now: h.start, db: db.Name, ip: map[string]int{}, delayNext: map[string]time.Duration{}, rng: rand.New(rand.NewPCG(seed, 0xa9e7)),
		host: func(pod string) string { return podHost(db, pod) }}
	if o.faults {
		w.faults = simFaults{statusFail: 0.05, applyFail: 0.04, applyLate: 0.04, applyLostAnswer: 0.03, lateMax: 20 * time.Second}
	}
	w.promoteDelay = func() time.Duration {
		if o.promoteInstantly {
			return 0
		}
		if o.promoteDelay > 0 {
			return o.promoteDelay
		}
		if w.rng.IntN(5) == 0 {
			return 0
		}
		return time.Duration(w.rng.Int64N(int64(8 * time.Second)))
	}
	w.trace = h.logf
	w.termNow = h.persistedTerm
	w.onAccept = h.accepted
	w.onCommit = func(s *simServer, rec simRecord) {
		h.acked[rec.id] = fmt.Sprintf("%d on tl%d", s.ordinal, rec.timeline)
	}
	w.onWritable = h.writable
	w.onDiscard = func(what string) { h.violate("%s", what) }
	// Ordinal 0 initialized itself and runs as primary; the others hold
	// the same data and wait for a spec.
	h.w = w
	wal := []simRecord{{id: -3, timeline: 1}, {id: -2, timeline: 1}, {id: -1, timeline: 1}}
	for i := range o.replicas {
		s := &simServer{ordinal: i, up: true, phase: instance.PhaseRunning, inRecovery: i != 0, timeline: 1, wal: slices.Clone(wal), heldTerm: -1}
		w.servers = append(w.servers, s)
		w.ip[simIP(i)] = i
		h.addPod(i, true)
	}
	h.r = h.newReconciler()
	return h
}

func simIP(ordinal int) string { return "10.245.0." + strconv.Itoa(10+ordinal) }

func (h *simHarness) newReconciler() *DatabaseReconciler {
	if h.rec == nil {
		h.rec = events.NewFakeRecorder(1000)
	}
	return withTestKeys(&DatabaseReconciler{Client: h.c, APIReader: h.c, Recorder: h.rec, Agents: h.w, Now: func() time.Time { return h.w.now }})
}

func (h *simHarness) podName(ordinal int) string { return h.key.Name + "-" + strconv.Itoa(ordinal) }

func (h *simHarness) addPod(ordinal int, ready bool) {
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.key.Namespace, Name: h.podName(ordinal), Labels: desired.SelectorLabels(&dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: h.key.Name}})},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6"}}},
	}
	if err := h.c.Create(ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: simIP(ordinal)}
	if err := h.c.Status().Update(ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	h.setReady(ordinal, ready)
}

// setReady sets a pod's Ready condition, changed now.
func (h *simHarness) setReady(ordinal int, ready bool) {
	ctx := context.Background()
	pod := &corev1.Pod{}
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: h.key.Namespace, Name: h.podName(ordinal)}, pod); err != nil {
		return // deleted
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	if c := podReadyCondition(pod); c != nil && c.Status == status {
		return
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(h.w.now)}}
	if err := h.c.Status().Update(ctx, pod); err != nil {
		h.t.Fatal(err)
	}
}

func podReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func (h *simHarness) database() *dbv1.Database {
	db := &dbv1.Database{}
	if err := h.c.Get(context.Background(), h.key, db); err != nil {
		h.t.Fatal(err)
	}
	return db
}

func (h *simHarness) persistedTerm() int64 { return h.term }

func (h *simHarness) logf(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf("  %7.1fs ", h.w.now.Sub(h.start).Seconds())+fmt.Sprintf(format, args...))
}

func (h *simHarness) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.logf("VIOLATION: %s", msg)
	h.violations = append(h.violations, fmt.Sprintf("step %d: %s", h.step, msg))
}

// accepted checks invariants 3 and 4 on a Spec an agent accepted.
func (h *simHarness) accepted(pod string, spec instance.Spec) {
	if term := h.persistedTerm(); spec.Term > term {
		h.violate("%s accepted a %s spec of term %d above the persisted status.term %d", pod, spec.Role, spec.Term, term)
	}
	if spec.Reclone != "" {
		h.violate("%s was told to re-clone (%q) with no annotation authorising it", pod, spec.Reclone)
	}
}

// writable checks invariant 3 when a server becomes writable, and counts
// the acknowledged commits it never received.
func (h *simHarness) writable(s *simServer) {
	if o, ok := h.owner[s.timeline]; ok {
		h.violate("orders-%d promoted to timeline %d, which orders-%d was promoted to before: two histories on one timeline", s.ordinal, s.timeline, o)
	}
	h.owner[s.timeline] = s.ordinal
	h.counts["promotions"]++
	have := map[int]bool{}
	for _, r := range s.wal {
		have[r.id] = true
	}
	n := 0
	for id := range h.acked {
		if !have[id] && !h.lost[id] {
			h.lost[id] = true
			n++
		}
	}
	switch {
	case n > 0 && h.synchronous:
		h.violate("orders-%d became writable without %d acknowledged commits: synchronous replication lost them", s.ordinal, n)
	case n > 0:
		h.logf("orders-%d promoted without %d acknowledged commits it never received (asynchronous replication)", s.ordinal, n)
	}
}

// check runs invariants 1, 2 and the term's monotony.
func (h *simHarness) check(when string) {
	var writable []int
	for _, s := range h.w.servers {
		if s.writable() {
			writable = append(writable, s.ordinal)
		}
	}
	if len(writable) > 1 {
		h.violate("%s: servers %v accept writes at once", when, writable)
	}
	pods := &corev1.PodList{}
	if err := h.c.List(context.Background(), pods, client.InNamespace(h.key.Namespace)); err != nil {
		h.t.Fatal(err)
	}
	var labelled []string
	for _, p := range pods.Items {
		if p.Labels[replication.RoleLabel] == string(replication.RolePrimary) {
			labelled = append(labelled, p.Name)
		}
	}
	if len(labelled) > 1 {
		h.violate("%s: pods %v are labelled primary", when, labelled)
	}
	if term := h.persistedTerm(); term < h.lastTerm {
		h.violate("%s: status.term went from %d down to %d", when, h.lastTerm, term)
	} else {
		h.lastTerm = term
	}
}

// reconcile runs the roles' reconcile of r once and writes its status
// fields as the status write would, on the Database as read: the next
// reconcile reads what this one wrote.
func (h *simHarness) reconcile(r *DatabaseReconciler, who string) {
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := h.c.List(ctx, pods, client.InNamespace(h.key.Namespace)); err != nil {
		h.t.Fatal(err)
	}
	db := h.database()
	before := db.Status.DeepCopy()
	spec := db.DeepCopy()
	s := &scope{db: db, spec: spec, wantReplicas: *spec.Spec.Replicas,
		obs: observation{generation: 1, spec: spec, pods: pods.Items, replicas: *spec.Spec.Replicas}}
	holdPrimary(s)
	h.w.mu.Lock()
	h.w.statusFails = map[int]bool{}
	for i := range h.n {
		if h.rng.Float64() < h.w.faults.statusFail {
			h.w.statusFails[i] = true
		}
	}
	h.w.mu.Unlock()
	s.obs.replication = r.reconcileReplication(ctx, s)
	status := s.db.Status.DeepCopy()
	setReplicationStatus(status, s.obs)
	for i := range status.Conditions {
		if prev := meta.FindStatusCondition(before.Conditions, status.Conditions[i].Type); prev == nil || prev.Status != status.Conditions[i].Status {
			status.Conditions[i].LastTransitionTime = metav1.NewTime(h.w.now)
		}
	}
	if !equality.Semantic.DeepEqual(*status, s.db.Status) {
		s.db.Status = *status
		if err := h.c.Status().Update(ctx, s.db); err != nil {
			h.t.Fatalf("writing the status: %v", err)
		}
	}
	line := fmt.Sprintf("%s reconciled: current %q target %q term %d/%d", who, status.CurrentPrimary, status.TargetPrimary, status.Term, status.PrimaryTerm)
	if len(h.w.statusFails) > 0 {
		line += fmt.Sprintf("; status polls failed: %v", slices.Sorted(maps.Keys(h.w.statusFails)))
	}
	if c := s.obs.replication.change; c != nil {
		line += fmt.Sprintf("; %s: %s", c.reason, c.message)
	}
	h.logf("%s", line)
	for _, c := range h.w.calls[h.calls:] {
		h.logf("    → %s %s up=%s term=%d lease=%d: %s", c.pod, c.spec.Role, podOfHost(c.spec.Upstream), c.spec.Term, c.spec.LeaseSeconds, c.outcome)
	}
	h.calls = len(h.w.calls)
	h.counts["status polls failed"] += len(h.w.statusFails)
	for {
		select {
		case e := <-h.rec.Events:
			h.logf("    event %s", e)
			if f := strings.Fields(e); len(f) > 1 {
				h.counts["event "+f[1]]++
			}
			continue
		default:
		}
		break
	}
}

// recreate brings back the deleted pod of ordinal i, as the StatefulSet
// does.
func (h *simHarness) recreate(i int) {
	w := h.w
	delete(h.downUntil, i)
	s := w.servers[i]
	// The pod is recreated: its agent starts again with the data
	// and the state file it had.
	wasPrimary := !s.inRecovery && !s.fenced && s.promoteAt.IsZero()
	s.up, s.spec, s.streaming, s.upstream, s.promoteAt, s.slots, s.lease = true, nil, false, "", time.Time{}, nil, time.Time{}
	s.inRecovery = true
	switch {
	case wasPrimary:
		// A primary with standbys is held stopped until a spec: a
		// primary spec starts it writable on its own timeline,
		// without a promotion that would make a new one.
		s.phase, s.held = instance.PhaseStopped, true
	case !s.fenced:
		s.phase = instance.PhaseRunning
	}
	h.addPod(i, false)
	h.readyAt[i] = h.step + 1 + h.rng.IntN(3)
	h.logf("orders-%d recreated", i)
}

// faults draws this step's faults.
func (h *simHarness) faults() {
	w := h.w
	for i, until := range h.downUntil {
		if h.step >= until && !h.heldBack(i) {
			h.recreate(i)
		}
	}
	for i, at := range h.readyAt {
		if h.step >= at {
			delete(h.readyAt, i)
			h.setReady(i, true)
		}
	}
	pick := h.rng.IntN(h.n)
	s := w.servers[pick]
	switch r := h.rng.Float64(); {
	case r < 0.015 && s.up && !s.cut:
		s.cut, s.isolated = true, h.rng.IntN(2) == 0
		if h.rng.IntN(2) == 0 {
			h.setReady(pick, false)
		}
		h.logf("orders-%d cut from the network (isolated from its peers too: %v)", pick, s.isolated)
		h.counts["network cuts"]++
	case r < 0.065 && s.cut:
		s.cut, s.isolated = false, false
		h.setReady(pick, true)
		h.logf("orders-%d reachable again", pick)
	case r < 0.075 && s.up && len(h.downUntil) < h.n-1:
		if err := h.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.key.Namespace, Name: h.podName(pick)}}); err != nil {
			h.t.Fatal(err)
		}
		if s.writable() || !s.promoteAt.IsZero() {
			h.logf("orders-%d (writable or promoting) deleted: its server stops", pick)
		} else {
			h.logf("orders-%d deleted: its server stops", pick)
		}
		s.up, s.streaming, s.promoteAt = false, false, time.Time{}
		if !s.fenced {
			s.phase = instance.PhaseStopped
		}
		s.cut, s.isolated = false, false
		h.downUntil[pick] = h.step + 1 + h.rng.IntN(15)
		h.counts["pod deletions"]++
	case r < 0.105 && s.up && !s.cut:
		ready := h.rng.IntN(2) == 0
		h.setReady(pick, ready)
		h.logf("orders-%d Ready=%v", pick, ready)
	case r < 0.115:
		// A user asks for a switchover (spec.primary), or takes it back.
		db := h.database()
		db.Spec.Primary = ""
		if h.rng.IntN(3) != 0 {
			db.Spec.Primary = h.podName(pick)
		}
		if err := h.c.Update(context.Background(), db); err != nil {
			h.t.Fatal(err)
		}
		h.logf("spec.primary = %q", db.Spec.Primary)
		h.counts["spec.primary changes"]++
	case r < 0.12:
		h.old, h.oldUntil = h.r, h.step+h.rng.IntN(4)
		h.r = h.newReconciler()
		h.logf("the controller restarts (a new leader with no memory; the old one runs %d more steps)", h.oldUntil-h.step)
		h.counts["controller restarts"]++
	}
}

// heldBack reports whether the StatefulSet holds back the recreation of
// the pod of ordinal: with OrderedReady, while a lower ordinal's pod is
// missing or not ready.
func (h *simHarness) heldBack(ordinal int) bool {
	if !h.orderedReady {
		return false
	}
	for i := range ordinal {
		pod := &corev1.Pod{}
		if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: h.key.Namespace, Name: h.podName(i)}, pod); err != nil {
			return true
		}
		if c := podReadyCondition(pod); c == nil || c.Status != corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// probe sets every pod's Ready condition as its readiness probe would:
// ready while its server runs as a writable primary or a streaming
// standby.
func (h *simHarness) probe() {
	for _, s := range h.w.servers {
		if s.up {
			h.setReady(s.ordinal, s.phase == instance.PhaseRunning && !s.fenced && (s.writable() || s.streaming) && !s.cut)
		}
	}
}

// livenessBound is how soon after the last fault writes must resume
// (docs/replication.md §21): a failover (spec.failoverTimeout 30 s, the
// old primary's lease and margin), a change of primary whose target does
// not come back abandoned (promotionStuckAfter) and the failover after it,
// a switchover back to spec.primary, and the pods' restarts.
const livenessBound = 4 * time.Minute

// heal ends every fault: the network cuts, the deleted pods (recreated as
// the StatefulSet does, held back by OrderedReady), the previous
// controller; from then on the pods' Ready follows their servers (probe).
func (h *simHarness) heal() {
	for _, s := range h.w.servers {
		s.cut, s.isolated = false, false
	}
	for i := range h.downUntil {
		h.downUntil[i] = h.step
	}
	h.w.faults = simFaults{}
	h.old = nil
	h.logf("every fault healed: writes must resume within %v", livenessBound)
}

// settle runs fault-free steps of 1 s after heal until one server accepts
// writes as the Database's current primary, with no change of primary
// under way, and returns how long that took; it records a violation when
// that takes longer than bound.
func (h *simHarness) settle(bound time.Duration) time.Duration {
	healed := h.w.now
	for ; len(h.violations) == 0; h.step++ {
		h.faults0()
		h.probe()
		h.advance(time.Second)
		db := h.database()
		if p := ordinalOf(db.Status.CurrentPrimary); db.Status.TargetPrimary == "" && p >= 0 && p < h.n && h.w.servers[p].writable() {
			return h.w.now.Sub(healed)
		}
		if h.w.now.Sub(healed) > bound {
			h.violate("liveness: no writes %v after every fault healed (current %q, target %q, term %d/%d)",
				bound, db.Status.CurrentPrimary, db.Status.TargetPrimary, db.Status.Term, db.Status.PrimaryTerm)
		}
	}
	return h.w.now.Sub(healed)
}

// faults0 recreates the deleted pods whose time has come, and draws no
// new fault.
func (h *simHarness) faults0() {
	for i, until := range h.downUntil {
		if h.step >= until && !h.heldBack(i) {
			h.recreate(i)
		}
	}
}

// run takes steps, stopping at the first violation.
func (h *simHarness) run(steps int, faults bool) {
	for h.step = 0; h.step < steps && len(h.violations) == 0; h.step++ {
		dt := 500 * time.Millisecond
		// The first steps are fault-free: the controller adopts ordinal 0
		// (which, restarted before that, would come back as the single
		// primary it was, not modelled here) and the standbys stream.
		if faults && h.step >= 10 {
			dt = time.Duration(100+h.rng.IntN(5900)) * time.Millisecond
			h.faults()
		}
		h.advance(dt)
	}
}

// advance moves the world by dt, then reconciles (with the previous
// controller too while it still runs), checking the invariants after each.
func (h *simHarness) advance(dt time.Duration) {
	h.w.mu.Lock()
	h.w.now = h.w.now.Add(dt)
	h.w.tick(func(s *simServer) int {
		if h.synchronous && s.sync == nil {
			return 0 // no client before the primary runs with its quorum
		}
		return h.rng.IntN(3)
	})
	h.w.mu.Unlock()
	h.logf("step %d:%s", h.step, h.w.describe())
	if slices.ContainsFunc(h.w.servers, (*simServer).writable) {
		h.counts["steps with a writable server"]++
	}
	h.check("after the world moved")
	if h.old != nil && h.step <= h.oldUntil && h.rng.IntN(2) == 0 {
		h.reconcile(h.old, "the old controller")
		h.check("after the old controller")
	}
	h.reconcile(h.r, "the controller")
	h.check("after the reconcile")
}

// report is the failure's trace: the seed and the last lines.
func (h *simHarness) report(lines int) string {
	tail := h.trace[max(0, len(h.trace)-lines):]
	return fmt.Sprintf("seed %d: %s\n%s", h.seed, strings.Join(h.violations, "; "), strings.Join(tail, "\n"))
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// TestSimulation runs the controller against the model agents for many
// seeds, with faults, and fails on any violation of the invariants above.
func TestSimulation(t *testing.T) {
	simulate(t, func(seed uint64) simOptions { return simOptions{replicas: 2 + int(seed%2), faults: true} })
}

// TestSimulationSynchronous is TestSimulation with spec.synchronous: ANY 1
// of the standbys, or with 3 pods ANY 2 on every third seed; besides the
// invariants above, no server becomes writable without every commit a
// client was acknowledged for (invariant 3 without its asynchronous
// exception), checked at every step.
func TestSimulationSynchronous(t *testing.T) {
	simulate(t, func(seed uint64) simOptions {
		o := simOptions{replicas: 2 + int(seed%2), faults: true, synchronous: 1}
		if o.replicas == 3 && seed%3 == 0 {
			o.synchronous = 2
		}
		return o
	})
}

// simulate runs the seeds (DBKEEPER_SIM_SEEDS, DBKEEPER_SIM_STEPS,
// DBKEEPER_SIM_SEED, DBKEEPER_FAULTS=long) with the options of each.
func simulate(t *testing.T, options func(seed uint64) simOptions) {
	seeds, steps := 30, 400
	if os.Getenv(simLongEnv) == "long" {
		seeds, steps = 500, 600
	}
	seeds, steps = envInt(t, simSeedsEnv, seeds), envInt(t, simStepsEnv, steps)
	first := uint64(1)
	if v := os.Getenv(simSeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a seed number", simSeedEnv, v)
		}
		first, seeds = n, 1
	}
	began := time.Now()
	var failed []uint64
	byKind, counts := map[string]int{}, map[string]int{}
	total, lost, acked := 0, 0, 0
	var longest time.Duration // the longest time writes took to resume after the faults healed
	for seed := first; seed < first+uint64(seeds); seed++ {
		h := newSimHarness(t, seed, options(seed))
		h.run(steps, true)
		if len(h.violations) == 0 {
			h.heal()
			took := h.settle(livenessBound)
			longest = max(longest, took)
		}
		total += h.step
		for k, v := range h.counts {
			counts[k] += v
		}
		for _, c := range h.w.calls {
			if strings.HasPrefix(c.outcome, "late") {
				counts["late specs"]++
			}
		}
		lost += len(h.lost)
		acked += len(h.acked)
		if len(h.violations) == 0 {
			if seeds == 1 {
				t.Logf("seed %d trace:\n%s", seed, strings.Join(h.trace, "\n"))
			}
			continue
		}
		failed = append(failed, seed)
		kinds := map[string]bool{}
		for _, v := range h.violations {
			kinds[violationKind(v)] = true
		}
		for k := range kinds {
			byKind[k]++
		}
		if len(failed) <= 3 || seeds == 1 {
			lines := 60
			if seeds == 1 {
				lines = len(h.trace)
			}
			t.Errorf("rerun with %s=%d: %s", simSeedEnv, seed, h.report(lines))
		}
	}
	elapsed := time.Since(began)
	t.Logf("simulation: %d seeds, %d steps (%v, %v per seed); %d acknowledged commits, %d lost by failover; writes resumed at most %v after the faults healed (bound %v); %v; %d seeds with violations %v",
		seeds, total, elapsed.Round(time.Millisecond), (elapsed / time.Duration(seeds)).Round(time.Microsecond), acked, lost, longest, livenessBound, counts, len(failed), byKind)
	if len(failed) > 0 {
		t.Errorf("violations on seeds %v", failed)
	}
}

// violationKind names a violation's invariant for the summary.
func violationKind(v string) string {
	switch {
	case strings.Contains(v, "accept writes at once"):
		return "1:two writable servers"
	case strings.Contains(v, "labelled primary"):
		return "2:two labelled primary"
	case strings.Contains(v, "one timeline"):
		return "3:two histories on one timeline"
	case strings.Contains(v, "re-clone"):
		return "3:re-clone without authorisation"
	case strings.Contains(v, "acknowledged commits of timeline"):
		return "3:acknowledged commits of a newer timeline discarded"
	case strings.Contains(v, "liveness"):
		return "5:writes did not resume"
	case strings.Contains(v, "synchronous replication lost"):
		return "3:acknowledged commits lost under synchronous replication"
	default:
		return "4:fencing term"
	}
}
