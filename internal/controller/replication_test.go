package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// fakeServer is an instance agent with a PostgreSQL server reduced to what
// the controller reads: its role, timeline, WAL positions and stream.
type fakeServer struct {
	// tlsFiles is what the agent reports of the TLS files it serves from
	// (instance.Status.TLSFiles), nil for none.
	tlsFiles   *instance.TLSFiles
	answers    bool
	spec       *instance.Spec
	phase      instance.Phase
	fenced     bool
	inRecovery bool
	timeline   uint32
	upstream   string
	streaming  bool
	lsn        replication.LSN // current (primary) or received (standby)
	stopped    replication.LSN
	slots      []string
	applied    []instance.Spec
	// streamedAt is when a standby that stopped streaming last streamed.
	streamedAt time.Time
	// leaseUntil is when the primary lease the last spec granted runs out.
	leaseUntil time.Time
	// term is the highest fencing term the agent has seen; heldTerm the
	// highest term in which it was told, or decided, not to be a primary
	// (-1 for none): only a primary spec of a later term makes it one.
	term, heldTerm int64
	// promoteTakes is how long a promotion takes: until promotedAt the
	// server stays in recovery, following nobody (a standby replaying a
	// backlog before pg_promote returns).
	promoteTakes time.Duration
	promotedAt   time.Time
	// detachTakes is how long a standby told to detach restarts: until
	// replayingUntil its server replays what it holds and refuses
	// queries, so the agent reports no WAL position.
	detachTakes    time.Duration
	replayingUntil time.Time
	// version is the server version the agent reports.
	version string
	// noFeatures is an agent of a release before Status.Features.
	noFeatures bool
	// demoteSlowly keeps a primary told to be a replica running as a
	// primary (its fast shutdown under way) until the test clears it.
	demoteSlowly bool
	// backups are its backup sidecar and store (backup_agent_test.go).
	backups *fakeBackups
	// archiving is what the agent reports of archiving (a pod with the
	// backup sidecar), nil for none.
	archiving *instance.Archiving
}

// fakeAgents are the agents of a test, by pod IP.
type fakeAgents struct {
	mu      sync.Mutex
	now     func() time.Time
	servers map[string]*fakeServer
	// hosts maps a pod's DNS name to its IP, so that a streaming standby
	// follows its upstream's timeline as a real one does.
	hosts map[string]string
}

func (f *fakeAgents) server(ip string) (*fakeServer, error) {
	s := f.servers[ip]
	if s == nil || !s.answers {
		return nil, errors.New("connection refused")
	}
	return s, nil
}

func (f *fakeAgents) Status(_ context.Context, ip string, creds instance.AgentCredentials) (*instance.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := authorize(creds); err != nil {
		return nil, err
	}
	s, err := f.server(ip)
	if err != nil {
		return nil, err
	}
	if up := f.servers[f.hosts[s.upstream]]; s.streaming && up != nil {
		s.timeline, s.lsn = up.timeline, max(s.lsn, up.lsn)
	}
	return s.status(f.now()), nil
}

func (f *fakeAgents) Apply(_ context.Context, ip string, creds instance.AgentCredentials, spec instance.Spec) (*instance.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := authorize(creds); err != nil {
		return nil, err
	}
	s, err := f.server(ip)
	if err != nil {
		return nil, err
	}
	if spec.Term < s.term {
		return nil, fmt.Errorf("PUT /spec: 409 Conflict: %w", instance.ErrStaleTerm)
	}
	if s.noFeatures && spec.Synchronous != nil {
		return nil, errors.New(`PUT /spec: 400 Bad Request: decoding the Spec: json: unknown field "synchronous"`)
	}
	s.term = spec.Term
	s.applied = append(s.applied, spec)
	s.spec = &spec
	switch spec.Role {
	case instance.RolePrimary:
		if spec.Term <= s.heldTerm {
			break // only a primary spec of a later term undoes a fence or a demotion
		}
		if s.inRecovery && s.promoteTakes > 0 {
			if s.promotedAt.IsZero() {
				s.promotedAt = f.now().Add(s.promoteTakes)
				s.upstream, s.streaming = "", false
			}
			if f.now().Before(s.promotedAt) {
				s.slots = spec.Slots
				s.leaseUntil = f.now().Add(time.Duration(spec.LeaseSeconds) * time.Second)
				break
			}
		}
		if s.inRecovery || s.fenced {
			s.timeline++
		}
		s.phase, s.fenced, s.inRecovery, s.upstream, s.streaming = instance.PhaseRunning, false, false, "", false
		s.slots = spec.Slots
		s.leaseUntil = f.now().Add(time.Duration(spec.LeaseSeconds) * time.Second)
	case instance.RoleReplica:
		s.heldTerm = max(s.heldTerm, spec.Term)
		if s.demoteSlowly && !s.inRecovery {
			break // the fast shutdown is still under way
		}
		if !s.inRecovery {
			// The shutdown checkpoint record starts at stopped.
			s.stopped = s.lsn
			s.lsn += 0x28
		}
		if spec.Upstream == "" {
			// Detached: it still names the primary it followed.
			if s.streaming {
				s.streamedAt = f.now()
			}
			if prev := s.applied[:len(s.applied)-1]; s.detachTakes > 0 &&
				(len(prev) == 0 || prev[len(prev)-1].Role != instance.RoleReplica || prev[len(prev)-1].Upstream != "") {
				s.replayingUntil = f.now().Add(s.detachTakes)
			}
			s.inRecovery, s.streaming = true, false
			break
		}
		s.inRecovery, s.upstream, s.streaming = true, spec.Upstream, true
	case instance.RoleFenced:
		s.phase, s.fenced, s.heldTerm = instance.PhaseFenced, true, s.term
	}
	return s.status(f.now()), nil
}

