package controller

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestVersionMismatches(t *testing.T) {
	pg17 := fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("17")))
	mysql84 := fixture.Defaulted(fixture.Database("catalog", fixture.WithEngine(dbv1.EngineMySQL), fixture.WithVersion("8.4")))
	tests := []struct {
		name    string
		db      *dbv1.Database
		running []runningVersion
		want    []string
	}{
		{"a minor release of spec.version matches", pg17, []runningVersion{{"orders-0", "17.10"}}, nil},
		{"the catalog's own tag matches", pg17, []runningVersion{{"orders-0", "17.6"}}, nil},
		{"another major version does not", pg17, []runningVersion{{"orders-0", "15.20"}}, []string{"orders-0"}},
		{"a newer major version does not either", pg17, []runningVersion{{"orders-0", "18.1"}}, []string{"orders-0"}},
		{"a beta of spec.version matches", fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("18"))), []runningVersion{{"orders-0", "18beta1"}}, nil},
		{"only the pods that differ, in order", pg17, []runningVersion{{"orders-0", "15.20"}, {"orders-1", "17.6"}, {"orders-2", "16.4"}}, []string{"orders-0", "orders-2"}},
		{"an unknown version says nothing", pg17, []runningVersion{{"orders-0", ""}, {"orders-1", "devel"}}, nil},
		{"mysql compares two numbers", mysql84, []runningVersion{{"catalog-0", "8.0.43"}, {"catalog-1", "8.4.6"}}, []string{"catalog-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, m := range versionMismatches(tt.db, tt.running) {
				got = append(got, m.pod)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("mismatches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestVersionProblemNamesEachPodItsVersionAndTheFix(t *testing.T) {
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithVersion("17")))
	running := []runningVersion{{"orders-0", "15.20"}, {"orders-1", "15.19"}}
	if p := versionProblem(db, running, nil); p != nil {
		t.Errorf("no mismatch is a problem: %+v", p)
	}
	p := versionProblem(db, running, versionMismatches(db, running))
	if p == nil || p.reason != dbv1.ReasonVersionMismatch {
		t.Fatalf("problem = %+v, want reason %s", p, dbv1.ReasonVersionMismatch)
	}
	const want = "pod orders-0 runs postgres 15.20; pod orders-1 runs postgres 15.19, not 17 (spec.version): " +
		"the image is of another version than the Database says. " +
		"A server runs only on a data directory of its own major version, so an image of postgres 17 would not start on this one: " +
		"to keep the data on postgres 15, set spec.version to 15, which says what it is; " +
		"to run postgres 17, create a new Database of that version and migrate the data with pg_dump and pg_restore, or pg_upgrade"
	if p.message != want {
		t.Errorf("message:\n got  %s\n want %s", p.message, want)
	}

	// spec.version cannot say what the data is while the servers run
	// different major versions, nor when the catalog lacks theirs.
	for _, running := range [][]runningVersion{
		{{"orders-0", "15.20"}, {"orders-1", "17.6"}},
		{{"orders-0", "13.22"}},
	} {
		p := versionProblem(db, running, versionMismatches(db, running))
		if p == nil || strings.Contains(p.message, "set spec.version") || !strings.Contains(p.message, "create a new Database") {
			t.Errorf("problem of %v = %+v, want one that does not suggest setting spec.version", running, p)
		}
	}
}

