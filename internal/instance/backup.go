package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

// The base backup and its retention: the agent hands both to its backup
// sidecar (internal/archiver) over the sidecar's Unix socket, where the
// object store's credentials are. A base backup runs for seconds to hours,
// longer than any one call of the operator (agentTimeout), so it is started
// by one call and followed by others: POST PathBackup starts it and answers
// at once, GET PathBackup reports it by name until the next one starts.

// backupSidecar is the sidecar's client (*archiver.Client).
type backupSidecar interface {
	Backup(ctx context.Context, req archiver.BackupRequest) (archiver.BackupResult, error)
	Retention(ctx context.Context, req archiver.RetentionRequest) (archiver.RetentionResult, error)
}

// BackupTimeout bounds one base backup in the agent.
const BackupTimeout = 6 * time.Hour

// ErrNotPrimary is the error of a backup or retention call to an agent
// whose server is not a running primary (HTTP 409 too, with its reason).
var ErrNotPrimary = errors.New("the server is not a running primary")

// ErrBackupBusy is the error of a backup or retention call while another
// backup runs (HTTP 409).
var ErrBackupBusy = errors.New("a base backup is running: one at a time")

// runningPrimary reports whether the server runs as a writable primary, or
// why not.
func (a *Agent) runningPrimary() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	up := false
	if a.srv != nil {
		select {
		case <-a.srv.done:
		default:
			up = true
		}
	}
	switch {
	case !up || a.phase != PhaseRunning:
		return fmt.Errorf("%w: it is %s", ErrNotPrimary, a.phase)
	case a.st.Fenced:
		return fmt.Errorf("%w: it is fenced", ErrNotPrimary)
	case a.mode != modePrimary:
		return fmt.Errorf("%w: it runs as a standby", ErrNotPrimary)
	}
	return nil
}

// checkBackupTerm refuses a call of a lower term than the highest the
// agent has seen: an operator that is no longer the leader, or a decision
// older than a failover, must not back up a server that may be a demoted
// primary.
func (a *Agent) checkBackupTerm(term int64) error {
	a.mu.Lock()
	seen := a.st.Term
	a.mu.Unlock()
	if checkTerm(seen, term) == termStale {
		return fmt.Errorf("%w: the request's term %d is below term %d, the highest this agent has seen", ErrStaleTerm, term, seen)
	}
	return nil
}

func (a *Agent) sidecar() backupSidecar {
	if a.backupSidecar != nil {
		return a.backupSidecar
	}
	return archiver.NewClient(a.cfg.ArchiverSocket)
}

// readBackupJSON decodes a request body, refusing unknown fields.
func readBackupJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "decoding the request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSONAnswer(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// serveBackupStart starts a base backup, or answers with the one of the
// same name: running, or finished (never run twice). Another backup still
// running is a conflict (409): one at a time.
func (a *Agent) serveBackupStart(w http.ResponseWriter, r *http.Request) {
	var req BackupRequest
	if !readBackupJSON(w, r, &req) {
		return
	}
	if req.Name == "" {
		http.Error(w, "name: required (the backup's name in the store)", http.StatusBadRequest)
		return
	}
	if err := a.checkBackupTerm(req.Term); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	a.backupMu.Lock()
	defer a.backupMu.Unlock()
	if cur := a.backupRun; cur != nil {
		if cur.Name == req.Name {
			writeJSONAnswer(w, http.StatusOK, *cur)
			return
		}
		if cur.Phase == BackupRunning {
			http.Error(w, fmt.Sprintf("%s: backup %s is running since %s", ErrBackupBusy, cur.Name, cur.StartedAt.Format(time.RFC3339)), http.StatusConflict)
			return
		}
	}
	if err := a.runningPrimary(); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	run := &BackupState{Name: req.Name, Phase: BackupRunning, StartedAt: time.Now().UTC()}
	a.backupRun = run
	answer := *run
	sc := a.sidecar()
	go a.runBackup(sc, archiver.BackupRequest{Name: req.Name, Immediate: req.ImmediateCheckpoint})
	a.logf("base backup %s started", req.Name)
	writeJSONAnswer(w, http.StatusAccepted, answer)
}

// runBackup runs the backup in the sidecar and records how it ended.
func (a *Agent) runBackup(sc backupSidecar, req archiver.BackupRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), BackupTimeout)
	defer cancel()
	res, err := sc.Backup(ctx, req)
	a.backupMu.Lock()
	defer a.backupMu.Unlock()
	run := a.backupRun
	if run == nil || run.Name != req.Name {
		return
	}
	run.FinishedAt = time.Now().UTC()
	if err != nil {
		run.Phase, run.Error = BackupFailed, err.Error()
		a.logf("base backup %s failed: %v", req.Name, err)
		return
	}
	run.Phase, run.Result = BackupCompleted, &res
	a.logf("base backup %s completed: %s", req.Name, res.ID)
}

// serveBackupStatus answers with the last backup started since the agent
// started; 404 when there is none.
func (a *Agent) serveBackupStatus(w http.ResponseWriter, _ *http.Request) {
	a.backupMu.Lock()
	run := a.backupRun
	var st BackupState
	if run != nil {
		st = *run
	}
	a.backupMu.Unlock()
	if run == nil {
		http.Error(w, "no base backup was started since the agent started", http.StatusNotFound)
		return
	}
	writeJSONAnswer(w, http.StatusOK, st)
}

// serveRetention applies a recovery window through the sidecar and answers
// with the backups that remain. It is refused while a backup runs (the
// list would not show it yet, and barman-cloud would race on the store).
func (a *Agent) serveRetention(w http.ResponseWriter, r *http.Request) {
	var req RetentionRequest
	if !readBackupJSON(w, r, &req) {
		return
	}
	retention := archiver.RetentionRequest{Days: req.Days, Keep: req.Keep}
	if _, err := retention.Policy(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := a.checkBackupTerm(req.Term); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if err := a.runningPrimary(); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	a.backupMu.Lock()
	busy := a.backupRun != nil && a.backupRun.Phase == BackupRunning
	a.backupMu.Unlock()
	if busy {
		http.Error(w, ErrBackupBusy.Error(), http.StatusConflict)
		return
	}
	res, err := a.sidecar().Retention(r.Context(), retention)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	writeJSONAnswer(w, http.StatusOK, RetentionAnswer{Backups: res.Backups})
}
