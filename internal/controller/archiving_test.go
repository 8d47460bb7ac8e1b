package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/replication"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestArchivingCondition(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	const gib = int64(1) << 30
	ok := instance.Archiving{
		ObservedSecondsAgo: 2, Sidecar: &archiver.Status{LastArchivedWAL: "000000010000000000000007", LastArchivedTime: *at(0)},
		ArchivedCount: 7, LastArchivedWAL: "000000010000000000000007", LastArchivedTime: at(0),
		FailedCount: 3, LastFailedWAL: "000000010000000000000005", LastFailedTime: at(-time.Minute),
		WALBytes: 96 << 20, VolumeFreeBytes: 8 * gib, VolumeBytes: 10 * gib,
	}
	with := func(f func(a *instance.Archiving)) *instance.Status {
		a := ok
		s := *a.Sidecar
		a.Sidecar = &s
		f(&a)
		return &instance.Status{Phase: instance.PhaseRunning, Archiving: &a}
	}
	failed := func(a *instance.Archiving) {
		a.FailedCount, a.LastFailedWAL, a.LastFailedTime = 9, "000000010000000000000008", at(30*time.Second)
		a.Sidecar.LastFailedWAL, a.Sidecar.ConsecutiveFailures = "000000010000000000000008", 6
		a.Sidecar.LastError = "ERROR: Barman cloud WAL archiver exception:\nCould not connect to the endpoint URL: \"https://store:7070/backups\"\n"
		a.ReadySegments = 3
	}
	tests := []struct {
		name     string
		primary  string
		status   *instance.Status
		agentErr error
		want     metav1.ConditionStatus
		reason   string
		contains []string
		wal      string
		filling  bool
	}{
		{name: "the last archive succeeded after the last failure", primary: "db-0", status: with(func(*instance.Archiving) {}),
			want: metav1.ConditionTrue, reason: dbv1.ReasonArchiving, contains: []string{"archived 000000010000000000000007 at 2026-12-04T10:00:00Z", "0 segment(s) wait"},
			wal: "000000010000000000000007"},
		{name: "a new server that archived nothing yet", primary: "db-0", status: with(func(a *instance.Archiving) {
			*a = instance.Archiving{Sidecar: &archiver.Status{}, VolumeBytes: 10 * gib, VolumeFreeBytes: 9 * gib}
		}), want: metav1.ConditionTrue, reason: dbv1.ReasonArchiving, contains: []string{"no WAL file completed yet"}},
		{name: "failing: barman-cloud's reason, the failures and the waiting segments", primary: "db-0", status: with(failed),
			want: metav1.ConditionFalse, reason: dbv1.ReasonArchiveFailed,
			contains: []string{"archiving 000000010000000000000008 failed 6 time(s) in a row", "9 failure(s)", "3 segment(s) wait", `barman-cloud: Could not connect to the endpoint URL: "https://store:7070/backups"`},
			wal:      "000000010000000000000007"},
		{name: "the first failure, before the sidecar's count: pg_stat_archiver alone", primary: "db-0", status: with(func(a *instance.Archiving) {
			a.LastFailedTime, a.LastFailedWAL, a.ReadySegments = at(time.Second), "000000010000000000000008", 1
		}), want: metav1.ConditionFalse, reason: dbv1.ReasonArchiveFailed, contains: []string{"archiving 000000010000000000000008 failed (3 failure(s)", "1 segment(s) wait"}},
		{name: "failing and the volume nearly full: the warning", primary: "db-0", status: with(func(a *instance.Archiving) {
			failed(a)
			a.WALBytes, a.VolumeFreeBytes, a.ReadySegments = 8*gib, gib, 500
		}), want: metav1.ConditionFalse, reason: dbv1.ReasonArchiveFailed, filling: true,
			contains: []string{"pg_wal (8192 MiB) will fill the data volume: 1024 MiB of 10240 MiB free while 500 segment(s) wait"}},
		{name: "failing on a large disk with far more free than pg_wal: no warning", primary: "db-0", status: with(func(a *instance.Archiving) {
			failed(a)
			a.WALBytes, a.VolumeBytes, a.VolumeFreeBytes, a.ReadySegments = 64<<20, 258*gib, 47*gib, 3
		}), want: metav1.ConditionFalse, reason: dbv1.ReasonArchiveFailed},
		{name: "failing with less free than twice pg_wal: the warning", primary: "db-0", status: with(func(a *instance.Archiving) {
			failed(a)
			a.WALBytes, a.VolumeBytes, a.VolumeFreeBytes, a.ReadySegments = 3*gib, 100*gib, 5*gib, 190
		}), want: metav1.ConditionFalse, reason: dbv1.ReasonArchiveFailed, filling: true},
		{name: "a nearly full volume with nothing waiting is no archiving problem", primary: "db-0", status: with(func(a *instance.Archiving) {
			a.VolumeFreeBytes = gib / 2
		}), want: metav1.ConditionTrue, reason: dbv1.ReasonArchiving},
		{name: "the agent does not answer", primary: "db-0", agentErr: errors.New("connection refused"),
			want: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, contains: []string{"the agent of the primary db-0 does not answer: connection refused"}},
		{name: "no primary", want: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, contains: []string{"no primary"}},
		{name: "an agent without the sidecar's section", primary: "db-0", status: &instance.Status{Phase: instance.PhaseRunning},
			want: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, contains: []string{"no backup sidecar"}},
		{name: "the sidecar does not answer", primary: "db-0", status: with(func(a *instance.Archiving) {
			a.Sidecar, a.SidecarError = nil, "calling the backup sidecar: dial unix: connection refused"
		}), want: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, contains: []string{"the backup sidecar of db-0 does not answer: calling"},
			wal: "000000010000000000000007"},
		{name: "the agent's gathering is stale", primary: "db-0", status: with(func(a *instance.Archiving) { a.ObservedSecondsAgo = 45 }),
			want: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, contains: []string{"45 s ago"}},
		{name: "the server is down", primary: "db-0", status: with(func(a *instance.Archiving) { a.StatsError = "the server is not running" }),
			want: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, contains: []string{"db-0: the server is not running"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := archivingCondition(tt.primary, tt.status, tt.agentErr)
			if got.status != tt.want || got.reason != tt.reason {
				t.Errorf("got %s/%s (%s), want %s/%s", got.status, got.reason, got.message, tt.want, tt.reason)
			}
			for _, c := range tt.contains {
				if !strings.Contains(got.message, c) {
					t.Errorf("message %q lacks %q", got.message, c)
				}
			}
			if got.lastArchivedWAL != tt.wal && tt.wal != "" {
				t.Errorf("lastArchivedWAL = %q, want %q", got.lastArchivedWAL, tt.wal)
			}
			if (got.filling != "") != tt.filling {
				t.Errorf("filling = %q, want a warning: %v", got.filling, tt.filling)
			}
		})
	}
}

