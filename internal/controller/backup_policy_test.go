package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestDueSchedule(t *testing.T) {
	for _, tc := range []struct {
		name, schedule, since, now, due, next string
	}{
		{"not yet due", "0 3 * * *", "2026-12-04T01:00:00Z", "2026-12-04T02:59:59Z", "", "2026-12-04T03:00:00Z"},
		{"due exactly now", "0 3 * * *", "2026-12-04T01:00:00Z", "2026-12-04T03:00:00Z", "2026-12-04T03:00:00Z", "2026-12-05T03:00:00Z"},
		{"due a minute ago", "0 3 * * *", "2026-12-04T01:00:00Z", "2026-12-04T03:01:00Z", "2026-12-04T03:00:00Z", "2026-12-05T03:00:00Z"},
		{"already taken: since is that time", "0 3 * * *", "2026-12-04T03:00:00Z", "2026-12-04T03:01:00Z", "", "2026-12-05T03:00:00Z"},
		{"three days missed while down: the latest only", "0 3 * * *", "2026-12-01T03:00:00Z", "2026-12-04T09:00:00Z", "2026-12-04T03:00:00Z", "2026-12-05T03:00:00Z"},
		{"every 15 minutes", "*/15 * * * *", "2026-12-04T10:00:00Z", "2026-12-04T10:31:00Z", "2026-12-04T10:30:00Z", "2026-12-04T10:45:00Z"},
		{"a macro", "@hourly", "2026-12-04T10:00:00Z", "2026-12-04T10:59:00Z", "", "2026-12-04T11:00:00Z"},
		{"a zone other than UTC is read as UTC", "0 3 * * *", "2026-12-04T01:00:00+01:00", "2026-12-04T04:30:00+01:00", "2026-12-04T03:00:00Z", "2026-12-05T03:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched, err := rules.ParseSchedule(tc.schedule)
			if err != nil {
				t.Fatal(err)
			}
			due, next := dueSchedule(sched, utc(tc.since), utc(tc.now))
			var want time.Time
			if tc.due != "" {
				want = utc(tc.due)
			}
			if !due.Equal(want) || !next.Equal(utc(tc.next)) {
				t.Errorf("due %v next %v; want %v, %v", due, next, want, utc(tc.next))
			}
		})
	}
}

func TestBackupNames(t *testing.T) {
	if got := scheduledBackupName("orders", utc("2026-12-04T04:05:59+01:00")); got != "orders-202612040305" {
		t.Errorf("scheduledBackupName = %q, want orders-202612040305 (UTC, to the minute)", got)
	}
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "first"}, Spec: dbv1.BackupSpec{Database: "orders"}}
	if got := barmanName(b); got != "orders-first" {
		t.Errorf("barmanName = %q, want orders-first (barman reserves first)", got)
	}
}

func TestParseBarmanTime(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Fri Dec  4 10:00:05 2026", "2026-12-04T10:00:05Z"},
		{"Mon Dec 14 10:00:05 2026", "2026-12-14T10:00:05Z"},
		{"2026-12-04 10:00:05.123456+00:00", "2026-12-04T10:00:05.123456Z"},
		{"2026-12-04 11:00:05+01:00", "2026-12-04T10:00:05Z"},
		{"2026-12-04T10:00:05Z", "2026-12-04T10:00:05Z"},
		{"yesterday", ""},
	} {
		got, ok := parseBarmanTime(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("parseBarmanTime(%q) = %v, want no time", tc.in, got)
			}
			continue
		}
		if want, _ := time.Parse(time.RFC3339Nano, tc.want); !ok || !got.Equal(want) {
			t.Errorf("parseBarmanTime(%q) = %v, %v; want %v", tc.in, got, ok, want)
		}
	}
}

