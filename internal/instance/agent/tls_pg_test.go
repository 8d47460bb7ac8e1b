package agent_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// testCA is a CA that signs the servers' certificates of a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a server certificate and key for the DNS names and the IP
// addresses (the test's upstreams are bare loopback addresses, where a
// pod's are headless Service names), with the given serial.
func (ca *testCA) issue(t *testing.T, serial int64, dnsNames []string, ips ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: dnsNames[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), DNSNames: dnsNames,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// writeSecretVolume writes files into dir the way the kubelet updates a
// Secret volume: into a new timestamped directory, then an atomic swap
// of the ..data symlink the files' symlinks go through. Mode 0440, as the
// StatefulSet mounts them.
func (c *cluster) writeSecretVolume(dir string, files map[string][]byte) {
	c.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.Mkdir(ts, 0o755); err != nil {
		c.t.Fatal(err)
	}
	for name, data := range files {
		p := filepath.Join(ts, name)
		if err := os.WriteFile(p, data, 0o440); err != nil {
			c.t.Fatal(err)
		}
		c.chown(p)
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			c.t.Fatal(err)
		}
	}
}

// serverCertificate connects to a PostgreSQL server at addr, asks for
// TLS (SSLRequest) and returns the certificate it presents.
func serverCertificate(addr string) (*x509.Certificate, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := make([]byte, 8)
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint32(req[4:8], 80877103)
	if _, err := conn.Write(req); err != nil {
		return nil, err
	}
	answer := make([]byte, 1)
	if _, err := io.ReadFull(conn, answer); err != nil {
		return nil, err
	}
	if answer[0] != 'S' {
		return nil, fmt.Errorf("the server answered %q to SSLRequest: no TLS", answer)
	}
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reads the certificate presented
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc.ConnectionState().PeerCertificates[0], nil
}

