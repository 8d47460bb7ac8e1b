package archiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
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

// errorResponse is the body of every failed call.
type errorResponse struct {
	Error string `json:"error"`
}

// Server is the sidecar's end: it runs barman-cloud for the archive_command
// and restore_command of the postgres container, and base backups.
type Server struct {
	// Store is where the backups go; its Destination is "" for a
	// Database without spec.backup (a restored one: the sidecar then
	// serves the restore only).
	Store Store
	// Recovery is the store of spec.bootstrap.recovery's source, nil
	// without one; RecoveryEnv is barman-cloud's environment for it (the
	// source's credentials and CA).
	Recovery    *Store
	RecoveryEnv []string
	// PGData is the data directory, mounted at the same path as in the
	// postgres container (barman-cloud-backup reads the path the server
	// reports).
	PGData string
	// Conn is how barman-cloud-backup reaches the server.
	Conn Conn
	// Env is barman-cloud's environment: credentials, AWS_CA_BUNDLE, HOME.
	Env []string
	// Timeout bounds one barman-cloud run for a WAL file (default 5 min):
	// archive_command has no timeout of its own, and a hung upload would
	// stop archiving for good.
	Timeout time.Duration
	// Log receives one line per archived or failed file; nil: stderr.
	Log *log.Logger

	mu     sync.Mutex
	status Status
	// restored are the files restore fetched from the Database's own
	// store, which archive then need not upload again (a standby's
	// archive_mode always archives what it restored), oldest first.
	restored []string
}

// maxRestored bounds Server.restored: a standby catching up asks for a
// few files a minute, and a name forgotten is only uploaded again.
const maxRestored = 256

// rememberRestored records that name was restored from the own store.
func (s *Server) rememberRestored(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.restored, name) {
		return
	}
	if len(s.restored) == maxRestored {
		s.restored = s.restored[1:]
	}
	s.restored = append(s.restored, name)
}

// wasRestored reports whether name came from the own store.
func (s *Server) wasRestored(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.restored, name)
}

func (s *Server) logf(format string, args ...any) {
	l := s.Log
	if l == nil {
		l = log.New(os.Stderr, "archiver: ", log.LstdFlags|log.Lmicroseconds)
	}
	l.Printf(format, args...)
}

func (s *Server) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return 5 * time.Minute
}

// Handler serves the sidecar's API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathArchive, s.archive)
	mux.HandleFunc("POST "+PathRestore, s.restore)
	mux.HandleFunc("POST "+PathBackup, s.backup)
	mux.HandleFunc("POST "+PathCheckArchive, s.checkArchive)
	mux.HandleFunc("GET "+PathRecoveryBackups, s.recoveryBackups)
	mux.HandleFunc("POST "+PathRecoveryRestore, s.recoveryRestore)
	mux.HandleFunc("POST "+PathRetention, s.retention)
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		st := s.status
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, st)
	})
	return mux
}

// Serve listens on the Unix socket at path (replacing a stale one, mode
// 0600: only the user both containers run as may call it) until ctx ends.
func (s *Server) Serve(ctx context.Context, path string) error {
	if err := s.validate(); err != nil {
		return err
	}
	if err := s.CheckTools(ctx); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if s.hasStore() {
		s.logf("serving on %s for %s/%s", path, s.Store.Destination, s.Store.ServerName)
	} else {
		s.logf("serving on %s without a store of its own (no spec.backup): restore only", path)
	}
	if s.Recovery != nil {
		s.logf("recovery source: %s/%s", s.Recovery.Destination, s.Recovery.ServerName)
	}
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// CheckTools fails when the sidecar's barman-cloud lacks an option the
// store needs: a KMS key (Store.KMSKeyID) needs --sse-kms-key-id, which
// barman-cloud has from 3.5 on. Without the check every archive_command
// would fail with barman-cloud's usage error while WAL piles up; the
// sidecar refuses to start instead, saying what to change.
func (s *Server) CheckTools(ctx context.Context) error {
	if !s.hasStore() || s.Store.KMSKeyID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := s.run(ctx, []string{CommandWALArchive, "--help"})
	if err != nil {
		return fmt.Errorf("asking barman-cloud for its options: %w", err)
	}
	if !bytes.Contains(out, []byte(OptionSSEKMSKeyID)) {
		return fmt.Errorf("spec.backup.kmsKeyID needs barman-cloud 3.5 or newer (its %s option), and the backup image's %s has no such option: "+
			"run the operator with a --backup-image of barman-cloud 3.5 or newer, or remove kmsKeyID to encrypt with the AWS managed key (aws/s3)",
			OptionSSEKMSKeyID, CommandWALArchive)
	}
	return nil
}

// hasStore reports whether the Database has its own store.
func (s *Server) hasStore() bool { return s.Store.Destination != "" }

// validate checks the stores the sidecar has: its own, the recovery
// source's, at least one.
func (s *Server) validate() error {
	var errs []error
	if s.hasStore() {
		errs = append(errs, s.Store.Validate())
	}
	if s.Recovery != nil {
		if err := s.Recovery.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("recovery source: %w", err))
		}
	}
	if !s.hasStore() && s.Recovery == nil {
		errs = append(errs, errors.New("neither a store nor a recovery source is configured"))
	}
	return errors.Join(errs...)
}