// TestBackupStatusOf checks the transitions of a Running Backup on the
// agent's report.
func TestBackupStatusOf(t *testing.T) {
	running := dbv1.BackupStatus{Phase: dbv1.BackupPhaseRunning, Pod: "orders-0", BackupName: "orders-b", StartedAt: ptrTime(utc("2026-12-04T10:00:00Z"))}
	finished := utc("2026-12-04T10:00:09Z")
	res := &archiver.BackupResult{ID: "20261204T100001", BeginWAL: "W1", EndWAL: "W2", BeginLSN: "0/4000028", EndLSN: "0/5000100",
		BeginTime: "Fri Dec  4 10:00:01 2026", EndTime: "Fri Dec  4 10:00:08 2026", Size: 1 << 20}
	for _, tc := range []struct {
		name  string
		run   instance.BackupState
		phase dbv1.BackupPhase
		check func(dbv1.BackupStatus) string
	}{
		{"still running", instance.BackupState{Phase: instance.BackupRunning}, dbv1.BackupPhaseRunning, nil},
		{"failed with barman's error", instance.BackupState{Phase: instance.BackupFailed, Error: "barman-cloud-backup: exit status 1: no bucket", FinishedAt: finished},
			dbv1.BackupPhaseFailed, func(s dbv1.BackupStatus) string {
				if s.Error != "barman-cloud-backup: exit status 1: no bucket" || !s.StoppedAt.Time.Equal(finished) {
					return "error or stop time not carried"
				}
				return ""
			}},
		{"failed without a reason", instance.BackupState{Phase: instance.BackupFailed}, dbv1.BackupPhaseFailed, func(s dbv1.BackupStatus) string {
			if !strings.Contains(s.Error, "without a reason") {
				return "no error said"
			}
			return ""
		}},
		{"completed without a record", instance.BackupState{Phase: instance.BackupCompleted}, dbv1.BackupPhaseFailed, nil},
		{"completed", instance.BackupState{Phase: instance.BackupCompleted, Result: res, FinishedAt: finished}, dbv1.BackupPhaseCompleted, func(s dbv1.BackupStatus) string {
			if s.BackupID != res.ID || s.BeginWAL != "W1" || s.EndWAL != "W2" || s.BeginLSN != "0/4000028" || s.EndLSN != "0/5000100" ||
				!s.StartedAt.Time.Equal(utc("2026-12-04T10:00:01Z")) || !s.StoppedAt.Time.Equal(utc("2026-12-04T10:00:08Z")) ||
				s.Size == nil || s.Size.Value() != 1<<20 || s.Pod != "orders-0" || s.Error != "" {
				return "barman's record not carried"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := backupStatusOf(running, &tc.run)
			if got.Phase != tc.phase {
				t.Fatalf("phase %s, want %s (%+v)", got.Phase, tc.phase, got)
			}
			if tc.check != nil {
				if msg := tc.check(got); msg != "" {
					t.Errorf("%s: %+v", msg, got)
				}
			}
		})
	}
	if !backupFinished(dbv1.BackupPhaseCompleted) || !backupFinished(dbv1.BackupPhaseFailed) || backupFinished(dbv1.BackupPhaseRunning) || backupFinished("") {
		t.Error("backupFinished: only Completed and Failed are final")
	}
}

func TestBackupPrecondition(t *testing.T) {
	b := &dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "shop"}, Spec: dbv1.BackupSpec{Database: "orders"}}
	pg := &dbv1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders"}, Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres}}
	withBackup := pg.DeepCopy()
	withBackup.Spec.Backup = &dbv1.BackupConfiguration{}
	my := withBackup.DeepCopy()
	my.Spec.Engine = dbv1.EngineMySQL
	for _, tc := range []struct {
		name string
		db   *dbv1.Database
		want string
	}{
		{"no Database", nil, `Database "orders" does not exist in namespace shop: create it, or set spec.database`},
		{"no spec.backup", pg, `Database "orders" has no spec.backup: set spec.backup.objectStore`},
		{"mysql", my, "backups are for postgres Databases only"},
		{"ready", withBackup, ""},
	} {
		got := backupPrecondition(b, tc.db)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRetentionResults(t *testing.T) {
	remaining := []archiver.BackupResult{
		{ID: "c", BeginTime: "Fri Dec  4 03:00:00 2026"},
		{ID: "b", BeginTime: "Thu Dec  3 03:00:00 2026"},
		{ID: "x", BeginTime: "garbled"},
	}
	if got := firstRecoverabilityPoint(remaining); got == nil || !got.Time.Equal(utc("2026-12-03T03:00:00Z")) {
		t.Errorf("firstRecoverabilityPoint = %v, want the oldest begin time", got)
	}
	if got := firstRecoverabilityPoint(nil); got != nil {
		t.Errorf("firstRecoverabilityPoint of nothing = %v", got)
	}
	done := func(name, db, id string, phase dbv1.BackupPhase) dbv1.Backup {
		return dbv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: dbv1.BackupSpec{Database: db}, Status: dbv1.BackupStatus{Phase: phase, BackupID: id}}
	}
	backups := []dbv1.Backup{
		done("a", "orders", "a", dbv1.BackupPhaseCompleted),
		done("b", "orders", "b", dbv1.BackupPhaseCompleted),
		done("f", "orders", "", dbv1.BackupPhaseFailed),
		done("other", "invoices", "a", dbv1.BackupPhaseCompleted),
		done("r", "orders", "", dbv1.BackupPhaseRunning),
	}
	got := prunedBackups("orders", backups, remaining)
	if len(got) != 1 || got[0].Name != "a" {
		t.Errorf("prunedBackups = %v, want only a", got)
	}
	if other := otherRunning(&backups[0], backups); other != "r" {
		t.Errorf("otherRunning = %q, want r", other)
	}
	if other := otherRunning(&backups[4], backups); other != "" {
		t.Errorf("otherRunning of the running one = %q, want none", other)
	}
}

func TestRetentionOf(t *testing.T) {
	tests := []struct {
		name   string
		backup dbv1.BackupConfiguration
		want   instance.RetentionRequest
		says   string
	}{
		{name: "everything kept", backup: dbv1.BackupConfiguration{}},
		{name: "a window in days", backup: dbv1.BackupConfiguration{Retention: "7d"}, want: instance.RetentionRequest{Days: 7}, says: "a recovery window of 7d"},
		{name: "a window in weeks", backup: dbv1.BackupConfiguration{Retention: "2w"}, want: instance.RetentionRequest{Days: 14}, says: "a recovery window of 2w"},
		{name: "a number of backups", backup: dbv1.BackupConfiguration{KeepBackups: ptr.To[int32](1)}, want: instance.RetentionRequest{Keep: 1}, says: "the newest backup only"},
		{name: "backups", backup: dbv1.BackupConfiguration{KeepBackups: ptr.To[int32](3)}, want: instance.RetentionRequest{Keep: 3}, says: "the newest 3 backups"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, says, err := retentionOf(&tt.backup)
			if err != nil || got != tt.want || says != tt.says {
				t.Errorf("retentionOf = %+v, %q, %v; want %+v, %q", got, says, err, tt.want, tt.says)
			}
		})
	}
}
