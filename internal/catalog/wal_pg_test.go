package catalog

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dbkeeper/dbkeeper/internal/test/pgtest"
)

// pgBin is where the PostgreSQL 15 server the agent's tests run is
// installed (make host-packages).
const pgBin = "/usr/lib/postgresql/15/bin"

// TestPostgresReadsSizesAsParsePostgresSize asks a real PostgreSQL server
// (postgres -C, which reads the setting as the server does at start and
// prints it in megabytes) how it reads max_slot_wal_keep_size values:
// every value admission accepts (ParsePostgresSize reads it, and it is
// not negative), the server reads as the same size, and every value the
// server refuses, admission refuses too; otherwise admission would accept
// a value the pods crash on.
func TestPostgresReadsSizesAsParsePostgresSize(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PostgreSQL: not in -short")
	}
	if _, err := os.Stat(filepath.Join(pgBin, "postgres")); err != nil {
		t.Skipf("PostgreSQL 15 is not installed (%s is missing): run `make host-packages`", pgBin)
	}
	// Not t.TempDir(): its parent is the test user's alone.
	dir, err := os.MkdirTemp("", "dbkeeper-walkeep-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// PostgreSQL refuses to run as root: run it as the postgres user then.
	cred := pgtest.ServerCredential(t, dir)
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(pgBin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	data := filepath.Join(dir, "pgdata")
	if out, err := run("initdb", "-D", data, "-A", "trust", "-U", "postgres"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	values := []string{
		"256MB", "256", "0", "-1", "-2", "1500kB", "1536kB", "512kB", "0.5", "0.5GB", "1.5GB", " 2 GB ", "1048576B", "1TB",
		DefaultWALKeep(resource.MustParse("1Gi")), DefaultWALKeep(resource.MustParse("10Gi")), DefaultWALKeep(resource.MustParse("64Ti")),
		"2gb", "1Gi", "2 G", "lots", "", "0x10", "010", "1e3", "3000000000", "2147483647", "2147483648",
	}
	for _, v := range values {
		ours, ourErr := ParsePostgresSize(v, WALKeepUnit)
		if ourErr == nil && ours < 0 {
			ourErr = errors.New("negative: refused by admission")
		}
		out, err := run("postgres", "-D", data, "-C", "max_slot_wal_keep_size", "-c", "max_slot_wal_keep_size="+v)
		var exit *exec.ExitError
		switch {
		case err != nil && !errors.As(err, &exit):
			t.Fatalf("postgres -C: %v", err)
		case err != nil && ourErr == nil:
			t.Errorf("%q: PostgreSQL refuses it (%s), admission accepts %d bytes", v, out, ours)
		case err != nil:
			t.Logf("%q: refused by both", v)
		case ourErr != nil:
			t.Logf("%q: PostgreSQL reads %sMB, dbkeeper refuses it: %v", v, out, ourErr)
		case out != strconv.FormatInt(ours/WALKeepUnit, 10):
			t.Errorf("%q: PostgreSQL reads %sMB, admission %d bytes", v, out, ours)
		}
	}
}