func (s *fakeServer) status(now time.Time) *instance.Status {
	st := &instance.Status{Phase: s.phase, Spec: s.spec, Fenced: s.fenced, InRecovery: s.inRecovery,
		Timeline: s.timeline, Upstream: s.upstream, Streaming: s.streaming, Term: s.term, ServerVersion: s.version,
		Held: s.spec != nil && s.spec.Role == instance.RolePrimary && s.spec.Term <= s.heldTerm,
		TLS:  true, TLSFiles: s.tlsFiles} // an agent of this release, whose server runs TLS
	if !s.noFeatures {
		st.Features = []string{instance.FeatureSynchronous}
	}
	switch {
	case s.streaming:
		st.LastStreamedSecondsAgo = ptr.To(0.0)
	case !s.streamedAt.IsZero():
		st.LastStreamedSecondsAgo = ptr.To(now.Sub(s.streamedAt).Seconds())
	}
	switch {
	case now.Before(s.replayingUntil):
		st.Error = "querying the server: the database system is not yet accepting connections"
	case s.inRecovery:
		st.ReceiveLSN, st.ReplayLSN = s.lsn.String(), s.lsn.String()
	default:
		st.CurrentLSN = s.lsn.String()
		for _, slot := range s.slots {
			st.Standbys = append(st.Standbys, instance.Standby{Slot: slot, Active: true, WALStatus: "reserved"})
		}
	}
	if s.stopped != 0 {
		st.StoppedLSN = s.stopped.String()
	}
	if s.archiving != nil {
		a := *s.archiving
		st.Archiving = &a
	}
	return st
}

// replicationFixture is a 3-replica Database's pods in the test API server,
// their agents, and a controller on a clock the test moves.
type replicationFixture struct {
	t      *testing.T
	c      client.Client
	r      *DatabaseReconciler
	db     *dbv1.Database
	agents *fakeAgents
	now    time.Time
	// live is the StatefulSet the reconcile observed, nil for none.
	live *appsv1.StatefulSet
}

func newReplicationFixture(t *testing.T) *replicationFixture {
	t.Helper()
	c, namespace := newTestClient(t, "replication")
	ctx := context.Background()
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(namespace)))
	db.Spec.Replicas = ptr.To[int32](3)
	f := &replicationFixture{t: t, c: c, db: db, now: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
	f.agents = &fakeAgents{servers: map[string]*fakeServer{}, hosts: map[string]string{}, now: func() time.Time { return f.now }}
	f.r = withTestKeys(&DatabaseReconciler{Client: c, APIReader: c, Recorder: &events.FakeRecorder{}, Agents: f.agents, Now: func() time.Time { return f.now }})
	createInstanceSecret(t, ctx, c, db)
	for i := range 3 {
		f.addPod(i)
		f.agents.hosts[podHost(db, db.Name+"-"+strconv.Itoa(i))] = f.ip(i)
	}
	// Ordinal 0 initialized itself and runs as primary; the others wait
	// for a spec.
	f.agents.servers[f.ip(0)] = &fakeServer{answers: true, phase: instance.PhaseRunning, timeline: 1, lsn: 0x3000000, heldTerm: -1, version: "17.6"}
	for i := 1; i < 3; i++ {
		f.agents.servers[f.ip(i)] = &fakeServer{answers: true, phase: instance.PhaseRunning, inRecovery: true, timeline: 1, lsn: 0x3000000, heldTerm: -1, version: "17.6"}
	}
	return f
}

func (f *replicationFixture) ip(ordinal int) string { return "10.245.0." + strconv.Itoa(10+ordinal) }

func (f *replicationFixture) addPod(ordinal int) {
	f.t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.db.Namespace, Name: f.db.Name + "-" + strconv.Itoa(ordinal), Labels: desired.SelectorLabels(f.db)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6"}}},
	}
	if err := f.c.Create(ctx, pod); err != nil {
		f.t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: f.ip(ordinal), Conditions: []corev1.PodCondition{{
		Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(f.now.Add(-time.Hour)),
	}}}
	if err := f.c.Status().Update(ctx, pod); err != nil {
		f.t.Fatal(err)
	}
}

// labelPods sets the label key to value on every pod of the fixture.
func (f *replicationFixture) labelPods(key, value string) {
	f.t.Helper()
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.InNamespace(f.db.Namespace)); err != nil {
		f.t.Fatal(err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Labels[key] = value
		if err := f.c.Patch(ctx, pod, patch); err != nil {
			f.t.Fatal(err)
		}
	}
}

// setNotReady sets a pod's Ready condition False, changed at the fixture's now.
func (f *replicationFixture) setNotReady(ordinal int) {
	f.t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.db.Namespace, Name: f.db.Name + "-" + strconv.Itoa(ordinal)}, pod); err != nil {
		f.t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(f.now)}}
	if err := f.c.Status().Update(ctx, pod); err != nil {
		f.t.Fatal(err)
	}
}

