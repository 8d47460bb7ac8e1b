package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/agenttest"
)

// verified is the connection state of a TLS client whose certificate kp
// the server verified.
func verified(t *testing.T, kp pki.KeyPair) *tls.ConnectionState {
	t.Helper()
	leaf, err := pki.ParseCertificate(kp.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
}

// writeAgentFiles writes the agent's certificate, key and client CA into
// dir and returns the agentTLSFiles serving them.
func writeAgentFiles(t *testing.T, dir string, certs *agenttest.Certs) *agentTLSFiles {
	t.Helper()
	agenttest.WriteFiles(t, dir, map[string][]byte{
		instance.SecretFileAgentCert: certs.Server.CertPEM, instance.SecretFileAgentKey: certs.Server.KeyPEM, instance.SecretFileAgentCA: certs.CA.CertPEM,
	})
	return &agentTLSFiles{certFile: filepath.Join(dir, instance.SecretFileAgentCert), keyFile: filepath.Join(dir, instance.SecretFileAgentKey),
		caFile: filepath.Join(dir, instance.SecretFileAgentCA), recheck: tlsRecheck, logf: t.Logf}
}

// recordingListener keeps every byte its connections read.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	first [][]byte // the first bytes of each connection
	all   bytes.Buffer
}

type recordingConn struct {
	net.Conn
	l     *recordingListener
	index int
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.first = append(l.first, nil)
	return &recordingConn{Conn: c, l: l, index: len(l.first) - 1}, nil
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.l.first[c.index] == nil && n > 0 {
		c.l.first[c.index] = bytes.Clone(p[:n])
	}
	c.l.all.Write(p[:n])
	return n, err
}

// serve serves h on a loopback port, over TLS when cfg is not nil, and
// returns the listener recording what the clients sent.
func serve(t *testing.T, h http.Handler, cfg *tls.Config) *recordingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: ln}
	var served net.Listener = rl
	if cfg != nil {
		served = tls.NewListener(rl, cfg)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(served) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rl
}

// clientTo is a Client whose every call, to any pod address, reaches addr.
func clientTo(addr string) *instance.Client {
	var d net.Dialer
	return &instance.Client{HTTP: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}}}
}

// serveTLS serves a's API over TLS with certs as Run does, and returns a
// client reaching it and the operator's credentials.
func serveTLS(t *testing.T, a *Agent, certs *agenttest.Certs) (*instance.Client, instance.AgentCredentials) {
	t.Helper()
	files := writeAgentFiles(t, t.TempDir(), certs)
	l := serve(t, a.Handler(), files.serverTLS())
	return clientTo(l.Addr().String()), instance.AgentCredentials{TLS: certs.ClientTLS(t, certs.Client)}
}

// get makes a GET of path over a TLS connection with cfg and returns the
// status code, or the error of a refused connection.
func get(l net.Listener, cfg *tls.Config, path string) (int, string, error) {
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, l.Addr().String())
	}}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	method := http.MethodGet
	var body io.Reader
	if path == instance.PathSpec {
		method, body = http.MethodPut, strings.NewReader(`{"role":"replica","term":1}`)
	}
	req, err := http.NewRequest(method, "https://agent"+path, body)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(data)), nil
}

