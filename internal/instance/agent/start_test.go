package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
)

// TestStartCountsOnlyServersThatCannotStart: a server that exits with
// status 0 while it starts was told to stop (fenced while it started, its
// pod stopping) and is not counted towards the crash loop that ends the
// agent; one that exits with a failure is, and the agent gives up after
// maxFailedStarts of them. The first kind once crashed the agent (a nil
// exit error in StartError.Error), seen on the real node mid-switchover.
func TestStartCountsOnlyServersThatCannotStart(t *testing.T) {
	for _, tc := range []struct {
		name, exit string
		fatal      bool
	}{
		{"exit status 0", "exit 0", false},
		{"exit status 3", "exit 3", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pgdata := t.TempDir()
			if err := os.WriteFile(filepath.Join(pgdata, "PG_VERSION"), []byte("17\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			a := New(Config{Config: postgres.Config{
				Entrypoint: []string{"/bin/sh", "-c", tc.exit, "entrypoint"},
				PGData:     pgdata, SocketDir: t.TempDir(), Port: 5432, User: "postgres",
			}, StateFile: filepath.Join(t.TempDir(), "state.json")})
			for range maxFailedStarts + 1 {
				if err := a.start(t.Context(), modePrimary, "", ""); err == nil {
					t.Fatal("start succeeded with a server that exits")
				}
			}
			if got := a.fatal != nil; got != tc.fatal {
				t.Errorf("after %d starts the agent gives up: %v, want %v (failed starts counted: %d)", maxFailedStarts+1, got, tc.fatal, a.failedStarts)
			}
			if a.lastErr == "" {
				t.Error("the failed start is not recorded in the Status")
			}
		})
	}
}