// losePrimary cuts ordinal 0, the primary, off: its agent stops answering,
// and the standbys among the first pods stop streaming from it now.
func (f *replicationFixture) losePrimary(pods int) {
	f.agents.servers[f.ip(0)].answers = false
	for i := 1; i < pods; i++ {
		f.agents.servers[f.ip(i)].streaming = false
		f.agents.servers[f.ip(i)].streamedAt = f.now
	}
}

// reconcile runs the roles' reconcile once and stores its status fields as
// the status write would; it returns the observation.
func (f *replicationFixture) reconcile() replicationObservation {
	f.t.Helper()
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.InNamespace(f.db.Namespace)); err != nil {
		f.t.Fatal(err)
	}
	// As Reconcile does: the spec's replicas, then the StatefulSet's,
	// held up to the primary's ordinal.
	spec := f.db.DeepCopy()
	s := &scope{db: f.db, spec: spec, wantReplicas: *spec.Spec.Replicas,
		obs: observation{generation: 1, spec: spec, pods: pods.Items, replicas: *spec.Spec.Replicas}}
	holdPrimary(s)
	s.obs.statefulSet.live = f.live
	s.obs.replication = f.r.reconcileReplication(ctx, s)
	status := f.db.Status.DeepCopy()
	setReplicationStatus(status, s.obs)
	// The clock of the conditions' transition times is the test's.
	for i := range status.Conditions {
		if prev := meta.FindStatusCondition(f.db.Status.Conditions, status.Conditions[i].Type); prev == nil || prev.Status != status.Conditions[i].Status {
			status.Conditions[i].LastTransitionTime = metav1.NewTime(f.now)
		}
	}
	f.db.Status = *status
	f.checkOnePrimaryLabel()
	return s.obs.replication
}

// roles returns each pod's role label, by ordinal.
func (f *replicationFixture) roles() []string {
	f.t.Helper()
	pods := &corev1.PodList{}
	if err := f.c.List(context.Background(), pods, client.InNamespace(f.db.Namespace)); err != nil {
		f.t.Fatal(err)
	}
	out := make([]string, 3)
	for _, p := range pods.Items {
		out[ordinalOf(p.Name)] = p.Labels[replication.RoleLabel]
	}
	return out
}

func (f *replicationFixture) checkOnePrimaryLabel() {
	f.t.Helper()
	n := 0
	for _, r := range f.roles() {
		if r == string(replication.RolePrimary) {
			n++
		}
	}
	if n > 1 {
		f.t.Fatalf("%d pods labelled primary: %v", n, f.roles())
	}
}

// reconcileUntilWritable reconciles every half second, for at most steps
// of them, until exactly ordinal is writable; it returns whether it is.
func (f *replicationFixture) reconcileUntilWritable(ordinal, steps int) bool {
	writable := func() bool { w := f.writable(); return len(w) == 1 && w[0] == ordinal }
	for range steps {
		if writable() {
			return true
		}
		f.now = f.now.Add(500 * time.Millisecond)
		f.reconcile()
	}
	return writable()
}

// writable returns the ordinals whose fake server accepts writes: a
// primary with standbys only until its lease runs out, when the agent
// fences it (none of these tests keeps a standby streaming from a primary
// whose lease ran out).
func (f *replicationFixture) writable() []int {
	var out []int
	for i := range 3 {
		s := f.agents.servers[f.ip(i)]
		if s == nil || s.inRecovery || s.fenced || s.phase != instance.PhaseRunning {
			continue
		}
		if len(s.slots) > 0 && !f.now.Before(s.leaseUntil) {
			continue
		}
		out = append(out, i)
	}
	if len(out) > 1 {
		f.t.Fatalf("at %v, %v are writable", f.now, out)
	}
	return out
}

func TestReplicationAdoptsOrdinalZeroAndStreamsTheOthers(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	obs := f.reconcile()
	if obs.currentPrimary != "orders-0" {
		t.Fatalf("currentPrimary = %q, want orders-0", obs.currentPrimary)
	}
	if got := f.roles(); fmt.Sprint(got) != "[primary replica replica]" {
		t.Errorf("roles = %v", got)
	}
	primary := f.agents.servers[f.ip(0)]
	want := instance.Spec{Role: instance.RolePrimary, Slots: []string{"dbkeeper_standby_1", "dbkeeper_standby_2"}, LeaseSeconds: 15, PromoteAbove: 1}
	if primary.spec == nil || !specEqual(*primary.spec, want) {
		t.Errorf("primary spec = %+v, want %+v", primary.spec, want)
	}
	for i := 1; i < 3; i++ {
		s := f.agents.servers[f.ip(i)]
		want := instance.Spec{Role: instance.RoleReplica, Upstream: "orders-0.orders-headless." + f.db.Namespace + ".svc", Slot: replication.SlotName(i)}
		if s.spec == nil || !specEqual(*s.spec, want) {
			t.Errorf("orders-%d spec = %+v, want %+v", i, s.spec, want)
		}
		if len(s.applied) != 1 {
			t.Errorf("orders-%d was sent %d specs over two reconciles, want 1: an unchanged spec is not sent again", i, len(s.applied))
		}
	}
	if !obs.ready || len(obs.instances) != 3 {
		t.Errorf("ReplicationReady = %v (%s), instances %+v", obs.ready, obs.message, obs.instances)
	}
	if len(f.writable()) != 1 {
		t.Errorf("writable servers: %v", f.writable())
	}
}