// TestAgentMutualTLS serves the agent's API over real TLS connections as
// Run does: the operator's certificate is accepted on every path; no
// client certificate, a certificate of another CA, a server certificate
// of the same CA, or a client certificate of another name is refused on
// /status and /spec, and /readyz answers without a certificate.
func TestAgentMutualTLS(t *testing.T) {
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres", PodName: "db-0"}, Namespace: "ns", StateFile: filepath.Join(t.TempDir(), "state.json")})
	a.phase = instance.PhaseWaiting
	certs := agenttest.New(t, "db.ns.dbkeeper-agent")
	files := writeAgentFiles(t, t.TempDir(), certs)
	l := serve(t, a.Handler(), files.serverTLS())

	foreign := agenttest.New(t, "db.ns.dbkeeper-agent")
	serverAsClient := certs.Issue(t, pki.Request{CommonName: instance.AgentClientName, DNSNames: []string{instance.AgentClientName}, Usage: pki.Server})
	otherName := certs.Issue(t, pki.Request{CommonName: "app", Usage: pki.Client})

	// Each client trusts the agent's CA; only its certificate differs.
	withCert := func(kp pki.KeyPair) *tls.Config {
		cfg := certs.ClientTLS(t, pki.KeyPair{})
		if kp.CertPEM != nil {
			cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		return cfg
	}
	for _, tc := range []struct {
		name string
		kp   pki.KeyPair
		// want is the HTTP status on /status and /spec, 0 for a refused
		// handshake.
		want int
	}{
		{"no client certificate", pki.KeyPair{}, http.StatusUnauthorized},
		{"the operator's name from another CA", foreign.Client, 0},
		{"a server certificate of the agent's CA", serverAsClient, 0},
		{"a client certificate of another name", otherName, http.StatusForbidden},
		{"the operator's certificate", certs.Client, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{instance.PathStatus, instance.PathSpec} {
				code, body, err := get(l, withCert(tc.kp), path)
				switch {
				case tc.want == 0 && err == nil:
					t.Errorf("%s: answered %d %s, want the handshake refused", path, code, body)
				case tc.want != 0 && err != nil:
					t.Errorf("%s: %v, want %d", path, err, tc.want)
				case code != tc.want:
					t.Errorf("%s: %d %s, want %d", path, code, body, tc.want)
				}
			}
		})
	}
	// The kubelet's probe: HTTPS, no client certificate; a waiting agent
	// is not ready, and says why.
	code, body, err := get(l, withCert(pki.KeyPair{}), instance.PathReady)
	if err != nil || code != http.StatusServiceUnavailable || body == "" {
		t.Errorf("/readyz without a certificate: %d %q %v, want 503 with a reason", code, body, err)
	}
	// A client that does not trust the agent's CA does not reach it.
	if _, _, err := get(l, foreign.ClientTLS(t, foreign.Client), instance.PathStatus); err == nil {
		t.Error("a client trusting another CA reached the agent")
	}
}

// TestAgentTLSFilesReload: the files are read again once tlsRecheck passed
// since the last read, never before; a changed certificate is then served
// on the next handshake without a restart, and a change that does not
// parse keeps the last good certificate.
func TestAgentTLSFilesReload(t *testing.T) {
	dir := t.TempDir()
	old := agenttest.New(t, "db.ns.dbkeeper-agent")
	files := writeAgentFiles(t, dir, old)
	t0 := time.Now()
	serial := func(now time.Time) string {
		t.Helper()
		cert, _, err := files.current(now)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.String()
	}
	oldSerial := serial(t0)

	renewed := agenttest.New(t, "db.ns.dbkeeper-agent")
	agenttest.WriteFiles(t, dir, map[string][]byte{
		instance.SecretFileAgentCert: renewed.Server.CertPEM, instance.SecretFileAgentKey: renewed.Server.KeyPEM, instance.SecretFileAgentCA: renewed.CA.CertPEM,
	})
	if s := serial(t0.Add(tlsRecheck / 2)); s != oldSerial {
		t.Error("the files were read again before tlsRecheck passed")
	}
	newSerial := serial(t0.Add(tlsRecheck + time.Millisecond))
	if newSerial == oldSerial {
		t.Fatal("the renewed certificate is not served after tlsRecheck")
	}
	// The digests reported (Status.TLSFiles) are the files served.
	if got, want := files.digests(), (instance.TLSFiles{CA: instance.FileDigest(renewed.CA.CertPEM), Cert: instance.FileDigest(renewed.Server.CertPEM)}); got == nil || *got != want {
		t.Errorf("digests %+v, want those of the renewed files %+v", got, want)
	}
	// A key that does not match the certificate: the last good pair stays,
	// and so do the digests reported.
	agenttest.WriteFiles(t, dir, map[string][]byte{instance.SecretFileAgentKey: old.Server.KeyPEM})
	if s := serial(t0.Add(3 * tlsRecheck)); s != newSerial {
		t.Error("a key that does not match its certificate replaced the certificate served")
	}
	if got := files.digests(); got == nil || got.Cert != instance.FileDigest(renewed.Server.CertPEM) {
		t.Errorf("digests %+v after a pair that does not parse, want the renewed certificate's still", got)
	}

	// Over real connections: the server serves the files, and a client
	// of the renewed CA is refused until they are replaced, then accepted
	// on the next handshake, with no restart.
	agenttest.WriteFiles(t, dir, map[string][]byte{instance.SecretFileAgentKey: renewed.Server.KeyPEM})
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres"}})
	files = writeAgentFiles(t, dir, old)
	files.recheck = 50 * time.Millisecond
	l := serve(t, a.Handler(), files.serverTLS())
	if code, body, err := get(l, old.ClientTLS(t, old.Client), instance.PathStatus); err != nil || code != http.StatusOK {
		t.Fatalf("before the renewal: %d %s %v", code, body, err)
	}
	if _, _, err := get(l, renewed.ClientTLS(t, renewed.Client), instance.PathStatus); err == nil {
		t.Fatal("a client of the renewed CA was accepted before the files changed")
	}
	agenttest.WriteFiles(t, dir, map[string][]byte{
		instance.SecretFileAgentCert: renewed.Server.CertPEM, instance.SecretFileAgentKey: renewed.Server.KeyPEM, instance.SecretFileAgentCA: renewed.CA.CertPEM,
	})
	time.Sleep(2 * files.recheck)
	if code, body, err := get(l, renewed.ClientTLS(t, renewed.Client), instance.PathStatus); err != nil || code != http.StatusOK {
		t.Fatalf("after the renewal: %d %s %v, want 200", code, body, err)
	}
	if _, _, err := get(l, old.ClientTLS(t, old.Client), instance.PathStatus); err == nil {
		t.Fatal("a client of the replaced CA is still accepted")
	}
}

