package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/fixture"
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