func TestReplicationSwitchoverPromotesOnlyAfterTheTargetReceivedEverything(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	f.db.Spec.Primary = "orders-2"

	obs := f.reconcile()
	if obs.targetPrimary != "orders-2" || obs.currentPrimary != "orders-0" {
		t.Fatalf("after the first step: current %q target %q, want orders-0 → orders-2", obs.currentPrimary, obs.targetPrimary)
	}
	if f.agents.servers[f.ip(0)].inRecovery {
		t.Fatal("the old primary was demoted before the target was recorded in the status")
	}

	// The old primary is demoted; the target lags and has not received
	// its shutdown checkpoint yet.
	f.now = f.now.Add(time.Second)
	f.agents.servers[f.ip(0)].lsn = 0x3000100
	f.agents.servers[f.ip(2)].streaming = false
	f.reconcile()
	if got := f.writable(); len(got) != 0 {
		t.Fatalf("writable during the switchover: %v, want none", got)
	}
	if got := f.roles(); got[0] == "primary" {
		t.Errorf("the old primary keeps its label while demoted: %v", got)
	}
	f.now = f.now.Add(time.Second)
	f.reconcile()
	if got := f.writable(); len(got) != 0 {
		t.Fatalf("promoted before the target received the old primary's last WAL: writable %v", got)
	}

	f.agents.servers[f.ip(2)].streaming = true
	f.now = f.now.Add(time.Second)
	// The change is committed first: a new term is stored with the target,
	// and nobody is told to promote before it is.
	term := f.db.Status.Term
	obs = f.reconcile()
	if f.db.Status.Term != term+1 || f.db.Status.TargetPrimary != "orders-2" {
		t.Fatalf("after the target caught up: term %d target %q, want term %d committed to orders-2", f.db.Status.Term, f.db.Status.TargetPrimary, term+1)
	}
	if got := f.writable(); len(got) != 0 {
		t.Fatalf("promoted before the commit was stored: writable %v", got)
	}
	f.now = f.now.Add(time.Second)
	obs = f.reconcile()
	if obs.currentPrimary != "orders-2" || obs.targetPrimary != "" || f.db.Status.PrimaryTerm != term+1 {
		t.Fatalf("after the target caught up: current %q target %q", obs.currentPrimary, obs.targetPrimary)
	}
	if got := f.writable(); fmt.Sprint(got) != "[2]" {
		t.Errorf("writable = %v, want [2]", got)
	}
	obs = f.reconcile()
	if got := f.roles(); fmt.Sprint(got) != "[replica replica primary]" {
		t.Errorf("roles = %v", got)
	}
	if up := f.agents.servers[f.ip(0)].upstream; up != podHost(f.db, "orders-2") {
		t.Errorf("the old primary streams from %q, want orders-2", up)
	}
	if c := meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionSwitchingOver); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("SwitchingOver = %+v, want False once done", c)
	}
	if n := primaryChangeCount(t, f.db, changeSwitchover); n != 1 || primaryChangeCount(t, f.db, changeFailover) != 0 {
		t.Errorf("dbkeeper_primary_changes_total{kind=switchover} = %v, want 1 and no failover", n)
	}
}

func TestReplicationFailoverFencesBeforePromoting(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	renewed := f.now

	// The primary's node is lost: its agent stops answering, the
	// standbys stop streaming.
	f.losePrimary(3)
	f.agents.servers[f.ip(2)].lsn = 0x3000080
	down := f.now
	for f.now.Before(down.Add(10 * time.Second)) {
		f.now = f.now.Add(time.Second)
		if obs := f.reconcile(); obs.targetPrimary != "" {
			t.Fatalf("failover began %v after the primary went silent, before the 30s timeout", f.now.Sub(down))
		}
	}
	var promotedAt time.Time
	for f.now.Before(down.Add(2 * time.Minute)) {
		f.now = f.now.Add(time.Second)
		f.reconcile()
		if f.db.Status.TargetPrimary == "orders-2" {
			// Once the candidate is chosen, another standby that reports
			// as much (a tie, which would go to the lower ordinal) does not
			// take its place.
			f.agents.servers[f.ip(1)].lsn = 0x3000080
		}
		if w := f.writable(); len(w) > 0 && w[0] != 0 && promotedAt.IsZero() {
			promotedAt = f.now
			if w[0] != 2 {
				t.Errorf("promoted orders-%d, want orders-2, the most advanced standby", w[0])
			}
		}
	}
	if promotedAt.IsZero() {
		t.Fatalf("no failover within two minutes: %+v", f.db.Status)
	}
	if earliest := renewed.Add(leaseTTL + fenceMargin); promotedAt.Before(earliest) || promotedAt.Before(down.Add(30*time.Second)) {
		t.Errorf("promoted at %v, before the old primary's lease certainly ran out (%v) or the timeout", promotedAt, earliest)
	}
	if f.db.Status.CurrentPrimary != "orders-2" || f.roles()[2] != "primary" || f.roles()[0] == "primary" {
		t.Errorf("after failover: current %q, roles %v", f.db.Status.CurrentPrimary, f.roles())
	}
	t.Logf("promoted %v after the primary went silent", promotedAt.Sub(down))
	if n := primaryChangeCount(t, f.db, changeFailover); n != 1 || primaryChangeCount(t, f.db, changeSwitchover) != 0 {
		t.Errorf("dbkeeper_primary_changes_total{kind=failover} = %v, want 1 and no switchover", n)
	}
	if s := f.agents.servers[f.ip(1)]; s.spec == nil || s.spec.Upstream != podHost(f.db, "orders-2") {
		t.Errorf("orders-1 follows %+v, want the new primary", s.spec)
	}

	// The old primary's node comes back: its agent fenced the server when
	// the lease ran out. It must rejoin as a standby, never as primary.
	old := f.agents.servers[f.ip(0)]
	old.answers, old.fenced, old.phase = true, true, instance.PhaseFenced
	f.now = f.now.Add(time.Second)
	f.reconcile()
	if old.spec == nil || old.spec.Role != instance.RoleReplica || old.spec.Upstream != podHost(f.db, "orders-2") {
		t.Errorf("the old primary was sent %+v, want to follow orders-2", old.spec)
	}
}