var errNoStore = errors.New("this Database has no spec.backup: there is no store to archive to")

func (s *Server) archive(w http.ResponseWriter, r *http.Request) {
	if !s.hasStore() {
		writeJSON(w, http.StatusConflict, errorResponse{errNoStore.Error()})
		return
	}
	var req ArchiveRequest
	if !readJSON(w, r, &req) {
		return
	}
	path, err := ArchivePath(s.PGData, s.PGData, req.Path)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{err.Error()})
		return
	}
	name := filepath.Base(path)
	if s.wasRestored(name) {
		// The file came from the store: it is there already. A standby
		// (archive_mode always) archives every file it restored, which
		// doubled its barman-cloud runs while it caught up.
		s.mu.Lock()
		s.status.LastArchivedWAL, s.status.LastArchivedTime = name, time.Now()
		s.status.ConsecutiveFailures = 0
		s.mu.Unlock()
		s.logf("%s is in the store already: it was restored from it", name)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout())
	defer cancel()
	start := time.Now()
	_, err = s.run(ctx, s.Store.WALArchive(path))
	s.mu.Lock()
	if err != nil {
		s.status.LastFailedWAL, s.status.LastFailedTime, s.status.LastError = name, time.Now(), err.Error()
		s.status.ConsecutiveFailures++
	} else {
		s.status.LastArchivedWAL, s.status.LastArchivedTime = name, time.Now()
		s.status.ConsecutiveFailures = 0
	}
	s.mu.Unlock()
	if err != nil {
		s.logf("archiving %s failed after %s: %v", name, time.Since(start).Round(time.Millisecond), err)
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	s.logf("archived %s in %s", name, time.Since(start).Round(time.Millisecond))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	var req RestoreRequest
	if !readJSON(w, r, &req) {
		return
	}
	dest, err := RestorePath(s.PGData, s.PGData, req.Name, req.Dest)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{err.Error()})
		return
	}
	store, env := s.Store, s.Env
	if req.Recovery {
		if s.Recovery == nil {
			writeJSON(w, http.StatusConflict, errorResponse{"no recovery source is configured"})
			return
		}
		store, env = *s.Recovery, s.RecoveryEnv
	} else if !s.hasStore() {
		writeJSON(w, http.StatusConflict, errorResponse{errNoStore.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout())
	defer cancel()
	start := time.Now()
	if _, err := s.runEnv(ctx, env, store.WALRestore(req.Name, dest)); err != nil {
		if notInArchive(err) {
			// Recovery asks for files past the end of the archive (the
			// next segment, a later timeline's history) all the time:
			// an answer, not a failure worth a log line.
			writeJSON(w, http.StatusNotFound, errorResponse{fmt.Sprintf("%s is not in the archive", req.Name)})
			return
		}
		s.logf("restoring %s: %v", req.Name, err)
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	if !req.Recovery {
		s.rememberRestored(req.Name)
	}
	s.logf("restored %s in %s", req.Name, time.Since(start).Round(time.Millisecond))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	if !s.hasStore() {
		writeJSON(w, http.StatusConflict, errorResponse{errNoStore.Error()})
		return
	}
	var req BackupRequest
	if !readJSON(w, r, &req) {
		return
	}
	start := time.Now()
	if _, err := s.run(r.Context(), s.Store.Backup(req.Name, s.Conn, req.Immediate)); err != nil {
		s.logf("backup %q failed: %v", req.Name, err)
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	took := time.Since(start)
	res, err := s.lastBackup(r.Context(), req.Name)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	res.Seconds = took.Seconds()
	s.logf("backup %s (%s) done in %s: WAL %s to %s", res.ID, res.Name, took.Round(time.Millisecond), res.BeginWAL, res.EndWAL)
	writeJSON(w, http.StatusOK, res)
}

// checkArchive answers 204 when the Database's own WAL archive holds no
// file (or the Database has no store), 409 with barman-cloud's reason
// otherwise: a restored server must never archive into a used archive.
func (s *Server) checkArchive(w http.ResponseWriter, r *http.Request) {
	if !s.hasStore() {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout())
	defer cancel()
	if _, err := s.run(ctx, s.Store.CheckWALArchive(0)); err != nil {
		writeJSON(w, http.StatusConflict, errorResponse{fmt.Sprintf("the WAL archive %s/%s is not empty, or cannot be read: %v", s.Store.Destination, s.Store.ServerName, err)})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// recoveryBackups lists the recovery source's completed backups, oldest
// first.
func (s *Server) recoveryBackups(w http.ResponseWriter, r *http.Request) {
	if s.Recovery == nil {
		writeJSON(w, http.StatusConflict, errorResponse{"no recovery source is configured"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout())
	defer cancel()
	out, err := s.runEnv(ctx, s.RecoveryEnv, s.Recovery.BackupList())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	list, err := ParseBackupList(out)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// recoveryRestore downloads a base backup of the recovery source into
// RestoreDir (emptied first: the remains of an interrupted download).
func (s *Server) recoveryRestore(w http.ResponseWriter, r *http.Request) {
	if s.Recovery == nil {
		writeJSON(w, http.StatusConflict, errorResponse{"no recovery source is configured"})
		return
	}
	var req RecoveryRestoreRequest
	if !readJSON(w, r, &req) {
		return
	}
	if !backupIDPattern.MatchString(req.BackupID) {
		writeJSON(w, http.StatusBadRequest, errorResponse{fmt.Sprintf("backup id %q: want barman's YYYYMMDDTHHMMSS", req.BackupID)})
		return
	}
	dir := RestoreDir(s.PGData)
	if err := os.RemoveAll(dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, errorResponse{err.Error()})
		return
	}
	start := time.Now()
	if _, err := s.runEnv(r.Context(), s.RecoveryEnv, s.Recovery.Restore(req.BackupID, dir)); err != nil {
		_ = os.RemoveAll(dir)
		s.logf("restoring backup %s failed: %v", req.BackupID, err)
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	s.logf("restored backup %s of %s/%s into %s in %s", req.BackupID, s.Recovery.Destination, s.Recovery.ServerName, dir, time.Since(start).Round(time.Millisecond))
	w.WriteHeader(http.StatusNoContent)
}

// backupIDPattern is barman's backup id, a timestamp.
var backupIDPattern = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}$`)

// retention deletes what a retention policy no longer keeps and answers
// with the backups that remain, oldest first.
func (s *Server) retention(w http.ResponseWriter, r *http.Request) {
	var req RetentionRequest
	if !readJSON(w, r, &req) {
		return
	}
	policy, err := req.Policy()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{err.Error()})
		return
	}
	if _, err := s.run(r.Context(), s.Store.DeleteByRetention(policy)); err != nil {
		s.logf("retention %q failed: %v", policy, err)
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	out, err := s.run(r.Context(), s.Store.BackupList())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	backups, err := ParseBackupList(out)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, errorResponse{err.Error()})
		return
	}
	s.logf("retention %q applied: %d backups remain", policy, len(backups))
	writeJSON(w, http.StatusOK, RetentionResult{Backups: backups})
}

// lastBackup finds the backup named name, or the newest one, in the store.
func (s *Server) lastBackup(ctx context.Context, name string) (BackupResult, error) {
	out, err := s.run(ctx, s.Store.BackupList())
	if err != nil {
		return BackupResult{}, err
	}
	backups, err := ParseBackupList(out)
	if err != nil {
		return BackupResult{}, err
	}
	for i := len(backups) - 1; i >= 0; i-- {
		if name == "" || backups[i].Name == name {
			return backups[i], nil
		}
	}
	return BackupResult{}, fmt.Errorf("no backup named %q in the store's list", name)
}

// ParseBackupList parses barman-cloud-backup-list --format json, oldest
// first.
func ParseBackupList(out []byte) ([]BackupResult, error) {
	var list struct {
		Backups []struct {
			ID        string `json:"backup_id"`
			Name      string `json:"backup_name"`
			BeginWAL  string `json:"begin_wal"`
			EndWAL    string `json:"end_wal"`
			BeginLSN  string `json:"begin_xlog"`
			EndLSN    string `json:"end_xlog"`
			Timeline  int    `json:"timeline"`
			BeginTime string `json:"begin_time"`
			EndTime   string `json:"end_time"`
			Size      int64  `json:"size"`
			Status    string `json:"status"`
		} `json:"backups_list"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("parsing %s's output: %w", CommandBackupList, err)
	}
	var res []BackupResult
	for _, b := range list.Backups {
		if b.Status != "DONE" {
			continue
		}
		res = append(res, BackupResult{ID: b.ID, Name: b.Name, BeginWAL: b.BeginWAL, EndWAL: b.EndWAL,
			BeginLSN: b.BeginLSN, EndLSN: b.EndLSN, Timeline: b.Timeline, BeginTime: b.BeginTime, EndTime: b.EndTime, Size: b.Size})
	}
	return res, nil
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

// run runs a barman-cloud command and returns its standard output; a
// failure's error ends with the last lines barman-cloud logged.
func (s *Server) run(ctx context.Context, argv []string) ([]byte, error) {
	return s.runEnv(ctx, s.Env, argv)
}

// runEnv runs a barman-cloud command with the environment env.
func (s *Server) runEnv(ctx context.Context, env, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	// In the volume, beside the data directory, which a restore has not
	// made yet.
	cmd.Dir = filepath.Dir(s.PGData)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", argv[0], err, lastLines(errb.String(), 3))
	}
	return out.Bytes(), nil
}

// notInArchive reports whether barman-cloud-wal-restore failed with its
// exit status 1: it reached the store, which lacks the file (2 is a store
// it could not reach, 4 any other error).
func notInArchive(err error) bool {
	var exit *exec.ExitError
	return errors.As(err, &exit) && exit.ExitCode() == 1
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{fmt.Sprintf("decoding the request: %v", err)})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
