package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/agenttest"
)

// TestHTTP checks the client certificate, the Spec's validation and the
// lease a primary Spec starts, without a server: the connection's verified
// chain is set on the request as the TLS server would.
func TestHTTP(t *testing.T) {
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres", PodName: "db-0"}, Namespace: "ns"})
	a.phase = instance.PhaseWaiting
	h := a.Handler()
	certs := agenttest.New(t, "db.ns.dbkeeper-agent")
	other := certs.Issue(t, pki.Request{CommonName: "someone-else", Usage: pki.Client})
	do := func(method, path string, client *tls.ConnectionState, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.TLS = client
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	operator, stranger, noCert := verified(t, certs.Client), verified(t, other), &tls.ConnectionState{}
	for _, tc := range []struct {
		name, method, path string
		client             *tls.ConnectionState
		body               string
		want               int
	}{
		{"status over plain HTTP", http.MethodGet, instance.PathStatus, nil, "", http.StatusUnauthorized},
		{"status without a client certificate", http.MethodGet, instance.PathStatus, noCert, "", http.StatusUnauthorized},
		{"status with another name's certificate", http.MethodGet, instance.PathStatus, stranger, "", http.StatusForbidden},
		{"status with the operator's certificate", http.MethodGet, instance.PathStatus, operator, "", http.StatusOK},
		{"spec without a client certificate", http.MethodPut, instance.PathSpec, noCert, `{"role":"primary"}`, http.StatusUnauthorized},
		{"spec with another name's certificate", http.MethodPut, instance.PathSpec, stranger, `{"role":"primary"}`, http.StatusForbidden},
		{"backup without a client certificate", http.MethodPost, instance.PathBackup, noCert, `{"name":"b"}`, http.StatusUnauthorized},
		{"retention with another name's certificate", http.MethodPost, instance.PathRetention, stranger, `{"days":1}`, http.StatusForbidden},
		{"spec with an unknown role", http.MethodPut, instance.PathSpec, operator, `{"role":"leader"}`, http.StatusBadRequest},
		{"spec with an unknown field", http.MethodPut, instance.PathSpec, operator, `{"role":"primary","lease":3}`, http.StatusBadRequest},
		{"readiness needs no certificate, and a waiting agent is not ready", http.MethodGet, instance.PathReady, nil, "", http.StatusServiceUnavailable},
		{"spec with the operator's certificate", http.MethodPut, instance.PathSpec, operator, `{"role":"primary","slots":["dbkeeper_standby_1"],"leaseSeconds":15}`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec := do(tc.method, tc.path, tc.client, tc.body); rec.Code != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, strings.TrimSpace(rec.Body.String()), tc.want)
			}
		})
	}
	if a.spec == nil || a.spec.Role != instance.RolePrimary {
		t.Fatalf("spec not recorded: %+v", a.spec)
	}
	if left := time.Until(a.leaseDeadline); left < 14*time.Second || left > 15*time.Second {
		t.Errorf("the lease runs %v, want 15 s from the request", left)
	}
	do(http.MethodPut, instance.PathSpec, operator, `{"role":"primary"}`)
	if !a.leaseDeadline.IsZero() {
		t.Error("a primary Spec with no slots kept a lease")
	}
}