func TestReplicationRestartsAPrimaryInPlaceWithinTheTimeout(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	// The primary's server restarted: its agent starts it read-only and
	// waits to be told.
	p := f.agents.servers[f.ip(0)]
	p.inRecovery, p.spec = true, nil
	f.setNotReady(0)
	f.now = f.now.Add(2 * time.Second)
	obs := f.reconcile()
	if got := f.writable(); fmt.Sprint(got) != "[0]" || obs.targetPrimary != "" {
		t.Errorf("writable %v, target %q: want orders-0 promoted in place, no failover", got, obs.targetPrimary)
	}
}

func TestReplicationScaleDownMovesThePrimaryFirst(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	f.db.Spec.Primary = "orders-2"
	f.reconcile()
	f.agents.servers[f.ip(2)].lsn = 0x3000200
	for range 4 {
		f.now = f.now.Add(time.Second)
		f.reconcile()
	}
	if f.db.Status.CurrentPrimary != "orders-2" {
		t.Fatalf("switchover to orders-2 did not finish: %+v", f.db.Status)
	}
	f.db.Spec.Primary, f.db.Spec.Replicas = "", ptr.To[int32](1)
	for range 6 {
		f.now = f.now.Add(time.Second)
		f.reconcile()
	}
	if f.db.Status.CurrentPrimary != "orders-0" {
		c := meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionSwitchingOver)
		t.Fatalf("scaling to 1 left the primary on %s: %+v", f.db.Status.CurrentPrimary, c)
	}
	// The standbys scaled away keep their slots, and so stay ready, until
	// their pods are gone: the StatefulSet removes only ready pods, from
	// the highest ordinal down.
	primary := f.agents.servers[f.ip(0)]
	if got := fmt.Sprint(primary.spec.Slots); got != "[dbkeeper_standby_1 dbkeeper_standby_2]" {
		t.Errorf("primary's slots while orders-1 and orders-2 are still there: %s", got)
	}
	for _, ordinal := range []int{2, 1} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.db.Namespace, Name: f.db.Name + "-" + strconv.Itoa(ordinal)}}
		if err := f.c.Delete(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		f.now = f.now.Add(time.Second)
		f.reconcile()
		want := map[int]string{2: "[dbkeeper_standby_1]", 1: "[]"}[ordinal]
		if got := fmt.Sprint(primary.spec.Slots); got != want {
			t.Errorf("primary's slots once orders-%d is gone: %s, want %s", ordinal, got, want)
		}
	}
	if primary.spec.LeaseSeconds != 0 {
		t.Errorf("the primary without standbys keeps a lease of %ds", primary.spec.LeaseSeconds)
	}
}

