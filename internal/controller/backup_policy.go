package controller

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// barmanName is a Backup's name in the store: barman-cloud reserves the
// names first, last, latest and oldest, which a Backup may be called.
func barmanName(b *dbv1.Backup) string {
	return b.Spec.Database + "-" + b.Name
}

// scheduledBackupName is the name of the Backup of db's schedule at t:
// one name per time, so that two operators, or one that restarted, create
// it once.
func scheduledBackupName(db string, t time.Time) string {
	return db + "-" + t.UTC().Format("200601021504")
}

// dueSchedule returns the latest time of sched after since and not after
// now, zero when there is none, and the first time after now. Times missed
// while the operator was down are one backup, the latest: a backup taken
// now serves them all.
func dueSchedule(sched cron.Schedule, since, now time.Time) (due, next time.Time) {
	since, now = since.UTC(), now.UTC()
	for t := sched.Next(since); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		due = t
	}
	return due, sched.Next(now)
}

// backupFinished reports whether a Backup is done for good: a finished
// Backup is never run again.
func backupFinished(phase dbv1.BackupPhase) bool {
	return phase == dbv1.BackupPhaseCompleted || phase == dbv1.BackupPhaseFailed
}

// backupPrecondition returns why a Backup of db cannot run, naming the fix,
// or "" when it can; db nil is a Database that does not exist.
func backupPrecondition(b *dbv1.Backup, db *dbv1.Database) string {
	switch {
	case db == nil:
		return fmt.Sprintf("Database %q does not exist in namespace %s: create it, or set spec.database to an existing Database, then create the Backup again",
			b.Spec.Database, b.Namespace)
	case db.Spec.Engine != dbv1.EnginePostgres:
		return fmt.Sprintf("Database %q runs %s: backups are for postgres Databases only", db.Name, db.Spec.Engine)
	case db.Spec.Backup == nil:
		return fmt.Sprintf("Database %q has no spec.backup: set spec.backup.objectStore on it, then create the Backup again", db.Name)
	}
	return ""
}

// parseBarmanTime parses a time of barman-cloud-backup-list.
func parseBarmanTime(s string) (time.Time, bool) { return archiver.ParseTime(s) }

// backupStatusOf returns the status of a Running Backup once the agent
// reports its backup: Failed with its error, or Completed with
// barman-cloud's record (its times when they parse, else the agent's).
// A backup still running changes nothing.
func backupStatusOf(st dbv1.BackupStatus, run *instance.BackupState) dbv1.BackupStatus {
	out := *st.DeepCopy()
	switch run.Phase {
	case instance.BackupFailed:
		out.Phase, out.Error = dbv1.BackupPhaseFailed, run.Error
		if out.Error == "" {
			out.Error = "the base backup failed without a reason"
		}
		if !run.FinishedAt.IsZero() {
			out.StoppedAt = ptrTime(run.FinishedAt)
		}
	case instance.BackupCompleted:
		if run.Result == nil {
			out.Phase, out.Error = dbv1.BackupPhaseFailed, "the agent reported the backup completed without barman-cloud's record of it"
			return out
		}
		r := run.Result
		out.Phase, out.Error = dbv1.BackupPhaseCompleted, ""
		out.BackupID, out.BeginWAL, out.EndWAL, out.BeginLSN, out.EndLSN = r.ID, r.BeginWAL, r.EndWAL, r.BeginLSN, r.EndLSN
		if t, ok := parseBarmanTime(r.BeginTime); ok {
			out.StartedAt = ptrTime(t)
		}
		if t, ok := parseBarmanTime(r.EndTime); ok {
			out.StoppedAt = ptrTime(t)
		} else if !run.FinishedAt.IsZero() {
			out.StoppedAt = ptrTime(run.FinishedAt)
		}
		if r.Size > 0 {
			out.Size = resource.NewQuantity(r.Size, resource.BinarySI)
		}
	}
	return out
}

func ptrTime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &m
}

// firstRecoverabilityPoint is the begin time of the oldest backup that
// remains in the store; nil when none remains or none parses.
func firstRecoverabilityPoint(remaining []archiver.BackupResult) *metav1.Time {
	var first time.Time
	for _, b := range remaining {
		if t, ok := parseBarmanTime(b.BeginTime); ok && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	if first.IsZero() {
		return nil
	}
	return ptrTime(first)
}

// retentionOf is the retention spec.backup asks for, as the agent's
// request and in words ("a recovery window of 7d", "the newest 2
// backups"), "" when it keeps everything.
func retentionOf(b *dbv1.BackupConfiguration) (instance.RetentionRequest, string, error) {
	switch {
	case b.KeepBackups != nil:
		n := int(*b.KeepBackups)
		if n == 1 {
			return instance.RetentionRequest{Keep: 1}, "the newest backup only", nil
		}
		return instance.RetentionRequest{Keep: n}, fmt.Sprintf("the newest %d backups", n), nil
	case b.Retention != "":
		days, err := rules.RetentionDays(b.Retention)
		if err != nil {
			return instance.RetentionRequest{}, "", err
		}
		return instance.RetentionRequest{Days: days}, "a recovery window of " + b.Retention, nil
	}
	return instance.RetentionRequest{}, "", nil
}

// prunedBackups returns the Completed Backups of database whose backup is
// no longer among those remaining in the store: retention deleted it.
func prunedBackups(database string, backups []dbv1.Backup, remaining []archiver.BackupResult) []*dbv1.Backup {
	kept := map[string]bool{}
	for _, r := range remaining {
		kept[r.ID] = true
	}
	var out []*dbv1.Backup
	for i := range backups {
		b := &backups[i]
		if b.Spec.Database == database && b.Status.Phase == dbv1.BackupPhaseCompleted && b.Status.BackupID != "" && !kept[b.Status.BackupID] {
			out = append(out, b)
		}
	}
	return out
}

// otherRunning returns the name of another Running Backup of b's
// Database, or "".
func otherRunning(b *dbv1.Backup, backups []dbv1.Backup) string {
	for _, o := range backups {
		if o.Name != b.Name && o.Spec.Database == b.Spec.Database && o.Status.Phase == dbv1.BackupPhaseRunning {
			return o.Name
		}
	}
	return ""
}
