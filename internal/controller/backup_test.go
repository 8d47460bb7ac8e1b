package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

// backupFixture is a postgres Database with spec.backup in the test API
// server, its primary's pod, a fake agent with a backup sidecar, and the
// Backup and schedule controllers on a clock the test moves.
type backupFixture struct {
	t        *testing.T
	c        client.Client
	ns       string
	now      time.Time
	agents   *fakeAgents
	recorder *events.FakeRecorder
	r        *BackupReconciler
	sched    *BackupScheduleReconciler
}

const backupTestIP = "10.245.1.10"

func newBackupFixture(t *testing.T, withBackup bool) *backupFixture {
	t.Helper()
	c, ns := newTestClient(t, "backup")
	f := &backupFixture{t: t, c: c, ns: ns, now: time.Date(2026, 12, 4, 2, 50, 0, 0, time.UTC), recorder: events.NewFakeRecorder(200)}
	f.agents = &fakeAgents{servers: map[string]*fakeServer{}, hosts: map[string]string{}, now: func() time.Time { return f.now }}
	f.agents.servers[backupTestIP] = &fakeServer{answers: true, phase: instance.PhaseRunning, timeline: 1, heldTerm: -1, backups: &fakeBackups{takes: 8 * time.Second}}
	clock := func() time.Time { return f.now }
	f.r = &BackupReconciler{Client: c, Recorder: f.recorder, Agents: f.agents, Now: clock, agentCreds: agentCredentialCache{namespace: testKeysNamespace}}
	f.sched = &BackupScheduleReconciler{Client: c, Recorder: f.recorder, Now: clock}
	ctx := context.Background()
	db := fixture.Defaulted(fixture.Database("orders", fixture.WithNamespace(ns)))
	db.UID = ""
	if withBackup {
		db.Spec.Backup = &dbv1.BackupConfiguration{
			ObjectStore: dbv1.ObjectStore{Endpoint: "https://store:7070", Bucket: "backups", Path: ns, CredentialsSecret: dbv1.SecretReference{Name: "store"}},
		}
	}
	if err := c.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	db.Status.CurrentPrimary = "orders-0"
	if err := c.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}
	createInstanceSecret(t, ctx, c, db)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-0", Labels: desired.SelectorLabels(db)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "postgres", Image: "postgres:17.6"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: backupTestIP}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *backupFixture) sidecar() *fakeBackups { return f.agents.servers[backupTestIP].backups }

func (f *backupFixture) database() *dbv1.Database {
	f.t.Helper()
	db := &dbv1.Database{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "orders"}, db); err != nil {
		f.t.Fatal(err)
	}
	return db
}

func (f *backupFixture) create(name, database string) {
	f.t.Helper()
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}, Spec: dbv1.BackupSpec{Database: database, ImmediateCheckpoint: ptr.To(true)}}
	if err := f.c.Create(context.Background(), b); err != nil {
		f.t.Fatal(err)
	}
}

func (f *backupFixture) backup(name string) *dbv1.Backup {
	f.t.Helper()
	b := &dbv1.Backup{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, b); err != nil {
		f.t.Fatal(err)
	}
	return b
}