func TestRolloutPartition(t *testing.T) {
	ready := func(names ...string) []dbv1.InstanceStatus {
		out := make([]dbv1.InstanceStatus, 0, len(names))
		for _, n := range names {
			out = append(out, dbv1.InstanceStatus{Name: n, Ready: true})
		}
		return out
	}
	sts := func(current, update string, updated int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{CurrentRevision: current, UpdateRevision: update, UpdatedReplicas: updated}}
	}
	// pods returns orders-0, -1 and -2 at the revisions given, ready
	// unless the revision ends in "?" (not ready) or "x" (being deleted).
	pods := func(revisions ...string) []corev1.Pod {
		out := make([]corev1.Pod, 0, len(revisions))
		for i, rev := range revisions {
			status := corev1.ConditionTrue
			pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("orders-%d", i)}}
			switch {
			case strings.HasSuffix(rev, "?"):
				status = corev1.ConditionFalse
			case strings.HasSuffix(rev, "x"):
				pod.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
			}
			pod.Labels = map[string]string{appsv1.ControllerRevisionHashLabelKey: strings.TrimRight(rev, "?x")}
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
			out = append(out, pod)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		mutate func(db *dbv1.Database)
		live   *appsv1.StatefulSet
		pods   []corev1.Pod
		want   int32
	}{
		{"nothing under way, the primary on ordinal 0: a change starts at the highest ordinal",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("a", "a", 3), pods("a", "a", "a"), 2},
		{"the primary elsewhere, ordinal 0 a ready standby: every pod held",
			func(db *dbv1.Database) {}, sts("a", "a", 3), pods("a", "a", "a"), 3},
		{"the primary elsewhere and a change not started: held until the switchover",
			func(db *dbv1.Database) {}, sts("a", "b", 0), pods("a", "a", "a"), 3},
		{"the switchover done, a change not started: the highest ordinal first",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("a", "b", 0), pods("a", "a", "a"), 2},
		{"the highest ordinal restarting: the others wait",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("a", "b", 1), pods("a", "a", "b?"), 2},
		{"the highest ordinal ready on the new revision: the next one",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("a", "b", 1), pods("a?", "a", "b"), 1},
		{"a standby below not ready is not restarted out of its turn",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("a", "b", 1), pods("a?", "a?", "b?"), 2},
		{"every standby ready on the new revision: the primary last",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("a", "b", 2), pods("a", "b", "b"), 0},
		{"a pod on the new revision being deleted counts as not done",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("a", "b", 2), pods("a", "b", "bx"), 2},
		{"a change under way is never held again",
			func(db *dbv1.Database) {}, sts("a", "b", 1), pods("a", "a", "b"), 1},
		{"ordinal 0 not ready: nothing held, the primary restarts in its turn",
			func(db *dbv1.Database) { db.Status.Instances = ready("orders-1", "orders-2") }, sts("a", "b", 0), pods("a", "a", "a"), 2},
		{"spec.primary keeps the primary elsewhere: nothing held",
			func(db *dbv1.Database) { db.Spec.Primary = "orders-1" }, sts("a", "b", 0), pods("a", "a", "a"), 2},
		{"no StatefulSet yet: created with the highest ordinal the first to change",
			func(db *dbv1.Database) { db.Status = dbv1.DatabaseStatus{} }, nil, nil, 2},
		{"a StatefulSet created again over older pods (its current revision the update one): the pods say the change is under way",
			func(db *dbv1.Database) { db.Status.CurrentPrimary = "orders-0" }, sts("b", "b", 0), pods("a", "a", "a"), 2},
		{"a StatefulSet created again over older pods, the primary elsewhere: held until the switchover",
			func(db *dbv1.Database) {}, sts("b", "b", 0), pods("a", "a", "a"), 3},
		{"mysql: nothing held",
			func(db *dbv1.Database) { db.Spec.Engine = dbv1.EngineMySQL }, sts("a", "b", 0), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := fixture.Defaulted(fixture.Database("orders"))
			db.Spec.Replicas = ptr.To[int32](3)
			db.Status.CurrentPrimary = "orders-1"
			db.Status.Instances = ready("orders-0", "orders-1", "orders-2")
			tc.mutate(db)
			if got := rolloutPartition(db, tc.live, tc.pods); got != tc.want {
				t.Errorf("partition = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestReplicationRollingChangeMovesThePrimaryToOrdinalZeroFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		live appsv1.StatefulSetStatus
	}{
		// A new template: the StatefulSet has a revision no pod runs yet.
		{"a new template", appsv1.StatefulSetStatus{CurrentRevision: "a", UpdateRevision: "b"}},
		// A StatefulSet created again over the pods of an earlier one
		// (statefulset.go): its current revision is already the update
		// revision; only the pods say that none runs it.
		{"a StatefulSet created again over older pods", appsv1.StatefulSetStatus{CurrentRevision: "b", UpdateRevision: "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newReplicationFixture(t)
			f.reconcile()
			f.reconcile()
			f.db.Spec.Primary = "orders-1"
			for range 4 {
				f.now = f.now.Add(time.Second)
				f.reconcile()
			}
			if f.db.Status.CurrentPrimary != "orders-1" {
				t.Fatalf("switchover to orders-1 did not finish: %+v", f.db.Status)
			}
			f.db.Spec.Primary = ""
			f.reconcile()
			if f.db.Status.TargetPrimary != "" {
				t.Fatalf("a switchover began with no change to roll: target %q", f.db.Status.TargetPrimary)
			}
			f.labelPods(appsv1.ControllerRevisionHashLabelKey, "a")
			f.live = &appsv1.StatefulSet{Status: tc.live}
			for range 4 {
				f.now = f.now.Add(time.Second)
				f.reconcile()
			}
			if f.db.Status.CurrentPrimary != "orders-0" {
				t.Errorf("the primary is %q, want orders-0, which the StatefulSet restarts last", f.db.Status.CurrentPrimary)
			}
		})
	}
}

func TestASingleServerGrownBeforeItsPodExistsWaitsForOrdinalZero(t *testing.T) {
	// A single server reports ordinal 0 as its primary before its pod
	// exists; grown to three replicas meanwhile, the controller must still
	// wait for ordinal 0 to come and accept writes, as for a new replicated
	// Database: no failover from a primary that never ran.
	f := newReplicationFixture(t)
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := f.c.List(ctx, pods, client.InNamespace(f.db.Namespace)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if err := f.c.Delete(ctx, &pods.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	f.db.Spec.Replicas = ptr.To[int32](1)
	if obs := f.reconcile(); obs.currentPrimary != "orders-0" || obs.replicated {
		t.Fatalf("single server without a pod: currentPrimary %q, replicated %v; want orders-0, not replicated", obs.currentPrimary, obs.replicated)
	}
	f.db.Spec.Replicas = ptr.To[int32](3)
	for range 60 {
		obs := f.reconcile()
		if obs.currentPrimary != "orders-0" || obs.targetPrimary != "" || obs.ready || obs.change != nil {
			t.Fatalf("at %v: current %q target %q change %+v: %s", f.now, obs.currentPrimary, obs.targetPrimary, obs.change, obs.message)
		}
		f.now = f.now.Add(time.Second)
	}
	for _, s := range f.agents.servers {
		if len(s.applied) > 0 {
			t.Fatalf("an agent was told %+v before ordinal 0 ran", s.applied)
		}
	}
	for i := range 3 {
		f.addPod(i)
	}
	f.reconcile()
	f.reconcile()
	if got := f.roles(); fmt.Sprint(got) != "[primary replica replica]" {
		t.Errorf("roles once the pods run = %v", got)
	}
}

// TestReplicationFailoverWaitsForASlowPromotion is finding 1 of the
// failover-safety issue: a candidate that takes seconds to promote reports
// itself in recovery, following nobody. The controller must keep to it:
// no second standby is told to promote, and the old primary is never told
// to be a primary again, until the candidate is writable.
func TestReplicationFailoverWaitsForASlowPromotion(t *testing.T) {
	for _, pods := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d pods", pods), func(t *testing.T) {
			f := newReplicationFixture(t)
			if pods == 2 {
				f.db.Spec.Replicas = ptr.To[int32](2)
				delete(f.agents.servers, f.ip(2))
				if err := f.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.db.Namespace, Name: "orders-2"}}); err != nil {
					t.Fatal(err)
				}
			}
			f.reconcile()
			f.reconcile()
			for i := 1; i < pods; i++ {
				f.agents.servers[f.ip(i)].promoteTakes = 8 * time.Second
			}
			// The primary's node is lost.
			f.losePrimary(pods)
			f.setNotReady(0)
			before := map[int]int{}
			for i := range pods {
				before[i] = len(f.agents.servers[f.ip(i)].applied)
			}
			old := f.agents.servers[f.ip(0)]
			for range 240 {
				f.now = f.now.Add(500 * time.Millisecond)
				f.reconcile()
				var told []int
				for i := range pods {
					for _, spec := range f.agents.servers[f.ip(i)].applied[before[i]:] {
						if spec.Role == instance.RolePrimary {
							told = append(told, i)
							break
						}
					}
				}
				if len(told) > 1 || slices.Contains(told, 0) {
					t.Fatalf("at %v, pods %v were sent a primary spec since the failover began", f.now, told)
				}
				if len(told) == 1 && !old.answers {
					// While the candidate promotes, the old primary's agent
					// answers again: its lease ran out and it fenced itself.
					old.answers, old.fenced, old.phase, old.heldTerm = true, true, instance.PhaseFenced, old.term
				}
				if f.db.Status.CurrentPrimary == "orders-0" && f.roles()[0] == "primary" && len(told) == 1 {
					t.Fatalf("at %v, the fenced old primary is labelled primary while orders-%d promotes", f.now, told[0])
				}
				f.writable()
			}
			if f.db.Status.CurrentPrimary != "orders-1" || f.db.Status.TargetPrimary != "" {
				t.Fatalf("after the slow promotion: current %q target %q", f.db.Status.CurrentPrimary, f.db.Status.TargetPrimary)
			}
			if got := f.writable(); fmt.Sprint(got) != "[1]" {
				t.Errorf("writable = %v, want [1]", got)
			}
		})
	}
}

