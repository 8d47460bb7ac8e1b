package postgres

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// tlsPollInterval is how often the agent compares the mounted TLS files
// with its copy. The kubelet updates a Secret volume on its own schedule
// (its sync period, about a minute by default), so a renewal reaches the
// server within that plus tlsPollInterval.
const tlsPollInterval = 5 * time.Second

// tlsState is the agent's copy of the TLS files, which the server reads.
type tlsState struct {
	mu sync.Mutex
	// installed is the digest of the files copied last.
	installed [sha256.Size]byte
	// reloadDue is true when the files changed while the server ran and
	// it has not reloaded them yet.
	reloadDue bool
	// lastErr is the last error reported, to report each once.
	lastErr string
	// plainUpstream is the Spec's UpstreamPlaintext for the action under
	// way; runPlain is what the running standby was started with.
	plainUpstream, runPlain bool
}

// tlsFiles are the contents of a TLS directory.
type tlsFiles struct {
	ca, cert, key []byte
}

// readTLSFiles reads dir's ca.crt, tls.crt and tls.key and checks that the
// key is the certificate's: while the kubelet swaps a Secret's files, or
// when a Secret was written in two steps, they may not match yet.
func readTLSFiles(dir string) (tlsFiles, error) {
	var f tlsFiles
	var err error
	for _, r := range []struct {
		name string
		dst  *[]byte
	}{{TLSFileCA, &f.ca}, {TLSFileCert, &f.cert}, {TLSFileKey, &f.key}} {
		if *r.dst, err = os.ReadFile(filepath.Join(dir, r.name)); err != nil {
			return tlsFiles{}, err
		}
	}
	if _, err := tls.X509KeyPair(f.cert, f.key); err != nil {
		return tlsFiles{}, fmt.Errorf("%s and %s in %s do not make a key pair: %w", TLSFileCert, TLSFileKey, dir, err)
	}
	if _, err := pki.Pool(f.ca); err != nil {
		return tlsFiles{}, fmt.Errorf("%s in %s: %w", TLSFileCA, dir, err)
	}
	return f, nil
}

func (f tlsFiles) digest() [sha256.Size]byte {
	h := sha256.New()
	for _, b := range [][]byte{f.ca, f.cert, f.key} {
		_, _ = fmt.Fprintf(h, "%d:", len(b))
		_, _ = h.Write(b)
	}
	var d [sha256.Size]byte
	copy(d[:], h.Sum(nil))
	return d
}

// describe names the certificate for the log: its serial number, names
// and expiry, never key material.
func (f tlsFiles) describe() string {
	cert, err := pki.ParseCertificate(f.cert)
	if err != nil {
		return "a certificate that does not parse"
	}
	return fmt.Sprintf("serial %x for %d names, valid until %s", cert.SerialNumber, len(cert.DNSNames), cert.NotAfter.UTC().Format(time.RFC3339))
}

// privateTLSDir is the directory of the agent's copy of the TLS files, in
// the socket directory (an emptyDir in the pod): mode 0700, the key 0600,
// as PostgreSQL requires of a key file its user owns. The mounted files
// are readable by the pod's group, which PostgreSQL refuses.
func (s *Server) privateTLSDir() string { return filepath.Join(s.cfg.SocketDir, "tls") }

// tlsFlags are the server's TLS settings: on, with the agent's copy of the
// files. Empty without EnvTLSDir.
func (s *Server) tlsFlags() []string {
	if s.cfg.TLSDir == "" {
		return nil
	}
	dir := s.privateTLSDir()
	return []string{
		"-c", "ssl=on",
		"-c", "ssl_cert_file=" + filepath.Join(dir, TLSFileCert),
		"-c", "ssl_key_file=" + filepath.Join(dir, TLSFileKey),
		"-c", "ssl_ca_file=" + filepath.Join(dir, TLSFileCA),
	}
}

// tlsConninfo are the connection settings to an upstream: TLS, verifying
// that its certificate, signed by the Database's CA, names the host;
// none when the pod has no certificate, and sslmode=disable when the Spec
// says the upstream runs without TLS (Spec.UpstreamPlaintext).
func (s *Server) tlsConninfo(quote func(string) string) string {
	if s.cfg.TLSDir == "" {
		return ""
	}
	s.tls.mu.Lock()
	plain := s.tls.plainUpstream
	s.tls.mu.Unlock()
	if plain {
		return "sslmode=disable"
	}
	return "sslmode=verify-full sslrootcert=" + quote(filepath.Join(s.cfg.TLSDir, TLSFileCA))
}