// reconcile runs the Backup controller once on name.
func (f *backupFixture) reconcile(name string) ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: name}})
	if err != nil {
		f.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

// runToEnd reconciles name, moving the clock by each requeue, until it
// needs no more.
func (f *backupFixture) runToEnd(name string) *dbv1.Backup {
	f.t.Helper()
	for range 50 {
		res := f.reconcile(name)
		if res.RequeueAfter == 0 {
			return f.backup(name)
		}
		f.now = f.now.Add(res.RequeueAfter)
	}
	f.t.Fatalf("Backup %s still wants reconciles: %+v", name, f.backup(name).Status)
	return nil
}

func (f *backupFixture) events() string { return strings.Join(drain(f.recorder), "\n") }

// TestBackupOnDemand: a Backup runs on the primary through its agent,
// Running while the sidecar works (8 s on the test's clock), then
// Completed with barman-cloud's record, and the Database's status.backup
// names it; Events say started and completed; it is never run again.
func TestBackupOnDemand(t *testing.T) {
	f := newBackupFixture(t, true)
	f.create("nightly", "orders")
	res := f.reconcile("nightly")
	b := f.backup("nightly")
	if b.Status.Phase != dbv1.BackupPhaseRunning || b.Status.Pod != "orders-0" || b.Status.BackupName != "orders-nightly" || b.Status.StartedAt == nil {
		t.Fatalf("after the first reconcile: %+v", b.Status)
	}
	if res.RequeueAfter != backupPollInterval {
		t.Errorf("a running backup requeues after %v, want %v", res.RequeueAfter, backupPollInterval)
	}
	started := f.now
	b = f.runToEnd("nightly")
	st := b.Status
	if st.Phase != dbv1.BackupPhaseCompleted || st.BackupID != started.Format("20060102T150405") || st.BeginWAL == "" || st.EndWAL == "" ||
		st.BeginLSN != "0/4000028" || st.EndLSN != "0/5000100" || st.Size == nil || st.Size.Value() != 36<<20 || st.Error != "" ||
		!st.StartedAt.Time.Equal(started) || st.StoppedAt == nil || st.StoppedAt.Sub(started.Add(8*time.Second)) > 5*time.Second {
		t.Fatalf("completed status: %+v", st)
	}
	bs := f.database().Status.Backup
	if bs == nil || bs.LastSuccessfulBackup != "orders-nightly" || bs.LastSuccessfulBackupTime == nil || bs.FirstRecoverabilityPoint == nil ||
		!bs.FirstRecoverabilityPoint.Time.Equal(started) {
		t.Fatalf("the Database's status.backup: %+v", bs)
	}
	evs := f.events()
	for _, want := range []string{"Normal BackupStarted base backup orders-nightly started on orders-0", "Normal BackupCompleted base backup orders-nightly"} {
		if strings.Count(evs, want) != 2 {
			t.Errorf("Events want %q on the Backup and on the Database:\n%s", want, evs)
		}
	}
	f.now = f.now.Add(time.Hour)
	if res := f.reconcile("nightly"); res.RequeueAfter != 0 || f.sidecar().starts != 1 {
		t.Errorf("a Completed Backup was looked at again: %+v, %d starts", res, f.sidecar().starts)
	}
}

// TestBackupFailure: barman-cloud's error becomes the Failed Backup's
// error, with a Warning; the Failed Backup is not retried.
func TestBackupFailure(t *testing.T) {
	f := newBackupFixture(t, true)
	f.sidecar().failWith = "barman-cloud-backup: exit status 4: EndpointConnectionError: Could not connect to the endpoint URL"
	f.create("b1", "orders")
	b := f.runToEnd("b1")
	if b.Status.Phase != dbv1.BackupPhaseFailed || !strings.Contains(b.Status.Error, "Could not connect to the endpoint URL") || b.Status.StoppedAt == nil {
		t.Fatalf("status: %+v", b.Status)
	}
	if evs := f.events(); !strings.Contains(evs, "Warning BackupFailed base backup orders-b1 failed: barman-cloud-backup: exit status 4") {
		t.Errorf("no Warning with barman's error:\n%s", evs)
	}
	if bs := f.database().Status.Backup; bs != nil && bs.LastSuccessfulBackup != "" {
		t.Errorf("a failed backup became the last successful one: %+v", bs)
	}
	f.sidecar().failWith = ""
	f.reconcile("b1")
	if f.sidecar().starts != 1 || f.backup("b1").Status.Phase != dbv1.BackupPhaseFailed {
		t.Error("a Failed Backup was run again")
	}
}

// TestBackupPreconditions: a Backup of a Database without spec.backup, or
// of none, fails at once saying what to fix, and the agent is not called.
func TestBackupPreconditions(t *testing.T) {
	f := newBackupFixture(t, false)
	f.create("b1", "orders")
	f.create("b2", "missing")
	for name, want := range map[string]string{
		"b1": `Database "orders" has no spec.backup: set spec.backup.objectStore on it`,
		"b2": `Database "missing" does not exist in namespace ` + f.ns,
	} {
		if res := f.reconcile(name); res.RequeueAfter != 0 {
			t.Errorf("%s requeued: %+v", name, res)
		}
		if st := f.backup(name).Status; st.Phase != dbv1.BackupPhaseFailed || !strings.Contains(st.Error, want) {
			t.Errorf("%s: %+v, want Failed saying %q", name, st, want)
		}
	}
	if f.sidecar().starts != 0 {
		t.Error("the agent was asked for a backup")
	}
}

// TestBackupOneAtATime: a second Backup of the Database waits, Pending,
// while the first runs, and runs after it; a slow agent (the sidecar takes
// a minute) is polled, not waited for.
func TestBackupOneAtATime(t *testing.T) {
	f := newBackupFixture(t, true)
	f.sidecar().takes = time.Minute
	f.create("a", "orders")
	f.create("b", "orders")
	f.reconcile("a")
	if res := f.reconcile("b"); res.RequeueAfter != backupWaitInterval || f.backup("b").Status.Phase != dbv1.BackupPhasePending {
		t.Fatalf("the second Backup: %+v %+v", res, f.backup("b").Status)
	}
	if f.runToEnd("a").Status.Phase != dbv1.BackupPhaseCompleted {
		t.Fatal("the first Backup did not complete")
	}
	if f.runToEnd("b").Status.Phase != dbv1.BackupPhaseCompleted || f.sidecar().starts != 2 {
		t.Fatalf("the second Backup: %+v, %d starts", f.backup("b").Status, f.sidecar().starts)
	}
}

// TestBackupSchedule: the schedule creates exactly one Backup per due time,
// named for it, however often it is reconciled; a day missed while the
// operator was down is one Backup, of the latest time.
func TestBackupSchedule(t *testing.T) {
	f := newBackupFixture(t, true)
	db := f.database()
	db.Spec.Backup.Schedule = "0 3 * * *"
	if err := f.c.Update(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	// The Database was created in real time; the clock starts after it,
	// ten minutes before the next 03:00, so that no due time lies between
	// the two (at 01:00 that is 02:50 the same day, not the next one).
	next := time.Now().UTC().Truncate(24 * time.Hour).Add(3 * time.Hour)
	for !next.Add(-10 * time.Minute).After(time.Now()) {
		next = next.Add(24 * time.Hour)
	}
	f.now = next.Add(-10 * time.Minute)
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: "orders"}}
	sched := func() ctrl.Result {
		t.Helper()
		res, err := f.sched.Reconcile(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	scheduled := func() []string {
		t.Helper()
		list := &dbv1.BackupList{}
		if err := f.c.List(context.Background(), list, client.InNamespace(f.ns)); err != nil {
			t.Fatal(err)
		}
		names := make([]string, 0, len(list.Items))
		for _, b := range list.Items {
			names = append(names, b.Name)
		}
		return names
	}
	if res := sched(); res.RequeueAfter != 10*time.Minute || len(scheduled()) != 0 {
		t.Fatalf("before 03:00: %+v, %v", res, scheduled())
	}
	f.now = f.now.Add(10*time.Minute + 30*time.Second)
	day := f.now.Format("20060102")
	for range 3 {
		sched()
	}
	if got := scheduled(); len(got) != 1 || got[0] != "orders-"+day+"0300" {
		t.Fatalf("after 03:00 and three reconciles: %v, want orders-%s0300", got, day)
	}
	b := f.backup("orders-" + day + "0300")
	if b.Spec.Database != "orders" || b.Labels[dbv1.LabelBackupDatabase] != "orders" || *b.Spec.ImmediateCheckpoint {
		t.Errorf("the scheduled Backup: %+v %v", b.Spec, b.Labels)
	}
	// Down for three days: one Backup, of the latest time.
	f.now = f.now.Add(3*24*time.Hour + time.Hour)
	res := sched()
	sched()
	if got := scheduled(); len(got) != 2 || !strings.HasSuffix(got[1], f.now.Format("20060102")+"0300") {
		t.Fatalf("after three days down: %v", got)
	}
	if want := f.now.Truncate(24 * time.Hour).Add(27 * time.Hour).Sub(f.now); res.RequeueAfter != want {
		t.Errorf("requeue after %v, want %v (the next 03:00)", res.RequeueAfter, want)
	}
	if evs := f.events(); strings.Count(evs, "BackupScheduled") != 2 {
		t.Errorf("Events want two BackupScheduled:\n%s", evs)
	}
}

// TestBackupRetention: after each completed backup the recovery window is
// applied through the agent; firstRecoverabilityPoint moves to the oldest
// backup that remains, and the Backups whose backup was pruned are deleted.
func TestBackupRetention(t *testing.T) {
	f := newBackupFixture(t, true)
	db := f.database()
	db.Spec.Backup.Retention = "2d"
	if err := f.c.Update(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	firsts := make([]time.Time, 0, 4)
	for _, name := range []string{"d1", "d2", "d3", "d4"} {
		f.create(name, "orders")
		if b := f.runToEnd(name); b.Status.Phase != dbv1.BackupPhaseCompleted {
			t.Fatalf("%s: %+v", name, b.Status)
		}
		firsts = append(firsts, f.database().Status.Backup.FirstRecoverabilityPoint.Time)
		f.now = f.now.Add(24 * time.Hour)
	}
	if f.sidecar().retentionDays != 2 {
		t.Errorf("retention of %d days, want 2", f.sidecar().retentionDays)
	}
	// Backups began at day 0, 1, 2, 3. After d3 the window of 2 days
	// still needs d1 (the newest backup before the window's edge, its
	// base); after d4 it needs d2 and what follows.
	d2 := f.backup("d2").Status.StartedAt.Time
	if !firsts[3].Equal(d2) || !firsts[0].Equal(firsts[1]) || !firsts[2].Equal(firsts[0]) || !firsts[3].After(firsts[0]) {
		t.Errorf("firstRecoverabilityPoint after each backup %v, want it to move to d2's begin %v", firsts, d2)
	}
	list := &dbv1.BackupList{}
	if err := f.c.List(context.Background(), list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	left := make([]string, 0, len(list.Items))
	for _, b := range list.Items {
		left = append(left, b.Name)
	}
	if strings.Join(left, ",") != "d2,d3,d4" {
		t.Errorf("Backups left %v, want d2,d3,d4 (d1 pruned)", left)
	}
	if evs := f.events(); !strings.Contains(evs, "BackupPruned deleted Backup d1") {
		t.Errorf("no Event of the pruned Backup:\n%s", evs)
	}
}

// TestBackupKeepBackups: with keepBackups 1, each completed backup prunes
// the one before it, and firstRecoverabilityPoint is the newest's begin.
func TestBackupKeepBackups(t *testing.T) {
	f := newBackupFixture(t, true)
	db := f.database()
	db.Spec.Backup.KeepBackups = ptr.To[int32](1)
	if err := f.c.Update(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"k1", "k2"} {
		f.create(name, "orders")
		if b := f.runToEnd(name); b.Status.Phase != dbv1.BackupPhaseCompleted {
			t.Fatalf("%s: %+v", name, b.Status)
		}
		f.now = f.now.Add(time.Hour)
	}
	if got, want := f.database().Status.Backup.FirstRecoverabilityPoint.Time, f.backup("k2").Status.StartedAt.Time; !got.Equal(want) {
		t.Errorf("firstRecoverabilityPoint %v, want k2's begin %v", got, want)
	}
	list := &dbv1.BackupList{}
	if err := f.c.List(context.Background(), list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "k2" {
		t.Errorf("Backups left %d (%v), want only k2", len(list.Items), list.Items)
	}
	if evs := f.events(); !strings.Contains(evs, "BackupPruned deleted Backup k1: the retention (the newest backup only) no longer keeps its backup") {
		t.Errorf("no Event of the pruned Backup:\n%s", evs)
	}
}