func TestAReplicatedDatabaseReportsEachServersVersion(t *testing.T) {
	f := newReplicationFixture(t)
	recorder := events.NewFakeRecorder(100)
	f.r.Recorder = recorder
	f.reconcile()
	obs := f.reconcile()
	for _, in := range f.db.Status.Instances {
		if in.ServerVersion != "17.6" {
			t.Errorf("%s: serverVersion %q, want 17.6", in.Name, in.ServerVersion)
		}
	}
	if f.db.Status.ServerVersion != "17.6" || obs.versionMismatch != nil {
		t.Fatalf("status.serverVersion %q, mismatch %+v; want the primary's 17.6 and none", f.db.Status.ServerVersion, obs.versionMismatch)
	}
	drain(recorder)

	// Every server runs 15 under a Database that says 17.
	for i := range 3 {
		f.agents.servers[f.ip(i)].version = "15.20"
	}
	for range 3 {
		f.now = f.now.Add(leaseRenewPeriod)
		obs = f.reconcile()
		stalled := meta.FindStatusCondition(summary(obs).Conditions, dbv1.ConditionStalled)
		if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != dbv1.ReasonVersionMismatch ||
			!strings.Contains(stalled.Message, "pod orders-0 runs postgres 15.20; pod orders-1 runs postgres 15.20; pod orders-2 runs postgres 15.20, not 17 (spec.version)") {
			t.Fatalf("Stalled = %+v, want True VersionMismatch naming every pod", stalled)
		}
	}
	if f.db.Status.ServerVersion != "15.20" {
		t.Errorf("status.serverVersion = %q, want 15.20", f.db.Status.ServerVersion)
	}
	evs := drain(recorder)
	for _, pod := range []string{"orders-0", "orders-1", "orders-2"} {
		if countMatching(evs, "Warning", dbv1.ReasonVersionMismatch, "pod "+pod+" runs postgres 15.20, not 17") != 1 {
			t.Errorf("Events over three reconciles = %q, want one Warning for %s", evs, pod)
		}
	}

	// An agent that stops answering keeps its last known version, and the
	// mismatch holds.
	f.agents.servers[f.ip(2)].answers = false
	f.now = f.now.Add(leaseRenewPeriod)
	if obs := f.reconcile(); obs.versionMismatch == nil || !strings.Contains(obs.versionMismatch.message, "orders-2 runs postgres 15.20") {
		t.Errorf("mismatch with orders-2 silent = %+v, want orders-2 still named", obs.versionMismatch)
	}
	if got := f.db.Status.Instances[2].ServerVersion; got != "15.20" {
		t.Errorf("orders-2, silent, reports serverVersion %q, want its last known 15.20", got)
	}
	f.agents.servers[f.ip(2)].answers = true

	// The Database comes to say what its servers run: the mismatch clears.
	f.db.Spec.Version = "15"
	f.now = f.now.Add(leaseRenewPeriod)
	if obs := f.reconcile(); obs.versionMismatch != nil {
		t.Errorf("still a mismatch once spec.version is 15: %+v", obs.versionMismatch)
	}
	if evs := drain(recorder); countMatching(evs, dbv1.ReasonVersionMismatch) != 0 {
		t.Errorf("Events once it matches: %q", evs)
	}
}

// countingAgents are fake agents that count the status requests.
type countingAgents struct {
	*fakeAgents
	calls atomic.Int32
}

func (a *countingAgents) Status(ctx context.Context, ip string, creds instance.AgentCredentials) (*instance.Status, error) {
	a.calls.Add(1)
	return a.fakeAgents.Status(ctx, ip, creds)
}

