// Package agenttest makes the certificates the instance agent's tests
// serve and call it with: a CA, the agent's serving certificate and the
// operator's client certificate, as the operator makes them with
// internal/pki. It imports neither the agent nor the operator, so that the
// agent's own tests use it too.
package agenttest

import (
	"crypto/rand"
	"crypto/tls"
	"os"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// ClientName is the operator's client certificate's common name
// (instance.AgentClientName).
const ClientName = "dbkeeper-operator"

// Certs are a Database's agent CA and the certificates it signed.
type Certs struct {
	// ServerName is the name in the agent's certificate, which clients
	// check.
	ServerName string
	// CA signs Server (usage server, ServerName) and Client (usage
	// client, common name ClientName).
	CA, Server, Client pki.KeyPair
}

// New makes a CA and the agent's and the operator's certificates, valid
// for a day.
func New(t testing.TB, serverName string) *Certs {
	t.Helper()
	ca, err := pki.NewCA("dbkeeper agent CA (test)", 24*time.Hour, time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := &Certs{ServerName: serverName, CA: ca}
	c.Server = c.Issue(t, pki.Request{CommonName: serverName, DNSNames: []string{serverName}, Usage: pki.Server})
	c.Client = c.Issue(t, pki.Request{CommonName: ClientName, Usage: pki.Client})
	return c
}

// Issue makes another certificate signed by the CA, valid for a day unless
// req says otherwise.
func (c *Certs) Issue(t testing.TB, req pki.Request) pki.KeyPair {
	t.Helper()
	if req.Validity == 0 {
		req.Validity = 24 * time.Hour
	}
	kp, err := pki.Issue(c.CA, req, time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// ClientTLS is a client's TLS configuration for the agent: it trusts the
// CA, checks ServerName, and presents kp (the operator's: c.Client).
func (c *Certs) ClientTLS(t testing.TB, kp pki.KeyPair) *tls.Config {
	t.Helper()
	pool, err := pki.Pool(c.CA.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: c.ServerName, MinVersion: tls.VersionTLS13}
	if kp.CertPEM != nil {
		cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// WriteFiles writes files (name to content) into dir, readable by
// everyone: the tests' agents may run as another user.
func WriteFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		path := dir + "/" + name
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(tmp, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
}
