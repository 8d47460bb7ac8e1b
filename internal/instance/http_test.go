package instance

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHTTP checks the token, the Spec's validation and the lease a primary
// Spec starts, without a server.
func TestHTTP(t *testing.T) {
	a := New(Config{Token: "secret", PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres"})
	a.phase = PhaseWaiting
	h := a.Handler()
	do := func(method, path, token, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"status without a token", http.MethodGet, PathStatus, "", "", http.StatusUnauthorized},
		{"status with a wrong token", http.MethodGet, PathStatus, "secreT", "", http.StatusUnauthorized},
		{"status with the token", http.MethodGet, PathStatus, "secret", "", http.StatusOK},
		{"spec without a token", http.MethodPut, PathSpec, "", `{"role":"primary"}`, http.StatusUnauthorized},
		{"spec with an unknown role", http.MethodPut, PathSpec, "secret", `{"role":"leader"}`, http.StatusBadRequest},
		{"spec with an unknown field", http.MethodPut, PathSpec, "secret", `{"role":"primary","lease":3}`, http.StatusBadRequest},
		{"readiness needs no token, and a waiting agent is not ready", http.MethodGet, PathReady, "", "", http.StatusServiceUnavailable},
		{"spec with the token", http.MethodPut, PathSpec, "secret", `{"role":"primary","slots":["dbkeeper_standby_1"],"leaseSeconds":15}`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec := do(tc.method, tc.path, tc.token, tc.body); rec.Code != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, strings.TrimSpace(rec.Body.String()), tc.want)
			}
		})
	}
	if a.spec == nil || a.spec.Role != RolePrimary {
		t.Fatalf("spec not recorded: %+v", a.spec)
	}
	if left := time.Until(a.leaseDeadline); left < 14*time.Second || left > 15*time.Second {
		t.Errorf("the lease runs %v, want 15 s from the request", left)
	}
	do(http.MethodPut, PathSpec, "secret", `{"role":"primary"}`)
	if !a.leaseDeadline.IsZero() {
		t.Error("a primary Spec with no slots kept a lease")
	}
}