func TestSetArchivingStatus(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 500, time.UTC)
	obs := observation{generation: 4, replication: replicationObservation{archiving: &archivingObservation{
		status: metav1.ConditionTrue, reason: dbv1.ReasonArchiving, message: "m", lastArchivedWAL: "000000010000000000000007", lastArchivedTime: &t0}}}
	var st dbv1.DatabaseStatus
	setArchivingStatus(&st, obs)
	if len(st.Conditions) != 1 || st.Conditions[0].Type != dbv1.ConditionContinuousArchiving || st.Conditions[0].ObservedGeneration != 4 {
		t.Fatalf("conditions %+v", st.Conditions)
	}
	if st.Backup == nil || st.Backup.LastArchivedWAL != "000000010000000000000007" || !st.Backup.LastArchivedTime.Time.Equal(t0.Truncate(time.Second)) {
		t.Errorf("backup %+v", st.Backup)
	}
	// Unknown keeps the last archived WAL the status knew.
	obs.replication.archiving = &archivingObservation{status: metav1.ConditionUnknown, reason: dbv1.ReasonArchiveUnknown, message: "x"}
	setArchivingStatus(&st, obs)
	if st.Backup.LastArchivedWAL != "000000010000000000000007" || st.Conditions[0].Status != metav1.ConditionUnknown {
		t.Errorf("after Unknown: %+v %+v", st.Backup, st.Conditions)
	}
	// spec.backup removed: the condition goes.
	obs.replication.archiving = nil
	setArchivingStatus(&st, obs)
	if len(st.Conditions) != 0 {
		t.Errorf("conditions without spec.backup: %+v", st.Conditions)
	}
}