// TestReplicationALatePrimarySpecCannotRearmAFencedPrimary is finding 3: a
// lease renewal delivered after the old primary was fenced (the operator's
// request timed out, or a deposed leader sent it) must not make it
// writable again once a standby may be promoted.
func TestReplicationALatePrimarySpecCannotRearmAFencedPrimary(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	late := *f.agents.servers[f.ip(0)].spec // a renewal still in flight
	// The primary stops answering (its network is cut), then is fenced.
	f.setNotReady(0)
	f.losePrimary(3)
	for range 120 {
		f.now = f.now.Add(500 * time.Millisecond)
		f.reconcile()
		if f.db.Status.Term > f.db.Status.PrimaryTerm {
			break
		}
	}
	if f.db.Status.Term <= f.db.Status.PrimaryTerm {
		t.Fatalf("no change of primary was committed: %+v", f.db.Status)
	}
	// Its agent answers again, fenced by its lease, and the late renewal
	// arrives.
	old := f.agents.servers[f.ip(0)]
	old.answers, old.fenced, old.phase, old.heldTerm = true, true, instance.PhaseFenced, old.term
	if _, err := f.agents.Apply(context.Background(), f.ip(0), f.r.agentCredentialsOf(f.t, f.db), late); err == nil && !old.fenced {
		t.Fatalf("a late primary spec of term %d re-armed the fenced old primary", late.Term)
	}
	for range 20 {
		f.now = f.now.Add(500 * time.Millisecond)
		f.reconcile()
		f.writable()
	}
	if f.db.Status.CurrentPrimary == "orders-0" {
		t.Fatalf("the old primary is the primary again: %+v", f.db.Status)
	}
	if old.spec.Role == instance.RolePrimary && !old.fenced {
		t.Fatalf("the old primary was made writable: %+v", old.spec)
	}
}

