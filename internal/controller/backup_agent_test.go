package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// fakeBackups are a fake server's backup sidecar and object store: a base
// backup takes takes on the test's clock and then fails with failWith or
// lands in the store; retention keeps what began inside the window.
type fakeBackups struct {
	takes    time.Duration
	failWith string
	run      *instance.BackupState
	store    []archiver.BackupResult
	starts   int
	// retentionDays is the window of the last retention call, 0 none.
	retentionDays int
}

// barmanCtime is how barman-cloud-backup-list prints a time.
func barmanCtime(t time.Time) string { return t.UTC().Format(time.ANSIC) }

// advance finishes a backup whose time has come.
func (b *fakeBackups) advance(now time.Time) {
	r := b.run
	if r == nil || r.Phase != instance.BackupRunning || now.Before(r.StartedAt.Add(b.takes)) {
		return
	}
	r.FinishedAt = now
	if b.failWith != "" {
		r.Phase, r.Error = instance.BackupFailed, b.failWith
		return
	}
	res := archiver.BackupResult{ID: r.StartedAt.UTC().Format("20060102T150405"), Name: r.Name,
		BeginWAL: "000000010000000000000004", EndWAL: "000000010000000000000005", BeginLSN: "0/4000028", EndLSN: "0/5000100",
		BeginTime: barmanCtime(r.StartedAt), EndTime: barmanCtime(now), Size: 36 << 20}
	b.store = append(b.store, res)
	r.Phase, r.Result = instance.BackupCompleted, &res
}

func (f *fakeAgents) backupServer(ip string, creds instance.AgentCredentials) (*fakeServer, error) {
	if err := authorize(creds); err != nil {
		return nil, err
	}
	s, err := f.server(ip)
	if err != nil {
		return nil, err
	}
	if s.backups == nil {
		s.backups = &fakeBackups{}
	}
	s.backups.advance(f.now())
	return s, nil
}

func (f *fakeAgents) StartBackup(_ context.Context, ip string, creds instance.AgentCredentials, req instance.BackupRequest) (*instance.BackupState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.backupServer(ip, creds)
	if err != nil {
		return nil, err
	}
	b := s.backups
	if req.Term < s.term {
		return nil, fmt.Errorf("%w: term %d below %d", instance.ErrStaleTerm, req.Term, s.term)
	}
	if b.run != nil && b.run.Name == req.Name {
		r := *b.run
		return &r, nil
	}
	if b.run != nil && b.run.Phase == instance.BackupRunning {
		return nil, fmt.Errorf("%w: %w", instance.ErrConflict, instance.ErrBackupBusy)
	}
	if s.phase != instance.PhaseRunning || s.inRecovery || s.fenced {
		return nil, fmt.Errorf("%w: %w", instance.ErrConflict, instance.ErrNotPrimary)
	}
	b.starts++
	b.run = &instance.BackupState{Name: req.Name, Phase: instance.BackupRunning, StartedAt: f.now()}
	b.advance(f.now())
	r := *b.run
	return &r, nil
}

func (f *fakeAgents) BackupStatus(_ context.Context, ip string, creds instance.AgentCredentials) (*instance.BackupState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.backupServer(ip, creds)
	if err != nil {
		return nil, err
	}
	if s.backups.run == nil {
		return nil, instance.ErrNoBackup
	}
	r := *s.backups.run
	return &r, nil
}

func (f *fakeAgents) Retention(_ context.Context, ip string, creds instance.AgentCredentials, req instance.RetentionRequest) (*instance.RetentionAnswer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.backupServer(ip, creds)
	if err != nil {
		return nil, err
	}
	b := s.backups
	b.retentionDays = req.Days
	if req.Keep > 0 {
		// barman's redundancy keeps the newest Keep backups.
		b.store = b.store[max(0, len(b.store)-req.Keep):]
		return &instance.RetentionAnswer{Backups: append([]archiver.BackupResult(nil), b.store...)}, nil
	}
	// barman's recovery window keeps every backup that began inside it,
	// and the newest one before it (the window's base).
	edge := f.now().Add(-time.Duration(req.Days) * 24 * time.Hour)
	var kept []archiver.BackupResult
	for i, r := range b.store {
		t, _ := parseBarmanTime(r.BeginTime)
		newerBeforeEdge := i+1 < len(b.store) && func() bool { n, _ := parseBarmanTime(b.store[i+1].BeginTime); return !n.After(edge) }()
		if t.After(edge) || !newerBeforeEdge {
			kept = append(kept, r)
		}
	}
	b.store = kept
	return &instance.RetentionAnswer{Backups: append([]archiver.BackupResult(nil), kept...)}, nil
}