// TestReplicationArchivingFlipsFalseThenTrue drives a replicated Database
// with spec.backup through its primary's agent reporting archiving, then
// failing with the store down and the volume filling, then catching up.
func TestReplicationArchivingFlipsFalseThenTrue(t *testing.T) {
	f := newReplicationFixture(t)
	fixture.WithBackup()(f.db)
	rec := events.NewFakeRecorder(10)
	f.r.Recorder = rec
	t0 := f.now
	const gib = int64(1) << 30
	primary := f.agents.servers[f.ip(0)]
	primary.archiving = &instance.Archiving{ObservedSecondsAgo: 1, Sidecar: &archiver.Status{},
		ArchivedCount: 2, LastArchivedWAL: "000000010000000000000002", LastArchivedTime: &t0,
		VolumeBytes: 10 * gib, VolumeFreeBytes: 9 * gib}
	step := func(want metav1.ConditionStatus, reason string) *metav1.Condition {
		t.Helper()
		f.now = f.now.Add(5 * time.Second)
		obs := f.reconcile()
		st := f.db.Status.DeepCopy()
		setArchivingStatus(st, observation{generation: 1, replication: obs})
		f.db.Status = *st
		c := meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionContinuousArchiving)
		if c == nil || c.Status != want || c.Reason != reason {
			t.Fatalf("ContinuousArchiving = %+v, want %s/%s", c, want, reason)
		}
		return c
	}
	step(metav1.ConditionTrue, dbv1.ReasonArchiving)
	step(metav1.ConditionTrue, dbv1.ReasonArchiving)
	if b := f.db.Status.Backup; b == nil || b.LastArchivedWAL != "000000010000000000000002" {
		t.Fatalf("status.backup = %+v", b)
	}

	// The store goes down: failures, segments waiting, the volume filling.
	failedAt := f.now
	a := primary.archiving
	a.FailedCount, a.LastFailedWAL, a.LastFailedTime = 4, "000000010000000000000003", &failedAt
	a.Sidecar = &archiver.Status{LastFailedWAL: "000000010000000000000003", ConsecutiveFailures: 4, LastError: "Could not connect to the endpoint URL"}
	a.ReadySegments, a.WALBytes, a.VolumeFreeBytes = 40, 640<<20, gib
	c := step(metav1.ConditionFalse, dbv1.ReasonArchiveFailed)
	for _, want := range []string{"4 time(s) in a row", "40 segment(s) wait", "barman-cloud: Could not connect", "will fill the data volume"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	step(metav1.ConditionFalse, dbv1.ReasonArchiveFailed)
	if n := len(rec.Events); n != 1 {
		t.Errorf("%d Events over two reconciles of a filling volume, want one", n)
	} else if e := <-rec.Events; !strings.Contains(e, "Warning "+eventWALVolumeFilling) {
		t.Errorf("Event %q", e)
	}

	// The primary's agent stops answering: Unknown, the last WAL kept.
	primary.answers = false
	step(metav1.ConditionUnknown, dbv1.ReasonArchiveUnknown)
	primary.answers = true

	// The store returns: the backlog is archived.
	doneAt := f.now
	a.ArchivedCount, a.LastArchivedWAL, a.LastArchivedTime = 43, "000000010000000000000005", &doneAt
	a.Sidecar = &archiver.Status{LastArchivedWAL: "000000010000000000000005", LastArchivedTime: doneAt}
	a.ReadySegments, a.VolumeFreeBytes = 0, 9*gib
	step(metav1.ConditionTrue, dbv1.ReasonArchiving)
	if b := f.db.Status.Backup; b.LastArchivedWAL != "000000010000000000000005" || !b.LastArchivedTime.Time.Equal(doneAt) {
		t.Errorf("status.backup = %+v", b)
	}

	// spec.backup removed: the condition goes.
	f.db.Spec.Backup = nil
	f.now = f.now.Add(5 * time.Second)
	obs := f.reconcile()
	setArchivingStatus(&f.db.Status, observation{generation: 2, replication: obs})
	if c := meta.FindStatusCondition(f.db.Status.Conditions, dbv1.ConditionContinuousArchiving); c != nil {
		t.Errorf("ContinuousArchiving without spec.backup: %+v", c)
	}
}