// TestReplicationAPrimaryHeldAsAStandbyIsMadePrimaryInANewTerm: a
// switchover told the primary to be a standby in the current term, then was
// abandoned (its target's pod was deleted), and no standby can take over.
// The primary's agent accepts the lease renewals of that term but never
// acts on them (Status.Held): before, the controller took it for a
// promotion under way and waited for good (the simulation's seed 72). Only
// a new term makes a server writable again.
func TestReplicationAPrimaryHeldAsAStandbyIsMadePrimaryInANewTerm(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	term := f.db.Status.Term
	old := f.agents.servers[f.ip(0)]
	// Demoted in this term: a standby of nobody, held off primary.
	old.spec = &instance.Spec{Role: instance.RoleReplica, Upstream: "orders-1", Term: term}
	old.heldTerm, old.inRecovery, old.stopped = term, true, old.lsn
	f.setNotReady(0)
	// The standbys are gone: no other server can take over.
	for i := 1; i < 3; i++ {
		f.agents.servers[f.ip(i)].answers = false
		f.setNotReady(i)
	}
	if !f.reconcileUntilWritable(0, 240) {
		t.Fatalf("2 minutes on, writable %v, want orders-0 again: %+v", f.writable(), f.db.Status)
	}
	if f.db.Status.Term <= term || f.db.Status.PrimaryTerm != f.db.Status.Term || f.db.Status.CurrentPrimary != "orders-0" {
		t.Errorf("orders-0 writable again without a new term: term %d (was %d), primary term %d, primary %q",
			f.db.Status.Term, term, f.db.Status.PrimaryTerm, f.db.Status.CurrentPrimary)
	}
}

// TestReplicationAnUncommittedTargetAnsweringWritableIsNotThePrimary: a
// candidate detached in the fence phase restarts and replays a backlog, and
// until its server answers, its agent may report it out of recovery. Found
// on the real node: the controller recorded it as the primary without a
// commit, and its agent, told to be a standby in that term, never promoted.
func TestReplicationAnUncommittedTargetAnsweringWritableIsNotThePrimary(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	f.setNotReady(0)
	f.losePrimary(3)
	for range 120 {
		f.now = f.now.Add(500 * time.Millisecond)
		f.reconcile()
		if f.db.Status.TargetPrimary != "" {
			break
		}
	}
	target := f.db.Status.TargetPrimary
	if target == "" || f.db.Status.Term != f.db.Status.PrimaryTerm {
		t.Fatalf("want a failover in its fence phase: %+v", f.db.Status)
	}
	// Detached and replaying, it is not ready either.
	f.setNotReady(ordinalOf(target))
	s := f.agents.servers[f.ip(ordinalOf(target))]
	s.inRecovery = false // what an agent that cannot query its standby reported
	f.now = f.now.Add(500 * time.Millisecond)
	f.reconcile()
	if f.db.Status.CurrentPrimary == target {
		t.Fatalf("%s, never told to promote, was recorded as the primary: %+v", target, f.db.Status)
	}
}

// TestReplicationFailoverKeepsItsStandbysDetachedWhileTheyRestart is the
// real node's network-cut failover with backups: a detached standby
// restarts and replays what it holds (from the archive, a segment every
// few seconds) before it answers queries, so for a while no standby
// reports a WAL position and none may be promoted. The failover must go
// on: no standby is sent back to follow the old primary, which does not
// answer, and the most advanced one is promoted once it reports.
func TestReplicationFailoverKeepsItsStandbysDetachedWhileTheyRestart(t *testing.T) {
	f := newReplicationFixture(t)
	f.reconcile()
	f.reconcile()
	for i := 1; i < 3; i++ {
		f.agents.servers[f.ip(i)].detachTakes = 12 * time.Second
	}
	f.losePrimary(3)
	f.setNotReady(0)
	f.agents.servers[f.ip(2)].lsn = 0x3000080
	oldHost := podHost(f.db, "orders-0")
	var began time.Time
	from := map[int]int{}
	for range 240 {
		f.now = f.now.Add(500 * time.Millisecond)
		f.reconcile()
		if began.IsZero() && f.db.Status.TargetPrimary != "" {
			began = f.now
			for i := 1; i < 3; i++ {
				from[i] = len(f.agents.servers[f.ip(i)].applied)
			}
		}
		if began.IsZero() {
			continue
		}
		for i := 1; i < 3; i++ {
			for _, spec := range f.agents.servers[f.ip(i)].applied[from[i]:] {
				if spec.Role == instance.RoleReplica && spec.Upstream == oldHost {
					t.Fatalf("at %v, %v after the failover began, orders-%d was sent back to follow the old primary: %+v (status %+v)",
						f.now, f.now.Sub(began), i, spec, f.db.Status)
				}
			}
		}
	}
	if began.IsZero() {
		t.Fatal("no failover began")
	}
	if f.db.Status.CurrentPrimary != "orders-2" || f.db.Status.TargetPrimary != "" {
		t.Fatalf("after the failover: current %q target %q, want orders-2, the most advanced standby", f.db.Status.CurrentPrimary, f.db.Status.TargetPrimary)
	}
	if got := f.writable(); fmt.Sprint(got) != "[2]" {
		t.Errorf("writable = %v, want [2]", got)
	}
	if s := f.agents.servers[f.ip(1)]; s.spec == nil || s.spec.Upstream != podHost(f.db, "orders-2") {
		t.Errorf("orders-1 follows %+v, want the new primary", s.spec)
	}
}
