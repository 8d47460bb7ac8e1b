package sidecar_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/archiver/sidecar"
	"github.com/dbkeeper/dbkeeper/internal/test/objectstore"
)

// TestServerSideEncryptionReachesTheStore archives a WAL file as the
// sidecar does (its Server, running barman-cloud on this host) into
// versitygw through a Recorder that sees every request: with
// spec.backup.encryption each upload carries S3's
// x-amz-server-side-encryption header with that value, without it none
// does, and the file is in the store either way. A KMS key, which the
// barman-cloud 3.4 of the backup image cannot pass on, makes the sidecar
// refuse to start, saying what to change.
func TestServerSideEncryptionReachesTheStore(t *testing.T) {
	e := newStoreEnv(t)
	pemCA, err := os.ReadFile(e.caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemCA)
	rec, err := objectstore.NewRecorder("https://"+e.storeAt, roots,
		filepath.Join(e.base, "pki", "store.crt"), filepath.Join(e.base, "pki", "store.key"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)

	pgdata := filepath.Join(e.base, "pgdata")
	e.mkdir(filepath.Join(pgdata, "pg_wal"), filepath.Join(e.base, "home"))
	segment := make([]byte, 1<<20)
	_, _ = rand.Read(segment)

	for i, tc := range []struct {
		name       string
		encryption string
	}{
		{"without encryption: the bucket's default", ""},
		{"AES256 (SSE-S3)", sidecar.EncryptionAES256},
		{"aws:kms with the AWS managed key (SSE-KMS)", sidecar.EncryptionKMS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wal := filepath.Join("pg_wal", "00000001000000000000000"+string(rune('1'+i)))
			if err := os.WriteFile(filepath.Join(pgdata, wal), segment, 0o600); err != nil {
				t.Fatal(err)
			}
			st := sidecar.Store{Destination: "s3://" + bucket + "/dbkeeper", ServerName: "orders", EndpointURL: rec.URL,
				Compression: archiver.CompressionGzip, Encryption: tc.encryption}
			srv := &sidecar.Server{Store: st, PGData: pgdata, Env: e.barmanEnv()}
			if err := srv.CheckTools(context.Background()); err != nil {
				t.Fatal(err)
			}
			before := len(rec.Requests())
			w := httptest.NewRecorder()
			srv.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, archiver.PathArchive, strings.NewReader(`{"path": "`+wal+`"}`)))
			if w.Code != http.StatusNoContent {
				t.Fatalf("archive: %d %s", w.Code, w.Body)
			}
			uploads := 0
			for _, r := range rec.Requests()[before:] {
				upload := r.Method == http.MethodPut || r.Method == http.MethodPost && strings.Contains(r.Path, "uploads")
				if !upload {
					continue
				}
				uploads++
				if got := r.Header.Get("X-Amz-Server-Side-Encryption"); got != tc.encryption {
					t.Errorf("%s %s: x-amz-server-side-encryption %q, want %q", r.Method, r.Path, got, tc.encryption)
				}
				if !strings.Contains(r.Header.Get("Authorization"), "x-amz-server-side-encryption") && tc.encryption != "" {
					t.Errorf("%s %s: the header is not among the signed ones: %s", r.Method, r.Path, r.Header.Get("Authorization"))
				}
			}
			if uploads == 0 {
				t.Fatalf("no upload among the requests the store received: %+v", rec.Requests()[before:])
			}
			if got := e.archivedWALs(st); !strings.Contains(strings.Join(got, " "), filepath.Base(wal)) {
				t.Errorf("%s is not in the store: %v", filepath.Base(wal), got)
			}
		})
	}

	t.Run("a KMS key the sidecar's barman-cloud cannot pass on: the sidecar refuses to start", func(t *testing.T) {
		help, _ := exec.Command(archiver.CommandWALArchive, "--help").Output()
		if bytes.Contains(help, []byte(sidecar.OptionSSEKMSKeyID)) {
			t.Skipf("this host's barman-cloud has %s: the image's 3.4 does not", sidecar.OptionSSEKMSKeyID)
		}
		st := sidecar.Store{Destination: "s3://" + bucket + "/dbkeeper", ServerName: "orders", EndpointURL: rec.URL,
			Encryption: sidecar.EncryptionKMS, KMSKeyID: "alias/dbkeeper"}
		srv := &sidecar.Server{Store: st, PGData: pgdata, Env: e.barmanEnv()}
		err := srv.Serve(context.Background(), filepath.Join(e.base, "archiver.sock"))
		if err == nil || !strings.Contains(err.Error(), "spec.backup.kmsKeyID needs barman-cloud 3.5 or newer") || !strings.Contains(err.Error(), "--backup-image") {
			t.Errorf("Serve = %v, want it to refuse, naming barman-cloud 3.5 and --backup-image", err)
		}
	})
}