// psql runs a query through libpq's psql with the connection string and
// returns its output.
func (c *cluster) psql(conninfo, query string) (string, error) {
	cmd := exec.Command(filepath.Join(pgBin, "psql"), "-X", "-A", "-t", "-d", conninfo, "-c", query)
	cmd.Env = []string{"PGPASSWORD=" + userPassword, "PGCONNECT_TIMEOUT=10", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestTLSWithPostgreSQL runs two agents with a mounted TLS Secret and TLS
// required: clients verify the server's certificate for a name in it and
// are refused for another name and without TLS; the standby streams over
// TLS, verifying its upstream; a new certificate in the mounted files is
// served after a reload, with the same postmaster.
func TestTLSWithPostgreSQL(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ca := newTestCA(t)
	tlsDir := filepath.Join(c.base, "tls")
	certPEM, keyPEM := ca.issue(t, 100, []string{"orders.shop.svc", "orders-ro.shop.svc"}, c.ip(0), c.ip(1))
	c.writeSecretVolume(tlsDir, map[string][]byte{"ca.crt": ca.pem, "tls.crt": certPEM, "tls.key": keyPEM})
	caFile := filepath.Join(c.base, "client-ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	c.env = append(c.env, instance.EnvTLSDir+"="+tlsDir, instance.EnvTLSRequired+"=true")
	h0 := c.ip(0)
	addr0 := net.JoinHostPort(h0, strconv.Itoa(c.port))
	client := func(host, sslmode string) string {
		return fmt.Sprintf("host=%s hostaddr=%s port=%d user=app dbname=app sslmode=%s sslrootcert=%s", host, h0, c.port, sslmode, caFile)
	}

	c.start(0)
	c.waitFor("db-0 ready", 60*time.Second, func() error { return c.ready(0) })
	// The agent makes the application user once the server runs.
	c.waitFor("the application user logging in", 30*time.Second, func() error {
		_, err := c.psql(client("orders.shop.svc", "verify-full"), "SELECT 1")
		return err
	})

	t.Run("the key the server reads is the agent's copy, readable by its user alone", func(t *testing.T) {
		got := c.mustSQL(0, "SELECT current_setting('ssl') || ' ' || current_setting('ssl_key_file')")
		if want := "on " + filepath.Join(c.socketDir(0), "tls", "tls.key"); got != want {
			t.Errorf("ssl, ssl_key_file = %q, want %q", got, want)
		}
		st, err := os.Stat(filepath.Join(c.socketDir(0), "tls", "tls.key"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("key file: %v, %v", st, err)
		}
	})

	t.Run("verify-full succeeds for a name in the certificate", func(t *testing.T) {
		out, err := c.psql(client("orders.shop.svc", "verify-full"), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
		if err != nil || out != "t" {
			t.Errorf("psql: %v: %s", err, out)
		}
	})
	t.Run("verify-full fails for a name not in the certificate", func(t *testing.T) {
		out, err := c.psql(client("billing.shop.svc", "verify-full"), "SELECT 1")
		if err == nil || !strings.Contains(out, `does not match host name "billing.shop.svc"`) {
			t.Errorf("psql: %v: %s, want a refused host name", err, out)
		}
	})
	t.Run("TLS required: a connection without TLS is refused", func(t *testing.T) {
		out, err := c.psql(client("orders.shop.svc", "disable"), "SELECT 1")
		if err == nil || !strings.Contains(out, "no pg_hba.conf entry") || !strings.Contains(out, "no encryption") {
			t.Errorf("psql: %v: %s, want a refusal without encryption", err, out)
		}
	})

	t.Run("the standby streams over TLS, verifying its upstream", func(t *testing.T) {
		c.start(1)
		c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60})
		c.waitSlots(slot1)
		c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot1})
		c.waitFor("db-1 ready as a standby", 90*time.Second, func() error { return c.ready(1) })
		got := c.mustSQL(0, "SELECT string_agg(r.application_name || ' ' || s.ssl::text, ',') FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)")
		if got != "db-1 true" {
			t.Errorf("replication connections and their TLS: %q, want db-1 true", got)
		}
		conninfo := c.mustSQL(1, "SELECT conninfo FROM pg_stat_wal_receiver")
		if !strings.Contains(conninfo, "sslmode=verify-full") {
			t.Errorf("the WAL receiver's conninfo %q does not verify the upstream", conninfo)
		}
	})

	t.Run("a new certificate in the mounted files is served after a reload, without a restart", func(t *testing.T) {
		before, err := serverCertificate(addr0)
		if err != nil {
			t.Fatal(err)
		}
		if before.SerialNumber.Int64() != 100 {
			t.Fatalf("serial %v before, want 100", before.SerialNumber)
		}
		pid := c.postmasterPID(0)
		certPEM, keyPEM := ca.issue(t, 200, []string{"orders.shop.svc", "orders-ro.shop.svc"}, c.ip(0), c.ip(1))
		c.writeSecretVolume(tlsDir, map[string][]byte{"ca.crt": ca.pem, "tls.crt": certPEM, "tls.key": keyPEM})
		took := c.waitFor("the new certificate served", 15*time.Second, func() error {
			cert, err := serverCertificate(addr0)
			if err != nil {
				return err
			}
			if cert.SerialNumber.Int64() != 200 {
				return fmt.Errorf("serial %v", cert.SerialNumber)
			}
			return nil
		})
		t.Logf("the new certificate was served %v after the files changed (poll every 5 s)", took.Round(100*time.Millisecond))
		if after := c.postmasterPID(0); after != pid || !alive(pid) {
			t.Errorf("postmaster %d before, %d after: the server restarted", pid, after)
		}
		if out, err := c.psql(client("orders.shop.svc", "verify-full"), "SELECT 1"); err != nil || out != "1" {
			t.Errorf("psql with the new certificate: %v: %s", err, out)
		}
		// The agent says what it did, without key material.
		data, _ := os.ReadFile(filepath.Join(c.dir(0), "agent.log"))
		log := string(data)
		if !strings.Contains(log, "copied the new certificate (serial c8") || !strings.Contains(log, "reloaded the server") {
			t.Errorf("the agent's log does not report the new certificate and the reload:\n%s", tail(log, 20))
		}
		if strings.Contains(log, "PRIVATE KEY") {
			t.Error("the agent's log holds a private key")
		}
	})
}

// TestTLSUpgradeWithPostgreSQL is the upgrade to a release with TLS of a
// replicated Database: the StatefulSet restarts the standby first, whose
// new agent has the certificate while its upstream, a pod of the release
// before, runs no TLS. Told so (Spec.UpstreamPlaintext, from the
// upstream's Status) it clones and streams without TLS; once the primary
// runs TLS too and the Spec says so, it restarts and streams with
// sslmode=verify-full.
func TestTLSUpgradeWithPostgreSQL(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ca := newTestCA(t)
	tlsDir := filepath.Join(c.base, "tls")
	certPEM, keyPEM := ca.issue(t, 300, []string{"orders.shop.svc"}, c.ip(0), c.ip(1))
	c.writeSecretVolume(tlsDir, map[string][]byte{"ca.crt": ca.pem, "tls.crt": certPEM, "tls.key": keyPEM})
	withTLS := []string{instance.EnvTLSDir + "=" + tlsDir}
	c.agentEnv = map[int][]string{1: withTLS}
	h0 := c.ip(0)
	replicationSSL := func() string {
		return c.mustSQL(0, "SELECT coalesce(string_agg(r.application_name || ' ' || s.ssl::text, ','), '') FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)")
	}

	c.start(0)
	c.waitFor("db-0 ready", 60*time.Second, func() error { return c.ready(0) })
	if st := c.status(0); st.TLS {
		t.Fatal("db-0, without a certificate, reports TLS")
	}
	c.start(1)
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60})
	c.waitSlots(slot1)
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot1, UpstreamPlaintext: true})
	c.waitFor("db-1 streaming without TLS from db-0", 90*time.Second, func() error {
		if err := c.ready(1); err != nil {
			return err
		}
		if got := replicationSSL(); got != "db-1 false" {
			return fmt.Errorf("replication connections %q", got)
		}
		return nil
	})
	if st := c.status(1); !st.TLS {
		t.Error("db-1, with a certificate, does not report TLS")
	}

	// The primary's pod restarts with the new template last.
	c.stop(0)
	c.agentEnv[0] = withTLS
	c.start(0)
	c.waitFor("db-0's agent answering", 10*time.Second, func() error {
		_, err := c.client.Status(context.Background(), h0, c.creds)
		return err
	})
	c.apply(0, instance.Spec{Role: instance.RolePrimary, Slots: []string{slot1}, LeaseSeconds: 60})
	c.waitFor("db-0 ready with TLS", 60*time.Second, func() error {
		if err := c.ready(0); err != nil {
			return err
		}
		if !c.status(0).TLS {
			return errors.New("db-0 does not report TLS")
		}
		return nil
	})
	c.apply(1, instance.Spec{Role: instance.RoleReplica, Upstream: h0, Slot: slot1})
	c.waitFor("db-1 streaming over TLS from db-0", 60*time.Second, func() error {
		if err := c.ready(1); err != nil {
			return err
		}
		if got := replicationSSL(); got != "db-1 true" {
			return fmt.Errorf("replication connections %q", got)
		}
		return nil
	})
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