func TestASingleServersVersionIsAskedInTheBackgroundOncePerContainer(t *testing.T) {
	c, namespace := newTestClient(t, "single-version")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(namespace), fixture.WithImage("dbkeeper.local/postgres:15.20")))
	createInstanceSecret(t, ctx, c, db)
	const ip = "10.245.0.10"
	agents := &countingAgents{fakeAgents: &fakeAgents{now: func() time.Time { return now }, hosts: map[string]string{},
		servers: map[string]*fakeServer{ip: {answers: true, phase: instance.PhaseRunning, timeline: 1, version: "15.20"}}}}
	recorder := events.NewFakeRecorder(100)
	r := withTestKeys(&DatabaseReconciler{Client: c, APIReader: c, Recorder: recorder, Agents: agents, Now: func() time.Time { return now }})
	r.versions.events = make(chan event.GenericEvent, 1)
	r.versions.ctx = ctx
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "orders-0", UID: "uid-1", Labels: map[string]string{}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "postgres", ContainerID: "containerd://a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	// locked changes what the agents' goroutines read.
	locked := func(change func()) {
		agents.mu.Lock()
		defer agents.mu.Unlock()
		change()
	}
	reconcile := func() replicationObservation {
		t.Helper()
		spec := db.DeepCopy()
		s := &scope{db: db, spec: spec, obs: observation{generation: 1, spec: spec, pods: []corev1.Pod{pod}, replicas: 1}}
		s.obs.pods[0].Labels = map[string]string{replication.RoleLabel: string(replication.RolePrimary)}
		obs := r.reconcileSingle(ctx, s)
		status := db.Status.DeepCopy()
		setReplicationStatus(status, observation{generation: 1, replication: obs})
		db.Status = *status
		return obs
	}
	awaitEvent := func() {
		t.Helper()
		select {
		case e := <-r.versions.events:
			if client.ObjectKeyFromObject(e.Object) != client.ObjectKeyFromObject(db) {
				t.Errorf("the answer enqueued %v, want the Database", client.ObjectKeyFromObject(e.Object))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the agent's answer did not enqueue the Database")
		}
	}

	// The first reconcile does not wait for the agent: it knows nothing yet.
	if obs := reconcile(); obs.serverVersion != "" || obs.versionMismatch != nil {
		t.Fatalf("first reconcile: version %q, mismatch %+v; want neither", obs.serverVersion, obs.versionMismatch)
	}
	awaitEvent()
	obs := reconcile()
	if obs.versionMismatch == nil || obs.versionMismatch.reason != dbv1.ReasonVersionMismatch ||
		!strings.Contains(obs.versionMismatch.message, "pod orders-0 runs postgres 15.20, not 17 (spec.version)") {
		t.Fatalf("after the answer: mismatch %+v, want orders-0 running 15.20 under 17", obs.versionMismatch)
	}
	if db.Status.ServerVersion != "15.20" {
		t.Errorf("status.serverVersion = %q, want 15.20", db.Status.ServerVersion)
	}
	for range 3 {
		locked(func() { now = now.Add(2 * versionProbeRetry) })
		reconcile()
	}
	if n := agents.calls.Load(); n != 1 {
		t.Errorf("the agent was asked %d times about one container, want once", n)
	}
	if evs := drain(recorder); countMatching(evs, "Warning", dbv1.ReasonVersionMismatch, "pod orders-0 runs postgres 15.20, not 17") != 1 {
		t.Errorf("Events = %q, want one VersionMismatch Warning", evs)
	}

	// A restart of the container is asked about again; the answer is the
	// same, so it enqueues nothing, and the last version stays shown.
	pod.Status.ContainerStatuses[0].RestartCount = 1
	if obs := reconcile(); obs.serverVersion != "15.20" || obs.versionMismatch == nil {
		t.Errorf("while asking about the restarted container: version %q, mismatch %+v; want the last known 15.20 and the mismatch", obs.serverVersion, obs.versionMismatch)
	}
	deadline := time.Now().Add(10 * time.Second)
	for agents.calls.Load() != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := agents.calls.Load(); n != 2 {
		t.Errorf("the agent was asked %d times after a restart, want twice", n)
	}

	// An agent that does not answer is not asked again before
	// versionProbeRetry, at a reconcile.
	locked(func() { agents.servers[ip].answers = false })
	pod.Status.ContainerStatuses[0].RestartCount = 2
	reconcile()
	for agents.calls.Load() != 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	asking := func() bool {
		r.versions.mu.Lock()
		defer r.versions.mu.Unlock()
		return r.versions.byDB[client.ObjectKeyFromObject(db)].asking
	}
	waitAnswered := func() {
		t.Helper()
		for time.Now().Before(deadline) {
			if !asking() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("the question is still under way")
	}
	waitAnswered()
	reconcile()
	if asking() {
		t.Error("a silent agent was asked again before versionProbeRetry")
	}
	locked(func() { now = now.Add(versionProbeRetry) })
	reconcile()
	for agents.calls.Load() != 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := agents.calls.Load(); n != 4 {
		t.Errorf("a silent agent was asked %d times after versionProbeRetry, want 4", n)
	}
	waitAnswered()
	select {
	case <-r.versions.events:
		t.Error("a failed or unchanged answer enqueued the Database")
	default:
	}
}
