package objectstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// Binary is versitygw's file name in BinDir.
const Binary = "versitygw"

// BinDir returns where make backup-tools puts versitygw:
// $DBKEEPER_BACKUP_TOOLS, else <user cache>/dbkeeper/backup.
func BinDir() string {
	if d := os.Getenv("DBKEEPER_BACKUP_TOOLS"); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "dbkeeper", "backup")
}

// CheckBinary returns an error naming make backup-tools when path is not an
// executable file.
func CheckBinary(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("versitygw, the object store, is not built (%s is missing): run `make backup-tools`", path)
	}
	return nil
}

// Config is one object store.
type Config struct {
	// Binary is versitygw; default BinDir()/versitygw.
	Binary string
	// Addr is host:port to listen on.
	Addr string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// CertFile and KeyFile are the PEM serving certificate and its key.
	CertFile, KeyFile string
	// DataDir holds the buckets as top-level directories.
	DataDir string
	// Buckets are created (as directories) before the store starts.
	Buckets []string
	// LogPath receives versitygw's output.
	LogPath string
}

// Args returns versitygw's arguments for cfg, or an error naming the first
// missing field.
func Args(cfg Config) ([]string, error) {
	for _, f := range []struct{ name, v string }{
		{"Addr", cfg.Addr}, {"AccessKey", cfg.AccessKey}, {"SecretKey", cfg.SecretKey},
		{"CertFile", cfg.CertFile}, {"KeyFile", cfg.KeyFile}, {"DataDir", cfg.DataDir},
	} {
		if f.v == "" {
			return nil, fmt.Errorf("objectstore: Config.%s is empty", f.name)
		}
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("objectstore: Config.Addr %q is not host:port: %w", cfg.Addr, err)
	}
	for _, b := range cfg.Buckets {
		if err := CheckBucketName(b); err != nil {
			return nil, err
		}
	}
	return []string{"--port", cfg.Addr, "--access", cfg.AccessKey, "--secret", cfg.SecretKey,
		"--cert", cfg.CertFile, "--key", cfg.KeyFile, "--quiet", "posix", cfg.DataDir}, nil
}

// CheckBucketName accepts S3 bucket names as the posix backend stores them:
// 3 to 63 lower-case letters, digits, '-' and '.', starting and ending with a
// letter or digit.
func CheckBucketName(name string) error {
	ok := len(name) >= 3 && len(name) <= 63
	for i, r := range name {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '-' && r != '.' || i == 0 || i == len(name)-1) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("objectstore: bucket name %q: want 3-63 of a-z, 0-9, '-' and '.', starting and ending with a letter or digit", name)
	}
	return nil
}

// Store is a running object store.
type Store struct {
	*process.Process
	Config Config
}

// New returns the store's process, not started.
func New(cfg Config) (*Store, error) {
	if cfg.Binary == "" {
		cfg.Binary = filepath.Join(BinDir(), Binary)
	}
	if err := CheckBinary(cfg.Binary); err != nil {
		return nil, err
	}
	args, err := Args(cfg)
	if err != nil {
		return nil, err
	}
	return &Store{Config: cfg, Process: &process.Process{
		Name: "versitygw", Path: cfg.Binary, Args: args,
		Env: []string{"PATH=/usr/bin:/bin"}, LogPath: cfg.LogPath,
	}}, nil
}

// Start creates the buckets and starts versitygw, then waits until it
// completes a TLS handshake as serverName with a certificate roots verify
// (serverName "" checks the address's host).
func (s *Store) Start(ctx context.Context, roots *x509.CertPool, serverName string) error {
	for _, b := range s.Config.Buckets {
		if err := os.MkdirAll(filepath.Join(s.Config.DataDir, b), 0o755); err != nil {
			return fmt.Errorf("objectstore: bucket %s: %w", b, err)
		}
	}
	if err := s.Process.Start(); err != nil {
		return err
	}
	if err := WaitTLS(ctx, s.Config.Addr, serverName, roots); err != nil {
		return errors.Join(err, s.Stop(10*time.Second))
	}
	return nil
}

// WaitTLS dials addr until a TLS handshake verifies as serverName against
// roots, or ctx ends (at most 20s), returning the last error then.
func WaitTLS(ctx context.Context, addr, serverName string, roots *x509.CertPool) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if serverName == "" {
		serverName, _, _ = strings.Cut(addr, ":")
	}
	var last error
	for {
		d := tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("objectstore: versitygw at %s does not serve HTTPS verifying as %s: %w", addr, serverName, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
