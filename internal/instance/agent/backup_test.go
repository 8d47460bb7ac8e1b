package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/archiver/sidecar"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/agenttest"
)

// fakeSidecar is the backup sidecar: a backup waits for release.
type fakeSidecar struct {
	release   chan struct{}
	err       error
	retention archiver.RetentionRequest
}

func (f *fakeSidecar) Backup(ctx context.Context, req archiver.BackupRequest) (archiver.BackupResult, error) {
	<-f.release
	if f.err != nil {
		return archiver.BackupResult{}, f.err
	}
	return archiver.BackupResult{ID: "20261204T100000", Name: req.Name, BeginWAL: "000000010000000000000004"}, nil
}

func (f *fakeSidecar) Retention(ctx context.Context, req archiver.RetentionRequest) (archiver.RetentionResult, error) {
	f.retention = req
	return archiver.RetentionResult{Backups: []archiver.BackupResult{{ID: "b", BeginTime: "2026-12-01 03:00:00+00:00"}}}, nil
}

// TestBackupEndpoint checks the base backup's start and poll: the client certificate,
// a server that is not a running primary refused, a stale term refused,
// one backup at a time, the same name answered and never run twice, and a
// failure's error reported; and retention.
func TestBackupEndpoint(t *testing.T) {
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres"}})
	sc := &fakeSidecar{release: make(chan struct{})}
	a.backupSidecar = sc
	a.st.Term = 4
	h := a.Handler()
	certs := agenttest.New(t, "db.ns.dbkeeper-agent")
	clients := map[string]*tls.ConnectionState{
		"secret": verified(t, certs.Client),
		"wrong":  verified(t, certs.Issue(t, pki.Request{CommonName: "app", Usage: pki.Client})),
	}
	// do calls as the operator ("secret"), as another client ("wrong"),
	// or without a client certificate ("").
	do := func(method, path, who, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.TLS = clients[who]
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	expect := func(rec *httptest.ResponseRecorder, code int, what string) {
		t.Helper()
		if rec.Code != code {
			t.Fatalf("%s: %d %s, want %d", what, rec.Code, strings.TrimSpace(rec.Body.String()), code)
		}
	}
	expect(do(http.MethodPost, instance.PathBackup, "", `{"name":"a"}`), http.StatusUnauthorized, "no client certificate")
	expect(do(http.MethodGet, instance.PathBackup, "wrong", ``), http.StatusForbidden, "another client's certificate")
	expect(do(http.MethodGet, instance.PathBackup, "secret", ``), http.StatusNotFound, "status before any backup")
	a.phase = instance.PhaseWaiting
	rec := do(http.MethodPost, instance.PathBackup, "secret", `{"name":"a","term":4}`)
	expect(rec, http.StatusConflict, "a server that is not running")
	if !strings.Contains(rec.Body.String(), "not a running primary") {
		t.Errorf("refusal %q does not say the server is not a running primary", rec.Body)
	}
	srv := &postgres.Process{}
	a.phase, a.srv, a.mode = instance.PhaseRunning, srv, modeStandby
	expect(do(http.MethodPost, instance.PathBackup, "secret", `{"name":"a","term":4}`), http.StatusConflict, "a standby")
	a.mode = modePrimary
	expect(do(http.MethodPost, instance.PathBackup, "secret", `{"name":"a","term":3}`), http.StatusConflict, "a stale term")
	expect(do(http.MethodPost, instance.PathBackup, "secret", `{"term":4}`), http.StatusBadRequest, "no name")
	expect(do(http.MethodPost, instance.PathBackup, "secret", `{"name":"a","term":4}`), http.StatusAccepted, "start")
	expect(do(http.MethodPost, instance.PathBackup, "secret", `{"name":"a","term":4}`), http.StatusOK, "the same backup again")
	expect(do(http.MethodPost, instance.PathBackup, "secret", `{"name":"b","term":4}`), http.StatusConflict, "another backup while one runs")
	expect(do(http.MethodPost, instance.PathRetention, "secret", `{"days":7,"term":4}`), http.StatusConflict, "retention while a backup runs")
	state := func() instance.BackupState {
		t.Helper()
		rec := do(http.MethodGet, instance.PathBackup, "secret", ``)
		expect(rec, http.StatusOK, "status")
		var st instance.BackupState
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := state(); st.Name != "a" || st.Phase != instance.BackupRunning {
		t.Fatalf("while running: %+v", st)
	}
	close(sc.release)
	deadline := time.Now().Add(5 * time.Second)
	for state().Phase == instance.BackupRunning && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := state(); st.Phase != instance.BackupCompleted || st.Result == nil || st.Result.ID != "20261204T100000" || st.FinishedAt.IsZero() {
		t.Fatalf("after the sidecar finished: %+v", st)
	}
	// A finished backup of the same name is answered, not run again.
	sc.err = errors.New("must not run")
	rec = do(http.MethodPost, instance.PathBackup, "secret", `{"name":"a","term":4}`)
	expect(rec, http.StatusOK, "a finished backup again")
	if !strings.Contains(rec.Body.String(), `"Completed"`) {
		t.Errorf("a finished backup asked again: %s", rec.Body)
	}
	expect(do(http.MethodPost, instance.PathBackup, "secret", `{"name":"b","term":4}`), http.StatusAccepted, "the next backup")
	for state().Phase == instance.BackupRunning && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := state(); st.Name != "b" || st.Phase != instance.BackupFailed || st.Error != "must not run" {
		t.Fatalf("a failed backup: %+v", st)
	}
	rec = do(http.MethodPost, instance.PathRetention, "secret", `{"days":7,"term":4}`)
	expect(rec, http.StatusOK, "retention")
	if sc.retention != (archiver.RetentionRequest{Days: 7}) || !strings.Contains(rec.Body.String(), `"id":"b"`) {
		t.Errorf("retention: %+v, answer %s", sc.retention, rec.Body)
	}
	expect(do(http.MethodPost, instance.PathRetention, "secret", `{"keep":1,"term":4}`), http.StatusOK, "retention by count")
	if sc.retention != (archiver.RetentionRequest{Keep: 1}) {
		t.Errorf("retention by count: %+v", sc.retention)
	}
	expect(do(http.MethodPost, instance.PathRetention, "secret", `{"days":0,"term":4}`), http.StatusBadRequest, "a window of 0 days")
	expect(do(http.MethodPost, instance.PathRetention, "secret", `{"days":7,"keep":1,"term":4}`), http.StatusBadRequest, "a window and a count")
}

// TestBackupThroughSidecar runs a backup from the agent's endpoint through
// a real sidecar server on its Unix socket, which runs the real
// barman-cloud-backup: with no server to back up and no store, it fails,
// and barman-cloud's reason reaches the agent's GET /backup.
func TestBackupThroughSidecar(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs barman-cloud-backup: not in -short")
	}
	if _, err := exec.LookPath(archiver.CommandBackup); err != nil {
		t.Skipf("barman-cloud is not installed: run `make host-packages` (%v)", err)
	}
	dir := t.TempDir()
	socket := filepath.Join(dir, ".s.dbkeeper-archiver")
	srv := &sidecar.Server{
		Store:  sidecar.Store{Destination: "s3://backups/test", ServerName: "orders", EndpointURL: "https://127.0.0.1:1"},
		PGData: dir,
		Conn:   sidecar.Conn{Host: dir, Port: 1, User: "postgres"},
		Env:    []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y"},
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, socket) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("the sidecar's server: %v", err)
		}
	})

	a := New(Config{Config: postgres.Config{PGData: dir, SocketDir: dir, Port: 5432, User: "postgres"}, ArchiverSocket: socket})
	a.phase, a.srv, a.mode = instance.PhaseRunning, &postgres.Process{}, modePrimary
	h := a.Handler()
	operator := verified(t, agenttest.New(t, "db.ns.dbkeeper-agent").Client)
	do := func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.TLS = operator
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rec := do(http.MethodPost, instance.PathBackup, `{"name":"orders-b1","immediateCheckpoint":true}`); rec.Code != http.StatusAccepted {
		t.Fatalf("start: %d %s", rec.Code, rec.Body)
	}
	start := time.Now()
	var st instance.BackupState
	for deadline := start.Add(2 * time.Minute); ; {
		rec := do(http.MethodGet, instance.PathBackup, "")
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
		if st.Phase != instance.BackupRunning || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after %s: %+v", time.Since(start).Round(time.Millisecond), st)
	if st.Phase != instance.BackupFailed || !strings.Contains(st.Error, archiver.CommandBackup) || st.Result != nil {
		t.Errorf("a backup with no server and no store: %+v, want Failed with barman-cloud-backup's reason", st)
	}
}
