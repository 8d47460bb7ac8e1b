package archiver

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// Target is where a restore (spec.bootstrap.recovery) stops: a moment, a
// WAL position, or, with neither, the end of the archive (latest).
type Target struct {
	Time time.Time
	LSN  replication.LSN
	// HasLSN is true when LSN is the target (0/0 is a position too).
	HasLSN bool
}

// Latest reports whether t restores to the end of the archive.
func (t Target) Latest() bool { return t.Time.IsZero() && !t.HasLSN }

// String is t as ParseTarget reads it: latest, time=RFC3339, lsn=X/X.
func (t Target) String() string {
	switch {
	case t.HasLSN:
		return "lsn=" + t.LSN.String()
	case !t.Time.IsZero():
		return "time=" + t.Time.UTC().Format(time.RFC3339Nano)
	}
	return "latest"
}

// ParseTarget reads a Target from its String form (the agent's
// DBKEEPER_RECOVERY_TARGET).
func ParseTarget(s string) (Target, error) {
	kind, value, _ := strings.Cut(s, "=")
	switch kind {
	case "latest":
		if value != "" {
			return Target{}, fmt.Errorf("recovery target %q: latest takes no value", s)
		}
		return Target{}, nil
	case "time":
		t, err := time.Parse(time.RFC3339Nano, value)
		if err != nil {
			return Target{}, fmt.Errorf("recovery target %q: %w", s, err)
		}
		return Target{Time: t}, nil
	case "lsn":
		l, err := replication.ParseLSN(value)
		if err != nil {
			return Target{}, fmt.Errorf("recovery target %q: %w", s, err)
		}
		return Target{LSN: l, HasLSN: true}, nil
	}
	return Target{}, fmt.Errorf("recovery target %q: want latest, time=RFC3339 or lsn=X/X", s)
}

// barmanTimeLayout is how barman-cloud-backup-list --format json writes a
// backup's begin and end times: Python's ctime(), without a zone. The
// sidecar runs in UTC (a container's default), so the times are UTC.
const barmanTimeLayout = "Mon Jan _2 15:04:05 2006"

// ParseBarmanTime reads a time of barman-cloud-backup-list's JSON.
func ParseBarmanTime(s string) (time.Time, error) {
	return time.ParseInLocation(barmanTimeLayout, s, time.UTC)
}

// ErrNoBackups is ChooseBackup's answer for a store without a completed
// backup of the server.
var ErrNoBackups = errors.New("the store holds no completed base backup")

// BeforeFirstError is ChooseBackup's answer for a target before the end
// of the oldest backup: no restore can reach it.
type BeforeFirstError struct {
	Target Target
	// First is the oldest backup; its end is the earliest recoverable
	// point.
	First BackupResult
}

func (e *BeforeFirstError) Error() string {
	if e.Target.HasLSN {
		return fmt.Sprintf("the target LSN %s lies before the earliest recoverable point, LSN %s (the end of the oldest backup, %s, at %s UTC): choose a target after it",
			e.Target.LSN, e.First.EndLSN, e.First.ID, e.First.EndTime)
	}
	return fmt.Sprintf("the target time %s lies before the earliest recoverable point, %s UTC (the end of the oldest backup, %s, LSN %s): choose a target after it",
		e.Target.Time.UTC().Format(time.RFC3339), e.First.EndTime, e.First.ID, e.First.EndLSN)
}

// ChooseBackup returns the newest completed backup that ended before
// target (backups oldest first, as ParseBackupList returns them): a restore
// replays the archive from its end. For latest, the newest backup.
func ChooseBackup(backups []BackupResult, target Target) (BackupResult, error) {
	if len(backups) == 0 {
		return BackupResult{}, ErrNoBackups
	}
	if target.Latest() {
		return backups[len(backups)-1], nil
	}
	var errs []error
	for i := len(backups) - 1; i >= 0; i-- {
		b := backups[i]
		if target.HasLSN {
			end, err := replication.ParseLSN(b.EndLSN)
			if err != nil {
				errs = append(errs, fmt.Errorf("backup %s: end LSN %q: %w", b.ID, b.EndLSN, err))
				continue
			}
			if end <= target.LSN {
				return b, nil
			}
			continue
		}
		end, err := ParseBarmanTime(b.EndTime)
		if err != nil {
			errs = append(errs, fmt.Errorf("backup %s: end time %q: %w", b.ID, b.EndTime, err))
			continue
		}
		if !end.After(target.Time) {
			return b, nil
		}
	}
	if len(errs) > 0 {
		return BackupResult{}, errors.Join(errs...)
	}
	return BackupResult{}, &BeforeFirstError{Target: target, First: backups[0]}
}