// TestHTTPTerms checks the fencing term: a higher term is on the data
// volume before the PUT is answered, a lower one is refused with 409 and
// changes nothing, and a term that cannot be persisted records no Spec.
func TestHTTPTerms(t *testing.T) {
	dir := t.TempDir()
	statePath := filepath.Join(dir, "state.json")
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres", PodName: "db-0"}, StateFile: statePath, Namespace: "ns"})
	a.phase = instance.PhaseWaiting
	h := a.Handler()
	certs := agenttest.New(t, "db.ns.dbkeeper-agent")
	operator := verified(t, certs.Client)
	put := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPut, instance.PathSpec, strings.NewReader(body))
		req.TLS = operator
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := put(`{"role":"replica","upstream":"db-1.db-headless.ns.svc","term":3}`); rec.Code != http.StatusOK {
		t.Fatalf("term 3: %d %s", rec.Code, rec.Body)
	}
	// Persisted before the answer: the file holds it now.
	st, ok, err := readState(statePath)
	if err != nil || !ok || st.Term != 3 {
		t.Fatalf("after the answer the state file has term %d (ok %v, %v), want 3", st.Term, ok, err)
	}
	var s instance.Status
	if rec := put(`{"role":"replica","upstream":"db-1.db-headless.ns.svc","term":3}`); rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &s) != nil || s.Term != 3 {
		t.Fatalf("the same term again: %d %s", rec.Code, rec.Body)
	}
	rec := put(`{"role":"primary","term":2}`)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "below term 3") {
		t.Fatalf("a stale term: %d %s, want 409 naming term 3", rec.Code, rec.Body)
	}
	if a.spec.Role != instance.RoleReplica || a.spec.Term != 3 {
		t.Errorf("a stale Spec was recorded: %+v", a.spec)
	}
	if rec := put(`{"role":"primary"}`); rec.Code != http.StatusConflict {
		t.Errorf("a Spec with no term after term 3: %d, want 409", rec.Code)
	}
	// The client maps 409 to ErrStaleTerm.
	c, creds := serveTLS(t, a, certs)
	if _, err := c.Apply(context.Background(), "10.1.2.3", creds, instance.Spec{Role: instance.RolePrimary, Term: 1}); !errors.Is(err, instance.ErrStaleTerm) {
		t.Errorf("client error %v, want ErrStaleTerm", err)
	}
	// A term no operator can have sent: 400, neither recorded nor
	// persisted, and the client says so.
	for _, term := range []string{"9223372036854775807", strconv.FormatInt(3+instance.MaxTermJump+1, 10)} {
		rec := put(`{"role":"fenced","term":` + term + `}`)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "cannot have sent") {
			t.Errorf("term %s: %d %s, want 400 saying the operator cannot have sent it", term, rec.Code, rec.Body)
		}
		if st, _, err := readState(statePath); err != nil || st.Term != 3 || st.Fenced {
			t.Errorf("term %s: the state file has term %d, fenced %v (%v); want term 3, not fenced", term, st.Term, st.Fenced, err)
		}
		if a.spec.Role != instance.RoleReplica || a.spec.Term != 3 {
			t.Errorf("term %s: the Spec was recorded: %+v", term, a.spec)
		}
	}
	if _, err := c.Apply(context.Background(), "10.1.2.3", creds, instance.Spec{Role: instance.RoleFenced, Term: math.MaxInt64}); !errors.Is(err, instance.ErrImpossibleTerm) {
		t.Errorf("client error %v, want ErrImpossibleTerm", err)
	}
	if rec := put(`{"role":"replica","upstream":"db-1.db-headless.ns.svc","term":3}`); rec.Code != http.StatusOK {
		t.Errorf("the operator's term after the refused ones: %d %s", rec.Code, rec.Body)
	}
	// A higher term that cannot be persisted: 500, and the Spec is not
	// recorded.
	a.cfg.StateFile = filepath.Join(dir, "missing", "state.json")
	if rec := put(`{"role":"primary","term":4}`); rec.Code != http.StatusInternalServerError {
		t.Errorf("an unpersistable term: %d %s, want 500", rec.Code, rec.Body)
	}
	if a.spec.Role != instance.RoleReplica {
		t.Errorf("a Spec whose term was not persisted was recorded: %+v", a.spec)
	}
	// The operator re-sending the same primary Spec (as during a slow
	// promotion) is accepted and renews the lease.
	a.cfg.StateFile = statePath
	primary := `{"role":"primary","slots":["dbkeeper_standby_1"],"leaseSeconds":15,"term":4}`
	if rec := put(primary); rec.Code != http.StatusOK {
		t.Fatalf("term 4: %d %s", rec.Code, rec.Body)
	}
	a.leaseDeadline = time.Now().Add(-time.Second)
	if rec := put(primary); rec.Code != http.StatusOK {
		t.Fatalf("term 4 again: %d %s", rec.Code, rec.Body)
	}
	if left := time.Until(a.leaseDeadline); left < 14*time.Second {
		t.Errorf("the same primary Spec again left the lease at %v, want it renewed to 15 s", left)
	}
}

// TestAStatusReportingTheFenceSaysFenced: fence persists the fence, then
// sets the phase; a status asked in between, with the server already down
// (a primary stopped by SIGTERM and lingering for its fence), reported
// the fence with the phase still Stopped, the lingering agent took that
// for reported and exited, and the operator never saw the phase Fenced.
func TestAStatusReportingTheFenceSaysFenced(t *testing.T) {
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres", PodName: "db-0"}, Namespace: "ns"})
	a.phase = instance.PhaseStopped
	a.markFenced()
	s := a.status(context.Background())
	if !s.Fenced || s.Phase != instance.PhaseFenced {
		t.Errorf("a persisted fence with the server down: phase %s, fenced %v; want phase %s, fenced", s.Phase, s.Fenced, instance.PhaseFenced)
	}
	if a.fenceUnreported() {
		t.Errorf("the status reported the fence, but the agent still waits to report it")
	}
}
