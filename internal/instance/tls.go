package instance

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

// The server's TLS, for clients and replication (docs/replication.md §22).
const (
	// EnvTLSDir is the directory where the pod mounts the Secret
	// <name>-tls: ca.crt, tls.crt and tls.key. Unset, the server runs
	// without TLS (tests of the agent alone).
	EnvTLSDir = "DBKEEPER_TLS_DIR"
	// EnvTLSRequired, "true", makes pg_hba.conf's lines for clients and
	// replication hostssl: connections without TLS are refused.
	EnvTLSRequired = "DBKEEPER_TLS_REQUIRED"
	// TLSDir is where the StatefulSet mounts the TLS Secret.
	TLSDir = "/etc/dbkeeper/tls"
)

// The files of the TLS directory, the keys of the TLS Secret.
const (
	TLSFileCA   = "ca.crt"
	TLSFileCert = "tls.crt"
	TLSFileKey  = "tls.key"
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
func (a *Agent) privateTLSDir() string { return filepath.Join(a.cfg.SocketDir, "tls") }

// tlsFlags are the server's TLS settings: on, with the agent's copy of the
// files. Empty without EnvTLSDir.
func (a *Agent) tlsFlags() []string {
	if a.cfg.TLSDir == "" {
		return nil
	}
	dir := a.privateTLSDir()
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
func (a *Agent) tlsConninfo(quote func(string) string) string {
	if a.cfg.TLSDir == "" {
		return ""
	}
	a.tls.mu.Lock()
	plain := a.tls.plainUpstream
	a.tls.mu.Unlock()
	if plain {
		return "sslmode=disable"
	}
	return "sslmode=verify-full sslrootcert=" + quote(filepath.Join(a.cfg.TLSDir, TLSFileCA))
}

// installTLS copies the mounted TLS files into privateTLSDir when they
// differ from the copy, each file replaced atomically. It reports whether
// it copied, and what.
func (a *Agent) installTLS() (changed bool, what string, err error) {
	if a.cfg.TLSDir == "" {
		return false, "", nil
	}
	a.tls.mu.Lock()
	defer a.tls.mu.Unlock()
	f, err := readTLSFiles(a.cfg.TLSDir)
	if err != nil {
		return false, "", err
	}
	dir := a.privateTLSDir()
	if f.digest() == a.tls.installed {
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
		if err := writeFileAtomic(filepath.Join(dir, w.name), w.data, 0o600); err != nil {
			return false, "", fmt.Errorf("copying %s: %w", w.name, err)
		}
	}
	a.tls.installed = f.digest()
	return true, f.describe(), nil
}

// writeFileAtomic writes data to path through a temporary file renamed
// over it, so that a reader sees the old file or the new one.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// tlsLoop polls the mounted TLS files every tlsPollInterval; when they
// changed (a renewal, a certificate issued again) it copies them and
// reloads the running server, which then presents the new certificate to
// new connections without a restart.
func (a *Agent) tlsLoop(ctx context.Context) {
	t := time.NewTicker(tlsPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.pollTLS(ctx)
	}
}

// pollTLS is one round of tlsLoop.
func (a *Agent) pollTLS(ctx context.Context) {
	changed, what, err := a.installTLS()
	a.tls.mu.Lock()
	report := err != nil && err.Error() != a.tls.lastErr
	a.tls.lastErr = ""
	if err != nil {
		a.tls.lastErr = err.Error()
	}
	if changed {
		a.tls.reloadDue = true
	}
	due := a.tls.reloadDue
	a.tls.mu.Unlock()
	if report {
		a.logf("the TLS files in %s are not usable yet, the server keeps its certificate: %v", a.cfg.TLSDir, err)
	}
	if changed {
		a.logf("the TLS files in %s changed: copied the new certificate (%s)", a.cfg.TLSDir, what)
	}
	if !due || !a.running() {
		return
	}
	if err := a.db.reloadConf(ctx); err != nil {
		a.logf("reloading the server for its new TLS certificate: %v; trying again", err)
		return
	}
	a.tls.mu.Lock()
	a.tls.reloadDue = false
	a.tls.mu.Unlock()
	a.logf("reloaded the server: new connections get the new TLS certificate")
}

// prepareTLS readies a server start: the agent's copy of the TLS files,
// and, on an existing data directory, pg_hba.conf's lines for
// EnvTLSRequired (hbaConf). The entrypoint writes pg_hba.conf of a data
// directory it initializes; the primary's setup brings it in line then.
func (a *Agent) prepareTLS(initializing bool) error {
	if changed, what, err := a.installTLS(); err != nil {
		return fmt.Errorf("installing the server's TLS certificate: %w", err)
	} else if changed {
		a.logf("copied the TLS certificate from %s (%s)", a.cfg.TLSDir, what)
		a.tls.mu.Lock()
		a.tls.reloadDue = false // the server starts with it
		a.tls.mu.Unlock()
	}
	if initializing {
		return nil
	}
	changed, err := a.rewriteHBA(filepath.Join(a.cfg.PGData, "pg_hba.conf"))
	if err != nil {
		return fmt.Errorf("pg_hba.conf: %w", err)
	}
	if changed {
		a.logf("rewrote pg_hba.conf: TLS required %v", a.cfg.TLSRequired)
	}
	return nil
}

// setPlainUpstream records the Spec's UpstreamPlaintext for the
// connections to its upstream that the next action makes.
func (a *Agent) setPlainUpstream(plain bool) {
	a.tls.mu.Lock()
	a.tls.plainUpstream = plain
	a.tls.mu.Unlock()
}

// startedStandby records how the standby just started connects to its
// upstream; runningPlain reports it.
func (a *Agent) startedStandby() {
	a.tls.mu.Lock()
	a.tls.runPlain = a.tls.plainUpstream
	a.tls.mu.Unlock()
}

func (a *Agent) runningPlain() bool {
	a.tls.mu.Lock()
	defer a.tls.mu.Unlock()
	return a.tls.runPlain
}
