package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
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

// runningPrimary reports whether the server runs as a writable primary, or
// why not.
func (a *Agent) runningPrimary() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	up := false
	if a.srv != nil {
		select {
		case <-a.srv.Done():
		default:
			up = true
		}
	}
	switch {
	case !up || a.phase != instance.PhaseRunning:
		return fmt.Errorf("%w: it is %s", instance.ErrNotPrimary, a.phase)
	case a.st.Fenced:
		return fmt.Errorf("%w: it is fenced", instance.ErrNotPrimary)
	case a.mode != modePrimary:
		return fmt.Errorf("%w: it runs as a standby", instance.ErrNotPrimary)
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
		return fmt.Errorf("%w: the request's term %d is below term %d, the highest this agent has seen", instance.ErrStaleTerm, term, seen)
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
	var req instance.BackupRequest
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
		if cur.Phase == instance.BackupRunning {
			http.Error(w, fmt.Sprintf("%s: backup %s is running since %s", instance.ErrBackupBusy, cur.Name, cur.StartedAt.Format(time.RFC3339)), http.StatusConflict)
			return
		}
	}
	if err := a.runningPrimary(); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	run := &instance.BackupState{Name: req.Name, Phase: instance.BackupRunning, StartedAt: time.Now().UTC()}
	a.backupRun = run
	answer := *run
	sc := a.sidecar()
	go a.runBackup(sc, archiver.BackupRequest{Name: req.Name, Immediate: req.ImmediateCheckpoint})
	a.logf("base backup %s started", req.Name)
	writeJSONAnswer(w, http.StatusAccepted, answer)
}

// runBackup runs the backup in the sidecar and records how it ended.
func (a *Agent) runBackup(sc backupSidecar, req archiver.BackupRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), instance.BackupTimeout)
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
		run.Phase, run.Error = instance.BackupFailed, err.Error()
		a.logf("base backup %s failed: %v", req.Name, err)
		return
	}
	run.Phase, run.Result = instance.BackupCompleted, &res
	a.logf("base backup %s completed: %s", req.Name, res.ID)
}

// serveBackupStatus answers with the last backup started since the agent
// started; 404 when there is none.
func (a *Agent) serveBackupStatus(w http.ResponseWriter, _ *http.Request) {
	a.backupMu.Lock()
	run := a.backupRun
	var st instance.BackupState
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
	var req instance.RetentionRequest
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
	busy := a.backupRun != nil && a.backupRun.Phase == instance.BackupRunning
	a.backupMu.Unlock()
	if busy {
		http.Error(w, instance.ErrBackupBusy.Error(), http.StatusConflict)
		return
	}
	res, err := a.sidecar().Retention(r.Context(), retention)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	writeJSONAnswer(w, http.StatusOK, instance.RetentionAnswer{Backups: res.Backups})
}
