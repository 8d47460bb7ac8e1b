package agent

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// tlsRecheck is how long the agent serves the TLS files it read before it
// looks at them again.
const tlsRecheck = 2 * time.Second

// agentTLSFiles serves the agent's certificate and the client CA from their
// files, read again at a handshake when tlsRecheck passed since they were
// last read: a renewed certificate (the Secret's projection changing the
// files) is served without a restart. A change that does not parse (a key
// and certificate that do not match) keeps the last good pair and is
// logged.
type agentTLSFiles struct {
	certFile, keyFile, caFile string
	recheck                   time.Duration
	logf                      func(string, ...any)

	mu                     sync.Mutex
	checked                time.Time
	certPEM, keyPEM, caPEM []byte
	cert                   *tls.Certificate
	pool                   *x509.CertPool
	lastErr                string
}

// current returns the certificate and the client CA pool to serve.
func (f *agentTLSFiles) current(now time.Time) (*tls.Certificate, *x509.CertPool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert != nil && now.Sub(f.checked) < f.recheck {
		return f.cert, f.pool, nil
	}
	f.checked = now
	err := f.reload()
	if err != nil && err.Error() != f.lastErr && f.logf != nil {
		if f.cert != nil {
			f.logf("the agent's TLS files: %v; serving the certificate read before", err)
		} else {
			f.logf("the agent's TLS files: %v", err)
		}
	}
	f.lastErr = ""
	if err != nil {
		f.lastErr = err.Error()
	}
	if f.cert == nil {
		return nil, nil, err
	}
	return f.cert, f.pool, nil
}

// digests returns the FileDigest of the client CA bundle and of the
// serving certificate served now, nil before the files were first read.
func (f *agentTLSFiles) digests() *instance.TLSFiles {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert == nil {
		return nil
	}
	return &instance.TLSFiles{CA: instance.FileDigest(f.caPEM), Cert: instance.FileDigest(f.certPEM)}
}

// reload reads the files and parses what changed since the last read.
func (f *agentTLSFiles) reload() error {
	var files [3][]byte
	for i, path := range []string{f.certFile, f.keyFile, f.caFile} {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[i] = data
	}
	certPEM, keyPEM, caPEM := files[0], files[1], files[2]
	if f.cert != nil && bytes.Equal(certPEM, f.certPEM) && bytes.Equal(keyPEM, f.keyPEM) && bytes.Equal(caPEM, f.caPEM) {
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("%s and %s: %w", f.certFile, f.keyFile, err)
	}
	pool, err := pki.Pool(caPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", f.caFile, err)
	}
	if f.cert != nil && f.logf != nil {
		f.logf("serving the TLS files read again: %s changed", changedFiles(f, certPEM, keyPEM, caPEM))
	}
	f.certPEM, f.keyPEM, f.caPEM, f.cert, f.pool = certPEM, keyPEM, caPEM, &cert, pool
	return nil
}

func changedFiles(f *agentTLSFiles, certPEM, keyPEM, caPEM []byte) []string {
	var out []string
	if !bytes.Equal(certPEM, f.certPEM) {
		out = append(out, f.certFile)
	}
	if !bytes.Equal(keyPEM, f.keyPEM) {
		out = append(out, f.keyFile)
	}
	if !bytes.Equal(caPEM, f.caPEM) {
		out = append(out, f.caFile)
	}
	return out
}

// serverTLS is the agent's TLS configuration: its certificate and the
// client CA from files (agentTLSFiles), and a client certificate verified when
// one is given. The kubelet's readiness probe gives none; authorize
// requires one on every other path.
func (f *agentTLSFiles) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool, err := f.current(time.Now())
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   tls.VerifyClientCertIfGiven,
				ClientCAs:    pool,
			}, nil
		},
	}
}

// authorize says whether a request over the connection cs may command the
// agent: 0 when it may, else the HTTP status and why. It must come over
// TLS with a client certificate verified against the client CA (401
// otherwise) whose common name is AgentClientName and whose extended key
// usage allows a client (403 otherwise).
func authorize(cs *tls.ConnectionState) (int, string) {
	if cs == nil {
		return http.StatusUnauthorized, "the agent takes commands over TLS only"
	}
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return http.StatusUnauthorized, "a client certificate signed by the Database's agent CA is required"
	}
	leaf := cs.VerifiedChains[0][0]
	if leaf.Subject.CommonName != instance.AgentClientName {
		return http.StatusForbidden, fmt.Sprintf("the client certificate's common name is %q: only %q may command the agent", leaf.Subject.CommonName, instance.AgentClientName)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return http.StatusForbidden, "the client certificate's extended key usage does not include client authentication"
	}
	return 0, ""
}

// errNoTLSFiles is Run's error for a Config without its TLS files.
var errNoTLSFiles = errors.New("the agent's TLS certificate, key and client CA files are not configured: the agent serves HTTPS only")