// TestClientLegacyFallback: against a plain-HTTP agent of an earlier
// release the client retries over HTTP with the bearer token only when it
// has a LegacyToken; against a TLS agent it never sends the token nor
// speaks plain HTTP, whether the agent refused its certificate or the
// client refused the agent's.
func TestClientLegacyFallback(t *testing.T) {
	const legacy = "legacy-token"
	var mu sync.Mutex
	var auths []string
	old := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+legacy {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"phase":"Running","term":7}`)
	}), nil)
	certs := agenttest.New(t, "db.ns.dbkeeper-agent")
	tlsCreds := certs.ClientTLS(t, certs.Client)

	c := clientTo(old.Addr().String())
	st, err := c.Status(context.Background(), "10.1.2.3", instance.AgentCredentials{TLS: tlsCreds, LegacyToken: legacy})
	if err != nil || st.Term != 7 {
		t.Fatalf("with a LegacyToken against a plain-HTTP agent: %+v %v, want its Status", st, err)
	}
	if _, err := c.Status(context.Background(), "10.1.2.3", instance.AgentCredentials{TLS: tlsCreds}); !errors.Is(err, http.ErrSchemeMismatch) {
		t.Errorf("without a LegacyToken against a plain-HTTP agent: %v, want the scheme mismatch", err)
	}
	mu.Lock()
	if len(auths) != 1 || auths[0] != "Bearer "+legacy {
		t.Errorf("the plain-HTTP agent got Authorization %q, want one request with the token", auths)
	}
	mu.Unlock()

	// A new agent, which refuses the client's certificate (another CA's)
	// and which the client refuses (its CA is not trusted).
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres"}})
	files := writeAgentFiles(t, t.TempDir(), certs)
	tlsAgent := serve(t, a.Handler(), files.serverTLS())
	foreign := agenttest.New(t, "db.ns.dbkeeper-agent")
	untrusting := certs.ClientTLS(t, foreign.Client)  // trusts the agent, presents another CA's certificate
	untrusted := foreign.ClientTLS(t, foreign.Client) // does not trust the agent
	c = clientTo(tlsAgent.Addr().String())
	for name, cfg := range map[string]*tls.Config{"the agent refuses the client": untrusting, "the client refuses the agent": untrusted} {
		if _, err := c.Status(context.Background(), "10.1.2.3", instance.AgentCredentials{TLS: cfg, LegacyToken: legacy}); err == nil {
			t.Errorf("%s: the call succeeded", name)
		}
	}
	tlsAgent.mu.Lock()
	defer tlsAgent.mu.Unlock()
	if len(tlsAgent.first) == 0 {
		t.Fatal("no connection reached the TLS agent")
	}
	for i, b := range tlsAgent.first {
		if len(b) == 0 || b[0] != 0x16 { // a TLS handshake record
			t.Errorf("connection %d to the TLS agent began with %q, not a TLS handshake", i, b)
		}
	}
	if bytes.Contains(tlsAgent.all.Bytes(), []byte(legacy)) {
		t.Error("the legacy token reached the TLS agent")
	}
	// No TLS configuration: no call at all.
	if _, err := c.Status(context.Background(), "10.1.2.3", instance.AgentCredentials{LegacyToken: legacy}); err == nil || !strings.Contains(err.Error(), "no TLS credentials") {
		t.Errorf("without TLS credentials: %v", err)
	}
}

// TestUpstreamAllowed is the foreign-upstream rule.
func TestUpstreamAllowed(t *testing.T) {
	for _, tc := range []struct {
		upstream string
		ok       bool
	}{
		{"", true},
		{"orders-0.orders-headless.shop.svc", true},
		{"orders-12.orders-headless.shop.svc.cluster.local", true},
		{"127.0.0.3", true},
		{"::1", true},
		{"10.244.1.7", false},
		{"orders-0", false},
		{"orders-0.orders-headless", false},
		{"orders-0.orders-headless.shop", false},
		{"orders-0.orders-headless.other.svc", false},
		{"orders-0.orders-headless.shop.svc.evil.example", false},
		{"orders-0.orders-headless.shop.svc.cluster.local.evil.example", false},
		{"billing-0.billing-headless.shop.svc", false},
		{"orders-x-0.orders-headless.shop.svc", false},
		{"orders-01.orders-headless.shop.svc", false},
		{"orders-.orders-headless.shop.svc", false},
		{"evil.example", false},
		{"orders-0.orders-headless.shop.svc.", false},
	} {
		err := UpstreamAllowed(tc.upstream, "orders-1", "shop")
		if (err == nil) != tc.ok {
			t.Errorf("UpstreamAllowed(%q) = %v, want allowed %v", tc.upstream, err, tc.ok)
		}
	}
	if err := UpstreamAllowed("orders-0.orders-headless.shop.svc", "orders-1", ""); err == nil {
		t.Error("an agent that does not know its namespace took an upstream")
	}
	if err := UpstreamAllowed("orders-0.orders-headless.shop.svc", "orders", "shop"); err == nil {
		t.Error("an agent that does not know its Database took an upstream")
	}
}

// TestSpecForeignUpstream: a Spec naming a foreign upstream is refused
// with 400 naming it and what is allowed, and changes nothing.
func TestSpecForeignUpstream(t *testing.T) {
	a := New(Config{Config: postgres.Config{PGData: t.TempDir(), SocketDir: t.TempDir(), Port: 5432, User: "postgres", PodName: "orders-1"}, Namespace: "shop", StateFile: filepath.Join(t.TempDir(), "state.json")})
	a.phase = instance.PhaseWaiting
	certs := agenttest.New(t, "orders.shop.dbkeeper-agent")
	c, creds := serveTLS(t, a, certs)
	_, err := c.Apply(context.Background(), "10.1.2.3", creds, instance.Spec{Role: instance.RoleReplica, Upstream: "attacker.example", Slot: "dbkeeper_standby_1", Term: 2})
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), `"attacker.example"`) ||
		!strings.Contains(err.Error(), "orders-<ordinal>.orders-headless.shop.svc") {
		t.Fatalf("a foreign upstream: %v, want 400 naming it and the allowed form", err)
	}
	if a.spec != nil || a.st.Term != 0 {
		t.Fatalf("a refused Spec changed the agent: spec %+v, term %d", a.spec, a.st.Term)
	}
	st, err := c.Apply(context.Background(), "10.1.2.3", creds, instance.Spec{Role: instance.RoleReplica, Upstream: "orders-0.orders-headless.shop.svc", Slot: "dbkeeper_standby_1", Term: 2})
	if err != nil || st.Term != 2 {
		t.Fatalf("the Database's own pod as upstream: %+v %v", st, err)
	}
}