// TestASingleServersArchivingIsAskedEveryPollPeriod drives a single-server
// Database with spec.backup: its agent is asked in the background every
// archivingPollPeriod, and the condition follows its answers.
func TestASingleServersArchivingIsAskedEveryPollPeriod(t *testing.T) {
	c, namespace := newTestClient(t, "single-archiving")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(namespace), fixture.WithBackup()))
	// The version is shown already: only archiving's answers enqueue.
	db.Status.ServerVersion = "17.6"
	createInstanceSecret(t, ctx, c, db)
	const ip = "10.245.0.10"
	t0 := now
	server := &fakeServer{answers: true, phase: instance.PhaseRunning, timeline: 1, version: "17.6",
		archiving: &instance.Archiving{Sidecar: &archiver.Status{}, LastArchivedWAL: "000000010000000000000002", LastArchivedTime: &t0}}
	agents := &countingAgents{fakeAgents: &fakeAgents{now: func() time.Time { return now }, hosts: map[string]string{},
		servers: map[string]*fakeServer{ip: server}}}
	r := withTestKeys(&DatabaseReconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Agents: agents, Now: func() time.Time { return now }})
	r.versions.events = make(chan event.GenericEvent, 10)
	r.versions.ctx = ctx
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "orders-0", UID: "uid-1",
			Labels: map[string]string{replication.RoleLabel: string(replication.RolePrimary)}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "postgres", ContainerID: "containerd://a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	locked := func(change func()) {
		agents.mu.Lock()
		defer agents.mu.Unlock()
		change()
	}
	reconcile := func() replicationObservation {
		t.Helper()
		spec := db.DeepCopy()
		s := &scope{db: db, spec: spec, obs: observation{generation: 1, spec: spec, pods: []corev1.Pod{pod}, replicas: 1}}
		obs := r.reconcileSingle(ctx, s)
		status := db.Status.DeepCopy()
		setArchivingStatus(status, observation{generation: 1, replication: obs})
		db.Status = *status
		return obs
	}
	awaitCalls := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			r.versions.mu.Lock()
			asking := r.versions.byDB[client.ObjectKeyFromObject(db)].asking
			r.versions.mu.Unlock()
			if agents.calls.Load() == n && !asking {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the agent was asked %d times, want %d", agents.calls.Load(), n)
	}
	check := func(want metav1.ConditionStatus, reason string) {
		t.Helper()
		c := meta.FindStatusCondition(db.Status.Conditions, dbv1.ConditionContinuousArchiving)
		if c == nil || c.Status != want || c.Reason != reason {
			t.Fatalf("ContinuousArchiving = %+v, want %s/%s", c, want, reason)
		}
	}

	// The first reconcile does not wait for the agent.
	if obs := reconcile(); obs.requeueAfter != archivingPollPeriod {
		t.Errorf("requeueAfter = %v, want %v", obs.requeueAfter, archivingPollPeriod)
	}
	check(metav1.ConditionUnknown, dbv1.ReasonArchiveUnknown)
	awaitCalls(1)
	reconcile()
	check(metav1.ConditionTrue, dbv1.ReasonArchiving)
	if db.Status.Backup == nil || db.Status.Backup.LastArchivedWAL != "000000010000000000000002" {
		t.Errorf("status.backup = %+v", db.Status.Backup)
	}
	// Before archivingPollPeriod the agent is not asked again.
	locked(func() { now = now.Add(archivingPollPeriod / 2) })
	reconcile()
	awaitCalls(1)

	// Archiving fails: the next poll sees it.
	locked(func() {
		failedAt := now
		server.archiving.FailedCount, server.archiving.LastFailedWAL, server.archiving.LastFailedTime = 1, "000000010000000000000003", &failedAt
		now = now.Add(archivingPollPeriod / 2)
	})
	for len(r.versions.events) > 0 {
		<-r.versions.events
	}
	reconcile()
	awaitCalls(2)
	if n := len(r.versions.events); n != 1 {
		t.Errorf("the answer that archiving fails enqueued the Database %d times, want once", n)
	}
	reconcile()
	check(metav1.ConditionFalse, dbv1.ReasonArchiveFailed)

	// And catches up.
	locked(func() {
		doneAt := now.Add(time.Second)
		server.archiving.LastArchivedWAL, server.archiving.LastArchivedTime = "000000010000000000000004", &doneAt
		now = now.Add(archivingPollPeriod)
	})
	reconcile()
	awaitCalls(3)
	reconcile()
	check(metav1.ConditionTrue, dbv1.ReasonArchiving)
	if got := db.Status.Backup.LastArchivedWAL; got != "000000010000000000000004" {
		t.Errorf("lastArchivedWAL = %q", got)
	}
}
