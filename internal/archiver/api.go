package archiver

import (
	"fmt"
	"time"
)

// The paths of the sidecar's API on its Unix socket.
const (
	PathArchive = "/v1/archive"
	PathRestore = "/v1/restore"
	PathBackup  = "/v1/backup"
	PathStatus  = "/v1/status"
	// PathCheckArchive checks that the Database's own WAL archive is
	// empty, before a restored server may archive into it.
	PathCheckArchive = "/v1/check-archive"
	// PathRecoveryBackups lists the recovery source's backups;
	// PathRecoveryRestore downloads one of them into RestoreDir.
	PathRecoveryBackups = "/v1/recovery/backups"
	PathRecoveryRestore = "/v1/recovery/restore"
	// PathRetention deletes the backups outside a recovery window and
	// answers with the backups that remain.
	PathRetention = "/v1/retention"
)

// RetentionRequest asks the sidecar to apply a retention policy: a
// recovery window of Days, or the newest Keep backups.
type RetentionRequest struct {
	Days int `json:"days,omitempty"`
	Keep int `json:"keep,omitempty"`
}

// Policy is barman-cloud's --retention-policy of r: "RECOVERY WINDOW OF
// n DAYS" or "REDUNDANCY n". Exactly one of Days and Keep must be set.
func (r RetentionRequest) Policy() (string, error) {
	switch {
	case r.Days > 0 && r.Keep == 0:
		return fmt.Sprintf("RECOVERY WINDOW OF %d DAYS", r.Days), nil
	case r.Keep > 0 && r.Days == 0:
		return fmt.Sprintf("REDUNDANCY %d", r.Keep), nil
	}
	return "", fmt.Errorf("a retention of %d days and %d backups: want exactly one of them, at least 1", r.Days, r.Keep)
}

// RetentionResult is what remains in the store after retention, oldest
// first.
type RetentionResult struct {
	Backups []BackupResult `json:"backups"`
}

// RestoreDir is where the sidecar downloads a base backup for the agent,
// beside PGDATA: the agent swaps it in once it is complete, so that an
// interrupted download never leaves a data directory that looks whole.
func RestoreDir(pgdata string) string { return pgdata + ".restore" }

// RecoveryRestoreRequest asks the sidecar to download a base backup of
// the recovery source into RestoreDir.
type RecoveryRestoreRequest struct {
	BackupID string `json:"backupID"`
}

// ArchiveRequest asks the sidecar to archive one WAL file.
type ArchiveRequest struct {
	// Path is archive_command's %p made absolute.
	Path string `json:"path"`
}

// RestoreRequest asks the sidecar to fetch one WAL file.
type RestoreRequest struct {
	// Name is restore_command's %f; Dest its %p made absolute.
	Name string `json:"name"`
	Dest string `json:"dest"`
	// Recovery fetches it from the recovery source's store (a restore's
	// recovery phase) instead of the Database's own.
	Recovery bool `json:"recovery,omitempty"`
}

// BackupRequest asks the sidecar for a base backup.
type BackupRequest struct {
	// Name is the backup's name in the store (barman's --name).
	Name string `json:"name,omitempty"`
	// Immediate asks for an immediate checkpoint.
	Immediate bool `json:"immediate,omitempty"`
}

// BackupResult is a finished base backup: barman-cloud's record of it.
type BackupResult struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	BeginWAL string `json:"beginWAL"`
	EndWAL   string `json:"endWAL"`
	// BeginLSN and EndLSN are the backup's WAL positions (barman's
	// begin_xlog, end_xlog).
	BeginLSN string `json:"beginLSN,omitempty"`
	EndLSN   string `json:"endLSN,omitempty"`
	// Timeline is the timeline the backup began on.
	Timeline int `json:"timeline,omitempty"`
	// BeginTime and EndTime are as barman-cloud prints them (ctime, in
	// the server's time zone, UTC in the sidecar).
	BeginTime string `json:"beginTime"`
	EndTime   string `json:"endTime"`
	// Size is the data's size in bytes, as barman-cloud measured it.
	Size int64 `json:"size,omitempty"`
	// Seconds is how long barman-cloud-backup ran.
	Seconds float64 `json:"seconds"`
}

// Status is what the sidecar knows of archiving, for the agent's status
// and the ContinuousArchiving condition: pg_stat_archiver has the counts
// but not barman-cloud's reason.
type Status struct {
	LastArchivedWAL     string    `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime    time.Time `json:"lastArchivedTime,omitzero"`
	LastFailedWAL       string    `json:"lastFailedWAL,omitempty"`
	LastFailedTime      time.Time `json:"lastFailedTime,omitzero"`
	LastError           string    `json:"lastError,omitempty"`
	ConsecutiveFailures int       `json:"consecutiveFailures,omitempty"`
}

// ErrorResponse is the body of every failed call.
type ErrorResponse struct {
	Error string `json:"error"`
}

// timeLayouts are the ways barman-cloud-backup-list prints a time: ctime
// in its JSON (the server's time zone, UTC in the sidecar, not printed),
// ISO with a zone in other versions.
var timeLayouts = []string{time.ANSIC, "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05-07:00", time.RFC3339Nano}

// ParseTime parses a BackupResult's BeginTime or EndTime; a time without
// a zone is UTC.
func ParseTime(s string) (time.Time, bool) {
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
