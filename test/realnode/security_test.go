package realnode

import (
	"bufio"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// vault is the Database of the security scenario: two servers, a server
// certificate from cert-manager, TLS required.
const vault = "vault"

// issuers is a self-signed issuer, a CA certificate from it, and a CA
// issuer of that certificate, as a platform team sets up cert-manager.
const issuers = `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned, namespace: ` + ns + `}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: databases-ca, namespace: ` + ns + `}
spec:
  isCA: true
  commonName: databases-ca
  secretName: databases-ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: selfsigned, kind: Issuer}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: databases, namespace: ` + ns + `}
spec: {ca: {secretName: databases-ca}}
`

// testSecurity walks the data path's security on the real node with the
// real cert-manager: TLS through both Services with the Secret's CA, the
// refusals, the rotation of the server certificate without a restart
// under a writer, the application user's rights and the agents' mutual TLS.
func (s *suite) testSecurity(t subtest) {
	ctx := context.Background()
	step := s.steps(t, vault)
	// Replicated: the postgres 17 test image carries version-15
	// replication tools (docs/replication.md §21).
	pgImage := s.image("dbkeeper.local/postgres:15.")
	// cert-manager runs for the scenario: the last step needs it to issue
	// the certificate again.
	assets := e2eharness.RequireCertManager(t)
	_, logs := e2eharness.StartCertManager(t, s.env.MustKubectl, assets, s.runDir, s.env.Cluster.Kubeconfig)
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range logs {
				data, _ := os.ReadFile(f)
				t.Logf("%s (last lines):\n%s", f, lastMeaningful(string(data), 30))
			}
		}
	})

	step("cert-manager issues the certificate of a Database that requires TLS", func(t subtest) {
		testenv.Eventually(t, 2*time.Minute, "the issuers applied", func() string {
			if out, err := s.kubectl("apply", "-f", s.writeManifest(issuers)); err != nil {
				return out
			}
			return ""
		})
		s.mustKubectl("wait", "-n", ns, "--for=condition=Ready", "certificate/databases-ca", "--timeout=120s")
		s.apply(strings.Replace(database(vault, "postgres", majorOf(pgImage), pgImage, "Delete", nil), "spec:\n",
			"spec:\n  replicas: 2\n  tls: {issuerRef: {name: databases, kind: Issuer}, required: true}\n", 1))
		took := s.waitReady(vault, 6*time.Minute)
		t.Logf("Ready in %.0fs", took.Seconds())
		creds := s.secret(vault + "-credentials")
		if !strings.Contains(creds["ca.crt"], "BEGIN CERTIFICATE") {
			t.Fatalf("the credentials Secret has no ca.crt")
		}
		if !strings.Contains(creds["uri"], "sslmode=verify-full") {
			t.Errorf("the credentials' uri %q does not ask for verify-full", redact(creds["uri"], creds["password"]))
		}
		if ca := s.secret("databases-ca")["ca.crt"]; ca != creds["ca.crt"] {
			t.Errorf("the credentials' ca.crt is not cert-manager's CA")
		}
	})

	// An application pod with the credentials Secret mounted, as the README
	// tells users to run one.
	client := vault + "-app"
	step("an application pod verifies the server through both Services; a wrong name and plaintext are refused", func(t subtest) {
		s.apply(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s
    command: [sleep, "3600"]
    volumeMounts: [{name: creds, mountPath: /creds, readOnly: true}]
  volumes:
  - name: creds
    secret: {secretName: %s-credentials}
`, client, ns, pgImage, vault))
		s.mustKubectl("wait", "-n", ns, "--for=condition=Ready", "pod/"+client, "--timeout=120s")
		psql := func(conninfo, sql string) (string, error) {
			return s.kubectl("exec", "-n", ns, client, "--", "bash", "-c",
				`PGPASSWORD="$(cat /creds/password)" PGCONNECT_TIMEOUT=5 psql -XAtq "$1" -c "$2"`, "psql", conninfo, sql)
		}
		verified := func(host string) string {
			return fmt.Sprintf("host=%s port=5432 dbname=app user=app sslmode=verify-full sslrootcert=/creds/ca.crt", host)
		}
		for _, tc := range []struct{ host, want string }{
			{vault + "." + ns + ".svc", "f"},
			{vault + "-ro." + ns + ".svc.cluster.local", "t"},
		} {
			testenv.Eventually(t, time.Minute, "verify-full through "+tc.host, func() string {
				out, err := psql(verified(tc.host), "SELECT pg_is_in_recovery()")
				if err != nil || strings.TrimSpace(out) != tc.want {
					return fmt.Sprintf("%v: %s", err, out)
				}
				return ""
			})
		}
		podIP := strings.TrimSpace(s.mustKubectl("get", "pod", "-n", ns, vault+"-0", "-o", "jsonpath={.status.podIP}"))
		if out, err := psql(verified(podIP), "SELECT 1"); err == nil || !strings.Contains(out, "does not match host name") {
			t.Errorf("verify-full to the pod's address, a name not in the certificate: %v, %s; want the name refused", err, out)
		}
		plain := fmt.Sprintf("host=%s.%s.svc port=5432 dbname=app user=app sslmode=disable", vault, ns)
		if out, err := psql(plain, "SELECT 1"); err == nil || !strings.Contains(out, "no encryption") {
			t.Errorf("sslmode=disable with TLS required: %v, %s; want pg_hba's refusal of a connection without encryption", err, out)
		}
		// The application user's rights.
		for sql, want := range map[string]string{
			"ALTER SYSTEM SET work_mem = '8MB'": "permission denied",
			"CREATE ROLE intruder":              "permission denied",
			"SELECT rolpassword FROM pg_authid": "permission denied",
		} {
			if out, err := psql(verified(vault+"."+ns+".svc"), sql); err == nil || !strings.Contains(out, want) {
				t.Errorf("%s as the application user: %v, %s; want %q", sql, err, out, want)
			}
		}
		other := strings.Replace(verified(vault+"."+ns+".svc"), "dbname=app", "dbname=postgres", 1)
		if out, err := psql(other, "SELECT 1"); err == nil || !strings.Contains(out, "permission denied for database") {
			t.Errorf("the application user reading the postgres database: %v, %s; want permission denied", err, out)
		}
	})

	step("kubectl port-forward reaches no superuser: a wrong password and its own are refused", func(t subtest) {
		inst := s.secret(desired.InstanceSecretName(s.database(t, vault)))
		creds := s.secret(vault + "-credentials")
		// A tunnel per login, as an attacker would open: kubectl
		// port-forward exits once a connection it forwards ends with an
		// error on the pod's side ("lost connection to pod"), as a refused
		// login does.
		login := func(user, password, database string) error {
			local, stop := s.portForward(t, vault+"-0", 5432)
			defer stop()
			u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: local, Path: database,
				RawQuery: "connect_timeout=5&sslmode=require"}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			c, err := pgx.Connect(ctx, u.String())
			if err != nil {
				return err
			}
			defer func() { _ = c.Close(context.Background()) }()
			var who string
			return c.QueryRow(ctx, "SELECT current_user").Scan(&who)
		}
		// The tunnel works: the application user logs in through it.
		testenv.Eventually(t, 30*time.Second, "the application user through kubectl port-forward", func() string {
			if err := login(creds["username"], creds["password"], creds["database"]); err != nil {
				return err.Error()
			}
			return ""
		})
		for _, c := range []struct{ what, user, password, database string }{
			{"a wrong password", desired.SuperUser, "wrong", "postgres"},
			{"the superuser's own password", desired.SuperUser, inst[desired.SecretKeySuperuserPassword], "postgres"},
			{"the superuser's own password, the application's database", desired.SuperUser, inst[desired.SecretKeySuperuserPassword], creds["database"]},
			{"the replication role, the application's database", desired.ReplicationUser, inst[desired.SecretKeyInstanceReplicationPassword], creds["database"]},
		} {
			err := login(c.user, c.password, c.database)
			switch {
			case err == nil:
				t.Errorf("%s: %s logged in to %s through kubectl port-forward", c.what, c.user, c.database)
			case !strings.Contains(err.Error(), "pg_hba.conf rejects") && !strings.Contains(err.Error(), "password authentication failed"):
				t.Errorf("%s: %s refused for another reason than pg_hba.conf or the password: %v", c.what, c.user, err)
			}
		}
		// From 127.0.0.1 inside the pod, where port-forward connects from.
		out, err := s.kubectl("exec", "-n", ns, vault+"-0", "-c", "postgres", "--", "env", "PGPASSWORD=wrong", "PGCONNECT_TIMEOUT=5",
			"psql", "-X", "--host=127.0.0.1", "--username="+desired.SuperUser, "--dbname=postgres", "-c", "SELECT 1")
		if err == nil || !strings.Contains(out, "pg_hba.conf rejects") {
			t.Errorf("the superuser with a wrong password over 127.0.0.1 in the pod: %v, %s; want pg_hba.conf's refusal", err, out)
		}
	})

	step("only the operator's certificate commands an agent", func(t subtest) {
		inst := s.secret(desired.InstanceSecretName(s.database(t, vault)))
		keys := s.agentKeys(t, vault)
		operator, err := tls.X509KeyPair(keys.Data[desired.SecretKeyOperatorCert], keys.Data[desired.SecretKeyOperatorKey])
		if err != nil {
			t.Fatalf("the operator's certificate in the agent keys Secret: %v", err)
		}
		roots, err := pki.Pool([]byte(inst[desired.SecretKeyAgentCA]))
		if err != nil {
			t.Fatal(err)
		}
		serverName := desired.AgentServerName(s.database(t, vault))
		stranger := strangerCertificate(t)
		app := s.secret(vault + "-credentials")
		standbyIP := strings.TrimSpace(s.mustKubectl("get", "pod", "-n", ns, vault+"-1", "-o", "jsonpath={.status.podIP}"))
		status := "https://" + net.JoinHostPort(standbyIP, strconv.Itoa(instance.Port)) + instance.PathStatus
		get := func(certs []tls.Certificate, header string) (int, string) {
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
				RootCAs: roots, ServerName: serverName, Certificates: certs, MinVersion: tls.VersionTLS12}}}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, status, nil)
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := c.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return resp.StatusCode, string(body)
		}
		for name, tc := range map[string]struct {
			certs  []tls.Certificate
			header string
		}{
			"no client certificate":                      {},
			"the application's password as a token":      {header: "Bearer " + app["password"]},
			"a client certificate from another CA":       {certs: []tls.Certificate{stranger}},
			"the previous release's token, if it leaked": {header: "Bearer " + app["agent-token"]},
		} {
			if code, body := get(tc.certs, tc.header); code == http.StatusOK {
				t.Errorf("%s: the agent answered 200 (%.80s)", name, body)
			}
		}
		if code, body := get([]tls.Certificate{operator}, ""); code != http.StatusOK {
			t.Fatalf("the operator's certificate: %d %s; want 200", code, body)
		}
		// Plain HTTP reaches no command at all.
		if resp, err := http.Get("http://" + net.JoinHostPort(standbyIP, strconv.Itoa(instance.Port)) + instance.PathStatus); err == nil {
			if resp.StatusCode == http.StatusOK {
				t.Errorf("plain HTTP to the agent answered 200")
			}
			resp.Body.Close()
		}

		// A Spec pointing the standby at a host outside the Database,
		// sent with the operator's own certificate, in the current term.
		creds := instance.AgentCredentials{TLS: &tls.Config{RootCAs: roots, ServerName: serverName,
			Certificates: []tls.Certificate{operator}, MinVersion: tls.VersionTLS12}}
		agents := &instance.Client{HTTP: &http.Client{Timeout: 10 * time.Second}}
		st, err := agents.Status(ctx, standbyIP, creds)
		if err != nil {
			t.Fatal(err)
		}
		spec := instance.Spec{Role: instance.RoleReplica, Upstream: "evil.example.com", Term: st.Term}
		if st.Spec != nil {
			spec.Slot = st.Spec.Slot
		}
		if _, err := agents.Apply(ctx, standbyIP, creds, spec); err == nil || !strings.Contains(err.Error(), "upstream") {
			t.Errorf("a Spec with a foreign upstream: %v; want it refused, naming the upstream", err)
		}
		s.waitReady(vault, time.Minute)
	})

	step("a reader of the namespace's Secrets finds no key that commands an agent", func(t subtest) {
		s.secretReaderCannotCommandAgents(t, vault)
		s.waitReady(vault, time.Minute)
	})

	step("a deleted certificate Secret is issued again and served within 60 s, without a restart or a lost write", func(t subtest) {
		caFile := filepath.Join(s.runDir, "vault-ca.crt")
		if err := os.WriteFile(caFile, []byte(s.secret(vault + "-credentials")["ca.crt"]), 0o600); err != nil {
			t.Fatal(err)
		}
		rw := s.pgTargetTLS(vault, vault, caFile)
		rw.exec(t, "CREATE TABLE IF NOT EXISTS ledger (n int PRIMARY KEY)")
		pods := []string{vault + "-0", vault + "-1"}
		before := map[string]string{}
		for _, pod := range pods {
			before[pod] = s.postmasterStart(t, pod, caFile)
		}
		restarts := s.mustKubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance="+vault, "-o", "jsonpath={.items[*].status.containerStatuses[*].restartCount}")
		oldSerial := s.servedSerial(t, pods[0], caFile)
		w := startWriter(t, rw, 1)
		w.waitWrites(t, 20, time.Minute)

		deleted := time.Now()
		s.mustKubectl("delete", "secret", "-n", ns, desired.TLSSecretName(s.database(t, vault)))
		took := map[string]time.Duration{}
		testenv.Eventually(t, 90*time.Second, "both servers presenting a new certificate", func() string {
			for _, pod := range pods {
				if _, ok := took[pod]; ok {
					continue
				}
				serial := s.servedSerial(t, pod, caFile)
				if serial == "" || serial == oldSerial {
					return pod + " still serves " + oldSerial
				}
				took[pod] = time.Since(deleted)
			}
			return ""
		})
		for pod, d := range took {
			t.Logf("%s served the new certificate %.1fs after its Secret was deleted", pod, d.Seconds())
			if d > 60*time.Second {
				t.Errorf("%s served the new certificate after %.0fs, want within 60 s", pod, d.Seconds())
			}
		}
		w.waitWrites(t, 20, time.Minute)
		acked, longest := w.stop()
		t.Logf("writer: %d acknowledged, longest pause %.1fs", len(acked), longest.Seconds())
		s.checkLost(t, rw, acked, 0)
		for _, pod := range pods {
			if got := s.postmasterStart(t, pod, caFile); got != before[pod] {
				t.Errorf("%s's server restarted (started %s, then %s)", pod, before[pod], got)
			}
		}
		if now := s.mustKubectl("get", "pods", "-n", ns, "-l", "app.kubernetes.io/instance="+vault, "-o", "jsonpath={.items[*].status.containerStatuses[*].restartCount}"); now != restarts {
			t.Errorf("container restarts went from %q to %q", restarts, now)
		}
	})

	step("with every statement logged, a changed password is in no log and logs in", func(t subtest) {
		caFile := filepath.Join(s.runDir, "vault-ca.crt")
		if err := os.WriteFile(caFile, []byte(s.secret(vault + "-credentials")["ca.crt"]), 0o600); err != nil {
			t.Fatal(err)
		}
		before := s.secret(vault + "-credentials")
		inst := s.secret(desired.InstanceSecretName(s.database(t, vault)))
		newPassword := "N3w" + rand.Text()
		// The parameters restart the pods, the primary last by switchover:
		// the new primary sets the application user's new password.
		s.mustKubectl("patch", "database", "-n", ns, vault, "--type=merge", "-p",
			`{"spec":{"parameters":{"log_statement":"all","log_min_duration_statement":"0"}}}`)
		s.mustKubectl("patch", "secret", "-n", ns, vault+"-credentials", "--type=merge", "-p",
			fmt.Sprintf(`{"stringData":{"password":%q}}`, newPassword))
		testenv.Eventually(t, 8*time.Minute, "the application user logging in to the primary with the new password", func() string {
			c, err := s.podTLS(t, s.primaryOf(t, vault), caFile)
			if err != nil {
				return err.Error()
			}
			defer func() { _ = c.Close(context.Background()) }()
			// A statement of its own (the simple protocol: "statement:"),
			// so that the scan below has a logged statement to prove it
			// looks at what log_statement=all writes.
			if _, err := c.Exec(context.Background(), "SELECT 'a logged statement'"); err != nil {
				return err.Error()
			}
			return ""
		})
		s.waitReady(vault, 5*time.Minute)
		var logs strings.Builder
		for _, pod := range []string{vault + "-0", vault + "-1"} {
			out, err := s.kubectl("logs", "-n", ns, pod, "--all-containers=true")
			if err != nil {
				t.Fatalf("kubectl logs %s: %v", pod, err)
			}
			logs.WriteString(out)
		}
		if !strings.Contains(logs.String(), "statement: ") {
			t.Fatalf("the servers log no statement with log_statement=all: the scan would prove nothing")
		}
		for name, secret := range map[string]string{
			"the old application password": before["password"], "the new application password": newPassword,
			"the superuser's password": inst[desired.SecretKeySuperuserPassword], "the replication password": inst[desired.SecretKeyInstanceReplicationPassword],
			"a password verifier": "SCRAM-SHA-256$",
		} {
			if secret != "" && strings.Contains(logs.String(), secret) {
				t.Errorf("the pods' logs hold %s", name)
			}
		}
	})

	s.mustKubectl("delete", "pod", "-n", ns, client, "--ignore-not-found", "--wait=false")
	s.mustKubectl("delete", "database", "-n", ns, vault, "--wait=true", "--timeout=120s")
}

// portForward runs kubectl port-forward to port of pod, as anyone allowed
// to port-forward in the namespace can, and returns the local address it
// listens on and the function that stops it (at the latest when the test
// ends).
func (s *suite) portForward(t testing.TB, pod string, port int) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(s.env.Cluster.BinDir, devcluster.Kubectl), "port-forward", "-n", ns,
		"--address=127.0.0.1", "pod/"+pod, ":"+strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.env.Cluster.Kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	// "Forwarding from 127.0.0.1:41234 -> 5432"
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, _, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "Forwarding from "), " -> "); ok {
				lines <- addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case addr := <-lines:
		return addr, stop
	case <-time.After(30 * time.Second):
		stop()
		t.Fatalf("kubectl port-forward to %s:%d printed no address within 30 s: %s", pod, port, stderr.String())
	}
	return "", stop
}

// writeManifest writes a manifest into the suite's directory and returns
// its path.
func (s *suite) writeManifest(manifest string) string {
	f := filepath.Join(s.runDir, fmt.Sprintf("manifest-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		s.t.Fatal(err)
	}
	return f
}

// pgTargetTLS is pgTarget over TLS, verifying the server's chain against
// caFile (the test reaches the Service by address, so names are checked
// from a pod, in the step above).
func (s *suite) pgTargetTLS(db, service, caFile string) *pgTarget {
	p := s.pgTarget(db, service)
	u, _ := url.Parse(p.uri)
	u.RawQuery = "connect_timeout=2&sslmode=verify-ca&sslrootcert=" + url.QueryEscape(caFile)
	p.uri = u.String()
	return p
}

// podTLS connects to pod's server by its address over TLS as the
// application user.
func (s *suite) podTLS(t testing.TB, pod, caFile string) (*pgx.Conn, error) {
	t.Helper()
	sec := s.secret(vault + "-credentials")
	ip := strings.TrimSpace(s.mustKubectl("get", "pod", "-n", ns, pod, "-o", "jsonpath={.status.podIP}"))
	u := url.URL{Scheme: "postgres", User: url.UserPassword(sec["username"], sec["password"]), Host: net.JoinHostPort(ip, sec["port"]),
		Path: sec["database"], RawQuery: "connect_timeout=3&sslmode=verify-ca&sslrootcert=" + url.QueryEscape(caFile)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, u.String())
}

// servedSerial returns the serial of the certificate pod's server presents
// to a new connection, "" when it cannot connect.
func (s *suite) servedSerial(t testing.TB, pod, caFile string) string {
	c, err := s.podTLS(t, pod, caFile)
	if err != nil {
		return ""
	}
	defer func() { _ = c.Close(context.Background()) }()
	conn, ok := c.PgConn().Conn().(*tls.Conn)
	if !ok || len(conn.ConnectionState().PeerCertificates) == 0 {
		return ""
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// postmasterStart returns when pod's server started.
func (s *suite) postmasterStart(t testing.TB, pod, caFile string) string {
	t.Helper()
	var started string
	testenv.Eventually(t, 30*time.Second, pod+"'s pg_postmaster_start_time()", func() string {
		c, err := s.podTLS(t, pod, caFile)
		if err != nil {
			return err.Error()
		}
		defer func() { _ = c.Close(context.Background()) }()
		if err := c.QueryRow(context.Background(), "SELECT pg_postmaster_start_time()::text").Scan(&started); err != nil {
			return err.Error()
		}
		return ""
	})
	return started
}

// strangerCertificate is a client certificate named as the operator's but
// signed by a CA of its own.
func strangerCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("stranger-ca", time.Hour, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.Issue(ca, pki.Request{CommonName: desired.AgentClientName, Usage: pki.Client, Validity: time.Hour}, now, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// redact replaces secret in s.
func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, url.QueryEscape(secret), "REDACTED")
}

// agentKeys returns the agent keys Secret of the Database name, in the
// manager's namespace for them (localrun.AgentKeysNamespace).
func (s *suite) agentKeys(t subtest, name string) *corev1.Secret {
	t.Helper()
	keys := &corev1.Secret{}
	key := client.ObjectKey{Namespace: localrun.AgentKeysNamespace, Name: desired.AgentKeysSecretName(s.database(t, name))}
	if err := s.client.Get(context.Background(), key, keys); err != nil {
		t.Fatalf("the agent keys Secret %s: %v", key, err)
	}
	return keys
}

// secretReaderCannotCommandAgents plays a user of the Database's namespace
// who may get and list its Secrets, and nothing else (a ServiceAccount
// with that Role, its own token, kubectl): it reads every Secret there,
// and tries each certificate and key it finds, each key as a CA's to sign
// a client certificate of its own, and no certificate at all, to fence the
// standby and raise its term: every attempt is refused, the agent's term
// is unchanged, and the agent keys Secret in the operator's namespace is
// out of its reach.
func (s *suite) secretReaderCannotCommandAgents(t subtest, name string) {
	t.Helper()
	ctx := context.Background()
	const reader = "secret-reader"
	s.apply(`apiVersion: v1
kind: ServiceAccount
metadata: {name: ` + reader + `, namespace: ` + ns + `}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: ` + reader + `, namespace: ` + ns + `}
rules:
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ` + reader + `, namespace: ` + ns + `}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ` + reader + `}
subjects:
- {kind: ServiceAccount, name: ` + reader + `, namespace: ` + ns + `}
`)
	token := strings.TrimSpace(s.mustKubectl("create", "token", reader, "-n", ns, "--duration=10m"))
	// A kubeconfig of the reader's own: the admin's would present the
	// admin's client certificate beside the token.
	admin, err := clientcmd.LoadFromFile(s.env.Cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	for name, c := range admin.Clusters {
		cfg.Clusters[name] = c
		cfg.Contexts[reader] = &clientcmdapi.Context{Cluster: name, AuthInfo: reader}
	}
	cfg.AuthInfos[reader] = &clientcmdapi.AuthInfo{Token: token}
	cfg.CurrentContext = reader
	readerConfig := filepath.Join(s.runDir, reader+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, readerConfig); err != nil {
		t.Fatal(err)
	}
	asReader := func(args ...string) (string, error) {
		return s.kubectl(append([]string{"--kubeconfig=" + readerConfig}, args...)...)
	}
	if out, err := asReader("auth", "can-i", "list", "secrets", "-n", ns); err != nil || strings.TrimSpace(out) != "yes" {
		t.Fatalf("the reader may not list the namespace's Secrets: %v %s", err, out)
	}
	// What the reader may read: every Secret of the namespace.
	out, err := asReader("get", "secrets", "-n", ns, "-o", "json")
	if err != nil {
		t.Fatalf("the reader lists the namespace's Secrets: %v %s", err, out)
	}
	var list corev1.SecretList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	// And not the operator's keys.
	keysName := desired.AgentKeysSecretName(s.database(t, name))
	if out, err := asReader("get", "secret", "-n", localrun.AgentKeysNamespace, keysName, "-o", "name"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("the reader reads the agent keys Secret in the operator's namespace: %v %s", err, out)
	}

	var certs []*x509.Certificate
	var certPEMs [][]byte
	var keys []crypto.Signer
	var keyPEMs [][]byte
	for _, sec := range list.Items {
		for k, v := range sec.Data {
			for rest := v; ; {
				var block *pem.Block
				if block, rest = pem.Decode(rest); block == nil {
					break
				}
				switch {
				case block.Type == "CERTIFICATE":
					if c, err := x509.ParseCertificate(block.Bytes); err == nil {
						certs, certPEMs = append(certs, c), append(certPEMs, pem.EncodeToMemory(block))
					}
				case strings.HasSuffix(block.Type, "PRIVATE KEY"):
					if key := parseAnyKey(block); key != nil {
						keys, keyPEMs = append(keys, key), append(keyPEMs, pem.EncodeToMemory(block))
					} else {
						t.Logf("Secret %s key %s: a %s block that does not parse", sec.Name, k, block.Type)
					}
				}
			}
		}
	}
	// The CAs the agents trust, from the instance Secret the reader read.
	agentCAs := map[string]bool{}
	for _, sec := range list.Items {
		if sec.Name != desired.InstanceSecretName(s.database(t, name)) {
			continue
		}
		for rest := sec.Data[desired.SecretKeyAgentCA]; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			agentCAs[string(block.Bytes)] = true
		}
	}
	if len(agentCAs) == 0 {
		t.Fatalf("the reader found no agent CA certificate in Secret %s", desired.InstanceSecretName(s.database(t, name)))
	}
	if len(keys) == 0 || len(certs) == 0 {
		t.Fatalf("the reader found %d certificates and %d keys: the instance Secret's serving pair at least must be there", len(certs), len(keys))
	}
	t.Logf("the reader found %d Secrets, %d certificates, %d private keys", len(list.Items), len(certs), len(keys))

	// Every client certificate the reader can present: each pair it found
	// whose key matches, and one of its own signed by each key that
	// matches a CA certificate it found.
	var attempts []struct {
		what string
		cert []tls.Certificate
	}
	attempts = append(attempts, struct {
		what string
		cert []tls.Certificate
	}{"no client certificate", nil})
	for i, c := range certs {
		for j, key := range keys {
			if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(c.PublicKey) {
				continue
			}
			if pair, err := tls.X509KeyPair(certPEMs[i], keyPEMs[j]); err == nil {
				attempts = append(attempts, struct {
					what string
					cert []tls.Certificate
				}{fmt.Sprintf("the pair of %q", c.Subject.CommonName), []tls.Certificate{pair}})
			}
			if !c.IsCA {
				continue
			}
			// Other CAs' keys are there by design (cert-manager's CA
			// Secret, dbkeeper's server CA <name>-ca): the agents must
			// not trust them. One the agents trust must not be there.
			if agentCAs[string(c.Raw)] {
				t.Errorf("the key of the agent CA %q is readable in the namespace", c.Subject.CommonName)
			}
			forged, err := pki.Issue(pki.KeyPair{CertPEM: certPEMs[i], KeyPEM: keyPEMs[j]},
				pki.Request{CommonName: desired.AgentClientName, Usage: pki.Client, Validity: time.Hour}, time.Now(), rand.Reader)
			if err != nil {
				t.Errorf("signing with the key of CA %q: %v", c.Subject.CommonName, err)
				continue
			}
			if pair, err := tls.X509KeyPair(forged.CertPEM, forged.KeyPEM); err == nil {
				attempts = append(attempts, struct {
					what string
					cert []tls.Certificate
				}{fmt.Sprintf("a certificate of its own signed by CA %q", c.Subject.CommonName), []tls.Certificate{pair}})
			}
		}
	}

	// The operator's view, to compare the standby's term before and after.
	operatorKeys := s.agentKeys(t, name)
	operator, err := tls.X509KeyPair(operatorKeys.Data[desired.SecretKeyOperatorCert], operatorKeys.Data[desired.SecretKeyOperatorKey])
	if err != nil {
		t.Fatal(err)
	}
	roots, err := pki.Pool(operatorKeys.Data[desired.SecretKeyAgentCACert])
	if err != nil {
		t.Fatal(err)
	}
	serverName := desired.AgentServerName(s.database(t, name))
	standbyIP := strings.TrimSpace(s.mustKubectl("get", "pod", "-n", ns, name+"-1", "-o", "jsonpath={.status.podIP}"))
	agents := &instance.Client{HTTP: &http.Client{Timeout: 10 * time.Second}}
	operatorCreds := instance.AgentCredentials{TLS: &tls.Config{RootCAs: roots, ServerName: serverName, Certificates: []tls.Certificate{operator}, MinVersion: tls.VersionTLS13}}
	before, err := agents.Status(ctx, standbyIP, operatorCreds)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attempts {
		for _, spec := range []instance.Spec{
			{Role: instance.RoleFenced, Term: before.Term + 1},
			{Role: instance.RolePrimary, Term: before.Term + 1},
			{Role: instance.RoleFenced, Term: math.MaxInt64},
		} {
			// The reader trusts whatever the agent serves: it wants in,
			// not to verify the agent.
			creds := instance.AgentCredentials{TLS: &tls.Config{InsecureSkipVerify: true, Certificates: a.cert, MinVersion: tls.VersionTLS13}} //nolint:gosec // the attacker's side
			if _, err := agents.Apply(ctx, standbyIP, creds, spec); err == nil {
				t.Errorf("%s: the agent took a %s Spec of term %d", a.what, spec.Role, spec.Term)
			}
		}
	}
	after, err := agents.Status(ctx, standbyIP, operatorCreds)
	if err != nil {
		t.Fatal(err)
	}
	if after.Term != before.Term || after.Fenced {
		t.Errorf("after the reader's attempts the standby's term is %d (was %d), fenced %v", after.Term, before.Term, after.Fenced)
	}
}

// parseAnyKey parses a PEM private key block of any type x509 knows, nil
// when it does not parse or cannot sign.
func parseAnyKey(block *pem.Block) crypto.Signer {
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if signer, ok := k.(crypto.Signer); ok {
			return signer
		}
	}
	return nil
}
