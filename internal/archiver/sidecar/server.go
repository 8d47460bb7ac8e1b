package sidecar

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

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

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
	status archiver.Status
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
	mux.HandleFunc("POST "+archiver.PathArchive, s.archive)
	mux.HandleFunc("POST "+archiver.PathRestore, s.restore)
	mux.HandleFunc("POST "+archiver.PathBackup, s.backup)
	mux.HandleFunc("POST "+archiver.PathCheckArchive, s.checkArchive)
	mux.HandleFunc("GET "+archiver.PathRecoveryBackups, s.recoveryBackups)
	mux.HandleFunc("POST "+archiver.PathRecoveryRestore, s.recoveryRestore)
	mux.HandleFunc("POST "+archiver.PathRetention, s.retention)
	mux.HandleFunc("GET "+archiver.PathStatus, func(w http.ResponseWriter, _ *http.Request) {
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
	out, err := s.run(ctx, []string{archiver.CommandWALArchive, "--help"})
	if err != nil {
		return fmt.Errorf("asking barman-cloud for its options: %w", err)
	}
	if !bytes.Contains(out, []byte(OptionSSEKMSKeyID)) {
		return fmt.Errorf("spec.backup.kmsKeyID needs barman-cloud 3.5 or newer (its %s option), and the backup image's %s has no such option: "+
			"run the operator with a --backup-image of barman-cloud 3.5 or newer, or remove kmsKeyID to encrypt with the AWS managed key (aws/s3)",
			OptionSSEKMSKeyID, archiver.CommandWALArchive)
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
		writeJSON(w, http.StatusConflict, archiver.ErrorResponse{Error: errNoStore.Error()})
		return
	}
	var req archiver.ArchiveRequest
	if !readJSON(w, r, &req) {
		return
	}
	path, err := archiver.ArchivePath(s.PGData, s.PGData, req.Path)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, archiver.ErrorResponse{Error: err.Error()})
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
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	s.logf("archived %s in %s", name, time.Since(start).Round(time.Millisecond))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	var req archiver.RestoreRequest
	if !readJSON(w, r, &req) {
		return
	}
	dest, err := archiver.RestorePath(s.PGData, s.PGData, req.Name, req.Dest)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	store, env := s.Store, s.Env
	if req.Recovery {
		if s.Recovery == nil {
			writeJSON(w, http.StatusConflict, archiver.ErrorResponse{Error: "no recovery source is configured"})
			return
		}
		store, env = *s.Recovery, s.RecoveryEnv
	} else if !s.hasStore() {
		writeJSON(w, http.StatusConflict, archiver.ErrorResponse{Error: errNoStore.Error()})
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
			writeJSON(w, http.StatusNotFound, archiver.ErrorResponse{Error: fmt.Sprintf("%s is not in the archive", req.Name)})
			return
		}
		s.logf("restoring %s: %v", req.Name, err)
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
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
		writeJSON(w, http.StatusConflict, archiver.ErrorResponse{Error: errNoStore.Error()})
		return
	}
	var req archiver.BackupRequest
	if !readJSON(w, r, &req) {
		return
	}
	start := time.Now()
	if _, err := s.run(r.Context(), s.Store.Backup(req.Name, s.Conn, req.Immediate)); err != nil {
		s.logf("backup %q failed: %v", req.Name, err)
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	took := time.Since(start)
	res, err := s.lastBackup(r.Context(), req.Name)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
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
		writeJSON(w, http.StatusConflict, archiver.ErrorResponse{Error: fmt.Sprintf("the WAL archive %s/%s is not empty, or cannot be read: %v", s.Store.Destination, s.Store.ServerName, err)})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// recoveryBackups lists the recovery source's completed backups, oldest
// first.
func (s *Server) recoveryBackups(w http.ResponseWriter, r *http.Request) {
	if s.Recovery == nil {
		writeJSON(w, http.StatusConflict, archiver.ErrorResponse{Error: "no recovery source is configured"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout())
	defer cancel()
	out, err := s.runEnv(ctx, s.RecoveryEnv, s.Recovery.BackupList())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	list, err := ParseBackupList(out)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// recoveryRestore downloads a base backup of the recovery source into
// RestoreDir (emptied first: the remains of an interrupted download).
func (s *Server) recoveryRestore(w http.ResponseWriter, r *http.Request) {
	if s.Recovery == nil {
		writeJSON(w, http.StatusConflict, archiver.ErrorResponse{Error: "no recovery source is configured"})
		return
	}
	var req archiver.RecoveryRestoreRequest
	if !readJSON(w, r, &req) {
		return
	}
	if !backupIDPattern.MatchString(req.BackupID) {
		writeJSON(w, http.StatusBadRequest, archiver.ErrorResponse{Error: fmt.Sprintf("backup id %q: want barman's YYYYMMDDTHHMMSS", req.BackupID)})
		return
	}
	dir := archiver.RestoreDir(s.PGData)
	if err := os.RemoveAll(dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	start := time.Now()
	if _, err := s.runEnv(r.Context(), s.RecoveryEnv, s.Recovery.Restore(req.BackupID, dir)); err != nil {
		_ = os.RemoveAll(dir)
		s.logf("restoring backup %s failed: %v", req.BackupID, err)
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
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
	var req archiver.RetentionRequest
	if !readJSON(w, r, &req) {
		return
	}
	policy, err := req.Policy()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	if _, err := s.run(r.Context(), s.Store.DeleteByRetention(policy)); err != nil {
		s.logf("retention %q failed: %v", policy, err)
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	out, err := s.run(r.Context(), s.Store.BackupList())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	backups, err := ParseBackupList(out)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, archiver.ErrorResponse{Error: err.Error()})
		return
	}
	s.logf("retention %q applied: %d backups remain", policy, len(backups))
	writeJSON(w, http.StatusOK, archiver.RetentionResult{Backups: backups})
}

// lastBackup finds the backup named name, or the newest one, in the store.
func (s *Server) lastBackup(ctx context.Context, name string) (archiver.BackupResult, error) {
	out, err := s.run(ctx, s.Store.BackupList())
	if err != nil {
		return archiver.BackupResult{}, err
	}
	backups, err := ParseBackupList(out)
	if err != nil {
		return archiver.BackupResult{}, err
	}
	for i := len(backups) - 1; i >= 0; i-- {
		if name == "" || backups[i].Name == name {
			return backups[i], nil
		}
	}
	return archiver.BackupResult{}, fmt.Errorf("no backup named %q in the store's list", name)
}

// ParseBackupList parses barman-cloud-backup-list --format json, oldest
// first.
func ParseBackupList(out []byte) ([]archiver.BackupResult, error) {
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
		return nil, fmt.Errorf("parsing %s's output: %w", archiver.CommandBackupList, err)
	}
	var res []archiver.BackupResult
	for _, b := range list.Backups {
		if b.Status != "DONE" {
			continue
		}
		res = append(res, archiver.BackupResult{ID: b.ID, Name: b.Name, BeginWAL: b.BeginWAL, EndWAL: b.EndWAL,
			BeginLSN: b.BeginLSN, EndLSN: b.EndLSN, Timeline: b.Timeline, BeginTime: b.BeginTime, EndTime: b.EndTime, Size: b.Size})
	}
	return res, nil
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
		writeJSON(w, http.StatusBadRequest, archiver.ErrorResponse{Error: fmt.Sprintf("decoding the request: %v", err)})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