// installTLS copies the mounted TLS files into privateTLSDir when they
// differ from the copy, each file replaced atomically. It reports whether
// it copied, and what.
func (s *Server) installTLS() (changed bool, what string, err error) {
	if s.cfg.TLSDir == "" {
		return false, "", nil
	}
	s.tls.mu.Lock()
	defer s.tls.mu.Unlock()
	f, err := readTLSFiles(s.cfg.TLSDir)
	if err != nil {
		return false, "", err
	}
	dir := s.privateTLSDir()
	if f.digest() == s.tls.installed {
		if _, err := os.Stat(filepath.Join(dir, TLSFileKey)); err == nil {
			return false, "", nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return false, "", err
	}
	for _, w := range []struct {
		name string
		data []byte
	}{{TLSFileCA, f.ca}, {TLSFileCert, f.cert}, {TLSFileKey, f.key}} {
		if err := WriteFileAtomic(filepath.Join(dir, w.name), w.data, 0o600); err != nil {
			return false, "", fmt.Errorf("copying %s: %w", w.name, err)
		}
	}
	s.tls.installed = f.digest()
	return true, f.describe(), nil
}

// WriteFileAtomic writes data to path through a temporary file renamed
// over it, so that a reader sees the old file or the new one.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WatchTLS polls the mounted TLS files every tlsPollInterval; when they
// changed (a renewal, a certificate issued again) it copies them and
// reloads the running server, which then presents the new certificate to
// new connections without a restart.
func (s *Server) WatchTLS(ctx context.Context) {
	t := time.NewTicker(tlsPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.PollTLS(ctx)
	}
}

// PollTLS is one round of tlsLoop.
func (s *Server) PollTLS(ctx context.Context) {
	changed, what, err := s.installTLS()
	s.tls.mu.Lock()
	report := err != nil && err.Error() != s.tls.lastErr
	s.tls.lastErr = ""
	if err != nil {
		s.tls.lastErr = err.Error()
	}
	if changed {
		s.tls.reloadDue = true
	}
	due := s.tls.reloadDue
	s.tls.mu.Unlock()
	if report {
		s.logf("the TLS files in %s are not usable yet, the server keeps its certificate: %v", s.cfg.TLSDir, err)
	}
	if changed {
		s.logf("the TLS files in %s changed: copied the new certificate (%s)", s.cfg.TLSDir, what)
	}
	if !due || !s.running() {
		return
	}
	if err := s.db.ReloadConf(ctx); err != nil {
		s.logf("reloading the server for its new TLS certificate: %v; trying again", err)
		return
	}
	s.tls.mu.Lock()
	s.tls.reloadDue = false
	s.tls.mu.Unlock()
	s.logf("reloaded the server: new connections get the new TLS certificate")
}

// prepareTLS readies a server start: the agent's copy of the TLS files.
func (s *Server) prepareTLS() error {
	if changed, what, err := s.installTLS(); err != nil {
		return fmt.Errorf("installing the server's TLS certificate: %w", err)
	} else if changed {
		s.logf("copied the TLS certificate from %s (%s)", s.cfg.TLSDir, what)
		s.tls.mu.Lock()
		s.tls.reloadDue = false // the server starts with it
		s.tls.mu.Unlock()
	}
	return nil
}

// SetPlainUpstream records the Spec's UpstreamPlaintext for the
// connections to its upstream that the next action makes.
func (s *Server) SetPlainUpstream(plain bool) {
	s.tls.mu.Lock()
	s.tls.plainUpstream = plain
	s.tls.mu.Unlock()
}

// startedStandby records how the standby just started connects to its
// upstream; runningPlain reports it.
func (s *Server) startedStandby() {
	s.tls.mu.Lock()
	s.tls.runPlain = s.tls.plainUpstream
	s.tls.mu.Unlock()
}

// RunningPlain reports whether the running standby connects to its upstream without TLS.
func (s *Server) RunningPlain() bool {
	s.tls.mu.Lock()
	defer s.tls.mu.Unlock()
	return s.tls.runPlain
}
